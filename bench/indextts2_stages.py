"""IndexTTS 2: where the time goes - the GPT stage (batched autoregressive decode) vs the code latents, s2mel (flow
matching) and BigVGAN vocoder stages (row by row), at batch 1 and at larger batches, on the same rows.

    OMP_NUM_THREADS=1 python3 bench/indextts2_stages.py [--batch-sizes 1,4] [--new-tokens 100] [--model DIR]
        [--natural-stops] [--device cpu|cuda] [--dtype float32|float16|bfloat16] [--json OUT]

Rows: ``max(batch sizes)`` segments with different texts and different reference clips (real speech from
tests/data), greedy. "batch 1" runs each row alone; "batch N" runs them N at a time; both cover the same rows, so
the shares compare like with like. Conditioning (w2v-BERT, CAM++, perceiver; once per reference clip, then cached) is
timed once, apart. Without ``--model`` the tiny random checkpoint is built in a temporary folder (nothing is
downloaded). Every row decodes exactly ``--new-tokens`` codes (the stop code is suppressed: a random model stops at
arbitrary points, and the share depends on how much speech a row makes; 100 codes = 2 s); ``--natural-stops`` lets
rows stop by themselves (for a real checkpoint).
Prints one table and the shares; ratios within one run are what to read (timings on a shared machine are noisy).
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup(num_threads=1)

from common import Table, ratio, wall_timer  # noqa: E402

# 3 s references: s2mel runs its flow matching over reference + generated frames, so the clip length matters too.
CLIPS = (("zh_female_1.wav", 3.0), ("en_male_1.wav", 3.0), ("en_female_1.wav", 3.0), ("zh_male_1.wav", 3.0))
TEXTS = ("今天天气很好，我们一起去公园散步，然后在湖边喝茶。", "The morning train was late again, so she read a chapter.",
         "银行门口排起了长队。", "Before you leave the office tonight, please lock the door.")


def make_rows(adapter, count: int) -> list:
    from tts_app.adapters.base import AdapterRow

    rows = []
    for i in range(count):
        name, seconds = CLIPS[i % len(CLIPS)]
        wave, _ = common.reference_clip(name, adapter.facts.sampling_rate, seconds)
        rows.append(AdapterRow(text=TEXTS[i % len(TEXTS)], reference_audio=wave, reference_text=None, seed=i))
    return rows


@contextmanager
def suppressed_stop(adapter, active: bool):
    """While active, the GPT never picks its stop code, so every row decodes to the cap, nor its start code (a
    random model that may not stop picks it sooner or later, and it is no codec entry: s2mel would fail); both
    logit biases are -1e4."""
    import torch

    if not active:
        yield
        return
    gpt = adapter.model.gpt
    bias = gpt.mel_head.bias
    suppressed = [gpt.stop_mel_token, gpt.start_mel_token]
    saved = bias[suppressed].clone()
    with torch.no_grad():
        bias[suppressed] = -1e4
    try:
        yield
    finally:
        with torch.no_grad():
            bias[suppressed] = saved


def run_stages(adapter, rows: list, params, device: str) -> dict:
    """Seconds per stage for ``rows`` as one batch: GPT decode (``generate``), then per row the code latents, s2mel
    and vocoder (``postprocess`` split into its parts). Conditioning is already cached."""
    out = {"gpt_s": 0.0, "latents_s": 0.0, "s2mel_s": 0.0, "vocoder_s": 0.0, "codes": 0, "audio_s": 0.0}
    with wall_timer(device) as t:
        inputs = adapter.preprocess(rows, params)
    out["prefix_s"] = t["s"]
    with wall_timer(device) as t:
        outputs = adapter.generate(inputs, params)
    out["gpt_s"] = t["s"]
    for i, length in enumerate(outputs.code_lengths):
        out["codes"] += length
        if length == 0:
            continue
        codes = outputs.codes[i: i + 1, :length]
        with wall_timer(device) as t:
            latent = adapter.code_latents(inputs, i, codes)
        out["latents_s"] += t["s"]
        with wall_timer(device) as t:
            mel = adapter.s2mel(inputs.conditioning[i], codes, latent, inputs.seeds[i])
        out["s2mel_s"] += t["s"]
        with wall_timer(device) as t:
            wave = adapter.vocode(mel)
        out["vocoder_s"] += t["s"]
        out["audio_s"] += len(wave) / adapter.facts.sampling_rate
    return out


def measure(adapter, batch_sizes: list[int], new_tokens: int, device: str, natural_stops: bool = False
            ) -> tuple[Table, dict]:
    from tts_app.request import SynthesisParams

    params = SynthesisParams(greedy=True, max_new_tokens=new_tokens)
    rows = make_rows(adapter, max(batch_sizes))
    with wall_timer(device) as t:
        for row in rows:  # conditioning of every clip, computed once (later calls hit the cache)
            adapter.speaker_conditioning(row.reference_audio)
    conditioning_s = t["s"]
    with suppressed_stop(adapter, not natural_stops):
        run_stages(adapter, rows[:1], params, device)  # warm-up: first-call costs (allocator, kernels)
    table = Table("stages", f"IndexTTS 2 stages on {len(rows)} rows (greedy, {new_tokens} codes per row)",
                  ["batch", "gpt_s", "latents_s", "s2mel_s", "vocoder_s", "total_s", "s2mel_vocoder_share",
                   "gpt_share", "codes", "audio_s"],
                  ["gpt_s", "latents_s", "s2mel_s", "vocoder_s", "total_s", "s2mel_vocoder_share", "gpt_share",
                   "audio_s"])
    for batch in batch_sizes:
        total = {"gpt_s": 0.0, "latents_s": 0.0, "s2mel_s": 0.0, "vocoder_s": 0.0, "codes": 0, "audio_s": 0.0}
        for start in range(0, len(rows), batch):
            with suppressed_stop(adapter, not natural_stops):
                part = run_stages(adapter, rows[start:start + batch], params, device)
            for key in total:
                total[key] += part[key]
        total_s = total["gpt_s"] + total["latents_s"] + total["s2mel_s"] + total["vocoder_s"]
        table.rows.append({"batch": batch, **total, "total_s": total_s,
                           "s2mel_vocoder_share": ratio(total["s2mel_s"] + total["vocoder_s"], total_s),
                           "gpt_share": ratio(total["gpt_s"], total_s)})
    table.notes.append("every row decodes to the cap (stop code suppressed)" if not natural_stops else
                       "rows stop at their own stop codes")
    table.notes.append(f"conditioning of {len(rows)} reference clips (once, then cached): {conditioning_s:.2f} s")
    table.notes.append("gpt = batched autoregressive decode (prefill + one forward per code); latents = the "
                       "package's full GPT forward over each row's codes; s2mel = length regulator + 25 Euler steps "
                       "of the DiT with CFG; vocoder = BigVGAN; the last three run row by row")
    return table, {"conditioning_s": conditioning_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="IndexTTS-2 checkpoint folder (default: the tiny one, built)")
    parser.add_argument("--batch-sizes", default="1,4", help="comma-separated (default 1,4)")
    parser.add_argument("--new-tokens", type=int, default=100, help="codes per row (default 100 = 2 s of speech)")
    parser.add_argument("--natural-stops", action="store_true", help="let rows stop at their own stop codes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    with tempfile.TemporaryDirectory(prefix="indextts2_stages_") as tmp:
        model = args.model or IndexTTS2Adapter.make_tiny_checkpoint(Path(tmp) / "tiny-indextts2")
        adapter = IndexTTS2Adapter.from_pretrained(model, device=args.device, dtype=args.dtype)
    table, extra = measure(adapter, batch_sizes, args.new_tokens, args.device, args.natural_stops)
    print(table.render())
    by_batch = {r["batch"]: r for r in table.rows}
    low, high = min(batch_sizes), max(batch_sizes)
    print(f"summary: s2mel + vocoder share of the time {by_batch[low]['s2mel_vocoder_share']:.0%} at batch {low}, "
          f"{by_batch[high]['s2mel_vocoder_share']:.0%} at batch {high}; GPT stage batch {high} vs {low}: "
          f"x{ratio(by_batch[low]['gpt_s'], by_batch[high]['gpt_s']):.2f} faster")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"table": table.to_json(), **extra}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
