"""Text normalisation: full-width to half-width, emoji removal, whitespace, and wetext (WeTextProcessing) per
language run.

wetext ships compiled zh and en text-normalisation FSTs (numbers, dates, times, percentages, currency, units, phone
numbers). Its ``lang="auto"`` picks ONE language for the whole string, so "I paid $5 给他" would be read all in
Chinese; instead the text is cut into language runs (Chinese characters vs Latin letters, with digits and symbols
joining a neighbour, see ``language_runs``) and each run goes through its own normaliser.
"""

from __future__ import annotations

import itertools
import re
import threading
import unicodedata
from functools import lru_cache

from tts_app.frontend.g2p import HANZI_CLASS
from tts_app.frontend.messages import Notice
from tts_app.frontend.wetext_quirks import YUAN_MASK, after_wetext, before_language_runs, before_wetext

# Full-width punctuation that Chinese text uses as its own punctuation and that must stay as it is
# (segmentation reads it; half-width would look like English to wetext). Everything else in U+FF01-U+FF5E
# (letters, digits, %, $, +, ...) becomes its ASCII twin so the normalisers read it.
_KEEP_FULL_WIDTH = set("，！？；：（）［］｛｝｟｠～")

# Emoji and pictographs a TTS model cannot speak. Ranges from Unicode's emoji blocks: Misc Symbols and
# Pictographs .. Symbols and Pictographs Extended-A, Misc Symbols, Dingbats, regional indicators, plus the
# joiners/selectors that glue emoji sequences together. Non-emoji symbols (℃, %, °) are kept for the normaliser.
_EMOJI_RE = re.compile(
    "[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF\uFE0E\uFE0F\u200D\u20E3"
    "\U000E0020-\U000E007F]"
)
_WS_RE = re.compile(r"\s+")
# A number with a unit in Latin letters ("5kg", "100km/h", "3GB").
_NUMBER_WITH_UNIT_RE = re.compile(r"(?<![A-Za-z\d.])\d+(?:\.\d+)?[A-Za-z]{1,4}(?:/[A-Za-z]{1,3})?(?![A-Za-z\d])")
# Two-character symbols the normalisers only know as one character.
_SYMBOLS = {"°C": "℃", "°F": "℉"}
_HANZI_RE = re.compile(f"[{HANZI_CLASS}]")
_LATIN_RE = re.compile(r"[A-Za-z\u00C0-\u024F]")


