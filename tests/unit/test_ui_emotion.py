"""The Single tab's emotion controls -> EmotionControl (no gradio, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import fake_facts
from tts_app.errors import InputError
from tts_app.request import ReferenceAudio
from tts_app.ui.emotion import emotion_from_controls, emotion_modes

EMOTIONAL = fake_facts(supports_emotion=True, supports_emotion_text=True)
CLIP = ReferenceAudio(samples=np.zeros(1600, np.float32), sampling_rate=16000)


def controls(facts, **values):
    args = dict(mode="none", clip_path=None, vector=[0.0] * 8, weight=None, text=None,
                prepare_clip=lambda path: CLIP)
    args.update(values)
    return emotion_from_controls(facts, **args)


def test_each_source_becomes_its_emotion_control():
    assert controls(EMOTIONAL) is None  # the voice reference's own emotion: nothing sent
    clip = controls(EMOTIONAL, mode="clip", clip_path="sad.wav", weight=0.4)
    assert clip.reference_audio is CLIP and clip.weight == 0.4
    vector = controls(EMOTIONAL, mode="vector", vector=[0.5, None, 0, 0, 0, 0, 0, 0.25])
    assert vector.vector == (0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25) and vector.weight == 1.0
    text = controls(EMOTIONAL, mode="text", text="  ")
    assert text.from_text and text.text is None  # empty: the text being spoken
    assert controls(EMOTIONAL, mode="text", text="气死我了").text == "气死我了"


def test_sources_the_model_lacks_are_refused_by_name():
    assert emotion_modes(fake_facts()) == ("none",)
    assert emotion_modes(fake_facts(supports_emotion=True)) == ("none", "clip", "vector")
    assert emotion_modes(EMOTIONAL) == ("none", "clip", "vector", "text")
    with pytest.raises(InputError, match="no emotion control"):
        controls(fake_facts(), mode="vector")
    with pytest.raises(InputError, match="no emotion from text"):
        controls(fake_facts(supports_emotion=True), mode="text")
    with pytest.raises(InputError, match="needs an emotion clip"):
        controls(EMOTIONAL, mode="clip")
    with pytest.raises(InputError, match="in \\[0, 1\\]"):
        controls(EMOTIONAL, mode="vector", vector=[2, 0, 0, 0, 0, 0, 0, 0])
    with pytest.raises(InputError, match="weight"):
        controls(EMOTIONAL, mode="vector", weight=1.5)
    with pytest.raises(InputError, match="not one of"):
        controls(EMOTIONAL, mode="loud")
