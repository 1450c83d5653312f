"""Typed finish reasons (issue 26, Build 4): every result says why it ended, decided from the error's type where it
was caught, and every door maps the reason, never the message: /v1's HTTP status (a user's mistake is never a 5xx,
so the official ``openai`` client does not send it again), the page's pop-up in its language, results.jsonl's
``finish_reason``, ``synth``'s exit status, and ``/metrics``. On the fake model."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from tests.fakes import FakeAdapter, fake_facts
from tts_app.config import EngineConfig, ServerConfig
from tts_app.engine import Engine
from tts_app.errors import (ConfigError, InputError, JobLineError, ModelLoadError, ReferenceAudioError,
                            RequestCancelledError)
from tts_app.finish import Finish, FinishReason
from tts_app.frontend.messages import Notice
from tts_app.request import ReferenceAudio, RequestStatus, Speaker, SynthesisParams, SynthesisRequest, Turn

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")


# -- the mapping -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exc, reason, field, code", [
    (InputError("the text has nothing to speak; type some words"), FinishReason.REFUSED, None, "invalid_input"),
    (ConfigError("duration_s", Notice("param_duration", value=0)), FinishReason.REFUSED, "duration_s",
     "param_duration"),
    (ConfigError("text", Notice("limit_text", num_chars=20001, max_chars=20000)), FinishReason.TOO_LARGE, "text",
     "limit_text"),
    (InputError(Notice("limit_silence", value_s=700, max_s=600)), FinishReason.TOO_LARGE, "text", "limit_silence"),
    (ReferenceAudioError("reference audio is 0.4 s"), FinishReason.REFUSED, "reference_audio", "unusable_reference"),
    (JobLineError(3, "missing field 'input_text'", code="missing_field"), FinishReason.REFUSED, None, "missing_field"),
    (RequestCancelledError("stopped"), FinishReason.CANCELLED, None, "cancelled"),
    (ModelLoadError("no such checkpoint"), FinishReason.ERROR, None, "synthesis_failed"),
    (ValueError("kaput"), FinishReason.ERROR, None, "synthesis_failed"),
])
def test_an_error_maps_to_its_finish_by_type(exc, reason, field, code):
    finish = Finish.from_error(exc)
    assert (finish.reason, finish.field, finish.code) == (reason, field, code)
    assert finish.is_users_mistake == (reason in (FinishReason.REFUSED, FinishReason.TOO_LARGE))
    if reason is FinishReason.ERROR and not isinstance(exc, ModelLoadError):
        assert finish.message == "ValueError: kaput"  # an unexpected exception is named by its type


def test_a_finish_renders_its_reason_and_cause_in_either_language():
    finish = Finish.from_error(ConfigError("duration_s", Notice("param_duration", value=0)))
    assert finish.render("en") == "this request cannot be synthesised as given: duration_s=0 must be > 0 seconds"
    assert finish.render("zh") == "无法按所给内容合成此请求：duration_s=0 必须大于 0 秒"
    oom = Finish.out_of_memory_alone(2, 40)
    assert "segment 3 (40 characters)" in oom.render("en") and "第 3 段（40 个字符）" in oom.render("zh")


# -- the engine: every result carries why it ended ----------------------------------------------------------------
def _always_oom(rows):
    """A real ``torch.OutOfMemoryError`` for every batch, a batch of one included (after the engine's back-off)."""
    from tts_app.engine.memory import make_simulated_oom

    return make_simulated_oom(len(rows), "the test's device is full")


def _result(engine: Engine, text: str = "Hello there.", **params):
    return engine.submit(SynthesisRequest(text=text, reference_audio=REF, params=SynthesisParams(**params))
                         ).result(timeout=30)


def test_results_carry_their_finish_reason():
    engine = Engine(FakeAdapter(raise_if=lambda rows: RuntimeError("a bug") if any("bug" in r.text for r in rows)
                                else None), EngineConfig(wait_window_ms=0)).start()
    try:
        done = _result(engine)
        assert done.ok and done.finish.reason is FinishReason.DONE and done.error is None
        # an unreachable target duration is only found once the speech exists (post-processing): still the user's
        # input, with the field, in either language
        unreachable = _result(engine, duration_s=100.0)
        assert unreachable.status is RequestStatus.FAILED
        assert (unreachable.finish.reason, unreachable.finish.field) == (FinishReason.REFUSED, "duration_s")
        assert "give a target between" in unreachable.error and "请给出" in unreachable.finish.render("zh")
        crashed = _result(engine, text="This has a bug.")
        assert crashed.finish.reason is FinishReason.ERROR and "RuntimeError: a bug" in crashed.error
        empty = _result(engine, text="   ")
        assert empty.finish.reason is FinishReason.REFUSED and "文本为空" in empty.finish.render("zh")
        turnless = engine.submit(SynthesisRequest(text="A: hi", reference_audio=REF, speakers=(Speaker("A"),),
                                                  turns=(Turn(1, "hi"),))).result(timeout=30)
        assert (turnless.finish.reason, turnless.finish.field) == (FinishReason.REFUSED, "text")
        assert "第 1 轮指定了说话人 2" in turnless.finish.render("zh")
    finally:
        engine.shutdown()


def test_out_of_memory_alone_too_large_cancelled_and_shut_down_are_told_apart():
    oom_engine = Engine(FakeAdapter(raise_if=_always_oom), EngineConfig(wait_window_ms=0)).start()
    try:
        oom = _result(oom_engine)
        assert oom.finish.reason is FinishReason.OUT_OF_MEMORY and "out of memory" in oom.error
    finally:
        oom_engine.shutdown()

    facts = fake_facts(text_positions_per_char=1.0, default_max_new_tokens=100, max_segment_chars=2000)
    budget = (300 + 100 + 8 + 10) * facts.kv_bytes_per_position + 1000
    small = Engine(FakeAdapter(facts), EngineConfig(memory_budget_bytes=budget, activation_bytes_per_row=1000,
                                                    wait_window_ms=0)).start()
    try:
        too_large = _result(small, text="x" * 1000)
        assert (too_large.finish.reason, too_large.finish.field) == (FinishReason.TOO_LARGE, "text")
    finally:
        small.shutdown()

    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    engine = Engine(adapter, EngineConfig(wait_window_ms=0, max_batch_size=1)).start()
    try:
        running = engine.submit(SynthesisRequest(text="First.", reference_audio=REF))
        assert adapter.entered.wait(30)
        waiting = engine.submit(SynthesisRequest(text="Second.", reference_audio=REF), stream=True)
        assert waiting.cancel()
        cancelled = waiting.result(timeout=5)
        assert cancelled.status is RequestStatus.CANCELLED and cancelled.finish.reason is FinishReason.CANCELLED
        assert list(waiting.stream(timeout=5)) == [] and waiting._audio_stream.ended_with is cancelled.finish
        queued = engine.submit(SynthesisRequest(text="Third.", reference_audio=REF))
        engine.shutdown(wait=False)
        gate.set()
        assert queued.result(timeout=30).finish.reason is FinishReason.UNAVAILABLE
        assert running.result(timeout=30).finish.reason in (FinishReason.DONE, FinishReason.UNAVAILABLE)
    finally:
        gate.set()
        engine.shutdown()


def test_metrics_count_finished_requests_by_reason():
    from tts_app import metrics

    def count(reason: str) -> float:
        return metrics.REQUESTS_FINISHED.labels(reason=reason)._value.get()

    before = {r: count(r) for r in ("done", "refused")}
    engine = Engine(FakeAdapter(), EngineConfig(wait_window_ms=0)).start()
    try:
        _result(engine)
        _result(engine, text="   ")
        _result(engine, duration_s=100.0)
    finally:
        engine.shutdown()
    assert count("done") == before["done"] + 1 and count("refused") == before["refused"] + 2


# -- /v1: the HTTP status follows the reason -----------------------------------------------------------------------
def _dia_refusal(rows):
    """What Dia's adapter raises for a clone without its transcript (its own check, on the fake model's rows)."""
    from tts_app.adapters.dia import DiaAdapter

    for i, row in enumerate(rows):
        if row.reference_audio is not None:
            try:
                DiaAdapter._check_reference(i, row.reference_audio, row.reference_text)
            except InputError as exc:
                return exc
    return None


class _Host(SimpleNamespace):
    pass


@pytest.fixture()
def api(tmp_path):
    """An in-process /v1 on a fake model that refuses clones without a transcript as Dia does, and a count of the
    engine requests it receives."""
    from fastapi.testclient import TestClient

    from tts_app.runtime import Runtime
    from tts_app.server.app import build_app
    from tts_app.voices import VoiceLibrary

    runtime = Runtime.from_adapter(FakeAdapter(raise_if=_dia_refusal), "fake-dia",
                                   EngineConfig(max_batch_size=4, wait_window_ms=0))
    submitted: list = []
    submit = runtime.engine.submit
    runtime.engine.submit = lambda request, *a, **k: submitted.append(request) or submit(request, *a, **k)
    host = _Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs",
                 load_error=None, extra={})
    app, _ui = build_app(host, ServerConfig(rate_limit_per_min=0))
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(np.linspace(0, 2000, 48000)).astype(np.float32) * np.hanning(48000), 16000,
             format="WAV")
    try:
        yield SimpleNamespace(client=TestClient(app), submitted=submitted, runtime=runtime, host=host,
                              clip=buf.getvalue())
    finally:
        runtime.close()


