"""``python -m tts_app frontend "TEXT" [--json] [--supports-pinyin] [--max-segment-chars N] ...``

Prints what the front end makes of a text: the normalised text, the segments (rendered text and pause after, in
ms), per-character readings (char, TONE3, polyphonic, basis: word / rule:NAME / char / override) and warnings, in
English or, with ``--lang zh``, Chinese. No model is loaded.
Exit status: 0 ok (also when the reader closes the pipe early, e.g. ``... | head``: no traceback), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from tts_app.cli.args import add_lang_arg, lang_of
from tts_app.cli.messages import say
from tts_app.config import FrontendConfig
from tts_app.errors import InputError
from tts_app.frontend.messages import localize
from tts_app.frontend.prepare import DEFAULT_MAX_SEGMENT_CHARS
from tts_app.frontend.types import PreparedText


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tts_app frontend",
                                description="Show normalised text, segments and per-character pinyin of TEXT.")
    p.add_argument("text", help="text to analyse ('-' reads standard input)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--supports-pinyin", action="store_true",
                   help="render overrides as {pinyin} tokens instead of single-reading homophones")
    p.add_argument("--max-segment-chars", type=int, default=None,
                   help=f"longest segment, in characters (default {DEFAULT_MAX_SEGMENT_CHARS})")
    p.add_argument("--min-segment-chars", type=int, default=None,
                   help=f"shorter segments are merged (default {FrontendConfig.min_segment_chars})")
    p.add_argument("--default-pause-ms", type=int, default=None,
                   help=f"pause between segments in ms (default {FrontendConfig.default_pause_ms})")
    p.add_argument("--all-chars", action="store_true",
                   help="list every Chinese character, not only the ambiguous polyphones and overrides")
    add_lang_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.lang = lang_of(args)
    from tts_app.frontend import prepare_text

    config = FrontendConfig()
    text = sys.stdin.read() if args.text == "-" else args.text
    kwargs = dict(supports_pinyin=args.supports_pinyin,
                  default_pause_ms=config.default_pause_ms if args.default_pause_ms is None else args.default_pause_ms,
                  min_segment_chars=config.min_segment_chars if args.min_segment_chars is None
                  else args.min_segment_chars)
    if args.max_segment_chars is not None:
        kwargs["max_segment_chars"] = args.max_segment_chars
    try:
        prepared = prepare_text(text, **kwargs)
    except InputError as exc:
        print(say(args.lang, "cli_error", message=localize(exc, args.lang)), file=sys.stderr)
        return 2
    try:
        _print_report(prepared, args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (``| head``). Point stdout at devnull so the interpreter's own flush at exit does
        # not raise again (the recipe of Python's ``signal`` docs, "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


def _print_report(prepared: PreparedText, args: argparse.Namespace) -> None:
    if args.json:
        data = asdict(prepared)
        data["warnings"] = [localize(w, args.lang) for w in prepared.warnings]
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return
    lang = args.lang
    print(say(lang, "cli_normalised", text=prepared.normalized_text))
    print(say(lang, "cli_segments", count=len(prepared.segments)))
    for i, seg in enumerate(prepared.segments):
        rendered = "" if seg.text == seg.source_text else say(lang, "cli_model_sees", text=seg.text)
        print(say(lang, "cli_segment", index=i, text=seg.source_text, pause_ms=seg.pause_after_ms,
                  rendered=rendered))
    readings = [r for r in prepared.readings if args.all_chars or r.ambiguous or r.source == "override"]
    print(say(lang, "cli_readings_all" if args.all_chars else "cli_readings"))
    for r in readings:
        flag = "polyphonic" if r.polyphonic else "single"
        basis = r.basis + (f":{r.rule}" if r.rule else "")
        others = f"  candidates: {' '.join(r.candidates)}" if r.polyphonic else ""
        print(f"  {r.position:>4}  {r.char}  {r.pinyin:<8} {flag:<10} {basis:<16}{others}")
    if prepared.warnings:
        print(say(lang, "cli_warnings"))
        for w in prepared.warnings:
            print(f"  - {localize(w, args.lang)}")


if __name__ == "__main__":
    sys.exit(main())
