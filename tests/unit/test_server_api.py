"""The HTTP API in-process (Starlette's TestClient) on a fake model: error shapes and statuses, the API key, the rate
limit, the queue limit, CORS, 503 while loading, and /metrics. The launched app with the official ``openai`` client
is tests/integration/test_openai_api.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig, ServerConfig
from tts_app.engine.memory import format_bytes
from tts_app.runtime import Runtime
from tts_app.server.app import build_app
from tts_app.server.security import RateLimiter
from tts_app.voices import VoiceLibrary

KEY = "sk-test-123"


@dataclass
class Host:
    """An ``AppHost``: what the launcher's AppContext gives the API."""

    runtime: Runtime | None
    voices: VoiceLibrary
    output_root: Path
    load_error: str | None = None
    extra: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def fake_runtime():
    gate = threading.Event()
    gate.set()
    adapter = FakeAdapter(gate=gate)
    runtime = Runtime.from_adapter(adapter, "fake-model", EngineConfig(max_batch_size=4, wait_window_ms=0))
    yield runtime
    runtime.close()


@pytest.fixture()
def host(fake_runtime, tmp_path):
    return Host(runtime=fake_runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")


def client_for(host, **config) -> TestClient:
    app, _ui = build_app(host, ServerConfig(**config))
    return TestClient(app)


def speech(client, headers=None, **body):
    payload = {"model": "tts-1", "input": "Hello there.", "voice": "en-female", "response_format": "pcm", **body}
    return client.post("/v1/audio/speech", json=payload, headers=headers or {})


def test_speech_returns_pcm_of_the_engines_audio(host):
    client = client_for(host, rate_limit_per_min=0)
    response = speech(client)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/pcm"
    assert int(response.headers["x-sampling-rate"]) == 16000
    samples = np.frombuffer(response.content, dtype="<i2")
    assert samples.size > 0 and np.abs(samples).max() > 0
    # the same request again: the same audio (seeded), so an API user can reproduce a result
    assert speech(client).content == response.content


@pytest.mark.parametrize("body, status, code, param", [
    ({"voice": "alloy"}, 404, "voice_not_found", "voice"),
    ({"model": "whisper-1"}, 404, "model_not_found", "model"),
    ({"input": "x" * 20_001}, 413, "input_too_long", "input"),
    ({"seed": 2**64}, 400, "invalid_value", "seed"),
    ({"input": "   "}, 400, None, "input"),
    ({"response_format": "aac"}, 400, "unsupported_format", "response_format"),
    ({"speed": 3.5}, 400, "invalid_value", "speed"),  # as a schema refusal of a value (speed="fast")
    ({"stream_format": "sse"}, 400, "unsupported_stream_format", "stream_format"),
])
def test_bad_requests_get_openai_error_json_with_the_right_status(host, body, status, code, param):
    response = speech(client_for(host, rate_limit_per_min=0), **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["code"] == code
    assert error["message"]


def test_the_engine_decides_413_and_400_and_the_front_end_runs_once_per_request(host, tmp_path, monkeypatch):
    import tts_app.frontend

    calls: list[str] = []
    real = tts_app.frontend.prepare_text

    def counted(text, **kwargs):
        calls.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(tts_app.frontend, "prepare_text", counted)
    for body in ({}, {"stream": True}):
        calls.clear()
        assert speech(client_for(host, rate_limit_per_min=0), **body).status_code == 200
        assert calls == ["Hello there."], body  # once per request (was twice: the 413 pre-check, then submit)
    gate = threading.Event()
    gate.set()
    # a budget no segment fits: every request's segment is over it as a batch of one
    runtime = Runtime.from_adapter(FakeAdapter(gate=gate), "fake-model",
                                   EngineConfig(max_batch_size=4, wait_window_ms=0, memory_budget_bytes=1024))
    try:
        host = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
        client = client_for(host, rate_limit_per_min=0)
        for body in ({}, {"stream": True}):
            calls.clear()
            response = speech(client, **body)
            assert response.status_code == 413, response.text
            assert calls == ["Hello there."], body
            error = response.json()["error"]
            assert error["param"] == "input" and error["code"] == "request_too_large"
            assert f"memory budget is {format_bytes(1024)}" in error["message"]  # the budget it was checked against
        calls.clear()
        nothing = speech(client, input="!!!")
        assert nothing.status_code == 400 and nothing.json()["error"]["param"] == "input"
        assert "nothing to speak" in nothing.json()["error"]["message"] and len(calls) == 1
    finally:
        runtime.close()


def test_unknown_voice_lists_the_voices_there_are(host):
    message = speech(client_for(host, rate_limit_per_min=0), voice="alloy").json()["error"]["message"]
    assert "alloy" in message and "en-female" in message and "zh-male" in message


def test_malformed_body_is_400_naming_the_field(host):
    response = client_for(host).post("/v1/audio/speech", json={"model": "tts-1", "voice": "en-female"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input"


def test_api_key_required_when_set(host):
    client = client_for(host, api_keys=(KEY,), rate_limit_per_min=0)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        response = client.get("/v1/models", headers=headers)
        assert response.status_code == 401, headers
        assert response.json()["error"]["type"] == "authentication_error"
        assert response.headers["www-authenticate"] == "Bearer"
        assert speech(client, headers=headers).status_code == 401
        assert client.get("/metrics", headers=headers).status_code == 401
    good = {"Authorization": f"Bearer {KEY}"}
    assert client.get("/v1/models", headers=good).json()["data"][0]["id"] == "fake-model"
    assert speech(client, headers=good).status_code == 200
    assert client.get("/metrics", headers=good).status_code == 200
    assert client.get("/v1/models", headers={"X-API-Key": KEY}).status_code == 200


def test_no_key_needed_when_none_is_set(host):
    assert client_for(host).get("/v1/models").status_code == 200


def test_rate_limit_per_client_with_retry_after(host):
    client = client_for(host, api_keys=(KEY, "other-key"), rate_limit_per_min=6, rate_limit_burst=2)
    mine = {"Authorization": f"Bearer {KEY}"}
    assert [client.get("/v1/models", headers=mine).status_code for _ in range(3)] == [200, 200, 429]
    limited = client.get("/v1/models", headers=mine)
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(limited.headers["retry-after"]) <= 10
    # another client (another key) has its own bucket
    assert client.get("/v1/models", headers={"Authorization": "Bearer other-key"}).status_code == 200


def test_rate_limiter_refills_at_its_rate():
    now = [0.0]
    limiter = RateLimiter(rate_per_min=60, burst=2, clock=lambda: now[0])
    assert limiter.acquire("a") == 0 and limiter.acquire("a") == 0
    assert limiter.acquire("a") == pytest.approx(1.0)
    now[0] = 0.5
    assert limiter.acquire("a") == pytest.approx(0.5)
    now[0] = 1.0
    assert limiter.acquire("a") == 0
    assert RateLimiter(0, 1).acquire("a") == 0  # 0 = no limit


def test_queue_over_max_depth_gets_429(tmp_path):
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    runtime = Runtime.from_adapter(adapter, "fake-model", EngineConfig(max_batch_size=1, wait_window_ms=0))
    try:
        host = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
        client = client_for(host, max_queue_depth=1, rate_limit_per_min=0)
        first: list = []
        worker = threading.Thread(target=lambda: first.append(speech(client)))
        worker.start()
        assert adapter.entered.wait(30)  # the first request is inside a batch, held at the gate
        busy = speech(client)
        assert busy.status_code == 429 and busy.json()["error"]["code"] == "queue_full"
        assert busy.headers["retry-after"]
        gate.set()
        worker.join(30)
        assert first[0].status_code == 200
        assert speech(client).status_code == 200  # the queue has room again
    finally:
        gate.set()
        runtime.close()


def test_503_while_the_model_loads_and_after_it_failed(tmp_path):
    host = Host(runtime=None, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
    client = client_for(host)
    response = speech(client)
    assert response.status_code == 503 and response.json()["error"]["code"] == "model_loading"
    assert response.headers["retry-after"]
    page = client.get("/")
    assert page.status_code == 503 and "Loading" in page.text
    host.load_error = "checkpoint not found"
    response = client.get("/v1/models")
    assert response.status_code == 503 and "checkpoint not found" in response.json()["error"]["message"]
    assert "checkpoint not found" in client.get("/").text
    # voices can be listed while no model is loaded
    assert client.get("/v1/audio/voices").status_code == 200


def test_cors_headers_only_when_asked(host):
    origin = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    closed = client_for(host)
    assert "access-control-allow-origin" not in closed.get("/v1/models", headers=origin).headers
    assert "access-control-allow-origin" not in closed.options("/v1/audio/speech", headers=origin).headers
    opened = client_for(host, cors_origins=("https://app.example",))
    allowed = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    assert opened.options("/v1/audio/speech", headers=allowed).headers["access-control-allow-origin"] == \
        "https://app.example"
    assert "access-control-allow-origin" not in opened.get("/v1/models", headers=origin).headers


def _samples(families, name):
    return [s for f in families for s in f.samples if s.name == name]


def test_metrics_parse_and_move_after_a_request(host):
    client = client_for(host, rate_limit_per_min=0)

    def scrape():
        text = client.get("/metrics").text
        return list(text_string_to_metric_families(text))

    def value(families, name, **labels):
        return sum(s.value for s in _samples(families, name) if all(s.labels.get(k) == v for k, v in labels.items()))

    before = scrape()
    assert speech(client).status_code == 200
    after = scrape()
    endpoint = "POST /v1/audio/speech"
    assert value(after, "tts_request_duration_seconds_count", endpoint=endpoint, outcome="ok") == \
        value(before, "tts_request_duration_seconds_count", endpoint=endpoint, outcome="ok") + 1
    assert value(after, "tts_requests_total", outcome="done") >= value(before, "tts_requests_total", outcome="done") + 1
    assert value(after, "tts_real_time_factor_count", entry_point="api") == \
        value(before, "tts_real_time_factor_count", entry_point="api") + 1
    assert value(after, "tts_segments_total") > value(before, "tts_segments_total")
    assert value(after, "tts_batch_size_rows_count") > value(before, "tts_batch_size_rows_count")
    assert value(after, "tts_model_loaded") == 1
    assert value(after, "tts_device_memory_total_bytes") > 0
    assert value(after, "tts_batch_cap_rows") == 4
    names = {f.name for f in after}
    for name in ("tts_time_to_first_audio_seconds", "tts_oom", "tts_kv_cache_row_estimate_bytes",
                 "tts_queue_depth_segments", "tts_reference_failures", "tts_jobs", "tts_asr_transcriptions"):
        assert name in names, name
    speech(client, voice="alloy")
    assert value(scrape(), "tts_request_duration_seconds_count", endpoint=endpoint, outcome="client_error") >= 1


def test_voice_upload_cleans_saves_and_refuses_unusable_clips(host, data_dir):
    client = client_for(host, rate_limit_per_min=0)
    clip = (data_dir / "en_male_1.wav").read_bytes()
    saved = client.post("/v1/audio/voices", data={"name": "Bob", "consent": "n/a", "reference_text": "Hi."},
                        files={"audio_sample": ("bob.wav", clip, "audio/wav")})
    assert saved.status_code == 200, saved.text
    assert saved.json()["id"] == "Bob" and saved.json()["object"] == "audio.voice"
    assert "Bob" in [v["id"] for v in client.get("/v1/audio/voices").json()["data"]]
    assert speech(client, voice="Bob").status_code == 200
    taken = client.post("/v1/audio/voices", data={"name": "bob"}, files={"audio_sample": ("b.wav", clip)})
    assert taken.status_code == 400 and "taken" in taken.json()["error"]["message"]
    silent = (data_dir / "silence_digital_5s.wav").read_bytes()

    def failures():
        text = client.get("/metrics").text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "tts_reference_failures_total")

    before = failures()
    refused = client.post("/v1/audio/voices", data={"name": "Quiet"}, files={"audio_sample": ("q.wav", silent)})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unusable_audio"
    assert failures() == before + 1
    assert "Quiet" not in [v["id"] for v in client.get("/v1/audio/voices").json()["data"]]
    deleted = client.delete("/v1/audio/voices/Bob")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert client.delete("/v1/audio/voices/Bob").status_code == 404
    assert client.delete("/v1/audio/voices/en-female").status_code == 400  # bundled: read-only


def test_voice_upload_over_the_limit_is_413(host, data_dir):
    client = client_for(host, rate_limit_per_min=0, max_voice_upload_bytes=1000)
    big = client.post("/v1/audio/voices", data={"name": "Big"},
                      files={"audio_sample": ("b.wav", (data_dir / "en_male_1.wav").read_bytes())})
    assert big.status_code == 413 and big.json()["error"]["param"] == "audio_sample"


def test_voice_names_cannot_reach_files(host):
    client = client_for(host, rate_limit_per_min=0)
    for name in ("../../etc/passwd", "/etc/passwd", "..", "en-female/../../x"):
        response = speech(client, voice=name)
        assert response.status_code in (400, 404), name
        deleted = client.delete(f"/v1/audio/voices/{name}")
        assert deleted.status_code != 200 and "root:" not in deleted.text, name


def test_instructions_are_the_emotion_text_of_a_model_that_reads_it_and_otherwise_a_warning(host, tmp_path):
    import json
    from dataclasses import replace

    from tests.fakes import FAKE_FACTS

    seen: list = []

    class EmotionFromText(FakeAdapter):
        def preprocess(self, rows, params):
            seen.extend(row.emotion for row in rows)
            return super().preprocess(rows, params)

    plain = speech(client_for(host, rate_limit_per_min=0), instructions="Speak sadly.")
    assert plain.status_code == 200
    assert any("instructions were ignored" in w for w in json.loads(plain.headers["x-tts-warnings"]))
    adapter = EmotionFromText(facts=replace(FAKE_FACTS, supports_emotion=True, supports_emotion_text=True))
    runtime = Runtime.from_adapter(adapter, "fake-emotion", EngineConfig(max_batch_size=4, wait_window_ms=0))
    try:
        emotional = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices2"), output_root=tmp_path / "out2")
        response = speech(client_for(emotional, rate_limit_per_min=0), instructions="  Speak sadly. ")
        assert response.status_code == 200, response.text
        assert seen and all(e is not None and e.text == "Speak sadly." for e in seen)
        assert not any("instructions" in w for w in json.loads(response.headers["x-tts-warnings"]))
    finally:
        runtime.close()


def test_a_failed_synthesis_is_500_naming_the_request_id_its_one_logged_traceback_has(tmp_path, caplog):
    import logging

    adapter = FakeAdapter(raise_if=lambda rows: ValueError("kaput") if any("boom" in r.text for r in rows)
                          else None)
    runtime = Runtime.from_adapter(adapter, "fake-model", EngineConfig(max_batch_size=4, wait_window_ms=0))
    try:
        host = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
        with caplog.at_level(logging.INFO, logger="tts_app"):
            response = speech(client_for(host, rate_limit_per_min=0), input="This goes boom.")
    finally:
        runtime.close()
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    request_id = error["request_id"]
    assert request_id and response.headers["x-request-id"] == request_id and request_id in error["message"]
    assert error["code"] == "synthesis_failed" and "kaput" in error["message"]
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and request_id in tracebacks[0].getMessage()


@pytest.fixture(scope="module")
def step_runtime():
    """A continuously batched fake model (decode steps of 400 samples): streamed answers come step by step."""
    from tests.fakes import FakeStepAdapter

    runtime = Runtime.from_adapter(FakeStepAdapter(step_delay_s=0.002), "fake-step-model",
                                   EngineConfig(max_batch_size=4, wait_window_ms=0))
    yield runtime
    runtime.close()


def test_streamed_speech_is_the_same_audio_as_the_whole_answer(step_runtime, tmp_path):
    import io

    import soundfile as sf

    host = Host(runtime=step_runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
    client = client_for(host, rate_limit_per_min=0)
    text = "Hello there. A second sentence follows it. Then a third one ends it."
    whole = speech(client, input=text, seed=5)
    assert whole.status_code == 200 and "x-tts-stream" not in whole.headers  # not asked for: answered when done
    for ask in ({"stream_format": "audio"}, {"stream": True}):
        with client.stream("POST", "/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "en-female",
                                                            "response_format": "pcm", "seed": 5, **ask}) as r:
            assert r.status_code == 200 and r.headers["x-tts-stream"] == "chunked", ask
            assert "x-audio-duration-s" not in r.headers  # not known when the first audio leaves
            pieces = list(r.iter_bytes())
        assert b"".join(pieces) == whole.content, ask
    with client.stream("POST", "/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "en-female",
                                                        "response_format": "wav", "seed": 5,
                                                        "stream_format": "audio"}) as r:
        assert r.headers["content-type"] == "audio/wav"
        wav = r.read()
    samples, rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert rate == 16000
    np.testing.assert_array_equal(samples, np.frombuffer(whole.content, dtype="<i2"))
    # stream: false keeps the whole answer even with stream_format given
    off = speech(client, input=text, seed=5, stream_format="audio", stream=False)
    assert off.content == whole.content and "x-tts-stream" not in off.headers


@pytest.mark.parametrize("body, reason", [({"response_format": "mp3"}, "response_format mp3"),
                                          ({"speed": 1.25}, "speed")])
def test_streaming_that_needs_the_whole_clip_says_so(step_runtime, tmp_path, body, reason):
    import json

    host = Host(runtime=step_runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
    response = speech(client_for(host, rate_limit_per_min=0), stream_format="audio", **body)
    assert response.status_code == 200, response.text
    assert response.headers["x-tts-stream"] == "whole-clip" and float(response.headers["x-audio-duration-s"]) > 0
    assert any(reason in w for w in json.loads(response.headers["x-tts-warnings"]))


def test_streamed_request_failing_before_any_audio_gets_a_500(tmp_path):
    adapter = FakeAdapter(raise_if=lambda rows: RuntimeError("the model broke"))
    runtime = Runtime.from_adapter(adapter, "fake-broken", EngineConfig(max_batch_size=2, wait_window_ms=0))
    try:
        host = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "outputs")
        response = speech(client_for(host, rate_limit_per_min=0), stream_format="audio")
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == "synthesis_failed" and "the model broke" in error["message"]
        assert error["request_id"] == response.headers["x-request-id"]
    finally:
        runtime.close()


def test_beam_settings_and_reference_cleanup_are_extension_fields(host, tmp_path, data_dir, monkeypatch):
    """Issue 24: ``num_beams``, ``length_penalty`` and ``reference_cleanup`` reach the request as every other door
    sends them; a bad value is a 400 naming the field; beams on a model without beam search are a warning."""
    import json
    from dataclasses import replace

    from tests.fakes import FAKE_FACTS, FAKE_GENERATION_DEFAULTS

    for body, param in (({"num_beams": 0}, "num_beams"), ({"num_beams": 9}, "num_beams"),
                        ({"reference_cleanup": "some"}, "reference_cleanup")):
        response = speech(client_for(host, rate_limit_per_min=0), **body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, (body, response.text)
    ignored = speech(client_for(host, rate_limit_per_min=0), num_beams=2)
    assert ignored.status_code == 200
    assert any("num_beams was ignored" in w for w in json.loads(ignored.headers["x-tts-warnings"]))

    seen: list = []

    class Beams(FakeAdapter):
        def preprocess(self, rows, params):
            seen.append((params.num_beams, params.length_penalty))
            return super().preprocess(rows, params)

    facts = replace(FAKE_FACTS, generation_defaults=replace(FAKE_GENERATION_DEFAULTS, num_beams=3, length_penalty=0.0))
    runtime = Runtime.from_adapter(Beams(facts=facts), "fake-beams", EngineConfig(max_batch_size=4, wait_window_ms=0))
    try:
        library = VoiceLibrary(tmp_path / "voices-beams")
        library.save("anna", data_dir / "en_female_1.wav", runtime.references, cleanup="off")
        beams = Host(runtime=runtime, voices=library, output_root=tmp_path / "out-beams")
        cleanups: list = []
        prepare = VoiceLibrary.prepare

        def spy(self, name, preparer, cleanup=None):
            prepared = prepare(self, name, preparer, cleanup)
            cleanups.append(prepared.report.cleanup)
            return prepared

        monkeypatch.setattr(VoiceLibrary, "prepare", spy)
        client = client_for(beams, rate_limit_per_min=0)
        response = speech(client, voice="anna", num_beams=2, length_penalty=1.5, reference_cleanup="full")
        assert response.status_code == 200, response.text
        assert not json.loads(response.headers["x-tts-warnings"])
        assert speech(client, voice="anna").status_code == 200
    finally:
        runtime.close()
    assert seen == [(2, 1.5), (3, 0.0)]  # the model's own beams when not given
    assert cleanups == ["full", "off"]  # the voice as saved when not given


def test_segment_context_is_an_extension_field(host, tmp_path):
    """Issue 29: ``segment_context`` reaches the request; on a model without it the response warns (header) that it
    was ignored, once."""
    import json
    from dataclasses import replace

    from tests.fakes import FAKE_FACTS

    ignored = speech(client_for(host, rate_limit_per_min=0), segment_context=True, stream=True)
    assert ignored.status_code == 200
    warnings = [w for w in json.loads(ignored.headers["x-tts-warnings"]) if "segment_context was ignored" in w]
    assert len(warnings) == 1
    seen: list = []

    class Context(FakeAdapter):
        def preprocess(self, rows, params):
            seen.append(params.segment_context)
            return super().preprocess(rows, params)

    runtime = Runtime.from_adapter(Context(facts=replace(FAKE_FACTS, supports_segment_context=True)), "fake-context",
                                   EngineConfig(wait_window_ms=0))
    try:
        client = client_for(Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "v"), output_root=tmp_path / "o"),
                            rate_limit_per_min=0)
        response = speech(client, segment_context=True)
        assert response.status_code == 200 and not json.loads(response.headers["x-tts-warnings"])
        assert speech(client).status_code == 200
    finally:
        runtime.close()
    assert seen == [True, False]
def test_the_take_policy_is_an_extension_field_with_its_scores_in_a_header(tmp_path, data_dir):
    """Issue 29: ``take_check`` and its thresholds reach the request; a bad value is a 400 naming the field; the
    kept takes' scores come back in ``X-TTS-Take-Scores`` (one entry per segment)."""
    import json

    from tests.unit.test_engine_takes import FakeScorer

    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0), take_scorer=FakeScorer())
    try:
        host = Host(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "out")
        client = client_for(host, rate_limit_per_min=0)
        for body, param in (({"take_check": "maybe"}, "take_check"), ({"take_max_rerolls": 99}, "take_max_rerolls"),
                            ({"take_min_similarity": 2}, "take_min_similarity")):
            response = speech(client, **body)
            assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        plain = speech(client)
        assert plain.status_code == 200 and "x-tts-take-scores" not in plain.headers
        checked = speech(client, take_check="score", take_max_error_rate=0.5)
        assert checked.status_code == 200, checked.text
        scores = json.loads(checked.headers["x-tts-take-scores"])
        assert scores == [{"error_rate": 0.05, "similarity": 0.9, "problems": [], "rerolled": 0}]
    finally:
        runtime.close()
