"""GPU check of IndexTTS 2 (``python bench/gpu_check.py --family indextts2``): the full-size architecture of
IndexTeam/IndexTTS-2 (``INDEXTTS2_CONFIG``: GPT 24 x 1280, w2v-BERT 2.0, MaskGCT codec, s2mel DiT, CAM++, BigVGAN v2)
with random weights built in code on the device (GPT in float16, the rest float32, as the package runs it; nothing
downloaded), in a few minutes, ending with a JSON report.

    python bench/gpu_check.py --family indextts2 [--json OUT] [--batch-sizes 1,4,8,16] [--new-tokens 64]
    python bench/gpu_check.py --family indextts2 --device cpu --tiny   # the same code paths on CPU, tiny model

Measures:

1. GPT decode codes/s at each batch size with the KV cache on and off, through the adapter's own decode loop
   (``IndexTTS2Adapter.generate``). The stop code's logit is pushed to -1e4 so every row decodes exactly
   ``--new-tokens`` codes (random weights stop anywhere); per-step work is unchanged. Decode time =
   time(prefill + N codes) - time(prefill + 1 code).
2. peak memory (``torch.cuda.max_memory_allocated`` growth) of each decode run vs the engine's estimate for that
   batch (``MemoryEstimator.batch_bytes``).
3. the bandwidth bound at batch 1: each code reads the GPT-2 stack's weights, its final norm and mel head once;
   bound codes/s = bandwidth / those bytes; printed with measured / bound.
4. the share of time in s2mel + vocoder vs the GPT stage at batch 1 and at the largest batch size, on the same rows
   (``bench/indextts2_stages.py``'s ``run_stages``).
5. OOM back-off through the real ``Engine`` under ``torch.cuda.set_per_process_memory_fraction`` (CPU: simulated),
   shared with the VibeVoice check (``gpu_check.measure_oom_backoff``).
"""

from __future__ import annotations

import time
from pathlib import Path

import common  # noqa: F401  (bench/common.py; gpu_check.py has run setup())

TEXT = "The morning train was late again, so Maria finished a chapter of her book while she waited."
# --tiny: one short segment per request (the tiny checkpoint's segments are 8 characters: its cap is 2.4 s)
TINY_TEXT = "天气很好。"
REFERENCE = ("en_female_1.wav", 3.0)
TINY_REFERENCE = ("en_female_1.wav", 1.0)  # --tiny: the CPU smoke run only checks code paths


def force_full_length(adapter) -> None:
    """Push the GPT's stop-code and start-code logits to -1e4 for good (a random model; timing only; the start code
    is no codec entry, so a row that picked it would fail in s2mel)."""
    import torch

    gpt = adapter.model.gpt
    with torch.no_grad():
        gpt.mel_head.bias[[gpt.stop_mel_token, gpt.start_mel_token]] = -1e4


def build_adapter(device: str, tiny: bool, work_dir: Path, checkpoint: str | None = None):
    """The full-size random IndexTTS 2 (GPT float16 on CUDA) or the tiny checkpoint (float32; built in
    ``work_dir`` unless ``checkpoint`` names one already built), stop code suppressed."""
    from tts_app.adapters.indextts2 import (BIGVGAN_22KHZ_CONFIG, INDEXTTS2_CONFIG, IndexTTS2Adapter,
                                            build_random_adapter)

    if tiny:
        path = checkpoint or IndexTTS2Adapter.make_tiny_checkpoint(work_dir / "tiny-indextts2")
        adapter = IndexTTS2Adapter.from_pretrained(path, device=device, dtype="float32")
    else:
        dtype = "float16" if device.startswith("cuda") else "float32"
        adapter = build_random_adapter(INDEXTTS2_CONFIG, BIGVGAN_22KHZ_CONFIG, work_dir=work_dir, device=device,
                                       dtype=dtype)
    force_full_length(adapter)
    return adapter


def rows_for(adapter, batch_size: int, reference: tuple[str, float] = REFERENCE) -> list:
    from tts_app.adapters.base import AdapterRow

    ref, _ = common.reference_clip(reference[0], adapter.facts.sampling_rate, reference[1])
    return [AdapterRow(text=TEXT, reference_audio=ref, reference_text=None, seed=i) for i in range(batch_size)]


