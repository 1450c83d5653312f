"""CPU seconds of a 3-row greedy batch vs the same 3 rows one by one, on one family's tiny random checkpoint.

    OMP_NUM_THREADS=1 python3 bench/batch_vs_single.py --family {vibevoice,csm,dia,higgs} [--cache on|off|both]
        [--max-new-tokens N] [--repeats 3]

Prints the tiny model's parameter counts (model, its sub-modules, and the processor's codec when it holds one), then
per KV-cache setting the best-of-N CPU seconds (``time.process_time``) of the batch and of the 3 single runs, their
ratio and the seconds of audio made. Rows: three real speech references from tests/data with their transcripts
(different clip, text length and seed per row). Greedy decoding. A print, not a test: timings never gate anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (bench/common.py; pins threads before torch loads)

common.setup()

FAMILIES = ("vibevoice", "csm", "dia", "higgs")
# Decode steps per row when --max-new-tokens is not given: about 1-4 s of audio on each tiny model. Dia needs more
# than its 16-step delay pattern before any frame is complete.
DEFAULT_MAX_NEW_TOKENS = {"vibevoice": 16, "csm": 50, "dia": 64, "higgs": 64}
# (text, reference clip in tests/data): a long English, a short English and a Chinese row.
ROWS = (
    ("Hello there, this sentence is a little longer than the others.", "en_female_1.wav"),
    ("Short one.", "en_male_1.wav"),
    ("今天天气很好，我们去公园散步吧。", "zh_female_1.wav"),
)


def workload_rows(sampling_rate: int) -> list:
    """The three ``AdapterRow``s of ``ROWS``: whole reference clips at ``sampling_rate`` Hz with their transcripts,
    seeds 1, 2, 3."""
    from tts_app.adapters.base import AdapterRow

    rows = []
    for seed, (text, clip) in enumerate(ROWS, start=1):
        wave, transcript = common.reference_clip(clip, sampling_rate)
        rows.append(AdapterRow(text, wave, transcript, seed=seed))
    return rows


def cpu_seconds(fn, repeats: int) -> float:
    """Best (smallest) ``time.process_time`` seconds of ``repeats`` calls of ``fn``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def parameter_counts(adapter) -> dict[str, int]:
    """Parameter counts: "model" (tied weights counted once), each top-level sub-module of the model that has
    parameters, and "codec" for a codec the processor holds outside the model (Dia's DAC, Higgs' audio tokenizer)."""
    model = adapter.model
    counts = {"model": model.num_parameters()}
    for name, child in model.named_children():
        num = sum(p.numel() for p in child.parameters())
        if num:
            counts[f"model.{name}"] = num
    codec = getattr(adapter.processor, "audio_tokenizer", None)
    if codec is not None and hasattr(codec, "num_parameters"):
        counts["codec"] = codec.num_parameters()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", required=True, choices=FAMILIES)
    parser.add_argument("--cache", choices=("on", "off", "both"), default="both",
                        help="use_cache setting(s) to time (off recomputes the whole prefix each step)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"decode steps per row (default per family: {DEFAULT_MAX_NEW_TOKENS})")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each way; the best is printed")
    args = parser.parse_args(argv)

    from tts_app.request import SynthesisParams

    max_new_tokens = args.max_new_tokens if args.max_new_tokens is not None else DEFAULT_MAX_NEW_TOKENS[args.family]
    with tempfile.TemporaryDirectory() as tmp:
        # Dia and Higgs processors load their codec from inside the folder, so load while it exists.
        adapter = common.load_tiny_adapter(args.family, Path(tmp))
    sr = adapter.facts.sampling_rate
    rows = workload_rows(sr)

    counts = parameter_counts(adapter)
    parts = ", ".join(f"{name} {num:,}" for name, num in counts.items() if name != "model")
    print(f"tiny {args.family} parameters: model {counts['model']:,} ({parts}); tied embeddings counted once")
    reference_s = [round(row.reference_audio.size / sr, 2) for row in rows]
    print(f"greedy, max_new_tokens={max_new_tokens}, references {reference_s} s, best of {args.repeats}, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    for use_cache in {"on": (True,), "off": (False,), "both": (True, False)}[args.cache]:
        params = SynthesisParams(greedy=True, max_new_tokens=max_new_tokens, use_cache=use_cache)
        audio_s = sum(wave.size for wave in adapter.synthesize(rows, params)) / sr
        batched = cpu_seconds(lambda: adapter.synthesize(rows, params), args.repeats)
        single = cpu_seconds(lambda: [adapter.synthesize([row], params) for row in rows], args.repeats)
        print(f"use_cache={use_cache!s:<5}  batch of 3: {batched:.2f} CPU s   3 single runs: {single:.2f} CPU s   "
              f"single/batch: {common.ratio(single, batched):.2f}x   {audio_s:.2f} s of audio in total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
