"""tts_app performance harness: one command, one table per measure, a summary line. Printed ratios, never pass/fail.

    python bench/run.py [--tiny] [--families vibevoice,csm,dia,higgs,indextts2] [--json OUT] [--device cpu]

Measures (tiny random checkpoints of the real architectures, built in code; nothing is downloaded):

1. throughput   engine at max batch 1/4/8 vs a one-by-one adapter loop vs the library's own batched ``generate`` on
                the same rows, per family, on a fixed mixed-length workload (16 requests of 5-200 characters, greedy):
                audio seconds per wall second and the ratio to one-by-one.
2. padding      share of padded decode row-steps, FIFO vs length bucketing, by the scheduler's own counting on the
                same workload (expected lengths, no model run, no time).
3. kv_cache     wall time and memory with the KV cache on vs off at growing output lengths (one family).
4. memory       the engine's KV estimate vs the KV bytes the run really held (transformers cache tensors, measured)
                and, on CUDA, ``max_memory_allocated`` vs the estimator's row bytes.
5. oom          items completed / submitted under ``simulate_oom_above_batch=2`` and the time cost vs no OOM.
6. frontend     text front end per request, live preview per keystroke, reference cleanup of a 30 s clip (ms).
7. jsonl        validation time and peak memory of a 10 000-line job.
8. stages       IndexTTS 2 only (when included): GPT stage vs code latents / s2mel / vocoder seconds on the same rows
                at batch 1 and 4, and the share of s2mel + vocoder (bench/indextts2_stages.py).
9. continuous   families with a step interface (``--step-families``, default vibevoice; indextts2 has one too;
                bench/continuous_bench.py):
                continuous vs request-level batching on one mixed-length workload at the same cap (throughput ratio,
                padded row-steps, equality with one by one), time to first audio of a short request submitted while
                a long job decodes (ratio), and the prefill time a one-voice job saves by reusing the voice's prefix.

``--tiny`` is the CI mode (one family, 4 short requests, 1 000 JSONL lines, a small continuous workload; about a
minute of work).
Timings on a shared machine are noisy: compare ratios within one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (bench/common.py; pins threads before torch loads)

common.setup(num_threads=1)

from common import KvCacheMeter, RssPeakSampler, Table, cuda_peak, ratio, wall_timer  # noqa: E402

ALL_FAMILIES = ("vibevoice", "csm", "dia", "higgs", "indextts2")
# Families whose adapter has a step interface (continuous batching; measure 9).
STEP_FAMILIES = ("vibevoice", "indextts2")
# Why the library's own batched generate is not timed for a family (it is for the others).
RAW_GENERATE_UNUSABLE = {
    "vibevoice": "transformers' VibeVoice generate couples rows (one global noise draw, negative stream and codec "
                 "caches advance for all rows) and ignores sampling knobs; on the tiny checkpoint it returns no audio, "
                 "so its speed is not comparable (see tts_app/adapters/vibevoice.py)",
    "indextts2": "indextts2-inference decodes one row at a time (infer_generator: autoregressive_batch_size = 1) and, "
                 "under transformers 5.x, without a KV cache (see tts_app/adapters/indextts2.py); its batch-1 output "
                 "equals the adapter's (tests/integration/test_adapter_indextts2.py)",
}


# IndexTTS 2's s2mel + vocoder stage runs per row (~1 s per row on one CPU thread, whatever the model size: 25 flow
# matching steps over reference + speech frames), so its part of the workload is smaller: the first 8 requests, cut
# into segments of up to 40 characters (its tiny checkpoint's own default is 8: a 2.4 s cap).
FAMILY_MAX_REQUESTS = {"indextts2": 8}
FAMILY_SEGMENT_CHARS = {"indextts2": 40}


def family_texts(family: str, texts: list[str]) -> list[str]:
    return texts[: FAMILY_MAX_REQUESTS.get(family, len(texts))]


def family_params(family: str, params):
    """``params`` with the family's segment length (``FAMILY_SEGMENT_CHARS``) when it has one."""
    chars = FAMILY_SEGMENT_CHARS.get(family)
    return params if chars is None else dataclasses.replace(params, max_segment_chars=chars)


