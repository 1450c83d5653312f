"""Inline markup in the user's text: pinyin in every syntax users bring, pause markers, control tags, scene breaks.

Pinyin, all validated (a reading the character does not have is not applied, with a warning naming the valid ones):

* **Annotation** ``字(pinyin)`` after Chinese characters, ASCII or full-width parentheses, one syllable per character,
  applying to the last characters before it: ``重(zhong4)`` ``重（zhòng）`` ``重(ZHONG4)`` ``了(le0)``
  ``银行(yin2 hang2)``. Tone digits 1-5 (``0`` or ``5`` = neutral), tone marks, or no tone at all = the neutral
  tone, as standard pinyin writes it (``东西(dōng xi)``, ``得(de)``); ü as ``ü``, ``v`` or ``u:``.
* **IndexTTS 2.5** ``<字|PINYIN>``: the characters stay, the syllables (one per character, any of the spellings
  above) are their readings: ``<行|HANG2>``, ``<银行|YIN2 HANG2>``.
* **IndexTTS 2 inline pinyin**: a syllable with a tone digit written *instead of* a character, upper or lower case,
  touching a Chinese character or upper case: ``他做DE5很好``. Single-letter syllables (a, e, o) are never taken
  (``A4纸``). The character becomes a stand-in that reads so (``g2p.stand_in``).
* **A whole line of pinyin** (every word a syllable, at least two, at least half of them with a tone):
  ``wo3 men5 zou3 ba5`` / ``nǐ hǎo``. Each syllable becomes a stand-in character.

What is kept as text: a parenthesis whose tokens are not all syllables (``下载(mp3)``, ``苹果(apple)``), or
upper-case acronyms (``人工智能(AI)``): silent for acronyms and capitalised words, with a warning for a lower-case
group after a Chinese character ("probably a typo", ``重(zhogn4)``). Removed with a warning (their letters would be
read in the middle of a Chinese word): a parenthesis of Latin letters that splits a word (``重(xyz)要``,
``g2p.joins_word``), and an unclosed parenthesis followed by pinyin with a tone (``长(chang2``).

Pause marker ``[pause:500ms]`` / ``[pause:1.5s]`` / ``[pause]`` (full-width brackets, 秒, 毫秒 too): ends a segment,
the silence after it is its length. Scene break: a line of only ``***``, ``---``, ``* * *``, ``———`` (3+ marks) is
a pause of ``FrontendConfig.scene_break_pause_ms``.

Control tags ``[laugh]``, ``[uv_break]``, ``<|endoftext|>`` and Dia's ``(laughs)``: see ``ControlTag``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tts_app.config import REQUEST_LIMITS
from tts_app.errors import InputError
from tts_app.frontend.g2p import HANZI_CLASS, TONE_MARK_CHARS, classify_pinyin_token, is_hanzi, joins_word
from tts_app.frontend.messages import Notice
from tts_app.frontend.wetext_quirks import ZH_UNITS

MAX_PAUSE_MS = REQUEST_LIMITS.max_pause_ms  # a longer pause is clamped (with a warning)

_PAREN_RE = re.compile(r"[(（]([^()（）\n]{1,80})[)）]")
_PAUSE_RE = re.compile(r"[\[［]\s*pause\b\s*(?:[:：=]\s*([^\]］\[［\n]*?))?\s*[\]］]", re.IGNORECASE)
_PAUSE_START_RE = re.compile(r"[\[［]\s*pause\b", re.IGNORECASE)
_PAUSE_VALUE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|sec|秒|毫秒)$", re.IGNORECASE)
_ANGLE_RE = re.compile(r"<([^<>|\n]{1,20})\|([^<>|\n]{1,120})>")
# [laugh], [uv_break], [S1]; <|endoftext|>; a Dia-style parenthesised tag is matched only when the model declares it.
_BRACKET_TAG_RE = re.compile(r"[\[［]\s*([A-Za-z][A-Za-z0-9_ \-]{0,30}?)\s*[\]］]|<\|([^|<>\n]{1,40})\|>")
_SCENE_BREAK_RE = re.compile(r"(?m)^[ \t]*(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:—[ \t]*){2,}|(?:~[ \t]*){3,})[ \t]*$")
_INLINE_PINYIN_RE = re.compile(r"(?<![A-Za-z0-9])([A-Za-z]{2,6})([0-5])(?![A-Za-z0-9])")
_HANZI_RE = re.compile(f"[{HANZI_CLASS}]")
# What a pinyin attempt is written with: Latin letters, digits, ü, tone marks, "u:" (and spaces between syllables).
_PINYIN_TOKEN_RE = re.compile(f"[A-Za-z0-9:üÜ{TONE_MARK_CHARS}]+")
_PINYIN_LIKE_RE = re.compile(f"[A-Za-z0-9:üÜ{TONE_MARK_CHARS} ]+")
_LINE_WORD_RE = re.compile(f"[A-Za-z0-9:üÜ{TONE_MARK_CHARS}]+")
MAX_SYLLABLE_CHARS = 7  # "zhuang4": the longest pinyin syllable (6 letters) plus a tone digit


@dataclass(frozen=True)
class TextPiece:
    """Plain text between markup. ``start`` is its index in the input text."""

    text: str
    start: int


@dataclass(frozen=True)
class Annotation:
    """Readings for characters. ``tokens``: the written syllables; ``parsed``: per token ``(kind, reading or
    problem)`` from ``classify_pinyin_token``; ``start``/``end``: the span in the input text.

    ``chars`` is None for ``字(pinyin)`` (the readings apply to the characters before it, already in the text) and
    the characters for ``<字|PINYIN>`` (they are emitted with it). ``inside_word``: the parenthesis splits a
    phrase of the lexicon (then it is an annotation even when a token is not pinyin); ``closed``: False for
    ``长(chang2`` with no closing parenthesis; ``kind``: "paren" (``字(pinyin)``), "angle" (``<字|PINYIN>``) or
    "typo" (a lower-case group that is not pinyin after a Chinese character: kept as text, with a warning)."""

    raw: str
    tokens: tuple[str, ...]
    parsed: tuple[tuple[str, object], ...]
    start: int
    end: int
    inside_word: bool = False
    closed: bool = True
    chars: str | None = None
    kind: str = "paren"


@dataclass(frozen=True)
class InlinePinyin:
    """A syllable written instead of a character (IndexTTS 2 ``DE5``, or one word of a whole line of pinyin).
    ``reading``: TONE3."""

    raw: str
    reading: str
    start: int
    end: int


@dataclass(frozen=True)
class PauseMarker:
    """A pause marker. ``pause_ms`` is None when the marker is ``[pause]`` or unreadable (``problem`` says which);
    ``start`` is its index in the input text; ``scene_break``: a line of ``***`` / ``---``."""

    raw: str
    pause_ms: int | None
    problem: Notice | None
    start: int
    scene_break: bool = False


@dataclass(frozen=True)
class ControlTag:
    """A bracketed control tag: ``[laugh]``, ``<|endoftext|>``, or (only when the model declares it) Dia's
    ``(laughs)``. ``name``: the words inside, lower case, single-spaced (``"laugh"``, ``"clears throat"``). It is
    passed to the model in the model's own syntax when ``ModelFacts.control_tags`` has a tag of that name, else
    removed with a warning."""

    raw: str
    name: str
    start: int
    end: int


MarkupItem = TextPiece | Annotation | InlinePinyin | PauseMarker | ControlTag


def tag_name(tag: str) -> str:
    """``"[Laugh]"`` / ``"(clears  throat)"`` / ``"<|laugh|>"`` -> ``"laugh"`` / ``"clears throat"``."""
    return " ".join(tag.strip().strip("[]［］()（）<>|").lower().split())


def parse_pause_value(value: str | None) -> tuple[int | None, Notice | None]:
    """``"500ms"`` -> ``(500, None)``, ``"1.5s"`` -> ``(1500, None)``; ``None``/"" -> ``(None, None)`` (default gap);
    unreadable -> ``(None, problem)``; above ``MAX_PAUSE_MS`` -> ``(MAX_PAUSE_MS, problem)``."""
    if value is None or not value.strip():
        return None, None
    m = _PAUSE_VALUE_RE.match(value.strip())
    if not m:
        return None, Notice("pause_unreadable", value=value.strip())
    number = float(m.group(1))
    unit = m.group(2).lower()
    pause_ms = int(round(number if unit in ("ms", "毫秒") else number * 1000.0))
    if pause_ms > MAX_PAUSE_MS:
        return MAX_PAUSE_MS, Notice("pause_too_long", pause_ms=pause_ms, max_ms=MAX_PAUSE_MS)
    return pause_ms, None


def _is_acronym(token: str) -> bool:
    """An upper-case or capitalised word (``AI``, ``GPU``, ``Apple``): a gloss, never pinyin without a tone."""
    letters = [c for c in token if c.isalpha()]
    return len(letters) >= 2 and letters[0].isupper() and not any(c.isdigit() for c in token)


def _annotation(match: re.Match, text: str) -> Annotation | None:
    tokens = tuple(match.group(1).split())
    if not tokens:
        return None
    parsed = tuple(classify_pinyin_token(t) for t in tokens)
    inside_word = (bool(_PINYIN_LIKE_RE.fullmatch(match.group(1))) and max(map(len, tokens)) <= MAX_SYLLABLE_CHARS
                   and joins_word(text[:match.start()], text[match.end():]))
    kinds = [kind for kind, _ in parsed]
    if not inside_word and any(_is_acronym(t) and k == "toneless" for t, k in zip(tokens, kinds)):
        return None  # 人工智能(AI): a gloss
    if inside_word or all(kind in ("ok", "bad_tone", "toneless") for kind in kinds):
        return Annotation(match.group(0), tokens, parsed, match.start(), match.end(), inside_word)
    if _looks_like_pinyin_typo(tokens, text[:match.start()]):
        # Lower-case Latin after a Chinese character with a tone-like shape: kept as text, with a warning.
        return Annotation(match.group(0), tokens, parsed, match.start(), match.end(), kind="typo")
    return None


# Lower-case glosses after a Chinese word that are no pinyin attempt, so they stay silent: unit symbols
# (长度(mm), 重量(kg): the SI symbols of GB 3100-1993 with their prefixes, and the symbols of
# ``wetext_quirks.ZH_UNITS``), list labels (a)-(z), and Roman numerals (i)-(xii).
_UNIT_SYMBOLS = frozenset(
    [p + u for p in ("", "k", "c", "m", "u", "μ", "n", "d") for u in ("m", "g", "l", "s", "t", "w", "v", "a", "b")]
    + "min h hz khz mhz ghz pa kpa mpa db kwh mah rpm fps bps kbps mbps px pt dpi ppi ms ns".split()
    + [u.lower() for u in ZH_UNITS])
_ROMAN_NUMERALS = frozenset("i ii iii iv v vi vii viii ix x xi xii".split())


def _is_silent_gloss(token: str) -> bool:
    token = token.lower()
    return len(token) == 1 or token in _ROMAN_NUMERALS or token in _UNIT_SYMBOLS


def _looks_like_pinyin_typo(tokens: tuple[str, ...], before: str) -> bool:
    """Lower-case tokens of Latin letters (with an optional tone digit 0-5) right after a Chinese character, at
    most four: ``重(zhogn4)``, ``苹果(apple)``, ``长(zzz)``, ``长(qqq)`` (an override attempt that names no syllable,
    vowels or not). Not ``mp3`` (a tone digit after letters with no vowel), and not a unit symbol, list label or
    Roman numeral (``长度(mm)``, ``(a)``, ``(iv)``: ``_is_silent_gloss``)."""
    before = before.rstrip(" ")
    if not before or not is_hanzi(before[-1]):
        return False
    shaped = all(re.fullmatch(r"[a-zü:]{1,6}[0-5]?", t) for t in tokens)
    # A tone digit after letters with no vowel is a name, not a syllable: mp3, h5.
    toned_names = any(t[-1].isdigit() and not re.search("[aeiouüv]", t) for t in tokens)
    return shaped and len(tokens) <= 4 and not toned_names and not all(_is_silent_gloss(t) for t in tokens)


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


def _angle_annotation(match: re.Match) -> Annotation:
    tokens = tuple(match.group(2).split())
    parsed = tuple(classify_pinyin_token(t) for t in tokens)
    return Annotation(match.group(0), tokens, parsed, match.start(), match.end(), chars=match.group(1).strip(),
                      kind="angle")


def _pinyin_line_spans(text: str) -> list[tuple[int, int, str, str]]:
    """Syllables of the lines that are all pinyin: ``[(start, end, written, TONE3)]``."""
    out = []
    pos = 0
    for line in text.split("\n"):
        words = list(_LINE_WORD_RE.finditer(line))
        if len(words) >= 2 and not _HANZI_RE.search(line):
            parsed = [classify_pinyin_token(w.group()) for w in words]
            toned = sum(1 for kind, _ in parsed if kind == "ok")
            letters_only = all(not w.group()[:-1].isdigit() for w in words)
            if (letters_only and all(kind in ("ok", "toneless") for kind, _ in parsed) and toned * 2 >= len(words)
                    and not any(len(w.group().rstrip("012345")) == 1 and kind == "toneless"
                                for w, (kind, _) in zip(words, parsed))):
                out.extend((pos + w.start(), pos + w.end(), w.group(), value)
                           for w, (kind, value) in zip(words, parsed))
        pos += len(line) + 1
    return out


def _inline_pinyin_spans(text: str) -> list[tuple[int, int, str, str]]:
    """IndexTTS 2 inline pinyin: ``[(start, end, written, TONE3)]``."""
    out = []
    for m in _INLINE_PINYIN_RE.finditer(text):
        kind, value = classify_pinyin_token(m.group())
        if kind != "ok":
            continue
        before = text[m.start() - 1:m.start()]
        after = text[m.end():m.end() + 1]
        touches_hanzi = bool(_HANZI_RE.match(before) or _HANZI_RE.match(after))
        if touches_hanzi or m.group(1).isupper():
            out.append((m.start(), m.end(), m.group(), value))
    return out


def parse_markup(text: str, control_tag_names: frozenset[str] = frozenset()) -> list[MarkupItem]:
    """Cut ``text`` into plain-text pieces and markup items, in order.

    Args:
        text: the user's text.
        control_tag_names: names (``tag_name``) of the parenthesised tags the model declares (Dia's ``(laughs)``);
            bracketed ``[...]`` and ``<|...|>`` tags are always items.

    Raises:
        InputError: a pause marker is opened but never closed (``[pause:500ms`` with no ``]``): its length cannot be
            known and its text must not be spoken.
    """
    spans: list[tuple[int, int, MarkupItem]] = []

    def free(start: int, end: int) -> bool:
        return not any(s < end and start < e for s, e, _ in spans)

    for m in _SCENE_BREAK_RE.finditer(text):
        spans.append((m.start(), m.end(), PauseMarker(m.group(0).strip(), None, None, m.start(), scene_break=True)))
    for m in _PAUSE_RE.finditer(text):
        pause_ms, problem = parse_pause_value(m.group(1))
        spans.append((m.start(), m.end(), PauseMarker(m.group(0), pause_ms, problem, m.start())))
    for m in _PAUSE_START_RE.finditer(text):
        if free(m.start(), m.start() + 1):
            raise InputError(Notice("pause_not_closed", start=m.start(), snippet=text[m.start():m.start() + 20]))
    for m in _ANGLE_RE.finditer(text):
        if free(m.start(), m.end()):
            spans.append((m.start(), m.end(), _angle_annotation(m)))
    for m in _BRACKET_TAG_RE.finditer(text):
        if free(m.start(), m.end()):
            spans.append((m.start(), m.end(), ControlTag(m.group(0), tag_name(m.group(0)), m.start(), m.end())))
    paren_starts = set()
    for m in _PAREN_RE.finditer(text):
        paren_starts.add(m.start())
        if not free(m.start(), m.end()):
            continue
        if control_tag_names and tag_name(m.group(0)) in control_tag_names:
            spans.append((m.start(), m.end(), ControlTag(m.group(0), tag_name(m.group(0)), m.start(), m.end())))
            continue
        ann = _annotation(m, text)
        if ann is not None:
            spans.append((m.start(), m.end(), ann))
    for m in re.finditer("[(（]", text):
        if m.start() in paren_starts or not free(m.start(), m.start() + 1):
            continue
        ann = _unclosed_annotation(text, m.start())
        if ann is not None:
            spans.append((ann.start, ann.end, ann))
    for start, end, written, reading in _pinyin_line_spans(text) + _inline_pinyin_spans(text):
        if free(start, end):
            spans.append((start, end, InlinePinyin(written, reading, start, end)))
    spans.sort(key=lambda span: span[0])
    items: list[MarkupItem] = []
    pos = 0
    for start, end, item in spans:
        if start > pos:
            items.append(TextPiece(text[pos:start], pos))
        items.append(item)
        pos = end
    if pos < len(text):
        items.append(TextPiece(text[pos:], pos))
    return _drop_spaces_between_line_syllables(items)


def _drop_spaces_between_line_syllables(items: list[MarkupItem]) -> list[MarkupItem]:
    """``wo3 men5 zou3``: the spaces between syllables that became characters go (Chinese has none)."""
    out: list[MarkupItem] = []
    for k, item in enumerate(items):
        if (isinstance(item, TextPiece) and not item.text.strip(" ") and 0 < k < len(items) - 1
                and isinstance(items[k - 1], InlinePinyin) and isinstance(items[k + 1], InlinePinyin)):
            continue
        out.append(item)
    return out
