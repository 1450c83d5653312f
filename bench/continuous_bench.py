"""Continuous batching vs request-level batching, time to first audio, and shared-prefix reuse, for the families
whose adapter has a step interface (VibeVoice). Printed ratios measured side by side in one run, never thresholds.

    OMP_NUM_THREADS=1 python3 bench/continuous_bench.py [--tiny]      # also part of bench/run.py

Measures (tiny random checkpoint, nothing downloaded):

1. continuous   the same mixed-length workload through the engine at the same cap, request-level batching (a new
                batch only when the running one has ended; finished rows stay in it) vs continuous batching (rows
                join and leave every decode step): audio seconds per wall second and their ratio, padded row-steps
                (rows still in the batch after they finished / all rows run, counted by the adapter), and equality
                with the one-by-one run (same lengths, largest sample difference).
2. ttfa         time to the first streamed audio of a short interactive request submitted while a long job decodes
                (its rows fill the batch), request-level vs continuous without preemption (the request waits for a
                job row to end) vs continuous (it takes a job row's slot at the next decode step; ratios), and the
                time to its whole audio.
3. prefix       a one-voice job (every line the same 10 s reference) with the prefix cache off vs on: seconds spent
                prefilling, wall time, prefill time saved, equality of the outputs.

For VibeVoice, a random tiny LM picks <eos> after a few arbitrary frames whatever the text, so there the stop
decision follows the text's expected spoken length (``length_driven``: ~0.07 s per Latin character, 0.22 s per
hanzi, at 7.5 frames/s); everything else each step computes is the model's own (LM streams, diffusion head, codec,
semantic encoder). IndexTTS 2 (``--families vibevoice,indextts2``) runs as it is: its tiny GPT stops by itself after
10-35 codes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (pins threads before torch loads)

# One voice for the prefix measure: 10 s of real speech (a typical cleaned reference).
ONE_VOICE = ("en_female_1__long_45s.wav", 10.0)


def sizes(tiny: bool) -> dict:
    """Workload sizes of the full and the tiny (CI) mode."""
    if tiny:
        return dict(num_requests=4, min_chars=5, max_chars=50, caps=(4,), max_new_tokens=12, job_requests=4,
                    one_voice_lines=6)
    return dict(num_requests=16, min_chars=5, max_chars=200, caps=(4, 8), max_new_tokens=60, job_requests=16,
                one_voice_lines=12)


def length_driven(adapter, max_frames: int):
    """A copy of a VibeVoice adapter (same model and processor) whose LM says ``<audio>`` until the row has made
    ``frames_for(text)`` frames, then ``<eos>``: the expected spoken length of its text at the model's frame rate,
    1 to ``max_frames - 1`` frames. The LM head still runs on every row (its cost stays in the measure)."""
    import torch

    from tts_app.speaking_rate import expected_speech_s

    fps = adapter.facts.frames_per_second

    def frames_for(text: str) -> int:
        return max(1, min(max_frames - 1, math.ceil(expected_speech_s(text) * fps)))

    class LengthDriven(type(adapter)):
        def _select_tokens(self, hidden, allowed, rows):
            self.model.lm_head(hidden)
            config = self.model.config
            return torch.tensor([config.audio_token_id if r.num_steps < frames_for(r.row.text) else config.eos_token_id
                                 for r in rows], dtype=torch.long, device=hidden.device)

    return LengthDriven(adapter.model, adapter.processor, device=adapter.device, dtype=adapter.dtype), frames_for


def _engine(adapter, cap: int, *, continuous: bool | None, prefix_cache_entries: int = 0, preempt: bool = True):
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine

    return Engine(adapter, EngineConfig(max_batch_size=cap, wait_window_ms=0.0,
                                        prefix_cache_entries=prefix_cache_entries), continuous=continuous,
                  preempt=preempt)


def run_all(adapter, requests, cap: int, *, continuous: bool | None, prefix_cache_entries: int = 0):
    """Submit every request before starting a fresh engine, wait for all. Returns (wall s, stats, results)."""
    engine = _engine(adapter, cap, continuous=continuous, prefix_cache_entries=prefix_cache_entries)
    handles = [engine.submit(r) for r in requests]
    with common.wall_timer(str(adapter.device)) as t:
        engine.start()
        results = [h.result() for h in handles]
    engine.shutdown()
    return t["s"], engine.stats(), results


def _audio_s(results) -> float:
    return sum(r.duration_s for r in results if r.ok)


def _compare(results, reference) -> tuple[bool, float]:
    """(every result has the reference's length, largest absolute sample difference)."""
    import numpy as np

    same = all(a.ok and b.ok and a.audio.shape == b.audio.shape for a, b in zip(results, reference))
    diff = max((float(np.abs(a.audio - b.audio).max()) if a.audio.size and a.audio.shape == b.audio.shape
                else float("inf") if a.audio.shape != b.audio.shape else 0.0) for a, b in zip(results, reference))
    return same, diff


def requests_for(adapter, texts: list[str], max_new_tokens: int, *, reference=None, priority=None):
    """One request per text (seed 100 x i), each with the workload's reference clips in turn (or ``reference``)."""
    from tts_app.request import Priority, ReferenceAudio, SynthesisParams, SynthesisRequest

    sr = adapter.facts.sampling_rate
    clips = [common.reference_clip(name, sr, seconds) for name, seconds in common.REFERENCE_CLIPS]
    out = []
    for i, text in enumerate(texts):
        ref = reference if reference is not None else clips[i % len(clips)][0]
        out.append(SynthesisRequest(text=text, reference_audio=ReferenceAudio(ref, sr),
                                    params=SynthesisParams(seed=100 * i, max_new_tokens=max_new_tokens),
                                    priority=Priority.JOB if priority is None else priority))
    return out


def measure_continuous(adapter, texts: list[str], cfg: dict, table, ttfa_table, frames_for) -> None:
    """Fill the continuous and ttfa tables for one step-interface family (see module docstring)."""
    family = adapter.family
    requests = requests_for(adapter, texts, cfg["max_new_tokens"])
    run_all(adapter, requests[:2], 2, continuous=True)  # warm-up (one-off costs of new shapes)
    alone_s, _, alone = run_all(adapter, requests, 1, continuous=True)
    table.rows.append({"family": family, "mode": "one by one", "cap": 1, "requests": len(requests),
                       "wall_s": alone_s, "audio_s": _audio_s(alone),
                       "audio_s_per_wall_s": common.ratio(_audio_s(alone), alone_s), "padded_share": 0.0,
                       "same_length": True, "max_abs_diff": 0.0})
    for cap in cfg["caps"]:
        rows = {}
        for mode, continuous in (("request-level", False), ("continuous", True)):
            seconds, stats, results = run_all(adapter, requests, cap, continuous=continuous)
            same, diff = _compare(results, alone)
            rows[mode] = {"family": family, "mode": mode, "cap": cap, "requests": len(requests), "wall_s": seconds,
                          "audio_s": _audio_s(results), "audio_s_per_wall_s": common.ratio(_audio_s(results), seconds),
                          "row_steps": stats.num_row_steps, "padded_row_steps": stats.num_padded_row_steps,
                          "padded_share": stats.padded_share or 0.0, "same_length": same, "max_abs_diff": diff}
        rows["continuous"]["vs_request_level"] = common.ratio(rows["continuous"]["audio_s_per_wall_s"],
                                                              rows["request-level"]["audio_s_per_wall_s"])
        rows["request-level"]["vs_request_level"] = 1.0
        table.rows += [rows["request-level"], rows["continuous"]]
        print(f"[bench] continuous vs request-level of {family} at cap {cap} done", file=sys.stderr, flush=True)
    measure_ttfa(adapter, texts, cfg, ttfa_table, frames_for)


def measure_ttfa(adapter, texts: list[str], cfg: dict, table, frames_for) -> None:
    """A long job (the workload's longer half, repeated) decodes at the largest cap; a short interactive request
    arrives, streamed, at three points of the job's progress (a fifth, nearly half and two thirds of a full batch's
    work in useful row-steps, the same points for both modes); its mean time to first audio is reported."""
    import statistics

    from tts_app.request import Priority

    cap = max(cfg["caps"])
    longer = sorted(texts, key=len)[len(texts) // 2:]
    job_texts = (longer * cfg["job_requests"])[:cfg["job_requests"]]
    job = requests_for(adapter, job_texts, cfg["max_new_tokens"])
    short = requests_for(adapter, ["Hi, just one short line."], cfg["max_new_tokens"],
                         priority=Priority.INTERACTIVE)[0]
    batch_work = cap * statistics.mean(frames_for(t) for t in job_texts)
    points = [batch_work * share for share in (0.2, 0.45, 0.7)]
    rows = {}
    for mode, continuous, preempt in (("request-level", False, False), ("continuous, no preemption", True, False),
                                      ("continuous", True, True)):
        engine = _engine(adapter, cap, continuous=continuous, preempt=preempt).start()
        handles = [engine.submit(r) for r in job]
        firsts, wholes = [], []
        for point in points:
            while True:  # wait for the job to reach this point of its work
                stats = engine.stats()
                if stats.num_row_steps - stats.num_padded_row_steps >= point or all(h.done() for h in handles):
                    break
                time.sleep(0.001)
            t0 = time.perf_counter()
            handle = engine.submit(short, stream=True)
            first = None
            for _chunk in handle.stream():
                if first is None:
                    first = time.perf_counter() - t0
            handle.result()
            firsts.append(first if first is not None else float("nan"))
            wholes.append(time.perf_counter() - t0)
        for h in handles:
            h.result()
        engine.shutdown()
        rows[mode] = {"family": adapter.family, "mode": mode, "cap": cap, "job_requests": len(job),
                      "arrivals": len(points), "first_audio_s": statistics.mean(firsts),
                      "whole_audio_s": statistics.mean(wholes), "preempted_rows": engine.stats().num_preempted}
    for mode in rows:
        rows[mode]["vs_continuous"] = common.ratio(rows[mode]["first_audio_s"], rows["continuous"]["first_audio_s"])
    table.rows += list(rows.values())
    print(f"[bench] time to first audio of {adapter.family} done", file=sys.stderr, flush=True)


def measure_prefix(adapter, texts: list[str], cfg: dict, table) -> None:
    """A one-voice job with the prefix cache off vs on (continuous batching, the largest cap)."""
    ref, _ = common.reference_clip(ONE_VOICE[0], adapter.facts.sampling_rate, ONE_VOICE[1])
    lines = (texts * 4)[:cfg["one_voice_lines"]]
    requests = requests_for(adapter, lines, cfg["max_new_tokens"], reference=ref)
    cap = max(cfg["caps"])
    for entries in (0, 16):  # warm-up of both paths (one-off costs of new shapes)
        run_all(adapter, requests[:2], cap, continuous=True, prefix_cache_entries=entries)
    rows = {}
    for mode, entries in (("prefix cache off", 0), ("prefix cache on", 16)):
        seconds, stats, results = run_all(adapter, requests, cap, continuous=True, prefix_cache_entries=entries)
        rows[mode] = {"family": adapter.family, "mode": mode, "lines": len(requests), "reference_s": ONE_VOICE[1],
                      "prefill_s": stats.prefill_s, "wall_s": seconds, "hits": stats.prefix_cache_hits,
                      "cache_bytes": stats.prefix_cache_bytes, "results": results}
    off, on = rows["prefix cache off"], rows["prefix cache on"]
    same, diff = _compare(on.pop("results"), off.pop("results"))
    on.update(same_length=same, max_abs_diff=diff)
    off.update(same_length=True, max_abs_diff=0.0)
    for row in (off, on):
        row["prefill_saved"] = 1.0 - common.ratio(row["prefill_s"], off["prefill_s"])
        row["wall_vs_off"] = common.ratio(row["wall_s"], off["wall_s"])
    table.rows += [off, on]
    print(f"[bench] prefix reuse of {adapter.family} done", file=sys.stderr, flush=True)


def build_tables() -> dict:
    from common import Table

    return {
        "continuous": Table("continuous", "continuous vs request-level batching (same workload, same cap)",
                            ["family", "mode", "cap", "requests", "wall_s", "audio_s", "audio_s_per_wall_s",
                             "vs_request_level", "padded_share", "same_length", "max_abs_diff"],
                            ["wall_s", "audio_s", "audio_s_per_wall_s", "padded_share", "max_abs_diff"]),
        "ttfa": Table("ttfa", "time to first audio of a short request submitted while a long job decodes",
                      ["family", "mode", "cap", "job_requests", "arrivals", "first_audio_s", "whole_audio_s",
                       "preempted_rows", "vs_continuous"],
                      ["first_audio_s", "whole_audio_s", "vs_continuous"]),
        "prefix": Table("prefix", "shared-prefix reuse: one-voice job, prefix cache off vs on (continuous)",
                        ["family", "mode", "lines", "reference_s", "prefill_s", "prefill_saved", "wall_s",
                         "wall_vs_off", "hits", "same_length", "max_abs_diff"],
                        ["prefill_s", "prefill_saved", "wall_s", "wall_vs_off", "max_abs_diff"]),
    }


def add_notes(tables: dict) -> None:
    tables["continuous"].notes += [
        "VibeVoice's stop decisions follow each text's expected spoken length (a random tiny LM stops anywhere), "
        "IndexTTS 2's tiny GPT stops by itself; every other computation is the model's; prefix cache off in both "
        "modes",
        "padded_share = row-steps of rows already finished but still in their batch / all row-steps (counted by the "
        "adapter's decode batch); max_abs_diff = largest sample difference to the one-by-one run (float32 "
        "reassociation between batch shapes; 0 = bit-identical)",
    ]
    tables["ttfa"].notes.append("first_audio_s: from submitting the short request to its first streamed chunk, mean "
                                "over the arrivals; vs_continuous = that time / the continuous engine's (which "
                                "preempts job rows for it); preempted_rows: job rows that gave up their slot")
    tables["prefix"].notes.append("prefill_s: seconds the engine spent prefilling rows (reference encoding + prompt "
                                  "forward); prefill_saved = 1 - prefill_s / prefill_s with the cache off")


def summary_parts(tables: dict) -> list[str]:
    """Summary-line fragments: continuous vs request-level throughput, padded share, TTFA, prefill saved."""
    parts = []
    cont = tables["continuous"].rows
    for family in dict.fromkeys(r["family"] for r in cont):
        mine = [r for r in cont if r["family"] == family and r["mode"] != "one by one"]
        if not mine:
            continue
        cap = max(r["cap"] for r in mine)
        req = next(r for r in mine if r["cap"] == cap and r["mode"] == "request-level")
        con = next(r for r in mine if r["cap"] == cap and r["mode"] == "continuous")
        parts.append(f"{family} continuous x{con['vs_request_level']:.2f} vs request-level throughput at cap {cap}, "
                     f"padded row-steps {req['padded_share']:.0%} -> {con['padded_share']:.0%}")
    ttfa = tables["ttfa"].rows
    for family in dict.fromkeys(r["family"] for r in ttfa):
        req = next(r for r in ttfa if r["family"] == family and r["mode"] == "request-level")
        wait = next(r for r in ttfa if r["family"] == family and r["mode"] == "continuous, no preemption")
        parts.append(f"{family} first audio under a job x{req['vs_continuous']:.1f} sooner continuous "
                     f"(x{wait['vs_continuous']:.1f} by preemption)")
    for row in tables["prefix"].rows:
        if row["mode"] == "prefix cache on":
            parts.append(f"{row['family']} one-voice prefill {row['prefill_saved']:.0%} saved by prefix reuse")
    return parts


def step_adapters(families, work_dir: Path, device: str) -> dict:
    """Tiny adapters of ``families`` that have a step interface, made length-driven (see module docstring)."""
    from tts_app.adapters import adapter_class

    out = {}
    for family in families:
        if not adapter_class(family).supports_decode_steps:
            continue
        base = common.load_tiny_adapter(family, work_dir, device=device)
        out[family] = base
    return out


def run(adapters: dict, tiny: bool, tables: dict) -> None:
    """All three measures for each adapter of ``adapters`` (family -> loaded tiny adapter with a step interface)."""
    cfg = sizes(tiny)
    texts = common.workload_texts(cfg["num_requests"], cfg["min_chars"], cfg["max_chars"])
    for family, base in adapters.items():
        if family == "vibevoice":
            adapter, frames_for = length_driven(base, cfg["max_new_tokens"])
        else:  # IndexTTS 2: its tiny GPT stops by itself (10-35 codes), the workload's mixed lengths as they come
            adapter, frames_for = base, (lambda text: max(1, cfg["max_new_tokens"] // 2))
        measure_continuous(adapter, texts, cfg, tables["continuous"], tables["ttfa"], frames_for)
        if family == "vibevoice":  # the only family whose decode batch reuses voice prefixes
            measure_prefix(adapter, texts, cfg, tables["prefix"])
    add_notes(tables)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--families", default="vibevoice")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    common.setup(num_threads=1)
    import tempfile

    tables = build_tables()
    with tempfile.TemporaryDirectory(prefix="bench_continuous_") as tmp:
        adapters = step_adapters(args.families.split(","), Path(tmp), args.device)
        run(adapters, args.tiny, tables)
    for table in tables.values():
        print(table.render())
        print()
    print("summary: " + "; ".join(summary_parts(tables)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
