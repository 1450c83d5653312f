"""Every request bounded before work starts (issue 25, Build 2): one text-length limit for every door (the page's
handlers, its gradio API, a JSONL line, ``/v1``), bounded pauses, durations, decode steps and seeds
(``tts_app.config.REQUEST_LIMITS``), and JSONL lines whose JSON nests too deeply or holds a huge number failing as
one record with their line number, in English and Chinese."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tts_app.config import REQUEST_LIMITS
from tts_app.errors import ConfigError, InputError
from tts_app.frontend.messages import localize
from tts_app.request import SynthesisParams, SynthesisRequest

TOO_LONG = "好" * (REQUEST_LIMITS.max_text_chars + 1)


@pytest.mark.parametrize("settings, field, en, zh", [
    ({"seed": 2**63}, "seed", "outside 0..4294967295", "超出 0..4294967295"),
    ({"seed": -1}, "seed", "outside 0..", "超出"),
    ({"max_new_tokens": 10**9}, "max_new_tokens", "more than 16384 decode steps", "16384 个解码步"),
    ({"pause_between_segments_ms": 3_600_000}, "pause_between_segments_ms", "longer than the 10000 ms", "10000 毫秒"),
    ({"chapter_pause_ms": 3_600_000}, "chapter_pause_ms", "longer than the 10000 ms", "10000 毫秒"),
    ({"duration_s": 86_400.0}, "duration_s", "at most 3600 s", "最多 3600 秒"),
    ({"segment_durations_s": (3000.0, 3000.0)}, "segment_durations_s", "6000 s of audio", "6000 秒"),
])
def test_settings_beyond_their_limit_are_refused_naming_the_field(settings, field, en, zh):
    with pytest.raises(ConfigError) as err:
        SynthesisParams(**settings)
    assert err.value.field == field
    assert en in localize(err.value, "en") and zh in localize(err.value, "zh")


def test_the_largest_allowed_values_pass():
    SynthesisParams(seed=REQUEST_LIMITS.max_seed, max_new_tokens=REQUEST_LIMITS.max_new_tokens,
                    pause_between_segments_ms=REQUEST_LIMITS.max_pause_ms, duration_s=REQUEST_LIMITS.max_duration_s)
    SynthesisRequest(text="好" * REQUEST_LIMITS.max_text_chars)


def test_a_text_over_the_limit_is_refused_in_the_users_language():
    with pytest.raises(InputError) as err:
        SynthesisRequest(text=TOO_LONG)
    assert "20001 characters; at most 20000" in localize(err.value, "en")
    assert "20001 个字符；每个请求最多 20000 个" in localize(err.value, "zh")


def test_pause_markers_adding_up_to_hours_of_silence_are_refused_before_decoding():
    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig
    from tts_app.runtime import Runtime

    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0))
    try:
        text = "Hello there. [pause:10s] " * 400  # 10 s x 399 = 66 minutes of silence in 10 kB of text
        result = runtime.engine.submit(SynthesisRequest(text=text)).result(timeout=60)
        assert not result.ok
        assert "add up to 3990 s of silence; at most 3600 s" in str(result.error)
    finally:
        runtime.close()


def test_a_bad_jsonl_line_is_one_failed_record_with_its_line_number(tmp_path):
    from tts_app.jobs.safety import AudioSources
    from tts_app.jobs.schema import InvalidLine, JobLine, iter_job

    lines = [
        json.dumps({"input_text": "The first line is fine."}),
        "[" * 50_000 + "]" * 50_000,  # beyond Python's recursion limit
        json.dumps({"input_text": "x", "extra": json.loads("[" * 17 + "]" * 17)}),
        '{"input_text": "x", "seed": ' + "9" * 5000 + "}",  # beyond Python's int-to-str limit
        json.dumps({"input_text": TOO_LONG}),
        json.dumps({"input_text": "x", "pause_between_segments_ms": 3_600_000}),
        json.dumps({"input_text": "x", "seed": 2**64}),
        json.dumps({"script": "Speaker 1: " + TOO_LONG}),
        json.dumps({"input_text": "The last line is fine too."}),
    ]
    job = tmp_path / "job.jsonl"
    job.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with AudioSources([tmp_path], [tmp_path]) as sources:
        items = list(iter_job(job, sources, has_default_voice=True))
    assert [type(item) for item in items] == [JobLine] + [InvalidLine] * 7 + [JobLine]
    reasons = {item.line_number: str(item.error) for item in items if isinstance(item, InvalidLine)}
    assert "nested too deeply" in reasons[2]
    assert "nest 18 deep; at most 16" in reasons[3]
    assert "a number of 5000 digits" in reasons[4]
    assert "20001 characters" in reasons[5] and "20012 characters" in reasons[8]  # (with "Speaker 1: ")
    assert "3600000 ms is longer than the 10000 ms maximum" in reasons[6]
    assert "outside 0..4294967295" in reasons[7]
    assert all(reason.startswith(f"line {n}:") for n, reason in reasons.items())


def test_the_pages_handlers_refuse_a_long_text_before_any_work(tmp_path):
    """1 MB of text once grew the server to 16.7 GB: the page's synthesis and its live pronunciation preview refuse
    it at once, in the page's language."""
    import gradio as gr

    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.ui import handlers
    from tts_app.ui.context import AppContext, AppSettings

    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(),
                                 output_root=tmp_path / "out"))
    ctx.runtime = SimpleNamespace(engine=SimpleNamespace(facts=None))  # any work past the check would fail
    zh = SimpleNamespace(headers={"accept-language": "zh-CN"}, session_hash="tab")
    megabyte = "字" * 1_000_000
    with pytest.raises(gr.Error) as err:
        handlers.synthesize(ctx, None, megabyte, request=zh, progress=lambda *a, **k: None)
    assert "每个请求最多 20000 个" in str(err.value)
    spans, notes = handlers.pronunciation_preview(ctx, megabyte, request=zh)
    assert spans == [] and "每个请求最多 20000 个" in notes


