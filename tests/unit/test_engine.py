"""The engine with a fake adapter: batching, reassembly, OOM survival, failures, cancel, priorities, memory."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from tests.fakes import FakeAdapter, FakeMemoryProbe, fake_audio, fake_facts
from tts_app.audio.post import join_segments
from tts_app.config import EngineConfig
from tts_app.engine import Engine, ProgressEvent
from tts_app.errors import InputError
from tts_app.request import Priority, ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")
LONG_TEXT = ("The quick brown fox jumps over the lazy dog. " * 3 + "Pack my box with five dozen liquor jugs! "
             + "How vexingly quick daft zebras jump. " * 2 + "Sphinx of black quartz, judge my vow.")


def texts(n: int) -> list[str]:
    return [f"Request number {i} says " + "hello there, " * (1 + i % 5) + "goodbye." for i in range(n)]


def run_all(engine: Engine, requests: list[SynthesisRequest]):
    handles = [engine.submit(r) for r in requests]
    engine.start()
    return [h.result(timeout=60) for h in handles]


def make_requests(strings, **params) -> list[SynthesisRequest]:
    p = SynthesisParams(seed=11, greedy=True, **params)
    return [SynthesisRequest(text=t, reference_audio=REF, params=p) for t in strings]


def expected_audio(result, seed: int, pause_ms: int = 200) -> np.ndarray:
    """What the request's audio must be: each segment's fake audio (seed + index), joined with the pauses."""
    waves = [fake_audio(s.text, seed + s.index, REF.samples) for s in result.segments]
    pauses = [pause_ms] * (len(waves) - 1) + [0]
    return join_segments(waves, pauses, 16000)[0]


def test_oom_survival_20_requests_same_audio_cap_shrinks_and_grows_and_engine_keeps_serving():
    strings = texts(20)
    baseline_engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=8, wait_window_ms=0))
    baseline = run_all(baseline_engine, make_requests(strings))
    baseline_engine.shutdown()

    probe = FakeMemoryProbe(available_bytes=None)
    engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=8, simulate_oom_above_batch=2,
                                                grow_after_successes=2, wait_window_ms=0), memory_probe=probe)
    results = run_all(engine, make_requests(strings))

    assert [r.status for r in results] == [RequestStatus.DONE] * 20
    for got, want in zip(results, baseline):
        np.testing.assert_array_equal(got.audio, want.audio)
    stats = engine.stats()
    history = engine.batch_cap.history
    assert stats.num_oom >= 2 and history[:3] == [8, 4, 2]
    assert 3 in history[3:], f"cap never grew back: {history}"
    assert stats.num_cap_shrinks >= 2 and stats.num_cap_grows >= 1
    assert probe.num_empty_cache >= stats.num_oom  # cache freed after every OOM
    assert max(b for b in engine.adapter.calls) <= 2  # no batch above 2 rows reached the model

    late = engine.submit(make_requests(["Still here after all that."])[0]).result(timeout=30)
    assert late.ok and len(late.audio) > 0
    engine.shutdown()


def test_random_simulated_oom_gives_the_same_audio():
    strings = texts(12)
    base = Engine(FakeAdapter(), EngineConfig(max_batch_size=4, wait_window_ms=0))
    want = run_all(base, make_requests(strings))
    base.shutdown()
    engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=4, simulate_oom_probability=0.5, wait_window_ms=0))
    got = run_all(engine, make_requests(strings))
    assert engine.stats().num_oom > 0
    assert all(g.ok for g in got)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.audio, w.audio)
    engine.shutdown()


def test_long_text_is_segmented_batched_and_reassembled_in_order():
    results = {}
    for batch_size in (1, 4):
        engine = Engine(FakeAdapter(fake_facts(max_segment_chars=50)),
                        EngineConfig(max_batch_size=batch_size, wait_window_ms=0))
        (results[batch_size],) = run_all(engine, make_requests([LONG_TEXT]))
        engine.shutdown()
    one, four = results[1], results[4]
    assert one.ok and four.ok and len(four.segments) >= 4
    np.testing.assert_array_equal(one.audio, four.audio)
    assert max(s.batch_size for s in four.segments) > 1 and max(s.batch_size for s in one.segments) == 1
    np.testing.assert_array_equal(four.audio, expected_audio(four, seed=11))
    # timings tile the audio in order, separated by the pauses
    assert four.segments[0].start_s == 0.0
    for a, b in zip(four.segments, four.segments[1:]):
        assert b.start_s == pytest.approx(a.end_s + 0.2)
    assert four.segments[-1].end_s == pytest.approx(four.duration_s)
    assert "".join(s.text for s in four.segments).replace(" ", "") == LONG_TEXT.replace(" ", "")


def test_a_two_sentence_text_is_one_generation_and_a_long_one_as_few_as_fit():
    """Sentences are packed up to the model's limit, as each family's upstream tool speaks a text: "Hello there.
    This is a short test of the speech engine." is one generation (it was two, seeds 11 and 12)."""
    adapter = FakeAdapter(fake_facts(max_segment_chars=60))
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0))
    short, long = run_all(engine, make_requests(["Hello there. This is a short test of the speech engine.",
                                                  LONG_TEXT]))
    engine.shutdown()
    assert [s.text for s in short.segments] == ["Hello there. This is a short test of the speech engine."]
    np.testing.assert_array_equal(short.audio, fake_audio(short.segments[0].text, 11, REF.samples))
    # the long text: fewest segments within 60 characters, never two consecutive ones that would fit together
    texts_ = [s.text for s in long.segments]
    assert all(len(t) <= 60 for t in texts_) and len(texts_) >= 3
    assert all(len(a) + 1 + len(b) > 60 for a, b in zip(texts_, texts_[1:]))
    assert max(s.batch_size for s in long.segments) > 1  # its segments still batch


