"""GPU check: the full-size VibeVoice-1.5B architecture (random bfloat16 weights, built in code, nothing downloaded)
on one CUDA device, in a few minutes, ending with a JSON report. ``--family indextts2`` checks IndexTTS 2 instead
(bench/gpu_check_indextts2.py: full-size IndexTTS-2, GPT float16).

    python bench/gpu_check.py [--json OUT] [--batch-sizes 1,2,4,8,16] [--new-tokens 32] [--budget-s 420]
    python bench/gpu_check.py --family indextts2 [--json OUT]   # batch sizes 1,4,8,16, 64 codes per row
    python bench/gpu_check.py --device cpu --tiny [--family indextts2]   # the same code paths on CPU, tiny model

Measures:

1. decode frames/s at batch 1, 2, 4, 8, 16 with the KV cache on and off, through the adapter's own decode loop
   (``VibeVoiceAdapter.generate``: positive + CFG-negative LM streams, diffusion head, codec decoder, semantic
   encoder per frame). The LM is made to always choose "one more frame" so every row decodes exactly
   ``--new-tokens`` frames (a random LM would stop at arbitrary steps); per-frame work is unchanged by that.
   Decode time = time(prefill + N frames) - time(prefill + 1 frame).
2. peak memory (``torch.cuda.max_memory_allocated`` growth) per run vs the engine's estimate for the same batch
   (``MemoryEstimator.batch_bytes``).
3. the memory-bandwidth bound at batch 1: every frame reads the LM's layer weights twice (positive and negative
   stream), the LM head (tied to the input embedding) once, the diffusion head once per diffusion step (10), the
   codec decoder, the semantic encoder and the two connectors once. bound frames/s = bandwidth / those bytes; printed with measured / bound.
4. OOM back-off through the real ``Engine``: ``torch.cuda.set_per_process_memory_fraction`` caps this process
   between the measured peaks of small and large batches; 16 requests at max batch 16 must all finish while the
   engine halves its cap on each real ``torch.OutOfMemoryError`` (continuous batching: the youngest rows are
   requeued, the others go on). On CPU (``--device cpu``) the OOM is simulated (``simulate_oom_above_batch``).
5. continuous vs request-level batching (issue 15): 64 mixed-length requests (5-200 characters; each row stops at
   its text's expected spoken length, ``bench/continuous_bench.py length_driven``) at caps 8 and 16: audio seconds
   per second and padded row-steps of each mode and their ratio, the largest sample difference to the first mode
   (equality), peak memory (``max_memory_allocated`` growth) vs the engine's budget; then the time to the first
   streamed chunk of a short interactive request submitted while a long job fills the batch, request-level vs
   continuous without and with preemption (job rows giving their slot to it).

6. decode paths (issue 27; ``--family vibevoice`` and ``indextts2``): the step interface (``DecodeBatch``: prefill
   every row, then decode steps) on the eager path (``DecodeSettings(pooled=False)``: ``DynamicCache`` merged by
   concatenation, per-row host syncs), the pooled path (``KVPool``) and the pooled + compiled path
   (``torch.compile(mode="reduce-overhead")``: a CUDA graph per batch bucket) at batch 1, 8, 32, 64: aggregate
   frames (codes) per second, % of the bandwidth bound of a decode step (weights read once per step, whatever the
   batch: bound = batch x bandwidth / weight bytes per frame), time to the first frame (prefill + one step; for
   IndexTTS 2 the first code: its audio comes when the row ends), and the CUDA peak against the engine's budget.

``--dry-run``: measure 6 only, on the CPU with the tiny checkpoint, batch 1 and 2, 4 steps, eager and pooled (the
compiled path only with ``--compile-on-cpu``): the same code paths, so this script is not dead code without a GPU.

Without CUDA (and without ``--device cpu``) it prints one line saying so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# Peak memory bandwidth, bytes/s, by device name. Sources: NVIDIA product pages / datasheets — H200 SXM 141 GB HBM3e
# 4.8 TB/s (https://www.nvidia.com/en-us/data-center/h200/), H100 SXM 3.35 TB/s and H100 PCIe 2.0 TB/s
# (https://www.nvidia.com/en-us/data-center/h100/), A100 80GB SXM 2.039 TB/s (A100 datasheet).
DEVICE_BANDWIDTH_BYTES_PER_S = {"H200": 4.8e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.039e12}
# Nominal CPU figure used only to exercise the code path on CPU (one DDR4-3200 channel = 25.6 GB/s); not measured.
CPU_NOMINAL_BANDWIDTH_BYTES_PER_S = 25.6e9
NUM_DIFFUSION_STEPS = 10  # transformers' VibeVoiceGenerationMixin default, as in tts_app/adapters/vibevoice.py
REFERENCE = ("en_female_1.wav", 3.0)  # real speech from tests/data; 3 s = 23 reference frames at 7.5 frames/s
TEXT = ("The morning train was late again, so Maria finished a chapter of her book while she waited on the "
        "platform.")

NO_CUDA_MESSAGE = ("gpu_check: no CUDA device (torch.cuda.is_available() is False); this check measures a GPU. Run "
                   "it on a CUDA machine, or run `python bench/gpu_check.py --device cpu --tiny` to exercise its code "
                   "paths on CPU.")


def forced_frames_adapter_class():
    """``VibeVoiceAdapter`` whose LM always picks ``<audio>`` (one more frame), so each row decodes exactly
    ``max_new_tokens`` frames. Everything else is the adapter's own code."""
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    class ForcedFramesAdapter(VibeVoiceAdapter):
        def _select_tokens(self, hidden, allowed, rows):
            import torch

            self.model.lm_head(hidden)  # keep the LM-head read, as a real step does
            return torch.full((hidden.shape[0],), self.model.config.audio_token_id, dtype=torch.long,
                              device=hidden.device)

    return ForcedFramesAdapter


