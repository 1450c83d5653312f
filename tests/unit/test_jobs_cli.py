"""``python -m tts_app batch`` flags -> engine config and generation defaults (no model loaded)."""

from __future__ import annotations

import json

from tts_app.config import EngineConfig
from tts_app.jobs.cli import _engine_config, _params, build_parser, main
from tts_app.request import SynthesisParams


def parse(*flags: str):
    return build_parser().parse_args(["tasks.jsonl", "--out-dir", "out", *flags])


def test_flags_not_given_keep_the_defaults_and_given_zeros_are_kept():
    assert _engine_config(parse()) == EngineConfig()
    assert _params(parse()) == SynthesisParams()
    params = _params(parse("--seed", "0", "--greedy", "--no-kv-cache", "--max-new-tokens", "30"))
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
