"""Continuous batching and streaming through the engine, with a fake step adapter (no model): rows join and leave the
running batch every decode step, the output of every request stays exactly what it is alone, and streamed chunks
concatenate to the final audio."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import FakeStepAdapter, FakeMemoryProbe, fake_audio, fake_facts
from tts_app.audio.post import join_segments
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.errors import ReferenceAudioError
from tts_app.request import Priority, ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")
OTHER_REF = ReferenceAudio(samples=np.linspace(0.2, -0.2, 16000, dtype=np.float32), sampling_rate=16000, key="o")


def request(text: str, seed: int = 0, *, priority=Priority.INTERACTIVE, ref=REF, **params) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=ref, priority=priority,
                            params=SynthesisParams(seed=seed, greedy=True, **params))


def expected_audio(result, seed: int, ref=REF, pause_ms: int = 200) -> np.ndarray:
    """The request's audio alone: each segment's fake audio (seed + index), joined with the pauses."""
    waves = [fake_audio(s.text, seed + s.index, ref.samples) for s in result.segments]
    return join_segments(waves, [pause_ms] * (len(waves) - 1) + [0], 16000)[0]


def sentences(i: int, n: int) -> str:
    return f"Request {i} starts here. " + " ".join(f"Sentence {j} of it goes on a little." for j in range(n))


def test_the_engine_picks_continuous_batching_from_the_adapter():
    engine = Engine(FakeStepAdapter(), EngineConfig(wait_window_ms=0))
    assert engine.continuous and engine.stats().continuous
    with pytest.raises(ValueError, match="step interface"):
        from tests.fakes import FakeAdapter

        Engine(FakeAdapter(), continuous=True)


def test_a_short_request_joins_a_running_long_one_and_finishes_first():
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), step_delay_s=0.002)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    long = engine.submit(request("A long sentence that takes many decode steps" + ", and then some more" * 12 + ".",
                                 seed=1, priority=Priority.JOB))
    while not adapter.steps:
        time.sleep(0.001)
    short = engine.submit(request("Hi there.", seed=2))
    got_short = short.result(timeout=30)
    assert not long.done(), "the short request waited for the long one"
    got_long = long.result(timeout=30)
    assert got_short.ok and got_long.ok
    np.testing.assert_array_equal(got_short.audio, expected_audio(got_short, 2))
    np.testing.assert_array_equal(got_long.audio, expected_audio(got_long, 1))
    assert adapter.prefills[1] == ["Hi there."] and max(adapter.steps) == 2  # it joined the running batch
    engine.shutdown()


@pytest.mark.parametrize("preempt", [True, False])
def test_an_interactive_request_gets_a_slot_at_the_next_step_while_a_job_fills_the_batch(preempt):
    """A job's rows fill the batch (cap 2); an interactive request arriving then takes the youngest job row's slot
    at the next decode step and is done before any job row ends (preempt=False: it waits for one to end). The
    preempted row restarts later: the job's audio is exactly its audio alone."""
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), step_delay_s=0.002)
    engine = Engine(adapter, EngineConfig(max_batch_size=2, wait_window_ms=0), preempt=preempt).start()
    job_text = " ".join(f"Line {j} of the job" + ", and it goes on" * 16 + "." for j in range(3))
    job_done: list[int] = []
    job = engine.submit(request(job_text, seed=1, priority=Priority.JOB),
                        on_progress=lambda event: job_done.append(event.segments_done))
    while len(adapter.steps) < 3:
        time.sleep(0.001)
    ui = engine.submit(request("Hi there.", seed=2))
    got_ui = ui.result(timeout=30)
    segments_done_then = max(job_done)
    got_job = job.result(timeout=60)
    assert got_ui.ok and got_job.ok and len(got_job.segments) == 3
    if preempt:
        assert segments_done_then == 0, "the interactive request waited for a job row to end"
        assert engine.stats().num_preempted >= 1
    else:
        assert segments_done_then >= 1 and engine.stats().num_preempted == 0
    np.testing.assert_array_equal(got_ui.audio, expected_audio(got_ui, 2))
    np.testing.assert_array_equal(got_job.audio, expected_audio(got_job, 1))
    engine.shutdown()


