"""Grammar rules for the polyphones whose reading follows the sentence's grammar rather than the word.

The lexicon reads a polyphone inside a known word (银行 háng, 着急 zháo); these rules decide the function words and
the characters jieba leaves on their own (得 de/dé/děi, 地 de/dì, 了 le/liǎo, 着 zhe/zháo/zhāo, 还 hái/huán,
为 wèi/wéi, 长 cháng/zhǎng, 东西 dōngxī/dōngxi, 种 zhǒng/zhòng, 行 after measure words and 第N, 卡 qiǎ, 落 là,
打的 dī, 和 huó/hú, 看 kān, 结 jiē, 蒙 mēng, 撒 sǎ, 粘 nián, 冲 chòng, 折 shé, 宿 xiǔ, 脏 zāng, 喝 hè, 转 zhuàn,
扎 zā, measure words after a numeral (两卷 juàn, 两幢 zhuàng), verbs before aspect particles, after adverbial 地,
before a complement or a noun object and in reduplication A一A / A了A / A A子, AABB of a word 高高兴兴, separable
verb-object words 露了馅 / 睡个好觉, surnames after 姓 or before a title 曾老师).
Each rule states the grammar it follows and its source, and carries examples; the tests run every
example (``tests/unit/test_polyphone_rules.py``). Sources:

* 吕叔湘 主编《现代汉语八百词》(增订本, 商务印书馆 1999), cited as 八百词 with the entry;
* 《现代汉语词典》(第7版, 商务印书馆 2016), cited as 现汉 with the entry and sense;
* 朱德熙《语法讲义》(商务印书馆 1982), §3.3 (verb reduplication), §8.3 (separable verb-object words);
* 赵元任《中国话的文法》(Chao 1968, A Grammar of Spoken Chinese), §6.5 (separable compounds).

Rules see one run of Chinese characters (a clause: punctuation, digits and Latin letters end it) as ``Token`` s: the
words of jieba's segmentation, with the words the lexicon does not know split into lexicon sub-words and single
characters, each with jieba's part-of-speech tag (``Lexicon.tags``). A rule returns the readings it decides for one
token, or None to leave the token as it is. Rules never look at test sentences: the examples are the grammar books'
kind of example, written for this file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Token:
    """One word of a run. ``readings``: TONE3 per character; ``basis``: per character "word" (a lexicon phrase read
    it), "char" (read alone, default reading) or "rule" (a rule here decided it); ``tag``: jieba POS tag, "" when
    the word is not in jieba's dictionary; ``start``: offset of the word in the run."""

    text: str
    start: int
    tag: str
    readings: list[str]
    basis: list[str] = field(default_factory=list)
    rule: str | None = None  # name of the rule that changed it


@dataclass(frozen=True)
class Rule:
    """A grammar rule. ``applies_to``: token texts it looks at; ``decide(tokens, i)`` -> readings for
    ``tokens[i]`` or None; ``examples``: ``(sentence, character index, expected TONE3)``."""

    name: str
    applies_to: frozenset[str]
    decide: Callable[[list[Token], int], list[str] | None]
    source: str
    examples: tuple[tuple[str, int, str], ...]


def _prev(tokens: list[Token], i: int, k: int = 1) -> Token | None:
    return tokens[i - k] if i - k >= 0 else None


def _next(tokens: list[Token], i: int, k: int = 1) -> Token | None:
    return tokens[i + k] if i + k < len(tokens) else None


def _text(token: Token | None) -> str:
    return token.text if token is not None else ""


def _is_verb(token: Token | None) -> bool:
    return token is not None and token.tag.startswith("v")


def _is_adj(token: Token | None) -> bool:
    return token is not None and token.tag.startswith("a")


def _is_predicate(token: Token | None) -> bool:
    """Verb or adjective; jieba also tags some adjectives ``b`` (高兴) or ``z`` (悄悄)."""
    return _is_verb(token) or _is_adj(token) or _tag_in(token, "bz")


def _tag_in(token: Token | None, prefixes: str) -> bool:
    return token is not None and bool(token.tag) and token.tag[0] in prefixes


# Degree adverbs: they modify adjectives (八百词 很: 很+形).
_DEGREE = frozenset("很 太 挺 真 好 多 最 更 较 比较 非常 特别 十分 相当 越来越 那么 这么 这样 那样 不够 够 极 超 过 有多 "
                    "多么".split())


# --- 得 ---------------------------------------------------------------------------------------------------------------

# Adverbs and the copula after which 得 is the modal děi ("must"), not the complement marker (还得去, 就得走, 是得想想).
_DEI_BEFORE = frozenset("还 就 也 都 总 可 又 才 只 真 必 非 是 准 总得 这 那".split())


PERSONAL_PRONOUNS = frozenset("我 你 您 他 她 它 咱 我们 你们 他们 她们 它们 咱们 大家 自己".split())


# One-character adjectives and verbs that jieba's dictionary tags as something else (多 m, 美 ns, 气 n, 热 n, 香 ns,
# 乱 d ...), each a 形 or 动 entry of 现汉 (气 动 '生气; 使人生气', 多 形 '数量大', 美 形 '好看'): before 得 they are the
# predicate of a complement (气得说不出话, 多得数不清, 美得像画), never the subject of the modal děi.
PREDICATE_MONOSYLLABLES = frozenset("多 美 气 热 香 酸 辣 咸 闲 静 暗 富 乱 浑 飞 学 悲 紫 蓝".split())


def _is_predicate_before_de(token: Token | None) -> bool:
    return _is_predicate(token) or _text(token) in PREDICATE_MONOSYLLABLES