def test_the_requests_max_segment_chars_replaces_the_models_limit_and_0_means_the_models():
    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=60)), EngineConfig(max_batch_size=4, wait_window_ms=0))
    capped, zero, unset = run_all(engine, [make_requests([LONG_TEXT], max_segment_chars=30)[0],
                                           make_requests([LONG_TEXT], max_segment_chars=0)[0],
                                           make_requests([LONG_TEXT])[0]])
    engine.shutdown()
    assert all(len(s.text) <= 30 for s in capped.segments) and len(capped.segments) > len(unset.segments)
    assert [s.text for s in zero.segments] == [s.text for s in unset.segments]


def test_segments_of_many_requests_share_batches():
    adapter = FakeAdapter()
    engine = Engine(adapter, EngineConfig(max_batch_size=8, wait_window_ms=0))
    results = run_all(engine, make_requests([f"Short request {i}." for i in range(8)]))
    assert all(r.ok for r in results) and all(len(r.segments) == 1 for r in results)
    assert adapter.calls == [8]
    assert all(s.batch_size == 8 for r in results for s in r.segments)
    engine.shutdown()


def test_progress_events_count_up_to_the_total():
    events: list[ProgressEvent] = []
    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=50)), EngineConfig(max_batch_size=2, wait_window_ms=0))
    handle = engine.submit(make_requests([LONG_TEXT])[0], on_progress=events.append)
    engine.start()
    result = handle.result(timeout=30)
    total = len(result.segments)
    assert [e.segments_done for e in events] == sorted(e.segments_done for e in events)
    assert events[-1].segments_done == total and all(e.segments_total == total for e in events)
    assert events[0].segments_done == 0 and events[0].batch_size == 0  # the count is known at submit
    assert all(1 <= e.batch_size <= 2 for e in events[1:]) and events[0].request_id == handle.request_id
    engine.shutdown()


def test_unexpected_exception_fails_only_that_batch_and_the_worker_keeps_serving():
    def boom(rows):
        return ValueError("kaput") if any("boom" in r.text for r in rows) else None

    engine = Engine(FakeAdapter(raise_if=boom), EngineConfig(max_batch_size=4, wait_window_ms=0))
    bad = SynthesisRequest(text="This goes boom.", reference_audio=REF, params=SynthesisParams(greedy=False))
    good = make_requests(["This is fine.", "This too."])
    results = run_all(engine, [bad] + good)
    assert results[0].status is RequestStatus.FAILED and "kaput" in results[0].error
    assert all(r.ok for r in results[1:])
    assert engine.submit(make_requests(["And later."])[0]).result(timeout=30).ok
    engine.shutdown()


