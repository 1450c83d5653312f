"""Engine scheduling and batching, printed as ratios (a print, not a test: timings never gate anything).

    OMP_NUM_THREADS=1 python3 bench/engine_bench.py [--family csm] [--requests 16] [--max-new-tokens 8]

1. Length bucketing vs FIFO on a fixed mixed workload (short and long segments interleaved): decode steps the
   device runs and padded row-steps, counted, not timed.
2. A tiny checkpoint through the engine: CPU seconds (``time.process_time``) for N requests at max batch size 8
   vs 1, and with simulated OOM above batch 2 (the cost of surviving).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def count_steps(steps: list[int], cap: int, bucketing: bool) -> tuple[int, int, int]:
    """Run the real ``Scheduler`` over segments of ``steps`` expected decode steps (all queued at once) with batch
    cap ``cap``. Returns (decode steps the device runs = sum of each batch's longest row, padded row-steps by the
    scheduler's own ``padded_steps``, row-steps in all = decode steps x rows summed per batch)."""
    from tts_app.engine.memory import MemoryEstimator
    from tts_app.engine.scheduler import Scheduler, SegmentWork, padded_steps
    from tts_app.request import Priority

    est = MemoryEstimator(kv_bytes_per_position=1024, activation_bytes_per_row=0)
    sched = Scheduler(est.batch_bytes, wait_window_s=0.0, bucketing=bucketing)
    sched.add([SegmentWork(f"r{i}", 0, "", 0, "k", Priority.JOB, s, s + 50, 0.0) for i, s in enumerate(steps)])
    total = padded = row_steps = 0
    while sched.num_waiting:
        batch = sched.schedule(1.0, cap, None).batch
        longest = max(s.expected_steps for s in batch)
        total += longest
        row_steps += longest * len(batch)
        padded += padded_steps(batch)
    return total, padded, row_steps


def bucketing_vs_fifo() -> None:
    rng = random.Random(0)
    steps = [rng.choice([rng.randint(20, 60), rng.randint(300, 400)]) for _ in range(256)]
    for cap in (4, 8, 16):
        out = {bucketing: count_steps(steps, cap, bucketing)[:2] for bucketing in (False, True)}
        print(f"cap {cap:2d}: decode steps fifo {out[False][0]} bucketed {out[True][0]} "
              f"(ratio {out[True][0] / out[False][0]:.2f}); padded row-steps fifo {out[False][1]} "
              f"bucketed {out[True][1]} (ratio {out[True][1] / max(1, out[False][1]):.2f})")


def run_engine(adapter, requests: list, config, *, bucketing: bool = True, clock=time.perf_counter):
    """Submit every request to a fresh ``Engine`` before starting it (so the scheduler sees the whole workload),
    wait for all results. Returns (seconds by ``clock`` from start to the last result, ``EngineStats`` after,
    ``SynthesisResult`` list in submission order)."""
    from tts_app.engine import Engine

    engine = Engine(adapter, config, bucketing=bucketing)
    handles = [engine.submit(r) for r in requests]
    t0 = clock()
    engine.start()
    try:
        results = [h.result() for h in handles]
        seconds = clock() - t0
    finally:
        engine.shutdown()
    return seconds, engine.stats(), results


def engine_throughput(family: str, num_requests: int, max_new_tokens: int) -> None:
    import numpy as np
    import torch

    from tts_app.adapters import adapter_class, load_adapter
    from tts_app.config import EngineConfig
    from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = load_adapter(adapter_class(family).make_tiny_checkpoint(Path(tmp) / family), device="cpu",
                               dtype="float32")
    sr = adapter.facts.sampling_rate
    t = np.arange(sr * 2) / sr
    ref = ReferenceAudio((0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), sr)
    texts = [f"Request {w} of the benchmark." for w in
             "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
             .split()][:num_requests]
    params = SynthesisParams(greedy=True, max_new_tokens=max_new_tokens)

    def run(config: EngineConfig) -> tuple[float, int]:
        seconds, stats, results = run_engine(
            adapter, [SynthesisRequest(text=x, reference_audio=ref, params=params) for x in texts], config,
            clock=time.process_time)
        assert all(r.ok for r in results)
        return seconds, stats.num_batches

    run(EngineConfig(max_batch_size=8, wait_window_ms=0))  # warm-up
    one, n1 = run(EngineConfig(max_batch_size=1, wait_window_ms=0))
    eight, n8 = run(EngineConfig(max_batch_size=8, wait_window_ms=0))
    oom, noom = run(EngineConfig(max_batch_size=8, simulate_oom_above_batch=2, wait_window_ms=0))
    print(f"{family} tiny, {len(texts)} requests, {max_new_tokens} new tokens: batch 1 {one:.2f} s ({n1} batches), "
          f"batch 8 {eight:.2f} s ({n8} batches) -> speed-up x{one / eight:.2f}; simulated OOM above 2 {oom:.2f} s "
          f"({noom} batches) -> x{oom / eight:.2f} of batch 8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="csm")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    args = parser.parse_args()
    bucketing_vs_fifo()
    engine_throughput(args.family, args.requests, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
