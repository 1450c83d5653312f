"""Scheduler policy on plain data: budget, bucketing, priorities, batch keys, wait window, batch cap."""

from __future__ import annotations

import random
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tts_app.engine.memory import MemoryEstimator
from tts_app.engine.scheduler import BatchCap, Scheduler, SegmentWork, padded_steps
from tts_app.speaking_rate import expected_speech_s
from tts_app.request import Priority

EST = MemoryEstimator(kv_bytes_per_position=1000, cfg_multiplier=1, activation_bytes_per_row=5000)


def seg(rid: str, index: int, steps: int, *, positions: int | None = None, priority=Priority.INTERACTIVE,
        key=("k",), arrival: float = 0.0) -> SegmentWork:
    return SegmentWork(request_id=rid, index=index, text="x" * steps, seed=index, batch_key=key, priority=priority,
                       expected_steps=steps, row_positions=positions if positions is not None else steps + 20,
                       arrival_s=arrival)


def drain(scheduler: Scheduler, cap: int, budget: int | None) -> list[list[SegmentWork]]:
    batches = []
    while scheduler.num_waiting:
        plan = scheduler.schedule(now_s=1e9, cap=cap, budget_bytes=budget)
        assert plan.batch or plan.too_large
        if plan.batch:
            batches.append(plan.batch)
    return batches


def test_scheduler_module_does_not_import_torch():
    code = "import sys, tts_app.engine.scheduler; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=40),
    cap=st.integers(min_value=1, max_value=16),
    budget_rows=st.floats(min_value=1.0, max_value=20.0),
)
def test_budget_never_exceeded_and_every_segment_is_scheduled_once(steps, cap, budget_rows):
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    segments = [seg(f"r{i}", 0, s) for i, s in enumerate(steps)]
    scheduler.add(segments)
    budget = int(budget_rows * EST.row_bytes(200))
    seen = []
    rejected = []
    while scheduler.num_waiting:
        plan = scheduler.schedule(now_s=1.0, cap=cap, budget_bytes=budget)
        if plan.batch:
            assert len(plan.batch) <= cap
            assert plan.estimated_bytes == EST.batch_bytes([s.row_positions for s in plan.batch])
            assert plan.estimated_bytes <= budget
            seen += plan.batch
        rejected += plan.too_large
        assert plan.batch or plan.too_large
    assert sorted(id(s) for s in seen + rejected) == sorted(id(s) for s in segments)
    # only rows that cannot fit alone are rejected
    assert all(EST.batch_bytes([s.row_positions]) > budget for s in rejected)
    assert all(EST.batch_bytes([s.row_positions]) <= budget for s in seen)


def test_bucketing_needs_fewer_decode_steps_than_fifo():
    rng = random.Random(7)
    # a mixed workload: short UI-like sentences and long paragraphs, interleaved in arrival order
    steps = [rng.choice([rng.randint(20, 60), rng.randint(300, 400)]) for _ in range(64)]

    def run(bucketing: bool) -> tuple[int, int]:
        scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, bucketing=bucketing)
        scheduler.add([seg(f"r{i}", 0, s) for i, s in enumerate(steps)])
        batches = drain(scheduler, cap=8, budget=None)
        total = sum(max(s.expected_steps for s in b) for b in batches)  # decode steps the device runs
        padded = sum(padded_steps(b) for b in batches)  # row-steps spent on padding
        return total, padded

    fifo_total, fifo_padded = run(False)
    bucket_total, bucket_padded = run(True)
    print(f"decode steps fifo={fifo_total} bucketed={bucket_total}; padded row-steps fifo={fifo_padded} "
          f"bucketed={bucket_padded}")
    assert bucket_padded < fifo_padded
    assert bucket_total < fifo_total


