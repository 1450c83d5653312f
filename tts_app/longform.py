"""Long-form text: chapters and readable output names. Pure Python (no numpy, no torch).

Chapters (``split_chapters``): a line starting with ``#`` (Markdown heading: ``# 第一章 出发``) starts a chapter
whose title is that line without the ``#`` marks; without any heading, two or more blank lines in a row separate
chapters (one blank line is only a paragraph). A chapter's title is spoken as its first sentence. The engine puts
``SynthesisParams.chapter_pause_ms`` of silence after each chapter and reports where each one lies in the audio;
outputs then write one file per chapter too.

Names (``name_from_text``): the first words of a text, as a safe file name (``0003_今天天气很好``), so outputs can be
told apart in a folder or ZIP without opening them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(.*?)\s*#*\s*$")
_CHAPTER_BREAK = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")  # two or more blank lines
# Characters that end the "first words" of a name (sentence and clause punctuation, Chinese and Latin).
_NAME_STOP = re.compile(r"[。！？!?；;：:，,、.\n…—()（）\[\]【】《》\"“”'‘’]")
_NAME_UNSAFE = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*#%&{}$!@`=+^~]')
#: longest name made from a text, in characters (Chinese characters count one each)
MAX_NAME_CHARS = 24


@dataclass(frozen=True)
class Chapter:
    """One chapter of a text: ``title`` (None for the text before the first heading, or for blank-line sections)
    and ``text`` (what is spoken: the title as its first sentence, then the body)."""

    title: str | None
    text: str


def split_chapters(text: str) -> list[Chapter]:
    """The chapters of ``text`` (see the module docstring); a text without chapter markers is one chapter with no
    title. Chapters with nothing to speak are dropped."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if any(_HEADING.match(line) and _HEADING.match(line).group(1) for line in lines):
        chapters: list[Chapter] = []
        title, body = None, []
        for line in lines:
            match = _HEADING.match(line)
            if match and match.group(1):
                chapters.append(_chapter(title, body))
                title, body = match.group(1), []
            else:
                body.append(line)
        chapters.append(_chapter(title, body))
        return [c for c in chapters if c.text.strip()]
    sections = [s for s in _CHAPTER_BREAK.split("\n".join(lines)) if s.strip()]
    if len(sections) <= 1:
        return [Chapter(None, text)]
    return [Chapter(None, s.strip("\n")) for s in sections]


def _chapter(title: str | None, body: list[str]) -> Chapter:
    text = "\n".join(body).strip("\n")
    if title:
        end = "" if re.search(r"[。！？.!?]$", title) else ("。" if re.search(r"[\u4e00-\u9fff]", title) else ".")
        text = f"{title}{end}\n{text}" if text.strip() else f"{title}{end}"
    return Chapter(title, text)


def name_from_text(text: str, index: int | None = None, *, digits: int = 4) -> str:
    """A file name (no extension) from the first words of ``text``: up to the first punctuation mark, at most
    ``MAX_NAME_CHARS`` characters (Latin words kept whole), spaces as ``_``, characters unsafe in file names dropped;
    prefixed with the zero-padded ``index`` when given. "untitled" when no words are left.

    >>> name_from_text("今天天气很好，我们去公园。", 3)
    '0003_今天天气很好'
    >>> name_from_text("Hello, world")
    'Hello'
    """
    plain = unicodedata.normalize("NFC", text).replace("#", " ").strip()
    plain = re.sub(r"\[[^\]]*\]|\([^()\u4e00-\u9fff]*\)", "", plain)  # pause markers, pinyin overrides, tags
    head = _NAME_STOP.split(plain, maxsplit=1)[0] if plain else ""
    if not head.strip() and plain:  # the text starts with punctuation: take the first non-empty piece
        head = next((piece for piece in _NAME_STOP.split(plain) if piece.strip()), "")
    head = _NAME_UNSAFE.sub("", head)
    words = head.split()
    name = ""
    for word in words:
        candidate = f"{name}_{word}" if name else word
        if len(candidate) > MAX_NAME_CHARS:
            if not name:  # one long word (or Chinese text without spaces): cut it
                name = candidate[:MAX_NAME_CHARS]
            break
        name = candidate
    name = name.strip("._ ") or "untitled"
    return f"{index:0{digits}d}_{name}" if index is not None else name
