"""The grammar rules of the default G2P (``tts_app.frontend.polyphone_rules``): every rule's own examples, read
through the whole G2P (lexicon + jieba + rules), so a rule that stops firing, or a lexicon change that hides it,
fails here."""

from __future__ import annotations

import pytest

from tts_app.frontend.g2p import read_text
from tts_app.frontend.polyphone_rules import (REDUPLICATED_WORD_EXAMPLES, REDUPLICATION_EXAMPLES, RULES,
                                              SEPARABLE_EXAMPLES, SURNAME_EXAMPLES, reduplication_readings)

EXAMPLES = [(rule.name, *example) for rule in RULES for example in rule.examples]
EXAMPLES += [("reduplication", *example) for example in REDUPLICATION_EXAMPLES]
EXAMPLES += [("surname", *example) for example in SURNAME_EXAMPLES]
EXAMPLES += [("separable", *example) for example in SEPARABLE_EXAMPLES]
EXAMPLES += [("reduplicated_word", *example) for example in REDUPLICATED_WORD_EXAMPLES]


@pytest.mark.parametrize("rule,sentence,index,expected", EXAMPLES, ids=[f"{e[0]}:{e[1]}" for e in EXAMPLES])
def test_rule_example(rule, sentence, index, expected):
    readings = {r.position: r for r in read_text(sentence)}
    got = readings[index]
    assert got.reading == expected, f"{rule}: {sentence!r} char {index} {sentence[index]!r}: {got}"


def test_every_rule_has_examples_and_a_source():
    for rule in RULES:
        assert rule.examples and rule.source, rule.name
        for sentence, index, _ in rule.examples:
            assert sentence[index] in "".join(rule.applies_to) or any(
                sentence[index] in text for text in rule.applies_to), (rule.name, sentence, index)


def test_rules_report_themselves_as_the_basis():
    """A reading a rule decided says so (the preview shows it as decided in context, not by a dictionary word)."""
    r = {x.position: x for x in read_text("他跑得很快。")}[2]
    assert (r.basis, r.rule) == ("rule", "de")
    word = {x.position: x for x in read_text("他去银行。")}[3]
    assert (word.reading, word.basis) == ("hang2", "word")


def test_reduplication_needs_the_same_verb_twice():
    assert reduplication_readings("数一数") == {0: "shu3", 1: "yi1", 2: "shu3"}
    assert reduplication_readings("数一量") == {}


def test_readings_are_citation_tones_without_sandhi():
    """一 and 不 keep their dictionary tones even where the lexicon's source wrote the sandhi (一个 yí gè)."""
    readings = [r.reading for r in read_text("一个不对")]
    assert readings == ["yi1", "ge4", "bu4", "dui4"]


def test_word_boundaries_come_from_segmentation_not_greedy_matching():
    """Forward maximum matching reads 价格的确定 as 价格 / 的确 (dí); jieba's segmentation gives 价格 / 的 / 确定."""
    readings = [r.reading for r in read_text("价格的确定很难")]
    assert readings[2] == "de5"


@pytest.mark.parametrize("text,index,expected", [("长椅", 0, "chang2"), ("调皮", 0, "tiao2"), ("着急", 0, "zhao2"),
                                                 ("這種花很香", 1, "zhong3"), ("銀行行長", 3, "zhang3")])
def test_word_readings_and_traditional_script(text, index, expected):
    """Readings that depend on the word, also when the text is written in traditional characters."""
    assert [r.reading for r in read_text(text)][index] == expected


# Each word of lexicon.WORD_READINGS in a sentence of its own, read through the whole G2P (the entry must survive
# jieba's segmentation, not only sit in the lexicon): (sentence, index, expected TONE3).
WORD_READING_EXAMPLES = [("这张照片拍得很好。", 3, "pian4"), ("他每年都去献血。", 6, "xue4"), ("这下可不得了。", 5, "liao3"),
                         ("他的手指流血了。", 5, "xue4"), ("这条裤子洗了就掉色。", 8, "shai3"),
                         ("果园里硕果累累。", 6, "lei2"), ("老师把卷子发下来了。", 3, "juan4"), ("请把文件下载下来。", 5, "zai4")]


@pytest.mark.parametrize("sentence,index,expected", WORD_READING_EXAMPLES)
def test_word_readings_from_the_dictionary_standard(sentence, index, expected):
    assert [r.reading for r in read_text(sentence)][index] == expected, sentence


@pytest.mark.parametrize("sentence,index,expected", [("胃粘膜受损了。", 1, "nian2"), ("这种胶水的粘性很强。", 5, "nian2"),
                                                     ("把照片粘住。", 3, "zhan1")])
def test_variant_character_words_read_as_their_standard_form(sentence, index, expected):
    """粘膜 / 粘性 (no data set reads them) take 黏膜 / 黏性's nián; the verb + complement 粘住 stays zhān."""
    assert [r.reading for r in read_text(sentence)][index] == expected, sentence


# --- polyphone accuracy by default -----------------------------------------------------------------------------------

DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data"
# Floors a little below what bench/frontend_bench.py measured when the lexicon and rules were last changed (own set
# 99.2 %, held-out set 99.4 %, second held-out set 95.8 % raw / 98.0 % under the citation-tone convention; pypinyin
# alone: 86.4 %, 85.9 %, 84.2 %), so a change that makes the default readings worse fails here. Both held-out sets were
# written apart from this code and scored once each before their miss categories (not their sentences) guided general
# rules and dictionary-sourced word readings (first set 92.2 % at its first scoring, second set 87.3 % / 90.1 %); they
# are no longer held out. The third set (2,068 targets over 221 characters, written apart from this code by another
# engineer who never read it, to the citation-tone convention of the issue) was scored once after the last rule change:
# 96.0 % (pypinyin alone 87.8 %, the front end before the third round of rules 94.8 %).
FLOORS = {"polyphones_zh.tsv": 0.97, "polyphones_zh_heldout.tsv": 0.98, "polyphones_zh_heldout2.tsv": 0.94,
          "polyphones_zh_heldout3.tsv": 0.955}


def _rows(name: str) -> list[tuple[str, int, str, str]]:
    lines = [x for x in (DATA / name).read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    header, rows = lines[0].split("\t"), []
    for line in lines[1:]:
        cols = line.split("\t")
        if header[1] == "char":  # sentence, char, occurrence (1-based), reading
            index = [i for i, c in enumerate(cols[0]) if c == cols[1]][int(cols[2]) - 1]
            rows.append((cols[0], index, cols[1], cols[3]))
        else:  # sentence, char_index (0-based), char, pinyin
            rows.append((cols[0], int(cols[1]), cols[2], cols[3]))
    return rows


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_default_readings_of_polyphone_sets_stay_above_their_floor(name):
    rows = _rows(name)
    assert all(sentence[index] == char for sentence, index, char, _ in rows), "set is malformed"
    right = sum({r.position: r.reading for r in read_text(sentence)}.get(index) == reading
                for sentence, index, _, reading in rows)
    accuracy = right / len(rows)
    print(f"{name}: {right}/{len(rows)} = {accuracy:.1%} of polyphone targets right by default")
    assert accuracy >= FLOORS[name], f"{name}: {accuracy:.1%} < floor {FLOORS[name]:.0%}"