def test_interactive_segments_go_before_job_segments():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    jobs = [seg(f"job{i}", 0, 100, priority=Priority.JOB, arrival=0.0) for i in range(6)]
    ui = [seg(f"ui{i}", 0, 300, priority=Priority.INTERACTIVE, arrival=5.0) for i in range(3)]
    scheduler.add(jobs)
    scheduler.add(ui)
    first = scheduler.schedule(now_s=10.0, cap=2, budget_bytes=None).batch
    second = scheduler.schedule(now_s=10.0, cap=2, budget_bytes=None).batch
    assert {s.request_id for s in first} == {"ui0", "ui1"}
    # the last UI segment leaves room; a job segment no longer than it rides along
    assert second[0].request_id == "ui2" and second[1].priority is Priority.JOB
    rest = drain(scheduler, cap=2, budget=None)
    assert all(s.priority is Priority.JOB for b in rest for s in b)


def test_lower_priority_riders_never_lengthen_an_interactive_batch():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    scheduler.add([seg("job_long", 0, 400, priority=Priority.JOB), seg("job_short", 0, 30, priority=Priority.JOB)])
    scheduler.add([seg("ui", 0, 50, arrival=1.0)])
    batch = scheduler.schedule(now_s=10.0, cap=4, budget_bytes=None).batch
    assert {s.request_id for s in batch} == {"ui", "job_short"}


def test_segments_with_different_batch_keys_never_share_a_batch():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    scheduler.add([seg(f"a{i}", 0, 50, key=("greedy",)) for i in range(3)])
    scheduler.add([seg(f"b{i}", 0, 50, key=("sample",)) for i in range(3)])
    batches = drain(scheduler, cap=8, budget=None)
    assert len(batches) == 2
    for b in batches:
        assert len({s.batch_key for s in b}) == 1


def test_oldest_segment_is_always_in_the_next_batch():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    old = seg("old", 0, 390, arrival=0.0)
    scheduler.add([old])
    scheduler.add([seg(f"s{i}", 0, 20 + i, arrival=1.0) for i in range(10)])
    batch = scheduler.schedule(now_s=10.0, cap=4, budget_bytes=None).batch
    assert old in batch


def test_row_that_cannot_fit_alone_is_returned_as_too_large_not_raised():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    huge = seg("huge", 0, 50, positions=10_000)
    ok = seg("ok", 0, 50, positions=100)
    scheduler.add([huge, ok])
    budget = EST.batch_bytes([100]) * 2
    plan = scheduler.schedule(now_s=1.0, cap=4, budget_bytes=budget)
    assert plan.too_large == [huge]
    assert plan.batch == [ok]
    assert scheduler.num_waiting == 0


def test_wait_window_holds_a_partial_batch_then_releases_it():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.05)
    scheduler.add([seg("a", 0, 50, arrival=100.0)])
    plan = scheduler.schedule(now_s=100.01, cap=4, budget_bytes=None)
    assert not plan.batch and 0 < plan.wait_s <= 0.04 + 1e-9
    scheduler.add([seg("b", 0, 50, arrival=100.02)])
    plan = scheduler.schedule(now_s=100.06, cap=4, budget_bytes=None)
    assert {s.request_id for s in plan.batch} == {"a", "b"}


def test_full_batch_does_not_wait():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=10.0)
    scheduler.add([seg(f"r{i}", 0, 50, arrival=0.0) for i in range(4)])
    assert len(scheduler.schedule(now_s=0.0, cap=4, budget_bytes=None).batch) == 4


def test_remove_request_drops_its_segments():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    scheduler.add([seg("a", i, 50) for i in range(3)] + [seg("b", 0, 50)])
    assert scheduler.remove_request("a") == 3
    assert [s.request_id for b in drain(scheduler, 8, None) for s in b] == ["b"]