def test_real_oom_at_batch_one_fails_only_that_request():
    def oom_if_huge(rows):
        if any("huge" in r.text for r in rows):
            return torch.OutOfMemoryError("CUDA out of memory (fake)")
        return None

    probe = FakeMemoryProbe(available_bytes=None)
    engine = Engine(FakeAdapter(raise_if=oom_if_huge), EngineConfig(max_batch_size=4, wait_window_ms=0),
                    memory_probe=probe)
    results = run_all(engine, make_requests(["A small one.", "A huge one.", "Another small one.", "Third."]))
    statuses = [r.status for r in results]
    assert statuses == [RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.DONE, RequestStatus.DONE]
    assert "out of memory" in results[1].error
    assert engine.stats().num_oom >= 2 and probe.num_empty_cache >= 2
    engine.shutdown()


def test_oom_is_recognised_by_type_only():
    def fake_message(rows):
        return RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")

    engine = Engine(FakeAdapter(raise_if=fake_message), EngineConfig(max_batch_size=4, wait_window_ms=0))
    results = run_all(engine, make_requests(["one.", "two."]))
    assert all(r.status is RequestStatus.FAILED for r in results)
    assert engine.stats().num_oom == 0 and engine.batch_cap.cap == 4
    engine.shutdown()


def test_cancel_removes_queued_segments():
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=1, wait_window_ms=0)).start()
    first = engine.submit(make_requests(["First request."])[0])
    assert adapter.entered.wait(10)
    second = engine.submit(make_requests(["Second request, to be cancelled."])[0])
    assert engine.stats().queue_depth == 1
    assert second.cancel() is True
    assert engine.stats().queue_depth == 0
    gate.set()
    assert first.result(timeout=30).ok
    cancelled = second.result(timeout=30)
    assert cancelled.status is RequestStatus.CANCELLED and cancelled.error
    assert second.cancel() is False
    assert all("cancelled" not in t for b in adapter.batches for t in b)
    engine.shutdown()


def test_interactive_requests_overtake_queued_job_segments():
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=2, wait_window_ms=0)).start()
    engine.submit(make_requests(["Warm up."])[0])
    assert adapter.entered.wait(10)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    jobs = [SynthesisRequest(text=f"Job line {w}.", reference_audio=REF, priority=Priority.JOB,
                             params=SynthesisParams(greedy=True)) for w in words]
    job_handles = [engine.submit(r) for r in jobs]
    ui = engine.submit(SynthesisRequest(text="Interactive!", reference_audio=REF, priority=Priority.INTERACTIVE,
                                        params=SynthesisParams(greedy=True)))
    gate.set()
    assert ui.result(timeout=30).ok and all(h.result(timeout=30).ok for h in job_handles)
    order = [t for b in adapter.batches for t in b]
    assert order.index("Interactive!") < order.index("Job line bravo.")
    engine.shutdown()


def test_bad_requests_come_back_failed_never_raised():
    engine = Engine(FakeAdapter(), EngineConfig(wait_window_ms=0))
    empty = engine.submit(SynthesisRequest(text="   ", reference_audio=REF)).result(timeout=5)
    assert empty.status is RequestStatus.FAILED and empty.error
    wrong_rate = ReferenceAudio(samples=np.zeros(8000, np.float32), sampling_rate=8000)
    bad_ref = engine.submit(SynthesisRequest(text="Hello.", reference_audio=wrong_rate)).result(timeout=5)
    assert bad_ref.status is RequestStatus.FAILED and "16000 Hz" in bad_ref.error
    engine.shutdown()


def test_row_that_cannot_fit_the_budget_fails_up_front_saying_how_long_the_text_may_be():
    facts = fake_facts(text_positions_per_char=1.0, default_max_new_tokens=100, max_segment_chars=2000)
    est_row = lambda chars: (chars + 100 + 8 + 10) * facts.kv_bytes_per_position + 1000  # noqa: E731
    budget = est_row(300)  # one row of up to ~300 characters (plus 1 s reference = 10 positions) fits
    adapter = FakeAdapter(facts)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, memory_budget_bytes=budget, activation_bytes_per_row=1000,
                                          wait_window_ms=0))
    short, long_ = make_requests(["Short enough.", "x" * 1000])
    results = run_all(engine, [short, long_])
    assert results[0].ok
    assert results[1].status is RequestStatus.FAILED
    assert "out of memory" in results[1].error and "at most 300 characters" in results[1].error
    assert all(len(t) < 1000 for b in adapter.batches for t in b)
    engine.shutdown()