FULL_LENGTH_NOTE = {"indextts2": "indextts2 rows decode to max_new_tokens here (stop code suppressed: its tiny model "
                                 "stops after a few codes; see to_the_cap)"}


def to_the_cap(adapter):
    """Context in which every row decodes to ``max_new_tokens`` (KV cache and memory measures), for families whose
    tiny random model stops after a handful of codes: IndexTTS 2's rows stop after ~5-35 codes, so cache on vs off
    and the estimate vs the held cache would compare runs that never reach the lengths asked for. Its stop code's
    logit is suppressed (``indextts2_stages.suppressed_stop``); other families run as they are."""
    import contextlib

    if adapter.family == "indextts2":
        import indextts2_stages

        return indextts2_stages.suppressed_stop(adapter, True)
    return contextlib.nullcontext()


# Decode steps a family spends on top of the audio frames asked for: Dia's last 16 steps only flush its delayed
# codebooks (tts_app/adapters/dia.py refuses max_new_tokens <= 16).
EXTRA_STEPS = {"dia": 16}


def new_tokens_for(family: str, frames: int) -> int:
    """``max_new_tokens`` giving ``frames`` audio frames' worth of decode steps for ``family``."""
    return frames + EXTRA_STEPS.get(family, 0)


# -- sizes -----------------------------------------------------------------------------------------------------------
def sizes(tiny: bool) -> dict:
    """Workload sizes of the full and the tiny (CI) mode."""
    if tiny:
        return dict(num_requests=4, min_chars=5, max_chars=80, max_new_tokens=6, batch_sizes=(1, 4),
                    kv_lengths=(4, 8), kv_rows=2, jsonl_lines=1_000, reference_repeats=1, stage_codes=8)
    return dict(num_requests=16, min_chars=5, max_chars=200, max_new_tokens=16, batch_sizes=(1, 4, 8),
                kv_lengths=(16, 32, 64), kv_rows=4, jsonl_lines=10_000, reference_repeats=3, stage_codes=100)


# -- workload --------------------------------------------------------------------------------------------------------
class Workload:
    """The fixed requests for one family: texts, their segments (the engine's own front end), reference clips.

    Attributes:
        texts: request texts.
        segments: per request, the segment texts ``prepare_text`` makes for this family.
        references: per request, (samples float32 ``(num_samples,)`` at the family's rate, transcript).
    """

    def __init__(self, adapter, texts: list[str]):
        from tts_app.frontend import prepare_text

        facts = adapter.facts
        self.adapter = adapter
        self.texts = texts = family_texts(adapter.family, texts)
        chars = FAMILY_SEGMENT_CHARS.get(adapter.family, facts.max_segment_chars)
        self.segments = [[s.text for s in prepare_text(t, supports_pinyin=facts.supports_pinyin,
                                                       max_segment_chars=chars).segments]
                         for t in texts]
        clips = [common.reference_clip(name, facts.sampling_rate, seconds) for name, seconds in common.REFERENCE_CLIPS]
        self.references = [clips[i % len(clips)] for i in range(len(texts))]

    def requests(self, params) -> list:
        from tts_app.request import Priority, ReferenceAudio, SynthesisRequest

        sr = self.adapter.facts.sampling_rate
        params = family_params(self.adapter.family, params)
        return [SynthesisRequest(text=t, reference_audio=ReferenceAudio(ref, sr), reference_text=ref_text,
                                 params=params.with_seed(i * 100), priority=Priority.JOB)
                for i, (t, (ref, ref_text)) in enumerate(zip(self.texts, self.references))]

    def rows(self, params) -> list:
        """Every segment of every request as an ``AdapterRow``, in request order (seed = request seed + index)."""
        from tts_app.adapters.base import AdapterRow

        rows = []
        for i, (segments, (ref, ref_text)) in enumerate(zip(self.segments, self.references)):
            rows += [AdapterRow(text=s, reference_audio=ref, reference_text=ref_text, seed=i * 100 + j)
                     for j, s in enumerate(segments)]
        return rows


def _audio_s(waves, sampling_rate: int) -> float:
    return sum(len(w) for w in waves) / float(sampling_rate)