def test_a_voice_without_its_transcript_is_400_and_the_openai_client_sends_it_once(api, data_dir):
    openai = pytest.importorskip("openai")
    saved = api.client.post("/v1/audio/voices", data={"name": "no-transcript"},
                            files={"audio_sample": ("clip.wav", (data_dir / "en_female_1.wav").read_bytes())})
    assert saved.status_code == 200, saved.text
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=api.client)
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="tts-1", voice="no-transcript", input="Hello there.",
                                   response_format="pcm")
    assert caught.value.status_code == 400
    error = caught.value.body
    assert error["param"] == "voice" and error["finish_reason"] == "refused" and "transcript" in error["message"]
    assert len(api.submitted) == 1  # a refusal is not retried (a 500 was: three engine requests for one call)
    scraped = api.client.get("/metrics").text
    assert any(line.startswith('tts_requests_finished_total{reason="refused"}') for line in scraped.splitlines())


def test_out_of_memory_after_back_off_is_503_with_retry_after(tmp_path):
    from fastapi.testclient import TestClient

    from tts_app.runtime import Runtime
    from tts_app.server.app import build_app
    from tts_app.voices import VoiceLibrary

    runtime = Runtime.from_adapter(FakeAdapter(raise_if=_always_oom), "fake", EngineConfig(wait_window_ms=0))
    try:
        host = _Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "out",
                     load_error=None, extra={})
        app, _ui = build_app(host, ServerConfig(rate_limit_per_min=0))
        response = TestClient(app).post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello there.",
                                                                  "voice": "en-female", "response_format": "pcm"})
    finally:
        runtime.close()
    assert response.status_code == 503 and int(response.headers["retry-after"]) > 0, response.text
    error = response.json()["error"]
    assert error["finish_reason"] == "out_of_memory" and error["code"] == "out_of_memory"
    assert "max_segment_chars" in error["message"]