# ------------------------------------------------------------------------------ text and names that are not valid


def test_a_lone_surrogate_is_a_clear_400_at_the_api_and_a_failed_line_in_a_job(tmp_path):
    from starlette.testclient import TestClient

    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig, ServerConfig
    from tts_app.jobs.safety import AudioSources
    from tts_app.jobs.schema import InvalidLine, iter_job
    from tts_app.runtime import Runtime
    from tts_app.server.app import build_app
    from tts_app.voices import VoiceLibrary

    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0))
    try:
        host = SimpleNamespace(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "out",
                               load_error=None)
        client = TestClient(build_app(host, ServerConfig(rate_limit_per_min=0))[0], raise_server_exceptions=False)
        body = b'{"model": "tts-1", "voice": "en-female", "input": "Hello \\ud800 there."}'  # valid JSON
        response = client.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text  # was a plain-text 500
        assert response.json()["error"]["param"] == "input"
        assert "lone UTF-16 surrogate) at position 7" in response.json()["error"]["message"]
    finally:
        runtime.close()
    job = tmp_path / "job.jsonl"
    job.write_text('{"input_text": "Hi \\ud800."}\n{"input_text": "Fine."}\n', encoding="utf-8")
    with AudioSources([tmp_path], [tmp_path]) as sources:
        first, second = iter_job(job, sources, has_default_voice=True)
    assert isinstance(first, InvalidLine) and "line 1: input_text holds an invalid character" in str(first.error)
    assert not isinstance(second, InvalidLine)


@pytest.mark.parametrize("name, code", [
    ("en-female\u200b", "name_bad_characters"),  # a zero-width space: looks like the bundled voice
    ("\u202eelamef-ne", "name_bad_characters"),  # a right-to-left override
    ("mei\ufeff", "name_bad_characters"),
    ("..", "name_dots"), (".", "name_dots"),
    ("en-f\u0435male", "name_mixed_scripts"),  # a Cyrillic "е" in the bundled voice's name
    ("\u0391nna", "name_mixed_scripts"),  # a Greek capital alpha
    ("\uff45\uff4e-female", "name_lookalike"),  # full-width "ｅｎ"
    ("\U0001d41e\U0001d427-female", "name_lookalike"),  # mathematical bold "𝐞𝐧"
])
def test_voice_names_that_hide_or_reverse_characters_or_are_dots_are_refused(name, code):
    from tts_app.ui.texts import error_text
    from tts_app.voices import VoiceError, check_voice_name

    with pytest.raises(VoiceError) as err:
        check_voice_name(name)
    assert err.value.code == code
    assert error_text(err.value, "zh") != error_text(err.value, "en")  # both tables have it
    # names in one script, or Latin with Chinese, Japanese or Korean, stay fine
    for fine in ("小美 v2.1", "Анна", "かな漢字 Kana", "김민지 v2", "Ελένη"):
        assert check_voice_name(fine) == fine


def test_a_request_past_the_total_audio_bound_is_stopped_in_words():
    from tts_app.config import REQUEST_LIMITS
    from tts_app.errors import InputError
    from tts_app.frontend.messages import localize
    from tts_app.request import check_audio_s

    check_audio_s(REQUEST_LIMITS.max_audio_s)  # up to the bound is fine
    with pytest.raises(InputError) as caught:
        check_audio_s(REQUEST_LIMITS.max_audio_s + 0.5)
    assert "more than the 7200 s one request may make" in localize(caught.value.args[0], "en")
    assert "超过每个请求最多可生成的 7200 秒" in localize(caught.value.args[0], "zh")
