"""The Single tab for a first-time user (issue 23, Why 5): Generate with nothing uploaded points at the example voices
(in the page's language); the Emotion panel shows only the inputs of the source picked; a text with chapters offers
its per-chapter files. Through the tab's own handlers on the fake model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import fake_app_context  # noqa: E402
from tts_app.ui import handlers  # noqa: E402


@pytest.fixture()
def ctx(tmp_path):
    ctx = fake_app_context(tmp_path / "out")
    yield ctx
    ctx.close()


def _page(lang: str):
    return SimpleNamespace(headers={"accept-language": lang}, session_hash="tab1")


@pytest.mark.parametrize("lang, words", [("en", "pick an example voice"), ("zh-CN", "选择一个示例声音")])
def test_generate_without_a_clip_points_at_the_example_voices(ctx, lang, words):
    examples = [v.name for v in ctx.voices.list() if v.bundled]
    assert len(examples) == 4
    for generate in (handlers.synthesize, lambda *a, **k: list(handlers.synthesize_stream(*a, **k))):
        with pytest.raises(gr.Error) as caught:
            generate(ctx, None, "你好，欢迎收听。", request=_page(lang), progress=lambda *a, **k: None)
        assert words in caught.value.message and all(name in caught.value.message for name in examples)


def test_the_emotion_panel_shows_only_the_chosen_sources_inputs():
    from tts_app.ui.emotion import EMOTION_MODES, emotion_inputs_shown

    shown = {mode: sorted(k for k, v in emotion_inputs_shown(mode).items() if v) for mode in EMOTION_MODES}
    assert shown == {"none": [], "clip": ["clip", "weight"], "vector": ["vector", "weight"],
                     "text": ["text", "weight"]}
    assert emotion_inputs_shown(None) == emotion_inputs_shown("none")


def test_a_text_with_chapters_offers_one_file_per_chapter(ctx, data_dir):
    from tts_app.server.sessions import COOKIE_NAME, new_browser_token

    me = SimpleNamespace(headers={"cookie": f"{COOKIE_NAME}={new_browser_token()}"}, session_hash="tab1")
    clip = str(data_dir / "zh_female_1.wav")
    text = "# 第一章 出发\n我们早上出发。\n\n# 第二章 到达\n晚上到了。"
    _, _, metadata, _, _ = handlers.synthesize(ctx, clip, text, request=me, progress=lambda *a, **k: None)
    box = handlers.chapter_files(ctx, metadata, request=me)
    assert box["visible"] is True and len(box["value"]) == 2
    assert [name.rsplit("/", 1)[-1].split(".")[1][:4] for name in box["value"]] == ["ch01", "ch02"]
    assert all(open(path, "rb").read(4) == b"RIFF" for path in box["value"])  # WAV files, as the main audio
    other = SimpleNamespace(headers={"cookie": f"{COOKIE_NAME}={new_browser_token()}"}, session_hash="tab2")
    assert handlers.chapter_files(ctx, metadata, request=other)["visible"] is False  # not another browser's files
    _, _, plain, _, _ = handlers.synthesize(ctx, clip, "没有章节。", request=me, progress=lambda *a, **k: None)
    assert handlers.chapter_files(ctx, plain, request=me) == {"__type__": "update", "value": None, "visible": False}


@pytest.mark.parametrize("lang, override, polyphone", [("zh-CN,zh;q=0.9", "指定读音", "多音字"),
                                                       ("en-US", "override", "polyphone")])
def test_the_preview_names_its_categories_in_the_pages_language(ctx, lang, override, polyphone):
    """Without --lang (one page for every browser) each span's category is in its page's language (was "override /
    指定读音" for everyone), and the widget's colours know the words of both."""
    from tts_app.ui.texts import preview_colors

    spans, _ = handlers.pronunciation_preview(ctx, "重(chong2)新开始，还是行。", request=_page(lang))
    labels = {label for _, label in spans if label}
    assert labels == {override, polyphone}, spans
    assert preview_colors(None)[override] == "green" and preview_colors(None)[polyphone] == "orange"
    assert set(preview_colors("zh")) == {"指定读音", "多音字"}  # with --lang: one language, as its legend shows


@pytest.mark.parametrize("lang, words", [("en-US", "What GLM-TTS-like receives"), ("zh-CN", "GLM-TTS-like 实际收到的文本")])
def test_the_preview_shows_the_phoneme_in_text_a_glm_tts_like_model_receives(tmp_path, ctx, lang, words):
    """Issue 28 item 3: on a model that reads phoneme-in text (GLM-TTS's facts) the preview's notes show what its LM
    gets for an override, through the GLM-TTS adapter's own ``model_text`` (the call that builds its prompt); a
    model without phoneme-in previews as before."""
    from tests.fakes import FakeAdapter, fake_facts
    from tts_app.adapters.glmtts.adapter import GLMTTSAdapter
    class PhonemeInFake(FakeAdapter):
        display_name = "GLM-TTS-like"
        model_text = GLMTTSAdapter.model_text  # the real family's text step (it reads nothing of the model)

    text = "这很重(zhòng)要。"
    glm = fake_app_context(tmp_path / "glm", PhonemeInFake(fake_facts(supports_pinyin=True,
                                                                      supports_phoneme_in=True)))
    try:
        spans, notes = handlers.pronunciation_preview(glm, text, request=_page(lang))
        _, no_override = handlers.pronunciation_preview(glm, "这很重要。", request=_page(lang))
    finally:
        glm.close()
    assert words in notes and "`这很<|ZH|><|ONG4|>要。`" in notes, notes
    assert "<|" not in no_override  # nothing the user forced: the text reaches the model as typed
    plain_spans, plain_notes = handlers.pronunciation_preview(ctx, text, request=_page(lang))
    assert plain_spans == spans and "<|" not in plain_notes and words not in plain_notes  # as before