def test_batches_never_exceed_the_memory_budget():
    facts = fake_facts(default_max_new_tokens=50)
    probe = FakeMemoryProbe(available_bytes=10**9)
    engine = Engine(FakeAdapter(facts), EngineConfig(max_batch_size=8, memory_budget_bytes=None,
                                                     memory_utilization=1.0, safety_margin_bytes=0,
                                                     activation_bytes_per_row=100_000, wait_window_ms=0),
                    memory_probe=probe)
    row = engine.estimator.row_bytes(200)
    probe.set_available(3 * row)  # about three rows
    engine._budget_bytes = engine._measure_budget()
    results = run_all(engine, make_requests(texts(10)))
    assert all(r.ok for r in results)
    assert engine.stats().memory_budget_bytes == 3 * row
    assert max(engine.adapter.calls) <= 3 and engine.stats().num_oom == 0
    engine.shutdown()


def test_stats_and_settings():
    probe = FakeMemoryProbe(available_bytes=8 * 1024**3, total_bytes=16 * 1024**3)
    engine = Engine(FakeAdapter(device="cuda:0"), EngineConfig(max_batch_size=8, memory_utilization=0.5,
                                                               safety_margin_bytes=1024**3), memory_probe=probe)
    stats = engine.stats()
    assert stats.memory_budget_bytes == 3 * 1024**3 and stats.device == "cuda:0"
    assert stats.device_total_bytes == 16 * 1024**3 and stats.default_row_bytes > 0
    assert stats.max_rows_in_budget == stats.memory_budget_bytes // stats.default_row_bytes
    assert engine.sampling_rate == 16000 and engine.facts.family == "fake"
    request = make_requests(["Hello. " * 40])[0]
    assert engine.estimate_request_bytes(request) > engine.estimate_request_bytes(make_requests(["Hi."])[0])
    engine.set_max_batch_size(2)
    assert engine.stats().max_batch_size == 2 and engine.stats().batch_cap == 2
    with pytest.raises(InputError, match="max batch size"):
        engine.set_max_batch_size(0)
    results = run_all(engine, make_requests(texts(5)))
    assert all(r.ok for r in results) and max(engine.adapter.calls) <= 2
    engine.shutdown()


def test_shutdown_cancels_unfinished_requests():
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=1, wait_window_ms=0)).start()
    running = engine.submit(make_requests(["Running."])[0])
    assert adapter.entered.wait(10)
    queued = engine.submit(make_requests(["Queued."])[0])
    stopper = threading.Thread(target=engine.shutdown)
    stopper.start()
    gate.set()
    stopper.join(30)
    assert running.result(timeout=5).ok
    assert queued.result(timeout=5).status is RequestStatus.CANCELLED
    late = engine.submit(make_requests(["Too late."])[0]).result(timeout=5)
    assert late.status is RequestStatus.FAILED and "shut down" in late.error


def test_shutdown_returns_after_the_worker_thread_has_ended_and_exit_joins_forgotten_engines():
    from tts_app.engine import front

    engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=2, wait_window_ms=0)).start()
    assert engine.submit(make_requests(["Hello."])[0]).result(timeout=30).ok
    thread = engine._thread
    engine.shutdown()
    assert not thread.is_alive() and engine not in front._LIVE_ENGINES
    # An engine its caller never shut down is joined by the atexit hook, before the interpreter finalises.
    forgotten = Engine(FakeAdapter(), EngineConfig(wait_window_ms=0)).start()
    assert forgotten in front._LIVE_ENGINES
    front._shutdown_live_engines()
    assert not forgotten._thread.is_alive() and forgotten not in front._LIVE_ENGINES


def test_concurrent_submitters_each_get_their_own_audio():
    engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=4, wait_window_ms=20)).start()
    strings = texts(12)
    results: dict[int, object] = {}

    def caller(i):
        results[i] = engine.submit(make_requests([strings[i]])[0]).result(timeout=60)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(12):
        assert results[i].ok
        np.testing.assert_array_equal(results[i].audio, expected_audio(results[i], seed=11))
    assert max(engine.adapter.calls) > 1  # the wait window let concurrent requests share batches
    engine.shutdown()


