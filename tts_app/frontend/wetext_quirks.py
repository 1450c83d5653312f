"""Work-arounds for known mistakes of wetext's number readings (wetext 0.1.8, the version requirements.txt pins),
applied to one language run just before (``before_wetext``) and just after (``after_wetext``) wetext reads it.

Each fix is a rewrite of the input into a form wetext reads right, or a repair of a pattern its output can only hold
by mistake. Measured on wetext 0.1.8 (``Normalizer(lang, operator="tn")``):

English
  * a number whose leading group is 1 thousand loses its "one": ``1,299`` -> "thousand two hundred and ninety
    nine", ``$1,299.99`` -> "thousand ... dollars", ``1,000`` -> "thousand" (``12,000`` and ``1,001,000`` are
    right). Fixed after: a "thousand" that no number word precedes gets "one" in front. A "thousand" written as a
    word in the input is hidden from wetext and from this repair (``a thousand cars`` stays as written).
  * every plain 4-digit number is read as a year: ``1299 cars`` -> "twelve ninety nine", ``1000`` -> "ten hundred",
    ``1001`` -> "ten zero one". Fixed before: a 4-digit number gets a thousands separator (``1,299``, read as a
    quantity) unless it looks like a year in context: after a word such as "in", "since", "by", "year" or a month
    name, before "AD"/"BC", or after "to"/"and"/"-" that follows such a year ("from 1990 to 1999").
Chinese
  * a currency sign and 元 together are read twice and wrong: ``￥12.50元`` -> "一元二点五零元"; and money reads its
    decimals as digits (``¥128.50`` -> "一百二十八点五零元"). Fixed before: an amount with ``¥``/``￥`` or followed by
    元, with at most 2 decimals, is written as 元/角/分 (``128元5角``, ``12元零5分``), which wetext reads right
    (一百二十八元五角); with more decimals the sign becomes a trailing 元.
  * "2" before a measure word wetext does not list is read 二 (``2行`` -> 二行, ``2次`` -> 二次); Mandarin says 两
    before a measure word (吕叔湘《现代汉语八百词》, entry 两). Fixed before: a lone ``2`` before one of
    ``LIANG_MEASURE_WORDS`` becomes 两 (not after 第, not before 年级/次方/次元...).
  * an ordinal after 第 becomes 两 before the measure words it does list: ``第2名`` -> "第两名". Fixed after: 第两 ->
    第二 (第两 is never right).

Not fixed (out of scope): other wetext quirks, e.g. "1990s" -> "... ninety seconds".
"""

from __future__ import annotations

import re

# --- English --------------------------------------------------------------------------------------------------------

_NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred".split())
_LITERAL_THOUSAND_RE = re.compile(r"\bthousand\b", re.IGNORECASE)
_MASK = "\ue000"  # a private-use character: wetext passes it through untouched (checked on wetext 0.1.8)
_YEAR_BEFORE = frozenset(
    "in since from until till by before after during circa year born between january february march april may june "
    "july august september october november december jan feb mar apr jun jul aug sep sept oct nov dec".split())
_YEAR_AFTER = frozenset("ad bc bce ce".split())
_RANGE_WORDS = frozenset("to and or through - –".split())
# A plain 4-digit number: not part of a longer number, a decimal, a phone number, a time or a word ("B2000").
_FOUR_DIGITS_RE = re.compile(r"(?<![\w.,:/\-#])([$£€¥]?)([1-9]\d{3})(?![\w/]|[.,:\-]\d)")
_WORD_RE = re.compile(r"[\w$£€¥\-–]+")


def _previous_words(text: str, end: int, count: int) -> list[str]:
    words = _WORD_RE.findall(text[:end])
    return [w.lower() for w in words[-count:]]


def _is_year(text: str, m: re.Match, years: set[int]) -> bool:
    """A 4-digit number at ``m`` reads as a year in context (see the module docstring). ``years``: start offsets of
    the numbers of ``text`` already judged years."""
    if m.group(1) or not 1000 <= int(m.group(2)) <= 2099:
        return False
    before = _previous_words(text, m.start(), 2)
    after = _WORD_RE.findall(text[m.end():m.end() + 8])
    if after and after[0].lower() in _YEAR_AFTER:
        return True
    if before and before[-1] in _YEAR_BEFORE:
        return True
    if before and before[-1] in _RANGE_WORDS or text[:m.start()].rstrip().endswith(("-", "–")):
        prev = list(_FOUR_DIGITS_RE.finditer(text, 0, m.start()))
        return bool(prev) and prev[-1].start() in years
    # "May 5, 1999": a month name two words back
    return len(before) == 2 and before[0] in _YEAR_BEFORE and before[-1].isdigit()


