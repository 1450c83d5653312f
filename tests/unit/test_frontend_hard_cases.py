"""Issue 23 item 6: Chinese text read right on an independent set of hard cases, each fixed as a class (several
examples each, not only the issue's): decimals before a unit, a minus sign before a percentage, a digit-string
context that reached a count in the next clause, model codes, polyphones in common words, neutral tones, pinyin
overrides of letters that are no syllable, and segments cut by the hard limit."""

from __future__ import annotations

import pytest

from tts_app.frontend import prepare_text


def _spoken(text: str) -> str:
    prepared = prepare_text(text)
    assert prepared.warnings == [], prepared.warnings
    return prepared.normalized_text


# --- numbers ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, spoken", [
    ("10.8元", "十点八元"),  # wetext alone: 十月八日元
    ("12.5公斤", "十二点五公斤"),  # wetext alone: 十二月五日公斤
    ("这件衣服11.5块", "这件衣服十一点五块"),
    ("跑了10.3公里", "跑了十点三公里"),
    ("增长了12.31倍", "增长了十二点三一倍"),
    ("花了10.05美元", "花了十点零五美元"),
    ("等了11.5个小时", "等了十一点五个小时"),
    ("13.5元", "十三点五元"),  # never a date: unchanged
    ("10.8万元", "十点八万元"),
])
def test_a_decimal_before_a_unit_is_a_number_never_a_date(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [("11.11购物节", "十一月十一日购物节"), ("10.1国庆", "十月一日国庆")])
def test_a_date_written_with_a_dot_and_no_unit_stays_a_date(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [
    ("仅-5%的用户", "仅负百分之五的用户"),  # the minus was dropped: meaning inverted
    ("利润同比-12%", "利润同比负百分之十二"),
    ("增长率为-3.5%", "增长率为负百分之三点五"),
    ("仅−5%的用户", "仅负百分之五的用户"),  # U+2212 MINUS SIGN
    ("收益-0.5‰", "收益负千分之零点五"),
    ("出生率5‰", "出生率千分之五"),
    ("夜里仅-8℃", "夜里仅负八摄氏度"),
    ("歼-10战斗机", "歼十战斗机"),  # a model name's hyphen is still no minus
])
def test_a_minus_sign_before_a_percentage_or_temperature_is_read(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [
    ("302号房间，预计1500人到场", "三零二号房间，预计一千五百人到场"),
    ("房间可容纳1500人", "房间可容纳一千五百人"),
    ("拨打热线，共有2300位客服", "拨打热线，共有两千三百位客服"),
    ("订单号，今天卖出3200件", "订单号，今天卖出三千二百件"),
    ("卡号后4位", "卡号后四位"),
    ("联系电话，13800138000", "联系电话，幺三八零零幺三八零零零"),  # 7+ digits across a comma: still a phone number
    ("他住在1203房间", "他住在幺二零三房间"),  # a room number itself is still read digit by digit
    ("尾号1234的卡", "尾号幺二三四的卡"),
])
def test_a_digit_string_context_reaches_only_its_own_code_never_a_count(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [
    ("我买了RTX4090显卡", "我买了RTX四零九零显卡"),
    ("RTX 4090显卡", "RTX四零九零显卡"),
    ("GTX1080Ti显卡", "GTX一零八零Ti显卡"),
    ("空客A380客机", "空客A三八零客机"),
    ("通过ISO9001认证", "通过ISO九零零一认证"),
    ("MH370航班", "MH三七零航班"),
    ("A100芯片", "A一百芯片"),  # a round number stays a number
    ("iPhone15发布", "iPhone fifteen发布"),  # two digits: a number, as before
])
def test_a_model_code_in_chinese_text_is_read_digit_by_digit(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [
    ("The RTX4090 is fast.", "The RTX forty ninety is fast."),
    ("a GTX1080 card", "a GTX ten eighty card"),
    ("the RTX 3050 card", "the RTX thirty fifty card"),
    ("an A380 plane", "an A three eighty plane"),
    ("model X1005.", "model X ten oh five."),
    ("an A100 chip", "an A one hundred chip"),
    ("Windows 2000 and 1299 cars", "Windows two thousand and one thousand two hundred and ninety nine cars"),
])
def test_a_model_code_in_english_text_is_read_in_pairs(text, spoken):
    assert _spoken(text) == spoken


# --- pinyin overrides ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, token", [("长(zzz)", "zzz"), ("他长(qqq)得很高", "qqq"), ("长(abc)", "abc"),
                                         ("重(hhh)要", "hhh"), ("行(xyz)", "xyz"), ("长(bcd)", "bcd")])
def test_an_override_that_names_no_syllable_is_warned_vowels_or_not(text, token):
    (warning,) = prepare_text(text).warnings
    assert f"'{token}' is not a Mandarin syllable" in warning


@pytest.mark.parametrize("text", ["长度(mm)", "重量(kg)", "速度(km/h)", "频率(Hz)", "第二部分(iv)", "人工智能(AI)",
                                  "下载(mp3)", "步骤(b)"])
def test_unit_symbols_labels_and_acronyms_in_parentheses_stay_silent(text):
    assert prepare_text(text).warnings == []
