"""Intelligibility: how far an ASR transcript of a take is from the text it should say, as an error rate.

Seed-TTS-Eval's convention (the benchmark vLLM-Omni and SGLang-Omni gate their CI on): character error rate (CER)
for Chinese, word error rate (WER) for English, both after the same normalisation of the reference text and the
transcript. Ours, applied to both sides (``normalize_for_scoring``):

1. the TTS front end's own text normalisation (``tts_app.frontend.normalize.normalize_chunk``: full-width ->
   half-width, digits, dates, units and symbols -> their spoken words through wetext), so "10 分钟" and "十分钟",
   "5 kg" and "five kilograms" score equal;
2. traditional -> simplified Chinese (OpenCC ``t2s``; Whisper often writes Mandarin in traditional characters);
3. Unicode NFKC, case folded;
4. punctuation and symbols (Unicode categories P*, S*) -> spaces, whitespace collapsed.

Chinese is scored per character (spaces dropped; a Latin word inside Chinese text counts as its letters), anything
else per word. The edit distance is ``jiwer``'s (``jiwer.cer`` / ``jiwer.wer``: (substitutions + deletions +
insertions) / reference length), so a transcript that babbles past the end can score above 1.

Pure: no torch, no numpy.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from dataclasses import dataclass

from tts_app.frontend.normalize import default_language, normalize_chunk

#: the two metrics, by the language of the reference text
CER = "cer"
WER = "wer"

_WS_RE = re.compile(r"\s+")
_t2s_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _t2s():
    """OpenCC's traditional -> simplified converter (a requirement of the front end), or None when missing."""
    try:
        import opencc
    except ImportError:  # pragma: no cover - opencc is in requirements.txt
        return None
    return opencc.OpenCC("t2s")


def _strip_marks(text: str) -> str:
    return "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)


def language_of(text: str) -> str:
    """"zh" when ``text`` holds a Chinese character (scored by CER), else "en" (scored by WER): the front end's
    ``default_language``."""
    return default_language(text)


def normalize_for_scoring(text: str, language: str | None = None) -> str:
    """``text`` normalised for an error rate (module docstring, steps 1-4), the same for reference and transcript.

    Args:
        text: a reference text or an ASR transcript.
        language: "zh" or "en" (the reference text's, so both sides read digits the same way); None = from ``text``.

    Returns:
        The normalised text: words separated by single spaces, no punctuation, lower case, simplified Chinese.
    """
    language = language or language_of(text)
    spoken, _ = normalize_chunk(text, language)
    converter = _t2s()
    if converter is not None:
        with _t2s_lock:  # one OpenCC object shared by threads
            spoken = converter.convert(spoken)
    spoken = unicodedata.normalize("NFKC", spoken).casefold()
    return _WS_RE.sub(" ", _strip_marks(spoken)).strip()


@dataclass(frozen=True)
class ErrorRate:
    """How far a transcript is from its text.

    Attributes:
        metric: ``CER`` (Chinese) or ``WER`` (anything else).
        value: (substitutions + deletions + insertions) / reference units, >= 0 (above 1 when the transcript has
            many extra units); 1.0 for an empty transcript of a non-empty text; 0.0 when both are empty.
        reference: the normalised text.
        hypothesis: the normalised transcript.
    """

    metric: str
    value: float
    reference: str
    hypothesis: str


def error_rate(text: str, transcript: str) -> ErrorRate:
    """CER (Chinese ``text``) or WER (other) of ``transcript`` against ``text``, both normalised alike
    (``normalize_for_scoring`` in the language of ``text``).

    Raises:
        ImportError: ``jiwer`` is not installed (``pip install -r requirements-quality.txt``).
    """
    import jiwer

    language = language_of(text)
    reference = normalize_for_scoring(text, language)
    hypothesis = normalize_for_scoring(transcript, language)
    metric = CER if language == "zh" else WER
    if metric == CER:  # per character: spaces between Chinese characters carry nothing
        reference, hypothesis = reference.replace(" ", ""), hypothesis.replace(" ", "")
    if not reference:
        return ErrorRate(metric, 0.0 if not hypothesis else 1.0, reference, hypothesis)
    if not hypothesis:
        return ErrorRate(metric, 1.0, reference, hypothesis)
    value = jiwer.cer(reference, hypothesis) if metric == CER else jiwer.wer(reference, hypothesis)
    return ErrorRate(metric, float(value), reference, hypothesis)
