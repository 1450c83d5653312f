"""Text the model cannot read (every word outside its vocabulary) is the user's mistake, refused before any work in
the user's language; a sentence of it inside readable text is left out instead of sending the model punctuation."""

from __future__ import annotations

import pytest

from tts_app.errors import InputError
from tts_app.frontend.prepare import prepare_text


def _latin_and_hanzi_only(chars):
    """A zh/en vocabulary: Cyrillic (and anything else outside Latin / CJK) is unencodable."""
    return {c for c in chars if not (c.isascii() or "\u4e00" <= c <= "\u9fff" or c in "，。！？、")}


@pytest.mark.parametrize("text", ["Привет", "Привет!", "Привет. Как дела?"])
def test_text_the_model_cannot_read_is_refused_naming_the_characters(text):
    with pytest.raises(InputError) as refused:
        prepare_text(text, unencodable_characters=_latin_and_hanzi_only)
    notice = refused.value.args[0]
    assert "cannot read" in str(notice) and "П" in str(notice)
    assert "读不了" in notice.render("zh")


def test_an_unreadable_sentence_inside_readable_text_is_left_out_keeping_its_pause():
    prepared = prepare_text("Hello there. Привет! [pause:700ms] 你好。", unencodable_characters=_latin_and_hanzi_only,
                            pack_sentences=False)
    spoken = [segment.text for segment in prepared.segments]
    assert spoken and all("Привет" not in t and any(c.isalnum() for c in t) for t in spoken), spoken
    assert any("Hello" in t for t in spoken) and any("你好" in t for t in spoken)
    assert max(segment.pause_after_ms for segment in prepared.segments) >= 700  # the marker's pause is kept


def test_without_a_vocabulary_check_nothing_is_left_out():
    assert "Привет" in "".join(s.text for s in prepare_text("Привет. Hello.", pack_sentences=False).segments)
