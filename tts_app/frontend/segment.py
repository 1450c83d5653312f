"""Segmentation: cut normalised text into segments a model can synthesise in one call.

Order of preference: explicit pause markers (always a boundary), then sentence punctuation (。！？!?… full- and
half-width, a ``.`` before a space or the end, a line break; ASCII punctuation between Chinese characters was made
full-width by the normaliser), then, only inside a sentence longer than ``max_segment_chars``, clause punctuation
(，,、；;：:—), then, only inside a clause still too long, a hard split (``_hard_split``): at a space, a jieba word
boundary between Chinese characters, a script boundary, or a long token's own punctuation (URL ``/`` ``.``).
``max_segment_chars`` is a hard limit: a cut inside a word or number happens only when the window holds no other
(a word longer than the limit). The limit counts a segment's spoken part, from its first to its last letter, digit or
Chinese character (``spoken_len``): punctuation around the words rides along, as it adds nothing to speak; a hard
cut, placed freely, keeps the trailing punctuation within the limit too when it can, and cuts nearest an even share of
what is left, so it leaves no 2-3 character leftover.
Leftovers with fewer than ``min_segment_chars`` speakable characters are merged into a
neighbour, never across a pause marker. Punctuation right after a pause marker (``重要[pause:500ms]，请``) ends the
segment before the pause instead of starting the next one (``_attach_trailing_punctuation``), so no segment starts
with clause or sentence punctuation.

Packing (``pack_sentences``, what every model family here does, as its upstream tool does): a sentence is a place
where a segment *may* end, not one where it must. Consecutive pieces of a block (the sentences, and the clauses and
pieces of an over-long one) are joined greedily, in order, while the joined segment stays within the limit; for pieces
in a fixed order this gives the fewest segments that fit. A text within the limit is one segment: the model speaks
it in one pass, keeping the prosody across its sentences. The limit is ``max_segment_chars`` and, when the caller
passes a ``measure`` (a model counting its own units, e.g. IndexTTS 2's text tokens, upstream's
``max_text_tokens_per_segment``), ``max_segment_units`` of it; pieces' units are summed, as upstream IndexTTS sums its
pieces' token counts. A ``SegmentMeasure`` may also name characters that end a piece inside a sentence
(``piece_ends``): IndexTTS 2's ``infer()`` cuts at commas and dashes too before it packs, so a long text's segment
boundary may fall at a comma, as there. The front end stays pure: the measure is a plain function handed in by the
caller.

Works on character offsets only: the spans returned cover the text exactly, so nothing is dropped or repeated.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from tts_app.config import MIN_MAX_SEGMENT_CHARS
from tts_app.frontend.g2p import HANZI_RUN_RE, is_hanzi

SENTENCE_END = frozenset("。！？!?…\n")
CLAUSE_END = frozenset("，,、；;：:—")
# Closing quotes/brackets stay with the sentence they close.
CLOSERS = frozenset("”’」』）)]】》〉\"'")
# What a pause marker's cut moves past: punctuation that closes what came before. Straight quotes are left out (after
# a pause they usually open a quotation), and so is the line break (a boundary of its own).
TRAILING_PUNCTUATION = (SENTENCE_END | CLAUSE_END | CLOSERS | {"."}) - {"\n", '"', "'"}


@dataclass(frozen=True)
class SegmentMeasure:
    """A model's own segment unit, handed in by the caller (``split_spans``'s ``measure``).

    Attributes:
        count: units of a piece of text (e.g. IndexTTS 2's text tokens, with its own tokenizer).
        piece_ends: characters that end a piece inside a sentence before pieces are packed (empty: the sentences are
            the pieces). IndexTTS 2: the characters its package maps to "," or "-" (``TextNormalizer.char_rep_map``),
            where its ``TextTokenizer.split_segments`` cuts.
    """

    count: Callable[[str], int]
    piece_ends: frozenset[str] = frozenset()

    def __call__(self, text: str) -> int:
        return self.count(text)


@dataclass(frozen=True)
class Span:
    """``text[start:end]`` of the normalised text, the silence after it in ms, and its block (the run of text
    between two pause markers; segments are never merged across blocks)."""

    start: int
    end: int
    pause_after_ms: int
    block: int


def spoken_len(text: str, start: int, end: int) -> int:
    """Characters of ``text[start:end]`` from its first to its last speakable one (punctuation and spaces around
    the words do not count toward ``max_segment_chars``)."""
    while start < end and unicodedata.category(text[start])[0] not in "LN":
        start += 1
    while end > start and unicodedata.category(text[end - 1])[0] not in "LN":
        end -= 1
    return end - start


def num_speakable(text: str) -> int:
    """Letters, digits and Chinese characters in ``text`` (Unicode categories L* and N*)."""
    return sum(1 for ch in text if unicodedata.category(ch)[0] in "LN")


def _sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans, i, s = [], start, start
    while i < end:
        ch = text[i]
        if ch in SENTENCE_END or (ch == "." and _ends_sentence(text, i, end)):
            j = i + 1
            while j < end and (text[j] in TRAILING_PUNCTUATION or text[j] in SENTENCE_END or text[j] in CLOSERS):
                j += 1
            j = _attach_trailing_punctuation(text, j, end)
            spans.append((s, j))
            s = i = j
        else:
            i += 1
    if s < end:
        spans.append((s, end))
    return spans


def _ends_sentence(text: str, i: int, end: int) -> bool:
    """A "." at ``i`` ends a sentence when the text ends there or whitespace follows and the next word does not
    start with a lower-case letter ("Main St. in the" goes on; "home. Then" does not)."""
    if i + 1 == end:
        return True
    if not text[i + 1].isspace():
        return False
    rest = text[i + 1:end].lstrip()
    return not rest or not rest[0].islower()


def _clause_spans(text: str, start: int, end: int, ends: frozenset[str] = CLAUSE_END) -> list[tuple[int, int]]:
    """``text[start:end]`` cut after each character of ``ends`` (with the closers and punctuation right after it)."""
    spans, s, i = [], start, start
    while i < end:
        if text[i] in ends and not (text[i] in ",:" and 0 < i < end - 1 and text[i - 1].isdigit()
                                    and text[i + 1].isdigit()):  # 1,000 / 3:30 left by the normaliser
            j = i + 1
            while j < end and (text[j] in CLOSERS or text[j] in ends):  # "，，" and "：”" stay together
                j += 1
            j = _attach_trailing_punctuation(text, j, end)
            if j > s:
                spans.append((s, j))
            s = i = j
        else:
            i += 1
    if s < end:
        spans.append((s, end))
    return [sp for sp in spans if sp[1] > sp[0]]


def _word_boundaries(text: str, start: int, end: int) -> tuple[set[int], set[int]]:
    """Offsets inside runs of Chinese characters where a word of jieba's segmentation ends (the lexicon's
    segmenter, ``tts_app.frontend.lexicon``), and, inside words of 5+ characters (中华人民共和国国务院), where their
    own sub-words end (forward maximum matching over jieba's dictionary: 中华人民共和国 / 国务院)."""
    from tts_app.frontend.lexicon import load_lexicon

    lex = load_lexicon()
    bounds: set[int] = set()
    inner: set[int] = set()
    freq = lex.tokenizer.FREQ
    for m in HANZI_RUN_RE.finditer(text, start, end):
        pos = m.start()
        for word in lex.segment(lex.simplified(m.group())):
            if len(word) >= 5:
                i = 0
                while i < len(word) - 1:
                    n = next((n for n in range(len(word) - i - (1 if i == 0 else 0), 1, -1)
                              if freq.get(word[i:i + n])), 1)
                    i += n
                    if i < len(word):
                        inner.add(pos + i)
            pos += len(word)
            bounds.add(pos)
    return bounds, inner




def _cut_priority(text: str, c: int, words: tuple[set[int], set[int]], protected: list[tuple[int, int]]) -> int:
    """How good a hard cut between ``text[c-1]`` and ``text[c]`` is: 3 after a space, 2 at a word or script
    boundary next to a Chinese character, 1 after a long token's own punctuation (a URL's ``/``, ``-``) or between
    the sub-words of a long Chinese word, 0 only
    as a last resort (inside a Chinese or Latin word or a number, before a space), -1 never (before punctuation in
    ``TRAILING_PUNCTUATION``, inside a protected span such as a control tag)."""
    a, b = text[c - 1], text[c]
    if b in TRAILING_PUNCTUATION or any(s < c < e for s, e in protected):
        return -1  # punctuation ends the segment before it, never starts one; a tag is never cut
    if a.isspace():
        return 3
    if b.isspace():
        rest = text[c:].lstrip(" \t")
        return -1 if rest[:1] in TRAILING_PUNCTUATION and rest[:1] else 0  # "hello |，" would open with "，"
    ha, hb = is_hanzi(a), is_hanzi(b)
    if ha and hb:
        return 2 if c in words[0] else 1 if c in words[1] else 0
    if ha or hb:
        return 2
    if a.isalnum() and b.isalnum():
        return 0
    if b.isdigit() and a in ".:," and c >= 2 and text[c - 2].isdigit():
        return 0  # inside "3.5", "3:30", "1,000"
    if not a.isalnum():
        return 1  # after a mark: "example.org/|path", "well-|known", "(|xyz"
    if b in "([{（“‘\"'<":
        return 1  # before an opening bracket or quote
    return 0


def _hard_split(text: str, start: int, end: int, max_chars: int, protected: list[tuple[int, int]]
                ) -> list[tuple[int, int]]:
    """Cut ``text[start:end]`` into pieces of at most ``max_chars``: at each step the best cut inside the limit (a
    space, then a word boundary, then a token's own punctuation), the one nearest to an even share of what is left
    (so the last piece is no 2-character leftover such as a lone "最后，"), preferring the second half of the window;
    inside a word only when the window has no other cut (then as late as the limit allows), so the limit always
    holds. A cut that keeps the piece's trailing punctuation within the limit too is preferred to one of the same
    kind that the punctuation would push past it (the punctuation after a piece's last word rides along only when
    no such cut exists)."""
    words = _word_boundaries(text, start, end)
    spans, s = [], start

    def first_spoken(i: int) -> int:  # leading punctuation rides along: the limit counts from the first word
        while i < end and num_speakable(text[i]) == 0:
            i += 1
        return i

    def written_len(i: int) -> int:  # from the first word to the end, trailing punctuation included
        return len(text[first_spoken(i):end].rstrip())

    while written_len(s) > max_chars:
        strict = min(first_spoken(s) + max_chars, end)
        limit = strict
        while limit < end and num_speakable(text[limit]) == 0:  # punctuation after the last word rides along
            limit += 1
        left = written_len(s)
        num_pieces = -(-left // max_chars)
        target = first_spoken(s) + -(-left // num_pieces)  # an even share of what is left
        best = None
        half = s + max_chars // 2
        for lo, min_priority in ((half, 2), (s + 1, 2), (half, 1), (s + 1, 1), (s + 1, 0)):
            for hi in (strict, limit):
                options = [(_cut_priority(text, c, words, protected), c)
                           for c in range(max(lo, s + 1), min(hi, end - 1) + 1)]
                # (a piece with nothing to speak, e.g. a leading "，", would be a segment of silence)
                options = [o for o in options if o[0] >= min_priority
                           and (num_speakable(text[s:o[1]]) > 0 or not text[s:o[1]].strip())]
                if options:  # (inside a word, where nothing is a natural cut, the latest: fewest cuts)
                    best = max(options, key=lambda o: (o[0], -abs(o[1] - target) if min_priority else 0, o[1]))[1]
                    break
            if best is not None:
                break
        if best is None:  # only punctuation or a protected span within the limit: cut at the limit anyway
            best = limit
        if best >= end:  # what is left fits, but for the punctuation after its last word: it rides along
            break
        spans.append((s, best))
        s = best
    spans.append((s, end))
    return spans


def _pack(text: str, parts: list[tuple[int, int]], max_chars: int, split) -> list[tuple[int, int]]:
    """Greedily join consecutive parts while the result stays within ``max_chars``; a part longer than that on its
    own is handed to ``split``. A part with nothing to speak (a lone "，") joins the next one first, so it never
    becomes a segment of its own."""
    merged: list[tuple[int, int]] = []
    carry = None
    for s, e in parts:
        if carry is not None:
            s, carry = carry, None
        if num_speakable(text[s:e]) == 0 and (s, e) != parts[-1]:
            carry = s
            continue
        merged.append((s, e))
    if carry is not None:
        merged.append((carry, parts[-1][1]))
    parts = merged
    out: list[tuple[int, int]] = []
    for s, e in parts:
        if spoken_len(text, s, e) > max_chars:
            if out and out[-1][1] == s and spoken_len(text, *out[-1]) < max_chars // 2:
                s = out.pop()[0]  # a short clause before it is split with it, never left alone ("最后，")
            out.extend(split(s, e))
        elif out and out[-1][1] == s and spoken_len(text, out[-1][0], e) <= max_chars:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _pack_pieces(text: str, pieces: list[tuple[int, int]], max_chars: int, piece_units: list[int] | None,
                 max_units: int | None) -> list[tuple[int, int]]:
    """Join consecutive ``pieces`` (adjacent spans of one block, in order) greedily while the joined span's spoken
    length stays within ``max_chars`` and the sum of its pieces' units within ``max_units`` (when ``piece_units``,
    one count per piece, is given). Greedy in order is optimal here: no ordered partition into spans that fit has
    fewer spans."""
    out: list[tuple[int, int]] = []
    out_units: list[int] = []
    for k, (s, e) in enumerate(pieces):
        n = piece_units[k] if piece_units is not None else 0
        if (out and spoken_len(text, out[-1][0], e) <= max_chars
                and (piece_units is None or out_units[-1] + n <= max_units)):
            out[-1] = (out[-1][0], e)
            out_units[-1] += n
        else:
            out.append((s, e))
            out_units.append(n)
    return out


def split_spans(text: str, boundaries: list[tuple[int, int]], *, max_segment_chars: int, min_segment_chars: int,
                default_pause_ms: int, final_pause_ms: int | None = None,
                protected: list[tuple[int, int]] | None = None, pack_sentences: bool = True,
                measure: Callable[[str], int] | None = None, max_segment_units: int | None = None) -> list[Span]:
    """Cut ``text`` into segment spans.

    Args:
        text: normalised text.
        boundaries: ``[(offset, pause_ms), ...]`` from pause markers, offsets in ``text`` (0 < offset <= len(text)),
            sorted; a marker at ``len(text)`` sets the pause after the last segment. A marker's cut is moved past
            the punctuation right after it (``_attach_trailing_punctuation``).
        max_segment_chars: most characters per segment, a hard limit (``_hard_split``).
        min_segment_chars: segments with fewer speakable characters are merged into a neighbour in the same block
            when the merged segment stays within ``max_segment_chars``.
        default_pause_ms: silence between segments not separated by a marker.
        final_pause_ms: silence after the last segment when no marker ends the text (default 0).
        protected: ``(start, end)`` spans never cut (control tags passed to the model).
        pack_sentences: join consecutive sentences of a block into one segment while it stays within the limits
            (module docstring); False = every sentence ends a segment.
        measure: the model's own count of a piece of text (e.g. its text tokens; a ``SegmentMeasure`` may name
            ``piece_ends`` too), or None (characters only).
        max_segment_units: most ``measure`` units per segment (with ``measure``); a sentence above it is cut at
            clauses, then hard, at the share of ``max_segment_chars`` its units allow.

    Returns:
        Spans in order, covering ``text`` without gaps or overlaps, except that spans holding only whitespace are
        dropped.
    """
    protected = protected or []
    marker_ms: dict[int, int] = {}
    for off, ms in boundaries:
        off = _attach_trailing_punctuation(text, min(max(off, 0), len(text)))
        marker_ms[off] = marker_ms.get(off, 0) + ms
    cuts = sorted(set(marker_ms) | {0, len(text)})
    spans: list[Span] = []
    if (measure is None) != (max_segment_units is None):
        raise ValueError("measure and max_segment_units go together")

    def units(s: int, e: int) -> int:
        return 0 if measure is None else measure(text[s:e])

    piece_ends = getattr(measure, "piece_ends", frozenset())

    for block, (bs, be) in enumerate(zip(cuts, cuts[1:])):
        pieces: list[tuple[int, int]] = []
        for ss, se in _sentence_spans(text, bs, be):
            spoken, sentence_units = spoken_len(text, ss, se), units(ss, se)
            if spoken <= max_segment_chars and (measure is None or sentence_units <= max_segment_units):
                pieces.extend(_clause_spans(text, ss, se, piece_ends) if piece_ends else [(ss, se)])
                continue
            max_chars = max_segment_chars
            if measure is not None and sentence_units > max_segment_units:
                # over the unit limit: cut at the share of characters its units allow
                max_chars = min(max_chars, max(MIN_MAX_SEGMENT_CHARS, spoken * max_segment_units // sentence_units))
            clauses = _clause_spans(text, ss, se)
            pieces.extend(_pack(text, clauses, max_chars,
                                lambda s, e, n=max_chars: _hard_split(text, s, e, n, protected)))
        if pack_sentences:
            pieces = _pack_pieces(text, pieces, max_segment_chars,
                                  None if measure is None else [units(s, e) for s, e in pieces], max_segment_units)
        for i, (ps, pe) in enumerate(pieces):
            last_in_block = i == len(pieces) - 1
            pause = marker_ms.get(be, default_pause_ms) if last_in_block else default_pause_ms
            spans.append(Span(ps, pe, pause, block))
    spans = [sp for sp in spans if text[sp.start:sp.end].strip()]
    spans = _merge_short(text, spans, max(min_segment_chars, 1), max_segment_chars)
    if spans:
        last = spans[-1]
        end_pause = marker_ms.get(len(text), final_pause_ms if final_pause_ms is not None else 0)
        spans[-1] = Span(last.start, last.end, end_pause, last.block)
    return spans


def _attach_trailing_punctuation(text: str, offset: int, end: int | None = None) -> int:
    """Move a cut at ``offset`` past the punctuation that follows it (whitespace between included), not beyond ``end``
    (default ``len(text)``), so "很重要[pause:500ms]，请去银行。" gives "很重要，" + pause + "请去银行。" and no
    segment starts with "，"."""
    end = len(text) if end is None else end
    cut = i = offset
    while i < end and (text[i] in TRAILING_PUNCTUATION or text[i].isspace()):  # a scene break's line end too
        i += 1
        if text[i - 1] in TRAILING_PUNCTUATION:
            cut = i
    return cut


def _merge_short(text: str, spans: list[Span], min_chars: int, max_chars: int) -> list[Span]:
    spans = list(spans)
    i = 0
    while i < len(spans):
        sp = spans[i]
        n = num_speakable(text[sp.start:sp.end])
        if n >= min_chars or len(spans) == 1:
            i += 1
            continue
        # Only punctuation left over ("hello ， ，" at a limit of 8): it joins the segment before even past the
        # limit, as it adds nothing to speak.
        prev_ok = (i > 0 and (spans[i - 1].block == sp.block or n == 0)
                   and (spoken_len(text, spans[i - 1].start, sp.end) <= max_chars or n == 0))
        next_ok = (i + 1 < len(spans) and (spans[i + 1].block == sp.block or n == 0)
                   and (spoken_len(text, sp.start, spans[i + 1].end) <= max_chars or n == 0))
        if prev_ok:
            p = spans[i - 1]
            # Across a marker (only for punctuation-only leftovers) keep the longer of the two pauses.
            pause = sp.pause_after_ms if p.block == sp.block else max(p.pause_after_ms, sp.pause_after_ms)
            spans[i - 1] = Span(p.start, sp.end, pause, p.block)
            del spans[i]
            i = max(i - 1, 0)
        elif next_ok:
            nx = spans[i + 1]
            spans[i + 1] = Span(sp.start, nx.end, nx.pause_after_ms, nx.block)
            del spans[i]
        else:
            i += 1
    return spans
