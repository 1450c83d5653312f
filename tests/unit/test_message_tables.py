"""Every user-facing message table has each key in both languages, with the same {placeholders}; messages render
in Chinese at each door (page helpers, results.jsonl twins, the commands' --lang)."""

from __future__ import annotations

import importlib
import json
import string
from pathlib import Path

import pytest

from tts_app.frontend import messages

DATA = Path(__file__).resolve().parents[1] / "data"

#: every module that registers a table with tts_app.frontend.messages
REGISTERING = ["tts_app.frontend.messages", "tts_app.audio.notices", "tts_app.jobs.messages", "tts_app.dialogue",
               "tts_app.audio.transcribe", "tts_app.cli.messages", "tts_app.request", "tts_app.finish",
               "tts_app.audio.effects", "tts_app.adapters.dia", "tts_app.engine.messages",
               "tts_app.outputs", "tts_app.adapters.base", "tts_app.adapters.indextts2", "tts_app.adapters.vibevoice",
               "tts_app.adapters.higgs", "tts_app.server.openai_api"]


def _fields(template: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def _tables() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    for module in REGISTERING:
        importlib.import_module(module)
    from tts_app.ui import texts

    return [*messages.TABLES, ("tts_app.ui.texts (gr.I18n)", texts.EN, texts.ZH),
            ("tts_app.ui.texts (server)", texts.SERVER["en"], texts.SERVER["zh"])]


def test_every_registering_module_is_walked():
    owners = {owner for owner, _, _ in _tables()}
    assert set(REGISTERING) <= owners


@pytest.mark.parametrize("owner,en,zh", _tables(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_key_has_both_languages_with_the_same_placeholders(owner, en, zh):
    assert en.keys() == zh.keys(), f"{owner}: keys in one language only: {sorted(en.keys() ^ zh.keys())}"
    for key in en:
        assert en[key].strip() and zh[key].strip(), f"{owner}: {key} is empty in a language"
        assert _fields(en[key]) == _fields(zh[key]), f"{owner}: {key} has different placeholders"


def test_a_chinese_text_is_not_the_english_one():
    same = [(owner, key) for owner, en, zh in _tables() for key in en
            if en[key] == zh[key] and any(c.isalpha() and c.isascii() for c in en[key].replace("{", " "))
            and len(_fields(en[key])) < len(en[key].split())]
    allowed = {"top_p", "top_k"}  # the knobs' own names
    assert [item for item in same if item[1] not in allowed] == []


def test_a_registered_key_clashing_with_another_text_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        messages.register("test", {"job_failed": "other"}, {"job_failed": "其他"})
    with pytest.raises(ValueError, match="one language"):
        messages.register("test", {"x_only_en": "a"}, {})


def test_a_job_line_error_reads_in_chinese_and_survives_results_jsonl(tmp_path):
    from tts_app.jobs.results import line_record
    from tts_app.jobs.runner import validate_job

    job = tmp_path / "job.jsonl"
    job.write_text('{"input_text": "你好", "prompt_audio": "missing.wav"}\n{"text": "你好"}\nnot json\n',
                   encoding="utf-8")
    report = validate_job(job)
    messages_ = [row.message for row in report.rows]
    assert all(isinstance(m, messages.Notice) for m in messages_)
    zh = [messages.localize(m, "zh") for m in messages_]
    assert any("找不到 prompt_audio 文件 'missing.wav'" in m for m in zh)
    assert any("缺少字段 'input_text'" in m for m in zh)
    assert any("JSON 格式错误" in m for m in zh)
    assert "job file" not in report.format_text("zh") and "第 2 行" in report.format_text("zh")
    # results.jsonl: the English text as before, plus the twin a Chinese page renders
    record = json.loads(json.dumps(line_record(2, "x", "failed", error=report.rows[-1].message,
                                               warnings=[messages.Notice("job_unknown_field", field="text")])))
    assert record["error"] == str(report.rows[-1].message) and record["error"].startswith("bad JSON")
    assert messages.localize_record(record, "error", "zh").startswith("JSON 格式错误")
    assert messages.localize_record(record, "warnings", "zh") == ["未知字段 'text'，已忽略"]
    assert messages.localize_record({"error": "plain", "warnings": ["w"]}, "error", "zh") == "plain"


def test_a_refused_reference_reads_in_chinese_under_any_name():
    from tts_app.audio.reference import ReferenceCache, prepare_reference
    from tts_app.errors import ReferenceAudioError

    cache = ReferenceCache(4)
    for name in ("first.wav", "second.wav"):  # the second is a cache hit, re-worded for its own name
        with pytest.raises(ReferenceAudioError) as caught:
            prepare_reference(DATA / "silence_digital_5s.wav", target_sampling_rate=24000, cache=cache, name=name)
        assert messages.localize(caught.value, "zh") == (f"参考音频 '{name}' 是数字静音：没有找到语音；请上传至少含 1 秒"
                                                         "语音的音频")
        assert str(caught.value).startswith(f"reference audio '{name}' is digital silence")
        assert caught.value.report.to_dict("zh")["errors"] == [messages.localize(caught.value, "zh")]


def test_the_reference_command_speaks_chinese_with_lang_zh(capsys):
    from tts_app.audio.cli import main

    assert main([str(DATA / "en_male_1__too_short_0.4s.wav"), "--lang", "zh"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("错误：参考音频 'en_male_1__too_short_0.4s.wav' 太短") and "too short" not in err
    assert main([str(DATA / "en_male_1__too_short_0.4s.wav")]) == 1
    assert capsys.readouterr().err.startswith("error: reference audio 'en_male_1__too_short_0.4s.wav' is too short")


def test_one_lang_flag_for_every_command():
    from tts_app.audio.cli import _parser as reference_parser
    from tts_app.cli.synth import build_parser as synth_parser
    from tts_app.frontend.cli import _parser as frontend_parser
    from tts_app.cli.batch import build_parser as batch_parser
    from tts_app.server.main import build_parser as app_parser

    for build in (reference_parser, synth_parser, frontend_parser, batch_parser, app_parser):
        flag = next(a for a in build()._actions if "--lang" in a.option_strings)
        assert tuple(flag.choices) == ("zh", "en") and flag.default is None


def test_what_reference_cleanup_changed_reads_in_chinese():
    """The report's "changes" list (what the cleanup did to the clip) in the page's / command's language; the
    sidecar keeps the English text."""
    from tts_app.audio.reference import prepare_reference
    from tts_app.config import ReferenceConfig

    _, report = prepare_reference(DATA / "en_male_1__flac_48k_pinknoise_hum50.flac", target_sampling_rate=24000,
                                  config=ReferenceConfig(cleanup="full"))
    zh, en = report.to_dict("zh")["changes"], report.to_dict("en")["changes"]
    assert len(zh) == len(en) >= 4 and any(c.startswith("resampled 48000 -> 24000 Hz") for c in en)
    assert "重采样 48000 -> 24000 Hz" in zh and any(c.startswith("已裁到语音部分") for c in zh)
    english = [c for c in zh if any(word in c for word in ("resampled", "trimmed", "loudness", "hum", "pass",
                                                           "kept", "channel"))]
    assert english == []
    assert [str(c) for c in report.changes] == en  # the English text a sidecar stores


@pytest.mark.parametrize("argv, zh", [
    (["--text", "你好", "--script", "x.txt"], "请用 --text 给出要朗读的文本"),
    (["--text", "你好", "--ref", "missing.wav"], "参考音频 'missing.wav' 不存在"),
    (["--text", "你好", "--voice", "a", "--voice", "b"], "--voice 给了不止一次"),
    (["--text", "你好", "--emo-vector", "1,x"], "--emo-vector '1,x' 必须是 8 个以逗号分隔的数"),
    (["--script", "missing.txt", "--ref", "a.wav"], "--ref 只用于单个声音"),
])
def test_synths_own_usage_errors_read_in_chinese_with_lang_zh(tmp_path, capsys, argv, zh):
    from tts_app.cli.synth import main

    assert main([*argv, "--out", str(tmp_path / "out.wav"), "--lang", "zh"]) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert err.startswith("错误：") and zh in err, err
    assert not any(w in err for w in ("give", "given", "must", "does not exist", "single voice")), err


def test_synths_summary_names_decode_steps_for_a_continuous_engine(monkeypatch, tmp_path, capsys, data_dir):
    """A continuous engine counts a batch per decode step: the summary says "decode steps", not "batches"."""
    from tests.fakes import FakeAdapter, FakeStepAdapter
    from tts_app.cli.synth import main
    from tts_app.config import EngineConfig
    from tts_app.runtime import Runtime

    for adapter, en, zh in ((FakeStepAdapter(), "decode steps (largest", "个解码步（最大批"),
                            (FakeAdapter(), "batches (largest", "，分 1 批（最大批")):
        monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, *a, _adapter=adapter, **k: Runtime.from_adapter(
            _adapter, "fake", EngineConfig(wait_window_ms=0))))
        for lang, words in (("en", en), ("zh", zh)):
            assert main(["--ref", str(data_dir / "en_female_1.wav"), "--text", "Hello there.", "--out",
                         str(tmp_path / f"{lang}.wav"), "--lang", lang]) == 0
            out = capsys.readouterr().out
            assert words in out, out


def test_the_batch_commands_progress_and_notes_read_in_chinese(tmp_path, capsys, data_dir):
    """``batch --lang zh``: the progress bar's unit and counters, and the note that no line needs the model."""
    from tts_app.cli.batch import main

    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": "你好", "prompt_audio": "missing.wav"}) + "\n", encoding="utf-8")
    assert main([str(job), "--out-dir", str(tmp_path / "out"), "--lang", "zh"]) == 1
    err = capsys.readouterr().err
    assert "没有需要模型的行" in err and "失败=1" in err and ("行/s" in err or "s/行" in err), err
    assert not any(w in err for w in ("failed=", "skipped=", "not loading", "line/s", "s/line")), err