def test_adapter_refusal_comes_back_as_its_own_message():
    def refuse(rows):
        return InputError("max_new_tokens=8 is too small for this model; use at least 17")

    engine = Engine(FakeAdapter(raise_if=refuse), EngineConfig(max_batch_size=4, wait_window_ms=0))
    (result,) = run_all(engine, make_requests(["Hello."]))
    assert result.status is RequestStatus.FAILED
    assert result.error == "max_new_tokens=8 is too small for this model; use at least 17"
    engine.shutdown()


def test_device_cache_is_emptied_when_idle_not_after_every_batch():
    probe = FakeMemoryProbe(available_bytes=None)
    engine = Engine(FakeAdapter(), EngineConfig(max_batch_size=1, wait_window_ms=0, empty_cache_when_idle_s=0.3),
                    memory_probe=probe)
    results = run_all(engine, make_requests([f"Sentence {w}." for w in ("one", "two", "three", "four")]))
    assert all(r.ok for r in results) and engine.stats().num_batches == 4
    assert probe.num_empty_cache == 0  # four batches back to back: no empty_cache between them
    deadline = time.monotonic() + 10
    while probe.num_empty_cache == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert probe.num_empty_cache == 1  # once, after the idle period
    time.sleep(0.5)
    assert probe.num_empty_cache == 1  # and not again while nothing ran
    engine.shutdown()


def test_segment_without_audio_is_flagged_in_warnings():
    class Mute(FakeAdapter):
        def postprocess(self, outputs, inputs):
            return [np.zeros(0, np.float32) if "mute" in r.text else fake_audio(r.text, r.seed, r.reference_audio)
                    for r in outputs["rows"]]

    engine = Engine(Mute(fake_facts(max_segment_chars=30)), EngineConfig(wait_window_ms=0))
    (result,) = run_all(engine, make_requests(["This sentence speaks fine. This one is mute, sadly."]))
    assert result.ok and len(result.segments) == 2
    assert len(result.warnings) == 1 and "segment 2" in result.warnings[0] and "no audio" in result.warnings[0]
    engine.shutdown()


def test_a_crash_of_the_worker_loop_fails_requests_instead_of_hanging(monkeypatch):
    engine = Engine(FakeAdapter(), EngineConfig(wait_window_ms=0))
    handle = engine.submit(make_requests(["Hello."])[0])

    def broken(*args, **kwargs):
        raise KeyError("scheduler bug")

    monkeypatch.setattr(engine.scheduler, "schedule", broken)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the re-raised crash is expected here
    engine.start()
    result = handle.result(timeout=10)
    assert result.status is RequestStatus.FAILED and "crashed" in result.error and "scheduler bug" in result.error
    late = engine.submit(make_requests(["Later."])[0]).result(timeout=5)
    assert late.status is RequestStatus.FAILED and "crashed" in late.error
    engine.shutdown()


@settings(max_examples=15, deadline=None)
@given(
    specs=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.sampled_from(list(Priority)), st.booleans()),
                   min_size=1, max_size=12),
    max_batch_size=st.integers(1, 6),
    oom_probability=st.sampled_from([0.0, 0.3, 0.7]),
)
def test_random_mixes_of_requests_all_finish_with_their_own_audio(specs, max_batch_size, oom_probability):
    """Any mix of lengths, batch keys, priorities and cancellations, with random simulated OOM: every request that
    was not cancelled is DONE with exactly its own audio (segment i: seed + i), and the queue ends empty."""
    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=30)),
                    EngineConfig(max_batch_size=max_batch_size, simulate_oom_probability=oom_probability,
                                 wait_window_ms=0))
    handles = []
    for i, (num_sentences, greedy, priority, cancel) in enumerate(specs):
        text = f"Request {i} starts here. " + " ".join(f"Sentence {j} of it." for j in range(num_sentences))
        request = SynthesisRequest(text=text, reference_audio=REF, priority=priority,
                                   params=SynthesisParams(seed=100 * i, greedy=greedy))
        handles.append((engine.submit(request), cancel, 100 * i))
    for handle, cancel, _ in handles:
        if cancel:
            assert handle.cancel()
    engine.start()
    for handle, cancel, seed in handles:
        result = handle.result(timeout=60)
        if cancel:
            assert result.status is RequestStatus.CANCELLED
        else:
            assert result.ok, result.error
            np.testing.assert_array_equal(result.audio, expected_audio(result, seed))
    assert engine.stats().queue_depth == 0
    engine.shutdown()


