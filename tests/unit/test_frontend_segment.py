"""Segmentation and pause markers of the text front end, including a property test: nothing dropped, nothing
repeated, never a cut inside an English word or a number."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tts_app.errors import InputError
from tts_app.frontend import prepare_text
from tts_app.frontend.segment import TRAILING_PUNCTUATION, num_speakable, spoken_len


def _locate(prepared):
    """(start, end) of each segment's source text in the normalised text, checking that the segments follow each
    other with only whitespace between them (nothing dropped, nothing repeated, order kept)."""
    text, pos, spans = prepared.normalized_text, 0, []
    for seg in prepared.segments:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        assert seg.source_text and text.startswith(seg.source_text, pos), (text, pos, seg.source_text)
        spans.append((pos, pos + len(seg.source_text)))
        pos += len(seg.source_text)
    assert text[pos:].strip() == ""
    return spans


def _word_char(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def test_sentence_boundaries_with_default_pause_and_no_pause_after_the_last():
    prepared = prepare_text("今天天气很好。我们去公园吧！Shall we go? Yes, let us go now.", default_pause_ms=300,
                            pack_sentences=False)
    assert [s.source_text for s in prepared.segments] == ["今天天气很好。", "我们去公园吧！", "Shall we go?",
                                                          "Yes, let us go now."]
    assert [s.pause_after_ms for s in prepared.segments] == [300, 300, 300, 0]


def test_a_text_within_the_limit_is_one_segment_spoken_in_one_pass():
    """As every family's upstream tool speaks it: sentences are where a segment may end, not where it must."""
    prepared = prepare_text("Hello there. This is a short test of the speech engine.")
    assert [s.source_text for s in prepared.segments] == ["Hello there. This is a short test of the speech engine."]
    mixed = prepare_text("今天天气很好。我们去公园吧！Shall we go? Yes, let us go now.")
    assert [s.source_text for s in mixed.segments] == ["今天天气很好。我们去公园吧！Shall we go? Yes, let us go now."]
    assert mixed.segments[0].pause_after_ms == 0


def test_sentences_are_packed_into_as_few_segments_as_fit_the_limit():
    sentences = ["The first sentence is here.", "A second one.", "Third sentence, a little longer than that.",
                 "Four.", "And the fifth closes it."]
    prepared = prepare_text(" ".join(sentences), max_segment_chars=45, default_pause_ms=250)
    texts = [s.source_text for s in prepared.segments]
    assert texts == ["The first sentence is here. A second one.", "Third sentence, a little longer than that.",
                     "Four. And the fifth closes it."]
    assert all(spoken_len(t, 0, len(t)) <= 45 for t in texts)
    assert [s.pause_after_ms for s in prepared.segments] == [250, 250, 0]
    assert len(prepare_text(" ".join(sentences), max_segment_chars=45, pack_sentences=False).segments) == 5


def test_the_models_own_unit_packs_sentences_and_cuts_an_over_long_one():
    """A model counting its own units (IndexTTS 2: text tokens, max_text_tokens_per_segment): sentences packed while
    the sum of their units fits; a sentence over the unit limit is cut at clauses. Here a unit is a word."""
    words = lambda text: len(text.split())  # noqa: E731
    text = ("One two three. Four five. Six seven eight nine ten eleven, twelve thirteen fourteen fifteen sixteen, "
            "seventeen eighteen. Nineteen twenty.")
    prepared = prepare_text(text, max_segment_chars=600, measure=words, max_segment_units=6)
    texts = [s.source_text for s in prepared.segments]
    assert texts[0] == "One two three. Four five."
    assert texts[-1] == "seventeen eighteen. Nineteen twenty."  # the long sentence's last clause joins the next
    assert all(words(t) <= 6 for t in texts)
    assert "".join(texts).replace(" ", "") == text.replace(" ", "")


def test_abbreviation_dot_before_a_lower_case_word_does_not_end_a_sentence():
    prepared = prepare_text("We met on Main St. in the morning. Then we left.", pack_sentences=False)
    assert [s.source_text for s in prepared.segments] == ["We met on Main St. in the morning.", "Then we left."]


def test_pause_markers_set_exact_silence_and_cut_segments():
    prepared = prepare_text("第一句话[pause:500ms]第二句话，[pause:1.5s]第三句话。[PAUSE : 2 s]")
    assert [(s.source_text, s.pause_after_ms) for s in prepared.segments] == [
        ("第一句话", 500), ("第二句话，", 1500), ("第三句话。", 2000)]
    assert "pause" not in prepared.normalized_text.lower()


@pytest.mark.parametrize("text, expected", [
    ("很重(zhòng)要[pause:500ms]，请去银行。", [("很重要，", 500), ("请去银行。", 0)]),
    ("好的[pause:1s] 。。走吧！", [("好的 。。", 1000), ("走吧！", 0)]),
    ("Wait[pause:300ms], then go.", [("Wait,", 300), ("then go.", 0)]),
    ("他说[pause:300ms]“走吧”。", [("他说", 300), ("“走吧”。", 0)]),  # an opening quote starts the next segment
])
def test_punctuation_right_after_a_pause_marker_ends_the_segment_before_the_pause(text, expected):
    prepared = prepare_text(text)
    assert [(s.source_text, s.pause_after_ms) for s in prepared.segments] == expected


def test_short_segment_is_merged_but_never_across_a_pause_marker():
    merged = prepare_text("好。今天我们去公园散步吧。", min_segment_chars=4)
    assert [s.source_text for s in merged.segments] == ["好。今天我们去公园散步吧。"]
    kept = prepare_text("好。[pause:800ms]今天我们去公园散步吧。", min_segment_chars=4)
    assert [(s.source_text, s.pause_after_ms) for s in kept.segments] == [("好。", 800), ("今天我们去公园散步吧。", 0)]