def build_full_adapter(device: str):
    """VibeVoice-1.5B (``VIBEVOICE_1_5B_CONFIG``) with random bfloat16 weights, created on ``device``, and a
    processor built in code. The tokenizer is the tiny one-token-per-character tokenizer (``build_char_tokenizer``);
    the config's special-token ids are set to that tokenizer's ids, which leaves every weight shape (vocabulary
    151,936 included) as published."""
    import copy

    import torch
    from transformers import (VibeVoiceAcousticTokenizerFeatureExtractor, VibeVoiceConfig,
                              VibeVoiceForConditionalGeneration, VibeVoiceProcessor)

    from tts_app.adapters.tiny_vocab import build_char_tokenizer
    from tts_app.adapters.vibevoice import VIBEVOICE_1_5B_CONFIG

    specials = ["<unk>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>"]
    tokenizer = build_char_tokenizer(specials, unk_token="<unk>", pad_token="<|endoftext|>",
                                     eos_token="<|endoftext|>", padding_side="left")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    values = copy.deepcopy(VIBEVOICE_1_5B_CONFIG)
    values.update(pad_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
                  audio_bos_token_id=ids["<|vision_start|>"], audio_eos_token_id=ids["<|vision_end|>"],
                  audio_token_id=ids["<|vision_pad|>"])
    config = VibeVoiceConfig(**values)
    torch.manual_seed(0)
    with torch.device(device):
        model = VibeVoiceForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    model.generation_config.noise_scheduler_class = "DPMSolverMultistepScheduler"
    model.generation_config.noise_scheduler_config = {"beta_schedule": "squaredcos_cap_v2",
                                                      "prediction_type": "v_prediction"}
    model.generation_config.num_diffusion_steps = NUM_DIFFUSION_STEPS
    feature_extractor = VibeVoiceAcousticTokenizerFeatureExtractor(
        sampling_rate=24000, pad_to_multiple_of=config.audio_config.hop_length)
    processor = VibeVoiceProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer)
    return forced_frames_adapter_class()(model, processor, device=device, dtype="bfloat16")


