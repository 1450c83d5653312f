"""``python -m tts_app reference AUDIO [--out OUT.wav] [--json] [--sampling-rate HZ] [--lang zh|en]``

Cleans a reference audio file and prints its quality report. Exit status: 0 usable, 1 unusable audio (the error
message, no traceback), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

from tts_app.cli.args import add_lang_arg, lang_of
from tts_app.cli.messages import say
from tts_app.config import MAX_SAMPLING_RATE, MIN_SAMPLING_RATE, ReferenceConfig
from tts_app.frontend.messages import localize

DEFAULT_SAMPLING_RATE = ReferenceConfig().default_sampling_rate


def _sampling_rate(text: str) -> int:
    """argparse ``type=``: a whole number of Hz in [MIN_SAMPLING_RATE, MAX_SAMPLING_RATE]."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of Hz, e.g. 24000") from None
    if not MIN_SAMPLING_RATE <= value <= MAX_SAMPLING_RATE:
        raise argparse.ArgumentTypeError(f"{value} Hz is outside {MIN_SAMPLING_RATE}..{MAX_SAMPLING_RATE} Hz; "
                                         f"use e.g. {DEFAULT_SAMPLING_RATE}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tts_app reference",
                                     description="Clean a reference audio file (decode, mono, trim silence, "
                                                 "normalise) and print its quality report.")
    parser.add_argument("audio", help="reference audio file (WAV, FLAC, OGG, MP3, M4A, ...)")
    parser.add_argument("--out", default=None, help="write the cleaned clip here as 16-bit WAV")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--sampling-rate", type=_sampling_rate, default=None,
                        help=f"sampling rate of the cleaned clip in Hz, {MIN_SAMPLING_RATE}..{MAX_SAMPLING_RATE} "
                             f"(default {DEFAULT_SAMPLING_RATE})")
    add_lang_arg(parser)
    return parser


def _display(value, lang: str = "en") -> str:
    """A report value as a person reads it: "—" for unknown/none, yes/no for flags, lists comma-separated."""
    if value is None or value == []:
        return "—"
    if isinstance(value, bool):
        return say(lang, "cli_yes" if value else "cli_no")
    if isinstance(value, list):
        return ", ".join(_display(v, lang) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _print_text(report: dict, lang: str) -> None:
    """The report's fields (by their JSON names, which scripts read), then its warnings and errors in ``lang``."""
    skip = {"warnings", "errors"}
    for name, value in report.items():
        if name not in skip:
            print(f"{name}: {_display(value, lang)}")
    for warning in report["warnings"]:
        print(say(lang, "cli_warning", message=warning))
    for error in report["errors"]:
        print(say(lang, "cli_error", message=error))


def main(argv: list[str] | None = None) -> int:
    """Run the command on ``argv`` (the arguments after ``reference``); returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    sampling_rate = DEFAULT_SAMPLING_RATE if args.sampling_rate is None else args.sampling_rate
    lang = lang_of(args)

    from tts_app.audio.post import write_wav_atomic
    from tts_app.audio.reference import prepare_reference
    from tts_app.errors import ReferenceAudioError

    try:
        ref, report = prepare_reference(args.audio, target_sampling_rate=sampling_rate)
    except ReferenceAudioError as error:
        partial = error.report
        if args.json:
            out = partial.to_dict(lang) if partial is not None else {"name": args.audio,
                                                                      "errors": [localize(error, lang)]}
            print(json.dumps(out, ensure_ascii=False, indent=1))
        print(say(lang, "cli_error", message=localize(error, lang)), file=sys.stderr)
        return 1
    if args.out is not None:
        write_wav_atomic(args.out, ref.samples, ref.sampling_rate)
    if args.json:
        print(json.dumps(report.to_dict(lang), ensure_ascii=False, indent=1))
    else:
        _print_text(report.to_dict(lang), lang)
        if args.out is not None:
            print(say(lang, "cli_wrote", path=args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