# -- 1. throughput + 5. OOM ------------------------------------------------------------------------------------------
def raw_generate(adapter, inputs, max_new_tokens: int):
    """The library's own batched ``model.generate`` (greedy, cache on, the checkpoint's generation config) on the
    adapter's preprocessed inputs; returns outputs ``adapter.postprocess`` accepts.

    Raises:
        NotImplementedError: the family has no usable upstream batched generate (``RAW_GENERATE_UNUSABLE``).
    """
    import torch

    family = adapter.family
    model = adapter.model
    with torch.no_grad():
        if family == "csm":
            from tts_app.adapters.csm import CsmOutputs

            config = model.config
            # ids the codec cannot decode are suppressed, as in the adapter (and its parity test)
            non_codec = list(range(config.codec_config.codebook_size, config.vocab_size))
            codes = model.generate(
                input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, input_values=inputs.input_values,
                input_values_cutoffs=inputs.input_values_cutoffs, max_new_tokens=max_new_tokens, do_sample=False,
                depth_decoder_do_sample=False, suppress_tokens=non_codec, depth_decoder_suppress_tokens=non_codec)
            return CsmOutputs(codes=codes)
        if family == "dia":
            return model.generate(
                input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                decoder_input_ids=inputs.decoder_input_ids, decoder_attention_mask=inputs.decoder_attention_mask,
                max_new_tokens=max_new_tokens, do_sample=False)
        if family == "higgs":
            return model.generate(**inputs["batch"], max_new_tokens=max_new_tokens, do_sample=False, use_cache=True)
    raise NotImplementedError(RAW_GENERATE_UNUSABLE.get(family, f"no raw generate for {family}"))


def measure_throughput(adapters: dict, texts: list[str], cfg: dict, throughput: Table, oom: Table) -> None:
    """Fill the throughput and OOM tables (see module docstring)."""
    from engine_bench import run_engine

    from tts_app.config import EngineConfig
    from tts_app.request import SynthesisParams

    for family, adapter in adapters.items():
        max_new = new_tokens_for(family, cfg["max_new_tokens"])
        params = SynthesisParams(greedy=True, max_new_tokens=max_new)
        device = str(getattr(adapter, "device", "cpu"))
        sr = adapter.facts.sampling_rate
        work = Workload(adapter, texts)
        rows = work.rows(params)
        num_requests = len(work.texts)
        # Untimed warm-up pass over every row: first calls at a new shape pay one-off costs (oneDNN primitive
        # caches, lazy codec init) that would otherwise land on whichever mode runs first.
        for row in rows:
            adapter.synthesize([row], params)

        def add(mode: str, batch: int, wall_s: float, audio_s: float, num_batches: int) -> dict:
            row = {"family": family, "mode": mode, "max_batch": batch, "requests": num_requests,
                   "segments": len(rows), "batches": num_batches, "wall_s": wall_s, "audio_s": audio_s,
                   "audio_s_per_wall_s": ratio(audio_s, wall_s)}
            throughput.rows.append(row)
            return row

        with wall_timer(device) as t:
            waves = [adapter.synthesize([row], params)[0] for row in rows]
        base = add("one-by-one loop", 1, t["s"], _audio_s(waves, sr), len(rows))

        engine_rows = {}
        for batch in cfg["batch_sizes"]:
            seconds, stats, results = run_engine(adapter, work.requests(params),
                                                 EngineConfig(max_batch_size=batch, wait_window_ms=0.0))
            audio = sum(seg.end_s - seg.start_s for r in results if r.ok for seg in r.segments)
            engine_rows[batch] = add("engine", batch, seconds, audio, stats.num_batches)
            engine_rows[batch]["completed"] = sum(r.ok for r in results)

        raw_batch = max(cfg["batch_sizes"])
        try:
            waves, num_batches = [], 0
            with wall_timer(device) as t:
                for start in range(0, len(rows), raw_batch):
                    chunk = rows[start:start + raw_batch]
                    inputs = adapter.preprocess(chunk, params)
                    waves += adapter.postprocess(raw_generate(adapter, inputs, max_new), inputs)
                    num_batches += 1
            add("raw generate", raw_batch, t["s"], _audio_s(waves, sr), num_batches)
        except NotImplementedError as exc:
            throughput.rows.append({"family": family, "mode": "raw generate", "max_batch": raw_batch,
                                    "status": "n/a"})
            throughput.notes.append(f"{family} raw generate n/a: {exc}")
        except Exception as exc:  # noqa: BLE001 - an upstream failure is a finding, reported, not a crash
            throughput.rows.append({"family": family, "mode": "raw generate", "max_batch": raw_batch,
                                    "status": "n/a"})
            throughput.notes.append(f"{family} raw generate failed upstream: {type(exc).__name__}: {exc}"[:300])

        for row in throughput.rows:
            if row["family"] == family and row.get("status") != "n/a":
                row["vs_one_by_one"] = ratio(row["audio_s_per_wall_s"], base["audio_s_per_wall_s"])

        # 5. OOM survival at the largest batch size: every batch above 2 rows raises a real torch.OutOfMemoryError
        seconds, stats, results = run_engine(adapter, work.requests(params), EngineConfig(
            max_batch_size=raw_batch, wait_window_ms=0.0, simulate_oom_above_batch=2))
        clean = engine_rows[raw_batch]
        oom.rows.append({"family": family, "max_batch": raw_batch, "oom_above": 2, "submitted": len(results),
                         "completed": sum(r.ok for r in results), "num_oom": stats.num_oom,
                         "final_cap": stats.batch_cap, "wall_s": seconds, "wall_s_no_oom": clean["wall_s"],
                         "time_cost": ratio(seconds, clean["wall_s"])})
        print(f"[bench] throughput + OOM of {family} done", file=sys.stderr, flush=True)


