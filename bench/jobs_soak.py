"""Soak test of durable jobs: a 1 000-line job with random bad lines, run through the server's JobManager while it
is randomly cancelled and resumed, its server "restarted" (a new JobManager on the same folder, as after a crash or
a deploy) and its status re-read by fresh readers (a browser reconnecting). At the end it checks, and prints:

- every non-blank line of the job file has exactly one record in results.jsonl, in line order;
- every ok line's WAV decodes (complete RIFF header, samples, last block readable) and has its sidecar;
- the lines that failed are exactly the bad lines planted in the file (plus the lines whose synthesis was made to
  fail), with a message; no temporary files or journal are left;
- the status seen by readers never went backwards within one run.

It prints figures (lines, bad lines, cancels, restarts, reconnects, resumed runs, lines synthesised more than
once, wall time) and exits 1 if any check fails.

The model is the test FakeAdapter (deterministic noise, ~ms per batch: the point is the job plumbing, not the
model); ``--tiny vibevoice`` runs a tiny random checkpoint of the real architecture instead (slower).

Usage: OMP_NUM_THREADS=1 python3 bench/jobs_soak.py [--lines 1000] [--seed 0] [--tiny FAMILY] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO / "tests" / "data"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "今天天气很好，我们一起去公园散步。",
         "Chapter seven begins with a letter.", "银行(yin2 hang2)九点开门。"]
# Kinds of bad line planted in the job, with what the failure message must mention.
BAD_KINDS = {
    "bad_json": ('{"input_text": "oops" "prompt_audio": "voices/a.wav"}', "bad JSON"),
    "no_text": ('{"prompt_audio": "voices/a.wav"}', "missing field 'input_text'"),
    "missing_audio": ('{"input_text": "Hi.", "prompt_audio": "voices/nobody.wav"}', "not found"),
    "not_audio": ('{"input_text": "Hi.", "prompt_audio": "voices/notes.wav"}', "is not audio"),
    "too_short": ('{"input_text": "Hi.", "prompt_audio": "voices/short.wav"}', "0.40 s long"),
    "control_chars": ('{"input_text": "Hi.", "prompt_audio": "voices\\\\new\\ta.wav"}', "control characters"),
    "bad_param": ('{"input_text": "Hi.", "prompt_audio": "voices/a.wav", "temperature": "hot"}', "temperature"),
    "engine_fails": (None, "EXPLODE"),  # valid line whose synthesis raises inside the model
}


def write_job(work: Path, num_lines: int, rng: random.Random, bad_share: float, *, real_model: bool = False
              ) -> tuple[Path, dict[int, str]]:
    """The job file (with a few blank lines) and {line number: planted problem kind}. For a real (tiny) model each
    line's decode steps are capped (a random model rarely stops by itself) and no model failure is planted (only
    the fake model has that switch)."""
    cap = {"max_new_tokens": 16} if real_model else {}
    kinds = [k for k in sorted(BAD_KINDS) if not (real_model and k == "engine_fails")]
    lines, planted = [], {}
    number = 0
    while len([x for x in lines if x.strip()]) < num_lines:
        number += 1
        if rng.random() < 0.01:
            lines.append("")  # blank lines have no record
            continue
        if rng.random() < bad_share:
            kind = rng.choice(kinds)
            planted[number] = kind
            if kind == "engine_fails":
                lines.append(json.dumps({"input_text": f"EXPLODE on line {number}.", "prompt_audio": "voices/a.wav",
                                         "output_name": f"line_{number:05d}"}))
            else:
                lines.append(BAD_KINDS[kind][0])
            continue
        lines.append(json.dumps({"input_text": f"{TEXTS[number % len(TEXTS)]} ({number})",
                                 "prompt_audio": "voices/a.wav" if number % 2 else "voices/b.wav",
                                 "output_name": f"line_{number:05d}", "seed": number, **cap}, ensure_ascii=False))
    path = work / "soak.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, planted


def write_voices_zip(work: Path) -> Path:
    path = work / "voices.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(DATA / "en_female_1.wav", "voices/a.wav")
        zf.write(DATA / "zh_male_1.wav", "voices/b.wav")
        zf.write(DATA / "en_male_1__too_short_0.4s.wav", "voices/short.wav")
        zf.writestr("voices/notes.wav", "these are notes, not a recording\n" * 8)
    return path


def make_runtime(tiny: str | None, work: Path):
    from tts_app.config import EngineConfig
    from tts_app.runtime import Runtime

    config = EngineConfig(max_batch_size=8, wait_window_ms=2.0)
    if tiny is None:
        from tests.fakes import FakeAdapter

        def fail_rows(rows):
            return RuntimeError("planted failure") if any("EXPLODE" in r.text for r in rows) else None

        return Runtime.from_adapter(FakeAdapter(samples_per_char=40, delay_s=0.002, raise_if=fail_rows), "fake",
                                    config)
    from bench.common import load_tiny_adapter

    return Runtime.from_adapter(load_tiny_adapter(tiny, work / "model"), f"tiny-{tiny}", config)


def soak(args: argparse.Namespace, work: Path) -> int:
    from tts_app.jobs.manager import JobManager
    from tts_app.jobs.results import audio_decodes
    from tts_app.output_layout import JOURNAL_NAME, RESULTS_NAME
    from tts_app.jobs.store import JobStore

    rng = random.Random(args.seed)
    job_file, planted = write_job(work, args.lines, rng, args.bad_share, real_model=args.tiny is not None)
    voices = write_voices_zip(work)
    runtime = make_runtime(args.tiny, work)
    root = work / "outputs"
    counts = {"cancels": 0, "restarts": 0, "reconnects": 0, "runs": 1, "regressions": 0}
    started = time.perf_counter()
    try:
        manager = JobManager(JobStore(root), runtime)
        state = manager.submit(job_file, audio_zip=voices, settings={"seed": 0, "max_batch_size": 8})
        job_id = state.job_id
        seen_done = 0
        while True:
            time.sleep(rng.uniform(0.2, 1.5))
            # A reader that is not the job's manager (a browser reconnecting, another server process) reads the
            # job's folder: it may lag the live state by one save, never run ahead of it.
            fresh = JobStore(root).load(job_id)
            state = manager.get(job_id)
            counts["reconnects"] += 1
            if state.status == "done":
                break
            if fresh.status == state.status == "running" and fresh.num_done > state.num_done:
                counts["regressions"] += 1
            if state.status == "running":
                if state.num_done < seen_done:
                    counts["regressions"] += 1
                seen_done = state.num_done
            action = rng.random()
            if state.status in ("cancelled", "interrupted", "failed"):
                manager.resume(job_id)
                counts["runs"] += 1
                seen_done = 0
            elif action < 0.25:
                manager.cancel(job_id)
                manager.wait(job_id, timeout_s=120)
                counts["cancels"] += 1
            elif action < 0.45:
                manager.shutdown()  # the server stops (its job ends "interrupted") ...
                manager = JobManager(JobStore(root), runtime)  # ... and a new one starts on the same folder
                counts["restarts"] += 1
        elapsed = time.perf_counter() - started
        out = manager.store.out_dir(job_id)
        records = [json.loads(x) for x in (out / RESULTS_NAME).read_text(encoding="utf-8").splitlines()]
    finally:
        runtime.close()

    # ---- checks
    expected_lines = [n for n, text in enumerate(job_file.read_text(encoding="utf-8").split("\n")[:-1], start=1)
                      if text.strip()]
    problems = []
    if [r["line"] for r in records] != expected_lines:
        problems.append(f"results.jsonl lines {len(records)} != job lines {len(expected_lines)} (or out of order)")
    by_line = {r["line"]: r for r in records}
    ok = [r for r in records if r["status"] == "ok"]
    bad_wavs = [r["line"] for r in ok if not audio_decodes(out / r["audio_path"])
                or not (out / (r.get("metadata_path") or "missing")).is_file()]
    if bad_wavs:
        problems.append(f"{len(bad_wavs)} ok lines without a decodable WAV and its sidecar: {bad_wavs[:5]}")
    failed = {r["line"] for r in records if r["status"] == "failed"}
    if failed != set(planted):
        problems.append(f"failed lines differ from the planted ones: extra {sorted(failed - set(planted))[:5]}, "
                        f"missing {sorted(set(planted) - failed)[:5]}")
    for line, kind in planted.items():
        needle = BAD_KINDS[kind][1]
        error = (by_line.get(line) or {}).get("error") or ""
        if kind != "engine_fails" and needle not in error:
            problems.append(f"line {line} ({kind}): message {error!r} does not mention {needle!r}")
    if any(r["status"] == "cancelled" for r in records):
        problems.append("lines still cancelled after the final resume")
    leftovers = [p.name for p in out.iterdir() if p.name.endswith(".tmp") or p.name == JOURNAL_NAME]
    if leftovers:
        problems.append(f"files left behind: {leftovers[:5]}")
    if counts["regressions"]:
        problems.append(f"progress went backwards {counts['regressions']} times within a run")
    sidecar_seeds = {}
    for r in ok[:50]:
        sidecar_seeds[r["line"]] = json.loads((out / r["metadata_path"]).read_text())["generation"]["seed"]
    if any(seed != line for line, seed in sidecar_seeds.items()):
        problems.append("a line's sidecar does not carry its own seed")

    kinds = {}
    for kind in planted.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"[soak] {len(expected_lines)} lines ({len(planted)} bad: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    print(f"  {counts['runs']} runs: {counts['cancels']} cancels, {counts['restarts']} server restarts, "
          f"{counts['reconnects']} reconnecting reads; wall {elapsed:.1f} s ({len(expected_lines) / elapsed:.0f} "
          "lines/s overall)")
    print(f"  final: {len(ok)} ok, {len(failed)} failed, "
          f"{sum(r['status'] == 'cancelled' for r in records)} cancelled; records {len(records)} = lines "
          f"{len(expected_lines)}: {'yes' if len(records) == len(expected_lines) else 'NO'}")
    print(f"  every ok line's WAV decodes and has its sidecar: {'yes' if not bad_wavs else 'NO'}")
    print("  result: " + ("all checks passed" if not problems else "FAILED:\n    " + "\n    ".join(problems)))
    if args.keep:
        shutil.copytree(root, args.keep, dirs_exist_ok=True)
        print(f"  job folder copied to {args.keep}")
    return 0 if not problems else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000, help="non-blank lines in the job (default 1000)")
    parser.add_argument("--bad-share", type=float, default=0.08, help="share of bad lines (default 0.08)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random job, cancels and restarts")
    parser.add_argument("--tiny", default=None, metavar="FAMILY",
                        help="run a tiny random checkpoint of this family instead of the fake model")
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy the job folder here at the end")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobs_soak_") as tmp:
        return soak(args, Path(tmp))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    # The planted model failures are logged with tracebacks by the engine (as any unexpected error is); the soak
    # counts them in its own summary instead.
    logging.basicConfig(level=logging.CRITICAL)
    import torch

    torch.set_num_threads(1)
    sys.exit(main())