def timed_generate(adapter, rows, new_tokens: int, use_cache: bool, device: str) -> tuple[float, int | None]:
    """Wall seconds (CUDA synchronised) of preprocess + generate, and the CUDA peak growth."""
    from tts_app.request import SynthesisParams

    params = SynthesisParams(greedy=True, max_new_tokens=new_tokens, use_cache=use_cache)
    with common.cuda_peak(device) as peak, common.wall_timer(device) as t:
        outputs = adapter.generate(adapter.preprocess(rows, params), params)
    if set(outputs.code_lengths) != {new_tokens}:
        raise RuntimeError(f"expected {new_tokens} codes per row, got {sorted(set(outputs.code_lengths))}")
    return t["s"], peak["peak_bytes"]


def measure_decode(adapter, device: str, batch_sizes: list[int], new_tokens: int, deadline: float,
                   reference: tuple[str, float] = REFERENCE) -> list[dict]:
    from tts_app.engine.memory import MemoryEstimator

    facts = adapter.facts
    estimator = MemoryEstimator(facts.kv_bytes_per_position, facts.cfg_multiplier)
    results = []
    timed_generate(adapter, rows_for(adapter, 1, reference), 2, True, device)  # warm-up; caches the conditioning
    positions = adapter.estimate_positions(len(TEXT), reference[1], 0, new_tokens)
    for batch_size in batch_sizes:
        rows = rows_for(adapter, batch_size, reference)
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
            print(f"  batch {batch_size:2d} cache {'on ' if use_cache else 'off'}: {row['tokens_per_s']:8.1f} codes/s"
                  + (f", peak {peak / 2**20:8.1f} MiB, estimate {row['est_batch_bytes'] / 2**20:8.1f} MiB"
                     if peak is not None else ""), flush=True)
    return results


def bandwidth_bound(adapter, bandwidth: float) -> dict:
    """Weight bytes one code reads at batch 1 (GPT-2 stack + final norm + mel head) and the codes/s they allow."""
    from gpu_check import module_bytes

    gpt = adapter.model.gpt
    stack = module_bytes(gpt.gpt) - (module_bytes(gpt.gpt.wte) if hasattr(gpt.gpt, "wte") else 0)
    head = module_bytes(gpt.final_norm) + module_bytes(gpt.mel_head)
    per_code = stack + head
    return {"bandwidth_bytes_per_s": bandwidth, "weight_bytes_per_code": per_code,
            "parts_bytes": {"gpt2_stack": stack, "final_norm_and_mel_head": head},
            "bound_tokens_per_s": bandwidth / per_code}


def measure_stage_shares(adapter, device: str, batch_sizes: list[int], new_tokens: int,
                         reference: tuple[str, float] = REFERENCE) -> list[dict]:
    """GPT stage vs code latents / s2mel / vocoder seconds on the same rows, at batch 1 and the largest batch."""
    from indextts2_stages import run_stages

    from tts_app.request import SynthesisParams

    params = SynthesisParams(greedy=True, max_new_tokens=new_tokens)
    largest = max(batch_sizes)
    rows = rows_for(adapter, largest, reference)
    out = []
    for batch in sorted({1, largest}):
        total = {"gpt_s": 0.0, "latents_s": 0.0, "s2mel_s": 0.0, "vocoder_s": 0.0, "codes": 0, "audio_s": 0.0}
        for start in range(0, len(rows), batch):
            part = run_stages(adapter, rows[start:start + batch], params, device)
            for key in total:
                total[key] += part[key]
        all_s = total["gpt_s"] + total["latents_s"] + total["s2mel_s"] + total["vocoder_s"]
        total.update(batch=batch, rows=len(rows), total_s=all_s,
                     s2mel_vocoder_share=(total["s2mel_s"] + total["vocoder_s"]) / max(all_s, 1e-9),
                     gpt_share=total["gpt_s"] / max(all_s, 1e-9))
        out.append(total)
        print(f"  stages at batch {batch:2d} ({len(rows)} rows x {new_tokens} codes): gpt {total['gpt_s']:.2f} s, "
              f"latents {total['latents_s']:.2f} s, s2mel {total['s2mel_s']:.2f} s, vocoder {total['vocoder_s']:.2f}"
              f" s -> s2mel + vocoder {total['s2mel_vocoder_share']:.0%} of the time", flush=True)
    return out


