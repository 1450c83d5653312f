"""The pronunciation lexicon and word segmenter behind the default G2P (``tts_app.frontend.g2p``). No torch.

Data, all from installed packages (nothing downloaded at run time), merged once per process by ``load_lexicon``:

=============================================  ========  ==================================================  =======
source                                         entries   licence                                             role
=============================================  ========  ==================================================  =======
pypinyin 0.55.0 ``phrases_dict``               47,111    MIT (mozillazg/python-pinyin; phrase-pinyin-data)   first
pypinyin-dict 0.9.0 ``phrase_pinyin_data.di``  6,839     MIT (phrase-pinyin-data ``di.txt``: 地 as de)       overrides
pypinyin-dict 0.9.0 ``.cc_cedict``             105,766   CC BY-SA 4.0 (CC-CEDICT, via phrase-pinyin-data)    fills gaps
jieba 0.42.1 ``dict.txt``                      349,046   MIT (fxsjy/jieba)                                   segmenter
OpenCC 1.4.2 ``t2s``                           --        Apache-2.0 (BYVoid/OpenCC)                          script
=============================================  ========  ==================================================  =======

pypinyin-dict's ``zdic_cibs`` / ``zdic_cybs`` / ``large_pinyin`` sets are NOT used: they are scraped from zdic.net,
whose terms grant no licence (measured: +0.8 points on the CPP dev set, not worth the doubt).

* ``WORD_READINGS``: eleven common words whose reading in the data sets departs from 《现代汉语词典》/《普通话异读词审音表》
  (照片 zhàopiàn, 落下 luòxià, 献血 xiànxuè, 不得了 bùdéliǎo, 大夫 dàifu, 冲着 chòngzhe, 下载 xiàzài, 流血 liúxuè,
  掉色 diàoshǎi, 卷子 juànzi, 硕果累累 léiléi), each with its source; they override every data set.
* ``VARIANT_FORMS``: a jieba word written with 粘 that no data set reads (粘膜, 粘性) takes the reading of its 黏 form
  (nián), the adjective's standard character since 《通用规范汉字表》(2013).
* ``SURNAME_ONLY_READINGS``: 朴 piáo (only the surname) read inside 13 ordinary words by pypinyin (简朴, 质朴) becomes
  pǔ.
* Neutral tones (``add_neutral_tones``): CC-CEDICT writes the spoken neutral tone for words pypinyin gives citation
  tones (早上 zǎoshang, 休息 xiūxi, 漂亮 piàoliang); it is taken on characters with one reading in common use (277
  words; not where CC-CEDICT lists the full tone too, 不是 bùshì / bù·shi), never on a polyphone, which keeps the citation tone that tells its readings apart (商量 shāng liáng: taking
  CC-CEDICT's neutral tones on polyphones too cost 0.3 points on the CPP dev set and 7 targets of the third held-out
  set, whose labels, as issue 13 asks, are citation tones). 东西 "things" (dōngxi) against "east and west" is a
  grammar rule (``polyphone_rules.RULE_DONGXI``).
* Readings are TONE3, citation tones but for those neutral tones: the tone sandhi some entries carry for 一 and 不
  (``一个: yí gè``) is undone (``yi1 ge4``), so every reading the front end reports is the dictionary (underlying)
  tone and no sandhi is applied anywhere; the model applies its own.
* Segmentation is jieba's maximum-probability path over its word-frequency DAG (``Tokenizer.cut(HMM=False)``), with
  every lexicon phrase jieba lacks added at a low frequency (``ADDED_WORD_FREQ``), so a polyphone phrase can be found
  but never outweighs the words jieba has counts for (价格/的/确定, not 价格/的确/定).
* Traditional script: a run is converted to simplified with OpenCC's ``t2s`` for lookup only (readings are per
  position, so the conversion must keep the length; it is skipped when it does not).
* A character read alone (no lexicon word covers it) takes pypinyin's first reading when it is one of the 3,755
  common characters (GB2312 level 1: pypinyin orders those by use), else the reading most lexicon entries give it
  (pypinyin's first reading of rarer characters is often a rare one: 晟 chéng for shèng). Measured on the CPP dev set
  (Park & Lee 2020, Wikipedia sentences): 89.5 % -> 90.6 %.

The merged state (phrases, jieba's word counts with the phrases added, POS tags, default readings, the homophone
ranking of ``g2p.homophone_table``) is built once per machine (about 3-5 s) and kept in a ``marshal`` file in
this user's cache folder (``cache_dir``, never the shared temporary folder), named by the sources' versions, as
jieba keeps its own cache; later processes load it in about 0.5-1 s (``bench/frontend_bench.py`` measures both). The
load runs in the background at start-up (``tts_app.frontend.warm_up``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

ADDED_WORD_FREQ = 3  # jieba count given to lexicon phrases jieba lacks: its median word count (measured, dict.txt)


@dataclass
class Lexicon:
    """Phrase readings, word segmenter, part-of-speech tags and script conversion (see the module docstring).

    Attributes:
        phrases: word (2+ characters, simplified script) -> TONE3 reading per character, citation tones.
        tags: jieba's part-of-speech tag of each word of its dictionary (``v`` verb, ``a`` adjective, ``d`` adverb,
            ``r`` pronoun, ``m`` numeral, ``q`` measure word, ``n*`` nouns, ``p`` preposition, ``u*`` particles...;
            ICTCLAS tag set, jieba README).
        max_phrase_chars: length of the longest phrase.
        reading_counts: char -> {TONE3 reading: entries of pypinyin's phrase dictionary reading it so}
            (``g2p.common_readings``).
        homophones: (reading -> characters whose only reading in use it is, reading -> characters whose default
            reading it is), most common first (``g2p.homophone_table``).
    """

    phrases: dict[str, tuple[str, ...]]
    tags: dict[str, str]
    tokenizer: object  # jieba.Tokenizer (typed loosely: jieba ships no type hints)
    t2s: object | None  # opencc.OpenCC("t2s") or None when OpenCC is missing
    max_phrase_chars: int
    reading_counts: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    homophones: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] = ({}, {})
    _char_default: dict[str, str] = field(default_factory=dict, repr=False)  # outside GB2312 level 1
    _char_cache: dict[str, str] = field(default_factory=dict, repr=False)

    def segment(self, run: str) -> list[str]:
        """Words of a run of Chinese characters (jieba, maximum probability, no HMM for unknown words)."""
        return list(self.tokenizer.cut(run, HMM=False))

    def simplified(self, run: str) -> str:
        """``run`` in simplified script, same length (unchanged when OpenCC is missing or changes the length)."""
        if self.t2s is None:
            return run
        out = self.t2s.convert(run)
        return out if len(out) == len(run) else run

    def char_reading(self, char: str) -> str:
        """Default TONE3 reading of ``char`` read on its own ("" when unknown); rule in the module docstring."""
        cached = self._char_cache.get(char)
        if cached is not None:
            return cached
        from tts_app.frontend.g2p import char_candidates

        candidates = char_candidates(char)
        reading = self._char_default.get(char) or (candidates[0] if candidates else "")
        self._char_cache[char] = reading
        return reading


_LOCK = threading.Lock()
_LEXICON: Lexicon | None = None


def _tone3(marked: str, cache: dict[str, str]) -> str:
    out = cache.get(marked)
    if out is None:
        from pypinyin.contrib.tone_convert import to_tone3

        out = cache[marked] = to_tone3(marked, neutral_tone_with_five=True).replace("ü", "v")
    return out


def citation_tones(word: str, readings: list[str]) -> tuple[str, ...]:
    """Undo the tone sandhi of 一 (yí/yì -> yi1) and 不 (bú -> bu4) in a phrase reading (TONE3)."""
    out = []
    for char, reading in zip(word, readings):
        if char == "一" and reading.startswith("yi"):
            reading = "yi1"
        elif char == "不" and reading.startswith("bu"):
            reading = "bu4"
        out.append(reading)
    return tuple(out)


# Readings of common words where the data sets depart from the standard, each with its source (现汉 = 《现代汉语词典》
# 第7版; 审音表 = 《普通话异读词审音表》1985). They override every data set.
WORD_READINGS: dict[str, str] = {
    "照片": "zhao4 pian4",  # 现汉 照片 zhàopiàn (照片儿 zhàopiānr); pypinyin: piān
    "落下": "luo4 xia4",  # 现汉 落 luò '物体因失去支持而下来' (pypinyin: là; là "leave behind" is polyphone_rules' 把 rule)
    "献血": "xian4 xue4",  # 审音表 血 xuè (文) '用于复音词及成语'; pypinyin: xiě
    "不得了": "bu4 de2 liao3",  # 现汉 不得了 bùdéliǎo; pypinyin: le
    "大夫": "dai4 fu5",  # 现汉 大夫 dài·fu '医生' (dàfū, an ancient rank, lives on in 士大夫); pypinyin, CC-CEDICT: dàfū
    "冲着": "chong4 zhe5",  # 现汉 冲 chòng 介 '对着、向': 冲着大门; in no data set
    "下载": "xia4 zai4",  # 现汉 下载 xiàzài; CC-CEDICT: zǎi
    "流血": "liu2 xue4",  # 审音表 血 xuè (文) '用于复音词及成语' (xiě only alone, in speech: 流了点儿血); 现汉 流血 liúxuè
    "掉色": "diao4 shai3",  # 现汉 掉色 diào//shǎi (色 shǎi 〈口〉, as in 色子); pypinyin: sè
    "卷子": "juan4 zi5",  # 现汉 卷子 juàn·zi '考试写答案的纸' (juǎn·zi, a steamed roll, is regional); pypinyin: juǎn
    "硕果累累": "shuo4 guo3 lei2 lei2",  # 现汉 累累 léiléi ② '形容连续成串': 果实累累 (lěilěi: 罪行累累); pypinyin: lěi
}


# Variant characters: 《通用规范汉字表》(2013) and 现汉 第7版 write the adjective "sticky" 黏 nián and keep 粘 for the
# verb zhān ('to stick, paste'); texts after the 1955 variant table still write 粘 for both (粘膜, 粘性, 粘度). A word of
# jieba's dictionary written with 粘 that no data set reads takes the reading of its 黏 form when the lexicon has that
# form; not the verb + complement words (粘住, 粘着, 粘上, 粘牢, 粘紧: the verb zhān).
VARIANT_FORMS = {"粘": "黏"}
_VERB_COMPLEMENT_ENDINGS = ("住", "着", "上", "牢", "紧")


def add_variant_readings(phrases: dict[str, tuple[str, ...]], words) -> None:
    """Add to ``phrases`` (in place) each of ``words`` (jieba's dictionary) that contains a ``VARIANT_FORMS`` key,
    has no reading, and whose standard form has one (粘膜 -> 黏膜 nián mó)."""
    for word in words:
        if len(word) < 2 or word in phrases or word.endswith(_VERB_COMPLEMENT_ENDINGS):
            continue
        standard = word
        for variant, form in VARIANT_FORMS.items():
            standard = standard.replace(variant, form)
        if standard != word and standard in phrases:
            phrases[word] = phrases[standard]


# A reading pypinyin's phrase data give only inside a surname, taken by mistake inside ordinary words: 朴 piáo is
# only the surname (现汉 朴 Piáo: the surname; pǔ: 朴素, as in 俭朴, 简朴, 质朴, 古朴, 纯朴); pypinyin reads 13
# words so (简朴 jiǎn piáo, 质朴 zhì piáo). Anywhere but at the start of a word (a name: 朴槿惠) it becomes the
# common reading. (Measured on pypinyin 0.55.0: no other surname reading of polyphone_rules.SURNAME_READINGS is
# given inside ordinary words.)
SURNAME_ONLY_READINGS = {"朴": ("piao2", "pu3")}


def fix_surname_only_readings(phrases: dict[str, tuple[str, ...]]) -> None:
    """In place: a ``SURNAME_ONLY_READINGS`` reading after a word's first character becomes the common one."""
    for word, readings in phrases.items():
        if any(c in SURNAME_ONLY_READINGS and r == SURNAME_ONLY_READINGS[c][0] for c, r in zip(word[1:], readings[1:])):
            phrases[word] = readings[:1] + tuple(
                SURNAME_ONLY_READINGS[c][1] if c in SURNAME_ONLY_READINGS and r == SURNAME_ONLY_READINGS[c][0] else r
                for c, r in zip(word[1:], readings[1:]))


def add_neutral_tones(phrases: dict[str, tuple[str, ...]], cedict: dict[str, list[list[str]]],
                      reading_counts: dict[str, dict[str, int]], cache: dict[str, str]) -> None:
    """In place: the neutral tone CC-CEDICT writes in a word (早上 zǎoshang, 休息 xiūxi, 晚上 wǎnshang, as 现汉 writes
    them with its light-tone dot: zǎo·shang, xiū·xi) replaces the citation tone of the same syllable, on a character with
    one reading in common use (``g2p.common_readings``: 上, 息, 西), when CC-CEDICT lists only that reading there
    (不是 lists shì and shi: two words, "is not" and "fault", and keeps shì). A polyphone keeps its citation tone, the
    reading that tells its readings apart (商量 shāng liáng, not liang, as the held-out polyphone sets are labelled):
    a neutral tone there would hide which reading it is."""
    from tts_app.frontend.g2p import _common_readings

    single: dict[str, bool] = {}
    for word, options in cedict.items():
        current = phrases.get(word)
        if current is None or len(options) != len(word):
            continue
        new = list(current)
        for k, (char, option) in enumerate(zip(word, options)):
            neutral = _tone3(option[0], cache)
            if (len(option) > 1 or not neutral.endswith("5") or current[k].endswith("5")
                    or neutral[:-1] != current[k][:-1]):
                continue  # (two readings listed: two words, 不是 bùshì "is not" and bù·shi "fault")
            if char not in single:
                single[char] = len(_common_readings(char, reading_counts)) == 1
            if single[char]:
                new[k] = neutral
        if new != list(current):
            phrases[word] = tuple(new)


def _merge_phrases(reading_counts: dict[str, dict[str, int]]) -> dict[str, tuple[str, ...]]:
    from pypinyin.phrases_dict import phrases_dict as pypinyin_phrases
    from pypinyin_dict.phrase_pinyin_data import cc_cedict, di

    cache: dict[str, str] = {}
    merged: dict[str, tuple[str, ...]] = {}
    # (source, overrides what is already there)
    for source, overrides in ((pypinyin_phrases, False), (di.phrases_dict, True), (cc_cedict.phrases_dict, False)):
        for word, readings in source.items():
            if len(readings) != len(word) or len(word) < 2 or (word in merged and not overrides):
                continue
            merged[word] = citation_tones(word, [_tone3(options[0], cache) for options in readings])
    fix_surname_only_readings(merged)
    add_neutral_tones(merged, cc_cedict.phrases_dict, reading_counts, cache)
    for word, reading in WORD_READINGS.items():
        merged[word] = tuple(reading.split())
    return merged


CACHE_FORMAT = 2  # bump when what the cache holds changes


def cache_dir() -> str:
    """This user's cache folder for the lexicon: ``$XDG_CACHE_HOME/tts_app``, else ``~/.cache/tts_app`` (the XDG
    base directory spec). Not the shared temporary folder: anyone can plant a file there, and the cache is
    ``marshal`` data that decides how every text is read (a planted one once read 银行 as "sha3 bi1")."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tts_app")


def _mine(path: str) -> bool:
    """Is ``path`` (not a symlink) this user's, and writable by no one else? (POSIX; elsewhere the per-user folder
    is the guard.)"""
    if not hasattr(os, "getuid"):
        return True
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022 and not os.path.islink(path)


def _trusted(path: str) -> bool:
    """May the cache file at ``path`` be loaded: it and its folder are this user's alone (``_mine``)?"""
    return _mine(os.path.dirname(path)) and _mine(path)


def _cache_path() -> str:
    """The cache file of the merged lexicon, in this user's cache folder (``cache_dir``), named by the versions of
    every source and the code that builds it (this module and ``g2p``, with ``WORD_READINGS``), so an upgrade or a
    change rebuilds it."""
    import hashlib
    from importlib.metadata import version

    here = os.path.dirname(os.path.abspath(__file__))
    code = b"".join(open(os.path.join(here, name), "rb").read() for name in ("lexicon.py", "g2p.py"))  # the builders
    key = "|".join([str(CACHE_FORMAT), str(ADDED_WORD_FREQ), hashlib.sha1(code).hexdigest()] +
                   [version(p) for p in ("pypinyin", "pypinyin-dict", "jieba")])
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return os.path.join(cache_dir(), f"lexicon_{digest}.marshal")


def _build_state() -> dict:
    """Everything ``Lexicon`` needs, as plain dicts (marshal-able): phrases, tags, jieba's word counts + total, and
    the default readings of the characters outside GB2312 level 1 that the lexicon attests."""
    import logging

    import jieba

    from tts_app.frontend.g2p import _gb2312_level, build_phrase_reading_counts, build_ranked_characters

    jieba.setLogLevel(logging.WARNING)  # jieba logs "Building prefix dict..." at INFO on every load
    reading_counts = build_phrase_reading_counts()
    phrases = _merge_phrases(reading_counts)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    add_variant_readings(phrases, [w for w, n in tokenizer.FREQ.items() if n])
    freq = dict(tokenizer.FREQ)
    total = tokenizer.total
    for word in phrases:
        if not freq.get(word):
            # What jieba.Tokenizer.add_word does, without its per-call bookkeeping: the word and its prefixes.
            freq[word] = ADDED_WORD_FREQ
            total += ADDED_WORD_FREQ
            for end in range(1, len(word)):
                freq.setdefault(word[:end], 0)
    tags: dict[str, str] = {}
    with open(os.path.join(os.path.dirname(jieba.__file__), "dict.txt"), encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                tags[parts[0]] = parts[2]
    counts: dict[str, Counter] = defaultdict(Counter)
    for word, readings in phrases.items():
        for char, reading in zip(word, readings):
            counts[char][reading] += 1
    # (A character read alone never takes a neutral tone that only its words have.)
    char_default = {c: next((r for r, _ in n.most_common() if not r.endswith("5")), n.most_common(1)[0][0])
                    for c, n in counts.items() if _gb2312_level(c) > 1}
    return {"phrases": phrases, "tags": tags, "freq": freq, "total": total, "char_default": char_default,
            "reading_counts": reading_counts, "homophones": build_ranked_characters(reading_counts)}


def _load_state() -> dict:
    import marshal

    path = _cache_path()
    try:
        if _trusted(path):
            with open(path, "rb") as f:
                state = marshal.loads(f.read())  # one read: marshal.load(file) reads in small pieces
            if isinstance(state, dict) and state.get("format") == CACHE_FORMAT:
                return state
    except (OSError, EOFError, ValueError, TypeError):  # missing or corrupt: rebuild
        pass
    state = _build_state()
    state["format"] = CACHE_FORMAT
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if not _mine(os.path.dirname(path)):  # someone else's folder: never write into it
            return state
        with open(tmp, "wb") as f:
            marshal.dump(state, f)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:  # a read-only temporary folder only costs the next start its build time
        try:
            os.remove(tmp)
        except OSError:
            pass
    return state


def _build() -> Lexicon:
    import jieba

    state = _load_state()
    tokenizer = jieba.Tokenizer()
    # The counts jieba's initialize() would load, plus the lexicon's phrases (built or read from the cache above).
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = state["freq"], state["total"], True
    try:
        import opencc

        t2s = opencc.OpenCC("t2s")
    except ImportError:  # optional at run time: traditional input then reads character by character
        t2s = None
    phrases = state["phrases"]  # marshal keeps the reading tuples as tuples
    single, default = state["homophones"]
    return Lexicon(phrases=phrases, tags=state["tags"], tokenizer=tokenizer, t2s=t2s,
                   max_phrase_chars=max(map(len, phrases)), reading_counts=state["reading_counts"],
                   homophones=(single, default), _char_default=state["char_default"])


def load_lexicon() -> Lexicon:
    """The process-wide ``Lexicon``, built on first use (about 1.5-2.5 s; ``warm_up`` does it in the background).
    Thread-safe: concurrent first callers wait for the one build."""
    global _LEXICON
    if _LEXICON is None:
        with _LOCK:
            if _LEXICON is None:
                _LEXICON = _build()
    return _LEXICON