def test_continuous_batching_spends_no_row_steps_on_padding_while_request_level_does():
    texts = [f"Request {i} says" + " la" * (2 + 9 * (i % 4)) + "." for i in range(10)]  # mixed lengths
    shares = {}
    for continuous in (True, False):
        engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=200)), EngineConfig(max_batch_size=4,
                                                                                        wait_window_ms=0),
                        continuous=continuous, bucketing=False)
        handles = [engine.submit(request(t, seed=10 * i)) for i, t in enumerate(texts)]
        engine.start()
        results = [h.result(timeout=60) for h in handles]
        for i, r in enumerate(results):
            np.testing.assert_array_equal(r.audio, expected_audio(r, 10 * i))
        shares[continuous] = engine.stats().padded_share
        engine.shutdown()
    assert shares[True] == 0.0 and shares[False] > 0.05, shares


def test_streamed_chunks_concatenate_to_the_final_audio_and_start_before_it_ends():
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=40), step_delay_s=0.003)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    handle = engine.submit(request(sentences(0, 4), seed=5, pause_between_segments_ms=150), stream=True)
    chunks, done_when_first = [], None
    for chunk in handle.stream(timeout=30):
        if done_when_first is None:
            done_when_first = handle.done()
        chunks.append(chunk)
    result = handle.result(timeout=5)
    assert result.ok and len(result.segments) >= 4
    assert done_when_first is False  # audio arrived while the request was still running
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), result.audio)
    assert [c.start_sample for c in chunks] == list(np.cumsum([0] + [c.samples.size for c in chunks])[:-1])
    assert [c.segment_index for c in chunks] == sorted(c.segment_index for c in chunks)  # in order
    assert any(c.is_pause for c in chunks) and not chunks[-1].is_pause
    engine.shutdown()


def test_a_callback_gets_the_same_chunks_and_a_failed_request_ends_its_stream():
    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=40)), EngineConfig(wait_window_ms=0)).start()
    seen = []
    handle = engine.submit(request(sentences(1, 2), seed=3), on_audio=seen.append)
    result = handle.result(timeout=30)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in seen]), result.audio)
    bad = engine.submit(SynthesisRequest(text="   "), stream=True)
    assert list(bad.stream(timeout=5)) == [] and bad.result().status is RequestStatus.FAILED
    with pytest.raises(ValueError, match="stream=True"):
        engine.submit(request("Not streamed.")).stream()
    engine.shutdown()


@pytest.mark.parametrize("settings", [{"speed": 1.25}, {"loudness_lufs": -20.0}])
def test_a_request_that_needs_the_whole_clip_streams_no_partial_chunks_only_its_final_audio(settings):
    """Speed and loudness work on the whole joined clip, so such a request's stream holds one chunk: the final
    audio, equal to the same request submitted without streaming."""
    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=40), step_delay_s=0.002),
                    EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    text = sentences(3, 3)
    handle = engine.submit(request(text, seed=6, **settings), stream=True)
    chunks = list(handle.stream(timeout=60))
    result = handle.result(timeout=5)
    plain = engine.submit(request(text, seed=6, **settings)).result(timeout=60)
    assert result.ok and plain.ok and len(result.segments) >= 3
    assert len(chunks) == 1 and chunks[0].start_sample == 0
    np.testing.assert_array_equal(chunks[0].samples, result.audio)
    np.testing.assert_array_equal(result.audio, plain.audio)
    assert result.audio.size != expected_audio(result, 6).size or \
        not np.array_equal(result.audio, expected_audio(result, 6))  # the effect was applied
    engine.shutdown()


def test_request_level_batching_streams_per_segment_too():
    from tests.fakes import FakeAdapter

    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=40)), EngineConfig(wait_window_ms=0)).start()
    handle = engine.submit(request(sentences(2, 3), seed=7), stream=True)
    chunks = list(handle.stream(timeout=30))
    result = handle.result()
    assert len(chunks) >= len(result.segments)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), result.audio)
    engine.shutdown()


def test_out_of_memory_in_a_step_requeues_the_youngest_and_keeps_the_rest():
    def oom_above_two(keys):
        return torch.OutOfMemoryError("fake: batch too big") if len(keys) > 2 else None

    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), raise_in_step=oom_above_two)
    probe = FakeMemoryProbe(available_bytes=None)
    engine = Engine(adapter, EngineConfig(max_batch_size=6, wait_window_ms=0, grow_after_successes=1000),
                    memory_probe=probe)
    texts = [f"Row {i} " + "speaks on and on. " * (1 + i % 3) for i in range(6)]
    handles = [engine.submit(request(t, seed=i), stream=True) for i, t in enumerate(texts)]
    engine.start()
    streams = [list(h.stream(timeout=30)) for h in handles]
    for i, (h, chunks) in enumerate(zip(handles, streams)):
        r = h.result()
        assert r.ok, r.error
        np.testing.assert_array_equal(r.audio, expected_audio(r, i))
        np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), r.audio)
    stats = engine.stats()
    assert stats.num_oom >= 1 and stats.num_requeued >= 1 and stats.batch_cap <= 3
    assert probe.num_empty_cache >= stats.num_oom
    assert max(adapter.steps[adapter.steps.index(max(adapter.steps)) + 1:], default=0) <= 3
    engine.shutdown()


