"""``python -m tts_app reference AUDIO [--out OUT.wav] [--json] [--sampling-rate HZ]``

Cleans a reference audio file and prints its quality report. Exit status: 0 usable, 1 unusable audio (the error
message, no traceback), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

DEFAULT_SAMPLING_RATE = 24000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tts_app reference",
                                     description="Clean a reference audio file (decode, mono, trim silence, "
                                                 "normalise) and print its quality report.")
    parser.add_argument("audio", help="reference audio file (WAV, FLAC, OGG, MP3, M4A, ...)")
    parser.add_argument("--out", default=None, help="write the cleaned clip here as 16-bit WAV")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--sampling-rate", type=int, default=None,
                        help=f"sampling rate of the cleaned clip in Hz (default {DEFAULT_SAMPLING_RATE})")
    return parser


def _print_text(report: dict) -> None:
    skip = {"warnings", "errors"}
    for name, value in report.items():
        if name not in skip:
            print(f"{name}: {value}")
    for warning in report["warnings"]:
        print(f"warning: {warning}")
    for error in report["errors"]:
        print(f"error: {error}")


def main(argv: list[str] | None = None) -> int:
    """Run the command on ``argv`` (the arguments after ``reference``); returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    sampling_rate = DEFAULT_SAMPLING_RATE if args.sampling_rate is None else args.sampling_rate
    if sampling_rate <= 0:
        print(f"--sampling-rate={sampling_rate} must be a positive number of Hz", file=sys.stderr)
        return 2

    from tts_app.audio.post import write_wav_atomic
    from tts_app.audio.reference import prepare_reference
    from tts_app.errors import ReferenceAudioError

    try:
        ref, report = prepare_reference(args.audio, target_sampling_rate=sampling_rate)
    except ReferenceAudioError as error:
        partial = getattr(error, "report", None)
        if args.json:
            out = partial.to_dict() if partial is not None else {"name": args.audio, "errors": [str(error)]}
            print(json.dumps(out, ensure_ascii=False, indent=1))
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.out is not None:
        write_wav_atomic(args.out, ref.samples, ref.sampling_rate)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=1))
    else:
        _print_text(report.to_dict())
        if args.out is not None:
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
