"""GenerationDefaults: the checkpoint's generation config first, documented family defaults second, each with its
source; ``resolve`` fills the knobs a request leaves out."""

from __future__ import annotations

import pytest
from transformers import GenerationConfig

from tts_app.adapters.base import SOURCE_CHECKPOINT, GenerationDefaults
from tts_app.speaking_rate import CJK_CHAR_S, OTHER_CHAR_S, max_chars_for_speech_s
from tts_app.errors import InputError
from tts_app.request import SynthesisParams

FAMILY = {"greedy": (False, "family doc"), "temperature": (0.9, "family doc"), "top_p": (1.0, "family doc"),
          "top_k": (50, "family doc"), "max_new_tokens": (300, "family cap")}


def test_checkpoint_values_win_and_name_their_key():
    config = GenerationConfig(do_sample=True, temperature=1.8, top_k=45, guidance_scale=3.0, max_new_tokens=125)
    defaults = GenerationDefaults.from_generation_config(config, family_defaults={**FAMILY,
                                                                                   "cfg_scale": (1.5, "doc")})
    assert (defaults.greedy, defaults.temperature, defaults.top_k, defaults.cfg_scale, defaults.max_new_tokens) == (
        False, 1.8, 45, 3.0, 125)
    assert defaults.sources["temperature"] == f"{SOURCE_CHECKPOINT} (temperature=1.8)"
    assert defaults.sources["greedy"] == f"{SOURCE_CHECKPOINT} (do_sample=True)"
    assert defaults.sources["cfg_scale"] == f"{SOURCE_CHECKPOINT} (guidance_scale=3.0)"
    # not in the checkpoint: the family default and its documented source
    assert defaults.top_p == 1.0 and defaults.sources["top_p"] == "family doc"


def test_a_knob_the_family_lacks_is_none_even_if_the_checkpoint_sets_it():
    config = GenerationConfig(guidance_scale=2.0, do_sample=False)
    defaults = GenerationDefaults.from_generation_config(config, family_defaults=FAMILY,
                                                         absent={"cfg_scale": "no guidance in this family"})
    assert defaults.cfg_scale is None and defaults.sources["cfg_scale"] == "no guidance in this family"
    assert defaults.greedy is True  # do_sample=False
    assert defaults.ras_win_len is None


def test_max_new_tokens_needs_a_source():
    with pytest.raises(KeyError, match="max_new_tokens"):
        GenerationDefaults.from_generation_config(GenerationConfig(), family_defaults={})


def test_resolve_fills_only_what_the_request_left_out_and_drops_absent_knobs():
    defaults = GenerationDefaults(greedy=False, temperature=0.9, top_p=1.0, top_k=50, cfg_scale=None,
                                  max_new_tokens=125)
    resolved = defaults.resolve(SynthesisParams(seed=4, top_k=7, cfg_scale=2.0, use_cache=False))
    assert (resolved.greedy, resolved.temperature, resolved.top_p, resolved.top_k, resolved.max_new_tokens) == (
        False, 0.9, 1.0, 7, 125)
    assert resolved.cfg_scale is None  # the family has no guidance: what runs has none
    assert resolved.seed == 4 and resolved.use_cache is False
    assert defaults.resolve(resolved) == resolved  # idempotent
    # a given False/0-like value is kept, never replaced by the default
    assert defaults.resolve(SynthesisParams(greedy=True)).greedy is True


def test_resolve_refuses_a_bad_checkpoint_value_with_the_projects_error():
    bad = GenerationDefaults(greedy=False, temperature=0.0, top_p=1.0, top_k=50, cfg_scale=None, max_new_tokens=10)
    with pytest.raises(InputError, match="temperature"):
        bad.resolve(SynthesisParams())


def test_with_value_records_the_new_source():
    defaults = GenerationDefaults(greedy=True, temperature=None, top_p=None, top_k=None, cfg_scale=1.3,
                                  max_new_tokens=40500, sources={"max_new_tokens": "checkpoint"})
    capped = defaults.with_value("max_new_tokens", 600, "capped per segment")
    assert capped.max_new_tokens == 600 and capped.sources["max_new_tokens"] == "capped per segment"
    assert defaults.max_new_tokens == 40500


def test_segment_length_from_the_cap_fits_the_slowest_language():
    # 10 s cap, English only: 0.7 x 10 s at 15 characters/s
    assert max_chars_for_speech_s(10.0, ("en",)) == int(10.0 * 0.7 / OTHER_CHAR_S) == 105
    # with Chinese the slower rate decides
    assert max_chars_for_speech_s(10.0, ("en", "zh")) == int(10.0 * 0.7 / CJK_CHAR_S) == 31
    assert max_chars_for_speech_s(0.5, ("en",)) == 8  # never below the front end's floor
    with pytest.raises(ValueError):
        max_chars_for_speech_s(10.0, ())


