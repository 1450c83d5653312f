"""Inline markup in the user's text: pinyin annotations and pause markers.

Pinyin annotation: a parenthesised reading right after Chinese characters, ASCII or full-width parentheses, one
syllable per character, applying to the last characters before it::

    重(zhong4)   重（zhòng）   重(ZHONG4)   了(le0)   银行(yin2 hang2)

Tone numbers 1-5 (``0`` or ``5`` = neutral) or tone marks; ü as ``ü``, ``v`` or ``u:``. A parenthesis counts as an
annotation when every token in it is a Mandarin syllable, so ``下载(mp3)`` or ``苹果(apple)`` stay ordinary text.
Two more cases are annotation *attempts*, removed from what the model reads with a warning (the characters keep
their default readings), because reading them aloud would put Latin letters in the middle of a Chinese word:

* a parenthesis of Latin letters/digits that splits a word of pypinyin's phrase dictionary (``重(xyz)要``: nobody
  glosses half of 重要; ``g2p.joins_word``);
* an unclosed parenthesis right after a Chinese character, followed by pinyin with a tone (``长(chang2``): the
  syllables up to the first non-syllable are the attempt.

A reading the character does not have (not among pypinyin's readings of it, e.g. ``银行(yin2)``, which annotates 行)
is not applied: the character keeps its default reading and a warning names the valid readings (and the character
the reading belongs to, when one before it has it). A character pypinyin has no reading for takes any reading.

Pause marker: ``[pause:500ms]``, ``[pause:1.5s]`` (also ``[pause]`` = the default gap, full-width brackets, ``秒`` /
``毫秒``). A pause marker ends a segment; the silence after that segment is the marker's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tts_app.errors import InputError
from tts_app.frontend.g2p import TONE_MARK_CHARS, classify_pinyin_token, is_hanzi, joins_word

MAX_PAUSE_MS = 10_000  # a longer pause is clamped (with a warning); 10 s is far beyond any prosodic pause

_PAREN_RE = re.compile(r"[(（]([^()（）\n]{1,80})[)）]")
_PAUSE_RE = re.compile(r"[\[［]\s*pause\b\s*(?:[:：=]\s*([^\]］\[［\n]*?))?\s*[\]］]", re.IGNORECASE)
_PAUSE_START_RE = re.compile(r"[\[［]\s*pause\b", re.IGNORECASE)
_PAUSE_VALUE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|sec|秒|毫秒)$", re.IGNORECASE)
# What a pinyin attempt is written with: Latin letters, digits, ü, tone marks, "u:" (and spaces between syllables).
_PINYIN_TOKEN_RE = re.compile(f"[A-Za-z0-9:üÜ{TONE_MARK_CHARS}]+")
_PINYIN_LIKE_RE = re.compile(f"[A-Za-z0-9:üÜ{TONE_MARK_CHARS} ]+")
MAX_SYLLABLE_CHARS = 7  # "zhuang4": the longest pinyin syllable (6 letters) plus a tone digit


@dataclass(frozen=True)
class TextPiece:
    """Plain text between markup. ``start`` is its index in the input text."""

    text: str
    start: int


@dataclass(frozen=True)
class Annotation:
    """A pinyin annotation. ``tokens``: the written syllables; ``parsed``: per token ``(kind, reading_or_problem)``
    from ``classify_pinyin_token`` (kind ``"not_pinyin"`` only in an attempt); ``start``/``end``: the span of the
    parenthesis in the input text; ``inside_word``: it splits a word of pypinyin's phrase dictionary (then it is an
    annotation even when a token is not pinyin); ``closed``: False for ``长(chang2`` with no closing parenthesis."""

    raw: str
    tokens: tuple[str, ...]
    parsed: tuple[tuple[str, str], ...]
    start: int
    end: int
    inside_word: bool = False
    closed: bool = True


@dataclass(frozen=True)
class PauseMarker:
    """A pause marker. ``pause_ms`` is None when the marker is ``[pause]`` or unreadable (``problem`` says which);
    ``start`` is its index in the input text."""

    raw: str
    pause_ms: int | None
    problem: str | None
    start: int


MarkupItem = TextPiece | Annotation | PauseMarker


def parse_pause_value(value: str | None) -> tuple[int | None, str | None]:
    """``"500ms"`` -> ``(500, None)``, ``"1.5s"`` -> ``(1500, None)``; ``None``/"" -> ``(None, None)`` (default gap);
    unreadable -> ``(None, problem)``; above ``MAX_PAUSE_MS`` -> ``(MAX_PAUSE_MS, problem)``."""
    if value is None or not value.strip():
        return None, None
    m = _PAUSE_VALUE_RE.match(value.strip())
    if not m:
        return None, (f"pause length {value.strip()!r} is not readable; write a number with a unit, e.g. "
                      "[pause:500ms] or [pause:1.5s]")
    number = float(m.group(1))
    unit = m.group(2).lower()
    pause_ms = int(round(number if unit in ("ms", "毫秒") else number * 1000.0))
    if pause_ms > MAX_PAUSE_MS:
        return MAX_PAUSE_MS, (f"pause of {pause_ms} ms is longer than the {MAX_PAUSE_MS} ms maximum; "
                              f"using {MAX_PAUSE_MS} ms")
    return pause_ms, None


def _annotation(match: re.Match, text: str) -> Annotation | None:
    tokens = tuple(match.group(1).split())
    if not tokens:
        return None
    parsed = tuple(classify_pinyin_token(t) for t in tokens)
    inside_word = (bool(_PINYIN_LIKE_RE.fullmatch(match.group(1))) and max(map(len, tokens)) <= MAX_SYLLABLE_CHARS
                   and joins_word(text[:match.start()], text[match.end():]))
    if inside_word or all(kind in ("ok", "bad_tone", "toneless") for kind, _ in parsed):
        # All syllables; toneless ones may be English ("(a)", "(an)"): the caller decides (it knows whether a
        # Chinese character precedes) and keeps those as text unless the parenthesis splits a word.
        return Annotation(match.group(0), tokens, parsed, match.start(), match.end(), inside_word)
    return None


def _unclosed_annotation(text: str, start: int) -> Annotation | None:
    """``长(chang2 ...`` with the parenthesis at ``start`` never closed: the syllables after it, up to the first
    token that is not one, when a Chinese character precedes and at least one syllable has a tone."""
    before = text[:start].rstrip(" ")
    if not before or not is_hanzi(before[-1]):
        return None
    tokens, parsed, end = [], [], start + 1
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] == " ":
            pos += 1
        m = _PINYIN_TOKEN_RE.match(text, pos)
        if not m:
            break
        kind, value = classify_pinyin_token(m.group())
        if kind == "not_pinyin":
            break
        tokens.append(m.group())
        parsed.append((kind, value))
        pos = end = m.end()
    if not any(kind in ("ok", "bad_tone") for kind, _ in parsed):
        return None
    return Annotation(text[start:end], tuple(tokens), tuple(parsed), start, end, closed=False)


def parse_markup(text: str) -> list[MarkupItem]:
    """Cut ``text`` into plain-text pieces, pinyin annotations and pause markers, in order.

    Raises:
        InputError: a pause marker is opened but never closed (``[pause:500ms`` with no ``]``): its length cannot be
            known and its text must not be spoken.
    """
    items: list[MarkupItem] = []
    spans: list[tuple[int, int, MarkupItem]] = []
    for m in _PAUSE_RE.finditer(text):
        pause_ms, problem = parse_pause_value(m.group(1))
        spans.append((m.start(), m.end(), PauseMarker(m.group(0), pause_ms, problem, m.start())))
    covered = [(s, e) for s, e, _ in spans]
    for m in _PAUSE_START_RE.finditer(text):
        if not any(s <= m.start() < e for s, e in covered):
            snippet = text[m.start():m.start() + 20]
            raise InputError(f"pause marker at position {m.start()} is not closed: {snippet!r}; write it as "
                             "[pause:500ms] or [pause:1.5s]")
    paren_starts = set()
    for m in _PAREN_RE.finditer(text):
        paren_starts.add(m.start())
        if any(s < m.end() and m.start() < e for s, e in covered):
            continue
        ann = _annotation(m, text)
        if ann is not None:
            spans.append((m.start(), m.end(), ann))
    for m in re.finditer("[(（]", text):
        if m.start() in paren_starts or any(s <= m.start() < e for s, e, _ in spans):
            continue
        ann = _unclosed_annotation(text, m.start())
        if ann is not None:
            spans.append((ann.start, ann.end, ann))
    spans.sort(key=lambda span: span[0])
    pos = 0
    for start, end, item in spans:
        if start > pos:
            items.append(TextPiece(text[pos:start], pos))
        items.append(item)
        pos = end
    if pos < len(text):
        items.append(TextPiece(text[pos:], pos))
    return items
