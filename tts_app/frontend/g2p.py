"""Mandarin readings: default G2P, per-character candidate readings, pinyin parsing, single-reading homophones.

Everything comes from pypinyin's bundled dictionaries (``pypinyin.pinyin_dict`` for single characters,
``pypinyin.phrases_dict`` for the phrase-level choice of a polyphone's reading). Readings are TONE3 strings
(``zhong4``; ``lv4`` for ü; neutral tone ``5``), the house convention. Tables are built lazily and cached, so
``import tts_app.frontend`` stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# CJK Unified Ideographs (+ extension A, compatibility ideographs, extensions B-H, and 〇), the characters pypinyin
# has readings for. Source: pypinyin.constants.RE_HANS, restated as a character class.
HANZI_CLASS = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
HANZI_RUN_RE = re.compile(f"[{HANZI_CLASS}]+")
_HANZI_RE = re.compile(f"[{HANZI_CLASS}]")
_HANZI_TAIL_RE = re.compile(f"[{HANZI_CLASS}]+$")

# Precomposed vowels with a tone mark, as pinyin writes them (ü with a tone mark included).
TONE_MARK_CHARS = "āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜńňǹḿ"
_TONE3_RE = re.compile(r"^([a-z]+)([0-9])?$")


def is_hanzi(char: str) -> bool:
    """True when ``char`` (one character) is a Chinese character pypinyin can read."""
    return bool(_HANZI_RE.fullmatch(char))


@lru_cache(maxsize=None)
def char_candidates(char: str) -> tuple[str, ...]:
    """Every reading pypinyin's single-character dictionary lists for ``char``, TONE3, in dictionary order
    (the first is the most common). Empty tuple for a character with no entry."""
    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.pinyin_dict import pinyin_dict

    marked = pinyin_dict.get(ord(char))
    if not marked:
        return ()
    readings = (to_tone3(r, neutral_tone_with_five=True) for r in marked.split(","))
    return tuple(dict.fromkeys(r for r in readings if r))


@lru_cache(maxsize=1)
def _phrase_reading_counts() -> dict[str, dict[str, int]]:
    """char -> {TONE3 reading: number of entries of pypinyin's phrase dictionary that read it so}; kept in the
    lexicon cache (``lexicon.Lexicon.reading_counts``, built by ``build_phrase_reading_counts``)."""
    from tts_app.frontend.lexicon import load_lexicon

    return load_lexicon().reading_counts


def build_phrase_reading_counts() -> dict[str, dict[str, int]]:
    """What ``_phrase_reading_counts`` returns, computed from pypinyin's phrase dictionary (about 0.3 s)."""
    from collections import Counter, defaultdict

    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.phrases_dict import phrases_dict

    tone3: dict[str, str] = {}
    counts: dict[str, Counter] = defaultdict(Counter)
    for phrase, readings in phrases_dict.items():
        if len(readings) != len(phrase):
            continue
        for char, options in zip(phrase, readings):
            marked = options[0]
            if marked not in tone3:
                tone3[marked] = to_tone3(marked, neutral_tone_with_five=True)
            counts[char][tone3[marked]] += 1
    return {char: dict(c) for char, c in counts.items()}


MIN_PHRASES_FOR_COMMON = 2  # a non-default reading attested in fewer phrases than this counts as rare


@lru_cache(maxsize=None)
def common_readings(char: str) -> tuple[str, ...]:
    """The readings of ``char`` in actual use: its default (first) reading plus every other reading that at least
    ``MIN_PHRASES_FOR_COMMON`` entries of pypinyin's phrase dictionary use. Drops archaic or rare readings
    (他 tuo2, 去 qu1, 还 fu2), so "polyphonic" flags the characters a reader can actually get wrong (行, 还, 得)."""
    return _common_readings(char, _phrase_reading_counts())


def _common_readings(char: str, phrase_counts: dict[str, dict[str, int]]) -> tuple[str, ...]:
    candidates = char_candidates(char)
    if not candidates:
        return ()
    counts = phrase_counts.get(char, {})
    return tuple(r for i, r in enumerate(candidates) if i == 0 or counts.get(r, 0) >= MIN_PHRASES_FOR_COMMON)


@lru_cache(maxsize=1)
def valid_readings() -> frozenset[str]:
    """Every TONE3 reading (syllable + tone) of any character in pypinyin's dictionary."""
    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.pinyin_dict import pinyin_dict

    marked = {r for value in pinyin_dict.values() for r in value.split(",")}
    return frozenset(to_tone3(r, neutral_tone_with_five=True) for r in marked) - {""}


@lru_cache(maxsize=1)
def valid_syllables() -> frozenset[str]:
    """Every toneless syllable (``zhong``, ``lv``) of pypinyin's dictionary."""
    return frozenset(r.rstrip("012345") for r in valid_readings())


def parse_pinyin_token(token: str) -> tuple[str | None, str | None]:
    """Parse one user-written pinyin syllable into TONE3.

    Accepts tone marks (``zhòng``, ``lǜ``), tone numbers (``zhong4``, ``ZHONG4``, neutral ``5`` or ``0``) and ü as
    ``ü``, ``v`` or ``u:``.

    Returns:
        ``(reading, None)`` on success, e.g. ``("zhong4", None)``; a syllable without a tone is the neutral tone
        (``("de5", None)`` for ``de``); ``(None, problem)`` otherwise, where ``problem`` says what is wrong in words
        (tone out of range, not a Mandarin syllable).
    """
    kind, value = classify_pinyin_token(token)
    return (value, None) if kind in ("ok", "toneless") else (None, value)


def classify_pinyin_token(token: str) -> tuple[str, str]:
    """Like ``parse_pinyin_token`` but says which way a token fails, so markup parsing can tell a pinyin attempt
    from ordinary text in parentheses.

    Returns:
        ``("ok", reading)``; ``("toneless", base + "5")`` for a Mandarin syllable written without a tone (standard
        pinyin writes the neutral tone so: 东西(dōng xi), so the caller may read it as the neutral tone);
        ``("bad_tone", problem)`` for a Mandarin syllable with an impossible tone (``zhong7``, two tone marks);
        ``("not_pinyin", problem)`` for anything else (``apple``, ``mp3``). ``problem`` is a ``Notice``.
    """
    from tts_app.frontend.messages import Notice

    text = token.strip().lower().replace("u:", "v").replace("ü", "v")
    marks = [c for c in text if c in TONE_MARK_CHARS]
    if marks:
        from pypinyin.contrib.tone_convert import to_tone3

        bare = to_tone3(text, neutral_tone_with_five=True).replace("ü", "v")
        if len(marks) > 1 or any(c.isdigit() for c in text):
            ok = bare.rstrip("0123456789") in valid_syllables()
            return ("bad_tone" if ok else "not_pinyin"), Notice("tok_many_tones", token=token)
        text = bare
    m = _TONE3_RE.match(text)
    if not m:
        return "not_pinyin", Notice("tok_not_pinyin", token=token)
    base, tone = m.group(1), m.group(2)
    if base not in valid_syllables():
        return "not_pinyin", Notice("tok_not_syllable", token=token)
    if tone is None:
        return "toneless", base + "5"
    if tone == "0":
        tone = "5"
    if tone not in "12345":
        return "bad_tone", Notice("tok_bad_tone", token=token, tone=tone)
    return "ok", base + tone


def display_reading(reading: str, notation: str) -> str:
    """A TONE3 reading in the user's notation: ``"tone3"`` as it is (``zhong4``), ``"marks"`` with tone marks
    (``zhòng``; neutral tone unmarked, ``lü``)."""
    if notation != "marks" or not reading:
        return reading
    from pypinyin.contrib.tone_convert import to_tone

    return to_tone(reading.replace("v", "ü")).replace("v", "ü")


MAX_PHRASE_CHARS = 10  # the longest entry of pypinyin.phrases_dict (measured on pypinyin 0.55.0)


def joins_word(before: str, after: str) -> bool:
    """True when the Chinese characters at the end of ``before`` and at the start of ``after`` (each at least one,
    no other character between) form a phrase of pypinyin's phrase dictionary, e.g. ``("很重", "要")`` (重要).

    That dictionary holds the phrases whose reading needs the phrase (those with a polyphone, 47k entries), so a
    parenthesis at such a junction splits a word whose reading it was most likely meant to change.
    """
    from pypinyin.phrases_dict import phrases_dict

    m_left = _HANZI_TAIL_RE.search(before[-MAX_PHRASE_CHARS:])
    m_right = HANZI_RUN_RE.match(after[:MAX_PHRASE_CHARS])
    if not m_left or not m_right:
        return False
    a, b = m_left.group(), m_right.group()
    return any(a[-k:] + b[:n] in phrases_dict for k in range(1, len(a) + 1) for n in range(1, len(b) + 1)
               if k + n <= MAX_PHRASE_CHARS)


@dataclass(frozen=True)
class G2PReading:
    """The default reading of one Chinese character. ``basis``: "word" (a lexicon phrase of 2+ characters read it),
    "rule" (a grammar rule of ``polyphone_rules`` decided it; ``rule`` names it) or "char" (read on its own:
    ``Lexicon.char_reading``)."""

    position: int
    char: str
    reading: str
    basis: str
    rule: str | None = None


def g2p(text: str) -> list[tuple[int, str, str]]:
    """Default G2P: ``[(position, char, TONE3 reading), ...]`` for every Chinese character of ``text`` (reading ""
    when unknown). See ``read_text``."""
    return [(r.position, r.char, r.reading) for r in read_text(text)]


def read_text(text: str) -> list[G2PReading]:
    """Default readings of every Chinese character of ``text``, in order.

    Each maximal run of Chinese characters is read on its own (punctuation, digits and Latin letters end a clause):
    converted to simplified script for lookup, cut into words by jieba (maximum probability over its word counts
    plus the lexicon's phrases), each word read from the lexicon (a word it lacks is read by its longest lexicon
    sub-words, the rest character by character), then the grammar rules of ``polyphone_rules`` decide the function
    words and verbs. Sources and licences: ``tts_app.frontend.lexicon``. Readings are TONE3 citation tones.
    """
    return [G2PReading(*r) for r in read_text_tuples(text)]


def read_text_tuples(text: str) -> list[tuple[int, str, str, str, str | None]]:
    """``read_text`` as plain tuples ``(position, char, reading, basis, rule)``: the per-request path
    (``prepare._analyse``) reads 200 characters per request and skips building a dataclass per character."""
    out: list[tuple[int, str, str, str, str | None]] = []
    for m in HANZI_RUN_RE.finditer(text):
        run, start = m.group(), m.start()
        out.extend((start + k, run[k], *r) for k, r in enumerate(_read_run(run)))
    return out


def run_tokens(run: str) -> list:
    """The ``polyphone_rules.Token`` s of one run of Chinese characters, rules applied (see ``read_text``)."""
    from tts_app.frontend.lexicon import load_lexicon
    from tts_app.frontend.polyphone_rules import Token, apply_rules

    lex = load_lexicon()
    simple = lex.simplified(run)
    tokens: list[Token] = []
    pos = 0
    for word in lex.segment(simple):
        readings = lex.phrases.get(word) if len(word) > 1 else None
        if readings is not None:
            tokens.append(Token(word, pos, lex.tags.get(word, ""), list(readings), ["word"] * len(word)))
        else:
            for sub in _split_unknown(word, lex):
                start = pos + sub[0]
                piece = word[sub[0]:sub[1]]
                known = lex.phrases.get(piece) if len(piece) > 1 else None
                if known is not None:
                    tokens.append(Token(piece, start, lex.tags.get(piece, ""), list(known), ["word"] * len(piece)))
                else:
                    tokens.append(Token(piece, start, lex.tags.get(piece, ""), [lex.char_reading(piece)], ["char"]))
        pos += len(word)
    apply_rules(simple, tokens, lex.phrases)
    return tokens


def _split_unknown(word: str, lex) -> list[tuple[int, int]]:
    """Spans of ``word`` (a jieba word the lexicon lacks): of two splits, the one that leaves fewer characters to be
    read on their own: jieba's maximum-probability path over the word without the whole-word edge (局部地区 ->
    局部 / 地区, where greedy matching takes the lexicon's 局部地), or the longest lexicon matches left to right
    (睡一觉 -> 睡 / 一觉, where jieba's path is 睡 / 一 / 觉); a tie goes to the longest matches."""
    greedy = _longest_matches(word, lex)
    best = _jieba_path(word, lex)

    def alone(spans: list[tuple[int, int]]) -> int:
        return sum(1 for s, e in spans if e - s == 1 or word[s:e] not in lex.phrases)

    return greedy if alone(greedy) <= alone(best) else best


def _longest_matches(word: str, lex) -> list[tuple[int, int]]:
    spans, i = [], 0
    while i < len(word):
        n = next((n for n in range(min(lex.max_phrase_chars, len(word) - i), 1, -1) if word[i:i + n] in lex.phrases),
                 1)
        spans.append((i, i + n))
        i += n
    return spans


def _jieba_path(word: str, lex) -> list[tuple[int, int]]:
    if len(word) == 1:
        return [(0, 1)]
    tk = lex.tokenizer
    dag = tk.get_DAG(word)
    dag[0] = [j for j in dag[0] if j != len(word) - 1] or [0]
    route: dict = {}
    tk.calc(word, dag, route)
    spans, i = [], 0
    while i < len(word):
        j = route[i][1] + 1
        piece = word[i:j]
        if len(piece) > 1 and piece not in lex.phrases:
            spans.extend((i + s, i + e) for s, e in _split_unknown(piece, lex))
        else:
            spans.append((i, j))
        i = j
    return spans


@lru_cache(maxsize=4096)
def _read_run(run: str) -> tuple[tuple[str, str, str | None], ...]:
    """(reading, basis, rule) per character of one run (cached: the live preview re-reads unchanged runs)."""
    out: list[tuple[str, str, str | None]] = []
    for token in run_tokens(run):
        for reading, basis in zip(token.readings, token.basis):
            out.append((reading, basis, token.rule if basis == "rule" else None))
    return tuple(out)


def _gb2312_level(char: str) -> int:
    """1 for GB2312 level-1 (the 3,755 common characters), 2 for level 2, 3 outside GB2312. The level-1 block is
    first bytes 0xB0-0xD7 (GB2312 rows 16-55)."""
    try:
        code = char.encode("gb2312")
    except UnicodeEncodeError:
        return 3
    return 1 if len(code) == 2 and 0xB0 <= code[0] <= 0xD7 else 2


@lru_cache(maxsize=1)
def _ranked_characters() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(reading -> characters whose only reading in use it is, reading -> characters whose default reading it is),
    each ranked most common first (see ``homophone_table``); kept in the lexicon cache
    (``lexicon.Lexicon.homophones``, built by ``build_ranked_characters``)."""
    from tts_app.frontend.lexicon import load_lexicon

    return load_lexicon().homophones


def build_ranked_characters(phrase_counts: dict[str, dict[str, int]]
                            ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """What ``_ranked_characters`` returns, computed from pypinyin's dictionaries and ``phrase_counts`` (the
    output of ``build_phrase_reading_counts``; about 1 s)."""
    from pypinyin.pinyin_dict import pinyin_dict

    single: dict[str, list[tuple[tuple[int, int, int], str]]] = {}
    default: dict[str, list[tuple[tuple[int, int, int], str]]] = {}
    for code in pinyin_dict:
        if not 0x4E00 <= code <= 0x9FFF:
            continue
        char = chr(code)
        level = _gb2312_level(char)
        if level > 2:  # outside GB2312: too rare to be in a model's vocabulary
            continue
        num_phrases = sum(phrase_counts.get(char, {}).values())
        if num_phrases == 0:  # in no phrase at all: radicals (氵) and rarities a model may not know
            continue
        readings = _common_readings(char, phrase_counts)
        key = (level, -num_phrases, code)
        if len(readings) == 1:
            single.setdefault(readings[0], []).append((key, char))
        elif readings:
            default.setdefault(readings[0], []).append((key, char))
    return ({r: tuple(c for _, c in sorted(v)) for r, v in single.items()},
            {r: tuple(c for _, c in sorted(v)) for r, v in default.items()})


@lru_cache(maxsize=1)
def homophone_table() -> dict[str, str]:
    """TONE3 reading -> the most common character whose only reading in use is that one.

    Derived from pypinyin's dictionaries: candidates are BMP CJK characters whose ``common_readings`` are exactly
    that reading (rare readings attested in fewer than ``MIN_PHRASES_FOR_COMMON`` phrases are ignored, so 光 can
    stand for guang1) and that occur in at least one phrase; "common" ranks GB2312 level 1 before level 2, then by
    how many entries of ``phrases_dict`` contain the character (a frequency proxy from the same dictionary), then by
    code point so the table is deterministic. Characters outside GB2312 are never used (a model's vocabulary rarely
    has them), so a few readings (mostly neutral tones, e.g. ``le5``) have no entry. Built with the lexicon (about
    1 s) and kept in its cache file, so a start reads it instead of rebuilding it.
    """
    return {reading: chars[0] for reading, chars in _ranked_characters()[0].items()}


def homophone_candidates(reading: str) -> tuple[str, ...]:
    """Characters a model would read as ``reading`` (TONE3), best first: those whose only reading in use it is
    (``homophone_table``'s ranking), then those whose default reading it is (的 for de5, 了 for le5)."""
    single, default = _ranked_characters()
    return single.get(reading, ()) + default.get(reading, ())


def stand_in(reading: str, usable=None) -> str | None:
    """The character to write for a syllable typed instead of a character (``他做DE5很好``): the first of
    ``homophone_candidates(reading)`` that ``usable(char)`` accepts (default: any), or None."""
    return next((c for c in homophone_candidates(reading) if usable is None or usable(c)), None)


def homophone(reading: str) -> str | None:
    """The most common character whose only reading in use is ``reading`` (TONE3), or None when no such character
    exists (see ``homophone_table``)."""
    return homophone_table().get(reading)
