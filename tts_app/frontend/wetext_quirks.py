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
    decimals as digits (``¥128.50`` -> "一百二十八点五零元"). Fixed before: an amount with ``¥``/``￥`` (price-tag
    notation), with at most 2 decimals, is written as 元/角/分 (``128元5角``, ``12元零5分``), which wetext reads right
    (一百二十八元五角); with more decimals the sign becomes a trailing 元. A decimal written with 元 and no sign
    (``3.5元``) is read as written, 三点五元 (wetext would say 三元五角; ``before_language_runs`` keeps it).
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


# Currency codes (ISO 4217, and RMB) written before an amount: "RMB1500" is an amount, not a model code.
CURRENCY_CODES = frozenset("RMB CNY USD HKD EUR JPY GBP AUD CAD SGD TWD NTD KRW CHF MOP".split())
# A model code: Latin letters (a word of its own) then 3 or 4 digits, directly or after one space (upper-case letters
# only: "RTX 4090", not "Windows 2000").
_EN_MODEL_CODE_RE = re.compile(r"(?<![A-Za-z\d.])([A-Za-z]{1,10})( ?)(\d{3,4})(?!\d|[.,]\d)")


def _en_model_code(m: re.Match) -> str:
    """``RTX4090`` -> ``RTX 40 90`` (wetext: "RTX forty ninety"), ``A380`` -> ``A 3 80``, ``RTX3050`` ->
    ``RTX 30 50``, ``X1005`` -> ``X 10 oh 5``: the pairs English speakers read a model number in. A round number
    (``A100``, ``B2000``) stays a number."""
    letters, gap, digits = m.groups()
    if letters.upper() in CURRENCY_CODES or (gap and not (letters.isupper() and len(letters) >= 2)):
        return m.group(0)  # USD1299: an amount; Windows 2000: a word and a number
    if digits.endswith("00") or digits[0] == "0":
        return m.group(0)
    head, tail = (digits[:2], digits[2:]) if len(digits) == 4 else (digits[0], digits[1:])
    return f"{letters} {head} " + (f"oh {tail[1]}" if tail[0] == "0" else tail)


def _before_en(text: str) -> tuple[str, list[str]]:
    text = _EN_MODEL_CODE_RE.sub(_en_model_code, text)
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
    return _LIANG_RE.sub(_liang, text)


def _after_zh(text: str) -> str:
    text = re.sub(r"(百分之|千分之)负", r"负\1", text)  # -5% is said 负百分之五 (wetext: 百分之负五)
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


