"""``python -m tts_app batch`` flags -> engine config and generation defaults (no model loaded)."""

from __future__ import annotations

import json

from tts_app.cli.args import engine_args_from, params_from_args
from tts_app.config import EngineConfig
from tts_app.cli.batch import build_parser, main
from tts_app.request import SynthesisParams


def _engine_config(args) -> EngineConfig:
    return engine_args_from(args).engine


def parse(*flags: str):
    return build_parser().parse_args(["tasks.jsonl", "--out-dir", "out", *flags])


def test_flags_not_given_keep_the_defaults_and_given_zeros_are_kept():
    assert _engine_config(parse()) == EngineConfig()
    assert params_from_args(parse()) == SynthesisParams()
    params = params_from_args(parse("--seed", "0", "--greedy", "--no-kv-cache", "--max-new-tokens", "30"))
    assert (params.seed, params.greedy, params.use_cache, params.max_new_tokens) == (0, True, False, 30)


def test_engine_flags_reach_the_engine_config():
    config = _engine_config(parse("--batch-size", "3", "--memory-budget", "2GiB", "--simulate-oom-above-batch", "1"))
    assert (config.max_batch_size, config.memory_budget_bytes, config.simulate_oom_above_batch) == (3, 2 * 1024**3, 1)


def test_validate_only_loads_no_model_and_reports_bad_lines(tmp_path, data_dir, capsys):
    (tmp_path / "v.wav").write_bytes((data_dir / "en_male_1.wav").read_bytes())
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "v.wav"}) + "\n", encoding="utf-8")
    assert main([str(good), "--out-dir", str(tmp_path / "o"), "--validate-only", "--model", "/nonexistent"]) == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_text": "Hi."}\n', encoding="utf-8")
    assert main([str(bad), "--out-dir", str(tmp_path / "o"), "--validate-only"]) == 1
    assert "line 1: error: missing field 'prompt_audio'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # validation writes nothing


def _no_model_load(monkeypatch) -> list:
    """Make any model load a recorded, failing call (the tests below must not load one)."""
    import tts_app.adapters

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tts_app.adapters, "load_adapter", refuse)
    return calls


def test_out_dir_that_is_a_file_is_a_usage_error_before_anything_loads(tmp_path, data_dir, capsys, monkeypatch):
    calls = _no_model_load(monkeypatch)
    (tmp_path / "v.wav").write_bytes((data_dir / "en_male_1.wav").read_bytes())
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "v.wav"}) + "\n", encoding="utf-8")
    (tmp_path / "afile").write_bytes(b"")
    for out_dir, needle in [(tmp_path / "afile", "is a file, not a folder"),
                            (tmp_path / "afile" / "sub", "is a file, not a folder")]:
        assert main([str(job), "--out-dir", str(out_dir)]) == 2
        err = capsys.readouterr().err
        assert needle in err and "--out-dir" in err and len(err.strip().splitlines()) == 1
    assert main([str(job), "--out-dir", str(tmp_path / "o"), "--memory-budget", "-5MB"]) == 2
    assert "memory budget must be positive" in capsys.readouterr().err
    assert main([str(job), "--out-dir", str(tmp_path / "o"), "--batch-size", "0"]) == 2
    assert calls == [] and not (tmp_path / "o").exists()


def test_no_model_is_loaded_when_every_line_is_invalid_or_already_done(tmp_path, data_dir, capsys, monkeypatch):
    from tests.fakes import FakeAdapter
    from tts_app.jobs.runner import run_job
    from tts_app.runtime import Runtime

    (tmp_path / "v.wav").write_bytes((data_dir / "en_male_1.wav").read_bytes())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Hi.", "prompt_audio": "v.wav"}\n{"input_text": "Hi."}\n', encoding="utf-8")
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "v.wav"}) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0.0))
    try:
        assert run_job(good, tmp_path / "done", runtime).all_ok
    finally:
        runtime.close()

    calls = _no_model_load(monkeypatch)
    assert main([str(bad), "--out-dir", str(tmp_path / "o")]) == 1  # lines failed, recorded
    err = capsys.readouterr().err
    assert "not loading it" in err and "rename it to input_text" in err
    results = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in results] == ["failed", "failed"]
    assert main([str(good), "--out-dir", str(tmp_path / "done"), "--resume"]) == 0
    assert "not loading it" in capsys.readouterr().err
    assert calls == []


def test_help_documents_the_jsonl_fields_with_an_example(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for needle in ("input_text", "syn_text", "prompt_audio", "prompt_speech", "prompt_text", "output_name", "uttid",
                   "results.jsonl", "--resume"):
        assert needle in out, needle
    example = next(line for line in out.splitlines() if line.strip().startswith("{"))
    assert json.loads(example)["input_text"]  # the example line is valid JSON with the required field