def test_out_of_memory_with_a_finished_row_as_padding_drops_the_padding_and_fails_nobody():
    """Request-level batching keeps a finished row in the batch until the batch ends. Out of memory then is not
    the live row's fault: the padding goes and the step is retried; the live row does not fail 'even alone'."""
    calls = {"two_rows": 0}

    def oom_once_padded(keys):
        if len(keys) == 2:
            calls["two_rows"] += 1
            if calls["two_rows"] >= 2:  # the short row ended at the first step; it is padding from now on
                return torch.OutOfMemoryError("fake: the padded batch does not fit")
        return None

    adapter = FakeStepAdapter(raise_in_step=oom_once_padded)
    engine = Engine(adapter, EngineConfig(max_batch_size=2, wait_window_ms=0), continuous=False)
    handles = [engine.submit(request("Hi.", seed=1)),
               engine.submit(request("A long line that keeps on going for a while.", seed=2))]
    engine.start()
    results = [h.result(timeout=30) for h in handles]
    for r, seed in zip(results, (1, 2)):
        assert r.ok, r.error
        np.testing.assert_array_equal(r.audio, expected_audio(r, seed))
    stats = engine.stats()
    assert stats.num_oom == 1 and stats.num_requeued == 0 and stats.batch_cap == 2
    assert adapter.steps[0] == 2 and set(adapter.steps[1:]) == {1}  # the retried steps run the live row alone
    engine.shutdown()


def test_a_row_the_adapter_refuses_at_prefill_fails_alone():
    def refuse(rows):
        if any("poison" in r.text for r in rows):
            return ReferenceAudioError("this reference cannot be used")
        return None

    engine = Engine(FakeStepAdapter(raise_if=refuse), EngineConfig(max_batch_size=4, wait_window_ms=0))
    handles = [engine.submit(request(t, seed=i)) for i, t in enumerate(["Good one.", "The poison one.", "Fine."])]
    engine.start()
    results = [h.result(timeout=30) for h in handles]
    assert [r.status for r in results] == [RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.DONE]
    assert results[1].error == "this reference cannot be used"
    engine.shutdown()


def test_a_crash_in_a_step_fails_only_the_row_that_crashes_alone():
    def crash(keys):
        return RuntimeError("kernel bug") if any("crash" in k.text for k in keys) else None

    engine = Engine(FakeStepAdapter(raise_in_step=crash), EngineConfig(max_batch_size=4, wait_window_ms=0))
    handles = [engine.submit(request(t, seed=i)) for i, t in enumerate(["Good one.", "A crash here.", "Fine."])]
    engine.start()
    results = [h.result(timeout=30) for h in handles]
    assert [r.status for r in results] == [RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.DONE]
    assert "kernel bug" in results[1].error
    late = engine.submit(request("Still serving.", seed=9)).result(timeout=30)
    assert late.ok
    engine.shutdown()


def test_live_rows_stay_within_the_memory_budget():
    facts = fake_facts(max_segment_chars=60)
    adapter = FakeStepAdapter(facts)
    probe_engine = Engine(adapter, EngineConfig(wait_window_ms=0, activation_bytes_per_row=0))
    one = probe_engine.estimate_request_bytes(request("x" * 40))  # one row at its cap
    engine = Engine(adapter, EngineConfig(max_batch_size=8, memory_budget_bytes=int(2.5 * one),
                                          activation_bytes_per_row=0, prefix_cache_entries=0, wait_window_ms=0))
    handles = [engine.submit(request("y" * 40, seed=i)) for i in range(6)]
    engine.start()
    assert all(h.result(timeout=30).ok for h in handles)
    assert max(adapter.steps) <= 2
    engine.shutdown()


def test_rows_of_one_voice_find_its_prefix_in_the_cache_and_it_counts_in_the_stats():
    engine = Engine(FakeStepAdapter(fake_facts(max_segment_chars=40)), EngineConfig(wait_window_ms=0)).start()
    for i in range(3):
        assert engine.submit(request(sentences(i, 1), seed=i)).result(timeout=30).ok
    assert engine.submit(request("Another voice.", ref=OTHER_REF)).result(timeout=30).ok
    stats = engine.stats()
    assert stats.prefix_cache_misses == 2 and stats.prefix_cache_hits >= 4 and stats.prefix_cache_bytes == 2000
    engine.shutdown()