def test_batch_cap_halves_on_oom_and_grows_back_one_step_at_a_time():
    cap = BatchCap(8, grow_after_successes=2)
    assert cap.on_oom(8) == 4
    assert cap.on_oom(4) == 2
    assert cap.on_oom(3) == 2  # never above the current cap
    assert cap.on_success(1) == 2  # a batch smaller than the cap says nothing about larger ones
    assert cap.on_success(2) == 2
    assert cap.on_success(2) == 3
    cap.on_success(3)
    assert cap.on_success(3) == 4
    cap.set_max(8)  # the UI re-sends the same ceiling with every request: what OOM taught the cap survives
    assert cap.cap == 4
    cap.set_max(6)  # a cap below the old ceiling stays and grows back step by step
    assert cap.cap == 4
    cap.set_max(2)
    assert cap.cap == 2
    fresh = BatchCap(4)
    fresh.set_max(6)
    assert fresh.cap == 6


def test_expected_speech_orders_chinese_and_english_by_spoken_length():
    assert expected_speech_s("你好，世界。今天天气很好。") > expected_speech_s("Hello world.")
    assert expected_speech_s("a" * 100) > expected_speech_s("a" * 10)


# -- the update step: plain outcomes in, decisions out (no engine, no threads) ------------------------------------
from tts_app.engine.scheduler import Outcome, OutcomeKind, Phase  # noqa: E402
from tts_app.request import StopReason  # noqa: E402


def running_seg(rid: str, steps: int = 10, *, positions: int = 100, key=("k",), priority=Priority.INTERACTIVE,
                arrival: float = 0.0) -> SegmentWork:
    """A segment with a decode-step cap (``max_steps``), for continuous batching."""
    s = seg(rid, 0, steps, positions=positions, key=key, priority=priority, arrival=arrival)
    s.max_steps = steps
    return s


def admitted(scheduler: Scheduler, segments, budget=None) -> list[SegmentWork]:
    scheduler.add(segments)
    return scheduler.schedule_step(budget).admit


def test_a_batch_that_ran_finishes_its_rows_and_full_batches_grow_the_cap():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=4, grow_after_successes=2)
    scheduler.batch_cap.on_oom(4)  # cap 2
    rows = (seg("a", 0, 10), seg("b", 0, 10))
    for _ in range(2):
        update = scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.OK, rows, finished=tuple(
            (r, StopReason.END_OF_SPEECH) for r in rows)))
        assert [w for w, _ in update.finished] == list(rows) and not update.requeued and not update.failed
    assert update.cap == 3


def test_an_out_of_memory_batch_is_halved_and_requeued_and_a_lone_row_fails_with_a_fix():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    rows = tuple(seg(f"r{i}", 0, 10) for i in range(4))
    update = scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.OOM, rows))
    assert update.cap == 2 and update.requeued == list(rows) and scheduler.num_waiting == 4 and not update.failed
    lone = seg("alone", 0, 10)
    update = scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.OOM, (lone,)))
    ((work, message),) = update.failed
    assert work is lone and message.reason.value == "out_of_memory" and not update.requeued
    assert "max_segment_chars" in message.message and "max_segment_chars" in message.render("zh")


def test_refused_rows_are_retried_alone_and_only_the_row_at_fault_fails():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    rows = tuple(seg(f"r{i}", 0, 10) for i in range(3))
    update = scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.REFUSED, rows, error="bad reference"))
    assert update.requeued == list(rows) and all(r.isolate for r in rows) and not update.failed
    batches = drain(scheduler, cap=8, budget=None)
    assert [len(b) for b in batches] == [1, 1, 1]  # isolated rows never share a batch
    update = scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.REFUSED, (rows[1],), error="bad reference"))
    assert update.failed == [(rows[1], "bad reference")] and not update.requeued


def test_a_decode_step_out_of_memory_requeues_the_youngest_rows_and_keeps_the_rest_going():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    rows = [running_seg(f"r{i}", 50) for i in range(6)]
    assert admitted(scheduler, rows) == rows
    for _ in range(3):  # three good steps
        scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(rows)))
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OOM, tuple(rows)))
    assert update.cap == 3
    assert update.requeued == rows[3:] and update.release == rows[3:]  # the last admitted leave
    assert scheduler.running() == rows[:3] and all(r.steps_done == 3 for r in rows[:3])  # progress kept
    assert all(r.steps_done == 0 and r.num_restarts == 1 and r.admitted == -1 for r in rows[3:])
    assert sorted(s.request_id for s in scheduler.waiting()) == ["r3", "r4", "r5"]
    assert scheduler.schedule_step(None).admit == []  # the cap is full until rows end


