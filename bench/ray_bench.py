"""JSONL jobs on Ray workers vs one process, side by side in one run (printed, never asserted).

The same job (N lines, two voices, tiny random checkpoint) runs:

1. single process: ``run_job`` on this process's engine (``LocalExecutor``);
2. Ray, 1 worker, and 3. Ray, W workers (default 2): ``run_job`` with ``RayExecutor`` on a pool started beforehand
   (pool start and model loads are timed separately, not in the job time).

Printed: lines/s of each run and the ratios (W workers / 1 worker; 1 worker / single process), and the **driver
overhead per line**: the driver process's CPU time during a Ray run (validation, reference shipping, Ray's
scheduling and transfer threads, unpickling the audio, writing WAV + sidecar + record) divided by the lines; the
single-process run's CPU time per line is printed next to it for scale (it includes the synthesis itself). Greedy
audio is checked equal across the runs (byte-identical with ``--max-batch-size 1``; within batch rounding
otherwise).

On 2 CPU cores the tiny model is CPU-bound, so W workers cannot be faster than one engine that already uses the
cores: the figures show the overhead of distribution, not a speed-up. On a GPU machine, run with
``--device auto --workers 1,2,4`` (one GPU per worker; ``--address auto`` for a cluster started with
``ray start --head``) to see the scaling.

Usage: OMP_NUM_THREADS=1 python3 bench/ray_bench.py [--lines 24] [--workers 1,2] [--family vibevoice]
       [--device cpu] [--max-batch-size 4] [--address local] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = REPO / "tests" / "data"
TEXTS = ["The quick brown fox jumps over the lazy dog near the river.",
         "Chapter seven begins with a letter from her brother.",
         "Rain again, said the keeper, and closed the door."]


def write_job(folder: Path, num_lines: int) -> Path:
    (folder / "voices").mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "en_female_2.wav", folder / "voices" / "a.wav")
    shutil.copy(DATA / "en_male_1.wav", folder / "voices" / "b.wav")
    path = folder / "tasks.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(num_lines):
            fh.write(json.dumps({"input_text": f"{TEXTS[i % len(TEXTS)]} Line {i}.",
                                 "prompt_audio": f"voices/{'ab'[i % 2]}.wav", "output_name": f"utt_{i:05d}"})
                     + "\n")
    return path


def timed_job(job: Path, out_dir: Path, **kwargs) -> dict:
    from tts_app.jobs.runner import run_job
    from tts_app.request import SynthesisParams

    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = run_job(job, out_dir, params=SynthesisParams(seed=1, max_new_tokens=kwargs.pop("max_new_tokens")),
                      **kwargs)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if summary.num_ok != summary.num_lines:
        raise SystemExit(f"bench job failed: {summary.format_text()}")
    n = summary.num_lines
    return {"lines": n, "wall_s": wall, "lines_per_s": n / wall, "driver_cpu_s": cpu, "driver_cpu_ms_per_line":
            1000 * cpu / n}


def audio_difference(a: Path, b: Path) -> int:
    """Largest difference between the WAVs of two output folders, in 16-bit steps (0 = identical)."""
    import numpy as np
    import soundfile as sf

    worst = 0
    for wav in sorted(a.glob("utt_*.wav")):
        x, _ = sf.read(wav, dtype="int16")
        y, _ = sf.read(b / wav.name, dtype="int16")
        if x.shape != y.shape:
            return 1 << 16
        worst = max(worst, int(np.abs(x.astype(int) - y.astype(int)).max()))
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=24)
    p.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated (default 1,2)")
    p.add_argument("--family", default="vibevoice")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-batch-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--cpus-per-worker", type=float, default=0.5,
                   help="Ray CPUs per worker (logical; every worker runs one torch thread at 0.5 or 1)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds; the fastest of each run is kept")
    p.add_argument("--address", default="local", help="Ray cluster (default: a local one for this run)")
    p.add_argument("--model", default=None, help="checkpoint folder (default: a tiny random one of --family)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    worker_counts = [int(w) for w in args.workers.split(",")]

    from tts_app.adapters import adapter_class
    from tts_app.config import ClusterConfig, EngineArgs, EngineConfig, ModelConfig
    from tts_app.jobs.cluster import RayExecutor, WorkerPool, connect
    from tts_app.runtime import Runtime

    work = Path(tempfile.mkdtemp(prefix="ray_bench_"))
    try:
        model = args.model or adapter_class(args.family).make_tiny_checkpoint(work / "model", seed=0)
        job = write_job(work / "job", args.lines)
        engine_args = EngineArgs(ModelConfig(str(model), device=args.device),
                                 EngineConfig(max_batch_size=args.max_batch_size))
        report: dict = {"lines": args.lines, "family": args.family, "device": args.device,
                        "max_batch_size": args.max_batch_size, "cpu_count": os.cpu_count(), "runs": {}}

        cluster = ClusterConfig(address=args.address, cpus_per_worker=args.cpus_per_worker,
                                object_store_memory_bytes=200 * 1024**2 if args.address == "local" else None)
        started_cluster = connect(cluster, num_cpus_needed=sum(worker_counts) * args.cpus_per_worker)  # once
        runtime = Runtime.load(engine_args.model, engine_args.engine)
        pools: dict[int, WorkerPool] = {}
        try:
            for count in worker_counts:  # all pools up at once, so the runs can alternate
                started = time.perf_counter()
                pools[count] = WorkerPool.start(engine_args, config=dataclasses.replace(cluster, num_workers=count))
                report.setdefault("pool_start_s", {})[count] = time.perf_counter() - started
            runs = {"single": lambda out: timed_job(job, out, runtime=runtime, max_new_tokens=args.max_new_tokens)}
            for count, pool in pools.items():
                runs[f"ray_{count}"] = (lambda out, pool=pool: timed_job(
                    job, out, runtime=None, executor=RayExecutor(pool), max_new_tokens=args.max_new_tokens))
            for name, run in runs.items():  # warm-up: imports, reference caches, first batches
                run(work / f"warm_{name}")
            # Rounds alternate the runs, so load from other processes on a shared machine hits each alike; the
            # fastest round of each run is kept.
            for round_index in range(args.rounds):
                for name, run in runs.items():
                    result = run(work / f"{name}_{round_index}")
                    best = report["runs"].get(name)
                    if best is None or result["wall_s"] < best["wall_s"]:
                        report["runs"][name] = {**result, "out": str(work / f"{name}_{round_index}")}
        finally:
            runtime.close()
            for pool in pools.values():
                pool.close()
        single_out = Path(report["runs"]["single"].pop("out"))
        for count in worker_counts:
            run = report["runs"][f"ray_{count}"]
            run["pool_start_s"] = report["pool_start_s"][count]
            run["max_audio_difference_lsb"] = audio_difference(single_out, Path(run.pop("out")))

        single = report["runs"]["single"]
        print(f"[ray] {args.lines} lines, {args.family} tiny, {args.device}, max batch {args.max_batch_size}, "
              f"{os.cpu_count()} CPU cores")
        print(f"  {'run':<14}{'lines/s':>9}{'wall s':>9}{'driver CPU ms/line':>20}{'pool start s':>14}"
              f"{'audio diff (LSB)':>18}")
        for name, run in report["runs"].items():
            print(f"  {name:<14}{run['lines_per_s']:>9.2f}{run['wall_s']:>9.1f}{run['driver_cpu_ms_per_line']:>20.1f}"
                  f"{run.get('pool_start_s', float('nan')):>14.1f}{run.get('max_audio_difference_lsb', 0):>18}")
        ratios = {}
        if "ray_1" in report["runs"]:
            ray1 = report["runs"]["ray_1"]
            ratios["ray_1_vs_single"] = ray1["lines_per_s"] / single["lines_per_s"]
            ratios["wall_overhead_ms_per_line_1_worker"] = 1000 * (ray1["wall_s"] - single["wall_s"]) / args.lines
            for count in worker_counts:
                if count != 1:
                    ratios[f"ray_{count}_vs_ray_1"] = report["runs"][f"ray_{count}"]["lines_per_s"] / \
                        ray1["lines_per_s"]
        report["ratios"] = ratios
        if started_cluster:
            import ray

            ray.shutdown()
        for name, value in ratios.items():
            print(f"  {name}: {value:.2f}")
        print("summary: " + ", ".join(f"{k}={v:.2f}" for k, v in ratios.items()) + ", driver CPU ms/line " +
              ", ".join(f"{k}={r['driver_cpu_ms_per_line']:.1f}" for k, r in report["runs"].items()))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