# -- 2. padding ------------------------------------------------------------------------------------------------------
def measure_padding(adapters: dict, texts: list[str], cfg: dict, table: Table) -> None:
    """Padded decode row-steps, FIFO vs bucketing, on the workload's segments (the scheduler's own counting)."""
    from engine_bench import count_steps

    from tts_app.speaking_rate import expected_speech_s

    for family, adapter in adapters.items():
        facts = adapter.facts
        work = Workload(adapter, texts)
        max_new = facts.default_max_new_tokens
        # the engine's expected decode steps of a segment (tts_app/engine/core.py, Engine.submit)
        steps = [max(1, min(max_new, math.ceil(expected_speech_s(s) * facts.frames_per_second)))
                 for segs in work.segments for s in segs]
        for cap in sorted({4, max(cfg["batch_sizes"])}):
            for policy, bucketing in (("fifo", False), ("bucketing", True)):
                decode_steps, padded, row_steps = count_steps(steps, cap, bucketing)
                table.rows.append({"family": family, "cap": cap, "policy": policy, "segments": len(steps),
                                   "decode_steps": decode_steps, "padded_row_steps": padded,
                                   "row_steps": row_steps, "padded_share": ratio(padded, row_steps)})


# -- 3. KV cache on / off --------------------------------------------------------------------------------------------
def measure_kv_cache(adapter, texts: list[str], cfg: dict, table: Table) -> None:
    """Cache on vs off for a batch of ``kv_rows`` rows at growing output lengths: wall time, measured KV bytes,
    RSS growth (CPU) or CUDA peak allocation."""
    from tts_app.request import SynthesisParams

    device = str(getattr(adapter, "device", "cpu"))
    rows = Workload(adapter, texts).rows(SynthesisParams())[: cfg["kv_rows"]]
    for new_tokens in (new_tokens_for(adapter.family, n) for n in cfg["kv_lengths"]):
        on_s = None
        for use_cache in (True, False):
            params = SynthesisParams(greedy=True, max_new_tokens=new_tokens, use_cache=use_cache)
            with to_the_cap(adapter), KvCacheMeter() as kv, RssPeakSampler() as rss, cuda_peak(device) as cuda, \
                    wall_timer(device) as t:
                waves = adapter.synthesize(rows, params)
            row = {"family": adapter.family, "rows": len(rows), "max_new_tokens": new_tokens, "use_cache": use_cache,
                   "wall_s": t["s"], "audio_s": _audio_s(waves, adapter.facts.sampling_rate),
                   "kv_peak_bytes": kv.peak_bytes, "rss_growth_bytes": rss.peak_growth_bytes}
            if cuda["peak_bytes"] is not None:
                row["cuda_peak_bytes"] = cuda["peak_bytes"]
            if use_cache:
                on_s = t["s"]
            row["time_vs_cache_on"] = ratio(t["s"], on_s)
            table.rows.append(row)
    if adapter.family in FULL_LENGTH_NOTE:
        table.notes.append(FULL_LENGTH_NOTE[adapter.family])