def test_a_prefill_out_of_memory_sends_the_joining_rows_back_first():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    old = [running_seg(f"old{i}", 50) for i in range(3)]
    admitted(scheduler, old)
    new = [running_seg(f"new{i}", 50) for i in range(2)]
    assert admitted(scheduler, new) == new
    update = scheduler.update_from_output(Outcome(Phase.PREFILL, OutcomeKind.OOM, tuple(new)))
    assert update.cap == 3 and update.requeued == new and scheduler.running() == old


def test_a_lone_row_out_of_memory_in_a_step_fails_and_leaves_the_batch():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    (row,) = admitted(scheduler, [running_seg("solo", 20)])
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OOM, (row,)))
    assert [w for w, _ in update.failed] == [row] and update.release == [row] and scheduler.num_running == 0


def test_a_crashed_step_drops_the_batch_and_retries_every_row_alone():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    rows = admitted(scheduler, [running_seg(f"r{i}", 20) for i in range(3)])
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.CRASHED, tuple(rows), error="boom"))
    assert update.drop_running_batch and update.requeued == rows and not update.failed
    first = scheduler.schedule_step(None).admit
    assert len(first) == 1 and first[0].isolate
    assert scheduler.schedule_step(None).admit == []  # nothing joins an isolated row
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.CRASHED, tuple(first), error="boom"))
    assert update.failed == [(first[0], "boom")]


def test_finished_rows_leave_at_once_and_free_their_slot_for_a_waiting_row():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=2)
    a, b, c = (running_seg(x, 30) for x in "abc")
    assert admitted(scheduler, [a, b, c]) == [a, b]
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, (a, b),
                                                  finished=((b, StopReason.END_OF_SPEECH),)))
    assert update.finished == [(b, StopReason.END_OF_SPEECH)] and update.release == [b]
    assert a.steps_done == 1 and scheduler.running() == [a]
    assert scheduler.schedule_step(None).admit == [c]


def test_outcomes_for_rows_of_cancelled_requests_are_ignored():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    a, b = admitted(scheduler, [running_seg("a", 30), running_seg("b", 30)])
    scheduler.remove_request("b")
    assert scheduler.take_released() == [b] and scheduler.take_released() == []
    update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, (a, b),
                                                  finished=((b, StopReason.END_OF_SPEECH),)))
    assert update.finished == [] and scheduler.running() == [a]


def test_a_measured_peak_calibrates_the_estimate():
    seen = []
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, observe=lambda pos, peak: seen.append((pos, peak)))
    rows = (seg("a", 0, 10, positions=70),)
    scheduler.update_from_output(Outcome(Phase.BATCH, OutcomeKind.OK, rows, finished=((rows[0], StopReason.END_OF_SPEECH),),
                                         measured_peak_bytes=123_456))
    assert seen == [([70], 123_456)]


# -- continuous admission -----------------------------------------------------------------------------------------
def test_future_peak_counts_rows_leaving_as_they_reach_their_caps():
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0)
    short = running_seg("short", 10, positions=40)  # 30 prompt positions + 10 steps
    long = running_seg("long", 100, positions=120)  # 20 + 100
    short.steps_done = 5
    # now: short at 35 (5 to go), long at 20. At +5 both live: 2 x max(40, 25) = 80. At +100 only long: 120.
    assert scheduler.future_peak_bytes([short, long]) == 120
    long.row_positions = 40  # 20 + ... make long's end small: the peak is while both are live
    long.max_steps = 20
    assert scheduler.future_peak_bytes([short, long]) == 2 * 40


