"""One set of model/engine flags for app.py, synth and batch; values checked by the config dataclasses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tts_app.cli.args import CliParser, EngineArgs, add_engine_args, engine_args_from, params_from_args
from tts_app.config import EngineConfig, ModelConfig, ReferenceConfig
from tts_app.errors import ConfigError, InputError
from tts_app.request import SynthesisParams

REPO = Path(__file__).resolve().parents[2]


def _parsers():
    from tts_app.cli.synth import build_parser as synth_parser
    from tts_app.cli.batch import build_parser as batch_parser
    from tts_app.server.main import build_parser as app_parser

    return {"app.py": app_parser(), "synth": synth_parser(), "batch": batch_parser()}


def _flags(parser, group_title_start: str) -> dict[str, tuple]:
    group = next(g for g in parser._action_groups if (g.title or "").startswith(group_title_start))
    return {tuple(a.option_strings): (a.dest, a.default, a.type, a.choices) for a in group._group_actions}


def test_every_command_takes_the_same_engine_flags():
    flags = {name: _flags(p, "model and engine") for name, p in _parsers().items()}
    assert flags["app.py"] == flags["synth"] == flags["batch"]
    assert ("--max-batch-size", "--batch-size") in flags["app.py"]  # both spellings, one flag
    assert all(default is None for _, default, _, _ in flags["app.py"].values())  # defaults live in the dataclasses


def test_flags_not_given_are_the_dataclass_defaults_and_given_ones_reach_the_configs():
    parser = CliParser(prog="t")
    add_engine_args(parser)
    assert engine_args_from(parser.parse_args([])) == EngineArgs(ModelConfig(), EngineConfig())
    args = parser.parse_args(["--model", "m", "--device", "cuda:1", "--dtype", "bfloat16", "--batch-size", "3",
                              "--memory-budget", "2GiB", "--simulate-oom-above-batch", "1"])
    got = engine_args_from(args, wait_window_ms=0.0)
    assert got.model == ModelConfig("m", "cuda:1", "bfloat16")
    assert got.engine == EngineConfig(max_batch_size=3, memory_budget_bytes=2 * 1024**3, simulate_oom_above_batch=1,
                                      wait_window_ms=0.0)


@pytest.mark.parametrize("make", [
    lambda: ModelConfig(device="gpu0"), lambda: ModelConfig(dtype="fp8"), lambda: ModelConfig(model_id=" "),
    lambda: EngineConfig(max_batch_size=0), lambda: EngineConfig(memory_budget_bytes=0),
    lambda: EngineConfig(memory_utilization=1.5), lambda: EngineConfig(simulate_oom_probability=2.0),
    lambda: ReferenceConfig(vad_threshold=1.5), lambda: ReferenceConfig(default_sampling_rate=100),
    lambda: SynthesisParams(top_p=0.0), lambda: SynthesisParams(max_segment_chars=7),
])
def test_config_dataclasses_refuse_bad_values_themselves(make):
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.field and info.value.field.split("_")[0] in str(info.value).replace(" ", "_")


def test_generation_flags_not_given_are_not_given():
    from tts_app.cli.synth import build_parser

    parse = lambda *f: build_parser().parse_args(["--text", "x", "--out", "o.wav", *f])  # noqa: E731
    assert params_from_args(parse()) == SynthesisParams()
    got = params_from_args(parse("--seed", "0", "--greedy", "--no-kv-cache", "--temperature", "0.7", "--top-k", "5",
                                 "--cfg-scale", "2", "--pause-ms", "0", "--max-segment-chars", "40"))
    assert got == SynthesisParams(seed=0, greedy=True, use_cache=False, temperature=0.7, top_k=5, cfg_scale=2.0,
                                  pause_between_segments_ms=0, max_segment_chars=40)
    with pytest.raises(InputError, match="--max-segment-chars"):
        params_from_args(parse("--max-segment-chars", "3"))
    assert params_from_args(parse("--segment-durations-s", "2.5, 1.8,3")).segment_durations_s == (2.5, 1.8, 3.0)
    with pytest.raises(InputError, match="--segment-durations-s"):
        params_from_args(parse("--segment-durations-s", "2,0"))
    with pytest.raises(SystemExit):
        parse("--segment-durations-s", "2,,3")


@pytest.mark.parametrize("command", [
    ["app.py", "--memory-budget", "lots"],
    ["app.py", "--device", "gpu0"],
    ["app.py", "--max-batch-size", "0"],
    ["-m", "tts_app", "batch", "tasks.jsonl", "--out-dir", "o", "--device", "gpu0"],
    ["-m", "tts_app", "batch", "tasks.jsonl", "--out-dir", "o", "--dtype", "fp8"],
    ["-m", "tts_app", "synth", "--text", "x", "--out", "o.wav", "--memory-budget", "lots"],
    ["-m", "tts_app", "synth", "--text", "x", "--out", "o.wav", "--top-p", "0"],
])
def test_bad_engine_values_are_one_line_usage_errors(command, tmp_path):
    proc = subprocess.run([sys.executable, *command], cwd=tmp_path if command[0] == "-m" else REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "error" in lines[0], proc.stderr
    flag = next(x for x in command if x.startswith("--") and x not in ("--text", "--out", "--out-dir"))
    assert flag in lines[0]
    assert not list(tmp_path.iterdir())  # nothing written
