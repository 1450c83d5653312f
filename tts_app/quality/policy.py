"""The take policy: which scores make a take "below threshold", and which of several takes is best.

A request's ``SynthesisParams`` carry the setting (``take_check``: off / score / reroll, and the thresholds below);
the engine scores each finished segment off its worker thread and, with ``reroll``, generates a segment below
threshold again with a new seed (``EngineCore``'s retake mechanism: take ``k`` uses ``seed + k * 1,000,003``) up
to ``take_max_rerolls`` times, keeping the best take (``best_take``). Pure: no torch, no numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tts_app.quality.scorer import TakeScores

#: ``take_check`` values: "off" = no scoring; "score" = every segment scored and recorded, never re-generated;
#: "reroll" = scored, and a segment below threshold re-generated with a new seed up to ``take_max_rerolls`` times.
TAKE_CHECKS = ("off", "score", "reroll")
DEFAULT_TAKE_CHECK = "off"
# Re-generations per segment (issue 29: default 2, so at most 3 takes). Each costs one more generation of the
# segment; ``MAX_TAKE_REROLLS`` bounds what a request may ask for.
DEFAULT_TAKE_MAX_REROLLS = 2
MAX_TAKE_REROLLS = 5
# CER / WER above this is below threshold. Whisper base (CTranslate2 int8) measured CER 0.04-0.08 on the three clean
# Chinese clips of tests/data and WER 0.00 on the three English ones (an earlier study: 0.00-0.22 CER on such
# clips); a skipped or repeated clause of a 20-word segment costs >= 0.25; 0.3 leaves ASR errors on good takes room.
DEFAULT_TAKE_MAX_ERROR_RATE = 0.3
# Speaker similarity (Resemblyzer cosine, ``tts_app.quality.speaker``) below this is below threshold. Measured on
# tests/data: the same voice in another recording 0.94-0.95, a clip against its copy under a music bed 0.86, the six
# clean voices against each other 0.44-0.75 (two Chinese female voices the highest). 0.7 flags most takes in another
# voice while sparing a cloned take, which never matches its reference as closely as the speaker's own recordings.
DEFAULT_TAKE_MIN_SIMILARITY = 0.7
# Signal checks (``tts_app.quality.signal``): a take more than this share silent, or with more than this share of
# clipped samples, is below threshold. Read speech is ~15-30 % pauses; half a take silent is a failure (a long
# stall, or a take that ended early and was padded). 0.1 % clipped samples is audible distortion.
MAX_SILENCE_SHARE = 0.6
MAX_CLIPPING_SHARE = 0.001

#: problem codes a take can have (records, the "needs listening" filter)
PROBLEMS = ("intelligibility", "speaker", "silence", "clipping", "duration", "truncated", "unscored")


def take_problems(scores: "TakeScores", *, max_error_rate: float = DEFAULT_TAKE_MAX_ERROR_RATE,
                  min_similarity: float = DEFAULT_TAKE_MIN_SIMILARITY) -> tuple[str, ...]:
    """The codes (``PROBLEMS``) of the thresholds ``scores`` misses, in that order; () = the take passes. A score
    that could not be made (no ASR, no reference) is not a problem; a take that could not be scored at all is
    ``unscored``."""
    if scores.error is not None:
        return ("unscored",)
    out = []
    if scores.error_rate is not None and scores.error_rate > max_error_rate:
        out.append("intelligibility")
    if scores.similarity is not None and scores.similarity < min_similarity:
        out.append("speaker")
    signal = scores.signal
    if signal.silence_share > MAX_SILENCE_SHARE:
        out.append("silence")
    if signal.clipping_share > MAX_CLIPPING_SHARE:
        out.append("clipping")
    if not signal.duration_ok:
        out.append("duration")
    if signal.truncated:
        out.append("truncated")
    return tuple(out)


def take_rank(scores: "TakeScores", problems: tuple[str, ...]) -> tuple:
    """Sort key of a take, best first: fewer problems, then lower error rate, then higher similarity, then less
    silence."""
    error_rate = scores.error_rate if scores.error_rate is not None else 0.0
    similarity = scores.similarity if scores.similarity is not None else 1.0
    silence = scores.signal.silence_share if scores.signal is not None else 1.0
    return (len(problems), error_rate, -similarity, silence)


def best_take(takes: list[tuple["TakeScores", tuple[str, ...]]]) -> int:
    """Index of the best of ``takes`` (``(scores, problems)`` each, in the order they were made; the first wins a
    tie, so a re-roll replaces a take only when it is better)."""
    if not takes:
        raise ValueError("no takes")
    return min(range(len(takes)), key=lambda i: (take_rank(*takes[i]), i))
