"""Smoke test of the performance harness: ``bench/run.py --tiny --json`` runs end to end and every table holds finite
numbers; ``bench/gpu_check.py`` says clearly that it needs CUDA (and its CPU mode runs). No timing thresholds.

The scripts run in processes forked from the tests' forkserver (``tests.ui_app.run_python_forked``: torch and
transformers already imported), not fresh interpreters: what is under test is their run and report."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.ui_app import run_python_forked

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLES = ("throughput", "padding", "kv_cache", "memory", "oom", "frontend", "jsonl", "continuous", "ttfa", "prefix")


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "report.json"
    proc = run_python_forked(str(REPO_ROOT / "bench" / "run.py"), "--tiny", "--json", str(out), env=_env(),
                             timeout_s=600)  # ~2 min alone
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    report["stdout"] = proc.stdout
    return report


def test_every_table_has_finite_numbers(tiny_report):
    tables = tiny_report["tables"]
    assert set(TABLES) <= set(tables)
    for name in TABLES:
        table = tables[name]
        measured = [row for row in table["rows"] if row.get("status") != "n/a"]
        assert measured, f"table {name} has no measured row"
        for row in measured:
            for column in table["numeric"]:
                assert _finite(row.get(column)), f"{name}: {column}={row.get(column)!r} in {row}"


def test_tables_and_summary_are_printed(tiny_report):
    stdout = tiny_report["stdout"]
    for name in TABLES:
        assert f"== {tiny_report['tables'][name]['title']}" in stdout
    summary = [line for line in stdout.splitlines() if line.startswith("summary: ")]
    assert summary == [tiny_report["summary"]]


def test_report_covers_what_the_measures_promise(tiny_report):
    tables = tiny_report["tables"]
    modes = {(r["mode"], r["max_batch"]) for r in tables["throughput"]["rows"]}
    assert ("one-by-one loop", 1) in modes and ("engine", 1) in modes and ("engine", 4) in modes
    assert any(r["mode"] == "raw generate" for r in tables["throughput"]["rows"])
    # greedy decoding: the engine's batches give the same audio as the one-by-one loop
    audio = {(r["mode"], r["max_batch"]): r["audio_s"] for r in tables["throughput"]["rows"] if "audio_s" in r}
    assert audio[("engine", 4)] == pytest.approx(audio[("one-by-one loop", 1)])
    assert {r["policy"] for r in tables["padding"]["rows"]} == {"fifo", "bucketing"}
    kv = tables["kv_cache"]["rows"]
    assert {r["use_cache"] for r in kv} == {True, False}
    assert all(r["kv_peak_bytes"] > 0 for r in kv if r["use_cache"])
    assert all(r["kv_peak_bytes"] == 0 for r in kv if not r["use_cache"])  # nothing cached with the cache off
    for row in tables["oom"]["rows"]:
        assert row["completed"] == row["submitted"] and row["num_oom"] >= 1
    assert tables["jsonl"]["rows"][0]["num_lines"] == 1000
    # continuous batching (VibeVoice): no padded row-steps, the one-by-one audio, a time-to-first-audio ratio, and
    # the one-voice job reusing its prefix
    continuous = {r["mode"]: r for r in tables["continuous"]["rows"] if r["family"] == "vibevoice"}
    assert continuous["continuous"]["padded_share"] == 0.0 < continuous["request-level"]["padded_share"]
    assert all(r["same_length"] and r["max_abs_diff"] < 1e-3 for r in continuous.values())
    assert continuous["continuous"]["audio_s"] == pytest.approx(continuous["one by one"]["audio_s"])
    assert {r["mode"] for r in tables["ttfa"]["rows"]} == {"request-level", "continuous, no preemption",
                                                          "continuous"}
    prefix = {r["mode"]: r for r in tables["prefix"]["rows"]}
    assert prefix["prefix cache on"]["hits"] >= 1 and prefix["prefix cache off"]["hits"] == 0
    assert prefix["prefix cache on"]["same_length"]
    assert "continuous x" in tiny_report["summary"] and "padded row-steps" in tiny_report["summary"]


def test_gpu_check_without_cuda_exits_with_a_clear_message():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is present; the no-CUDA path cannot be shown here")
    proc = run_python_forked(str(REPO_ROOT / "bench" / "gpu_check.py"), env=_env(), timeout_s=300)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "--device cpu --tiny" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_check_cpu_tiny_mode_runs_every_code_path(tmp_path):
    out = tmp_path / "gpu.json"
    proc = run_python_forked(str(REPO_ROOT / "bench" / "gpu_check.py"), "--device", "cpu", "--tiny", "--json",
                             str(out), env=_env(), timeout_s=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    decode = report["decode"]
    assert {(r["batch_size"], r["use_cache"]) for r in decode} >= {(1, True), (1, False), (2, True)}
    assert all(_finite(r["tokens_per_s"]) and r["tokens_per_s"] > 0 for r in decode)
    assert _finite(report["bandwidth_bound"]["bound_tokens_per_s"])
    oom = report["oom_backoff"]
    assert oom["completed"] == oom["submitted"] and oom["num_oom"] >= 1
    runs = {(r["cap"], r["mode"]): r for r in report["continuous"]["runs"]}
    assert set(runs) == {(c, m) for c in (2, 4) for m in ("request-level", "continuous")}
    assert all(r["completed"] == 8 and r["same_length_as_first"] for r in runs.values())
    assert runs[(4, "continuous")]["padded_share"] == 0.0 and _finite(runs[(4, "continuous")]["vs_request_level"])
    assert {r["mode"] for r in report["continuous"]["time_to_first_audio"]} == {"request-level", "continuous",
                                                                                "continuous, no preemption"}
    paths = {(r["path"], r["batch_size"]): r for r in report["decode_paths"]}
    assert set(paths) == {(p, b) for p in ("eager", "pooled") for b in (1, 2)}  # compiled: CUDA only
    assert all(_finite(r["frames_per_s"]) and 0 < r["share_of_bound"] for r in paths.values())


def test_gpu_check_indextts2_cpu_tiny_mode_runs_every_code_path(tmp_path, tiny_checkpoint):
    from tests.adapter_helpers import skip_without

    skip_without("indextts")
    out = tmp_path / "gpu-indextts2.json"
    proc = run_python_forked(str(REPO_ROOT / "bench" / "gpu_check.py"), "--family", "indextts2", "--device", "cpu",
                             "--tiny", "--checkpoint", str(tiny_checkpoint("indextts2")), "--batch-sizes", "1,2",
                             "--new-tokens", "4", "--json", str(out), env=_env(), timeout_s=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert {(r["batch_size"], r["use_cache"]) for r in report["decode"]} == {(1, True), (1, False), (2, True),
                                                                           (2, False)}
    assert all(_finite(r["tokens_per_s"]) and r["tokens_per_s"] > 0 for r in report["decode"])
    assert _finite(report["bandwidth_bound"]["bound_tokens_per_s"])
    assert [s["batch"] for s in report["stages"]] == [1, 2]
    assert all(0 < s["s2mel_vocoder_share"] < 1 and s["codes"] == 2 * 4 for s in report["stages"])
    oom = report["oom_backoff"]
    assert oom["completed"] == oom["submitted"] == 2 and oom["num_oom"] >= 1
    assert {(r["path"], r["batch_size"]) for r in report["decode_paths"]} == {(p, b) for p in ("eager", "pooled")
                                                                               for b in (1, 2)}
