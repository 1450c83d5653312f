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
    ("体重10.5-12.5公斤", "体重十点五到十二点五公斤"),  # a range to a number with a unit
    ("售价10.5~11.5元", "售价十点五到十一点五元"),
    ("13.5元", "十三点五元"),  # never a date: unchanged
    ("10.8万元", "十点八万元"),
])
def test_a_decimal_before_a_unit_is_a_number_never_a_date(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [("11.11购物节", "十一月十一日购物节"), ("10.1国庆", "十月一日国庆"),
                                          ("10.1-10.7放假", "十月一日到十月七日放假")])
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
    ("利润降低了-5个百分点", "利润降低了负五个百分点"),  # before a unit
    ("歼-10战斗机", "歼十战斗机"),  # a model name's hyphen is still no minus
    ("长征-5号火箭", "长征五号火箭"),
])
def test_a_minus_sign_before_a_percentage_or_temperature_is_read(text, spoken):
    assert _spoken(text) == spoken


@pytest.mark.parametrize("text, spoken", [
    ("302号房间，预计1500人到场", "三零二号房间，预计一千五百人到场"),
    ("房间可容纳1500人", "房间可容纳一千五百人"),
    ("拨打热线，共有2300位客服", "拨打热线，共有两千三百位客服"),
    ("订单号，今天卖出3200件", "订单号，今天卖出三千二百件"),
    ("卡号后4位", "卡号后四位"),
    ("这款手机售价5999", "这款手机售价五千九百九十九"),  # after an amount word: an amount
    ("订单金额3999", "订单金额三千九百九十九"),
    ("微信好友超过2000", "微信好友超过两千"),
    ("他的手机号是13812345678", "他的手机号是幺三八幺二三四五六七八"),
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
    ("配置了i7-13700K处理器", "配置了i seven一三七零零K处理器"),  # the series digit before a hyphen
    ("符合GB/T 7714-2015标准", "符合GB/T七七一四 二零一五标准"),  # later groups after - or : belong to the code
    ("通过ISO 9001:2015认证", "通过ISO九零零一 二零一五认证"),
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


# --- polyphones and neutral tones -------------------------------------------------------------------------------------

def _reading_of(sentence: str, char: str, occurrence: int = 1) -> str:
    from tts_app.frontend.g2p import read_text

    index = [i for i, c in enumerate(sentence) if c == char][occurrence - 1]
    return {r.position: r.reading for r in read_text(sentence)}[index]


@pytest.mark.parametrize("sentence, reading", [
    ("一个长得很帅的小伙子走了进来。", "zhang3"),  # after a numeral + classifier (read cháng before)
    ("那位长得很漂亮的姑娘是我妹妹。", "zhang3"),
    ("一个长着大胡子的人。", "zhang3"),  # 长着 after a numeral + classifier, the same class
    ("这几年孩子长得很快。", "zhang3"),  # after a time word
    ("一年长得比一年高。", "zhang3"),
    ("他长得跟他爸一模一样。", "zhang3"),
    ("这条路长得望不到头。", "chang2"),  # a thing that cannot grow: the adjective "long"
    ("这根绳子很长。", "chang2"),
])
def test_zhang_de_grows_or_looks_and_chang_is_long(sentence, reading):
    assert _reading_of(sentence, "长") == reading


@pytest.mark.parametrize("sentence", ["他们的生活很简朴。", "这是一件质朴的作品。", "古朴的小镇。", "民风纯朴。", "他为人诚朴。"])
def test_pu_in_plain_adjectives_is_never_the_surname_piao(sentence):
    assert _reading_of(sentence, "朴") == "pu3"


def test_the_surname_piao_stays_at_the_start_of_a_name():
    assert _reading_of("朴槿惠访问了中国。", "朴") == "piao2"
    assert _reading_of("他姓朴。", "朴") == "piao2"


@pytest.mark.parametrize("sentence, char, reading", [
    ("我去超市买东西。", "西", "xi5"),  # 东西 "things": dōngxi
    ("这东西真好用。", "西", "xi5"),
    ("吃东西的时候别说话。", "西", "xi5"),
    ("这条街东西走向。", "西", "xi1"),  # the directions: dōngxī
    ("城墙东西长三里。", "西", "xi1"),
    ("东西部地区的差距。", "西", "xi1"),
    ("今天早上下雨了。", "上", "shang5"),  # 早上 zǎoshang, as 晚上 wǎnshang already was
    ("晚上我们去看电影。", "上", "shang5"),
    ("他身上全是泥。", "上", "shang5"),
    ("你先休息一下。", "息", "xi5"),
    ("我们商量一下。", "量", "liang2"),  # a polyphone keeps its citation tone (the held-out sets' convention)
    ("他上楼了。", "上", "shang4"),  # a character read alone keeps its full tone
    ("这不是我的书。", "是", "shi4"),  # 不是 "is not" (CC-CEDICT lists bù·shi "fault" too: left alone)
])
def test_words_spoken_with_a_neutral_tone_have_it_and_polyphones_keep_their_citation_tone(sentence, char, reading):
    assert _reading_of(sentence, char) == reading


# --- the hard segment limit -------------------------------------------------------------------------------------------

_LONG_TEXTS = [
    "首先我们需要准备好所有的材料和工具然后按照说明书一步一步地进行组装，最后，把所有的零件都检查一遍确保没有遗漏任何东西。",
    "会议结束以后大家一起去餐厅吃饭并且讨论了下一阶段的工作安排和人员分工，最后，经理总结了今天的会议内容并宣布散会。",
    "我们今天早上去了公园在湖边散步看风景中午吃了很好吃的面条下午又去图书馆看书晚上回家。",
    "the quick brown fox jumps over the lazy dog and keeps running far away from the farm, at last, it rests.",
]


@pytest.mark.parametrize("max_chars", [10, 12, 16, 20, 24])
@pytest.mark.parametrize("text", _LONG_TEXTS, ids=["zh1", "zh2", "zh3", "en"])
def test_a_hard_split_leaves_no_two_or_three_character_leftover(text, max_chars):
    from tts_app.frontend.segment import num_speakable

    segments = [s.source_text for s in prepare_text(text, max_segment_chars=max_chars).segments]
    assert all(num_speakable(s) >= 4 for s in segments), segments  # the default min_segment_chars
    assert "最后，" not in segments


def test_a_hard_split_keeps_trailing_punctuation_within_the_limit():
    text = "我们今天早上去了公园在湖边散步看风景中午吃了很好吃的面条下午又去图书馆看书晚上回家了。"  # no clause marks
    for max_chars in range(8, 31):
        segments = [s.source_text for s in prepare_text(text, max_segment_chars=max_chars).segments]
        assert "".join(segments) == text
        assert all(len(s) <= max_chars for s in segments), (max_chars, segments)  # the 。 included


@pytest.mark.parametrize("text, code", [("售价USD1299", "USD"), ("It costs USD1299.", "USD"), ("营收RMB1500万元", "RMB")])
def test_a_currency_code_before_an_amount_is_no_model_code(text, code):
    spoken = _spoken(text)
    assert code in spoken and "thousand" in spoken  # the amount read as a number, not digit by digit or in pairs