def test_bad_pause_markers_are_warnings_or_errors_never_eaten_silently():
    prepared = prepare_text("你好[pause:abc]世界[pause:20s]再见[pause:-3s]了")
    assert [s.pause_after_ms for s in prepared.segments] == [200, 10_000, 200, 0]
    assert len(prepared.warnings) == 3 and all("position" in w for w in prepared.warnings)
    assert "[pause:500ms]" in prepared.warnings[0]
    leading = prepare_text("[pause:1s]你好世界")
    assert leading.segments[0].source_text == "你好世界" and "no text before it" in leading.warnings[0]
    with pytest.raises(InputError, match="not closed"):
        prepare_text("你好[pause:500ms 世界")


def test_long_sentence_is_cut_at_clause_punctuation_first():
    text = "我们今天早上去了公园，在湖边散步看风景，中午吃了很好吃的面条，下午又去图书馆看书。"
    prepared = prepare_text(text, max_segment_chars=20)
    assert all(spoken_len(s.source_text, 0, len(s.source_text)) <= 20 for s in prepared.segments)
    assert all(s.source_text.endswith(("，", "。")) for s in prepared.segments)
    assert "".join(s.source_text for s in prepared.segments) == text


def test_hard_split_never_cuts_an_english_word_and_prefers_spaces():
    text = "the quick brown fox jumps over the lazy dog and keeps running far away"
    prepared = prepare_text(text, max_segment_chars=16)
    assert " ".join(s.source_text for s in prepared.segments) == text
    assert all(len(s.source_text) <= 16 for s in prepared.segments)
    # max_segment_chars is a hard limit: a word longer than it is the only thing ever cut inside.
    long_word = prepare_text("a Supercalifragilisticexpialidocious day", max_segment_chars=10, min_segment_chars=0)
    assert [s.source_text for s in long_word.segments] == ["a", "Supercalif", "ragilistic", "expialidoc", "ious day"]


def test_annotated_character_stays_in_its_segment_with_its_rendering():
    text = "这是一个很长很长很长的句子里面有一个银行(yin2 hang2)和一个行(hang2)长还有很多别的字"
    prepared = prepare_text(text, max_segment_chars=10, supports_pinyin=True)
    rendered = "".join(s.text for s in prepared.segments)
    assert rendered.count("{hang2}") == 2 and rendered.count("{yin2}") == 1
    for seg in prepared.segments:  # each segment renders its own characters only
        assert seg.text.replace("{yin2}", "银").replace("{hang2}", "行") == seg.source_text


_ZH = st.sampled_from(list("我们今天去银行找行长还没钱的了重要中国人大家好"))
_EN = st.sampled_from(["hello", "world", "Supercalifragilistic", "a", "TTS", "I"])
_DIGITS = st.integers(min_value=0, max_value=10**9).map(str)
_PUNCT = st.sampled_from(list("，。！？、；：,.!?;: —…()\"'“”\n"))
_MARKUP = st.sampled_from(["[pause:300ms]", "[pause:1s]", "(hang2)", "(zhong4)", "[pause]", "(xyz)", "(chang2",
                           "(yin2)", "DE5", "<行|HANG2>", "[laugh]", "\n***\n", "(de)", "(AI)", "https://a.example/x/y"])
_PIECE = st.one_of(_ZH, _ZH, _ZH, _EN, _DIGITS, _PUNCT, st.just(" "), _MARKUP)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_PIECE, min_size=1, max_size=60), max_chars=st.integers(min_value=8, max_value=40),
       min_chars=st.integers(min_value=0, max_value=6))
@example(pieces=["我", "\n***\n", "，", "我"], max_chars=8, min_chars=0)  # a comma after a scene break (found once)
def test_segmentation_loses_nothing_keeps_the_limit_and_never_cuts_words(pieces, max_chars, min_chars):
    """Segments never exceed max_segment_chars, joined they reproduce the normalised text, and a Latin word or
    number is cut only when it is itself longer than the limit."""
    text = "".join(pieces)
    try:
        prepared = prepare_text(text, max_segment_chars=max_chars, min_segment_chars=min_chars)
    except InputError as exc:
        assert "nothing to speak" in str(exc) or "empty" in str(exc)
        return
    spans = _locate(prepared)
    norm = prepared.normalized_text

    def spoken_core(text: str) -> str:  # leftover punctuation may ride along on a segment; the speech may not
        kept = [i for i, ch in enumerate(text) if num_speakable(ch)]
        return text[kept[0]:kept[-1] + 1] if kept else ""

    assert all(len(spoken_core(seg.source_text)) <= max_chars for seg in prepared.segments), \
        [s.source_text for s in prepared.segments]
    # (_locate checked that the segments, joined with the whitespace between them, reproduce the text.)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if end == start and _word_char(norm[end - 1]) and _word_char(norm[start]):  # a cut inside a word
            lo, hi = end, end
            while lo > 0 and _word_char(norm[lo - 1]):
                lo -= 1
            while hi < len(norm) and _word_char(norm[hi]):
                hi += 1
            while hi < len(norm) and norm[hi] in TRAILING_PUNCTUATION:  # punctuation stays with its word
                hi += 1
            assert hi - lo > max_chars, (norm, end)
    for seg in prepared.segments:
        assert seg.pause_after_ms >= 0
        assert num_speakable(seg.source_text) > 0 or len(prepared.segments) == 1
    for seg in prepared.segments[1:]:  # punctuation closes the segment before it, never opens the next one
        assert seg.source_text[0] not in TRAILING_PUNCTUATION, [s.source_text for s in prepared.segments]
