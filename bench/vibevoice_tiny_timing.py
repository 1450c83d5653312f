"""CPU seconds of the tiny VibeVoice checkpoint: one batch of 3 rows vs the same 3 rows one by one.

    OMP_NUM_THREADS=1 python bench/vibevoice_tiny_timing.py [--max-new-tokens 16] [--repeats 3]

Prints the tiny model's parameter count, the median seconds (preprocess + generate + postprocess) of each way, with
the KV cache on and off, and the ratio. Greedy decoding; each row has its own reference clip from tests/data.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402

from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.adapters.vibevoice import VibeVoiceAdapter  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402

TEXTS = ["Hello there.", "A somewhat longer sentence to speak here.", "你好世界"]
CLIPS = ["en_female_1.wav", "en_male_1.wav", "zh_female_1.wav"]


def clip(name: str, sampling_rate: int) -> np.ndarray:
    samples, rate = sf.read(ROOT / "tests" / "data" / name, dtype="float32", always_2d=True)
    return torchaudio.functional.resample(torch.from_numpy(samples.mean(axis=1)), rate, sampling_rate).numpy()


def seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    with tempfile.TemporaryDirectory() as tmp:
        adapter = VibeVoiceAdapter.from_pretrained(VibeVoiceAdapter.make_tiny_checkpoint(Path(tmp) / "tiny"))
    sr = adapter.facts.sampling_rate
    rows = [AdapterRow(t, clip(c, sr), None, seed=i) for i, (t, c) in enumerate(zip(TEXTS, CLIPS))]
    print(f"tiny VibeVoice: {adapter.facts.num_parameters:,} parameters; torch threads {torch.get_num_threads()}")
    for use_cache in (True, False):
        params = SynthesisParams(greedy=True, max_new_tokens=args.max_new_tokens, use_cache=use_cache)
        audio = adapter.synthesize(rows, params)
        batch_s = seconds(lambda: adapter.synthesize(rows, params), args.repeats)
        single_s = seconds(lambda: [adapter.synthesize([r], params) for r in rows], args.repeats)
        audio_s = sum(len(a) for a in audio) / sr
        print(f"use_cache={use_cache}: batch of 3 {batch_s:.2f} s, 3 one by one {single_s:.2f} s, "
              f"ratio one-by-one/batch {single_s / batch_s:.2f}x; {audio_s:.1f} s of audio "
              f"(frames per row {[len(a) // 3200 for a in audio]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
