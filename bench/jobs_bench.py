"""JSONL job benchmarks (printed, never asserted).

1. Validation of a 10 000-line job: wall time, lines/s, peak Python heap (tracemalloc) and peak RSS growth,
   compared with the file's size (streaming validation should stay well below it).
2. Runner overhead: ``run_job`` on N lines through the real Engine with the FakeAdapter (no model), 2 voices,
   compared with submitting the same requests straight to the engine (references prepared once).

Usage: OMP_NUM_THREADS=1 python3 bench/jobs_bench.py [--lines 10000] [--run-lines 300]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tts_app.jobs.runner import run_job, validate_job  # noqa: E402

DATA = REPO / "tests" / "data"
TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank at dawn.",
         "今天天气很好，我们一起去公园散步，然后在湖边喝茶。",
         "Chapter seven begins with a long letter from her brother, read aloud by the fire."]


def write_job(path: Path, num_lines: int, voices: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(num_lines):
            fh.write(json.dumps({"input_text": f"{TEXTS[i % len(TEXTS)]} ({i})", "prompt_audio": voices[i % 2],
                                 "prompt_text": "reference words", "output_name": f"utt_{i:06d}", "seed": i},
                                ensure_ascii=False) + "\n")


def rss_peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def bench_validation(work: Path, num_lines: int) -> dict:
    """Validate a ``num_lines`` job written into ``work`` (needs ``work/voices/{a,b}.wav``); prints and returns
    ``{"num_lines", "file_bytes", "seconds", "lines_per_s", "heap_peak_bytes", "rss_growth_bytes"}``."""
    path = work / "big.jsonl"
    write_job(path, num_lines, ["voices/a.wav", "voices/b.wav"])
    size = path.stat().st_size
    validate_job(path)  # warm imports / file cache
    rss_before = rss_peak_bytes()
    t0 = time.perf_counter()
    report = validate_job(path)
    elapsed = time.perf_counter() - t0
    tracemalloc.start()  # separate pass: tracing slows Python several-fold
    validate_job(path)
    _, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"[validation] {report.num_lines} lines ({report.num_valid} valid), file {size / 1e6:.2f} MB")
    print(f"  time {elapsed:.2f} s = {report.num_lines / elapsed:,.0f} lines/s")
    print(f"  peak heap {heap_peak / 1e6:.2f} MB = {heap_peak / size:.2f} x file size "
          f"({heap_peak / report.num_lines:.0f} B/line: the output-name set for duplicate detection)")
    rss_growth = max(0, rss_peak_bytes() - rss_before)
    print(f"  peak RSS growth {rss_growth / 1e6:.2f} MB (tracemalloc adds its own)")
    return {"num_lines": report.num_lines, "file_bytes": size, "seconds": elapsed,
            "lines_per_s": report.num_lines / elapsed, "heap_peak_bytes": heap_peak, "rss_growth_bytes": rss_growth}


def bench_runner(work: Path, num_lines: int) -> None:
    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig
    from tts_app.request import Priority, SynthesisParams, SynthesisRequest
    from tts_app.runtime import Runtime

    path = work / "run.jsonl"
    write_job(path, num_lines, ["voices/a.wav", "voices/b.wav"])
    runtime = Runtime.from_adapter(FakeAdapter(samples_per_char=4), "fake",
                                   EngineConfig(max_batch_size=16, wait_window_ms=2.0))
    engine = runtime.engine
    try:
        write_job(work / "warm.jsonl", 2, ["voices/a.wav", "voices/b.wav"])
        run_job(work / "warm.jsonl", work / "warm", runtime)  # loads Silero VAD, warms torch
        t0 = time.perf_counter()
        summary = run_job(path, work / "out", runtime)
        job_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        refs = [runtime.references.prepare(work / "voices" / n).audio for n in ("a.wav", "b.wav")]
        handles = [engine.submit(SynthesisRequest(text=f"{TEXTS[i % len(TEXTS)]} ({i})", reference_audio=refs[i % 2],
                                                  reference_text="reference words", priority=Priority.JOB,
                                                  params=SynthesisParams(seed=i)))
                   for i in range(num_lines)]
        for h in handles:
            h.result()
        direct_s = time.perf_counter() - t0
    finally:
        runtime.close()
    print(f"[runner] {summary.num_ok}/{summary.num_lines} ok through run_job in {job_s:.2f} s "
          f"({summary.num_lines / job_s:,.0f} lines/s)")
    print(f"  same requests straight to the engine (2 references prepared, no files written): {direct_s:.2f} s")
    print(f"  run_job / direct = {job_s / direct_s:.2f}x; extra per line {(job_s - direct_s) / num_lines * 1e3:.1f} ms "
          "(validation pass, reference hash per line, WAV + sidecar writes + 3 fsyncs per line)")


def make_work_dir(work: Path) -> Path:
    """Put the two reference voices the generated jobs name into ``work/voices``. Returns ``work``."""
    (work / "voices").mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "en_female_1.wav", work / "voices" / "a.wav")
    shutil.copy(DATA / "zh_male_1.wav", work / "voices" / "b.wav")
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--run-lines", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobs_bench_") as tmp:
        work = make_work_dir(Path(tmp))
        bench_validation(work, args.lines)
        if args.run_lines > 0:
            bench_runner(work, args.run_lines)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