@pytest.mark.parametrize("reason, status", [(FinishReason.REFUSED, 400), (FinishReason.TOO_LARGE, 413),
                                            (FinishReason.CANCELLED, 499), (FinishReason.OUT_OF_MEMORY, 503),
                                            (FinishReason.UNAVAILABLE, 503), (FinishReason.ERROR, 500)])
def test_every_reason_has_its_http_status(reason, status):
    from tts_app.request import SynthesisResult
    from tts_app.server.openai_api import finish_error

    result = SynthesisResult(request_id="r1", status=RequestStatus.FAILED, sampling_rate=16000,
                             finish=Finish(reason, "why", code="c", field="text"))
    error = finish_error(result)
    assert error.status == status and error.finish_reason == reason.value
    assert (error.param == "input") == (status not in (500,))  # the request's "text" is the API's "input"
    assert ("Retry-After" in error.headers) == (status == 503)


# -- the page: the reason's message in the page's language ---------------------------------------------------------
@pytest.mark.parametrize("accept, expected, absent", [
    ("en-US,en;q=0.9", "this request cannot be synthesised as given: the speech is", "Synthesis failed"),
    ("zh-CN,zh;q=0.9", "无法按所给内容合成此请求：语音长", "合成失败")])
def test_the_page_shows_a_refusal_after_generation_in_its_language(tmp_path, data_dir, accept, expected, absent):
    gr = pytest.importorskip("gradio")
    from tests.fakes import fake_app_context
    from tts_app.ui import handlers

    ctx = fake_app_context(tmp_path / "out")
    page = SimpleNamespace(headers={"accept-language": accept}, session_hash="s1")
    try:
        with pytest.raises(gr.Error) as caught:
            handlers.synthesize(ctx, str(data_dir / "en_female_1.wav"), "Hello there, how are you today?",
                                duration_s=100.0, request=page, progress=lambda *a, **k: None)
    finally:
        ctx.close()
    assert expected in caught.value.message and absent not in caught.value.message


