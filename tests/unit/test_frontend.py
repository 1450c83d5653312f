"""Text front end: normalisation, readings, annotations, rendering, errors, CLI. No model, no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tts_app.errors import InputError
from tts_app.frontend import prepare_text, preview_pronunciation
from tts_app.frontend.g2p import char_candidates, common_readings, homophone_table

DATA = Path(__file__).resolve().parents[1] / "data"


def _readings(prepared, char):
    """Readings of every occurrence of ``char``, in order."""
    return [r.pinyin for r in prepared.readings if r.char == char]


def _polyphone_rows():
    lines = (DATA / "polyphones_zh.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return [(s, c, int(n), r) for s, c, n, r in rows[1:]]


def test_import_does_not_pull_in_torch():
    code = "import sys, tts_app.frontend; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


# --- readings and annotations ---------------------------------------------------------------------------------------

def test_bank_sentence_reads_correctly_annotated_and_rendered_with_homophones():
    text = "他先去银行(yin2 hang2)找行(hang2)长(zhang3)，然后步行(bu4 xing2)回家。"
    prepared = prepare_text(text)
    assert prepared.normalized_text == "他先去银行找行长，然后步行回家。"
    assert _readings(prepared, "行") == ["hang2", "hang2", "xing2"]
    assert _readings(prepared, "长") == ["zhang3"]
    assert [r.source for r in prepared.readings if r.char == "行"] == ["override"] * 3
    assert prepared.warnings == []
    # A characters-only model gets characters that have only the intended reading.
    rendered = "".join(s.text for s in prepared.segments)
    assert len(rendered) == len(prepared.normalized_text)
    for reading in prepared.readings:
        sent = rendered[reading.position]
        if reading.source == "override" and reading.polyphonic:
            assert sent != reading.char and common_readings(sent) == (reading.pinyin,)
        elif reading.source == "g2p":
            assert sent == reading.char


def test_still_sentence_reads_correctly_annotated_with_pinyin_tokens():
    prepared = prepare_text("我还(hai2)没还(huan2)钱，他还(hai2)在等。", supports_pinyin=True)
    assert _readings(prepared, "还") == ["hai2", "huan2", "hai2"]
    assert "".join(s.text for s in prepared.segments) == "我{hai2}没{huan2}钱，他{hai2}在等。"
    assert "".join(s.source_text for s in prepared.segments) == "我还没还钱，他还在等。"


def test_default_g2p_reads_the_two_acceptance_sentences():
    assert _readings(prepare_text("他先去银行找行长，然后步行回家。"), "行") == ["hang2", "hang2", "xing2"]
    assert _readings(prepare_text("我还没还钱，他还在等。"), "还") == ["hai2", "huan2", "hai2"]


@pytest.mark.parametrize("annotated", ["重(zhong4)要", "重(zhòng)要", "重(ZHONG4)要", "重（zhong4）要", "重 (zhong4)要"])
def test_annotation_spellings_all_mean_zhong4(annotated):
    prepared = prepare_text(annotated.replace("要", "新"))  # 重新 is chong2 by default
    assert _readings(prepared, "重") == ["zhong4"]
    assert prepared.readings[0].source == "override" and prepared.warnings == []


@pytest.mark.parametrize("written, expected", [("了(le0)", "le5"), ("了(le5)", "le5"), ("绿(lü4)", "lv4"),
                                               ("绿(lu:4)", "lv4"), ("绿(lǜ)", "lv4"), ("绿(LV4)", "lv4")])
def test_neutral_tone_and_u_umlaut_spellings(written, expected):
    prepared = prepare_text(f"好{written}吧", supports_pinyin=True)
    override = [r for r in prepared.readings if r.source == "override"]
    assert [r.pinyin for r in override] == [expected] and prepared.warnings == []


def test_every_polyphone_of_the_test_set_can_be_forced_by_annotation():
    for sentence, char, occurrence, reading in _polyphone_rows():
        idx = [i for i, c in enumerate(sentence) if c == char][occurrence - 1]
        annotated = f"{sentence[:idx + 1]}({reading}){sentence[idx + 1:]}"
        prepared = prepare_text(annotated)
        got = {r.position: r for r in prepared.readings}[idx]
        assert (got.pinyin, got.source) == (reading, "override"), annotated
        assert prepared.warnings == [] or "no common character" in prepared.warnings[0], annotated


def test_polyphone_test_set_is_well_formed():
    rows = _polyphone_rows()
    assert len(rows) >= 50
    for sentence, char, occurrence, reading in rows:
        assert sentence.count(char) >= occurrence, sentence
        assert reading in char_candidates(char), (sentence, reading)


def test_unknown_reading_is_warned_with_position_and_valid_readings():
    prepared = prepare_text("他是行(xiao3)长")
    (warning,) = prepared.warnings
    assert "position 3" in warning and "xiao3" in warning
    for valid in char_candidates("行"):
        assert valid in warning


def test_bad_annotations_are_warned_never_silently_dropped():
    cases = {
        "银行(yin2 hang2 zhang3)很大": "3 readings but only 2",  # count mismatch
        "ABC(a1)很好": "not a Chinese character",  # after a non-Chinese character
        "重(zhong7)要": "tone 7",
        "行(xiao3)": "not a reading",
    }
    for text, expected in cases.items():
        prepared = prepare_text(text)
        assert any(expected in w for w in prepared.warnings), (text, prepared.warnings)
        assert all("position" in w for w in prepared.warnings)
        assert not any(r.source == "override" for r in prepared.readings), text


@pytest.mark.parametrize("text, normalized, expected", [
    ("重(xyz)要", "重要", "'xyz' is not a Mandarin syllable"),  # splits the word 重要: an attempt, not a gloss
    ("这很重(zhogn4)要", "这很重要", "'zhogn4' is not a Mandarin syllable"),
    ("长(chang2", "长", "not closed; write it as 长(chang2)"),
    ("他说长（cháng 很好", "他说长 很好", "not closed"),
])
def test_failed_annotation_is_removed_from_what_the_model_reads(text, normalized, expected):
    prepared = prepare_text(text)
    assert prepared.normalized_text == normalized
    assert "".join(s.text for s in prepared.segments).replace(" ", "") == normalized.replace(" ", "")
    (warning,) = prepared.warnings
    assert expected in warning and "position" in warning
    for valid in char_candidates("重" if "重" in text else "长"):
        assert valid in warning
    assert not any(r.source == "override" for r in prepared.readings)


def test_reading_the_character_does_not_have_is_not_applied():
    prepared = prepare_text("去银行(yin2)取钱")  # one reading: it annotates 行, which has no reading yin2
    assert prepared.segments[0].text == "去银行取钱"  # not 去银银取钱
    assert _readings(prepared, "行") == ["hang2"] and prepared.readings[2].source == "g2p"
    (warning,) = prepared.warnings
    assert "position 3" in warning and "hang2" in warning and "银(yin2)" in warning


def test_parenthesised_words_that_are_not_pinyin_stay_text():
    """Glosses stay text: silent for acronyms and things that cannot be pinyin (AI, mp3); a lower-case group after a
    character that is not pinyin is kept too, with a warning (probably a typo)."""
    prepared = prepare_text("下载(mp3)文件，人工智能(AI)")
    assert "(mp" in prepared.normalized_text and "(AI)" in prepared.normalized_text
    assert prepared.warnings == []
    typo = prepare_text("苹果(apple)")
    assert typo.normalized_text == "苹果(apple)"
    (warning,) = typo.warnings
    assert "kept as text" in warning and "'apple' is not a Mandarin syllable" in warning


def test_homophone_table_only_maps_to_characters_with_one_reading_in_use():
    table = homophone_table()
    assert table["hang2"] and table["huan2"] and table["zhong4"]
    for reading, char in table.items():
        assert common_readings(char) == (reading,) and char_candidates(char)[0] == reading


# --- normalisation ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, spoken", [
    ("他生于1998年。", "一九九八年"),
    ("增长了15%。", "百分之十五"),
    ("售价¥128.50。", "一百二十八元五角"),
    ("电话13812345678。", "幺三八幺二三四五六七八"),
    ("下午3:30见。", "三点三十分"),
    ("气温-5℃。", "负五摄氏度"),
    ("我有１２３个苹果。", "一百二十三"),  # full-width digits
])
def test_chinese_normalisation(text, spoken):
    normalized = prepare_text(text).normalized_text
    assert spoken in normalized and not any(ch.isdigit() for ch in normalized)


@pytest.mark.parametrize("text, spoken", [
    ("It happened in 1998.", "nineteen ninety eight"),
    ("Prices rose 15%.", "fifteen percent"),
    ("It costs $5.", "five dollars"),
    ("Meet me at 3:30 pm.", "three thirty"),
    ("Call 555-123-4567 now.", "five five five"),
])
def test_english_normalisation(text, spoken):
    normalized = prepare_text(text).normalized_text
    assert spoken in normalized and not any(ch.isdigit() for ch in normalized)


# Numbers wetext 0.1.8 reads wrongly, worked around in tts_app.frontend.wetext_quirks (each case read wrongly before).
@pytest.mark.parametrize("text, normalized", [
    ("It costs $1,299.99", "It costs one thousand two hundred and ninety nine point nine nine dollars"),
    ("1,000 cars", "one thousand cars"),
    ("1000 cars", "one thousand cars"),
    ("1299 cars", "one thousand two hundred and ninety nine cars"),
    ("We sold 1001 cars.", "We sold one thousand and one cars."),
    ("a thousand cars and 1,000 trucks", "a thousand cars and one thousand trucks"),  # the written word stays
    ("It was built in 1999.", "It was built in nineteen ninety nine."),  # a year in context stays a year
    ("from 1990 to 1999", "from nineteen ninety to nineteen ninety nine"),
    ("￥12.50元", "十二元五角"),
    ("￥12", "十二元"),
    ("售价¥128.50。", "售价一百二十八元五角。"),
    ("找零¥0.05", "找零五分"),
    ("共¥12.05", "共十二元零五分"),
    ("汇率¥7.1234", "汇率七点一二三四元"),  # more than 2 decimals: a plain number of 元
    ("2行", "两行"),
    ("去了2次，读2年级", "去了两次，读二年级"),
    ("第2名", "第二名"),
    ("第2个和第200名", "第二个和第二百名"),
])
def test_numbers_wetext_gets_wrong_are_read_right(text, normalized):
    prepared = prepare_text(text)
    assert prepared.normalized_text == normalized
    assert prepared.warnings == []


def test_mixed_text_is_normalised_per_language_run():
    normalized = prepare_text("I paid $5 给他，共3个。").normalized_text
    assert "five dollars" in normalized and "共三个" in normalized


@pytest.mark.parametrize("text, spoken", [("我跑了5km。", "五公里"), ("买5kg大米", "五千克"), ("气温25°C。", "二十五摄氏度"),
                                          ("I ran 5km today.", "five kilometers"), ("It is 25°C.", "degrees Celsius")])
def test_units_in_latin_letters_read_in_the_language_around_them(text, spoken):
    assert spoken in prepare_text(text).normalized_text


def test_annotation_survives_normalisation_of_neighbouring_numbers():
    prepared = prepare_text("第3章(zhang1)有2行(hang2)字")
    assert prepared.normalized_text == "第三章有两行字" or prepared.normalized_text == "第三章有二行字"
    assert _readings(prepared, "行") == ["hang2"]
    assert [r.source for r in prepared.readings if r.char == "章"] == ["override"]


# --- bad input -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [("", "empty"), ("   \n\t ", "empty"), ("😀🎉👍🏻", "nothing to speak"),
                                            ("。。。！", "nothing to speak"), ("[pause:1s]", "nothing to speak")])
def test_unspeakable_text_raises_input_error_with_clear_message(text, expected):
    with pytest.raises(InputError, match=expected):
        prepare_text(text)


def test_emoji_inside_text_are_removed_with_a_warning():
    prepared = prepare_text("今天天气真好😀！")
    assert prepared.normalized_text == "今天天气真好！"
    assert any("emoji" in w for w in prepared.warnings)


def test_bad_knobs_raise_input_error():
    with pytest.raises(InputError, match="max_segment_chars"):
        prepare_text("你好", max_segment_chars=3)
    with pytest.raises(InputError, match="default_pause_ms"):
        prepare_text("你好", default_pause_ms=-1)


# --- preview ----------------------------------------------------------------------------------------------------------

def test_preview_matches_prepare_and_never_raises():
    text = "他先去银行(yin2 hang2)找行(xiao3)长"
    preview = preview_pronunciation(text)
    prepared = prepare_text(text)
    assert list(preview.readings) == prepared.readings
    assert list(preview.warnings) == prepared.warnings
    assert preview.normalized_text == prepared.normalized_text
    assert preview_pronunciation("").readings == ()
    (message,) = preview_pronunciation("😀").warnings
    assert "nothing to speak" in message


# --- CLI --------------------------------------------------------------------------------------------------------------

def test_cli_prints_segments_readings_and_warnings(capsys):
    from tts_app.frontend.cli import main

    assert main(["我还(huan2)钱了。[pause:1.5s]好的，走吧。", "--all-chars"]) == 0
    out = capsys.readouterr().out
    assert "pause after 1500 ms" in out and "huan2" in out and "override" in out


def test_cli_json_and_bad_input(capsys):
    from tts_app.frontend.cli import main

    assert main(["重(zhong4)新", "--json", "--supports-pinyin"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["segments"][0]["text"] == "{zhong4}新"
    assert data["readings"][0] == {"char": "重", "pinyin": "zhong4", "polyphonic": True, "source": "override",
                                   "position": 0, "candidates": list(char_candidates("重")), "ambiguous": False,
                                   "basis": "override", "rule": None, "written": "zhong4"}
    assert main(["   "]) == 2
    assert "empty" in capsys.readouterr().err


def test_cli_exits_quietly_when_the_reader_closes_the_pipe_early():
    """``python -m tts_app frontend --all-chars LONG | head -2``: no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "tts_app", "frontend", "--all-chars", "重要" * 2000],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    first_lines = [proc.stdout.readline() for _ in range(2)]  # the report is ~200 kB, more than a pipe buffer
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert first_lines[0].startswith(b"normalised:")
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_quotes_and_backslashes_survive_normalisation():
    assert prepare_text('He said "wait 5 minutes" and left.').normalized_text == \
        'He said "wait five minutes" and left.'
    assert prepare_text('他说"我有5个"。').normalized_text == '他说"我有五个"。'


def test_polyphonic_flags_characters_with_more_than_one_reading_in_use():
    prepared = prepare_text("他去银行找行长")
    flags = {r.char: r.polyphonic for r in prepared.readings}
    assert flags["行"] and flags["长"]
    assert not flags["他"] and not flags["去"] and not flags["银"]  # 他 tuo2, 去 qu1 are rare readings
    assert "tuo2" in {r.char: r.candidates for r in prepared.readings}["他"]
    # Overriding with the only reading in use changes nothing for the model; a rare reading needs a homophone.
    assert prepare_text("他(ta1)来了").segments[0].text == "他来了"
    assert prepare_text("他(tuo2)来了").segments[0].text != "他来了"
