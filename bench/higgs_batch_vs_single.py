"""CPU seconds of a 3-row greedy batch vs the same 3 rows one by one, Higgs Audio v2 tiny checkpoint.

    OMP_NUM_THREADS=1 python3 bench/higgs_batch_vs_single.py [--max-new-tokens 64] [--repeats 3]

Prints the tiny model's parameter counts, the best-of-N CPU seconds (``time.process_time``) of each way, and their
ratio. Rows use real speech references from tests/data (different clip and text length per row). A print, not a
test: timings never gate anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    import soundfile as sf
    import torch
    import torchaudio

    from tts_app.adapters.base import AdapterRow
    from tts_app.adapters.higgs import HiggsAudioAdapter
    from tts_app.request import SynthesisParams

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = HiggsAudioAdapter.from_pretrained(HiggsAudioAdapter.make_tiny_checkpoint(Path(tmp) / "tiny"))
    sr = adapter.facts.sampling_rate

    def reference(name: str) -> np.ndarray:
        samples, file_sr = sf.read(REPO_ROOT / "tests" / "data" / name, dtype="float32", always_2d=True)
        return torchaudio.functional.resample(torch.from_numpy(samples.mean(axis=1)), file_sr, sr).numpy()

    rows = [
        AdapterRow("Hello there, this sentence is a little longer than the others.", reference("en_female_1.wav"),
                   "The morning train was late again.", seed=1),
        AdapterRow("Short one.", reference("en_male_1.wav"), "Before you leave the office tonight.", seed=2),
        AdapterRow("今天天气很好，我们去公园散步吧。", reference("zh_female_1.wav"), "银行门口排起了长队。", seed=3),
    ]
    params = SynthesisParams(greedy=True, max_new_tokens=args.max_new_tokens)

    def cpu_seconds(fn) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
        return best

    batched = cpu_seconds(lambda: adapter.synthesize(rows, params))
    single = cpu_seconds(lambda: [adapter.synthesize([row], params) for row in rows])
    audio_s = sum(w.size for w in adapter.synthesize(rows, params)) / sr

    lm = adapter.model.num_parameters()
    codec = adapter.processor.audio_tokenizer.num_parameters()
    print(f"tiny higgs parameters: total {lm + codec:,} (language model {lm:,}, codec {codec:,})")
    print(f"greedy, max_new_tokens={args.max_new_tokens}, {audio_s:.2f} s of audio in total, "
          f"best of {args.repeats}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print(f"batch of 3: {batched:.2f} CPU s   3 single runs: {single:.2f} CPU s   "
          f"single/batch: {single / batched:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
