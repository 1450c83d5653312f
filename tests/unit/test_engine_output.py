"""The output processor (``tts_app.engine.output``): a finished request's join, tempo and loudness, streamed chunks
and callbacks run off the model worker's thread, so a long request's post-processing never holds up a short one."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tts_app.audio.effects as effects
from tests.fakes import FakeAdapter, FakeStepAdapter, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.output import OutputProcessor
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")


def request(text: str, seed: int = 0, **params) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=REF, params=SynthesisParams(seed=seed, greedy=True, **params))


@pytest.fixture
def held_post_processing(monkeypatch):
    """``apply_request_effects`` that, for a request with a tempo (speed != 1), signals ``entered`` and waits for
    ``release`` before doing its work: the long request's post-processing, held open as long as the test needs."""
    entered, release = threading.Event(), threading.Event()
    real = effects.apply_request_effects

    def held(audio, spans, sampling_rate, *, speed=None, **kwargs):
        if speed is not None and speed != 1.0:
            entered.set()
            release.wait(timeout=30)
        return real(audio, spans, sampling_rate, speed=speed, **kwargs)

    monkeypatch.setattr(effects, "apply_request_effects", held)
    yield entered, release
    release.set()


@pytest.mark.parametrize("adapter_class", [FakeAdapter, FakeStepAdapter])
def test_a_short_request_finishes_while_a_long_requests_tempo_and_loudness_run(adapter_class, held_post_processing):
    entered, release = held_post_processing
    adapter = adapter_class(fake_facts(max_segment_chars=80))
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    long = engine.submit(request("A long answer that goes on and on. " * 6, seed=1, speed=1.2, loudness_lufs=-16))
    assert entered.wait(timeout=30), "the long request's post-processing never started"
    chunks = []
    short = engine.submit(request("Hi there.", seed=2), stream=True, on_audio=chunks.append)
    got = short.result(timeout=30)  # before the fix: the worker sat in the long request's post-processing
    assert got.ok and not long.done(), "the short request waited for the long one's post-processing"
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), got.audio)
    release.set()
    done = long.result(timeout=30)
    assert done.ok and done.post_processing["speed"] == 1.2
    engine.shutdown()


def test_callbacks_and_post_processing_run_off_the_model_worker_thread():
    threads = {"audio": set(), "progress": set()}
    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=40)), EngineConfig(wait_window_ms=0)).start()
    handle = engine.submit(request("First sentence here. Second one follows. And a third to end.", seed=3),
                           on_progress=lambda e: threads["progress"].add(threading.current_thread().name),
                           on_audio=lambda c: threads["audio"].add(threading.current_thread().name))
    assert handle.result(timeout=30).ok
    engine.shutdown()
    assert threads["audio"] and threads["progress"] - {threading.current_thread().name}
    assert "tts-engine-worker" not in threads["audio"] | threads["progress"]


def test_shutdown_returns_with_every_result_resolved_and_every_stream_ended():
    gate = threading.Event()
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), gate=gate)
    engine = Engine(adapter, EngineConfig(wait_window_ms=0)).start()
    handle = engine.submit(request("Still speaking" + ", on and on" * 10 + ".", seed=4), stream=True)
    assert adapter.entered.wait(timeout=30)
    gate.set()
    engine.shutdown(wait=True)
    assert handle.done() and handle.result().status in (RequestStatus.DONE, RequestStatus.CANCELLED)
    list(handle.stream(timeout=1))  # ends at once: the stream was closed


def test_output_tasks_of_one_request_run_in_order_and_requests_run_side_by_side():
    processor = OutputProcessor(max_workers=2)
    order, slow_entered, slow_release = [], threading.Event(), threading.Event()

    def slow():
        slow_entered.set()
        slow_release.wait(timeout=30)
        order.append(("long", 0))

    processor.post("long", slow)
    processor.post("long", lambda: order.append(("long", 1)))
    assert slow_entered.wait(timeout=30)
    short_done = threading.Event()
    for i in range(5):
        processor.post("short", lambda i=i: order.append(("short", i)))
    processor.post("short", short_done.set)
    assert short_done.wait(timeout=30), "the short request's tasks waited behind the long one's"
    assert order == [("short", i) for i in range(5)]  # in order, while the long one's first task is still held
    assert processor.join(timeout=0) is False
    slow_release.set()
    assert processor.join(timeout=30)
    assert order[5:] == [("long", 0), ("long", 1)]


def test_a_bug_in_a_requests_output_fails_that_request_and_the_engine_serves_the_next(monkeypatch):
    """A bug on the output thread (here: the stream's last flush raising a non-TTSAppError) resolves the caller's
    future as FAILED with an ERROR finish and ends its stream; before, the future was never resolved and the
    caller hung."""
    import tts_app.engine.core as core
    from tts_app.finish import FinishReason

    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=80)), EngineConfig(wait_window_ms=0)).start()
    real_close = core.AudioStream.close
    calls = {"n": 0}

    def broken_close(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the output code")
        return real_close(self, *args, **kwargs)

    monkeypatch.setattr(core.AudioStream, "close", broken_close)
    handle = engine.submit(request("Hi there.", seed=5), stream=True)
    failed = handle.result(timeout=30)
    assert failed.status is RequestStatus.FAILED and failed.finish.reason is FinishReason.ERROR
    list(handle.stream(timeout=5))  # ends: the stream was closed
    assert engine.submit(request("Next one.", seed=6)).result(timeout=30).ok
    engine.shutdown()