def test_admission_never_lets_the_rows_in_flight_outgrow_the_budget():
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=16)
    rows = [running_seg(f"r{i}", 50, positions=100) for i in range(8)]
    budget = 3 * 100  # three rows at their end
    assert admitted(scheduler, rows, budget) == rows[:3]
    for _ in range(49):
        scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running())))
        assert scheduler.schedule_step(budget).admit == []  # still no room until a row ends
    first = scheduler.running()[0]
    scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running()),
                                         finished=((first, StopReason.END_OF_SPEECH),)))
    assert scheduler.schedule_step(budget).admit == [rows[3]]


@settings(max_examples=60, deadline=None)
@given(caps=st.lists(st.integers(1, 60), min_size=1, max_size=24), budget_rows=st.floats(1.0, 6.0),
       seed=st.integers(0, 10_000))
def test_rows_admitted_continuously_never_exceed_the_budget_at_any_step(caps, budget_rows, seed):
    """Run random rows (random caps, random early ends) through schedule_step/update: the bytes held at every step
    (each live row at its current positions) stay within the budget, and every row runs exactly once."""
    rng = random.Random(seed)
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    rows = [running_seg(f"r{i}", c, positions=30 + c) for i, c in enumerate(caps)]
    budget = int(budget_rows * 100)
    scheduler.add(rows)
    done, refused = [], []
    for _ in range(10_000):
        plan = scheduler.schedule_step(budget)
        refused += plan.too_large
        live = scheduler.running()
        if not live and not scheduler.num_waiting:
            break
        assert est.batch_bytes([r.current_positions for r in live]) <= budget
        ends = tuple((r, StopReason.END_OF_SPEECH) for r in live
                     if r.steps_done + 1 >= r.max_steps or rng.random() < 0.05)
        update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(live), finished=ends))
        done += [w for w, _ in update.finished]
    assert sorted(id(r) for r in done + refused) == sorted(id(r) for r in rows)
    assert all(est.batch_bytes([r.row_positions]) > budget for r in refused)


def test_admission_goes_by_priority_then_age_and_drains_for_another_batch_key():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=3)
    job = running_seg("job", 30, priority=Priority.JOB, arrival=0.0)
    ui_old = running_seg("ui_old", 30, arrival=1.0)
    ui_new = running_seg("ui_new", 30, arrival=2.0)
    assert admitted(scheduler, [job, ui_new, ui_old]) == [ui_old, ui_new, job]
    scheduler2 = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    a = running_seg("a", 30, key=("k1",))
    assert admitted(scheduler2, [a]) == [a]
    other = running_seg("other", 30, key=("k2",), arrival=1.0)
    same = running_seg("same", 30, key=("k1",), arrival=2.0)
    # the oldest waiting row needs another key: nothing joins, the batch drains for it
    assert admitted(scheduler2, [other, same]) == []
    scheduler2.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, (a,), finished=((a, StopReason.END_OF_SPEECH),)))
    assert scheduler2.schedule_step(None).admit == [other]


def test_a_row_too_large_for_the_budget_alone_is_refused_wherever_it_waits():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0)
    small, huge = running_seg("small", 10, positions=50), running_seg("huge", 10, positions=100_000)
    scheduler.add([small, huge])
    plan = scheduler.schedule_step(EST.batch_bytes([50]) * 2)
    assert plan.too_large == [huge] and plan.admit == [small]


def test_an_interactive_row_takes_the_place_of_the_youngest_job_row_at_the_next_step():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=3)
    jobs = [running_seg(f"job{i}", 40, priority=Priority.JOB, arrival=float(i)) for i in range(5)]
    assert admitted(scheduler, jobs) == jobs[:3]  # the job fills the batch
    for _ in range(5):
        scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running())))
    ui = running_seg("ui", 20, arrival=10.0)
    scheduler.add([ui])
    plan = scheduler.schedule_step(None)
    assert plan.admit == [ui] and plan.preempted == [jobs[2]]  # the last admitted job row makes room
    assert scheduler.running() == [jobs[0], jobs[1], ui]
    assert all(r.steps_done == 5 for r in jobs[:2])  # the other job rows keep their progress
    victim = jobs[2]
    assert victim.steps_done == 0 and victim.num_restarts == 1 and victim in scheduler.waiting()
    # the preempted row comes back in its old place in the queue (before the job rows that arrived after it)
    scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running()),
                                         finished=((ui, StopReason.END_OF_SPEECH),)))
    assert scheduler.schedule_step(None).admit == [victim]