# --- before language runs: readings wetext has no rule for ----------------------------------------------------------
#
# Applied to a whole chunk of plain text before it is cut into language runs (``normalize.normalize_chunk``), so
# symbols and Latin-letter units next to Chinese text are read in Chinese. Each rewrite puts Chinese words (or
# digits wetext reads right) in place of the written form:
#
# * ASCII sentence punctuation between Chinese characters (``你好.我是``) becomes its full-width form, so it ends a
#   sentence or clause like ``。``.
# * Digit strings that are not amounts are read digit by digit, 1 as 幺 and 0 as 零 (the mainland convention for
#   phone, room and ID numbers, 现汉 幺 ②): after a context word (电话, 房间, 订单号, 身份证号, 验证码... in
#   ``DIGIT_CONTEXT``), before 房间/室/号房, phone numbers with hyphens (010-12345678, 400-123-4567), 15/18-digit IDs.
# * Scores ``3-1`` / ``3:1`` with a sports word near (比分, 以, 战胜, 击败...) -> 三比一.
# * Blood pressure ``120/80`` after 血压/收缩压 -> 一百二十比八十 (wetext reads 120/80 as a fraction, and a lone 120
#   as the ambulance number 幺二零).
# * Numeric ranges ``2-3天``, ``第3-5章`` -> 到 (wetext reads some as 减).
# * Model names with a hyphen (``歼-10``, ``东风-41``): the hyphen goes (wetext reads it 负), unless a word such as
#   温度/零下 makes it a minus sign.
# * Units wetext misreads or leaves as letters (``mmol/L``, ``mmHg``, ``N·m``, ``km/h``: ``ZH_UNITS``) -> their
#   Chinese names (GB 3100-1993 法定计量单位 names; "/" is 每).
# * Comparison signs between operands: ``<`` 小于, ``>`` 大于, ``≤``/``<=`` 小于等于, ``≥``/``>=`` 大于等于, ``≠``/``!=``
#   不等于, ``=`` 等于 (English: "is less than" ...).
# * Decimal amounts written with 元 (``3.5元``) keep their decimal reading 三点五元 (wetext itself makes it 三元五角);
#   amounts with a currency sign are read as 元/角/分 (``_before_zh``).
# * A decimal before a unit or measure word is a quantity, never a date: wetext reads a decimal 10.1-12.31 as a
#   month.day (``10.8元`` -> 十月八日元, ``12.5公斤`` -> 十二月五日公斤) unless the word after it is one it lists
#   (米, 万...); before any of ``QUANTITY_UNITS`` it is read as a decimal here (十点八元, 十二点五公斤). Without a unit
#   (``10.1国庆``) wetext's date stays.
# * A minus sign before a percentage, a per mille, a temperature or a unit is a minus sign, never a model-name
#   hyphen (``仅-5%`` -> 负百分之五, ``降低了-5个百分点`` -> 负五个; wetext's own 百分之负五 becomes the spoken
#   负百分之五 after it); ``5‰`` -> 千分之五 (wetext leaves ‰ as a symbol).
# * A digit-string context word (``DIGIT_CONTEXT``) reaches only the number of its own clause, and never a count:
#   ``302号房间，预计1500人到场`` reads 一千五百人 (a number across a clause mark is a code only with 7+ digits, a
#   phone number after 电话，), and ``房间可容纳1500人`` too (a number before one of ``QUANTITY_UNITS`` is a count), and
#   ``手机售价5999`` (after one of ``AMOUNT_WORDS`` a number of fewer than 7 digits is an amount).
# * Model codes: Latin letters followed by 3+ digits (``RTX4090``, ``RTX 4090``, ``GTX1080Ti``, ``A380``, ``ISO9001``,
#   ``i7-13700K``, ``GB/T 7714-2015``: later groups after - or : too) are read digit by digit, 1 as 一 (四零九零,
#   一零八零; product and standard numbers are read so, 现汉 幺 reserves 幺 for phone, room and ID numbers); a round
#   number stays a number (``A100`` -> A一百), and so does an amount after a currency code (``RMB1500``,
#   ``CURRENCY_CODES``). In English text the same
#   codes are read in pairs as English speakers say them (``RTX4090`` -> "RTX forty ninety", ``A380`` -> "A three
#   eighty"; ``_before_en``).

_HANZI = "\u3400-\u4dbf\u4e00-\u9fff"
_ASCII_PUNCT_FULL = {".": "。", ",": "，", "!": "！", "?": "？", ";": "；", ":": "："}
_ASCII_PUNCT_RE = re.compile(f"(?<=[{_HANZI}”’」』）])([.,!?;:])(?=[{_HANZI}“‘「『（]|\\s*$)")
DIGIT_CONTEXT = ("电话", "手机", "号码", "热线", "拨打", "致电", "呼叫", "编号", "单号", "订单", "运单", "身份证", "证件号",
                 "房间", "房号", "门牌", "工号", "学号", "尾号", "密码", "验证码", "邮编", "邮政编码", "账号", "帐号",
                 "卡号", "航班", "车次", "微信", "QQ", "座位号", "序列号", "批号", "准考证", "会员号", "分机", "传真",
                 "客服", "联系方式", "车牌")
# Words between a context word and a number that make the number an amount (手机售价5999, 订单金额3999, 好友超过2000):
# a code after them only with 7+ digits (a phone number).
AMOUNT_WORDS = ("价", "费", "金额", "钱", "共", "约", "花", "卖", "值", "达", "超", "有", "数", "量", "率", "面积", "内存",
                "容量", "存储", "电池", "像素", "尺寸", "重", "长", "宽", "高", "好友", "粉丝", "余额", "多少",
                "几", "增", "减", "涨", "降", "第")
_DIGITS = "零幺二三四五六七八九"
_CONTEXT_NUMBER_RE = re.compile(
    "(" + "|".join(DIGIT_CONTEXT) + r")([^\d\n。！？!?]{0,6}?)(\d[\d\- ]{1,30}\d[Xx]?|\d)(?![\d.])")
