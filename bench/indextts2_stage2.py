"""IndexTTS 2's second stage (code latents -> s2mel flow matching -> BigVGAN) for rows that end in the same decode
step: batched (``IndexTTS2Adapter.stage2_audio`` on all rows at once) vs row by row (one call per row, the package's
own ``solve_euler`` per row), side by side in one run; and the fast preset (12 Euler steps) vs upstream's 25.

    OMP_NUM_THREADS=1 python3 bench/indextts2_stage2.py [--configs tiny,mid] [--rows 4] [--repeats 3]
        [--steps 25] [--device cpu|cuda] [--json OUT]

Configurations (random weights; nothing is downloaded):
  tiny  the tiny checkpoint (``make_tiny_checkpoint``: DiT 2 x 32 wide, WaveNet 2 x 32, BigVGAN 32 channels).
  mid   ``MID_OVERRIDES`` on the real config.yaml (``INDEXTTS2_CONFIG``), built with ``build_random_adapter``: the GPT
        cut to 1 layer (only its code-latents forward runs here), DiT 4 x 128 wide (4 heads), WaveNet 4 x 128,
        length regulator 128 channels, BigVGAN ``MID_BIGVGAN_CONFIG`` (128 channels, 4 x 4 upsampling, AMP kernels
        3/7/11 x dilations 1/3/5), w2v-BERT as small as the tiny checkpoint's. Each DiT forward is ~3 GFLOP for 4
        rows + CFG twins: large enough that per-op overhead is not all there is, small enough for a shared CPU.
  full  ``INDEXTTS2_CONFIG`` + ``BIGVGAN_22KHZ_CONFIG`` (the real architecture; for a GPU).

Rows: ``--rows`` reference clips of 3 s (real speech, tests/data) and code sequences of different lengths (80 + 10 i
codes, ~1.6-2.2 s of speech): rows of different lengths ending together. Times are medians over ``--repeats``
rounds; in each round both ways run back to back (order alternating), so load changes hit both. Printed per
configuration: the whole stage (latents + regulator per row, then flow matching + vocoder) and the flow matching +
vocoder part alone (the part that is batched), with the batched / row-by-row ratio, the largest difference between
a row's batched and alone audio, and the load average at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.setup(num_threads=int(os.environ.get("OMP_NUM_THREADS", "1")))

from common import Table, ratio, wall_timer  # noqa: E402

CLIPS = (("zh_female_1.wav", 3.0), ("en_male_1.wav", 3.0), ("en_female_1.wav", 3.0), ("zh_male_1.wav", 3.0))
TEXTS = ("今天天气很好，我们一起去公园散步。", "The morning train was late again.", "银行门口排起了长队。",
         "Before you leave, please lock the door.")

MID_OVERRIDES: dict = {
    "gpt": {"layers": 1,
            "condition_module": {"output_size": 32, "linear_units": 32, "attention_heads": 2, "num_blocks": 1},
            "emo_condition_module": {"output_size": 32, "linear_units": 32, "attention_heads": 2, "num_blocks": 1}},
    "semantic_codec": {"vocos_dim": 16, "vocos_intermediate_dim": 32, "vocos_num_layers": 1},
    "s2mel": {"length_regulator": {"channels": 128},
              "DiT": {"hidden_dim": 128, "num_heads": 4, "depth": 4, "content_dim": 128},
              "wavenet": {"hidden_dim": 128, "num_layers": 4}},
}
MID_BIGVGAN_CONFIG_OVERRIDES: dict = {"upsample_rates": [4, 4, 4, 4], "upsample_kernel_sizes": [8, 8, 8, 8],
                                      "upsample_initial_channel": 128}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def build(config: str, work_dir: Path, device: str):
    from transformers import Wav2Vec2BertConfig

    from tts_app.adapters import indextts2 as ix2

    if config == "tiny":
        path = ix2.IndexTTS2Adapter.make_tiny_checkpoint(work_dir / "tiny-indextts2")
        return ix2.IndexTTS2Adapter.from_pretrained(path, device=device, dtype="float32")
    if config == "mid":
        cfg = ix2._deep_update(ix2.INDEXTTS2_CONFIG, MID_OVERRIDES)
        vocoder = {**ix2.BIGVGAN_22KHZ_CONFIG, **MID_BIGVGAN_CONFIG_OVERRIDES}
    else:
        cfg, vocoder = ix2.INDEXTTS2_CONFIG, ix2.BIGVGAN_22KHZ_CONFIG
    w2v = Wav2Vec2BertConfig(hidden_size=1024, num_hidden_layers=ix2.W2V_BERT_LAYER, num_attention_heads=1,
                             intermediate_size=8, conv_depthwise_kernel_size=3, position_embeddings_type=None)
    return ix2.build_random_adapter(cfg, vocoder, work_dir=work_dir / config, device=device, w2v_config=w2v)


def make_items(adapter, num_rows: int) -> list:
    """``stage2_audio`` rows: (preprocessed inputs, row, codes) with 80 + 10 i codes for row i."""
    from tts_app.adapters.base import AdapterRow
    from tts_app.request import SynthesisParams

    rows = []
    for i in range(num_rows):
        name, seconds = CLIPS[i % len(CLIPS)]
        wave, _ = common.reference_clip(name, adapter.facts.sampling_rate, seconds)
        rows.append(AdapterRow(text=TEXTS[i % len(TEXTS)], reference_audio=wave, reference_text=None, seed=i))
    inputs = adapter.preprocess(rows, adapter.resolve(SynthesisParams(num_beams=1)))
    codebook = int(adapter.processor.config.semantic_codec.codebook_size)
    return [(inputs, i, [(13 * i + 7 * k) % codebook for k in range(80 + 10 * i)]) for i in range(num_rows)]


def measure(adapter, items: list, steps: int, repeats: int, device: str) -> dict:
    """Medians over ``repeats`` alternating rounds: whole stage and flow matching + vocoder part, batched vs rows."""
    import numpy as np
    import torch

    prepared = []
    for position, (inputs, index, codes) in enumerate(items):  # as stage2_audio prepares them
        code_tensor = torch.tensor([codes], dtype=torch.long, device=torch.device(adapter.device))
        latent = adapter.code_latents(inputs, index, code_tensor)
        conditioning = inputs.conditioning[index]
        prepared.append((position, conditioning, adapter.s2mel_condition(conditioning, code_tensor, latent),
                         inputs.seeds[index]))

    def whole_batched():
        return adapter.stage2_audio(items, steps)

    def whole_rows():
        return [adapter.stage2_audio([item], steps)[0] for item in items]

    def part_batched():
        return adapter._stage2_batch(prepared, steps)

    def part_rows():
        return [adapter.vocode(adapter._solve_alone(c, cond, seed, steps)) for _, c, cond, seed in prepared]

    times: dict = {name: [] for name in ("whole_batched", "whole_rows", "part_batched", "part_rows")}
    outputs: dict = {}
    funcs = {"whole_batched": whole_batched, "whole_rows": whole_rows, "part_batched": part_batched,
             "part_rows": part_rows}
    for round_index in range(repeats):
        order = list(funcs) if round_index % 2 == 0 else list(reversed(funcs))
        for name in order:
            with torch.no_grad(), wall_timer(device) as t:
                outputs[name] = funcs[name]()
            times[name].append(t["s"])
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs["whole_batched"], outputs["whole_rows"]))
    audio_s = sum(a.size for a in outputs["whole_rows"]) / adapter.facts.sampling_rate
    return {name: statistics.median(values) for name, values in times.items()} | {"max_abs_diff": diff,
                                                                                   "audio_s": audio_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="tiny,mid", help="comma-separated: tiny, mid, full (default tiny,mid)")
    parser.add_argument("--rows", type=int, default=4, help="rows ending together (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds, median taken (default 3)")
    parser.add_argument("--steps", type=int, default=25, help="Euler steps (default upstream's 25)")
    parser.add_argument("--fast-steps", type=int, default=12, help="the fast preset's steps (default 12)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()

    import torch

    torch.manual_seed(0)
    load_start = load_average()
    table = Table("stage2", f"IndexTTS 2 second stage, {args.rows} rows ending together, {args.steps} steps, "
                            f"{args.device}, {torch.get_num_threads()} thread(s)",
                  ["config", "audio_s", "rows_s", "batched_s", "speedup", "fm_voc_rows_s", "fm_voc_batched_s",
                   "fm_voc_speedup", "fast_batched_s", "fast_speedup", "max_abs_diff"],
                  ["rows_s", "batched_s", "speedup", "fm_voc_rows_s", "fm_voc_batched_s", "fm_voc_speedup",
                   "fast_batched_s", "fast_speedup", "max_abs_diff"])
    with tempfile.TemporaryDirectory() as tmp:
        for config in [c.strip() for c in args.configs.split(",") if c.strip()]:
            adapter = build(config, Path(tmp), args.device)
            items = make_items(adapter, args.rows)
            adapter.stage2_audio(items[:1], 2)  # warm-up (first-call allocations)
            full = measure(adapter, items, args.steps, args.repeats, args.device)
            fast = measure(adapter, items, args.fast_steps, args.repeats, args.device)
            table.rows.append({
                "config": config, "audio_s": round(full["audio_s"], 2),
                "rows_s": full["whole_rows"], "batched_s": full["whole_batched"],
                "speedup": ratio(full["whole_rows"], full["whole_batched"]),
                "fm_voc_rows_s": full["part_rows"], "fm_voc_batched_s": full["part_batched"],
                "fm_voc_speedup": ratio(full["part_rows"], full["part_batched"]),
                "fast_batched_s": fast["whole_batched"],
                "fast_speedup": ratio(full["whole_batched"], fast["whole_batched"]),
                "max_abs_diff": max(full["max_abs_diff"], fast["max_abs_diff"])})
            print(f"[{config}] done, load average {load_average()}", flush=True)
    load_end = load_average()
    table.notes += [
        "speedup = row-by-row time / batched time (whole stage: code latents + length regulator per row, then flow "
        "matching + vocoder); fm_voc = the flow matching + vocoder part only (what is batched)",
        f"fast_speedup = {args.steps} steps batched / {args.fast_steps} steps batched (the fast preset)",
        "max_abs_diff: largest |batched - alone| sample over the rows (float32 reassociation only)",
        f"load average (1/5/15 min): start {load_start}, end {load_end}",
    ]
    print(table.render())
    best = max(table.rows, key=lambda r: r["speedup"]) if table.rows else None
    if best:
        print(f"summary: second stage batched vs row by row at {args.rows} rows: "
              + ", ".join(f"{r['config']} x{r['speedup']:.2f} (flow matching + vocoder x{r['fm_voc_speedup']:.2f})"
                          for r in table.rows) + f"; load average {load_start} -> {load_end}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"tables": {"stage2": table.to_json()}}, indent=1),
                                       encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
