import pytest

from tts_app.errors import InputError
from tts_app.request import SynthesisParams


def test_params_reject_bad_values_with_named_field():
    with pytest.raises(InputError, match="top_p"):
        SynthesisParams(top_p=1.5)
    with pytest.raises(InputError, match="temperature"):
        SynthesisParams(temperature=0)


def test_batch_key_ignores_seed_only():
    assert SynthesisParams(seed=1).batch_key() == SynthesisParams(seed=2).batch_key()
    assert SynthesisParams(use_cache=False).batch_key() != SynthesisParams().batch_key()


def test_emotion_control_takes_exactly_one_valid_source():
    import numpy as np
    import pytest

    from tts_app.errors import InputError
    from tts_app.request import EMOTION_NAMES, EmotionControl, ReferenceAudio

    assert EmotionControl(vector=[0, 1, 0, 0, 0, 0, 0, 0.5]).vector == (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5)
    assert len(EMOTION_NAMES) == 8 and EMOTION_NAMES[0] == "happy" and EMOTION_NAMES[-1] == "calm"
    clip = ReferenceAudio(samples=np.zeros(100, np.float32), sampling_rate=16000)
    with pytest.raises(InputError, match="needs a source"):
        EmotionControl()
    with pytest.raises(InputError, match="choose one"):
        EmotionControl(reference_audio=clip, vector=(0,) * 8)
    with pytest.raises(InputError, match="has 3 values; give 8"):
        EmotionControl(vector=(0.1, 0.2, 0.3))
    with pytest.raises(InputError, match="angry=1.5"):
        EmotionControl(vector=(0, 1.5, 0, 0, 0, 0, 0, 0))
    with pytest.raises(InputError, match=r"angry=nan"):
        EmotionControl(vector=(0, float("nan"), 0, 0, 0, 0, 0, 0))
    with pytest.raises(InputError, match="weight 2"):
        EmotionControl(vector=(0,) * 8, weight=2)
    with pytest.raises(InputError, match="only used with emotion from text"):
        EmotionControl(vector=(0,) * 8, text="happy")