_ROOM_RE = re.compile(r"(?<![\d.,])(\d{3,5})(?=\s*(?:房间|室|号房))")
_PHONE_RE = re.compile(r"(?<![\d\-])(0\d{2,3}-\d{7,8}|[48]00-\d{3}-\d{4}|1[3-9]\d-\d{4}-\d{4})(?![\d\-])")
_ID_RE = re.compile(r"(?<!\d)(\d{17}[\dXx]|\d{15})(?!\d)")
_SCORE_CONTEXT = ("比分", "以", "战胜", "击败", "负于", "胜", "负", "赢", "输", "战平", "逼平", "比赛", "决赛", "半场", "总比分",
                  "大比分", "获胜", "取胜", "告负", "球", "局")
_SCORE_RE = re.compile(r"(?<![\d.\-:])(\d{1,3})\s*[-:：]\s*(\d{1,3})(?![\d.\-:])")
_BP_RE = re.compile(r"((?:血压|收缩压|舒张压|高压|低压)[^\d\n]{0,4})(\d{2,3})\s*/\s*(\d{2,3})")
_RANGE_RE = re.compile(f"(?<![\\d.\\-])(\\d+(?:\\.\\d+)?)\\s*[-~～—–]\\s*(\\d+(?:\\.\\d+)?)(?=\\s*[{_HANZI}%℃°])(?![\\d\\-])")
_MINUS_CONTEXT = ("温度", "气温", "零下", "为", "是", "到", "至", "约", "低至", "降至", "达", "值", "差", "减", "负", "低",
                  "仅", "只有", "增长", "增速", "增幅", "涨幅", "跌幅", "降幅", "同比", "环比", "收益", "利润", "变化", "下降",
                  "上涨", "下跌", "回报", "率")
# 歼-10, 东风-41: a hyphen between a name and a number. Not before %, ‰, ℃, °: there it is a minus sign.
_MODEL_HYPHEN_RE = re.compile(f"([{_HANZI}]{{1,4}})-(\\d{{1,4}})(?![\\d.]|\\s*[%‰℃℉°])")
# Units: written form -> Chinese name. Longest first when matching. Sources: GB 3100-1993 (法定计量单位 names),
# 现汉 for 公里 (km), 毫米汞柱 (mmHg).
ZH_UNITS = {
    "mmol/L": "毫摩尔每升", "μmol/L": "微摩尔每升", "umol/L": "微摩尔每升", "mg/dL": "毫克每分升", "mg/L": "毫克每升",
    "g/L": "克每升", "km/h": "公里每小时", "m/s": "米每秒", "kg/m³": "千克每立方米", "mmHg": "毫米汞柱",
    "N·m": "牛米", "N.m": "牛米", "Nm": "牛米", "kPa": "千帕", "MPa": "兆帕", "hPa": "百帕", "kWh": "千瓦时",
    "kW·h": "千瓦时", "mAh": "毫安时", "kW": "千瓦", "MW": "兆瓦", "mA": "毫安", "mV": "毫伏", "mL": "毫升",
    "dL": "分升", "μg": "微克", "ug": "微克", "μm": "微米", "nm": "纳米", "kHz": "千赫兹", "MHz": "兆赫兹",
    "GHz": "吉赫兹", "Hz": "赫兹", "dB": "分贝", "kcal": "千卡", "kJ": "千焦", "mmol": "毫摩尔", "km²": "平方公里",
    "m²": "平方米", "m³": "立方米", "cm²": "平方厘米", "cm³": "立方厘米", "Pa": "帕", "g": "克",
}
_UNIT_RE = re.compile(r"(\d)\s*(" + "|".join(re.escape(u) for u in sorted(ZH_UNITS, key=len, reverse=True))
                      + r")(?![A-Za-z0-9²³/])")
_COMPARE = {"<=": "小于等于", ">=": "大于等于", "≤": "小于等于", "≥": "大于等于", "≠": "不等于", "!=": "不等于", "<": "小于",
            ">": "大于", "=": "等于"}
_COMPARE_EN = {"<=": " is less than or equal to ", ">=": " is greater than or equal to ",
               "≤": " is less than or equal to ", "≥": " is greater than or equal to ", "≠": " is not equal to ",
               "!=": " is not equal to ", "<": " is less than ", ">": " is greater than ", "=": " equals "}
