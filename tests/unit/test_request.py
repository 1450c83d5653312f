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
