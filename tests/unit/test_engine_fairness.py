"""Rows shared across requests: a short request gets a row while another user's long request fills the batch, and a
stream keeps an account of the silences its client hears (underruns)."""

from __future__ import annotations

import threading

import numpy as np

from tests.fakes import FakeStepAdapter, fake_audio, fake_facts
from tts_app import metrics
from tts_app.audio.post import join_segments
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.streaming import AudioChunk, AudioStream
from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")


def request(text: str, seed: int = 0) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=REF, params=SynthesisParams(seed=seed, greedy=True))


def _queue_waits() -> float:
    for family in metrics.QUEUE_WAIT.collect():
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels.get("priority") == "interactive":
                return sample.value
    return 0.0


def test_a_short_request_gets_a_row_while_another_users_long_request_fills_the_batch():
    gate = threading.Event()
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=40), gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=3, wait_window_ms=0)).start()
    waits_before = _queue_waits()
    long_text = " ".join(f"Sentence number {i} of a long answer." for i in range(12))
    long = engine.submit(request(long_text, seed=1))
    assert adapter.entered.wait(timeout=30)  # its first decode step, held: the long request holds every row
    assert adapter.steps == [3]
    total = engine._requests[long.request_id].num_segments
    assert total > 6
    short = engine.submit(request("Hi there.", seed=2))
    gate.set()
    got = short.result(timeout=30)
    assert got.ok
    finished = long.result(timeout=60)
    # the order the engine loop started rows in (its prefills), read once both ended, not wall-clock progress: the
    # progress callbacks run on the output thread, and the test thread may wake before or after the long request
    started = [text for batch in adapter.prefills for text in batch]
    short_at = started.index(got.segments[0].model_text)
    assert len(started[short_at + 1:]) >= 3, "the short request waited until the long one had every segment running"
    waves = [fake_audio(s.text, 1 + s.index, REF.samples) for s in finished.segments]
    expected = join_segments(waves, [200] * (len(waves) - 1) + [0], 16000)[0]
    np.testing.assert_array_equal(finished.audio, expected)  # the row it gave up restarted with the same audio
    assert engine.stats().num_preempted >= 1
    assert _queue_waits() == waits_before + 2  # /metrics: each request's wait for its first row
    engine.shutdown()


def test_a_stream_counts_each_silence_its_client_hears():
    stream = AudioStream("r", 1000, [0, 0])
    one_second = AudioChunk("r", np.zeros(1000, dtype=np.float32), 1000, 0, 0)
    stream.deliver([one_second], now_s=10.0)  # plays 10.0 .. 11.0
    stream.deliver([one_second], now_s=10.5)  # in time: plays 11.0 .. 12.0
    stream.deliver([one_second], now_s=13.5)  # 1.5 s of silence, then plays 13.5 .. 14.5
    stream.deliver([one_second, one_second], now_s=14.0)  # in time
    stream.deliver([one_second], now_s=16.7)  # ran dry at 16.5
    assert stream.first_audio_s == 10.0 and stream.play_end_s == 17.7
    assert np.allclose(stream.underruns_s, [1.5, 0.2])


def test_an_ended_stream_adds_its_underruns_to_the_engine_stats():
    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=40)), EngineConfig(wait_window_ms=0))
    heard = threading.Event()
    handle = engine.submit(request("One sentence. And another one.", seed=3), on_audio=lambda c: heard.set())
    engine.start()
    assert handle.result(timeout=30).ok and heard.is_set()
    engine.shutdown()
    stream = handle._audio_stream
    stats = engine.stats()
    assert stats.num_streams == 1
    assert stats.num_stream_underruns == len(stream.underruns_s)
    assert stats.max_stream_underrun_s == max(stream.underruns_s, default=0.0)


def test_a_streamed_row_that_gives_its_place_to_another_request_restarts_without_changing_what_was_heard():
    gate = threading.Event()
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=40), gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=2, wait_window_ms=0)).start()
    long_text = " ".join(f"Sentence number {i} of a long answer." for i in range(6))
    long = engine.submit(request(long_text, seed=1), stream=True)
    assert adapter.entered.wait(timeout=30)  # its first decode step, held: both rows are the long request's
    assert adapter.steps == [2]
    short = engine.submit(request("Hi there.", seed=2), stream=True)
    gate.set()
    assert short.result(timeout=30).ok
    chunks = list(long.stream(timeout=60))
    finished = long.result(timeout=60)
    assert engine.stats().num_preempted >= 1  # a row of the streamed long request made room
    waves = [fake_audio(s.text, 1 + s.index, REF.samples) for s in finished.segments]
    expected = join_segments(waves, [200] * (len(waves) - 1) + [0], 16000)[0]
    np.testing.assert_array_equal(finished.audio, expected)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), finished.audio)
    engine.shutdown()