def test_cancelling_a_running_request_releases_its_rows_and_the_others_go_on():
    gate = threading.Event()
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    keep = engine.submit(request("Keep me going for a while" + ", and on" * 10 + ".", seed=1))
    drop = engine.submit(request("Drop me, please" + ", I am long" * 10 + ".", seed=2))
    while not adapter.steps:
        time.sleep(0.001)
    assert drop.cancel()
    gate.set()
    assert drop.result(timeout=5).status is RequestStatus.CANCELLED
    kept = keep.result(timeout=30)
    np.testing.assert_array_equal(kept.audio, expected_audio(kept, 1))
    assert adapter.steps[-1] == 1  # the cancelled row left the batch
    engine.shutdown()


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.sampled_from(list(Priority)),
                             st.sampled_from(["none", "before", "while"]), st.floats(0, 0.01)),
                   min_size=1, max_size=10),
    max_batch_size=st.integers(1, 5),
    oom_probability=st.sampled_from([0.0, 0.2, 0.5]),
    continuous=st.booleans(),
    stream=st.booleans(),
)
def test_any_arrival_order_priorities_cancels_and_oom_give_each_request_its_own_audio(
        specs, max_batch_size, oom_probability, continuous, stream):
    """Requests of random lengths, batch keys and priorities arrive at random moments while others decode; some
    are cancelled before or during their run; steps and prefills run out of memory at random. Every request not
    cancelled is DONE with exactly its audio alone (segment i: seed + i), streamed chunks concatenate to it, and
    the engine ends with nothing queued or running."""
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=30))
    engine = Engine(adapter, EngineConfig(max_batch_size=max_batch_size, simulate_oom_probability=oom_probability,
                                          wait_window_ms=0), continuous=continuous).start()
    handles = []
    for i, (num_sentences, greedy_key, priority, cancel, delay_s) in enumerate(specs):
        time.sleep(delay_s)
        text = f"Request {i} starts. " + " ".join(f"Part {j} of it." for j in range(num_sentences))
        params = SynthesisParams(seed=100 * i, greedy=greedy_key, pause_between_segments_ms=50 * (i % 3))
        handle = engine.submit(SynthesisRequest(text=text, reference_audio=REF, priority=priority, params=params),
                               stream=stream)
        if cancel == "before":
            handle.cancel()
        handles.append((handle, cancel, 100 * i, 50 * (i % 3)))
    for handle, cancel, _, _ in handles:
        if cancel == "while":
            handle.cancel()
    for handle, cancel, seed, pause in handles:
        chunks = list(handle.stream(timeout=60)) if stream else None
        result = handle.result(timeout=60)
        if cancel != "none" and result.status is RequestStatus.CANCELLED:
            continue
        assert result.ok, result.error
        np.testing.assert_array_equal(result.audio, expected_audio(result, seed, pause_ms=pause))
        if stream:
            np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks] or [np.zeros(0)]),
                                          result.audio)
    deadline = time.monotonic() + 10
    while (engine.scheduler.num_running or engine.scheduler.num_waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.stats().queue_depth == 0 and engine.scheduler.num_running == 0
    engine.shutdown()


def test_the_batch_size_metric_counts_the_live_rows_of_every_decode_step():
    """/metrics' tts_batch_size_rows: with continuous batching an operator sees how many rows share each decode step
    (a batch is one step here), not nothing."""
    from prometheus_client import REGISTRY

    def sample(name):
        return REGISTRY.get_sample_value(name) or 0.0

    count_before, sum_before = sample("tts_batch_size_rows_count"), sample("tts_batch_size_rows_sum")
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=400), step_delay_s=0.002)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0)).start()
    try:
        long = engine.submit(request("A sentence that takes a number of decode steps" + ", and more" * 6 + ".", seed=1))
        while not adapter.steps:
            time.sleep(0.001)
        assert engine.submit(request("Hi there.", seed=2)).result(timeout=30).ok and long.result(timeout=30).ok
    finally:
        engine.shutdown()
    assert 2 in adapter.steps  # the two requests shared some decode steps
    assert sample("tts_batch_size_rows_count") - count_before == len(adapter.steps)
    assert sample("tts_batch_size_rows_sum") - sum_before == sum(adapter.steps)
