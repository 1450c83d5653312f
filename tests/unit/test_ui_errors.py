"""The page's failure message names the request id the server logged the failure's one traceback under (issue 14
item 9), in the user's language; the voice library's refusals come in the user's language too (item 2)."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest
from tts_app.runtime import Runtime
from tts_app.ui import handlers

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")


def _boom(rows):
    return ValueError("kaput") if any("boom" in r.text for r in rows) else None


@pytest.mark.parametrize("lang, words", [("en", "request"), ("zh", "请求")])
def test_a_failing_request_in_a_batch_of_three_shows_the_id_of_its_one_logged_traceback(caplog, lang, words):
    adapter = FakeAdapter(raise_if=_boom)
    runtime = Runtime.from_adapter(adapter, "fake", EngineConfig(max_batch_size=4, wait_window_ms=300))
    ctx = SimpleNamespace(engine=runtime.engine, load_error=None)
    params = SynthesisParams(seed=5, greedy=True)
    try:
        with caplog.at_level(logging.INFO, logger="tts_app"):
            mates = [runtime.engine.submit(SynthesisRequest(text=t, reference_audio=REF, params=params))
                     for t in ("This is fine.", "This too.")]
            bad = SynthesisRequest(text="This goes boom.", reference_audio=REF, params=params)
            with pytest.raises(gr.Error) as caught:
                handlers.run_web_request(ctx, bad, lang, lambda *a, **k: None)
            assert all(m.result(timeout=30).ok for m in mates)  # its batch-mates (other users) got their audio
    finally:
        runtime.close()
    assert adapter.calls[0] == 3  # the three shared a batch
    message = caught.value.message
    assert bad.request_id in message and words in message and "kaput" in message and "5" in message
    # said once, in the page's language: the engine gives the bare cause, the page's table the framing (issue 23)
    failed = {"en": "synthesis failed", "zh": "合成失败"}[lang]
    assert message.lower().count(failed) == 1 and "synthesis failed" not in message.lower().replace(failed, "", 1)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and bad.request_id in tracebacks[0].getMessage()


@pytest.fixture()
def voice_ctx(tmp_path, data_dir):
    from tts_app.voices import VoiceLibrary

    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0))
    library = VoiceLibrary(tmp_path / "voices")
    library.save("mei", data_dir / "en_female_1.wav", runtime.references)
    yield SimpleNamespace(voices=library, references=runtime.references, lang=None, output_root=tmp_path), data_dir
    runtime.close()


def _refusal(call) -> str:
    with pytest.raises(gr.Error) as caught:
        call()
    return caught.value.message


@pytest.mark.parametrize("accept, expected", [
    ("zh-CN,zh;q=0.9", ["不能重命名", "已被使用", "没有名为 'ghost' 的声音", "声音名称为空", "请先选择"]),
    ("en-US,en;q=0.9", ["cannot be renamed", "already taken", "no voice named 'ghost'", "name is empty",
                        "Select a saved voice"]),
])
def test_the_voice_librarys_refusals_are_in_the_pages_language_with_no_traceback(voice_ctx, accept, expected,
                                                                                  caplog):
    from tts_app.ui import voices as ui_voices

    ctx, data_dir = voice_ctx
    request = SimpleNamespace(headers={"accept-language": accept})
    bundled = next(v.name for v in ctx.voices.list() if v.bundled)
    with caplog.at_level(logging.INFO):
        messages = [
            _refusal(lambda: ui_voices.rename_voice(ctx, bundled, "x", request=request)),
            _refusal(lambda: ui_voices.rename_voice(ctx, "mei", bundled, request=request)),
            _refusal(lambda: ui_voices.delete_voice(ctx, "ghost", request=request)),
            _refusal(lambda: ui_voices.save_voice(ctx, str(data_dir / "en_female_1.wav"), "Hello.", "  ",
                                                  request=request)),
            _refusal(lambda: ui_voices.delete_voice(ctx, "", request=request)),
        ]
    for message, part in zip(messages, expected):
        assert part in message, (message, part)
    assert not [r for r in caplog.records if r.exc_info]