def to_half_width(text: str) -> str:
    """Full-width ASCII letters, digits and symbols (U+FF01-U+FF5E) and the ideographic space become ASCII, and the
    full-width signs U+FFE0-U+FFE6 (￥ ￡ ￠ ...) their Unicode compatibility twins (NFKC: ￥ -> ¥), which both of
    wetext's grammars know; Chinese punctuation (，！？；：（）...) stays full-width, except ``：`` between digits (a
    clock time), and the minus sign U+2212 before a digit ``-``. ``°C``/``°F`` become ``℃``/``℉``, the form
    wetext's zh grammar reads."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\u3000":
            out.append(" ")
        elif 0xFF01 <= code <= 0xFF5E and ch not in _KEEP_FULL_WIDTH:
            out.append(chr(code - 0xFEE0))
        elif 0xFFE0 <= code <= 0xFFE6:
            out.append(unicodedata.normalize("NFKC", ch))
        else:
            out.append(ch)
    text = re.sub(r"(?<=\d)：(?=\d)", ":", "".join(out))
    text = re.sub("\u2212(?=\\d)", "-", text)  # the minus sign U+2212 before a number: wetext knows only "-"
    for written, symbol in _SYMBOLS.items():
        text = text.replace(written, symbol)
    return text


def strip_emoji(text: str) -> tuple[str, str]:
    """Remove emoji (see ``_EMOJI_RE``). Returns ``(text_without_emoji, removed_characters)``."""
    removed = "".join(_EMOJI_RE.findall(text))
    if not removed:
        return text, ""

    def gap(m: re.Match) -> str:  # "hello😀world" -> "hello world", "我😀很好" -> "我很好"
        before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 1]
        return " " if _is_alnum_latin(before) and _is_alnum_latin(after) else ""

    return re.sub(f"(?:{_EMOJI_RE.pattern})+", gap, text), removed


def _is_alnum_latin(char: str) -> bool:
    return bool(char) and char.isalnum() and not _HANZI_RE.match(char)


def collapse_whitespace(text: str) -> str:
    """Runs of whitespace become one space, or one newline when the run holds a line break (a newline is a sentence
    boundary for segmentation)."""
    return _WS_RE.sub(lambda m: "\n" if ("\n" in m.group() or "\r" in m.group()) else " ", text)


def is_speakable(text: str) -> bool:
    """True when ``text`` holds at least one letter, digit or Chinese character (Unicode categories L* and N*)."""
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)


_CHINESE_CURRENCY = frozenset("¥￥")


def default_language(text: str) -> str:
    """The language of a text's runs that have no letters: "zh" when ``text`` holds a Chinese character, or holds no
    Latin letter but a yuan sign (``￥12`` alone is 十二元; with a Latin letter nearby, "It costs ¥12", it is yen and
    English), else "en"."""
    if _HANZI_RE.search(text) or (not _LATIN_RE.search(text) and any(ch in _CHINESE_CURRENCY for ch in text)):
        return "zh"
    return "en"


def language_runs(text: str, default_lang: str) -> list[tuple[str, str]]:
    """Cut ``text`` into ``[(lang, run_text), ...]`` with lang "zh" or "en"; the runs concatenate to ``text``.

    Chinese characters are "zh", Latin letters "en"; everything else (digits, spaces, symbols, punctuation) joins a
    neighbour: the same language when both neighbours agree; between an English and a Chinese run, what follows the
    last space (touching the right run) goes right and the rest stays left, and with no space all of it stays left
    ("I paid $5 给他" and "下载mp3文件" read the number in English, "iPhone 15发布" reads 15 in Chinese). A number
    with a Latin-letter unit next to Chinese text is Chinese ("跑了5km"). Text with no letters at all takes
    ``default_lang``.
    """
    kinds = []
    for ch in text:
        kinds.append("zh" if _HANZI_RE.match(ch) else "en" if _LATIN_RE.match(ch) else None)
    strong = [i for i, k in enumerate(kinds) if k is not None]
    if not strong:
        return [(default_lang, text)] if text else []
    langs: list[str] = list(kinds)  # type: ignore[arg-type]
    # Neutral prefix/suffix follow the first/last strong character.
    for i in range(strong[0]):
        langs[i] = kinds[strong[0]]
    for i in range(strong[-1] + 1, len(text)):
        langs[i] = kinds[strong[-1]]
    for left, right in zip(strong, strong[1:]):
        if right == left + 1:
            continue
        lk, rk = kinds[left], kinds[right]
        if lk == rk:
            for i in range(left + 1, right):
                langs[i] = lk
            continue
        gap = text[left + 1:right]
        space = gap.rfind(" ")
        # What touches the right run (after the last space) goes right; the rest, and a gap with no space at
        # all, stays with the left run ("mp3", "COVID-19", "第3").
        split = space if space >= 0 else len(gap)
        for i in range(left + 1, right):
            langs[i] = lk if i - (left + 1) < split else rk
    # A number with a Latin-letter unit next to Chinese text reads in Chinese: "跑了5km" -> 跑了五公里,
    # "5kg大米" -> 五千克大米 (wetext's zh grammar knows the units).
    for m in _NUMBER_WITH_UNIT_RE.finditer(text):
        before = text[:m.start()].rstrip(" ")[-1:]
        after = text[m.end():].lstrip(" ")[:1]
        if (before and _HANZI_RE.match(before)) or (after and _HANZI_RE.match(after)):
            for i in range(m.start(), m.end()):
                langs[i] = "zh"
    runs, start = [], 0
    for lang, group in itertools.groupby(langs):
        end = start + len(list(group))
        runs.append((lang, text[start:end]))
        start = end
    return runs


_WETEXT_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _normalizer(lang: str):
    from wetext import Normalizer  # loads the FSTs (about 1 s), so only on first use

    return Normalizer(lang=lang, operator="tn")


# Sentence ends: each sentence is normalised on its own, so the per-sentence cache below makes the live preview
# re-normalise only the sentence being typed. (No number, date or unit spans a sentence end.) Not at ".", which
# also ends abbreviations that wetext expands from their context ("Dr.", "St.").
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[。！？；!?;])")


@lru_cache(maxsize=4096)
def wetext_normalize(text: str, lang: str) -> tuple[str, Notice | None]:
    """Run wetext's ``lang`` normaliser on one language run, keeping its leading/trailing whitespace (wetext strips
    it).

    Returns:
        ``(normalised, problem)``: ``problem`` is None, or a sentence saying wetext failed on this run (it raises
        AssertionError on some inputs, e.g. en "2024年"); the run is then returned unchanged.

    Known wetext mistakes with numbers are worked around before and after the call (``wetext_quirks``).
    """
    core = text.strip()
    if not core or (lang == "zh" and not any(ch.isdigit() for ch in core)):
        return text, None  # wetext's zh TN changes nothing without a digit (its own should_normalize)
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    prepared, state = before_wetext(core, lang)
    try:
        if lang == "zh":
            out = "".join(piece if not is_window else _run_wetext(piece, lang)
                          for piece, is_window in _zh_windows(prepared))
        else:
            out = _run_wetext(prepared, lang)
    except (AssertionError, RuntimeError, ValueError, IndexError) as exc:  # wetext's failure modes on odd input
        return text, Notice("wetext_failed", lang=lang, text=core, error=type(exc).__name__)
    return lead + after_wetext(out, lang, state) + trail, None


def _run_wetext(text: str, lang: str) -> str:
    """wetext on ``text``, keeping its leading/trailing whitespace."""
    core = text.strip()
    if not core:
        return text
    with _WETEXT_LOCK:  # the engine and the UI preview call in from different threads; wetext is not
        out = _normalizer(lang).normalize(core)  # documented as thread-safe
    # wetext escapes quotes and backslashes in its output (its token serialisation leaks): undo it.
    out = re.sub(r'\\(["\\])', r"\1", out)
    return text[: len(text) - len(text.lstrip())] + out + text[len(text.rstrip()):]


# What a number is written with in Chinese text (digits and the signs and units around them), and how many characters
# of context each side a number's window keeps: wetext's zh rules look at the characters next to a number (年/月/日,
# 点/分, 第/名, 个, 元, 年来...), never further, and never across a clause mark (，。！？；、 brackets, quotes), where a
# window therefore stops. wetext's time grows with the length of its input (measured ~0.12 ms per character on wetext
# 0.1.8, on top of ~0.5 ms per call), so it reads only these windows, not the whole run. 2 characters: measured on the
# 6,000 sentences with digits of the CPP set (Wikipedia), every output equals that of 3 characters (1 character
# differs on 17 of 1,500: 2007年来 read as a year needs 年来).
_ZH_NUMBER_RE = re.compile(r"[0-9A-Za-z.,:%‰/+\-×·~～°℃℉$¥￥€£\ue000\ue001]*\d[0-9A-Za-z.,:%‰/+\-×·~～°℃℉$¥￥€£\ue000\ue001]*")
ZH_WINDOW_CONTEXT_CHARS = 2
_CLAUSE_MARKS = frozenset("，。！？；、!?;（）()“”‘’「」『』《》〈〉【】")


def _zh_windows(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into pieces, each flagged True when wetext must read it (a number with its context)."""
    spans: list[list[int]] = []
    for m in _ZH_NUMBER_RE.finditer(text):
        start = m.start()
        while start > max(0, m.start() - ZH_WINDOW_CONTEXT_CHARS) and text[start - 1] not in _CLAUSE_MARKS:
            start -= 1
        end = m.end()
        while end < min(len(text), m.end() + ZH_WINDOW_CONTEXT_CHARS) and text[end] not in _CLAUSE_MARKS:
            end += 1
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    pieces, pos = [], 0
    for start, end in spans:
        if start > pos:
            pieces.append((text[pos:start], False))
        pieces.append((text[start:end], True))
        pos = end
    if pos < len(text):
        pieces.append((text[pos:], False))
    return pieces


def normalize_chunk(text: str, default_lang: str) -> tuple[str, list[Notice]]:
    """Normalise one chunk of plain text (no annotations, no pause markers).

    Steps: full-width to half-width, emoji removed, whitespace collapsed, the readings wetext has no rule for
    (``wetext_quirks.before_language_runs``: digit strings, scores, ranges, units, comparison signs...), then wetext
    per line and per language run.

    Returns:
        ``(normalised_text, problems)``: problems are ``Notice`` s for the warnings list (emoji removed, a run wetext
        could not read).
    """
    problems: list[Notice] = []
    text = to_half_width(text)
    text, removed = strip_emoji(text)
    if removed:
        problems.append(Notice("emoji_removed", count=len(removed), chars=removed))
    text = collapse_whitespace(text)
    text = before_language_runs(text)
    lines = []
    for line in text.split("\n"):
        parts = []
        for lang, run in language_runs(line, default_lang):
            for sentence in _SENTENCE_SPLIT_RE.split(run):
                out, problem = wetext_normalize(sentence, lang)
                if problem:
                    problems.append(problem)
                parts.append(out)
        lines.append("".join(parts))
    return "\n".join(lines).replace(YUAN_MASK, ""), problems
