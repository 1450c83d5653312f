"""``python -m tts_app score AUDIO --text T [--reference R] [--json] [--asr BACKEND:ID_OR_DIR] [--device D]``

Scores a clip against the text it should say (and the voice it should have): ASR transcript and its CER (Chinese) /
WER (other), speaker similarity to ``--reference``, silence and clipping shares, length per character
(``tts_app.quality``). Exit status: 0 the clip passes the thresholds, 1 it is below one of them (the problems are
listed) or cannot be read or scored, 2 usage error.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

from tts_app.cli.args import add_lang_arg, lang_of
from tts_app.cli.messages import say
from tts_app.frontend.messages import Notice, localize, register
from tts_app.quality.asr import DEFAULT_QUALITY_ASR
from tts_app.quality.policy import DEFAULT_TAKE_MAX_ERROR_RATE, DEFAULT_TAKE_MIN_SIMILARITY

EN: dict[str, str] = {
    "score_passes": "passes: no score below its threshold",
    "score_problems": "below threshold: {problems}",
    "score_unscored": "cannot score: {error}",
    "score_text_empty": "--text is empty; give the text the clip should say",
}
ZH: dict[str, str] = {
    "score_passes": "通过：没有低于阈值的分数",
    "score_problems": "低于阈值：{problems}",
    "score_unscored": "无法评分：{error}",
    "score_text_empty": "--text 为空；请给出这段音频应当说的文字",
}
register(__name__, EN, ZH)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tts_app score",
                                     description="Score a clip: ASR transcript and CER/WER against its text, "
                                                 "speaker similarity to a reference, silence, clipping, length. "
                                                 "Exit status 0 passes, 1 below a threshold or unreadable, 2 usage.")
    parser.add_argument("audio", help="the clip to score (WAV, FLAC, OGG, MP3, M4A, ...)")
    parser.add_argument("--text", required=True, help="the text the clip should say")
    parser.add_argument("--reference", default=None, help="an audio file in the voice the clip should have")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.add_argument("--asr", default=DEFAULT_QUALITY_ASR,
                        help="speech recogniser: transformers:ID_OR_DIR (a Whisper checkpoint) or "
                             "faster-whisper:ID_OR_DIR (CTranslate2 files, e.g. faster-whisper:base); "
                             f"default {DEFAULT_QUALITY_ASR}")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument("--max-error-rate", type=float, default=DEFAULT_TAKE_MAX_ERROR_RATE,
                        help=f"CER/WER above this is below threshold (default {DEFAULT_TAKE_MAX_ERROR_RATE})")
    parser.add_argument("--min-similarity", type=float, default=DEFAULT_TAKE_MIN_SIMILARITY,
                        help=f"speaker similarity below this is below threshold (default "
                             f"{DEFAULT_TAKE_MIN_SIMILARITY})")
    add_lang_arg(parser)
    return parser


@functools.lru_cache(maxsize=4)
def scorer_for(asr: str, device: str):
    """The ``TakeScorer`` of an ``--asr`` value and device, built once per process (its models load on first use,
    then stay: repeated in-process calls, as the tests make, load them once)."""
    from tts_app.quality.asr import asr_backend
    from tts_app.quality.scorer import TakeScorer
    from tts_app.quality.speaker import SpeakerEncoder

    return TakeScorer(asr_backend(asr, device), SpeakerEncoder(device))


def _mono(path: str) -> tuple:
    from tts_app.audio.decode import load_audio

    samples, sampling_rate, _ = load_audio(path)
    return samples.mean(axis=1).astype("float32"), sampling_rate


def main(argv: list[str] | None = None) -> int:
    """Run the command on ``argv`` (the arguments after ``score``); returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    lang = lang_of(args)
    if not args.text.strip():
        print(say(lang, "cli_error", message=localize(Notice("score_text_empty"), lang)), file=sys.stderr)
        return 2

    from tts_app.errors import ReferenceAudioError
    from tts_app.quality.policy import take_problems

    try:
        scorer = scorer_for(args.asr, args.device)
    except ValueError as exc:
        print(say(lang, "cli_error", message=str(exc)), file=sys.stderr)
        return 2
    try:
        samples, sampling_rate = _mono(args.audio)
        reference = _mono(args.reference) if args.reference else None
    except ReferenceAudioError as error:
        print(say(lang, "cli_error", message=localize(error, lang)), file=sys.stderr)
        return 1
    scores = scorer.score(samples, sampling_rate, args.text, reference=reference,
                          reference_key=f"file:{args.reference}" if args.reference else "")
    problems = take_problems(scores, max_error_rate=args.max_error_rate, min_similarity=args.min_similarity)
    record = {"audio": args.audio, "text": args.text, **scores.to_dict(), "problems": list(problems)}
    if scores.error is not None:
        record["error"] = localize(scores.error, lang)
    if args.json:
        print(json.dumps(record, ensure_ascii=False, indent=1))
    else:
        for name, value in record.items():
            if name not in ("signal", "problems", "error"):
                print(f"{name}: {'—' if value is None else value}")
        for name, value in record["signal"].items():
            print(f"{name}: {'—' if value is None else value}")
    if scores.error is not None:
        print(say(lang, "cli_error", message=localize(Notice("score_unscored", error=localize(scores.error, lang)), lang)),
              file=sys.stderr)
        return 1
    if problems:
        print(localize(Notice("score_problems", problems=", ".join(problems)), lang), file=sys.stderr)
        return 1
    if not args.json:
        print(localize(Notice("score_passes"), lang))
    return 0


if __name__ == "__main__":
    sys.exit(main())