def build_tiny_adapter(device: str, work_dir: Path):
    """The tiny VibeVoice checkpoint (``make_tiny_checkpoint``), float32, loaded like a real one."""
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    path = VibeVoiceAdapter.make_tiny_checkpoint(work_dir / "tiny-vibevoice")
    base = VibeVoiceAdapter.from_pretrained(path, device=device, dtype="float32")
    return forced_frames_adapter_class()(base.model, base.processor, device=device, dtype="float32")


def module_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def bandwidth_bound(adapter, device: str, bandwidth: float) -> dict:
    """Bytes of weights one frame reads at batch 1 and the frames/s that bandwidth allows (see module docstring)."""
    inner = adapter.model.model
    # the input embedding is only looked up (a few rows), not streamed; the LM head (tied to it) is read in full
    lm = module_bytes(inner.language_model) - module_bytes(inner.language_model.get_input_embeddings())
    head = module_bytes(adapter.model.lm_head)
    diffusion = module_bytes(inner.diffusion_head) * adapter._num_diffusion_steps
    codec_decoder = module_bytes(inner.audio_tower.decoder) if hasattr(inner.audio_tower, "decoder") else \
        module_bytes(inner.audio_tower) // 2
    semantic = module_bytes(inner.semantic_tokenizer_encoder)
    connectors = module_bytes(inner.multi_modal_projector) + module_bytes(inner.semantic_connector)
    per_frame = 2 * lm + head + diffusion + codec_decoder + semantic + connectors
    return {"bandwidth_bytes_per_s": bandwidth, "weight_bytes_per_frame": per_frame,
            "parts_bytes": {"language_model_x2": 2 * lm, "lm_head": head, "diffusion_head_x_steps": diffusion,
                            "codec_decoder": codec_decoder, "semantic_encoder": semantic, "connectors": connectors},
            "bound_tokens_per_s": bandwidth / per_frame}


def device_bandwidth(device: str, override: float | None) -> tuple[float, str]:
    if override is not None:
        return override, "given by --bandwidth-gbps"
    if not device.startswith("cuda"):
        return CPU_NOMINAL_BANDWIDTH_BYTES_PER_S, "nominal CPU figure (one DDR4-3200 channel), not measured"
    import torch

    name = torch.cuda.get_device_name(device)
    for key, value in DEVICE_BANDWIDTH_BYTES_PER_S.items():
        if key in name:
            return value, f"{name}: published peak ({key})"
    return DEVICE_BANDWIDTH_BYTES_PER_S["H200"], f"{name}: unknown, assumed H200's 4.8 TB/s (pass --bandwidth-gbps)"


def rows_for(adapter, batch_size: int):
    from tts_app.adapters.base import AdapterRow

    ref, _ = common.reference_clip(REFERENCE[0], adapter.facts.sampling_rate, REFERENCE[1])
    return [AdapterRow(text=TEXT, reference_audio=ref, reference_text=None, seed=i) for i in range(batch_size)]


def timed_generate(adapter, rows, new_tokens: int, use_cache: bool, device: str) -> tuple[float, int | None]:
    """Wall seconds (CUDA synchronised) of preprocess + generate for ``rows``, and the CUDA peak growth."""
    from tts_app.request import SynthesisParams

    params = SynthesisParams(greedy=True, max_new_tokens=new_tokens, use_cache=use_cache)
    with common.cuda_peak(device) as peak, common.wall_timer(device) as t:
        outputs = adapter.generate(adapter.preprocess(rows, params), params)
    frames = {len(c) for c in outputs.audio_chunks}
    if frames != {new_tokens}:
        raise RuntimeError(f"expected {new_tokens} frames per row, got {sorted(frames)}")
    return t["s"], peak["peak_bytes"]