def test_cancel_while_running_returns_at_once_and_the_engine_goes_on():
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    engine = Engine(adapter, EngineConfig(max_batch_size=2, wait_window_ms=0)).start()
    running = engine.submit(make_requests(["Being generated right now."])[0])
    assert adapter.entered.wait(10)
    assert running.cancel() is True
    assert running.result(timeout=1).status is RequestStatus.CANCELLED  # no need to wait for the batch
    gate.set()
    assert engine.submit(make_requests(["Next one."])[0]).result(timeout=30).ok
    stats = engine.stats()
    assert stats.num_requests_cancelled == 1 and stats.num_requests_done == 1 and stats.num_requests_active == 0
    engine.shutdown()


def test_a_batch_that_peaks_above_its_estimate_teaches_the_estimator():
    probe = FakeMemoryProbe(available_bytes=10**12, allocated_bytes=10**9)
    facts = fake_facts(default_max_new_tokens=50)
    engine = Engine(FakeAdapter(facts, raise_if=lambda rows: probe.allocate(len(rows) * 3 * 10**8)),
                    EngineConfig(max_batch_size=2, wait_window_ms=0), memory_probe=probe)
    before = engine.stats().default_row_bytes
    strings = ["One row here.", "Another row."]
    results = run_all(engine, make_requests(strings))
    assert all(r.ok for r in results) and engine.adapter.calls == [2]
    after = engine.stats().default_row_bytes
    positions = [engine.adapter.estimate_positions(len(t), REF.duration_s, 0, 50) for t in strings]
    assert after > before and engine.estimator.batch_bytes(positions) >= 2 * 3 * 10**8
    engine.shutdown()


def test_segment_timings_show_what_the_user_wrote_not_the_models_stand_ins():
    # A characters-only model gets a homophone for an overridden polyphone; subtitles must keep the user's text.
    adapter = FakeAdapter()
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0))
    [result] = run_all(engine, [SynthesisRequest(text="他去银行(yin2 hang2)取钱。", reference_audio=REF,
                                                 params=SynthesisParams(greedy=True))])
    engine.shutdown()
    assert result.ok
    model_text = "".join(t for batch in adapter.batches for t in batch)
    shown = "".join(s.text for s in result.segments)
    assert "银行" in shown and "(" not in shown
    assert "银行" not in model_text  # the model read a stand-in for 行 (hang2)


def test_a_row_the_adapter_refuses_fails_alone_and_its_batch_mates_succeed():
    from tts_app.errors import InputError as AdapterInputError

    def refuse_bad(rows):
        bad = [r for r in rows if "broken" in r.text]
        return AdapterInputError("this row needs a transcript") if bad else None

    adapter = FakeAdapter(raise_if=refuse_bad)
    engine = Engine(adapter, EngineConfig(max_batch_size=8, wait_window_ms=0))
    requests = make_requests(["Good one.", "This broken request.", "Another good one."])
    results = run_all(engine, requests)
    engine.shutdown()
    assert [r.status for r in results] == [RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.DONE]
    assert "transcript" in results[1].error
    assert max(adapter.calls) == 3  # they did share a batch first, then were isolated


