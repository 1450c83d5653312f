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
               "tts_app.audio.effects", "tts_app.adapters.dia", "tts_app.engine.messages"]


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
    from tts_app.ui.launch import build_parser as app_parser

    for build in (reference_parser, synth_parser, frontend_parser, batch_parser, app_parser):
        flag = next(a for a in build()._actions if "--lang" in a.option_strings)
        assert tuple(flag.choices) == ("zh", "en") and flag.default is None