def test_without_preemption_an_interactive_row_waits_for_a_free_slot():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=2, preempt=False)
    jobs = [running_seg(f"job{i}", 40, priority=Priority.JOB) for i in range(2)]
    assert admitted(scheduler, jobs) == jobs
    scheduler.add([running_seg("ui", 20, arrival=1.0)])
    plan = scheduler.schedule_step(None)
    assert plan.admit == [] and plan.preempted == [] and scheduler.running() == jobs


def test_preemption_never_takes_rows_of_the_same_priority_and_only_as_many_as_needed():
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=2)
    uis = [running_seg(f"ui{i}", 40) for i in range(2)]
    assert admitted(scheduler, uis) == uis
    scheduler.add([running_seg("ui-late", 40, arrival=1.0)])
    plan = scheduler.schedule_step(None)
    assert plan.admit == [] and plan.preempted == []  # interactive rows are never preempted
    # the budget binds (a batch holds rows x its longest row): a longer interactive row needs two job rows to leave,
    # not the third
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    jobs = [running_seg(f"job{i}", 10, positions=100, priority=Priority.JOB) for i in range(3)]
    budget = 300
    assert admitted(scheduler, jobs, budget) == jobs
    big = running_seg("big", 10, positions=150, arrival=1.0)
    scheduler.add([big])
    plan = scheduler.schedule_step(budget)
    assert plan.admit == [big] and plan.preempted == [jobs[2], jobs[1]]
    assert scheduler.running() == [jobs[0], big]
    assert sorted(r.request_id for r in scheduler.waiting()) == ["job1", "job2"]
    # a row that would not fit even with every job row gone preempts nobody
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=8)
    assert admitted(scheduler, [running_seg("ui", 10, positions=150), running_seg("job", 10, positions=100,
                                                                                 priority=Priority.JOB)], 300)
    scheduler.add([running_seg("ui2", 10, positions=200, arrival=1.0)])
    plan = scheduler.schedule_step(300)
    assert plan.admit == [] and plan.preempted == [] and len(scheduler.running()) == 2


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 40), st.booleans(), st.integers(0, 30)), min_size=1, max_size=20),
       budget_rows=st.floats(1.0, 5.0), seed=st.integers(0, 10_000))
def test_with_preemption_every_row_finishes_once_within_the_budget(rows, budget_rows, seed):
    """Random job and interactive rows arriving at random steps: the budget holds at every step, every row
    finishes exactly once, and a waiting interactive row never waits while a job row holds a slot it could take."""
    rng = random.Random(seed)
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    works = [(at, running_seg(f"r{i}", cap, positions=30 + cap, arrival=float(at),
                              priority=Priority.INTERACTIVE if ui else Priority.JOB))
             for i, (cap, ui, at) in enumerate(rows)]
    budget = int(budget_rows * 100)
    done, refused = [], []
    for step in range(10_000):
        scheduler.add([w for at, w in works if at == step])
        plan = scheduler.schedule_step(budget)
        refused += plan.too_large
        live = scheduler.running()
        if not live and not scheduler.num_waiting and step > 30:
            break
        assert est.batch_bytes([r.current_positions for r in live]) <= budget
        waiting_ui = [w for w in scheduler.waiting() if w.priority is Priority.INTERACTIVE]
        if waiting_ui:  # it could not run even with every job row gone
            head = min(waiting_ui, key=lambda w: w.order)
            others = [r for r in live if r.priority is Priority.INTERACTIVE]
            assert len(others) + 1 > 4 or scheduler.future_peak_bytes(others + [head]) > budget
        ends = tuple((r, StopReason.END_OF_SPEECH) for r in live
                     if r.steps_done + 1 >= r.max_steps or rng.random() < 0.05)
        update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(live), finished=ends))
        done += [w for w, _ in update.finished]
    assert sorted(id(r) for r in done + refused) == sorted(id(w) for _, w in works)


