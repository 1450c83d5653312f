"""The generation controls of the Single tab, built from the loaded model's defaults. No gradio import.

``generation_controls(facts)`` says, per knob, its default (the loaded checkpoint's, from
``ModelFacts.generation_defaults``: its generation config, else the family's documented default), its range and
whether the family has it at all; the layout builds its widgets from it, hides the knobs the family lacks, and the
"reset to model defaults" button restores the defaults. ``params_from_controls`` turns widget values back into
``SynthesisParams``: a value equal to the model's default (an untouched control, or one put back) is sent as "not
given" (None), so the request runs exactly as ``synth`` and a JSONL line that leave the knob out, and the sidecar
names the checkpoint as the value's source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tts_app.config import DEFAULT_MAX_SEGMENT_CHARS, MIN_MAX_SEGMENT_CHARS, FrontendConfig
from tts_app.errors import ConfigError, InputError
from tts_app.frontend.messages import message_of
from tts_app.request import MAX_NUM_BEAMS, MAX_NUM_DIFFUSION_STEPS, SynthesisParams

#: knobs that only matter when sampling (dropped from a greedy request)
SAMPLING_KNOBS = ("temperature", "top_p", "top_k")


@dataclass(frozen=True)
class Control:
    """One generation control.

    Attributes:
        name: the ``SynthesisParams`` field it sets.
        default: the model's value (what "not given" runs with).
        visible: the family has this knob (a hidden control is never sent).
        minimum, maximum, step: widget range (sliders); unused for the greedy checkbox.
        integer: whole numbers only.
        source: where the default comes from (``GenerationDefaults.sources``), shown as the widget's info.
    """

    name: str
    default: Any
    visible: bool = True
    minimum: float = 0.0
    maximum: float = 1.0
    step: float = 1.0
    integer: bool = False
    source: str = ""


def generation_controls(facts) -> dict[str, Control]:
    """Controls for a loaded model (``ModelFacts``) in display order; None (no model loaded) gives every control
    hidden (the page then only explains how to load a model)."""
    pause = FrontendConfig.default_pause_ms
    if facts is None:
        return {name: Control(name, default, visible=False, maximum=max(1, default), integer=isinstance(default, int))
                for name, default in (("greedy", False), ("temperature", 1.0), ("top_p", 1.0), ("top_k", 50),
                                      ("cfg_scale", 1.0), ("max_new_tokens", 1), ("num_beams", 1),
                                      ("length_penalty", 0.0), ("num_diffusion_steps", 1), ("prompt_cache", False),
                                      ("max_segment_chars", DEFAULT_MAX_SEGMENT_CHARS),
                                      ("pause_between_segments_ms", pause))}
    d = facts.generation_defaults
    src = d.sources

    def knob(name: str, minimum: float, maximum: float, step: float, integer: bool = False) -> Control:
        value = getattr(d, name)
        if value is None:  # the family has no such knob: hidden, never sent
            return Control(name, None, False, minimum, maximum, step, integer, src.get(name, ""))
        return Control(name, value, True, minimum, max(maximum, value), step, integer, src.get(name, ""))

    return {
        "greedy": Control("greedy", d.greedy, d.greedy is not None, source=src.get("greedy", "")),
        "temperature": knob("temperature", 0.05, 2.0, 0.05),
        "top_p": knob("top_p", 0.05, 1.0, 0.01),
        "top_k": knob("top_k", 1, 200, 1, integer=True),
        "cfg_scale": knob("cfg_scale", 1.0, 5.0, 0.05),
        "max_new_tokens": knob("max_new_tokens", 1, 4 * d.max_new_tokens, 1, integer=True),
        # beam search: only families whose defaults name it (IndexTTS 2: 3 beams, length penalty 0)
        "num_beams": knob("num_beams", 1, MAX_NUM_BEAMS, 1, integer=True),
        "length_penalty": knob("length_penalty", -2.0, 2.0, 0.1),
        # flow-matching steps: only families with such a stage (IndexTTS 2's s2mel: 25; 12 = the fast preset)
        "num_diffusion_steps": knob("num_diffusion_steps", 1, MAX_NUM_DIFFUSION_STEPS, 1, integer=True),
        # the long-text prompt cache (GLM-TTS: upstream's --use_cache, on); not the KV cache (the use_cache box)
        "prompt_cache": Control("prompt_cache", d.prompt_cache, d.prompt_cache is not None,
                                source=src.get("prompt_cache", "")),
        # 0 = no cap of the user's own: sentences packed up to the model's own limit (its unit, e.g. tokens)
        "max_segment_chars": Control("max_segment_chars", facts.max_segment_chars, True, 0,
                                     max(1000, facts.max_segment_chars), 1, True,
                                     "model default (fits its max_new_tokens cap)"),
        "pause_between_segments_ms": Control("pause_between_segments_ms", pause, True, 0, 2000, 50, True,
                                             "app default"),
    }


def _same(value: Any, control: Control) -> bool:
    """True when a widget value is the control's default (numbers within half a widget step: sliders round)."""
    if isinstance(control.default, bool) or isinstance(value, bool):
        return bool(value) == bool(control.default)
    return math.isclose(float(value), float(control.default), abs_tol=control.step / 2)


def params_from_controls(facts, *, seed: int, use_cache: bool, values: dict[str, Any]) -> SynthesisParams:
    """``SynthesisParams`` from widget values: a value left out, None or equal to the model's default -> not given;
    knobs the family lacks are dropped; sampling knobs are dropped when greedy decoding is chosen.

    Args:
        facts: the loaded model's ``ModelFacts``.
        seed, use_cache: as in ``SynthesisParams``.
        values: control name (``generation_controls``) -> widget value.

    Raises:
        InputError: a value ``SynthesisParams`` refuses, naming the control.
    """
    controls = generation_controls(facts)
    given: dict[str, Any] = {}
    for name, control in controls.items():
        value = values.get(name)
        if value is None or not control.visible or _same(value, control):
            continue
        if name in ("greedy", "prompt_cache"):  # checkboxes
            given[name] = bool(value)
        else:
            given[name] = int(round(value)) if control.integer else float(value)
    greedy = given.get("greedy", controls["greedy"].default)
    if greedy:
        for name in SAMPLING_KNOBS:
            given.pop(name, None)
    try:
        return SynthesisParams(seed=int(seed), use_cache=bool(use_cache), **given)
    except ConfigError as exc:  # its message stays a Notice: the page shows it in the user's language
        raise InputError(message_of(exc)) from None