def run(args, device_bandwidth, measure_oom_backoff) -> dict:
    """The whole check (see the module docstring); returns the report. ``device_bandwidth`` and
    ``measure_oom_backoff`` are gpu_check.py's (shared with the VibeVoice check)."""
    import tempfile

    import torch

    started = time.monotonic()
    deadline = started + args.budget_s
    device = args.device
    with tempfile.TemporaryDirectory(prefix="gpu_check_indextts2_") as tmp:
        with common.wall_timer(device) as t:
            adapter = build_adapter(device, args.tiny, Path(tmp), args.checkpoint)
    build_s = t["s"]
    num_parameters = adapter.facts.num_parameters
    from gpu_check import module_bytes

    weight_bytes = module_bytes(adapter.model)
    print(f"gpu_check: {'tiny IndexTTS 2' if args.tiny else 'IndexTTS-2 full size'} random, GPT {adapter.dtype}, "
          f"{num_parameters / 1e9:.3f} B parameters ({weight_bytes / 2**30:.2f} GiB; GPT "
          f"{sum(p.numel() for p in adapter.model.gpt.parameters()) / 1e6:.0f} M), built in {build_s:.1f} s on "
          f"{device}" + (f" ({torch.cuda.get_device_name(device)})" if device.startswith("cuda") else ""), flush=True)

    reference = TINY_REFERENCE if args.tiny else REFERENCE
    decode = measure_decode(adapter, device, args.batch_sizes, args.new_tokens, deadline, reference)
    bandwidth, bandwidth_source = device_bandwidth(device, None if args.bandwidth_gbps is None
                                                   else args.bandwidth_gbps * 1e9)
    bound = bandwidth_bound(adapter, bandwidth)
    bound["source"] = bandwidth_source
    by = {(r["batch_size"], r["use_cache"]): r for r in decode if "tokens_per_s" in r}
    if (1, True) in by:
        bound["measured_tokens_per_s"] = by[(1, True)]["tokens_per_s"]
        bound["measured_vs_bound"] = bound["measured_tokens_per_s"] / bound["bound_tokens_per_s"]
    print(f"  bandwidth bound at batch 1: {bound['weight_bytes_per_code'] / 2**30:.2f} GiB of weights per code / "
          f"{bandwidth / 1e12:.3g} TB/s ({bandwidth_source}) = {bound['bound_tokens_per_s']:.1f} codes/s"
          + (f"; measured {bound['measured_tokens_per_s']:.1f} = {bound['measured_vs_bound']:.1%} of the bound"
             if "measured_tokens_per_s" in bound else ""), flush=True)
    ratios = {}
    if (1, True) in by and (8, True) in by:
        ratios["batch8_vs_batch1_throughput"] = by[(8, True)]["tokens_per_s"] / by[(1, True)]["tokens_per_s"]
    peaks = [r["est_vs_peak"] for r in decode if "est_vs_peak" in r]
    if peaks:
        ratios["estimate_vs_peak_min"], ratios["estimate_vs_peak_max"] = min(peaks), max(peaks)

    stages = []
    if time.monotonic() < deadline:
        stages = measure_stage_shares(adapter, device, args.batch_sizes, args.new_tokens, reference)
    if stages:
        ratios["s2mel_vocoder_share_batch1"] = stages[0]["s2mel_vocoder_share"]
        ratios["s2mel_vocoder_share_largest_batch"] = stages[-1]["s2mel_vocoder_share"]

    from gpu_check import measure_decode_paths

    paths = measure_decode_paths(adapter, device, args.decode_batch_sizes, args.decode_steps,
                                 lambda b: rows_for(adapter, b, reference), bound["weight_bytes_per_code"], bandwidth,
                                 compile_paths=args.compile_paths, deadline=deadline + 240)

    oom = measure_oom_backoff(adapter, device, decode, args.new_tokens, max(args.batch_sizes),
                              text=TINY_TEXT if args.tiny else TEXT, reference=reference)
    print("  ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()), flush=True)
    return {"device": device, "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda")
            else "cpu", "model": "tiny IndexTTS 2" if args.tiny else "IndexTTS-2 full size (random weights)",
            "dtype": adapter.dtype, "num_parameters": num_parameters, "weight_bytes": weight_bytes,
            "build_s": build_s, "decode": decode, "bandwidth_bound": bound, "stages": stages, "oom_backoff": oom,
            "decode_paths": paths,
            "ratios": ratios, "torch": torch.__version__, "elapsed_s": time.monotonic() - started}