def measure_decode(adapter, device: str, batch_sizes: list[int], new_tokens: int, deadline: float) -> list[dict]:
    from tts_app.engine.memory import MemoryEstimator

    facts = adapter.facts
    estimator = MemoryEstimator(facts.kv_bytes_per_position, facts.cfg_multiplier)
    ref_s = REFERENCE[1]
    results = []
    timed_generate(adapter, rows_for(adapter, 1), 2, True, device)  # warm-up (kernels, allocator)
    for batch_size in batch_sizes:
        rows = rows_for(adapter, batch_size)
        positions = adapter.estimate_positions(len(TEXT), ref_s, 0, new_tokens)
        for use_cache in (True, False):
            if time.monotonic() > deadline:
                results.append({"batch_size": batch_size, "use_cache": use_cache, "skipped": "time budget spent"})
                continue
            one_s, _ = timed_generate(adapter, rows, 1, use_cache, device)
            full_s, peak = timed_generate(adapter, rows, new_tokens, use_cache, device)
            decode_s = max(full_s - one_s, 1e-9)
            row = {"batch_size": batch_size, "use_cache": use_cache, "new_tokens": new_tokens,
                   "prefill_plus_one_s": one_s, "total_s": full_s, "decode_s": decode_s,
                   "tokens_per_s": batch_size * (new_tokens - 1) / decode_s,
                   "est_batch_bytes": estimator.batch_bytes([positions] * batch_size)}
            if peak is not None:
                row["cuda_peak_bytes"] = peak
                row["est_vs_peak"] = row["est_batch_bytes"] / max(peak, 1)
            results.append(row)
            print(f"  batch {batch_size:2d} cache {'on ' if use_cache else 'off'}: {row['tokens_per_s']:8.1f} frames/s"
                  + (f", peak {peak / 2**20:8.1f} MiB, estimate {row['est_batch_bytes'] / 2**20:8.1f} MiB"
                     if peak is not None else ""), flush=True)
    return results


DECODE_PATHS = (("eager", False, False), ("pooled", True, False), ("pooled+compiled", True, True))


def measure_decode_paths(adapter, device: str, batch_sizes: list[int], steps: int, rows_for_batch,
                         weight_bytes_per_frame: int, bandwidth: float, *, compile_paths: bool = True,
                         deadline: float = float("inf")) -> list[dict]:
    """Measure 6 (module docstring): each path at each batch size through ``adapter.start_decode``. The adapter
    must make a frame (code) per row per step and not stop before ``steps`` (forced, as measure 1). Returns one
    dict per (path, batch size)."""
    import torch

    from tts_app.adapters.kv_pool import DecodeSettings
    from tts_app.config import EngineConfig
    from tts_app.engine.memory import memory_budget_bytes, probe_for_device
    from tts_app.request import SynthesisParams

    config = EngineConfig()
    budget = memory_budget_bytes(probe_for_device(device), memory_budget_bytes=config.memory_budget_bytes,
                                 memory_utilization=config.memory_utilization,
                                 safety_margin_bytes=config.safety_margin_bytes)
    params = SynthesisParams(greedy=True, num_beams=1, max_new_tokens=steps + 2)
    results = []
    for name, pooled, compiled in DECODE_PATHS:
        if compiled and not compile_paths:
            continue
        adapter.__dict__.pop("_kv_pools", None)  # each path allocates its own pool
        adapter.decode_settings = DecodeSettings(pooled=pooled, compile=compiled, max_rows=max(batch_sizes),
                                                 max_kv_bytes=budget)
        for batch_size in batch_sizes:
            if time.monotonic() > deadline:
                results.append({"path": name, "batch_size": batch_size, "skipped": "time budget spent"})
                continue
            rows = [(i, row) for i, row in enumerate(rows_for_batch(batch_size))]
            try:
                for attempt in ("warm-up", "timed"):  # the warm-up run compiles / captures the step
                    batch = adapter.start_decode(params)
                    if hasattr(batch, "make_audio"):
                        batch.make_audio = False  # IndexTTS 2: the GPT stage (item 4 times s2mel + vocoder)
                    with common.cuda_peak(device) as peak:
                        common.synchronize(device)
                        t0 = time.perf_counter()
                        batch.prefill(rows)
                        batch.decode_step()
                        common.synchronize(device)
                        first_s = time.perf_counter() - t0
                        for _ in range(steps - 1):
                            batch.decode_step()
                        common.synchronize(device)
                        total_s = time.perf_counter() - t0
                    batch.release([k for k, _ in rows])
                    del batch
            except torch.OutOfMemoryError as exc:
                results.append({"path": name, "batch_size": batch_size, "skipped": f"out of memory: {exc}"})
                continue
            decode_s = max(total_s - first_s, 1e-9)
            frames_per_s = batch_size * (steps - 1) / decode_s
            bound = batch_size * bandwidth / weight_bytes_per_frame
            row = {"path": name, "batch_size": batch_size, "steps": steps, "first_frame_s": first_s,
                   "frames_per_s": frames_per_s, "bound_frames_per_s": bound, "share_of_bound": frames_per_s / bound,
                   "peak_bytes": peak["peak_bytes"], "budget_bytes": budget}
            results.append(row)
            print(f"  {name:16s} batch {batch_size:2d}: {frames_per_s:9.1f} frames/s = {row['share_of_bound']:6.1%} "
                  f"of the bound, first frame {first_s * 1e3:7.1f} ms"
                  + (f", peak {peak['peak_bytes'] / 2**30:.2f} GiB of budget {budget / 2**30:.2f} GiB"
                     if peak["peak_bytes"] is not None and budget else ""), flush=True)
    adapter.decode_settings = DecodeSettings()
    adapter.__dict__.pop("_kv_pools", None)
    return results