def test_a_cached_voice_never_makes_a_row_wait_or_fail_it_is_evicted_first():
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    row, huge = running_seg("a", 10, positions=90), running_seg("b", 10, positions=101, arrival=1.0)
    scheduler.add([row, huge])
    plan = scheduler.schedule_step(100, evictable_bytes=40)  # the budget holds the row, not the row and the cache
    assert plan.admit == [row] and plan.evict_bytes == 30  # room made from the cache, the rest of it kept
    assert plan.too_large == [huge]  # refused only for not fitting the whole budget
    # request-level batching: the same rule
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    scheduler.add([seg("a", 0, 10, positions=60), seg("b", 0, 10, positions=60)])
    plan = scheduler.schedule(1e9, None, 120, evictable_bytes=50)
    assert len(plan.batch) == 2 and plan.evict_bytes == 50  # the batch did not shrink for the cache


def test_rows_are_shared_round_robin_by_request_and_a_waiting_request_takes_a_hogs_youngest_row():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    long = [running_seg("long", 40) for _ in range(10)]
    for i, s in enumerate(long):
        s.index = i
    assert admitted(scheduler, long) == long[:4]  # alone, one request may use every row
    scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running())))
    short, other = running_seg("short", 5, arrival=1.0), running_seg("other", 5, arrival=2.0)
    scheduler.add([short, other])
    plan = scheduler.schedule_step(None)
    assert plan.admit == [short, other] and plan.preempted == [long[3], long[2]]  # youngest rows of the hog
    assert sorted(r.request_id for r in scheduler.running()) == ["long", "long", "other", "short"]
    # a freed slot goes to the request with the fewest rows, not to the hog's next segment
    scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running()),
                                         finished=((short, StopReason.END_OF_SPEECH),)))
    late = running_seg("late", 5, arrival=3.0)
    scheduler.add([late])
    assert scheduler.schedule_step(None).admit == [late]


def test_without_preemption_a_freed_row_still_goes_round_robin_and_job_rows_never_preempt_each_other():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=2, preempt=False)
    long = [running_seg("long", 40) for _ in range(4)]
    assert admitted(scheduler, long) == long[:2]
    short = running_seg("short", 5, arrival=1.0)
    scheduler.add([short])
    assert scheduler.schedule_step(None).admit == []  # waits for a free slot
    scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(scheduler.running()),
                                         finished=((long[0], StopReason.END_OF_SPEECH),)))
    assert scheduler.schedule_step(None).admit == [short]
    jobs = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=2)
    first = [running_seg("job1", 40, priority=Priority.JOB) for _ in range(3)]
    assert admitted(jobs, first) == first[:2]
    second = running_seg("job2", 40, priority=Priority.JOB, arrival=1.0)
    jobs.add([second])
    plan = jobs.schedule_step(None)
    assert plan.admit == [] and plan.preempted == []


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 30), st.booleans(), st.integers(0, 40)),
                         min_size=1, max_size=10),
       budget_rows=st.floats(1.0, 5.0), cache_growth=st.integers(0, 40), seed=st.integers(0, 10_000))
