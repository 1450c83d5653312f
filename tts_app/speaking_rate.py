"""Typical speaking rates: the expected spoken length of a text, and the longest segment whose speech fits a
decode-step cap. Neutral ground for the engine (length bucketing, expected decode steps) and the adapters (each
family's default ``max_segment_chars`` from its cap), so neither package imports the other for it.

Pure: no torch, no numpy.
"""

from __future__ import annotations

import unicodedata

from tts_app.config import MIN_MAX_SEGMENT_CHARS

# Typical read-speech rates, used to ORDER segments by expected duration (bucketing) and to size default segment
# limits, never to cut audio.
# Mandarin: ~4-5 syllables (characters) per second; English: ~150 words/min x ~6 characters per word incl. the
# space = ~15 characters per second. Sources: common speaking-rate figures (e.g. Yuan, Liberman & Cieri 2006,
# "Towards an integrated understanding of speaking rate in conversation").
CJK_CHAR_S = 0.22
OTHER_CHAR_S = 1.0 / 15.0


# Share of a segment's decode-step cap that typical speech of ``max_chars_for_speech_s`` characters may fill: the
# rates above are averages, and a slow reader (Mandarin ~3.5 characters/s, English ~11 characters/s) is about 1.3x
# slower, so 0.7 x the cap leaves room for them before the cap cuts a sentence.
SEGMENT_CAP_MARGIN = 0.7


def max_chars_for_speech_s(speech_s: float, languages, margin: float = SEGMENT_CAP_MARGIN) -> int:
    """Longest segment, in characters, whose typical speech fits in ``margin * speech_s`` seconds in every language
    of ``languages`` (ISO codes; "zh" reads at ``CJK_CHAR_S`` per character, any other at ``OTHER_CHAR_S``).

    Used to derive a family's default ``max_segment_chars`` from its decode-step cap, so an ordinary sentence never
    hits the cap. At least ``tts_app.config.MIN_MAX_SEGMENT_CHARS``.

    Raises:
        ValueError: ``languages`` is empty or ``speech_s`` is negative.
    """
    languages = tuple(languages)
    if not languages or speech_s < 0:
        raise ValueError(f"need languages and speech_s >= 0, got {languages!r}, {speech_s}")
    seconds_per_char = max(CJK_CHAR_S if lang == "zh" else OTHER_CHAR_S for lang in languages)
    return max(MIN_MAX_SEGMENT_CHARS, int(speech_s * margin / seconds_per_char))


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F") and ch.isalnum()


def expected_speech_s(text: str) -> float:
    """Rough spoken duration of ``text`` in seconds (CJK characters ~0.22 s each, other characters ~1/15 s).

    Used for length bucketing only, so it need only order texts correctly.
    """
    wide = sum(1 for ch in text if _is_wide(ch))
    return wide * CJK_CHAR_S + (len(text) - wide) * OTHER_CHAR_S