def test_beams_come_from_the_family_only_and_a_request_can_change_them():
    """Every GenerationConfig says num_beams=1 / length_penalty=1.0 (transformers' own defaults), which says nothing
    about how a family is run: beams come from the family's defaults (IndexTTS 2: upstream's 3 beams)."""
    config = GenerationConfig(num_beams=1, length_penalty=1.0, do_sample=True)
    plain = GenerationDefaults.from_generation_config(config, family_defaults=FAMILY)
    assert plain.num_beams is None and plain.length_penalty is None
    assert plain.resolve(SynthesisParams(num_beams=4)).num_beams is None  # a family without beams runs none
    beams = GenerationDefaults.from_generation_config(
        config, family_defaults={**FAMILY, "num_beams": (3, "upstream infer"), "length_penalty": (0, "upstream")})
    assert (beams.num_beams, beams.length_penalty, beams.sources["num_beams"]) == (3, 0.0, "upstream infer")
    assert beams.resolve(SynthesisParams()).num_beams == 3
    assert beams.resolve(SynthesisParams(num_beams=1, length_penalty=1.0)).length_penalty == 1.0


@pytest.mark.parametrize("value", [0, 9])
def test_num_beams_out_of_range_is_refused_naming_it(value):
    with pytest.raises(InputError, match="num_beams"):
        SynthesisParams(num_beams=value)


# Each family's generation_config.json as transformers' conversion scripts write it (huggingface/transformers,
# src/transformers/models/...): the values our defaults must read, length limits as transformers reads them.
DIA_CONVERTED = dict(do_sample=True, top_k=45, top_p=0.95, temperature=1.2, guidance_scale=3.0,
                     max_length=3072)  # dia/convert_dia_to_hf.py get_generation_config ("Decoder max length")
VIBEVOICE_CONVERTED = dict(max_new_tokens=40500, do_sample=False,
                           guidance_scale=1.3)  # vibevoice/convert_vibevoice_to_hf.py (1.5B; 7B: 20250)
CSM_CONVERTED = dict(max_new_tokens=125, do_sample=True, top_k=50,
                     temperature=0.9)  # csm/convert_csm.py (depth_decoder_* the same)
HIGGS_CONVERTED = dict(bos_token_id=1, eos_token_id=128009, pad_token_id=128001, ras_win_len=7,
                       ras_win_max_num_repeat=2)  # higgs_audio_v2/convert_higgs_audio_v2_to_hf.py: no length


def test_max_length_alone_is_a_total_length_cap_not_a_new_token_count():
    defaults = GenerationDefaults.from_generation_config(GenerationConfig(**DIA_CONVERTED), family_defaults=FAMILY)
    assert defaults.max_length == 3072
    # no max_new_tokens in the checkpoint: no row can make more new steps than the total, the family cap is not used
    assert defaults.max_new_tokens == 3072 and "max_length=3072" in defaults.sources["max_new_tokens"]
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.greedy) == (1.2, 0.95, 45, False)


@pytest.mark.parametrize("converted, max_new_tokens", [(VIBEVOICE_CONVERTED, 40500), (CSM_CONVERTED, 125),
                                                       (HIGGS_CONVERTED, 300)])
def test_checkpoints_without_max_length_have_no_total_cap(converted, max_new_tokens):
    """transformers' GenerationConfig holds max_length=20 when none is set: that placeholder is not a cap."""
    config = GenerationConfig(**converted)
    assert config.max_length in (None, 20)
    defaults = GenerationDefaults.from_generation_config(config, family_defaults=FAMILY)
    assert defaults.max_length is None
    assert defaults.max_new_tokens == max_new_tokens  # Higgs sets none: the family's own (here FAMILY's 300)


def test_row_cap_is_the_total_less_the_rows_own_prompt():
    from types import SimpleNamespace

    from tts_app.adapters.base import TTSAdapter

    class Checkpoint:  # the two TTSAdapter methods under test, on the converted Dia checkpoint's defaults
        max_new_tokens = TTSAdapter.max_new_tokens
        row_max_new_tokens = TTSAdapter.row_max_new_tokens

        def __init__(self, defaults):
            self.facts = SimpleNamespace(generation_defaults=defaults, default_max_new_tokens=defaults.max_new_tokens)

    dia = Checkpoint(GenerationDefaults.from_generation_config(GenerationConfig(**DIA_CONVERTED),
                                                               family_defaults=FAMILY))
    assert dia.row_max_new_tokens(SynthesisParams(), 538) == 3072 - 538  # the 6 s reference: 538 steps
    assert dia.row_max_new_tokens(SynthesisParams(max_new_tokens=100), 538) == 100  # a smaller request cap applies
    assert dia.row_max_new_tokens(SynthesisParams(), 538, extra_steps=15) == 3072 + 15 - 538  # Dia's delay flush
    with pytest.raises(InputError, match="max_length"):
        dia.row_max_new_tokens(SynthesisParams(), 3072)