def test_shared_rows_with_a_growing_cache_stay_within_the_budget_and_every_segment_runs_once(
        requests, budget_rows, cache_growth, seed):
    """Requests of several segments (interactive or job, arriving at random steps) and a cache that grows after
    every prefill and is evicted as the plan says: rows (at their current positions) plus the cache stay within
    the budget at every step, every segment finishes exactly once, and an interactive request with no row never
    waits while another interactive request holds two or more rows of a batch it could join."""
    rng = random.Random(seed)
    est = MemoryEstimator(kv_bytes_per_position=1, cfg_multiplier=1, activation_bytes_per_row=0)
    scheduler = Scheduler(est.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    budget = int(budget_rows * 100)
    works = []
    for i, (num_segments, cap, ui, at) in enumerate(requests):
        for j in range(num_segments):
            w = running_seg(f"r{i}", cap, positions=30 + cap, arrival=float(at),
                            priority=Priority.INTERACTIVE if ui else Priority.JOB)
            w.index = j
            works.append((at, w))
    cache = 0
    done, refused = [], []
    for step in range(20_000):
        scheduler.add([w for at, w in works if at == step])
        plan = scheduler.schedule_step(budget, evictable_bytes=cache)
        assert 0 <= plan.evict_bytes <= cache
        cache -= plan.evict_bytes
        refused += plan.too_large
        live = scheduler.running()
        if not live and not scheduler.num_waiting and step > 40:
            break
        assert scheduler.future_peak_bytes(live) + cache <= budget
        in_flight = {}
        for r in live:
            in_flight[r.request_id] = in_flight.get(r.request_id, 0) + 1
        starved = [w for w in scheduler.waiting() if w.priority is Priority.INTERACTIVE
                   and not in_flight.get(w.request_id)]
        hogs = [r for r in live if r.priority is Priority.INTERACTIVE and in_flight[r.request_id] >= 2]
        if starved and hogs and not any(r.isolate for r in live):
            head = min(starved, key=lambda w: (w.arrival_s, w.sequence))
            keep = {}
            kept = [r for r in live if keep.setdefault(r.request_id, r) is r]  # one row of each request
            assert len(kept) + 1 > 4 or scheduler.future_peak_bytes(kept + [head]) > budget
        if plan.admit:
            cache = min(budget // 8, cache + cache_growth)  # a prefill stored a voice prefix
        ends = tuple((r, StopReason.END_OF_SPEECH) for r in live
                     if r.steps_done + 1 >= r.max_steps or rng.random() < 0.05)
        update = scheduler.update_from_output(Outcome(Phase.DECODE, OutcomeKind.OK, tuple(live), finished=ends))
        done += [w for w, _ in update.finished]
    assert sorted(id(r) for r in done + refused) == sorted(id(w) for _, w in works)
    assert all(est.batch_bytes([r.row_positions]) > budget for r in refused)


def test_request_level_batches_take_turns_so_a_short_request_waits_for_at_most_one_batch_of_a_long_one():
    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    scheduler.add([seg("long", i, 40) for i in range(12)])
    first = scheduler.schedule(1e9, None, None).batch
    assert [s.request_id for s in first] == ["long"] * 4
    scheduler.add([seg("short", 0, 5, arrival=1.0)])
    second = scheduler.schedule(1e9, None, None).batch
    assert "short" in [s.request_id for s in second]


def test_a_streams_next_segment_goes_first_when_its_client_is_about_to_run_out_of_audio():
    from tts_app.engine.scheduler import STREAM_HEADROOM_S

    scheduler = Scheduler(EST.batch_bytes, wait_window_s=0.0, max_batch_size=4)
    hog = [running_seg("hog", 40) for _ in range(6)]
    stream = [running_seg("stream", 40, arrival=1.0) for _ in range(2)]
    stream[1].index = 1
    assert admitted(scheduler, hog) == hog[:4]
    scheduler.add(stream)
    now = 100.0
    plan = scheduler.schedule_step(None, now_s=now)
    assert plan.admit == [stream[0]] and plan.preempted == [hog[3]]  # rule e: the stream had no row
    for s in stream:
        s.deadline_s = now + 10 * STREAM_HEADROOM_S  # plenty of audio buffered: it waits its turn
    assert scheduler.schedule_step(None, now_s=now).admit == []
    for s in stream:
        s.deadline_s = now + STREAM_HEADROOM_S / 2  # about to run dry: its next segment takes a hog's row
    plan = scheduler.schedule_step(None, now_s=now)
    assert plan.admit == [stream[1]] and plan.preempted == [hog[2]]
    assert sorted(r.request_id for r in scheduler.running()) == ["hog", "hog", "stream", "stream"]