def test_a_segment_cut_at_its_cap_is_named_in_the_warnings_and_its_timing():
    adapter = FakeAdapter(fake_facts(max_segment_chars=30, frames_per_second=12.5),
                          cap_if=lambda row: "long" in row.text)
    engine = Engine(adapter, EngineConfig(wait_window_ms=0))
    (result,) = run_all(engine, make_requests(["This sentence speaks fine. This one is long, sadly. Short again."],
                                              max_new_tokens=125))
    assert result.ok and len(result.segments) == 3
    assert [s.hit_max_new_tokens for s in result.segments] == [False, True, False]
    assert all(s.max_new_tokens == 125 for s in result.segments)
    (warning,) = result.warnings
    audio_s = result.segments[1].end_s - result.segments[1].start_s
    assert warning.startswith(f"segment 2 ('This one is long, sadly.') hit the {round(audio_s, 1):g} s cap")
    assert "shorten it" in warning and "raise max_new_tokens" in warning
    # a Chinese page shows it in Chinese (it was an English-only string among the translated warnings)
    assert warning.render("zh").startswith(f"第 2 段（'This one is long, sadly.'）达到了 {round(audio_s, 1):g} 秒的上限")
    engine.shutdown()


@pytest.mark.parametrize("languages, text, expected", [
    (("en",), "你好，世界。今天天气很好。", "the text is in Chinese (zh), but Fake was trained on English (en) only"),
    (("en",), "Hello there, my friend. 我们今天去公园散步吧。 Goodbye now.", "segment 2 is in Chinese (zh)"),
    (("zh",), "Hello there.", "the text is in English (en), but Fake was trained on Chinese (zh) only"),
])
def test_text_in_a_language_the_model_was_not_trained_on_gets_a_warning(languages, text, expected):
    engine = Engine(FakeAdapter(fake_facts(languages=languages, max_segment_chars=30)), EngineConfig(wait_window_ms=0))
    (result,) = run_all(engine, make_requests([text]))
    assert result.ok  # a warning, not a refusal
    (warning,) = result.warnings
    assert expected in warning and "garbled" in warning
    engine.shutdown()


def test_text_in_a_trained_language_gets_no_language_warning():
    engine = Engine(FakeAdapter(fake_facts(languages=("en", "zh"), max_segment_chars=30)),
                    EngineConfig(wait_window_ms=0))
    (result,) = run_all(engine, make_requests(["Hello there. 你好，世界。 2024!"]))
    assert result.ok and result.warnings == []
    engine.shutdown()


def test_knobs_not_given_run_as_the_checkpoint_defaults_and_share_a_batch_with_them():
    adapter = FakeAdapter()
    engine = Engine(adapter, EngineConfig(wait_window_ms=0))
    defaults = adapter.facts.generation_defaults
    left_out = SynthesisRequest(text="Hello.", reference_audio=REF, params=SynthesisParams(seed=1))
    spelled_out = SynthesisRequest(text="Hello.", reference_audio=REF, params=SynthesisParams(
        seed=2, greedy=defaults.greedy, temperature=defaults.temperature, top_p=defaults.top_p, top_k=defaults.top_k,
        max_new_tokens=defaults.max_new_tokens))
    results = run_all(engine, [left_out, spelled_out])
    assert adapter.calls == [2]  # one batch: "not given" resolved to the same knobs
    ran = adapter.params_seen[0]
    assert (ran.greedy, ran.temperature, ran.top_p, ran.top_k, ran.max_new_tokens) == (
        defaults.greedy, defaults.temperature, defaults.top_p, defaults.top_k, defaults.max_new_tokens)
    assert results[0].effective_params == defaults.resolve(left_out.params)
    engine.shutdown()


def test_characters_the_model_cannot_encode_reach_it_as_homophones_with_a_warning():
    """The engine asks the adapter which characters its tokenizer maps to <unk> (囧 here) and the front end sends a
    homophone it can encode instead, saying so; a tag the model does not declare is stripped with a warning."""
    adapter = FakeAdapter(unencodable=frozenset("囧"))
    engine = Engine(adapter, EngineConfig(max_batch_size=1, wait_window_ms=0))
    (result,) = run_all(engine, make_requests(["今天真囧[laugh]。"]))
    engine.shutdown()
    assert result.ok
    (batch,) = adapter.batches
    assert batch == ["今天真窘。"]  # 囧 jiong3 -> 窘 jiong3; [laugh] removed
    assert any("囧" in w and "窘" in w for w in result.warnings)
    assert any("[laugh]" in w for w in result.warnings)
    assert result.segments[0].text == "今天真囧。"  # subtitles show what the user wrote