# -- synth's exit status -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("finish, status", [
    (Finish.from_error(ConfigError("duration_s", Notice("param_duration", value=0))), 2),
    (Finish.too_large("a segment needs 2 MiB but the memory budget is 1 MiB"), 1),
    (Finish.from_error(ConfigError("reference_text", "no transcript")), 1),
    (Finish.from_error(ReferenceAudioError("silent")), 1),
    (Finish.out_of_memory_alone(0, 10), 1),
    (Finish.error("RuntimeError: a bug"), 1),
])
def test_synth_exit_status_follows_its_help_text(finish, status):
    from tts_app.cli.synth import exit_status

    assert exit_status(finish) == status


def test_job_records_carry_the_finish_reason(tmp_path, data_dir):
    import json

    from tts_app.jobs.runner import run_job
    from tts_app.runtime import Runtime

    import shutil

    job = tmp_path / "job.jsonl"
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "ref.wav")
    ref = "ref.wav"
    job.write_text("\n".join(json.dumps(line) for line in [
        {"input_text": "Hello there.", "prompt_audio": ref},
        {"input_text": "Hello there.", "prompt_audio": ref, "duration_s": 100.0},
        {"input_text": "Hello there.", "prompt_audio": "missing.wav"}]) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0))
    try:
        run_job(job, tmp_path / "out", runtime=runtime)
    finally:
        runtime.close()
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["finish_reason"] for r in records] == ["done", "refused", "refused"]
    assert records[1]["error_i18n"]["code"] == "tempo_duration_range"  # the page renders it in Chinese too


@pytest.mark.parametrize("adapter_class", ["FakeAdapter", "FakeStepAdapter"])
def test_a_request_past_the_total_audio_bound_is_stopped_too_large_and_the_engine_goes_on(adapter_class, monkeypatch):
    """Issue 25: ``RequestLimits.max_audio_s`` bounds the audio one request may make (speech and pauses). A request
    that passes it mid-generation ends FAILED, finish TOO_LARGE with the ``limit_audio`` notice (zh too), and the
    next request is served; before, nothing stopped a model that never ends speech."""
    import dataclasses

    import tests.fakes as fakes
    import tts_app.request as request_module

    monkeypatch.setattr(request_module, "REQUEST_LIMITS",
                        dataclasses.replace(request_module.REQUEST_LIMITS, max_audio_s=0.5))
    adapter = getattr(fakes, adapter_class)(fake_facts(max_segment_chars=30))
    engine = Engine(adapter, EngineConfig(wait_window_ms=0)).start()
    try:
        long = engine.submit(SynthesisRequest(text=" ".join(f"Sentence {i} of a long text." for i in range(20)),
                                              reference_audio=REF, params=SynthesisParams(seed=1, greedy=True)))
        result = long.result(timeout=60)
        assert result.status is RequestStatus.FAILED and result.finish.reason is FinishReason.TOO_LARGE
        assert result.finish.code == "limit_audio" and "0.5" in result.finish.render("en")
        assert "秒" in result.finish.render("zh")
        monkeypatch.setattr(request_module, "REQUEST_LIMITS",
                            dataclasses.replace(request_module.REQUEST_LIMITS, max_audio_s=7200.0))
        assert engine.submit(SynthesisRequest(text="Hi.", reference_audio=REF,
                                              params=SynthesisParams(seed=2))).result(timeout=60).ok
    finally:
        engine.shutdown()


def test_the_engines_emotion_refusal_reads_wholly_in_chinese():
    """A model without emotion control refuses an emotion vector; the Chinese page shows that cause in Chinese (the
    model's name aside), the English door the same English words as before."""
    from tts_app.request import EmotionControl

    with Engine(FakeAdapter(), EngineConfig(wait_window_ms=0)) as engine:
        result = engine.submit(SynthesisRequest(text="Hello.", reference_audio=REF, emotion=EmotionControl(
            vector=(0.5, 0, 0, 0, 0, 0, 0, 0)))).result(timeout=5)
    assert result.finish.reason is FinishReason.REFUSED
    english = "emotion control (emotion clip, emotion vector, emotion from text) needs a model that has it"
    assert english in result.finish.render("en")
    chinese = result.finish.render("zh").replace(FakeAdapter().display_name, "")
    assert "情感控制" in chinese and not re.search(r"[A-Za-z]{3,}", chinese.replace("IndexTTS", "")), chinese