# -- 4. memory estimate vs measured ----------------------------------------------------------------------------------
def measure_memory(adapters: dict, texts: list[str], cfg: dict, table: Table) -> None:
    """One row (the workload's longest segment with its reference) per family: the engine's KV estimate at
    ``max_new_tokens`` vs the KV bytes the run held at its peak (and CUDA peak vs the estimator's row bytes)."""
    from tts_app.engine.memory import MemoryEstimator
    from tts_app.request import SynthesisParams

    for family, adapter in adapters.items():
        new_tokens = new_tokens_for(family, max(cfg["kv_lengths"]))
        params = SynthesisParams(greedy=True, max_new_tokens=new_tokens)
        facts = adapter.facts
        device = str(getattr(adapter, "device", "cpu"))
        row = max(Workload(adapter, texts).rows(params), key=lambda r: len(r.text))
        estimator = MemoryEstimator(facts.kv_bytes_per_position, facts.cfg_multiplier)
        ref_s = len(row.reference_audio) / facts.sampling_rate
        positions = adapter.estimate_positions(len(row.text), ref_s, len(row.reference_text or ""), new_tokens)
        with to_the_cap(adapter), KvCacheMeter() as kv, cuda_peak(device) as cuda:
            adapter.synthesize([row], params)
        out = {"family": family, "text_chars": len(row.text), "reference_s": ref_s, "max_new_tokens": new_tokens,
               "est_positions": positions, "est_kv_bytes": estimator.kv_bytes(positions),
               "measured_kv_bytes": kv.peak_bytes, "measured_max_positions": kv.max_positions,
               "est_vs_measured": ratio(estimator.kv_bytes(positions), kv.peak_bytes)}
        if cuda["peak_bytes"] is not None:
            out["cuda_peak_bytes"] = cuda["peak_bytes"]
            out["est_row_bytes"] = estimator.row_bytes(positions)
            out["est_row_vs_cuda_peak"] = ratio(out["est_row_bytes"], cuda["peak_bytes"])
        table.rows.append(out)
        if family in FULL_LENGTH_NOTE:
            table.notes.append(FULL_LENGTH_NOTE[family])


# -- 6. front end + reference ----------------------------------------------------------------------------------------
def measure_frontend(texts: list[str], cfg: dict, table: Table) -> None:
    """Front end per request (median ms over the workload, after warm-up), preview per keystroke, and the reference
    cleanup stages of a 30 s clip."""
    from frontend_bench import preview_ms_per_keystroke
    from reference_bench import stage_timings

    from tts_app.frontend import prepare_text, warm_up

    warm_up()
    per_request = []
    for text in texts:
        t0 = time.perf_counter()
        prepare_text(text)
        per_request.append((time.perf_counter() - t0) * 1000)
    table.rows.append({"item": f"prepare_text per request (median of {len(texts)}, 5-"
                               f"{max(len(t) for t in texts)} chars)", "wall_ms": statistics.median(per_request)})
    table.rows.append({"item": "preview_pronunciation per keystroke", "wall_ms": preview_ms_per_keystroke()})
    audio_s, stages = stage_timings(seconds=30.0, repeats=cfg["reference_repeats"])
    for label, (wall, cpu) in stages.items():
        table.rows.append({"item": f"reference {audio_s:.0f} s clip: {label}", "wall_ms": wall * 1000,
                           "cpu_ms": cpu * 1000, "x_real_time": ratio(audio_s, wall)})


# -- 7. JSONL --------------------------------------------------------------------------------------------------------
def measure_jsonl(cfg: dict, table: Table) -> None:
    from jobs_bench import bench_validation, make_work_dir

    with tempfile.TemporaryDirectory(prefix="bench_jsonl_") as tmp:
        out = bench_validation(make_work_dir(Path(tmp)), cfg["jsonl_lines"])
    out["heap_vs_file"] = ratio(out["heap_peak_bytes"], out["file_bytes"])
    table.rows.append(out)