_OPERAND = f"[A-Za-z0-9{_HANZI})）]"
_COMPARE_RE = re.compile(f"(?<={_OPERAND})\\s*(<=|>=|!=|≤|≥|≠|<|>|=)\\s*(?=[A-Za-z0-9{_HANZI}(（\\-])")
# Units and measure words after which a number is a quantity, never a date or a code: the measure words of
# ``LIANG_MEASURE_WORDS``, the Chinese unit names of ``ZH_UNITS``, and everyday units and currencies (GB 3100-1993
# names; 现汉 for 公斤, 斤, 两, 亩, 块 '元', 毛 '角'). Longest first when matching.
QUANTITY_UNITS = tuple(sorted((set(LIANG_MEASURE_WORDS) | set(ZH_UNITS.values()) | set(
    "元 块 角 毛 分 公斤 千克 克 斤 两 吨 米 公里 千米 厘米 毫米 里 升 毫升 亩 公顷 平方 立方 度 倍 万 亿 千 百 秒 分钟 "
    "小时 个月 年 人 岁 英寸 寸 尺 码 磅 美元 欧元 港元 日元 英镑 卢布 韩元 瓦 伏 安 摄氏度 元钱 口 只 件 辆 头 匹 斤重 "
    "公分 海里 英里 光年 帕 焦 卡 分贝 毫克 微克 纳米 像素 字 页 层 楼".split())), key=len, reverse=True))
_QUANTITY_UNIT_ALT = "|".join(re.escape(u) for u in QUANTITY_UNITS)
_PLAIN_DIGITS = "零一二三四五六七八九"
# A decimal wetext reads as month.day (10.1-12.31), before a unit, or before a range to a number with a unit
# (10.5到12.5公斤): read as a decimal.
_DATE_LIKE_DECIMAL_RE = re.compile(
    r"(?<![\d.,:/¥￥$€£\-])(1[0-2])\.(\d{1,2})(?![\d.])(?=\s*(?:到|至)?\s*(?:\d+(?:\.\d+)?\s*)?(?:"
    + _QUANTITY_UNIT_ALT + "))")
_PER_MILLE_RE = re.compile(r"(-?)(\d+(?:\.\d+)?)\s*‰")
_COUNT_AFTER_RE = re.compile(r"\s*(?:" + _QUANTITY_UNIT_ALT + ")")
# Latin letters (a word of its own) then 3+ digits, directly or after one space or hyphen: a model or standard code.
# A series digit may come between the letters and a hyphen (i7-13700K), and further number groups after a hyphen or
# a colon belong to the code (GB/T 7714-2015, ISO 9001:2015).
_MODEL_CODE_RE = re.compile(
    r"(?<![A-Za-z\d.])([A-Za-z]{1,10}|[A-Za-z]{1,3}\d{1,2}(?=-))([ \-]?)(\d{3,})((?:[-:]\d{2,})*)(?!\d|[.,:]\d)")
# Keeps wetext from reading "3.5元" as 元/角 (it passes private-use characters through); removed after wetext.
YUAN_MASK = "\ue001"
_YUAN_DECIMAL_RE = re.compile(r"(?<![¥￥\d.,])(\d+\.\d+)(\s*元)")


def digits_read_one_by_one(digits: str, one: str = "幺") -> str:
    """``"13800138000"`` -> ``"幺三八零零幺三八零零零"``: each digit in Chinese, 1 as ``one`` (幺 for phone, room and
    ID numbers, 现汉 幺 ②; 一 for model codes), hyphens and spaces as a space (a short break); other characters
    (the X of an ID number) stay."""
    out = []
    for ch in digits:
        if ch.isdigit():
            out.append(one if ch == "1" else _DIGITS[int(ch)])
        elif ch in "- ":
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(ch)
    return "".join(out).strip()


def chinese_integer(n: int) -> str:
    """``120`` -> ``"一百二十"``, ``10`` -> ``"十"``, ``105`` -> ``"一百零五"`` (0 <= n < 10**8), the standard
    reading of a cardinal number."""
    if n == 0:
        return "零"
    units = ["", "十", "百", "千"]

    def below_10k(x: int) -> str:
        out, zero = "", False
        for power in (3, 2, 1, 0):
            d = x // 10 ** power % 10
            if d == 0:
                zero = bool(out)
                continue
            if zero:
                out += "零"
                zero = False
            out += "零一二三四五六七八九"[d] + units[power]
        return out

    high, low = divmod(n, 10_000)
    text = (below_10k(high) + "万" + ("零" if 0 < low < 1000 else "") + below_10k(low)) if high else below_10k(low)
    return text[1:] if text.startswith("一十") else text


def chinese_decimal(integer: str, fraction: str) -> str:
    """``("10", "8")`` -> ``"十点八"``, ``("12", "05")`` -> ``"十二点零五"``: a decimal's standard reading, the
    integer part as a cardinal (``chinese_integer``) and each decimal digit on its own."""
    return chinese_integer(int(integer)) + "点" + "".join(_PLAIN_DIGITS[int(d)] for d in fraction)


