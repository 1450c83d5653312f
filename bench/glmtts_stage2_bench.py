"""GLM-TTS second stage (DiT flow + HiFT vocoder): a batch of rows of different lengths vs the same rows one by one.

    python3 bench/glmtts_stage2_bench.py                    # "small" random sizes, 4 rows, CPU
    python3 bench/glmtts_stage2_bench.py --size tiny --rows 4
    python3 bench/glmtts_stage2_bench.py --size full --device cuda   # upstream's 768x18 DiT, 512-channel HiFT

Random weights (no checkpoint): `tiny` = the test checkpoint's sizes, `small` = DiT 256 wide x 4 blocks and HiFT
64 channels (seconds on 2 CPU cores), `full` = the released architecture (for a GPU). Rows have 60..100 generated
speech tokens after a 50-token prompt (25 tokens/s, so 4.4..6 s of mel each), the same inputs and per-row seeds in
both runs. Printed: wall time of each run, the ratio one-by-one / batched for the flow, the vocoder and both, the
largest difference between the runs (they must agree: same rows, same generators), and the load average (other
processes share the CPU: prefer the ratio). One run, no thresholds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from tts_app.adapters.glmtts.flow import DiTShape, Flow, FlowOptions  # noqa: E402
from tts_app.adapters.glmtts.tiny_stage2 import TINY_DIT, TINY_FLOW_CONFIG, TINY_HIFT_CHANNELS  # noqa: E402
from tts_app.adapters.glmtts.vocoder import HiFTGenerator  # noqa: E402

SIZES = {
    "tiny": (TINY_DIT, TINY_HIFT_CHANNELS),
    "small": (DiTShape(trans_dim=256, depth=4, heads=4, ff_inner_dim=512, mel_dim=80, condition_dim=80,
                       num_text_embeddings=32769, text_emb_dim=128, conv_layers=2, conv_intermediate_dim=256,
                       conv_pos_groups=16, speaker_adaln_dim=192),
              {"in_channels": 80, "base_channels": 64, "f0_channels": 64}),
    # The released checkpoint: flow/flow.py big_model=False preset, text_emb 512, 4 ConvNeXt layers; HiFT 512.
    "full": (DiTShape(trans_dim=768, depth=18, heads=12, ff_inner_dim=1536, mel_dim=80, condition_dim=80,
                      num_text_embeddings=32769, text_emb_dim=512, conv_layers=4, conv_intermediate_dim=1024,
                      conv_pos_groups=16, speaker_adaln_dim=192),
             {"in_channels": 80, "base_channels": 512, "f0_channels": 512}),
}


def make_rows(num_rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(num_rows):
        n = 60 + (40 * i) // max(1, num_rows - 1)
        rows.append((torch.randint(0, 32768, (n,), generator=g), torch.randint(0, 32768, (50,), generator=g),
                     torch.randn(100, 80, generator=g) - 5, torch.randn(192, generator=g)))
    return rows


def batch_args(rows, device):
    def pad(tensors, *trailing):
        out = torch.zeros(len(tensors), max(t.shape[0] for t in tensors), *trailing, dtype=tensors[0].dtype)
        for i, t in enumerate(tensors):
            out[i, : t.shape[0]] = t
        return out.to(device), torch.tensor([t.shape[0] for t in tensors])

    tokens, token_lengths = pad([r[0] for r in rows])
    prompt, prompt_lengths = pad([r[1] for r in rows])
    mel, mel_lengths = pad([r[2] for r in rows], 80)
    return tokens, token_lengths, prompt, prompt_lengths, mel, mel_lengths, torch.stack([r[3] for r in rows]).to(device)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(flow, hift, rows, device, seeds):
    generators = [torch.Generator(device).manual_seed(s) for s in seeds]
    sync(device)
    start = time.perf_counter()
    mel, mel_lengths = flow.token_to_mel(*batch_args(rows, device), generators=generators)
    sync(device)
    flow_s = time.perf_counter() - start
    wave, wave_lengths = hift(mel, mel_lengths, generators)
    sync(device)
    return mel, mel_lengths, wave, wave_lengths, flow_s, time.perf_counter() - start - flow_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    shape, hift_channels = SIZES[args.size]
    flow = Flow(FlowOptions.from_config({**TINY_FLOW_CONFIG, "use_wavlm_emb": False}), shape).to(args.device).eval()
    hift = HiFTGenerator(**hift_channels).to(args.device).eval()
    rows = make_rows(args.rows)
    seeds = list(range(100, 100 + args.rows))
    run(flow, hift, rows[:1], args.device, seeds[:1])  # warm-up

    batched = run(flow, hift, rows, args.device, seeds)
    alone = [run(flow, hift, [row], args.device, [seed]) for row, seed in zip(rows, seeds)]
    flow_alone, voc_alone = sum(a[4] for a in alone), sum(a[5] for a in alone)
    mel_diff = max(float((batched[0][i, :, : int(a[1][0])] - a[0][0]).abs().max()) for i, a in enumerate(alone))
    wave_diff = max(float((batched[2][i, : int(a[3][0])] - a[2][0]).abs().max()) for i, a in enumerate(alone))
    frames = [int(n) for n in batched[1]]
    print(f"GLM-TTS stage 2, size={args.size}, {args.rows} rows, mel frames {frames}, device={args.device}, "
          f"threads={torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    for name, b, a in (("flow", batched[4], flow_alone), ("vocoder", batched[5], voc_alone)):
        print(f"  {name:8s} batched {b:7.2f} s   one by one {a:7.2f} s   ratio {a / b:.2f}x")
    total_b, total_a = batched[4] + batched[5], flow_alone + voc_alone
    print(f"  both     batched {total_b:7.2f} s   one by one {total_a:7.2f} s   ratio {total_a / total_b:.2f}x")
    print(f"  largest difference batched vs alone: mel {mel_diff:.2e}, wave {wave_diff:.2e}")
    print(f"  load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