# -- 8. IndexTTS 2 stages -------------------------------------------------------------------------------------------
def measure_stages(adapters: dict, cfg: dict, table: Table, device: str) -> None:
    """IndexTTS 2 only: where its time goes (bench/indextts2_stages.py), 4 rows at batch 1 and 4."""
    if "indextts2" not in adapters:
        table.notes.append("IndexTTS 2 not among --families")
        return
    import indextts2_stages

    measured, extra = indextts2_stages.measure(adapters["indextts2"], [1, 4], cfg["stage_codes"], device)
    table.rows += measured.rows
    table.notes += measured.notes


# -- 9. continuous batching ---------------------------------------------------------------------------------------
def measure_continuous(args, work_dir: Path, device: str, tables: dict) -> None:
    """The continuous / ttfa / prefix tables (bench/continuous_bench.py) for ``--step-families``."""
    import continuous_bench

    adapters = continuous_bench.step_adapters(args.step_families, work_dir / "steps", device)
    continuous_bench.run(adapters, args.tiny, tables)


# -- main ------------------------------------------------------------------------------------------------------------
def build_tables(tiny: bool) -> dict[str, Table]:
    from continuous_bench import build_tables as continuous_tables

    return {**_tables(), **continuous_tables()}


def _tables() -> dict[str, Table]:
    return {
        "throughput": Table("throughput", "throughput: audio seconds per wall second (greedy, tiny checkpoints)",
                            ["family", "mode", "max_batch", "segments", "batches", "wall_s", "audio_s",
                             "audio_s_per_wall_s", "vs_one_by_one"],
                            ["wall_s", "audio_s", "audio_s_per_wall_s", "vs_one_by_one"]),
        "padding": Table("padding", "padding waste: padded decode row-steps, FIFO vs length bucketing",
                         ["family", "cap", "policy", "segments", "decode_steps", "padded_row_steps", "row_steps",
                          "padded_share"], ["decode_steps", "padded_row_steps", "row_steps", "padded_share"]),
        "kv_cache": Table("kv_cache", "KV cache on vs off (one batch)",
                          ["family", "rows", "max_new_tokens", "use_cache", "wall_s", "audio_s", "kv_peak_bytes",
                           "rss_growth_bytes", "time_vs_cache_on"],
                          ["wall_s", "audio_s", "kv_peak_bytes", "rss_growth_bytes", "time_vs_cache_on"]),
        "memory": Table("memory", "memory: engine KV estimate vs measured (one row, longest segment)",
                        ["family", "text_chars", "max_new_tokens", "est_positions", "measured_max_positions",
                         "est_kv_bytes", "measured_kv_bytes", "est_vs_measured"],
                        ["est_positions", "est_kv_bytes", "measured_kv_bytes", "est_vs_measured"]),
        "oom": Table("oom", "OOM survival: simulate_oom_above_batch=2 (real torch.OutOfMemoryError)",
                     ["family", "max_batch", "submitted", "completed", "num_oom", "final_cap", "wall_s",
                      "wall_s_no_oom", "time_cost"],
                     ["submitted", "completed", "num_oom", "wall_s", "wall_s_no_oom", "time_cost"]),
        "frontend": Table("frontend", "front end and reference audio (ms)", ["item", "wall_ms", "cpu_ms",
                                                                            "x_real_time"], ["wall_ms"]),
        "stages": Table("stages", "IndexTTS 2 stages: GPT decode vs latents / s2mel / vocoder (same rows)",
                        ["batch", "gpt_s", "latents_s", "s2mel_s", "vocoder_s", "total_s", "s2mel_vocoder_share",
                         "gpt_share", "codes", "audio_s"],
                        ["gpt_s", "latents_s", "s2mel_s", "vocoder_s", "total_s", "s2mel_vocoder_share",
                         "gpt_share", "audio_s"]),
        "jsonl": Table("jsonl", "JSONL job validation",
                       ["num_lines", "file_bytes", "seconds", "lines_per_s", "heap_peak_bytes", "heap_vs_file",
                        "rss_growth_bytes"],
                       ["num_lines", "file_bytes", "seconds", "lines_per_s", "heap_peak_bytes", "rss_growth_bytes"]),
    }