def _model_code(m: re.Match, text: str) -> str:
    """Chinese reading of a model code's digits (see the comment above ``_MODEL_CODE_RE``)."""
    letters, gap, digits, groups = m.group(1), m.group(2), m.group(3), m.group(4)
    if letters.upper() in CURRENCY_CODES:
        return m.group(0)  # RMB1500: an amount
    if gap == " " and not letters.isupper():
        return m.group(0)  # "Windows 2000", "Top 250": a word and a number, read by wetext
    rest = "".join(" " + digits_read_one_by_one(g[1:], one="一") for g in re.findall(r"[-:]\d+", groups))
    if len(digits) <= 4 and digits[0] != "0" and digits.endswith("00"):
        return letters + chinese_integer(int(digits)) + rest  # A100 -> A一百, RTX 4000 -> RTX四千
    return letters + digits_read_one_by_one(digits, one="一") + rest


def _near(text: str, start: int, end: int, words: tuple[str, ...], before: int = 8, after: int = 6) -> bool:
    window = text[max(0, start - before):start] + " " + text[end:end + after]
    return any(w in window for w in words)


def before_language_runs(text: str) -> str:
    """Rewrite one chunk of plain text (see the comment above) before it is cut into language runs."""
    text = _ASCII_PUNCT_RE.sub(lambda m: _ASCII_PUNCT_FULL[m.group(1)], text)
    if not re.search(f"[{_HANZI}]", text):
        return _COMPARE_RE.sub(lambda m: _COMPARE_EN[m.group(1)], text)
    def context_number(m: re.Match) -> str:
        gap, digits = m.group(2), m.group(3)
        crosses_clause = any(mark in gap for mark in "，,；;、")
        is_count = _COUNT_AFTER_RE.match(text, m.end()) is not None
        is_amount = any(word in gap for word in AMOUNT_WORDS)
        if is_count or ((crosses_clause or is_amount) and sum(ch.isdigit() for ch in digits) < 7):
            return m.group(0)  # "房间，预计1500人", "手机售价5999": a count or amount, or a number of another clause
        return m.group(1) + gap + digits_read_one_by_one(digits)

    text = _CONTEXT_NUMBER_RE.sub(context_number, text)
    text = _PHONE_RE.sub(lambda m: digits_read_one_by_one(m.group(1)), text)
    text = _ID_RE.sub(lambda m: digits_read_one_by_one(m.group(1)), text)
    text = _ROOM_RE.sub(lambda m: digits_read_one_by_one(m.group(1)), text)
    text = _UNIT_RE.sub(lambda m: m.group(1) + ZH_UNITS[m.group(2)], text)
    text = _MODEL_CODE_RE.sub(lambda m: _model_code(m, text), text)
    text = _PER_MILLE_RE.sub(lambda m: ("负" if m.group(1) else "") + "千分之" + m.group(2), text)
    text = _BP_RE.sub(lambda m: m.group(1) + chinese_integer(int(m.group(2))) + "比" + chinese_integer(int(m.group(3))),
                      text)

    def score(m: re.Match) -> str:
        if _near(text, m.start(), m.end(), _SCORE_CONTEXT):
            return f"{m.group(1)}比{m.group(2)}"
        return m.group(0)

    text = _SCORE_RE.sub(score, text)
    text = _RANGE_RE.sub(lambda m: f"{m.group(1)}到{m.group(2)}", text)
    text = re.sub(r"第(\d+)\s*[-~～—–]\s*(\d+)", r"第\1到\2", text)
    text = _DATE_LIKE_DECIMAL_RE.sub(lambda m: chinese_decimal(m.group(1), m.group(2)), text)  # after the ranges

    def model_name(m: re.Match) -> str:
        if m.group(1).endswith(_MINUS_CONTEXT) or _COUNT_AFTER_RE.match(text, m.end()):
            return m.group(0)  # a minus sign: after 温度/零下..., or before a unit (降低了-5个百分点, 仅-3度)
        return m.group(1) + m.group(2)

    text = _MODEL_HYPHEN_RE.sub(model_name, text)
    text = _COMPARE_RE.sub(lambda m: _COMPARE[m.group(1)], text)
    return _YUAN_DECIMAL_RE.sub(lambda m: m.group(1) + YUAN_MASK + m.group(2), text)
