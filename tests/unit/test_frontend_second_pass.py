"""Issue 13: every pinyin syntax users bring, control tags, characters a model cannot encode, the normalisation
gaps, segmentation limits, and front-end messages in Chinese."""

from __future__ import annotations

import pytest

from tts_app.errors import InputError
from tts_app.frontend import prepare_text, preview_pronunciation
from tts_app.frontend.messages import EN, ZH, Notice, localize


def _reading(prepared, index: int) -> tuple[str, str]:
    r = {x.position: x for x in prepared.readings}[index]
    return r.pinyin, r.source


# --- pinyin syntaxes ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,index,reading", [
    ("重(zhòng)要", 0, "zhong4"),          # tone marks
    ("重(zhong4)要", 0, "zhong4"),         # tone digit
    ("了(le0)", 0, "le5"),                 # 0 = neutral
    ("了(le5)", 0, "le5"),
    ("东西(dōng xi)", 1, "xi5"),           # toneless = neutral tone (standard pinyin)
    ("得(de)", 0, "de5"),
    ("重（zhòng）要", 0, "zhong4"),         # full-width brackets
    ("重(ZHONG4)要", 0, "zhong4"),         # upper case
    ("绿(lü4)", 0, "lv4"),
    ("<行|HANG2>", 0, "hang2"),            # IndexTTS 2.5
    ("<银行|YIN2 HANG2>", 1, "hang2"),     # several characters, several syllables
])
def test_every_pinyin_syntax_sets_the_reading(text, index, reading):
    prepared = prepare_text(text)
    assert _reading(prepared, index) == (reading, "override"), prepared.warnings
    assert prepared.warnings == []
    assert "(" not in prepared.normalized_text and "<" not in prepared.normalized_text


def test_indextts2_inline_pinyin_replaces_a_character():
    """他做DE5很好: the syllable stands for a character; a pinyin model gets the pinyin, any other model a character
    that reads so by default (的 for de5), never the letters 'D E five'."""
    chars = prepare_text("他做DE5很好")
    assert chars.normalized_text == "他做的很好" and chars.segments[0].text == "他做的很好"
    assert _reading(chars, 2) == ("de5", "override")
    pinyin = prepare_text("他做DE5很好", supports_pinyin=True)
    assert pinyin.segments[0].text == "他做{de5}很好"
    assert prepare_text("这是一张A4纸").normalized_text.startswith("这是一张A")  # single letters are never pinyin


def test_a_whole_line_of_tone_numbered_pinyin_is_read_as_chinese():
    prepared = prepare_text("wo3 men5 zou3 ba5", supports_pinyin=True)
    assert [r.pinyin for r in prepared.readings] == ["wo3", "men5", "zou3", "ba5"]
    assert prepared.segments[0].text == "{wo3}{men5}{zou3}{ba5}"
    english = prepare_text("we go home now")
    assert english.readings == [] and "we go home" in english.normalized_text


def test_angle_annotation_with_the_wrong_count_keeps_the_characters_with_a_warning():
    prepared = prepare_text("<银行|YIN2>")
    assert prepared.normalized_text == "银行"
    (warning,) = prepared.warnings
    assert "1 reading(s) for 2 character(s)" in warning
    assert all(r.source == "g2p" for r in prepared.readings)


def test_glosses_stay_silent_typos_are_warned():
    assert prepare_text("人工智能(AI)很火").warnings == []
    (warning,) = prepare_text("重(zhogn4)要").warnings
    assert "zhogn4" in warning and "not a Mandarin syllable" in warning


def test_preview_shows_readings_in_the_users_notation_and_flags_only_ambiguous_polyphones():
    marks = preview_pronunciation("重(zhòng)要的银行")
    assert marks.notation == "marks" and marks.readings[0].written == "zhòng"
    by_char = {r.char: r for r in marks.readings}
    assert not by_char["行"].ambiguous  # read by the word 银行: not a guess
    assert not by_char["的"].ambiguous  # its other readings only occur inside words
    assert by_char["重"].source == "override"
    rule = {r.char: r for r in preview_pronunciation("他跑得很快").readings}["得"]
    assert rule.ambiguous and rule.basis == "rule"


# --- tags and characters the model cannot encode ---------------------------------------------------------------------

def test_control_tags_are_stripped_with_a_warning_unless_the_model_declares_them():
    plain = prepare_text("他[laugh]笑了<|endoftext|>")
    assert plain.segments[0].text == "他笑了"
    assert len(plain.warnings) == 2 and "[laugh]" in plain.warnings[0]
    dia = prepare_text("That is funny [laughs] really.", control_tags=("(laughs)", "[S1]"))
    assert "(laughs)" in dia.segments[0].text and dia.warnings == []
    kept = prepare_text("[S1] Hello there.", control_tags=("[S1]",))
    assert kept.segments[0].text.startswith("[S1]")


def test_unencodable_characters_become_encodable_homophones_or_are_skipped():
    def unknown(chars):
        return {c for c in chars if c in "囧窘叒"}

    prepared = prepare_text("今天真囧。", unencodable_characters=unknown)
    sub = prepared.segments[0].text[3]
    assert sub not in "囧窘" and sub in "炯迥冏炅" or sub != "囧"  # a jiong3 character the model can encode
    assert any("囧" in w and "vocabulary" in w for w in prepared.warnings)
    assert prepared.segments[0].source_text == "今天真囧。"
    pinyin = prepare_text("今天真囧。", unencodable_characters=unknown, supports_pinyin=True)
    assert pinyin.segments[0].text == "今天真{jiong3}。"