def dry_run(args) -> int:
    """``--dry-run``: measure 6 on the CPU, tiny checkpoints of both families (module docstring)."""
    import gpu_check_indextts2

    report = {}
    with tempfile.TemporaryDirectory(prefix="gpu_check_dry_") as tmp:
        adapter = build_tiny_adapter("cpu", Path(tmp))
        per_frame = bandwidth_bound(adapter, "cpu", CPU_NOMINAL_BANDWIDTH_BYTES_PER_S)["weight_bytes_per_frame"]
        print("gpu_check --dry-run: tiny VibeVoice on cpu (nominal bandwidth)", flush=True)
        report["vibevoice"] = measure_decode_paths(adapter, "cpu", [1, 2], 4, lambda b: rows_for(adapter, b),
                                                   per_frame, CPU_NOMINAL_BANDWIDTH_BYTES_PER_S,
                                                   compile_paths=args.compile_on_cpu)
        adapter = gpu_check_indextts2.build_adapter("cpu", True, Path(tmp))
        gpu_check_indextts2.force_full_length(adapter)
        per_frame = gpu_check_indextts2.bandwidth_bound(adapter, CPU_NOMINAL_BANDWIDTH_BYTES_PER_S)
        print("gpu_check --dry-run: tiny IndexTTS 2 on cpu (nominal bandwidth)", flush=True)
        report["indextts2"] = measure_decode_paths(
            adapter, "cpu", [1, 2], 4, lambda b: gpu_check_indextts2.rows_for(adapter, b),
            per_frame["weight_bytes_per_code"], CPU_NOMINAL_BANDWIDTH_BYTES_PER_S, compile_paths=args.compile_on_cpu)
    text = json.dumps(report, indent=1, default=str)
    if args.json_out:
        Path(args.json_out).write_text(text, encoding="utf-8")
    return 0


