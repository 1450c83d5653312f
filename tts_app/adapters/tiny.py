"""``python -m tts_app make-tiny-model --family F --out DIR [--seed N]``: write a tiny random checkpoint of a real
architecture (config, weights, tokenizer/processor files built in code) that loads through ``--model DIR``."""

from __future__ import annotations

import argparse
import sys

from tts_app.adapters import FAMILIES, adapter_class


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tts_app make-tiny-model", description=__doc__)
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    out = adapter_class(args.family).make_tiny_checkpoint(args.out, seed=args.seed)
    print(f"wrote tiny {args.family} checkpoint to {out}; use it with --model {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
