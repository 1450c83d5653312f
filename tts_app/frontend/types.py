"""Plain-data results of the text front end. No torch, no model: these are what the engine and the UI consume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

ReadingSource = Literal["g2p", "override"]
ReadingBasis = Literal["word", "rule", "char", "override"]


@dataclass(frozen=True)
class CharReading:
    """The reading of one Chinese character of the normalised text.

    Attributes:
        char: the character as it stands in ``PreparedText.normalized_text``.
        pinyin: its reading in TONE3 (``"zhong4"``; ``"lv4"`` for ü; neutral tone ``5``); ``""`` when no reading is
            known for the character (a warning says so).
        polyphonic: the character has more than one reading in common use (``g2p.common_readings``: readings that
            pypinyin's phrase dictionary attests, so rare readings such as 他 tuo2 do not count).
        source: ``"g2p"`` (default G2P, pypinyin with its phrase dictionary) or ``"override"`` (a ``字(pinyin)``
            annotation in the input).
        position: 0-based index of ``char`` in ``PreparedText.normalized_text``.
        candidates: every reading pypinyin knows for the character, rare ones included, TONE3, dictionary order
            (the first is the default).
        ambiguous: the reading is a guess in this context: a polyphone read by a grammar rule or on its own
            (default reading), not by a dictionary word (银行) nor by the user. The preview highlights these.
        basis: "word" (a lexicon word), "rule" (a grammar rule, named by ``rule``), "char" (read on its own) or
            "override" (the user's annotation or typed syllable).
        rule: the name of the ``polyphone_rules`` rule that decided the reading, or None.
        written: for an override, the syllable as the user wrote it (``zhòng``, ``HANG2``); else None.
    """

    char: str
    pinyin: str
    polyphonic: bool
    source: ReadingSource
    position: int
    candidates: tuple[str, ...]
    ambiguous: bool = False
    basis: ReadingBasis = "word"
    rule: str | None = None
    written: str | None = None


@dataclass(frozen=True)
class TextSegment:
    """One chunk of a request's text, synthesised in one model call.

    Attributes:
        text: the segment as rendered for the model: overridden characters replaced by a single-reading homophone, or
            by a ``{pinyin}`` token when the model supports pinyin (see ``tts_app.frontend.render``).
        source_text: the normalised text this segment covers (a slice of ``PreparedText.normalized_text``, stripped).
        pause_after_ms: silence to insert after this segment's audio, in ms (an inline ``[pause:...]`` marker's value,
            else ``default_pause_ms``; 0 after the last segment unless a marker ends the text).
    """

    text: str
    source_text: str
    pause_after_ms: int


@dataclass
class PreparedText:
    """Everything the engine needs from one request's text.

    Attributes:
        normalized_text: the input after normalisation (numbers, dates, units... spelled out; full-width letters and
            digits made half-width; annotations and pause markers removed; emoji dropped).
        segments: the chunks to synthesise, in order; ``"".join(s.source_text for s in segments)`` equals
            ``normalized_text`` up to whitespace.
        readings: one entry per Chinese character of ``normalized_text``, in order.
        warnings: problems found in the input (bad annotation, bad pause marker, dropped emoji, stripped tag...),
            each naming the position and the fix: ``messages.Notice`` s (English ``str``; ``render("zh")``).
        notation: "marks" when the user's annotations use tone marks (the preview shows readings so), else "tone3".
    """

    normalized_text: str
    segments: list[TextSegment] = field(default_factory=list)
    readings: list[CharReading] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notation: str = "tone3"


class PronunciationPreview(NamedTuple):
    """What the UI shows under the text box while the user types (``preview_pronunciation``).

    Attributes:
        readings: as ``PreparedText.readings``.
        warnings: as ``PreparedText.warnings``.
        normalized_text: as ``PreparedText.normalized_text`` (``CharReading.position`` indexes it).
        notation: as ``PreparedText.notation``.
    """

    readings: tuple[CharReading, ...]
    warnings: tuple[str, ...]
    normalized_text: str
    notation: str = "tone3"

    @property
    def text(self) -> str:
        """Alias of ``normalized_text``."""
        return self.normalized_text