def measure_oom_backoff(adapter, device: str, decode: list[dict], new_tokens: int, num_requests: int, *,
                        text: str = TEXT, reference: tuple[str, float] = REFERENCE) -> dict:
    """16 requests at max batch 16 through the real Engine, with device memory capped (CUDA) or OOM simulated
    (CPU); prints a line with the outcome. Returns submitted / completed / num_oom / cap history / wall seconds."""
    import torch

    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

    ref, _ = common.reference_clip(reference[0], adapter.facts.sampling_rate, reference[1])
    params = SynthesisParams(greedy=True, max_new_tokens=new_tokens)
    requests = [SynthesisRequest(text=text, reference_audio=ReferenceAudio(ref, adapter.facts.sampling_rate),
                                 params=params.with_seed(i)) for i in range(num_requests)]
    out: dict = {"submitted": num_requests, "max_batch_size": num_requests}
    config = dict(max_batch_size=num_requests, wait_window_ms=0.0, memory_utilization=1.0, safety_margin_bytes=0,
                  grow_after_successes=1000)
    cuda = device.startswith("cuda")
    if cuda:
        peaks = {r["batch_size"]: r["cuda_peak_bytes"] for r in decode
                 if r.get("use_cache") and "cuda_peak_bytes" in r}
        if len(peaks) < 2:
            out.update(mode="skipped", reason="fewer than two batch sizes were measured (time budget spent)")
            print(f"  OOM back-off skipped: {out['reason']}", flush=True)
            return out
        small = peaks.get(2) or min(peaks.values())
        large = peaks.get(num_requests) or max(peaks.values())
        torch.cuda.empty_cache()
        weights = torch.cuda.memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
        limit = weights + (small + large) / 2
        fraction = min(1.0, limit / total)
        out.update(mode="real CUDA OOM", memory_fraction=fraction, limit_bytes=int(limit), weights_bytes=weights)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    else:
        config["simulate_oom_above_batch"] = max(1, num_requests // 4)
        out.update(mode=f"simulated (no CUDA): OOM above batch {config['simulate_oom_above_batch']}")
    engine = Engine(adapter, EngineConfig(**config))
    try:
        handles = [engine.submit(r) for r in requests]
        with common.wall_timer(device) as t:
            engine.start()
            results = [h.result() for h in handles]
    finally:
        engine.shutdown()
        if cuda:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    stats = engine.stats()
    out.update(completed=sum(r.ok for r in results), failed=[r.error for r in results if not r.ok][:3],
               num_oom=stats.num_oom, final_cap=stats.batch_cap, cap_history=list(engine.batch_cap.history),
               num_batches=stats.num_batches, wall_s=t["s"])
    print(f"  OOM back-off ({out['mode']}): {out['completed']}/{out['submitted']} completed, {out['num_oom']} OOM, "
          f"cap history {out['cap_history']}, {out['wall_s']:.1f} s", flush=True)
    return out


def measure_continuous(adapter, device: str, caps: list[int], num_requests: int, max_frames: int,
                       deadline: float) -> dict:
    """Request-level vs continuous batching on ``num_requests`` mixed-length requests at each cap, then the time to
    first audio (see module docstring, 5). Runs stop being started once ``deadline`` (monotonic s) has passed."""
    import continuous_bench as cb

    driven, frames_for = cb.length_driven(adapter, max_frames)
    texts = common.workload_texts(num_requests, 5, 200, seed=1)
    requests = cb.requests_for(driven, texts, max_frames)
    cb.run_all(driven, requests[:2], 2, continuous=True)  # warm-up
    out: dict = {"num_requests": num_requests, "max_new_tokens": max_frames, "runs": []}
    reference = None
    for cap in caps:
        by_mode = {}
        for mode, continuous in (("request-level", False), ("continuous", True)):
            if time.monotonic() > deadline:
                out["runs"].append({"cap": cap, "mode": mode, "skipped": "time budget spent"})
                continue
            with common.cuda_peak(device) as peak:
                seconds, stats, results = cb.run_all(driven, requests, cap, continuous=continuous)
            audio_s = sum(r.duration_s for r in results if r.ok)
            same, diff = cb._compare(results, reference) if reference is not None else (True, 0.0)
            reference = reference or results
            row = {"cap": cap, "mode": mode, "wall_s": seconds, "audio_s": audio_s,
                   "audio_s_per_s": audio_s / max(seconds, 1e-9), "completed": sum(r.ok for r in results),
                   "padded_share": stats.padded_share or 0.0, "row_steps": stats.num_row_steps,
                   "same_length_as_first": same, "max_abs_diff_to_first": diff,
                   "budget_bytes": stats.memory_budget_bytes, "cuda_peak_bytes": peak["peak_bytes"]}
            if peak["peak_bytes"] is not None and stats.memory_budget_bytes:
                row["peak_vs_budget"] = peak["peak_bytes"] / stats.memory_budget_bytes
            by_mode[mode] = row
            out["runs"].append(row)
            print(f"  cap {cap:2d} {mode:13s}: {row['audio_s_per_s']:7.2f} audio s/s, padded "
                  f"{row['padded_share']:.1%}, {seconds:6.1f} s" + (f", peak {peak['peak_bytes'] / 2**30:.2f} GiB"
                                                                  if peak["peak_bytes"] is not None else ""),
                  flush=True)
        if len(by_mode) == 2:
            by_mode["continuous"]["vs_request_level"] = (by_mode["continuous"]["audio_s_per_s"]
                                                         / max(by_mode["request-level"]["audio_s_per_s"], 1e-9))
    if time.monotonic() < deadline:
        table = cb.build_tables()["ttfa"]
        cfg = {"caps": [max(caps)], "job_requests": 2 * max(caps), "max_new_tokens": max_frames}
        cb.measure_ttfa(driven, texts, cfg, table, frames_for)
        out["time_to_first_audio"] = table.rows
        by_mode = {row["mode"]: row for row in table.rows}
        req, wait, con = by_mode["request-level"], by_mode["continuous, no preemption"], by_mode["continuous"]
        print(f"  first audio of a short request during a long job: request-level {req['first_audio_s']:.2f} s, "
              f"continuous without preemption {wait['first_audio_s']:.2f} s, continuous {con['first_audio_s']:.2f} s "
              f"(x{req['vs_continuous']:.1f}, x{wait['vs_continuous']:.1f} by preemption)", flush=True)
    return out


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="vibevoice", choices=["vibevoice", "indextts2"],
                        help="model family to check (default vibevoice)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (code-path check)")
    parser.add_argument("--tiny", action="store_true", help="the family's tiny checkpoint instead of the full size")
    parser.add_argument("--checkpoint", default=None,
                        help="--family indextts2 --tiny: an already built tiny checkpoint folder (default: build one)")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default 1,2,4,8,16; --tiny 1,2,4)")
    parser.add_argument("--new-tokens", type=int, default=None, help="frames per row (default 32; --tiny 4)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting new decode runs after this")
    parser.add_argument("--bandwidth-gbps", type=float, default=None, help="device memory bandwidth in GB/s")
    parser.add_argument("--json", dest="json_out", default=None, help="write the report here too")
    parser.add_argument("--dry-run", action="store_true", help="measure 6 only, tiny checkpoints, on the CPU")
    parser.add_argument("--compile-on-cpu", action="store_true",
                        help="measure 6 on the CPU: the compiled path too (inductor; minutes)")
    parser.add_argument("--decode-batch-sizes", default=None, help="batch sizes of measure 6 (default 1,8,32,64; "
                                                                    "--tiny 1,2)")
    parser.add_argument("--decode-steps", type=int, default=None, help="decode steps of measure 6 (default 32; "
                                                                      "--tiny 4)")
    parser.add_argument("--continuous-caps", default=None, help="caps of measure 5 (default 8,16; --tiny 2,4)")
    parser.add_argument("--continuous-requests", type=int, default=None, help="requests of measure 5 (default 64; "
                                                                              "--tiny 8)")
    args = parser.parse_args(argv)
    args.continuous_caps = [int(x) for x in (args.continuous_caps or ("2,4" if args.tiny else "8,16")).split(",")]
    if args.continuous_requests is None:
        args.continuous_requests = 8 if args.tiny else 64
    default_sizes = {"vibevoice": ("1,2,4", "1,2,4,8,16"), "indextts2": ("1,4", "1,4,8,16")}[args.family]
    args.batch_sizes = [int(x) for x in (args.batch_sizes or default_sizes[0 if args.tiny else 1]).split(",")]
    args.decode_batch_sizes = [int(x) for x in (args.decode_batch_sizes or ("1,2" if args.tiny else "1,8,32,64"))
                               .split(",")]
    if args.decode_steps is None:
        args.decode_steps = 4 if args.tiny else 32
    # the compiled path where it pays (CUDA graphs); on the CPU only when asked (inductor takes minutes there)
    args.compile_paths = args.device.startswith("cuda") or args.compile_on_cpu
    if args.new_tokens is None:
        args.new_tokens = {"vibevoice": (4, 32), "indextts2": (8, 64)}[args.family][0 if args.tiny else 1]
    if args.new_tokens < 2 or min(args.batch_sizes) < 1:
        parser.error("--new-tokens must be >= 2 and batch sizes >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup(num_threads=1)
    import torch

    if args.dry_run:
        return dry_run(args)

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(NO_CUDA_MESSAGE, file=sys.stderr)
        return 2
    if args.family == "indextts2":
        import gpu_check_indextts2

        report = gpu_check_indextts2.run(args, device_bandwidth, measure_oom_backoff)
        text = json.dumps(report, indent=1, default=str)
        if args.json_out:
            Path(args.json_out).write_text(text, encoding="utf-8")
        print(text)
        return 0
    started = time.monotonic()
    deadline = started + args.budget_s
    device = args.device
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        with common.wall_timer(device) as t:
            adapter = build_tiny_adapter(device, Path(tmp)) if args.tiny else build_full_adapter(device)
    build_s = t["s"]
    num_parameters = sum(p.numel() for p in adapter.model.parameters())
    weight_bytes = module_bytes(adapter.model)
    print(f"gpu_check: {'tiny' if args.tiny else 'VibeVoice-1.5B'} random {adapter.dtype}, "
          f"{num_parameters / 1e9:.3f} B parameters ({weight_bytes / 2**30:.2f} GiB), built in {build_s:.1f} s on "
          f"{device}" + (f" ({torch.cuda.get_device_name(device)})" if device.startswith("cuda") else ""), flush=True)

    decode = measure_decode(adapter, device, args.batch_sizes, args.new_tokens, deadline)
    bandwidth, bandwidth_source = device_bandwidth(device, None if args.bandwidth_gbps is None
                                                   else args.bandwidth_gbps * 1e9)
    bound = bandwidth_bound(adapter, device, bandwidth)
    bound["source"] = bandwidth_source
    batch1 = next((r for r in decode if r["batch_size"] == 1 and r["use_cache"] and "tokens_per_s" in r), None)
    if batch1 is not None:
        bound["measured_tokens_per_s"] = batch1["tokens_per_s"]
        bound["measured_vs_bound"] = batch1["tokens_per_s"] / bound["bound_tokens_per_s"]
    print(f"  bandwidth bound at batch 1: {bound['weight_bytes_per_frame'] / 2**30:.2f} GiB of weights per frame / "
          f"{bandwidth / 1e12:.3g} TB/s ({bandwidth_source}) = {bound['bound_tokens_per_s']:.1f} frames/s"
          + (f"; measured {bound['measured_tokens_per_s']:.1f} = {bound['measured_vs_bound']:.1%} of the bound"
             if batch1 else ""), flush=True)

    paths = measure_decode_paths(adapter, device, args.decode_batch_sizes, args.decode_steps,
                                 lambda b: rows_for(adapter, b), bound["weight_bytes_per_frame"], bandwidth,
                                 compile_paths=args.compile_paths, deadline=deadline + 240)

    oom = measure_oom_backoff(adapter, device, decode, args.new_tokens, max(args.batch_sizes))

    continuous = measure_continuous(adapter, device, args.continuous_caps, args.continuous_requests,
                                    max(args.new_tokens, 48) if not args.tiny else 8, deadline + 120)

    report = {"device": device, "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda")
              else "cpu", "model": "tiny VibeVoice" if args.tiny else "VibeVoice-1.5B (random weights)",
              "dtype": adapter.dtype, "num_parameters": num_parameters, "weight_bytes": weight_bytes,
              "build_s": build_s, "decode": decode, "bandwidth_bound": bound, "oom_backoff": oom,
              "continuous": continuous, "decode_paths": paths,
              "torch": torch.__version__, "elapsed_s": time.monotonic() - started}
    text = json.dumps(report, indent=1, default=str)
    if args.json_out:
        Path(args.json_out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