def add_notes(tables: dict[str, Table], device: str, cfg: dict) -> None:
    cuda = device.startswith("cuda")
    tables["throughput"].notes += [
        "wall time includes preprocessing, decode and codec; engine rows include the front end and scheduling",
        "tiny random models stop at arbitrary steps, so audio_s is what greedy decoding made (equal across modes "
        "when batching is exact); raw generate uses the checkpoint's generation config, cache on",
        "engine rows of a family with a step interface (vibevoice) batch continuously (rows join and leave every "
        "decode step); the continuous table compares that with request-level batching",
    ]
    tables["padding"].notes.append("expected steps per segment are the engine's own estimate (read-speech rate x "
                                   "frame rate, capped at the family's default max_new_tokens); counted, not timed")
    tables["kv_cache"].notes.append(
        "kv_peak_bytes: live transformers cache tensors, measured by wrapping DynamicLayer.update; "
        + ("cuda_peak_bytes: torch.cuda.max_memory_allocated growth" if cuda else
           "rss_growth_bytes: sampled process RSS (coarse on CPU; tiny caches are far below the allocator's noise)"))
    tables["memory"].notes.append(
        "estimate = kv_bytes_per_position x estimate_positions(max_new_tokens) x cfg_multiplier; measured = peak of "
        "the cache tensors the run held. Tiny random models may stop before max_new_tokens, so est >= measured is "
        "expected; est < measured would be an under-estimate"
        + ("" if cuda else "; no CUDA here, so no max_memory_allocated comparison (run on a GPU for it, or "
           "bench/gpu_check.py)"))
    tables["oom"].notes.append("the engine halves its batch cap on each OOM, requeues the rows and grows back after "
                               "successes; time_cost = wall with OOM / wall without")
    tables["jsonl"].notes.append("heap = tracemalloc peak (Python objects); validation streams the file")