def _de(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _is_predicate_before_de(prev) and _text(prev) not in _DEI_BEFORE:
        return ["de5"]  # complement marker after a verb or adjective: 跑得很快, 好得很, 气得说不出话
    if _text(nxt) in ("了", "过"):
        return ["de2"]  # the verb 得 "obtain" with its aspect particle: 他得了第一名
    if _text(prev) in PERSONAL_PRONOUNS and nxt is not None and not _tag_in(nxt, "mq") and _text(nxt) != "到":
        return ["dei3"]  # subject + modal "must" + verb phrase (jieba tags some verb phrases n: 回家): 我得回家了
    if nxt is not None and _tag_in(nxt, "vdpmrtf"):
        return ["dei3"]  # modal "must / need" before a verb, adverb, preposition or amount: 你得早点来, 这得三天
    return ["de2"]


RULE_DE = Rule(
    "de", frozenset({"得"}), _de,
    "八百词 得 (dé 动 '得到'; de 助 '用在动词、形容词后连接补语'; děi 助动 '需要、必须')",
    (("他跑得很快。", 2, "de5"), ("你得早点来。", 1, "dei3"), ("他得了第一名。", 1, "de2"),
     ("我们还得去一趟。", 3, "dei3"), ("这件衣服洗得很干净。", 5, "de5"), ("天黑了，我得回家了。", 5, "dei3"),
     ("老板气得说不出话。", 3, "de5"), ("星星多得数不清。", 3, "de5"), ("这件事得早点办。", 3, "dei3")),
)


def _de_le(tokens: list[Token], i: int) -> list[str] | None:
    if _is_predicate_before_de(_prev(tokens, i)):
        return ["de5", "liao3"]  # potential complement V得了 "can V": 这么多菜你吃得了吗
    return None  # the lexicon's 得了 dé le ("got"): 他得了冠军


RULE_DE_LE = Rule(
    "de_le", frozenset({"得了"}), _de_le,
    "八百词 了 (liǎo 动, 可能补语 '动+得/不+了': 去得了, 受不了)",
    (("这么多菜你吃得了吗？", 7, "liao3"), ("这么多菜你吃得了吗？", 6, "de5"), ("他得了冠军。", 2, "le5")),
)

# --- 地 ---------------------------------------------------------------------------------------------------------------

# Words after which a lone 地 is the noun dì: prepositions, demonstratives, measure words, 的, and the verbs that take
# "ground, land" as their object (在地上 is one word, but 把地扫干净, 这块地, 他家的地 are not).
_DI4_AFTER = frozenset("的 把 在 从 到 往 向 这 那 哪 块 片 亩 满 遍 一 上 下 入 落 倒 种 扫 拖 占 买 卖 分 租 耕 平 整 翻 浇 犁 "
                       "各 本 外 此 该 其 每 之".split())
_LOCATIVES = frozenset("上 下 里 面 中 区 方 处 带 头 边 底 表 段 点 图 名 址 位 势 形 理 质 球".split())


def _di(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if (prev is None or _text(prev) in _DI4_AFTER or _text(prev).endswith("一") or _tag_in(prev, "mq")
            or _text(nxt)[:1] in _LOCATIVES):
        return ["di4"]  # the noun "ground, land": 这块地, 把地扫干净, 他家的地
    if (len(prev.text) >= 2 or _tag_in(prev, "adz") or prev.tag in ("ad", "ag", "zg", "vd")
            or prev.text.endswith(("然", "般", "样", "性"))):
        return ["de5"]  # adverbial marker after a (mostly polysyllabic) modifier: 慢慢地走, 高兴地说, 创造性地工作
    return ["di4"]


RULE_DI = Rule(
    "di", frozenset({"地"}), _di,
    "八百词 地 (de 助 '用在状语和动词之间'; 单音形容词作状语一般不加'地'); 现汉 地 dì ① 地球、土地",
    (("他慢慢地走了。", 3, "de5"), ("她高兴地说。", 3, "de5"), ("这块地很肥。", 2, "di4"),
     ("他不停地说话。", 3, "de5"), ("请把地扫干净。", 2, "di4"), ("他创造性地解决了问题。", 4, "de5")),
)

# --- 打的 dǎdī ----------------------------------------------------------------------------------------------------------

# Verbs of going that follow 打的 "take a taxi" in a serial-verb phrase (连动式: 打的去机场); the 的 of a 的-phrase
# (他打的电话, 我打的) is followed by a noun or ends the clause, never by a verb of going.
_GOING_VERBS = frozenset("去 到 回 来 走 回家 回来 回去 过去 过来 上班 下班 赶 赶到 进城 出城".split())


def _di_taxi(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_prev(tokens, i)) == "打" and _text(_next(tokens, i)) in _GOING_VERBS:
        return ["di1"]
    return None


RULE_DI_TAXI = Rule(
    "di_taxi", frozenset({"的"}), _di_taxi,
    "现汉 打的 dǎ//dī '〈口〉打车' (的 dī 名 '出租车': 的士, 打的); 连动式: 打的 + 去/回 + 处所",
    (("下雨了，我们打的回家。", 7, "di1"), ("这是他打的电话。", 4, "de5")),
)

# --- 和 huó / hú ------------------------------------------------------------------------------------------------------

# Objects of 和 huó "knead, mix with water" (现汉 和 huó: 和面, 和泥).
_HUO_OBJECTS = frozenset("面 泥 面粉 水泥 灰".split())
# Words after which a clause-final 和 is a predicate (a conjunction or preposition never ends a clause).
_PREDICATE_POSITION = frozenset("没 没有 能 要 就 都 又 也 才 快 还 还没 已经 连".split())  # not 不: 不和 bùhé


def _he(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    before = tokens[:i]
    k = i + 1
    while k < len(tokens) and (tokens[k].text in _SEPARABLE_INSIDE or _tag_in(tokens[k], "mq")):
        k += 1
    obj = tokens[k] if k < len(tokens) else None
    after_obj = _next(tokens, k) if obj is not None else None
    verb_before = any(_is_verb(t) and t.text not in ("在", "正在", "没", "没有") for t in before)
    if _text(obj) in _HUO_OBJECTS and (k > i + 1 or not verb_before and (after_obj is None or _is_verb(after_obj))):
        return ["huo2"]  # the verb "knead" with its object: 在厨房和面, 和了面 (not 米和面都涨价了: 面 + adverb)
    if _text(nxt) == "着" or (_text(nxt) in _SEPARABLE_INSIDE and _text(_next(tokens, i, 2)).endswith(("首", "诗"))):
        return ["he4"]  # "join in (singing), reply with a poem": 和着歌声, 和了一首诗
    if _text(nxt) in _SEPARABLE_INSIDE or (nxt is None and _text(prev) in _PREDICATE_POSITION):
        if any(t.text in _HUO_OBJECTS for t in before):
            return ["huo2"]  # its object before it: 面还没和
        return ["hu2"]  # the mahjong verb "win", which takes no object: 他又和了, 一把都没和
    return None


RULE_HE = Rule(
    "he", frozenset({"和"}), _he,
    "现汉 和 (huó 动 '在粉状物中加液体搅拌或揉弄使有黏性': 和面, 和泥; hè 动 '和谐地跟着唱; 依照别人诗词的题材和体裁做诗词': "
    "一唱百和, 和诗; hú 动 '打麻将或斗纸牌时某一家的牌合乎规定的要求, "
    "取得胜利'); 八百词 和 (hé 连/介: 连接名词或引进对象, 不带'了、过', 不单独作谓语)",
    (("奶奶在厨房和面。", 5, "huo2"), ("他和了面就去包饺子。", 1, "huo2"), ("他打牌又和了。", 4, "hu2"),
     ("今天手气不好，一把都没和。", 11, "hu2"), ("米和面都涨价了。", 1, "he2"), ("我和他是同学。", 1, "he2"),
     ("大家和着音乐唱歌。", 2, "he4"), ("两人性格不和。", 5, "he2")),
)

# --- 看 kān ---------------------------------------------------------------------------------------------------------

# Objects of 看 kān "look after, guard" (现汉 看 kān ① '守护照料': 看门, 看孩子, 看犯人, 看摊儿, 看仓库).
_KAN1_OBJECTS = frozenset("孩子 小孩 小孩子 孩儿 门 大门 家 犯人 俘虏 仓库 摊 摊子 摊儿 牲口 羊群 场子 铺子 店 行李".split())
# Verbs of visiting before which 看 + person is kàn "visit" (现汉 看 kàn ⑤ '访问、探望': 看朋友).
_VISIT_BEFORE = frozenset("去 来 回 回来 回去 过来 过去 专程 常".split())


def _kan(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_next(tokens, i)) in _KAN1_OBJECTS and _text(_prev(tokens, i)) not in _VISIT_BEFORE \
            and not any(t.text == "医院" for t in tokens[:i]):
        return ["kan1"]
    return None


RULE_KAN = Rule(
    "kan", frozenset({"看"}), _kan,
    "现汉 看 (kān ① '守护照料': 看门, 看孩子, 看犯人; kàn ⑤ '访问、探望': 看朋友)",
    (("周末我在家看孩子。", 5, "kan1"), ("老大爷晚上看仓库。", 5, "kan1"), ("我们去看孩子吧。", 3, "kan4"),
     ("他在看电视。", 2, "kan4")),
)

# --- 结 jiē -----------------------------------------------------------------------------------------------------------

# Fruit and seed words, the objects of 结 jiē "bear (fruit)": whole words, or words ending in these characters.
_FRUIT_WORDS = frozenset("果子 果实 种子 果儿 籽儿 葡萄 橘子 桔子 柿子 李子 栗子 豆子 穗子 果".split())
_FRUIT_ENDINGS = ("果", "瓜", "桃", "梨", "枣", "杏", "籽", "穗", "荚", "莓")
_AMOUNT_WORDS = frozenset("不少 很多 好多 许多 一些 好些 满 满了 满满".split())


def _is_fruit(token: Token | None) -> bool:
    return token is not None and (token.text in _FRUIT_WORDS or token.text.endswith(_FRUIT_ENDINGS)
                                  or (token.text.endswith("子") and token.text[:-1].endswith(_FRUIT_ENDINGS)))


def _jie(tokens: list[Token], i: int) -> list[str] | None:
    token, prev, nxt = tokens[i], _prev(tokens, i), _next(tokens, i)
    if token.text == "结果":
        if _text(nxt) in _SEPARABLE_INSIDE or _text(prev) in ("开花", "不", "会", "能", "才", "开始", "不再"):
            return ["jie1", "guo3"]  # the verb "bear fruit" (a noun takes no 了 and no 不/会): 开花结果, 树才结果
        return None
    k = i + 1
    while k < len(tokens) and (tokens[k].text in _SEPARABLE_INSIDE or tokens[k].text in _AMOUNT_WORDS
                               or _tag_in(tokens[k], "mq") or tokens[k].text in _DEGREE or tokens[k].text in "出大小"):
        k += 1
    if k < len(tokens) and _is_fruit(tokens[k]):
        return ["jie1"]  # 结 + (了/满/出 + amount) + fruit: 树上结了很多果子, 结满了苹果
    return None


RULE_JIE = Rule(
    "jie", frozenset({"结", "结果"}), _jie,
    "现汉 结 (jiē 动 '长出(果实或种子)': 结果, 结子; jié 动 '系, 编织; 结合; 了结'); 结果 (jiēguǒ 动 '长出果实'; "
    "jiéguǒ 名 '结局')",
    (("今年桃树结了很多桃子。", 4, "jie1"), ("架子上结满了黄瓜。", 3, "jie1"), ("这棵树明年才结果。", 6, "jie1"),
     ("他们去年结了婚。", 4, "jie2"), ("比赛的结果出来了。", 3, "jie2")),
)

# --- 蒙 mēng / 撒 sǎ / 粘 nián / 冲 chòng ---------------------------------------------------------------------------------


def _meng(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) in ("上", "住", "在", "着", "起", "起来", "上了"):
        return None  # méng "cover": 蒙上一块布, 蒙着眼睛
    if (_text(nxt) in PERSONAL_PRONOUNS or _text(nxt) in ("人", "对", "错", "对了", "错了") or _text(prev) == "瞎"
            or (_text(nxt) == "了" and _next(tokens, i, 2) is None)
            or (_is_verb(prev) and _text(nxt) in ("了", ""))):
        return ["meng1"]  # "cheat" with a person, "guess", "be stunned" after a verb: 别蒙我, 瞎蒙, 蒙对了, 被他蒙了, 吓蒙了
    return None


RULE_MENG = Rule(
    "meng", frozenset({"蒙"}), _meng,
    "现汉 蒙 (mēng ① '欺骗': 别蒙人 ② '胡乱猜测': 这回叫你蒙对了 ③ '昏迷': 他被打蒙了; méng '遮盖': 蒙上一块布)",
    (("你别蒙我。", 2, "meng1"), ("这道题是我瞎蒙的。", 6, "meng1"), ("他被人蒙了。", 3, "meng1"),
     ("他一下子被吓蒙了。", 6, "meng1"), ("她用布蒙住了眼睛。", 3, "meng2")),
)

# Complements and objects of 撒 sǎ "sprinkle, scatter" (grains, powder): sā ("let go, cast; let oneself go") is bound in
# words (撒手, 撒网, 撒娇, 撒谎, 撒野, 撒腿), which the lexicon reads, and in transliterated names (撒哈拉), left alone.
_SA3_AFTER = frozenset("下 在 上 满 到 遍 进 入 向 点 些 点儿 一些 一把 了 过 着".split())
_SA1_OBJECTS = frozenset("谎 娇 野 网 手 泼 欢 气 腿 酒疯 谎话".split())  # 撒了个谎, 撒了一次娇: the separable sā words


def _sa(tokens: list[Token], i: int) -> list[str] | None:
    nxt = _next(tokens, i)
    if any(t.text in _SA1_OBJECTS for t in tokens[i + 1:i + 4]):
        return None
    if _text(nxt) in _SA3_AFTER or any(t.text in ("往", "向") for t in tokens[:i]):
        return ["sa3"]  # 撒 + place, amount or particle: 撒在地上, 撒点盐, 往锅里撒 (撒了个谎: the separable word)
    return None


RULE_SA = Rule(
    "sa", frozenset({"撒"}), _sa,
    "现汉 撒 (sǎ ① '把颗粒状的东西分散着扔出去': 撒种, 撒盐 ② '散落': 把米撒了一地; sā ① '放开, 发出': 撒网, 撒手 "
    "② '尽量施展或表现出来': 撒娇, 撒野)",
    (("往锅里撒点盐。", 3, "sa3"), ("他把种子撒在地里。", 4, "sa3"), ("孩子撒了一地的米。", 2, "sa3"),
     ("他撒了个谎。", 1, "sa1"), ("她又在撒娇。", 3, "sa1")),
)

_NIAN2_AFTER = _DEGREE | frozenset("又 发 有点 有些 不 也 都 挺".split())
_ZHAN1_BEFORE = frozenset("在 住 上 了 着 到 起来 满 成 好 牢 紧 一起".split())


def _nian(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_prev(tokens, i)) in _NIAN2_AFTER and _text(_next(tokens, i)) not in _ZHAN1_BEFORE:
        return ["nian2"]  # the adjective "sticky" after a degree adverb: 又软又粘, 很粘 (粘在墙上: the verb zhān)
    return None


RULE_NIAN = Rule(
    "nian", frozenset({"粘"}), _nian,
    "现汉 粘 (zhān 动 '黏的东西附着在物体上; 用黏的东西使物体连接起来'); 黏 (nián 形, 粘 nián 为其旧写法: 《通用规范汉字表》2013); "
    "八百词 很 (很+形)",
    (("这种年糕很粘。", 5, "nian2"), ("糯米饭又香又粘。", 6, "nian2"), ("他把邮票粘在信封上。", 4, "zhan1")),
)


def _chong(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_prev(tokens, i)) in _DEGREE | {"有点", "有些"}:
        return ["chong4"]  # the adjective "forceful, strong (smell), blunt" after a degree adverb: 说话太冲, 酒味很冲
    return None


RULE_CHONG = Rule(
    "chong", frozenset({"冲"}), _chong,
    "现汉 冲 (chòng 形 '劲头足, 力量大; 气味浓烈': 酒味很冲; chōng 动 '向前直闯'); 八百词 很 (很+形)",
    (("这酒的味道很冲。", 6, "chong4"), ("他冲进了房间。", 1, "chong1")),
)

# --- 折 shé, 宿 xiǔ, 脏 zāng ----------------------------------------------------------------------------------------------


def _she(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if len(_text(prev)) == 1 and _is_verb(prev) and (nxt is None or _text(nxt) == "了"):
        return ["she2"]  # result complement "break (of a long thing)": 吹折了, 撅折了 (zhé "fold" takes an object)
    return None


RULE_SHE = Rule(
    "she", frozenset({"折"}), _she,
    "现汉 折 (shé 动 ① '断(多用于长条形的东西)': 树枝被风吹折了, 棍子撅折了; zhé 动 '折断; 弯; 折叠')",
    (("竹竿被他压折了。", 5, "she2"), ("他把信折了两折。", 3, "zhe2")),
)


def _xiu(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_prev(tokens, i)) in ("一", "两", "三", "几", "半", "整", "一整", "整整一"):
        return ["xiu3"]  # measure word of nights after a small numeral: 住了一宿, 三天两宿 (二十八宿 xiù: the lunar
        # mansions, a noun)
    return None


RULE_XIU = Rule(
    "xiu", frozenset({"宿"}), _xiu,
    "现汉 宿 (xiǔ 量 '用于计算夜': 住了一宿, 三天两宿; sù 动/名 '住宿')",
    (("我们在山上住了两宿。", 8, "xiu3"), ("学生宿舍在东边。", 2, "su4")),
)


def _zang(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_prev(tokens, i))[-1:] in ("心", "肝", "脾", "肺", "肾", "内", "五", "六") or \
            _text(_next(tokens, i))[:1] in ("气", "腑", "器"):
        return None  # an organ jieba split off: 肺脏, 脏气 (zàng)
    return ["zang1"]  # alone it is the adjective "dirty": zàng (viscera) is bound in words (心脏, 内脏, 脏器)


RULE_ZANG = Rule(
    "zang", frozenset({"脏"}), _zang,
    "现汉 脏 (zāng 形 '有尘土、汗渍、污垢等': 衣服脏了; zàng 名 '内脏', 只用于合成词: 心脏, 肝脏)",
    (("他的手很脏。", 4, "zang1"), ("小孩的衣服脏了。", 5, "zang1"), ("心脏在左边。", 1, "zang4"),
     ("吸烟伤害肺脏。", 5, "zang4")),
)

# --- measure words after a numeral --------------------------------------------------------------------------------

# Characters with a measure-word reading of their own (现汉, each entry's 量 sense), read so right after a numeral or
# an ordinal: 两卷书, 三幢楼, 一扎啤酒, 一担水, 几处, 一发子弹. Not 曲 (九曲 qū "bends") or 重 (一重 in names).
MEASURE_READINGS = {"卷": "juan4", "幢": "zhuang4", "扎": "za1", "担": "dan4", "斗": "dou3", "处": "chu4",
                    "发": "fa1", "间": "jian1"}
_BARE_NUMERAL_CHARS = frozenset("一二两三四五六七八九十百千万亿几〇零第余")


def _measure(tokens: list[Token], i: int) -> list[str] | None:
    prev = _prev(tokens, i)
    if prev is not None and all(c in _BARE_NUMERAL_CHARS for c in prev.text):
        return [MEASURE_READINGS[tokens[i].text]]  # a numeral alone (一些重, 两个重达: a measure word is already there)
    return None


RULE_MEASURE = Rule(
    "measure", frozenset(MEASURE_READINGS), _measure,
    "现汉 卷 juàn 量 (一卷书), 幢 zhuàng 量 (一幢楼), 扎 zā 量 '捆儿' (一扎线), 担 dàn 量 (一担水), 斗 dǒu 量, "
    "处 chù 量 (几处), 发 fā 量 (一发子弹), 间 jiān 量 (一间屋)",
    (("这套书一共有三卷。", 7, "juan4"), ("村口新盖了两幢楼。", 6, "zhuang4"), ("他挑来两担水。", 4, "dan4"),
     ("山上有几处泉水。", 4, "chu4"), ("他一共借了两卷。", 6, "juan4")),
)

# --- 喝 hè, 转 zhuàn, 扎 zā ----------------------------------------------------------------------------------------------


def _he4(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_next(tokens, i)) in ("一声", "一声儿"):
        return ["he4"]  # "shout", counted in shouts: 大喝一声 (hē "drink" is counted in cups: 喝一杯)
    return None


RULE_HE4 = Rule(
    "he4", frozenset({"喝"}), _he4,
    "现汉 喝 (hè 动 '大声喊叫': 大喝一声; hē 动 '把液体或流食咽下去')",
    (("门卫大喝一声。", 3, "he4"), ("他喝了一杯水。", 1, "he1")),
)

_ROTATION_BEFORE = frozenset("在 正在 不停 一直 不停地 飞快地 绕 绕着 围着 老是 总是".split())


def _zhuan(tokens: list[Token], i: int) -> list[str] | None:
    nxt = _next(tokens, i)
    if _text(nxt) in ("得", "圈", "圈儿", "圈子", "个不停", "不停") or \
            (nxt is None and any(t.text in _ROTATION_BEFORE for t in tokens[max(0, i - 4):i])):
        return ["zhuan4"]  # "rotate, revolve": takes no object; with 得, 圈 or as the clause's last word after 在/绕着
    return None  # zhuǎn "turn, pass on" takes an object or a direction: 转过身, 转告他, 向左转


RULE_ZHUAN = Rule(
    "zhuan", frozenset({"转"}), _zhuan,
    "现汉 转 (zhuàn 动 ① '旋转' ② '绕着某物移动, 打转': 轮子转得很快, 转圈子; zhuǎn 动 '改换方向、位置、形势等; 把一方的物品、"
    "信件、意见等传到另一方': 转身, 转告)",
    (("陀螺转得很快。", 2, "zhuan4"), ("月亮绕着地球转。", 6, "zhuan4"), ("他转过身来。", 1, "zhuan3")),
)

# Objects of 扎 zā "tie up, bind" (现汉 扎 zā: 扎辫子, 扎腰带); zhā "prick" takes 针 or a body part.
_ZA_OBJECT_ENDINGS = ("辫", "辫子", "辫儿", "腰带", "头发", "花环", "彩门", "篱笆", "马尾")


def _za(tokens: list[Token], i: int) -> list[str] | None:
    k = i + 1
    while k < len(tokens) and (tokens[k].text in _SEPARABLE_INSIDE or tokens[k].text in ("起", "上", "好", "成")
                               or _tag_in(tokens[k], "mq") or tokens[k].text == "条"):
        k += 1
    if k < len(tokens) and tokens[k].text.endswith(_ZA_OBJECT_ENDINGS):
        return ["za1"]
    return None


RULE_ZA = Rule(
    "za", frozenset({"扎"}), _za,
    "现汉 扎 (zā 动 '捆; 束': 扎辫子, 扎腰带; zhā 动 '刺': 扎针, 扎手)",
    (("她每天早上扎辫子。", 5, "za1"), ("奶奶给她扎了一条马尾辫。", 4, "za1"), ("护士给他扎了一针。", 4, "zha1")),
)

# --- 了 / 着 ------------------------------------------------------------------------------------------------------------


def _le(tokens: list[Token], i: int) -> list[str] | None:
    prev, before = _prev(tokens, i), _prev(tokens, i, 2)
    if _text(prev) in ("不", "得") and _is_predicate(before):
        return ["liao3"]  # potential complement V不了 / V得了: 来不了, 去得了
    return None


RULE_LE = Rule(
    "le", frozenset({"了"}), _le,
    "八百词 了 (liǎo 动, 可能补语 '动+得/不+了')",
    (("明天我去不了。", 5, "liao3"), ("我明白了。", 3, "le5")),
)


def _zhe(tokens: list[Token], i: int) -> list[str] | None:
    prev, before, nxt = _prev(tokens, i), _prev(tokens, i, 2), _next(tokens, i)
    if _text(prev) in ("一", "两", "几", "这", "那", "这一", "那一", "每一") and nxt is not None and not _is_verb(nxt):
        return ["zhao1"]  # measure word / noun "a move (in chess), a trick": 一着棋, 这一着 (the particle follows verbs)
    if _text(nxt) == "了":
        return ["zhao2"]  # resultative 着 "reach, succeed": the aspect particle zhe never takes 了 (睡着了, 点着了)
    if _text(prev) in ("不", "得") and _is_verb(before):
        return ["zhao2"]  # potential form V不着 / V得着: 睡不着, 找得着
    rest = tokens[i + 1:]
    while rest and rest[-1].text in ("吗", "吧", "呢", "啊"):
        rest = rest[:-1]
    if _is_verb(prev) and len(rest) >= 2 and rest[-1].text == "了" and not any(_is_verb(t) for t in rest[:-1]):
        return ["zhao2"]  # V着 + object + clause-final 了, "got, reached": 找着钥匙了 (the durative 着 describes a
        # state beside another verb: 拿着书走了)
    return ["zhe5"]  # aspect particle after a verb: 他坐着看书


RULE_ZHE = Rule(
    "zhe", frozenset({"着"}), _zhe,
    "八百词 着 (zhe 助 '表示动作的持续'; zháo 动 '用在动词后表示达到目的或有了结果', 可能式 '睡不着'); 现汉 着 zhāo "
    "名 '下棋时下一子或走一步': 一着棋",
    (("灯点着了。", 2, "zhao2"), ("我晚上睡不着。", 5, "zhao2"), ("他坐着看书。", 2, "zhe5"),
     ("他走错了一着棋。", 5, "zhao1"), ("我总算买着火车票了。", 4, "zhao2"), ("他拿着伞出门了。", 2, "zhe5")),
)

# --- 还 ---------------------------------------------------------------------------------------------------------------

# Words after which 还 is the verb huán "give back" when an object or the clause end follows (没还钱, 要还你).
_HUAN_AFTER = frozenset("没 没有 不 未 要 想 得 该 应该 必须 会 能 肯 愿意 按时 及时 如期 尽快 早点 去 来 准备 打算 记得 "
                        "忘了 别 快 还得 再".split())


def _hai_huan(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) in ("了", "过", "给", "清", "完", "回", "上"):
        return ["huan2"]  # the verb takes aspect particles and complements; the adverb does not: 还了钱, 还给我
    if _text(nxt) in ("回去", "回来") and _text(prev) in _HUAN_AFTER:
        return ["huan2"]  # a modal + the verb with its directional complement: 要按时还回去 (你还回来吗: the adverb)
    object_or_end = nxt is None or _tag_in(nxt, "nrmq")
    if _text(prev) in _HUAN_AFTER and object_or_end:
        return ["huan2"]  # negated or modal verb with its object: 我还没还钱, 你要还我
    if object_or_end and any(t.text == "把" for t in tokens[:i]):
        return ["huan2"]  # 把-construction: 把钱还我
    after = _next(tokens, i, 2)
    if _text(nxt) in PERSONAL_PRONOUNS and (after is None or _tag_in(after, "nmq")):
        return ["huan2"]  # the verb with its recipient (the adverb modifies a predicate, not a pronoun): 明天一定还你
    return ["hai2"]  # the adverb "still, also": 我还没吃饭


RULE_HAI_HUAN = Rule(
    "hai_huan", frozenset({"还"}), _hai_huan,
    "八百词 还 (hái 副; huán 动 '归还'); 动词带宾语、了/过和补语，副词修饰谓词",
    (("我还没还钱。", 1, "hai2"), ("我还没还钱。", 3, "huan2"), ("他还了那本书。", 1, "huan2"),
     ("你还记得吗？", 1, "hai2"), ("下个月一定还你。", 5, "huan2"), ("他还你一本书。", 1, "huan2"),
     ("你还好吗？", 1, "hai2"), ("用完了记得还回来。", 5, "huan2"), ("你还回来吗？", 1, "hai2")),
)

# --- 为 ---------------------------------------------------------------------------------------------------------------

# Monosyllabic adverbs before which 为 is wéi: degree (最为, 极为: 现汉 为 wéi ⑦ '附于单音副词后, 加强程度') and the copula
# after scope adverbs (均为, 皆为, 即为: 为 wéi ③ '是').
_WEI2_AFTER = frozenset("最 更 较 极 颇 甚 尤 大 广 深 略 稍 均 皆 即 乃 实 多 约 则 亦 仍 已 或 本 原 分别 主要 通常 一般 大多 "
                        "大都 依次 定 改 分 称 视 选 列 评 誉 转 化 译 变 成 作 当 推 封 立 拜 认 奉 尊".split())  # verb + 为: 改为, 选为


# Verbs before which 为 is the preposition wèi although they are verbs: modals and verbs of will (我愿意为你付出).
_MODALS = frozenset("要 想 愿意 应该 应当 能 能够 会 可以 肯 敢 得 必须 需要 值得 准备 打算 决定 继续 开始 专门 主动 努力 积极 "
                    "一直 始终 不断 正在 是 也 都 就 还 又 再 曾 曾经 已经 将 来 去".split())


# People one does something for (为 wèi + person + verb: 多为别人着想); 多为 + other nouns is "mostly are" (多为学生).
_BENEFICIARIES = frozenset("别人 他人 大家 人民 群众 父母 孩子 家人 朋友 顾客 病人 学生们 社会 国家 集体".split())


def _wei(tokens: list[Token], i: int) -> list[str] | None:
    prev = _prev(tokens, i)
    rest = tokens[i + 1:]
    if _text(prev) == "多" and rest and (_tag_in(rest[0], "r") or rest[0].text in _BENEFICIARIES) and \
            any(_is_verb(t) for t in rest[1:]):
        return ["wei4"]  # the adverb 多 "more" + preposition 为 + NP + VP: 要多为别人想想 (多为学生: "mostly are")
    if _text(prev) in _WEI2_AFTER or (_is_verb(prev) and _text(prev) not in _MODALS):
        return ["wei2"]  # verb + 为 "as, into" and adverb + 为: 改为, 描述为, 最为
    if any(t.text == "以" for t in tokens[:i]):
        return ["wei2"]  # 以 A 为 B "take A as B": 以人民为中心
    if any(t.text == "所" for t in rest):
        return ["wei2"]  # passive 为 … 所: 为人所知
    # A predicate after 为 that no 的 follows is the verb phrase of "为 + NP + VP" (a predicate before 的 only
    # modifies a noun: 为现在使用的名称).
    last_de = max((k for k, t in enumerate(rest) if t.text in ("的", "之")), default=-1)
    if not any(_is_predicate(t) for t in rest[last_de + 1:]):
        return ["wei2"]  # copula with a noun or amount: 面积为一百平方公里, 首都为北京
    return ["wei4"]  # preposition "for, because of" before a noun phrase and a verb: 他为人民服务


RULE_WEI = Rule(
    "wei", frozenset({"为"}), _wei,
    "八百词 为 (wéi 动 '作为、成为、是', 以…为…, 为…所…; wèi 介 '引进动作的对象、目的、原因', 为+名+动)",
    (("他为人民服务。", 1, "wei4"), ("面积为一百平方公里。", 2, "wei2"), ("以人民为中心。", 3, "wei2"),
     ("这一点最为重要。", 4, "wei2"), ("我为你高兴。", 1, "wei4"), ("括号里的名字为现在使用的名称。", 6, "wei2"),
     ("他被描述为英雄。", 4, "wei2"), ("我愿意为你付出一切。", 3, "wei4"), ("你应该多为父母考虑。", 4, "wei4"),
     ("来这里的人多为学生。", 6, "wei2")),
)

# --- 长 ---------------------------------------------------------------------------------------------------------------

_ZHANG3_BEFORE = frozenset("得 大 高 胖 出 满 成 着 过 了 个子 头发 胡子 牙".split())


# Units of length and time: after them 长 is the adjective even before 了 (三米长了); after an individual classifier
# (一棵长了三百年的树, 一株长着青苔的树) a verbal particle makes 长 the verb.
_UNITS = ("米", "尺", "寸", "丈", "里", "码", "年", "天", "月", "周", "时", "钟", "秒", "倍", "截", "段", "点")
_VERBAL_PARTICLES = frozenset("了 着 过 出 满 得".split())


# Things that are long but never grow: before 长得 they make 长 the adjective with a degree complement
# (这条路长得望不到头, cháng); after anything else 长得 is the verb zhǎng (长得很高, 一个长得很帅的人).
_LONG_NOT_GROWING = ("路", "河", "江", "街", "桥", "绳", "绳子", "线", "夜", "日子", "时间", "假期", "寒假", "暑假",
                     "队", "队伍", "走廊", "隧道", "句子", "文章", "名字", "会", "电影", "故事", "距离", "铁路", "公路")


def _chang_zhang(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) == "得":
        # 长得 + complement: the verb "grow; look (so)" (长得很高, 长得像他), after a numeral or a time word too
        # (一个长得很帅的人, 这几年长得很快); the adjective only after a thing that cannot grow.
        return ["chang2"] if _text(prev).endswith(_LONG_NOT_GROWING) else ["zhang3"]
    if _tag_in(prev, "mq") and not _text(prev).endswith(_UNITS) and _text(nxt) in _VERBAL_PARTICLES:
        return ["zhang3"]  # verb "grow" after a classifier: 一棵长了三百年的树, 一个长着胡子的人
    if _text(prev) in _DEGREE or _tag_in(prev, "mq"):
        return ["chang2"]  # adjective "long": degree adverbs and measures modify adjectives (很长, 三米长)
    if _text(nxt) in _ZHANG3_BEFORE:
        return ["zhang3"]  # verb "grow" with its complement or aspect particle: 长得很高, 长大, 长了一岁
    if _text(prev) == "之" or (len(_text(prev)) >= 2 and _tag_in(prev, "nv") and nxt is None):
        return ["zhang3"]  # noun "head, chief" after the group it heads: 各部门之长, 指挥长
    return ["chang2"]  # the adjective, also in 长长的


RULE_CHANG_ZHANG = Rule(
    "chang_zhang", frozenset({"长"}), _chang_zhang,
    "现汉 长 (cháng 形 '两点之间距离大'; zhǎng 动 '生长、成长', with a complement of degree or state after 得 it says how "
    "someone grew or looks); 八百词 很 (很+形), 得 (动/形+得+补语)",
    (("这条河很长。", 4, "chang2"), ("他长得很高。", 1, "zhang3"), ("这根绳子三米长。", 6, "chang2"),
     ("一个长得很帅的小伙子。", 2, "zhang3"), ("那个长着大胡子的人。", 2, "zhang3"), ("这几年孩子长得很快。", 5, "zhang3"),
     ("那位长得很漂亮的姑娘。", 2, "zhang3"), ("这条路长得望不到头。", 3, "chang2"),
     ("孩子又长了一岁。", 3, "zhang3"), ("他是这支部队的指挥长。", 9, "zhang3"),
     ("墙角有一株长着青苔的老树。", 5, "zhang3"), ("桌上有一根长绳子。", 5, "chang2")),
)

# --- 东西 --------------------------------------------------------------------------------------------------------------

# Words next to 东西 that make it the two directions (dōngxī, "east and west; from east to west"): its extent or the
# sides it names (东西走向, 东西两侧, 东西长三里, 横贯东西).
_DONGXI_DIRECTION_AFTER = frozenset("部 方 走向 方向 两侧 两边 两端 两岸 两面 两翼 两头 之间 相距 距离 长 宽 全长 长约 宽约 跨度 横跨 "
                                    "延伸 向 走 长达 宽达 对称 分布 贯通 各 约".split())
_DONGXI_DIRECTION_BEFORE = frozenset("横贯 贯穿 横跨 纵贯 连接 沟通 连通 贯通 南北 东南 沿".split())


def _dongxi(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) in _DONGXI_DIRECTION_AFTER or _tag_in(nxt, "m") or _text(prev) in _DONGXI_DIRECTION_BEFORE:
        return ["dong1", "xi1"]  # the directions: 东西走向, 东西长三里, 横贯东西
    return ["dong1", "xi5"]  # a thing, things: 买东西, 这东西真好用 (the neutral tone is the word's own)


RULE_DONGXI = Rule(
    "dongxi", frozenset({"东西"}), _dongxi,
    "现汉 东西 (dōngxī ① '东边和西边' ② '从东到西(距离)'; dōng·xi ① '泛指各种具体的或抽象的事物' ② '特指人或动物')",
    (("我去超市买东西。", 6, "xi5"), ("这东西真好用。", 2, "xi5"), ("他总是忘带东西。", 6, "xi5"),
     ("这条街东西走向。", 4, "xi1"), ("城墙东西长三里。", 3, "xi1"), ("一条大河横贯东西。", 7, "xi1"),
     ("广场东西两侧都是商店。", 3, "xi1")),
)

# --- 种 ---------------------------------------------------------------------------------------------------------------

_ZHONG4_BEFORE = frozenset("了 着 过 上 下 出 在 好 完 满 树 花 菜 地 田 豆 瓜 草 粮 麦 稻 树苗 玉米 水稻 小麦 庄稼 果树 蔬菜 "
                           "牛痘 疫苗".split())
_ZHONG3_AFTER = frozenset("这 那 哪 各 某 每 此 该 同 另 一 几 多 何 本 其 任何 这样 那样 不同 多少 这么 那么 各种 某些".split())
_ZHONG4_AFTER = frozenset("要 想 去 来 在 会 能 可以 打算 准备 开始 喜欢 爱 不 没 别 正在 亲手 负责".split())


def _zhong(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) in _ZHONG4_BEFORE:
        return ["zhong4"]  # verb "plant" with aspect particle, complement or crop: 种了, 种树
    if _text(prev) in _ZHONG3_AFTER or _tag_in(prev, "mq"):
        return ["zhong3"]  # measure word / noun "kind, seed" after a numeral or demonstrative: 这种花, 三种
    if _text(prev) in _ZHONG4_AFTER or prev is not None and prev.tag == "t":
        return ["zhong4"]  # verb after a modal, a negation or a time word (adverbial before the predicate): 他想种一些,
        # 这块地今年种玉米
    return ["zhong3"]


RULE_ZHONG = Rule(
    "zhong", frozenset({"种"}), _zhong,
    "现汉 种 (zhǒng 名/量 '种子、种类'; zhòng 动 '种植'); 八百词 了 (动态助词用在动词后); 时间词作状语在谓语前",
    (("我种了一棵树。", 1, "zhong4"), ("这种花很香。", 1, "zhong3"), ("他们在山上种树。", 5, "zhong4"),
     ("有三种颜色。", 2, "zhong3"), ("这片田去年种的是小麦。", 5, "zhong4")),
)

# --- 行 after numerals and demonstratives -------------------------------------------------------------------------------

_NUMERAL_CHARS = frozenset("一二两三四五六七八九十百千万几数半")


def _hang_xing(tokens: list[Token], i: int) -> list[str] | None:
    token, prev, nxt = tokens[i], _prev(tokens, i), _next(tokens, i)
    if len(token.text) == 2 and token.text[0] in _NUMERAL_CHARS and _text(prev) == "第":
        return [token.readings[0], "hang2"]  # ordinal line: 第三行, 第五行 (not 五行 wǔxíng "the five elements")
    if token.text == "一行":
        if _tag_in(nxt, "m") or _text(nxt)[:1] in ("人", "十", "二", "三", "四", "五", "六", "七", "八", "九", "两") \
                or (nxt is None and _tag_in(prev, "rn")):
            return ["yi1", "xing2"]  # 一行 "a travelling party": 我们一行五人 (现汉 一行 yīxíng)
        if _text(prev) in ("这", "那", "哪", "干", "这个", "那个"):
            return ["yi1", "hang2"]  # "this line of work": 他在这一行干了十年 (现汉 行 háng ③ 行业)
        return ["yi1", "hang2"]  # measure word "a line": 一行字
    if (prev is not None and (prev.text[-1] in _NUMERAL_CHARS or prev.tag == "m")) or \
            (_text(prev) in ("这", "那", "哪") and _tag_in(nxt, "n")):
        return ["hang2"]  # measure word "row, line": 两行字, 这行字 (现汉 行 háng ① 行列, 量词)
    return None


RULE_HANG_XING = Rule(
    "hang_xing", frozenset({"行", "一行"} | {n + "行" for n in "二两三四五六七八九十"}), _hang_xing,
    "现汉 行 (háng ① 行列、量词 ③ 行业; 一行 yīxíng '一群同行的人')",
    (("他在这一行干了十年。", 4, "hang2"), ("我们一行五人去了北京。", 3, "xing2"), ("黑板上写着两行字。", 6, "hang2"),
     ("请读第五行的句子。", 4, "hang2")),
)

# --- verbs: aspect particles and reduplication ----------------------------------------------------------------------

# Characters whose readings split into a verb reading and non-verb readings (noun, measure word, adjective), each from
# 现汉's entries: only the verb takes aspect particles (了/着/过) and reduplicates (A一A, A了A).
VERB_READINGS = {
    "数": "shu3", "量": "liang2", "种": "zhong4", "称": "cheng1", "削": "xiao1", "钻": "zuan1", "担": "dan1",
    "扇": "shan1", "盛": "cheng2", "刨": "pao2", "铺": "pu1", "钉": "ding4", "卷": "juan3", "缝": "feng2",
    "传": "chuan2", "教": "jiao1", "处": "chu3", "弹": "tan2", "藏": "cang2", "散": "san4",
    "喷": "pen1", "还": "huan2", "磨": "mo2", "挑": "tiao1", "扎": "zha1",
    "待": "dai1", "中": "zhong4", "系": "ji4", "挣": "zheng4", "澄": "deng4",
}
_ASPECT_AFTER = frozenset("了 着 过 一下 一下儿 一会儿 一遍 起来".split())


def _verb_aspect(tokens: list[Token], i: int) -> list[str] | None:
    if _text(_next(tokens, i)) in _ASPECT_AFTER:
        return [VERB_READINGS[tokens[i].text]]
    prev = _prev(tokens, i)
    if _text(prev).endswith("地") and prev.readings[-1] == "de5":
        return [VERB_READINGS[tokens[i].text]]  # after the adverbial marker 地 comes the verb: 不停地扇, 仔细地量
    return None


RULE_VERB_ASPECT = Rule(
    "verb_aspect", frozenset(VERB_READINGS) - {"还", "种"}, _verb_aspect,
    "八百词 了/着/过 (动态助词, 用在动词后); 一下 (用在动词后); 地 (用在状语和动词之间); 现汉 for each character's verb "
    "reading (待 dāi '停留': 待一会儿; 中 zhòng '正对上、受到': 中了奖; 澄 dèng '使液体里的杂质沉下去')",
    (("请量一下体温。", 1, "liang2"), ("他数了三遍。", 1, "shu3"), ("她削着苹果。", 1, "xiao1"),
     ("你在这儿待一会儿。", 4, "dai1"), ("他中了头奖。", 1, "zhong4"), ("她轻轻地扇。", 4, "shan1"),
     ("水太浑，先澄一会儿。", 5, "deng4")),
)


def reduplication_readings(run: str) -> dict[int, str]:
    """Offsets of ``run`` in a verb reduplication A一A / A了A whose A is in ``VERB_READINGS`` -> the verb reading
    (and 一 -> yi1, its citation tone). 朱德熙《语法讲义》§3.3: only verbs reduplicate as A一A / A了A.

    Also the verb before its own noun X子 (a cognate object, 现汉 扇 shān 动 '摇动扇子' / shàn 名 扇子; 钉钉子): the
    first A of A A子 is the verb reading."""
    out: dict[int, str] = {}
    for i in range(len(run) - 2):
        a, mid = run[i], run[i + 1]
        if a == run[i + 2] and mid in "一了" and a in VERB_READINGS:
            out[i] = out[i + 2] = VERB_READINGS[a]
            out[i + 1] = "yi1" if mid == "一" else "le5"
        elif a == mid and run[i + 2] == "子" and a in VERB_READINGS and run[i:i + 3] != "子子":
            out[i] = VERB_READINGS[a]
    return out


# Aspect particles and the amounts that may stand between the two parts of a separable verb-object word.
_SEPARABLE_INSIDE = frozenset("了 过 着".split())
_DIRECTIONAL_COMPLEMENTS = frozenset("来 去 上 下 进 出 回 过 起 开 上来 上去 下来 下去 进来 进去 出来 出去 回来 回去 "
                                     "过来 过去 起来 开来".split())
_CLASSIFIERS = frozenset("个 张 次 回 顿 场 口 把 趟 遍 下 声 件 条 点 些 套 份 段 阵 番 招 手 步 觉 宿 晚".split())
_QUANTITY_WORDS = frozenset("不少 很多 好多 许多 一些 好些 几 几次 一次".split())


def separable_readings(tokens: list[Token], phrases: dict[str, tuple[str, ...]]) -> dict[int, str]:
    """Offsets of a lone character read on its own that is the verb of a separable verb-object word (离合词: 露馅 ->
    露了馅, 露面 -> 露了一次面, 折本 -> 折了不少本钱, 睡觉 -> 睡个好觉, 折跟头 -> 折了个跟头) -> its reading in that
    word, where it differs. 赵元任《中国话的文法》§6.5 / 朱德熙《语法讲义》§8.3 (离合词: an aspect particle, an amount
    and a modifier of the object go between the verb and its object). A one-character object read on its own takes
    its reading in the word too (睡个好觉 jiào), unless that is a neutral tone. Without an aspect particle the verb
    must be tagged a verb and the amount end in a measure word (not 一 + 只, 曾 + 多次 + 参, 废 + 朝 + 三日).
    ``phrases``: the lexicon's words."""
    out: dict[int, str] = {}
    for i, token in enumerate(tokens[:-1]):
        if len(token.text) != 1 or token.basis[0] != "char":
            continue
        k = i + 1
        particle = tokens[k].text in _SEPARABLE_INSIDE
        if particle:
            k += 1
        elif not _is_verb(token):
            continue  # without an aspect particle only a word tagged as a verb (not 一 + 只, 曾 + 多次 + 参)
        amounts = 0
        while k < len(tokens) - 1 and (_tag_in(tokens[k], "mq") or tokens[k].text in _QUANTITY_WORDS):
            k, amounts = k + 1, amounts + 1
        if amounts and not particle and not (_tag_in(tokens[k - 1], "q") or tokens[k - 1].text in _QUANTITY_WORDS
                            or tokens[k - 1].text[-1] in _CLASSIFIERS):
            continue  # an amount ends in a measure word (一次, 个); a bare number is no amount of an object (废朝三日)
        if amounts and k < len(tokens) - 1 and len(tokens[k].text) == 1 and _is_adj(tokens[k]):
            k += 1  # a one-character modifier of the object after the amount: 睡了一个好觉
        if k == i + 1 or k >= len(tokens) or tokens[k].text in _DIRECTIONAL_COMPLEMENTS:
            continue  # nothing between (not a separated word), or a complement, not an object: 晕了过去
        obj = tokens[k]
        for word in (token.text + obj.text, token.text + obj.text[0]):
            reading = phrases.get(word)
            if reading is not None and len(word) <= 3:
                if reading[0] != token.readings[0]:
                    out[token.start] = reading[0]
                if len(word) == 2 and len(obj.text) == 1 and obj.basis[0] == "char" and reading[1] != obj.readings[0] \
                        and not reading[1].endswith("5") and _is_verb(token):
                    out[obj.start] = reading[1]  # the object read alone takes its reading in the word: 睡个好觉 jiào
                break
    return out


# Characters whose non-verb readings occur only bound in words (削弱 xuē, 钻石 zuàn, 店铺 pù, 宗教 jiào...), so a lone
# one is the verb (现汉, each entry). Not after a numeral, measure word or demonstrative (一扇门: the measure word).
STANDALONE_VERB_READINGS = {
    "削": "xiao1", "钻": "zuan1", "铺": "pu1", "盛": "cheng2", "磨": "mo2", "称": "cheng1", "传": "chuan2",
    "藏": "cang2", "教": "jiao1", "弹": "tan2", "喷": "pen1", "刨": "pao2",
    "挣": "zheng4", "切": "qie1", "系": "ji4",
}
# (挣 zhēng only in 挣扎/挣揣; 切 qiè in 一切, 亲切, 切记...; 系 xì in 关系, 系统, 中文系: after a noun, see below.)


# Of those, the ones whose other readings are bound in written Chinese too, so that before a common noun they are the
# verb (削 xuē, 铺 pù, 盛 shèng also stand alone in classical text, names and places: 削亲王品级, 递铺街道, 盛宣怀).
_FREE_VERBS = frozenset("挣 切 系 教".split())
_VERB_POSITION_AFTER = frozenset("来 去 要 想 会 能 在 正在 给 帮 替 先 再 又 也 都 就 才 快 慢慢 赶紧 一起 不 没 别 请 让 叫".split())


# Prepositions of a phrase before the verb (给/替/帮 + person + verb); not 和/与/跟/同, also conjunctions of nouns.
_BENEFACTIVE = frozenset("给 替 帮 为 向 对 用 拿 把 被 让 叫".split())


def _standalone_verb(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if _text(nxt) == "得" and _next(tokens, i, 2) is not None or \
            (_text(nxt)[:1] == "不" and len(_text(nxt)) == 2 and _is_verb(nxt)):
        return [STANDALONE_VERB_READINGS[tokens[i].text]]  # V得 + complement, potential V不C: 铺得整整齐齐, 盛不下
    if tokens[i].text in _FREE_VERBS and ((_tag_in(nxt, "m") and tokens[i].text == "挣") or _text(nxt) in ("好", "紧", "上", "住", "完")):
        return [STANDALONE_VERB_READINGS[tokens[i].text]]  # verb + amount object or result complement: 一天挣两百块,
        # 系好鞋带 (an adverbial amount before it is no measure word of it; only 挣 takes an amount alone: 系 +
        # 第二 is the copula xì, 教二旅 an abbreviation)
    if _tag_in(prev, "mq") or _text(prev) in ("这", "那", "哪", "一") or \
            (prev is not None and prev.text[-1] in _NUMERAL_CHARS):
        return None  # 一扇门, 这扇窗: the measure word / noun keeps its reading
    # In verb position only: after a subject pronoun, an adverb, a preposition phrase or a modal (我来削梨, 往洞里钻),
    # or before a pronoun object (教我们). A lone one inside a name (金扇虫) is left to its default.
    before = _prev(tokens, i, 2)
    if _tag_in(nxt, "r") or _text(prev) in _VERB_POSITION_AFTER or _tag_in(prev, "rdpf") or \
            (_text(before) in _BENEFACTIVE and _tag_in(prev, "nr") and tokens[i].text != "系"):  # 给妈妈削苹果
        return [STANDALONE_VERB_READINGS[tokens[i].text]]
    if nxt is not None and nxt.tag in ("n", "nz") and tokens[i].text in _FREE_VERBS and \
            not (tokens[i].text == "系" and _tag_in(prev, "n")):
        return [STANDALONE_VERB_READINGS[tokens[i].text]]  # verb + noun object: 切菜, 系鞋带, 在中学教数学
        # (系 after a noun is the department: 农学系教授)


RULE_STANDALONE_VERB = Rule(
    "standalone_verb", frozenset(STANDALONE_VERB_READINGS), _standalone_verb,
    "现汉 削 xiāo/xuē (xuē 用于合成词), 钻 zuān/zuàn, 铺 pū/pù, 教 jiāo/jiào, 藏 cáng/zàng, 挣 zhèng/zhēng (zhēng 只在 "
    "挣扎), 切 qiē/qiè (qiè 用于合成词: 一切、亲切), 系 jì '打结' / xì (关系、中文系) ...",
    (("我来削梨。", 2, "xiao1"), ("老师教我们唱歌。", 2, "jiao1"), ("他往洞里钻。", 4, "zuan1"),
     ("他一天能挣两百块。", 4, "zheng4"), ("快系好安全带。", 1, "ji4"), ("她在学校教英语。", 4, "jiao1"),
     ("他是物理系教授。", 4, "xi4"), ("她把被子铺得很平。", 4, "pu1"), ("这个碗盛不下两碗汤。", 3, "cheng2"),
     ("他一个月能挣五千。", 5, "zheng4"), ("快把鞋带系紧。", 4, "ji4"), ("她在给客人削梨。", 5, "xiao1")),
)

# --- 只 as a measure word ---------------------------------------------------------------------------------------------


def _zhi(tokens: list[Token], i: int) -> list[str] | None:
    prev, nxt = _prev(tokens, i), _next(tokens, i)
    if prev is not None and prev.text[-1] in _NUMERAL_CHARS:
        return ["zhi1"]  # measure word after a numeral: 三只猫
    if _text(prev) in ("这", "那", "哪", "每", "某", "几") and _tag_in(nxt, "n"):
        return ["zhi1"]  # after a demonstrative before a noun: 这只狗 (but 这只是…: the adverb zhǐ)
    return None


RULE_ZHI = Rule(
    "zhi", frozenset({"只"}), _zhi,
    "现汉 只 (zhī 量词 '用于某些成对的东西中的一个, 用于动物'; zhǐ 副词 '仅仅')",
    (("我家有三只猫。", 4, "zhi1"), ("这只狗很可爱。", 1, "zhi1"), ("这只是开始。", 1, "zhi3")),
)

# --- 卡 qiǎ, 落 là --------------------------------------------------------------------------------------------------


def _qia(tokens: list[Token], i: int) -> list[str] | None:
    prev = _prev(tokens, i)
    if _text(_next(tokens, i)) in ("在", "住") and not (_text(prev) in ("的", "这", "那", "张", "一") or _tag_in(prev, "mq")):
        return ["qia3"]  # the verb "be stuck" with its place or result: 鱼刺卡在喉咙里 (not 我的卡在钱包里: the noun)
    return None


RULE_QIA = Rule(
    "qia", frozenset({"卡"}), _qia,
    "现汉 卡 (qiǎ 动 '夹在中间不能活动': 鱼刺卡在嗓子里; kǎ 名 卡片、卡车)",
    (("鱼刺卡在嗓子里。", 2, "qia3"), ("我的卡在钱包里。", 2, "ka3")),
)


def _la(tokens: list[Token], i: int) -> list[str] | None:
    if any(t.text == "把" for t in tokens[:i]):
        return ["la4"] + tokens[i].readings[1:]  # 把 + object + 落: "leave behind" (luò "fall" takes no 把 object)
    return None


RULE_LA = Rule(
    "la", frozenset({"落", "落下"}), _la,
    "现汉 落 (là 动 '把东西放在一处忘记拿走': 把它落在家里了; luò 动 '物体因失去支持而下来'); 八百词 把 (把+宾语+动词: 处置)",
    (("我把书落在家里了。", 3, "la4"), ("树叶落在地上。", 2, "luo4"), ("别把东西落下。", 4, "la4")),
)

REDUPLICATION_EXAMPLES = (("请数一数有多少人。", 1, "shu3"), ("他量了量身高。", 3, "liang2"), ("她拿着扇子扇扇子。", 5, "shan1"))
SEPARABLE_EXAMPLES = (("说着说着就露了馅。", 5, "lou4"), ("他只露了一次面。", 2, "lou4"), ("他做生意折了本。", 4, "she2"),
                      ("考完试我要睡个好觉。", 8, "jiao4"),
                      ("那年他炒股折了不少本钱。", 5, "she2"), ("他一不小心折了个跟头。", 5, "zhe1"))

# --- surnames after 姓 -------------------------------------------------------------------------------------------------

# Polyphonic characters with a surname reading of their own (现汉, each entry's 姓 sense).
SURNAME_READINGS = {
    "曾": "zeng1", "单": "shan4", "解": "xie4", "区": "ou1", "仇": "qiu2", "朴": "piao2", "查": "zha1", "盖": "ge3",
    "翟": "zhai2", "乐": "yue4", "缪": "miao4", "繁": "po2", "秘": "bi4", "种": "chong2", "召": "shao4",
    "员": "yun4", "覃": "qin2", "华": "hua4", "任": "ren2", "纪": "ji3", "燕": "yan1", "宁": "ning4", "隗": "wei3",
    "折": "she2", "卜": "bu3", "都": "du1", "薄": "bo2", "尉": "wei4", "能": "nai4", "句": "gou1", "长": "chang2",
    "冼": "xian3", "谌": "chen2", "藏": "zang4", "过": "guo1",
}


# Titles and kin terms that follow a surname in address (王老师, 李经理, 张医生: 姓 + 称谓; 八百词 "老" and 现汉 each
# title's entry, e.g. 老师 "尊称传授文化、技术的人", used after a surname).
TITLES = frozenset("老师 先生 女士 小姐 太太 夫人 同学 同志 师傅 师父 经理 总经理 医生 大夫 护士 教授 博士 老板 主任 校长 院长 "
                   "局长 部长 处长 科长 厂长 所长 队长 班长 市长 县长 书记 主席 董事长 总 工 律师 警官 阿姨 叔叔 伯伯 大爷 "
                   "大妈 大姐 大哥 奶奶 爷爷 老太太 老先生 家 某".split())


def surname_readings(tokens: list[Token]) -> dict[int, str]:
    """Offsets (in the run) of a surname -> its surname reading: right after 姓 (他姓曾: zēng), or alone before a
    title or kin term of address (曾老师, 单经理: ``TITLES``)."""
    out: dict[int, str] = {}
    for i, token in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if token.text.endswith("姓"):
            if nxt.text[0] in SURNAME_READINGS:
                out[nxt.start] = SURNAME_READINGS[nxt.text[0]]
        elif token.text in SURNAME_READINGS and nxt.text in TITLES and token.text not in _NOT_BEFORE_TITLES:
            out[token.start] = SURNAME_READINGS[token.text]
    return out


# Surname characters that before a title are more often another word: 都老师 (all teachers), 能 (modal), 过家, 长老师,
# 种家, 藏家 (collector).
_NOT_BEFORE_TITLES = frozenset("都 能 过 长 种 藏".split())


SURNAME_EXAMPLES = (("他姓曾。", 2, "zeng1"), ("我姓单，单田芳的单。", 2, "shan4"), ("曾老师教我们数学。", 0, "zeng1"),
                    ("我去问仇经理。", 3, "qiu2"), ("查医生今天不在。", 0, "zha1"))

RULES: tuple[Rule, ...] = (RULE_DE, RULE_DE_LE, RULE_DI, RULE_LE, RULE_ZHE, RULE_HAI_HUAN, RULE_WEI,
                           RULE_CHANG_ZHANG, RULE_DONGXI, RULE_ZHONG, RULE_HANG_XING, RULE_MEASURE, RULE_ZA,
                           RULE_VERB_ASPECT, RULE_STANDALONE_VERB,
                           RULE_ZHI, RULE_QIA, RULE_LA, RULE_DI_TAXI, RULE_HE, RULE_KAN, RULE_JIE, RULE_MENG, RULE_SA,
                           RULE_NIAN, RULE_CHONG, RULE_SHE, RULE_XIU, RULE_ZANG, RULE_HE4, RULE_ZHUAN)
_BY_TEXT: dict[str, list[Rule]] = {}
for _rule in RULES:
    for _text_key in _rule.applies_to:
        _BY_TEXT.setdefault(_text_key, []).append(_rule)


def reduplicated_word_readings(tokens: list[Token], phrases: dict[str, tuple[str, ...]]) -> dict[int, str]:
    """Offsets of a word read as the reduplication AABB (+ 地/的) of a lexicon word AB -> AB's readings where they
    differ: 高高兴兴 is 高兴 gāoxìng doubled, whatever reading a data set gives the doubled form. 朱德熙《语法讲义》
    §3.3 (形容词重叠 AABB; each syllable keeps its own tone, the second B often light in speech)."""
    out: dict[int, str] = {}
    for token in tokens:
        word = token.text[:-1] if token.text[-1:] in ("地", "的") else token.text
        if len(word) != 4 or word[0] != word[1] or word[2] != word[3]:
            continue
        base = phrases.get(word[0] + word[2])
        if base is None:
            continue
        for k, reading in enumerate((base[0], base[0], base[1], base[1])):
            if token.readings[k] != reading:
                out[token.start + k] = reading
    return out


REDUPLICATED_WORD_EXAMPLES = (("大家高高兴兴地回家。", 5, "xing4"),)


def apply_rules(run: str, tokens: list[Token], phrases: dict[str, tuple[str, ...]] | None = None) -> None:
    """Apply every rule to ``tokens`` (one run) in place: readings, basis "rule" and the rule's name. ``phrases``
    (the lexicon's words) enables ``separable_readings``."""
    for i, token in enumerate(tokens):
        for rule in _BY_TEXT.get(token.text, ()):
            readings = rule.decide(tokens, i)
            if readings is not None:
                _set(token, readings, rule.name)
                break
    passes = [("reduplication", reduplication_readings(run)), ("surname", surname_readings(tokens))]
    if phrases is not None:
        passes.append(("separable", separable_readings(tokens, phrases)))
        passes.append(("reduplicated_word", reduplicated_word_readings(tokens, phrases)))
    for name, decided in passes:
        if not decided:
            continue
        for token in tokens:
            for k in range(len(token.text)):
                reading = decided.get(token.start + k)
                if reading is not None:
                    token.readings[k] = reading
                    token.basis[k] = "rule"
                    token.rule = name


def _set(token: Token, readings: list[str], name: str) -> None:
    for k, reading in enumerate(readings):
        if reading != token.readings[k] or token.basis[k] == "char":
            token.basis[k] = "rule"
        token.readings[k] = reading
    token.rule = name
