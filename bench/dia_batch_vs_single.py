"""CPU seconds of a 3-row greedy batch vs the same 3 rows one by one, Dia tiny checkpoint.

    OMP_NUM_THREADS=1 python3 bench/dia_batch_vs_single.py [--max-new-tokens 64] [--repeats 3] [--no-cache]

Prints the tiny model's parameter counts (Dia model and DAC codec), the best-of-N CPU seconds
(``time.process_time``) of each way, and their ratio. Rows use real speech references from tests/data with their
transcripts (different clip and text length per row). A print, not a test: timings never gate anything.
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--max-new-tokens", type=int, default=64, help="decode steps (16 of them flush the delay)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cache", action="store_true", help="use_cache=False (recompute the prefix each step)")
    args = parser.parse_args()

    import numpy as np
    import soundfile as sf
    import torch
    import torchaudio

    from tts_app.adapters.base import AdapterRow
    from tts_app.adapters.dia import DiaAdapter
    from tts_app.request import SynthesisParams

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        # the processor loads its codec from inside the folder, so load while it exists
        adapter = DiaAdapter.from_pretrained(DiaAdapter.make_tiny_checkpoint(Path(tmp) / "tiny"))
    sr = adapter.facts.sampling_rate
    data = REPO_ROOT / "tests" / "data"
    transcripts = {f["name"]: f.get("transcript") for f in json.loads((data / "manifest.json").read_text())["files"]}

    def row(text: str, name: str, seed: int) -> AdapterRow:
        samples, file_sr = sf.read(data / name, dtype="float32", always_2d=True)
        wave = torchaudio.functional.resample(torch.from_numpy(samples.mean(axis=1)), file_sr, sr).numpy()
        return AdapterRow(text, wave.astype(np.float32), transcripts[name], seed=seed)

    rows = [
        row("Hello there, this sentence is a little longer than the others.", "en_female_1.wav", 1),
        row("Short one.", "en_male_1.wav", 2),
        row("A gentle breeze, again and again.", "en_female_2.wav", 3),
    ]
    params = SynthesisParams(greedy=True, max_new_tokens=args.max_new_tokens, use_cache=not args.no_cache)

    def cpu_seconds(fn) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
        return best

    batched = cpu_seconds(lambda: adapter.synthesize(rows, params))
    single = cpu_seconds(lambda: [adapter.synthesize([r], params) for r in rows])
    audio_s = sum(w.size for w in adapter.synthesize(rows, params)) / sr

    model = adapter.model.num_parameters()
    codec = adapter.processor.audio_tokenizer.num_parameters()
    print(f"tiny dia parameters: total {model + codec:,} (Dia model {model:,}, DAC codec {codec:,})")
    print(f"greedy, max_new_tokens={args.max_new_tokens}, use_cache={params.use_cache}, {audio_s:.2f} s of audio "
          f"in total, references 4.8-6.3 s, best of {args.repeats}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print(f"batch of 3: {batched:.2f} CPU s   3 single runs: {single:.2f} CPU s   "
          f"single/batch: {single / batched:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