def test_unencodable_character_with_no_stand_in_is_skipped_with_a_warning():
    prepared = prepare_text("你好😀abc☃", unencodable_characters=lambda chars: {c for c in chars if c == "☃"})
    assert "☃" not in prepared.segments[0].text


# --- normalisation --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,spoken", [
    ("我的电话是13812345678。", "我的电话是幺三八幺二三四五六七八。"),
    ("请拨打010-12345678。", "请拨打零幺零 幺二三四五六七八。"),
    ("客服热线400-123-4567", "客服热线四零零 幺二三 四五六七"),
    ("身份证号110101199003071234", "身份证号幺幺零幺零幺幺九九零零三零七幺二三四"),
    ("订单号2024031512345", "订单号二零二四零三幺五幺二三四五"),
    ("他住在1203房间", "他住在幺二零三房间"),
    ("x=5时", "x等于五时"),
    ("血压120/80mmHg", "血压一百二十比八十毫米汞柱"),
    ("如果x<5就停", "如果x小于五就停"),
    ("温度>30度", "温度大于三十度"),
    ("a≠b的时候", "a不等于b的时候"),
    ("扭矩300N·m", "扭矩三百牛米"),
    ("血糖5.6mmol/L", "血糖五点六毫摩尔每升"),
    ("车速120km/h", "车速一百二十公里每小时"),
    ("歼-10战斗机", "歼十战斗机"),
    ("东风-41导弹", "东风四十一导弹"),
    ("温度-5℃", "温度负五摄氏度"),  # a minus sign stays a minus sign
    ("中国队以3-1战胜日本队", "中国队以三比一战胜日本队"),
    ("比分2:0", "比分二比零"),
    ("3.5元", "三点五元"),
    ("2-3天", "两到三天"),
    ("第3-5章", "第三到五章"),
    ("你好.我是小明", "你好。我是小明"),
])
def test_normalisation_gaps(text, spoken):
    prepared = prepare_text(text)
    assert prepared.normalized_text == spoken
    assert prepared.warnings == []


def test_english_comparison_signs_are_words():
    assert prepare_text("if x < 5 then stop").normalized_text == "if x is less than five then stop"


# --- segmentation ---------------------------------------------------------------------------------------------------

def test_ascii_full_stop_between_chinese_characters_ends_a_sentence():
    prepared = prepare_text("今天天气很好.我们去公园吧.", min_segment_chars=0, pack_sentences=False)
    assert [s.source_text for s in prepared.segments] == ["今天天气很好。", "我们去公园吧。"]


@pytest.mark.parametrize("mark", ["***", "---", "* * *"])
def test_scene_break_lines_become_a_longer_pause(mark):
    prepared = prepare_text(f"第一章结束了。\n{mark}\n第二章开始了。", scene_break_pause_ms=1500)
    assert [s.source_text for s in prepared.segments] == ["第一章结束了。", "第二章开始了。"]
    assert prepared.segments[0].pause_after_ms == 1500
    assert "*" not in prepared.normalized_text and "-" not in prepared.normalized_text


def test_max_segment_chars_is_a_hard_limit_cut_at_word_boundaries():
    text = "中华人民共和国国务院总理今天在人民大会堂会见了来访的外国代表团全体成员"
    prepared = prepare_text(text, max_segment_chars=8, min_segment_chars=0)
    assert all(len(s.source_text) <= 8 for s in prepared.segments)
    assert "".join(s.source_text for s in prepared.segments) == text
    from tts_app.frontend.lexicon import load_lexicon

    bounds, pos = set(), 0
    for word in load_lexicon().segment(text):
        pos += len(word)
        bounds.add(pos)
    bounds.add(7)  # 中华人民共和国 | 国务院
    cuts, pos = [], 0
    for s in prepared.segments[:-1]:
        pos += len(s.source_text)
        cuts.append(pos)
    assert all(c in bounds for c in cuts), cuts  # never inside a word


def test_a_long_url_is_split_at_its_own_punctuation():
    prepared = prepare_text("see example.org/aaaa/bbbb/cccc/dddd/eeee/ffff now", max_segment_chars=12,
                            min_segment_chars=0)
    assert all(len(s.source_text) <= 12 for s in prepared.segments)


# --- messages in the user's language --------------------------------------------------------------------------------

def test_every_message_has_a_chinese_text_and_the_same_placeholders():
    import string

    assert EN.keys() == ZH.keys()
    for code in EN:
        fields_en = {f for _, f, _, _ in string.Formatter().parse(EN[code]) if f}
        fields_zh = {f for _, f, _, _ in string.Formatter().parse(ZH[code]) if f}
        assert {f.split("!")[0] for f in fields_en} == {f.split("!")[0] for f in fields_zh}, code


def test_front_end_warnings_and_errors_render_in_chinese():
    prepared = prepare_text("他是行(xiao3)长，[laugh]")
    assert all(isinstance(w, Notice) for w in prepared.warnings)
    zh = [w.render("zh") for w in prepared.warnings]
    assert "不是“行”的读音" in zh[0] and "标签" in zh[1]
    assert str(prepared.warnings[0]).startswith("annotation")  # English stays the str for the CLI and logs
    with pytest.raises(InputError) as exc:
        prepare_text("   ")
    assert localize(exc.value, "zh") == "文本为空；请输入要朗读的文字"
    assert localize(exc.value, "en") == "text is empty; type the words to speak"


def test_cli_prints_chinese_with_lang_zh(capsys):
    from tts_app.frontend.cli import main

    assert main(["重(zhogn4)要", "--lang", "zh"]) == 0
    assert "不是普通话音节" in capsys.readouterr().out
