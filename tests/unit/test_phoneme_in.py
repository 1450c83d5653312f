"""GLM-TTS's phoneme-mode input (``tts_app.frontend.phoneme_in``): equal to upstream's own front end, and a pinyin
override changes exactly the phonemes it names.

Golden ``tests/data/glmtts/phoneme_in_golden.json``: upstream's own ``TextFrontEnd(use_phoneme=True).g2p_infer(text)``
(github.com/zai-org/GLM-TTS at c5dc7ae, ``cosyvoice/cli/frontend.py`` + ``utils/glm_g2p.py`` + ``configs/``) run on
the fixed normalised texts of the file, in a scratch venv outside the repository. Recipe:

1. ``git archive`` upstream's ``cosyvoice/``, ``utils/glm_g2p.py``, ``utils/__init__.py``, ``utils/file_utils.py`` and
   ``configs/`` into a scratch folder; ``python -m venv`` with ``jieba==0.42.1 pypinyin==0.55.0`` (the project's
   versions; torch is not needed).
2. A script puts empty stand-in modules in ``sys.modules`` for what ``g2p_infer`` never calls (torch, torchaudio,
   onnxruntime, inflect, contractions, emoji, pronouncing, WeTextProcessing's ``tn``), ``chdir`` s to the scratch
   folder, builds ``TextFrontEnd(use_phoneme=True)`` and writes per text: ``hybrid`` = ``g2p_infer(text)``,
   ``keep_chars`` = the text's characters that are in upstream's ``G2P_able_1word.json``, ``replacements`` = the
   entries of ``G2P_replace_dict.jsonl`` whose key occurs in the text (the tests rebuild the table from these, so
   upstream's 3,372-character list is not in the repository).
3. Run again with upstream's own pin ``pypinyin==0.44.0``; where it gives another string it is kept as
   ``hybrid_upstream_pins`` (one case: pypinyin 0.44's phrase dictionary reads 行行 xing2 xing2, 0.55's hang2 hang2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tts_app.frontend import prepare_text
from tts_app.frontend.phoneme_in import (PhonemeTable, load_phoneme_table, phoneme_input, phoneme_input_from_rendered,
                                          phoneme_inputs)

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "data" / "glmtts" / "phoneme_in_golden.json")
                    .read_text(encoding="utf-8"))
CASES = {case["text"]: case for case in GOLDEN["cases"]}


def _table(case: dict) -> PhonemeTable:
    return PhonemeTable(frozenset(case["keep_chars"]), case["replacements"])


@pytest.mark.parametrize("text", list(CASES))
def test_equal_to_upstreams_own_phoneme_mode(text):
    case = CASES[text]
    assert phoneme_input(text, table=_table(case)) == case["hybrid"]


def _with_overrides(annotated: str, plain: str, table: PhonemeTable) -> str:
    prepared = prepare_text(annotated, supports_pinyin=True, max_segment_chars=200)
    assert prepared.normalized_text == plain and not prepared.warnings  # the markup was read, nothing else changed
    (hybrid,) = phoneme_inputs(prepared, table)
    return hybrid


@pytest.mark.parametrize("text, annotated, old, new", [
    # upstream's G2P reads 很长 zhang3 and 还得 de2: the user's readings replace exactly those phonemes
    ("长城很长，他长大了，重复了重量。", "长城很长(cháng)，他长大了，重复了重量。",
     "很<|ZH|><|ANG3|>", "很<|CH|><|ANG2|>"),
    ("他很重要，银行行长说还得再等十分钟。", "他很重要，银<行|HANG2>行(hang2)长说还得(dei3)再等十分钟。",
     "<|D|><|E2|>", "<|D|><|EI3|>"),
    # a character upstream keeps as a character (地 is in its list) becomes the phonemes the user names
    ("我非常地爱吃人参片。我不爱参数。", "我非常地(de5)爱吃人参片。我不爱参数。", "常地爱", "常<|D|><|E5|>爱"),
    # a span of upstream's replace dictionary holding an overridden character is read by the override
    ("乡音无改鬓毛衰，弦弈都好听。", "乡音无改鬓毛衰(shuāi)，弦弈都好听。",
     "乡音无改鬓毛<|C|><|UEI1|>", "乡音无改鬓毛<|SH|><|UAI1|>"),
])
def test_a_pinyin_override_changes_exactly_the_phonemes_it_names(text, annotated, old, new):
    case = CASES[text]
    assert case["hybrid"].count(old) == 1
    assert _with_overrides(annotated, text, _table(case)) == case["hybrid"].replace(old, new)


def test_without_upstreams_table_only_the_overrides_become_phonemes():
    assert phoneme_inputs(prepare_text("他很重要，长城很长。")) == ["他很重要，长城很长。"]  # upstream's default mode
    assert _with_overrides("他很重(zhòng)要，长城很长(CHANG2)。", "他很重要，长城很长。", PhonemeTable()) == \
        "他很<|ZH|><|ONG4|>要，长城很<|CH|><|ANG2|>。"
    # spellings: ü, zero initial, the i after zh/ch/sh/r and z/c/s
    assert phoneme_input("绿一吃字", {0: "lv4", 1: "yi1", 2: "chi1", 3: "zi4"}) == \
        "<|L|><|V4|><|I1|><|CH|><|III1|><|Z|><|II4|>"


def test_each_segment_gets_its_own_overrides(tmp_path):
    text = "重(chóng)新开始吧。" + "今天天气很好，我们一起去公园散步。" * 3 + "这很重(zhòng)要。"
    prepared = prepare_text(text, max_segment_chars=30)
    hybrids = phoneme_inputs(prepared)
    assert len(hybrids) == len(prepared.segments) > 1
    assert hybrids[0].startswith("<|CH|><|ONG2|>新") and hybrids[-1].endswith("很<|ZH|><|ONG4|>要。")
    assert sum(h.count("<|") for h in hybrids) == 4


def test_the_table_is_read_from_upstreams_configs_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="G2P_able_1word.json"):
        load_phoneme_table(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "G2P_able_1word.json").write_text(json.dumps(["我", "很"]), encoding="utf-8")
    (tmp_path / "configs" / "G2P_replace_dict.jsonl").write_text(
        json.dumps({"弦": "<|X|><|IAN2|>"}) + "\n\n" + json.dumps({"弈": "<|I4|>"}) + "\n", encoding="utf-8")
    table = load_phoneme_table(tmp_path)
    assert table == PhonemeTable(frozenset("我很"), {"弦": "<|X|><|IAN2|>", "弈": "<|I4|>"})
    assert phoneme_input("我很好弦", table=table) == "我很<|H|><|AO3|><|X|><|IAN2|>"


def test_an_adapter_given_the_rendered_pinyin_tokens_builds_the_same_input():
    """The engine hands a pinyin-reading adapter ``他很{zhong4}要``: the same hybrid as from the prepared text."""
    case = CASES["长城很长，他长大了，重复了重量。"]
    prepared = prepare_text("长城很长(cháng)，他长大了，重复了重(zhòng)量。", supports_pinyin=True,
                            max_segment_chars=200)
    (segment,) = prepared.segments
    assert "{chang2}" in segment.text and "{zhong4}" in segment.text
    assert phoneme_input_from_rendered(segment.text, _table(case)) == phoneme_inputs(prepared, _table(case))[0] == \
        case["hybrid"].replace("很<|ZH|><|ANG3|>", "很<|CH|><|ANG2|>")
