"""The Single tab's controls start at the loaded model's defaults and send "not given" for untouched ones."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.fakes import FAKE_GENERATION_DEFAULTS, fake_facts
from tts_app.errors import InputError
from tts_app.request import SynthesisParams
from tts_app.ui.controls import generation_controls, params_from_controls

# Dia's real generation config (nari-labs/Dia-1.6B-0626): do_sample, temperature 1.8, top_p 0.9, top_k 45, CFG 3.0
DIA_LIKE = fake_facts(generation_defaults=replace(
    FAKE_GENERATION_DEFAULTS, greedy=False, temperature=1.8, top_p=0.9, top_k=45, cfg_scale=3.0, max_new_tokens=3072,
    sources={"temperature": "checkpoint generation_config (temperature=1.8)"}))
# VibeVoice: argmax only (no greedy/temperature/top-p/top-k), CFG 1.3
VIBEVOICE_LIKE = fake_facts(generation_defaults=replace(
    FAKE_GENERATION_DEFAULTS, greedy=None, temperature=None, top_p=None, top_k=None, cfg_scale=1.3,
    max_new_tokens=600))


def _start_values(facts) -> dict:
    return {name: c.default for name, c in generation_controls(facts).items()}


def test_controls_start_at_the_checkpoints_values_and_hide_what_the_family_lacks():
    dia = generation_controls(DIA_LIKE)
    assert (dia["temperature"].default, dia["top_p"].default, dia["top_k"].default, dia["cfg_scale"].default,
            dia["max_new_tokens"].default, dia["greedy"].default) == (1.8, 0.9, 45, 3.0, 3072, False)
    # Dia has no beams, no flow-matching stage and no prompt cache
    assert {n for n, c in dia.items() if not c.visible} == {"num_beams", "length_penalty", "num_diffusion_steps",
                                                            "prompt_cache"}
    assert dia["temperature"].source.startswith("checkpoint generation_config")
    vv = generation_controls(VIBEVOICE_LIKE)
    assert {n for n, c in vv.items() if not c.visible} == {"greedy", "temperature", "top_p", "top_k", "num_beams",
                                                           "length_penalty", "num_diffusion_steps", "prompt_cache"}
    assert vv["cfg_scale"].default == 1.3 and vv["max_new_tokens"].default == 600
    assert vv["max_segment_chars"].default == VIBEVOICE_LIKE.max_segment_chars
    assert not any(c.visible for c in generation_controls(None).values())  # no model: nothing to set


@pytest.mark.parametrize("facts", [DIA_LIKE, VIBEVOICE_LIKE])
def test_untouched_controls_are_sent_as_not_given(facts):
    params = params_from_controls(facts, seed=5, use_cache=True, values=_start_values(facts))
    assert params == SynthesisParams(seed=5)  # exactly what synth / a JSONL line without the fields send
    nudged = {**_start_values(facts), "cfg_scale": 3.0 + 0.01}  # slider rounding stays "untouched"
    if facts is DIA_LIKE:
        assert params_from_controls(facts, seed=5, use_cache=True, values=nudged) == SynthesisParams(seed=5)


def test_changed_controls_are_sent_and_hidden_or_irrelevant_ones_are_not():
    values = {**_start_values(DIA_LIKE), "temperature": 1.2, "top_k": 10, "pause_between_segments_ms": 0}
    params = params_from_controls(DIA_LIKE, seed=1, use_cache=False, values=values)
    assert (params.temperature, params.top_k, params.pause_between_segments_ms, params.use_cache) == (1.2, 10, 0,
                                                                                                        False)
    assert params.top_p is None and params.cfg_scale is None and params.greedy is None
    greedy = params_from_controls(DIA_LIKE, seed=1, use_cache=True, values={**values, "greedy": True})
    assert greedy.greedy is True and (greedy.temperature, greedy.top_k) == (None, None)  # sampling knobs dropped
    # a knob the family lacks is never sent, whatever its (hidden) widget holds
    vv = params_from_controls(VIBEVOICE_LIKE, seed=0, use_cache=True, values={"temperature": 0.3, "greedy": True,
                                                                               "cfg_scale": 2.0})
    assert (vv.temperature, vv.greedy, vv.cfg_scale) == (None, None, 2.0)
    with pytest.raises(InputError, match="max_segment_chars"):
        params_from_controls(DIA_LIKE, seed=0, use_cache=True, values={"max_segment_chars": 3})


@pytest.mark.parametrize("facts", [DIA_LIKE, VIBEVOICE_LIKE, None])
def test_every_widget_starts_inside_its_own_range(facts):
    # gradio refuses a value outside a slider's range, so an API call leaving the control out would fail
    for control in generation_controls(facts).values():
        if control.name != "greedy" and control.default is not None:
            assert control.minimum <= control.default <= control.maximum, control


# IndexTTS 2: its package's infer() defaults, 3 beams sampled, length penalty 0
BEAMS_LIKE = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, num_beams=3, length_penalty=0.0))


def test_beam_controls_only_for_a_family_with_beams_and_refusals_in_the_users_language():
    """Issue 24: num_beams / length_penalty are page settings for IndexTTS 2 (shown, starting at its defaults, sent
    only when changed) and hidden for the other families; a bad value is refused in zh or en."""
    from tts_app.ui.texts import error_text

    beams = generation_controls(BEAMS_LIKE)
    assert beams["num_beams"].visible and beams["length_penalty"].visible
    assert (beams["num_beams"].default, beams["length_penalty"].default) == (3, 0.0)
    assert not generation_controls(DIA_LIKE)["num_beams"].visible
    assert not generation_controls(DIA_LIKE)["length_penalty"].visible
    assert params_from_controls(BEAMS_LIKE, seed=0, use_cache=True, values=_start_values(BEAMS_LIKE)) == \
        SynthesisParams()
    changed = params_from_controls(BEAMS_LIKE, seed=0, use_cache=True,
                                   values={**_start_values(BEAMS_LIKE), "num_beams": 1, "length_penalty": 1.0})
    assert (changed.num_beams, changed.length_penalty) == (1, 1.0)
    assert params_from_controls(DIA_LIKE, seed=0, use_cache=True, values={"num_beams": 5}).num_beams is None
    with pytest.raises(InputError) as refused:
        params_from_controls(BEAMS_LIKE, seed=0, use_cache=True, values={"num_beams": 12})
    assert error_text(refused.value, "en") == "num_beams=12 must be in 1..8"
    assert error_text(refused.value, "zh") == "num_beams=12 必须在 1..8 之间"


# IndexTTS 2: its s2mel's 25 flow-matching steps (the fast preset: 12)
DIFFUSION_LIKE = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, num_diffusion_steps=25))


def test_diffusion_steps_control_only_for_a_family_with_a_flow_matching_stage():
    """Issue 27: the fast preset is a page setting (shown at the model's 25, sent only when changed), hidden for a
    family without such a stage; an out-of-range value is refused in zh or en."""
    from tts_app.ui.texts import error_text

    controls = generation_controls(DIFFUSION_LIKE)
    assert controls["num_diffusion_steps"].visible and controls["num_diffusion_steps"].default == 25
    assert not generation_controls(DIA_LIKE)["num_diffusion_steps"].visible
    start = _start_values(DIFFUSION_LIKE)
    assert params_from_controls(DIFFUSION_LIKE, seed=0, use_cache=True, values=start).num_diffusion_steps is None
    fast = params_from_controls(DIFFUSION_LIKE, seed=0, use_cache=True, values={**start, "num_diffusion_steps": 12})
    assert fast.num_diffusion_steps == 12
    assert params_from_controls(DIA_LIKE, seed=0, use_cache=True,
                                values={"num_diffusion_steps": 12}).num_diffusion_steps is None
    with pytest.raises(InputError) as refused:
        params_from_controls(DIFFUSION_LIKE, seed=0, use_cache=True, values={"num_diffusion_steps": 500})
    assert error_text(refused.value, "en") == "num_diffusion_steps=500 must be an integer in 1..100"
    assert error_text(refused.value, "zh") == "num_diffusion_steps=500 必须是 1..100 之间的整数"


PROMPT_CACHE_LIKE = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, prompt_cache=True))


def test_prompt_cache_box_only_for_a_family_with_one_and_its_default_is_not_given():
    """GLM-TTS's long-text prompt cache (on by default, as upstream): shown only for a family that has one; left at
    the default it is "not given" (the model's choice), switched off it is sent; never sent to a family without."""
    control = generation_controls(PROMPT_CACHE_LIKE)["prompt_cache"]
    assert control.visible and control.default is True
    assert params_from_controls(PROMPT_CACHE_LIKE, seed=0, use_cache=True, values={"prompt_cache": True}) \
        == SynthesisParams()
    assert params_from_controls(PROMPT_CACHE_LIKE, seed=0, use_cache=True,
                                values={"prompt_cache": False}).prompt_cache is False
    assert params_from_controls(DIA_LIKE, seed=0, use_cache=True, values={"prompt_cache": False}).prompt_cache is None
    assert PROMPT_CACHE_LIKE.generation_defaults.resolve(SynthesisParams()).prompt_cache is True
    assert DIA_LIKE.generation_defaults.resolve(SynthesisParams(prompt_cache=True)).prompt_cache is None  # what runs


def test_a_job_lines_prompt_cache_warns_on_a_model_without_one():
    from tts_app.jobs.executor import unsupported_knobs

    assert [n.params["name"] for n in unsupported_knobs(DIA_LIKE, ["prompt_cache"])] == ["prompt_cache"]
    assert unsupported_knobs(PROMPT_CACHE_LIKE, ["prompt_cache"]) == []
