"""Ray cluster settings without Ray running: the worker plan (how many, which resources, refused plans), the shared
``--ray`` flags, and the batch command's messages when Ray is missing or its flags are given without ``--ray``."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from tts_app.cli.args import CliParser, add_cluster_args, cluster_config_from
from tts_app.config import ClusterConfig, ModelConfig
from tts_app.errors import ClusterError, ConfigError, InputError
from tts_app.jobs.cluster import PoolPlan, plan_workers

CPU = ModelConfig("m", device="cpu")
AUTO = ModelConfig("m")


@pytest.mark.parametrize("config, model, cpus, gpus, expected", [
    (ClusterConfig(), AUTO, 2, 0, PoolPlan(1, 0.0, 1.0)),                       # no GPU: one CPU worker
    (ClusterConfig(), AUTO, 32, 4, PoolPlan(4, 1.0, 1.0)),                      # one worker per GPU
    (ClusterConfig(gpus_per_worker=0.5), AUTO, 32, 2, PoolPlan(4, 0.5, 1.0)),   # two workers share a GPU
    (ClusterConfig(num_workers=2), AUTO, 32, 4, PoolPlan(2, 1.0, 1.0)),
    (ClusterConfig(), CPU, 8, 4, PoolPlan(1, 0.0, 1.0)),                        # --device cpu leaves GPUs alone
    (ClusterConfig(num_workers=2, cpus_per_worker=0.5), CPU, 2, 0, PoolPlan(2, 0.0, 0.5)),
])
def test_plan_fits_the_cluster(config, model, cpus, gpus, expected):
    assert plan_workers(config, model, cpus, gpus) == expected


@pytest.mark.parametrize("config, model, cpus, gpus, needles", [
    (ClusterConfig(num_workers=3), AUTO, 32, 2, ["3 worker(s) x 1 GPU", "has 2", "--num-workers"]),
    (ClusterConfig(gpus_per_worker=1), AUTO, 32, 0, ["needs 1 GPU", "has 0", "--gpus-per-worker 0"]),
    (ClusterConfig(num_workers=4), CPU, 2, 0, ["4 CPUs", "has 2", "--cpus-per-worker"]),
    (ClusterConfig(), ModelConfig("m", device="cuda:1"), 8, 2, ["--device cuda:1", "--gpus-per-worker"]),
    (ClusterConfig(), ModelConfig("m", device="cuda"), 8, 0, ["--device cuda", "--gpus-per-worker"]),
    (ClusterConfig(gpus_per_worker=1), CPU, 8, 2, ["--device cpu", "idle"]),
])
def test_plans_the_cluster_cannot_run_are_refused_with_the_flag_to_change(config, model, cpus, gpus, needles):
    with pytest.raises(ClusterError) as info:
        plan_workers(config, model, cpus, gpus)
    for needle in needles:
        assert needle in str(info.value)


def parse(argv):
    parser = CliParser(prog="test")
    add_cluster_args(parser)
    return cluster_config_from(parser.parse_args(argv))


def test_ray_flags():
    assert parse([]) is None
    assert parse(["--ray"]) == ClusterConfig(address=None)  # $RAY_ADDRESS, else a local cluster
    assert parse(["--ray", "local", "--num-workers", "2", "--cpus-per-worker", "0.5"]) == \
        ClusterConfig(address="local", num_workers=2, cpus_per_worker=0.5)
    config = parse(["--ray", "10.0.0.1:6379", "--gpus-per-worker", "0.5", "--ray-references", "shared",
                    "--ray-object-store", "200MB"])
    assert (config.address, config.gpus_per_worker, config.reference_transport, config.object_store_memory_bytes) \
        == ("10.0.0.1:6379", 0.5, "shared", 200 * 1000**2)
    with pytest.raises(InputError, match="--num-workers, --gpus-per-worker only apply with --ray"):
        parse(["--num-workers", "2", "--gpus-per-worker", "1"])
    with pytest.raises(ConfigError, match="max_line_retries"):
        ClusterConfig(max_line_retries=-1)


@pytest.fixture()
def one_line_job(tmp_path, data_dir):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "anna.wav")
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"input_text": "Hello.", "prompt_audio": "anna.wav"}) + "\n", encoding="utf-8")
    return path


def test_batch_with_ray_flags_but_no_ray_flag_is_a_usage_error(one_line_job, tmp_path, capsys):
    from tts_app.jobs.cli import main

    assert main([str(one_line_job), "--out-dir", str(tmp_path / "out"), "--num-workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "--num-workers only apply with --ray" in err and "Traceback" not in err


def test_batch_with_ray_not_installed_says_how_to_install_it(one_line_job, tmp_path, capsys, monkeypatch):
    from tts_app.jobs.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the package
    assert main([str(one_line_job), "--out-dir", str(tmp_path / "out"), "--ray", "local"]) == 2
    err = capsys.readouterr().err
    assert "pip install -r requirements-ray.txt" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "results.jsonl").exists()  # nothing ran


def test_app_takes_the_batch_commands_ray_flags(capsys, monkeypatch):
    from tts_app.jobs.cli import build_parser as batch_parser
    from tts_app.ui.launch import build_parser as app_parser
    from tts_app.ui.launch import main

    def ray_flags(parser):
        group = next(g for g in parser._action_groups if (g.title or "").startswith("Ray cluster"))
        return {tuple(a.option_strings): (a.dest, a.default, a.type, a.choices) for a in group._group_actions}

    assert ray_flags(app_parser()) == ray_flags(batch_parser())
    assert main(["--num-workers", "2"]) == 2  # a usage error, before any model loads
    assert "--num-workers only apply with --ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["--ray", "local", "--model", "no/such-model"]) == 2
    err = capsys.readouterr().err
    assert "pip install -r requirements-ray.txt" in err and "Traceback" not in err


@pytest.mark.parametrize("config, model, cpus, gpus, needle", [
    (ClusterConfig(num_workers=3), AUTO, 32, 2, "3 个工作进程 x 1 个 GPU 共需 3 个 GPU，但集群只有 2 个"),
    (ClusterConfig(gpus_per_worker=1), AUTO, 32, 0, "每个工作进程需要 1 个 GPU，但集群只有 0 个"),
    (ClusterConfig(num_workers=4), CPU, 2, 0, "4 个工作进程 x 1 个 CPU 共需 4 个 CPU"),
    (ClusterConfig(), ModelConfig("m", device="cuda:1"), 8, 2, "--device cuda:1 不能与 --ray 同用"),
    (ClusterConfig(), ModelConfig("m", device="cuda"), 8, 0, "--device cuda 需要 --gpus-per-worker 大于 0"),
    (ClusterConfig(gpus_per_worker=1), CPU, 8, 2, "GPU 会闲置"),
])
def test_a_refused_plan_reads_in_chinese(config, model, cpus, gpus, needle):
    from tts_app.frontend.messages import localize

    with pytest.raises(ClusterError) as info:
        plan_workers(config, model, cpus, gpus)
    zh = localize(info.value, "zh")
    prose = re.sub(r"--[\w-]+|`[^`]*`", "", zh)  # flags and commands stay as typed
    assert needle in zh and not any(w in prose for w in ("worker", "need", "cluster", "idle", "cannot")), zh


def test_batch_says_ray_is_missing_in_chinese_with_lang_zh(one_line_job, tmp_path, capsys, monkeypatch):
    from tts_app.jobs.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    assert main([str(one_line_job), "--out-dir", str(tmp_path / "out"), "--ray", "local", "--lang", "zh"]) == 2
    err = capsys.readouterr().err
    assert "错误：--ray 需要 Ray，但它没有安装" in err and "requirements-ray.txt" in err and "install it" not in err


def test_a_line_left_without_a_ray_worker_fails_in_words_of_both_languages():
    """Every queued line fails at once when no worker is left: the record's message reads in zh too."""
    from types import SimpleNamespace

    from tts_app.frontend.messages import localize
    from tts_app.jobs.cluster import RayExecutor, _Attempt

    pool = SimpleNamespace(num_workers=2, any_alive=lambda: False)
    executor = RayExecutor(pool)
    executor._queue.append(_Attempt(SimpleNamespace(line_number=3, output_name="x", warnings=[]), None))
    (outcome,) = executor._no_worker_outcomes()
    assert outcome.status == "failed" and str(outcome.error).startswith("no Ray worker is left to run it (all 2")
    assert localize(outcome.error, "zh") == "没有剩下的 Ray 工作进程来运行它（2 个全部停止）；集群恢复后请用 --resume 重新运行"
