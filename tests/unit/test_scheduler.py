"""Scheduler policy on plain data: budget, bucketing, priorities, batch keys, wait window, batch cap."""

from __future__ import annotations

import random
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tts_app.engine.memory import MemoryEstimator
from tts_app.engine.scheduler import BatchCap, Scheduler, SegmentWork, expected_speech_s, padded_steps
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