def test_emotion_control_is_refused_by_a_family_without_it_and_reaches_rows_of_one_with_it():
    from tts_app.request import EmotionControl

    plain = Engine(FakeAdapter(), EngineConfig(wait_window_ms=0))
    request = SynthesisRequest(text="Hello.", reference_audio=REF,
                               emotion=EmotionControl(vector=(0.5, 0, 0, 0, 0, 0, 0, 0)))
    result = plain.submit(request).result(timeout=5)
    assert result.status is RequestStatus.FAILED and "emotion control" in result.error
    assert "IndexTTS 2" in result.error and "remove the emotion settings" in result.error
    plain.shutdown()

    seen = []

    def record(rows):
        seen.extend(r.emotion for r in rows)
        return None

    no_text_model = fake_facts(supports_emotion=True, supports_emotion_text=False)
    engine = Engine(FakeAdapter(no_text_model, raise_if=record), EngineConfig(wait_window_ms=0))
    from_text = engine.submit(SynthesisRequest(text="Hello.", reference_audio=REF,
                                               emotion=EmotionControl(from_text=True))).result(timeout=5)
    assert from_text.status is RequestStatus.FAILED and "emotion model" in from_text.error
    wrong_rate = ReferenceAudio(samples=np.zeros(8000, np.float32), sampling_rate=8000)
    bad_clip = engine.submit(SynthesisRequest(text="Hello.", reference_audio=REF,
                                              emotion=EmotionControl(reference_audio=wrong_rate))).result(timeout=5)
    assert bad_clip.status is RequestStatus.FAILED and "emotion reference audio is at 8000 Hz" in bad_clip.error
    clip = ReferenceAudio(samples=np.full(16000, 0.1, np.float32), sampling_rate=16000)
    [ok] = run_all(engine, [SynthesisRequest(text="First sentence here. Second one.", reference_audio=REF,
                                             params=SynthesisParams(max_segment_chars=20),
                                             emotion=EmotionControl(reference_audio=clip, weight=0.4))])
    engine.shutdown()
    assert ok.ok and len(seen) == len(ok.segments) >= 2
    assert all(e.weight == 0.4 and e.text is None and np.array_equal(e.reference_audio, clip.samples) for e in seen)


def test_emotion_from_text_reads_the_whole_request_text_unless_given_its_own():
    from tts_app.request import EmotionControl

    seen = []
    facts = fake_facts(supports_emotion=True, supports_emotion_text=True)
    engine = Engine(FakeAdapter(facts, raise_if=lambda rows: seen.extend(r.emotion for r in rows)),
                    EngineConfig(wait_window_ms=0))
    text = "I am so happy today. Nothing can go wrong."
    run_all(engine, [SynthesisRequest(text=text, reference_audio=REF, params=SynthesisParams(max_segment_chars=24),
                                      emotion=EmotionControl(from_text=True)),
                     SynthesisRequest(text="Fine.", reference_audio=REF,
                                      emotion=EmotionControl(from_text=True, text="angry words"))])
    engine.shutdown()
    assert sorted({e.text for e in seen}) == sorted({text, "angry words"})
    assert len(seen) >= 3  # the long request's segments all carry its whole text


def test_a_failing_row_of_a_batch_of_three_logs_one_traceback_under_its_request_id(caplog):
    """Issue 14 item 9: a failure is logged once, with its traceback and the request id the user is shown; the
    batch-level event is one line without a traceback."""
    import logging

    def boom(rows):
        return ValueError("kaput") if any("boom" in r.text for r in rows) else None

    adapter = FakeAdapter(raise_if=boom)
    engine = Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=0))
    requests = make_requests(["This is fine.", "This goes boom.", "This too."])
    with caplog.at_level(logging.INFO, logger="tts_app"):
        results = run_all(engine, requests)
    engine.shutdown()
    assert [r.status for r in results] == [RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.DONE]
    assert adapter.calls[0] == 3  # they shared a batch, then ran alone
    bad_id = requests[1].request_id
    assert results[1].request_id == bad_id and "kaput" in results[1].error
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    assert bad_id in tracebacks[0].getMessage() and "kaput" in caplog.text
    assert not any(requests[i].request_id in tracebacks[0].getMessage() for i in (0, 2))
    batch_lines = [r for r in caplog.records if "batch of 3 rows failed" in r.getMessage()]
    assert len(batch_lines) == 1 and not batch_lines[0].exc_info