def summary_line(tables: dict[str, Table]) -> str:
    parts = []
    tp = [r for r in tables["throughput"].rows if r.get("status") != "n/a"]
    for family in dict.fromkeys(r["family"] for r in tp):
        mine = [r for r in tp if r["family"] == family]
        best = max((r for r in mine if r["mode"] == "engine"), key=lambda r: r["vs_one_by_one"])
        raw = next((r for r in mine if r["mode"] == "raw generate"), None)
        parts.append(f"{family} engine b{best['max_batch']} x{best['vs_one_by_one']:.2f} vs one-by-one"
                     + (f" (raw generate x{raw['vs_one_by_one']:.2f})" if raw else ""))
    pad = tables["padding"].rows
    if pad:
        cap = max(r["cap"] for r in pad)
        fifo = statistics.mean(r["padded_share"] for r in pad if r["cap"] == cap and r["policy"] == "fifo")
        buck = statistics.mean(r["padded_share"] for r in pad if r["cap"] == cap and r["policy"] == "bucketing")
        parts.append(f"padded steps at cap {cap}: fifo {fifo:.0%} -> bucketing {buck:.0%}")
    kv = [r for r in tables["kv_cache"].rows if not r["use_cache"]]
    if kv:
        longest = kv[-1]
        parts.append(f"cache off x{longest['time_vs_cache_on']:.2f} slower at {longest['max_new_tokens']} tokens")
    oom = tables["oom"].rows
    if oom:
        parts.append(f"OOM: {sum(r['completed'] for r in oom)}/{sum(r['submitted'] for r in oom)} completed at "
                     f"x{statistics.mean(r['time_cost'] for r in oom):.2f} time")
    fe = {r["item"]: r["wall_ms"] for r in tables["frontend"].rows}
    ref = next((v for k, v in fe.items() if k.endswith("prepare_reference (array)")), None)
    if ref is not None:
        parts.append(f"reference 30 s {ref:.0f} ms")
    stages = {r["batch"]: r for r in tables["stages"].rows}
    if stages:
        low, high = min(stages), max(stages)
        parts.append(f"indextts2 s2mel+vocoder {stages[low]['s2mel_vocoder_share']:.0%} of the time at batch {low}, "
                     f"{stages[high]['s2mel_vocoder_share']:.0%} at batch {high}")
    js = tables["jsonl"].rows
    if js:
        parts.append(f"JSONL {js[0]['num_lines']:,} lines {js[0]['seconds']:.2f} s")
    from continuous_bench import summary_parts

    parts += summary_parts(tables)
    return "summary: " + "; ".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", "--quick", action="store_true", help="small CI mode (seconds, not minutes)")
    parser.add_argument("--families", default=None,
                        help=f"comma-separated families, from {','.join(ALL_FAMILIES)} (default: all; --tiny: csm)")
    parser.add_argument("--kv-family", default=None, help="family of the KV cache table (default: csm if chosen, "
                                                          "else the first)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write every number to this JSON file")
    parser.add_argument("--step-families", default="vibevoice",
                        help="families measured in the continuous-batching tables (those with a step interface: "
                             "vibevoice, indextts2; default vibevoice; '' = none)")
    args = parser.parse_args(argv)
    families = args.families.split(",") if args.families else (["csm"] if args.tiny else list(ALL_FAMILIES))
    families = [f.strip() for f in families if f.strip()]
    unknown = [f for f in families if f not in ALL_FAMILIES]
    if unknown or not families:
        parser.error(f"--families: unknown {unknown}; choose from {','.join(ALL_FAMILIES)}")
    args.families = families
    args.step_families = [f.strip() for f in args.step_families.split(",") if f.strip()]
    if any(f not in STEP_FAMILIES for f in args.step_families):
        parser.error(f"--step-families: choose from {','.join(STEP_FAMILIES)}")
    if args.kv_family is None:
        args.kv_family = "csm" if "csm" in families else families[0]
    elif args.kv_family not in families:
        parser.error(f"--kv-family {args.kv_family} must be one of --families ({','.join(families)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from tts_app.adapters import resolve_device

    device = resolve_device(args.device)
    cfg = sizes(args.tiny)
    texts = common.workload_texts(cfg["num_requests"], cfg["min_chars"], cfg["max_chars"])
    tables = build_tables(args.tiny)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_run_") as tmp:
        adapters = {}
        t0 = time.perf_counter()
        for family in args.families:
            adapters[family] = common.load_tiny_adapter(family, Path(tmp), device=device)
        timings["load_s"] = time.perf_counter() - t0
        print(f"[bench] loaded {', '.join(args.families)} in {timings['load_s']:.1f} s", file=sys.stderr, flush=True)

        for name, fn in (
            ("throughput", lambda: measure_throughput(adapters, texts, cfg, tables["throughput"], tables["oom"])),
            ("padding", lambda: measure_padding(adapters, texts, cfg, tables["padding"])),
            ("kv_cache", lambda: measure_kv_cache(adapters[args.kv_family], texts, cfg, tables["kv_cache"])),
            ("memory", lambda: measure_memory(adapters, texts, cfg, tables["memory"])),
            ("frontend", lambda: measure_frontend(texts, cfg, tables["frontend"])),
            ("jsonl", lambda: measure_jsonl(cfg, tables["jsonl"])),
            ("stages", lambda: measure_stages(adapters, cfg, tables["stages"], device)),
            ("continuous", lambda: measure_continuous(args, Path(tmp), device, tables)),
        ):
            t0 = time.perf_counter()
            fn()
            timings[f"{name}_s"] = time.perf_counter() - t0
            print(f"[bench] {name} done in {timings[f'{name}_s']:.1f} s", file=sys.stderr, flush=True)
    if device.startswith("cuda"):
        for name in ("kv_cache", "memory"):
            extra = ["cuda_peak_bytes"] + (["est_row_bytes", "est_row_vs_cuda_peak"] if name == "memory" else [])
            tables[name].columns += extra
            tables[name].numeric += extra
    add_notes(tables, device, cfg)
    timings["total_s"] = time.perf_counter() - started

    print()
    for table in tables.values():
        print(table.render())
        print()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"run: {'tiny' if args.tiny else 'full'} mode, device {device}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, load average {load:.1f}, "
          f"{timings['total_s']:.0f} s in all")
    line = summary_line(tables)
    print(line)
    if args.json_out:
        report = {"meta": {"mode": "tiny" if args.tiny else "full", "device": device, "families": args.families,
                           "torch": torch.__version__, "python": platform.python_version(),
                           "threads": torch.get_num_threads(), "load_average": load, "sizes": {
                               k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
                           "workload_texts": texts, "timings_s": timings},
                  "tables": {name: t.to_json() for name, t in tables.items()}, "summary": line}
        Path(args.json_out).write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