def _before_en(text: str) -> tuple[str, list[str]]:
    literals = _LITERAL_THOUSAND_RE.findall(text)
    text = _LITERAL_THOUSAND_RE.sub(_MASK, text)
    years: set[int] = set()
    out, pos = [], 0
    for m in _FOUR_DIGITS_RE.finditer(text):
        if _is_year(text, m, years):
            years.add(m.start())
            continue
        digits = m.group(2)
        out.append(text[pos:m.start(2)] + f"{digits[0]},{digits[1:]}")
        pos = m.end(2)
    out.append(text[pos:])
    return "".join(out), literals


def _after_en(text: str, literals: list[str]) -> str:
    def one_thousand(m: re.Match) -> str:
        previous = re.findall(r"\w+", text[:m.start()])
        return m.group() if previous and previous[-1].lower() in _NUMBER_WORDS else "one " + m.group()

    text = re.sub(r"\bthousand", one_thousand, text)
    for literal in literals:
        text = text.replace(_MASK, literal, 1)
    return text.replace(_MASK, "thousand")


# --- Chinese --------------------------------------------------------------------------------------------------------

# Measure words that take 两 for the quantity 2 (吕叔湘《现代汉语八百词》, entry 两), each with the characters
# after it that make it something else (2年级 = second grade, 2次方 = squared, 2点5 = 2.5).
LIANG_MEASURE_WORDS = {
    "个": "", "行": "", "次": "方元", "年": "级代", "种": "", "台": "", "遍": "", "句": "", "部": "", "间": "", "份": "",
    "点": "0123456789", "回": "", "趟": "", "场": "", "门": "", "顿": "", "节": "", "封": "", "瓶": "", "盒": "", "包": "",
    "箱": "", "袋": "", "支": "", "根": "", "颗": "", "粒": "", "片": "", "朵": "", "架": "", "艘": "", "所": "", "栋": "",
    "户": "", "排": "", "列": "", "组": "", "队": "", "套": "", "副": "", "幅": "", "扇": "", "项": "", "笔": "", "道": "",
    "题": "", "款": "", "类": "", "样": "", "声": "", "步": "", "轮": "", "成": "", "倍": "", "届": "", "季": "", "集": "",
    "章": "", "张": "", "条": "", "本": "", "位": "", "名": "", "天": "", "周": "", "岁": "",
}
_LIANG_RE = re.compile(r"(?<![\d.,:])(?<!第)(?<!第 )2(?=\s*([" + "".join(LIANG_MEASURE_WORDS) + r"])(.?))")
_MONEY_SIGN_RE = re.compile(r"[¥￥]\s*(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\d.])\s*(元)?")
_MONEY_YUAN_RE = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+)\.(\d{1,2})(?!\d)\s*元")


def _yuan_jiao_fen(integer: str, decimals: str | None) -> str:
    """``("128", "50")`` -> ``"128元5角"``; more than 2 decimals -> ``"7.1234元"`` (wetext reads it as a number)."""
    decimals = decimals or ""
    if len(decimals) > 2:
        return f"{integer}.{decimals}元"
    jiao, fen = (decimals + "00")[:2]
    out = f"{integer}元" if int(integer.replace(",", "")) or (jiao == "0" and fen == "0") else ""
    if jiao != "0":
        out += f"{jiao}角"
    if fen != "0":
        out += f"{fen}分" if jiao != "0" or not out else f"零{fen}分"
    return out


def _liang(m: re.Match) -> str:
    word, following = m.group(1), m.group(2)
    return "2" if following and following in LIANG_MEASURE_WORDS[word] else "两"


def _before_zh(text: str) -> str:
    text = _MONEY_SIGN_RE.sub(lambda m: _yuan_jiao_fen(m.group(1), m.group(2)), text)
    text = _MONEY_YUAN_RE.sub(lambda m: _yuan_jiao_fen(m.group(1), m.group(2)), text)
    return _LIANG_RE.sub(_liang, text)


def _after_zh(text: str) -> str:
    return re.sub(r"第(\s*)两", r"第\g<1>二", text)


# --- entry points ---------------------------------------------------------------------------------------------------

def before_wetext(text: str, lang: str) -> tuple[str, list[str]]:
    """Rewrite one language run (``lang`` "zh" or "en") so wetext reads its numbers right (module docstring).

    Returns:
        ``(text_for_wetext, state)``: pass ``state`` to ``after_wetext`` with wetext's output.
    """
    if lang == "en":
        return _before_en(text)
    return _before_zh(text), []


def after_wetext(text: str, lang: str, state: list[str]) -> str:
    """Repair wetext's output for the run ``before_wetext`` prepared (``state`` is what it returned)."""
    return _after_en(text, state) if lang == "en" else _after_zh(text)
