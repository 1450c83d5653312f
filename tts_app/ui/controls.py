"""The generation controls of the Single tab, built from the loaded model's defaults. No gradio import.

``generation_controls(facts)`` says, per knob, its default (the model's), its range and whether the family has it;
the layout builds its widgets from it and the "reset to model defaults" button restores those values.
``params_from_controls`` turns widget values back into ``SynthesisParams``: a value equal to the model's default (an
untouched control, or one put back) is sent as "not given" (None), so the request runs exactly as ``synth`` and a
JSONL line without that field do, and the sidecar names the checkpoint as the value's source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tts_app.config import MIN_MAX_SEGMENT_CHARS, FrontendConfig
from tts_app.errors import ConfigError, InputError
from tts_app.request import SynthesisParams

# Shown when no model is loaded (the page then only explains how to load one); values are never sent.
_NO_MODEL = {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "cfg_scale": 1.0, "max_new_tokens": 1,
             "max_segment_chars": 200}


@dataclass(frozen=True)
class Control:
    """One generation control.

    Attributes:
        name: the ``SynthesisParams`` field it sets.
        default: the model's value (what "not given" runs with); None = the model applies none (e.g. no top-k).
        visible: the family has this knob.
        minimum, maximum, step: widget range.
        integer: whole numbers only.
    """

    name: str
    default: Any
    visible: bool = True
    minimum: float = 0.0
    maximum: float = 1.0
    step: float = 1.0
    integer: bool = False


def generation_controls(facts) -> dict[str, Control]:
    """Controls for a model (``ModelFacts``), or placeholders when ``facts`` is None (no model loaded)."""
    if facts is None:
        d = _NO_MODEL
        return {
            "temperature": Control("temperature", d["temperature"], True, 0.05, 2.0, 0.05),
            "top_p": Control("top_p", d["top_p"], True, 0.05, 1.0, 0.05),
            "top_k": Control("top_k", d["top_k"], True, 1, 200, 1, integer=True),
            "cfg_scale": Control("cfg_scale", d["cfg_scale"], True, 1.0, 5.0, 0.1),
            "max_new_tokens": Control("max_new_tokens", d["max_new_tokens"], True, 1, 10_000, 1, integer=True),
            "max_segment_chars": Control("max_segment_chars", d["max_segment_chars"], True, MIN_MAX_SEGMENT_CHARS,
                                         1000, 1, integer=True),
            "pause_between_segments_ms": Control("pause_between_segments_ms", FrontendConfig.default_pause_ms,
                                                 True, 0, 2000, 50, integer=True),
        }
    defaults = model_defaults(facts)
    return {
        "temperature": Control("temperature", defaults["temperature"], True, 0.05, max(2.0, defaults["temperature"]),
                               0.05),
        "top_p": Control("top_p", defaults["top_p"], True, 0.05, 1.0, 0.05),
        "top_k": Control("top_k", defaults["top_k"], bool(facts.has_top_k), 1, max(200, defaults["top_k"] or 0), 1, integer=True),
        "cfg_scale": Control("cfg_scale", defaults["cfg_scale"], bool(facts.has_cfg), 1.0,
                             max(5.0, defaults["cfg_scale"] or 0), 0.1),
        "max_new_tokens": Control("max_new_tokens", facts.default_max_new_tokens, True, 1,
                                  max(10_000, facts.default_max_new_tokens), 1, integer=True),
        "max_segment_chars": Control("max_segment_chars", facts.max_segment_chars, True, MIN_MAX_SEGMENT_CHARS,
                                     max(1000, facts.max_segment_chars), 1, integer=True),
        "pause_between_segments_ms": Control("pause_between_segments_ms", FrontendConfig.default_pause_ms, True, 0,
                                             2000, 50, integer=True),
    }


def model_defaults(facts) -> dict[str, Any]:
    """The model's sampling defaults: temperature, top_p, top_k, cfg_scale."""
    return {"temperature": 1.0, "top_p": 1.0, "top_k": 50 if facts.has_top_k else None,
            "cfg_scale": 1.3 if facts.has_cfg else None}


def _same(value: Any, default: Any, step: float) -> bool:
    """True when a widget value is the default (floats within half a widget step: sliders round)."""
    if default is None or value is None:
        return value is None and default is None
    return math.isclose(float(value), float(default), abs_tol=step / 2)


def params_from_controls(facts, *, seed: int, greedy: bool, use_cache: bool, values: dict[str, Any]
                         ) -> SynthesisParams:
    """``SynthesisParams`` from widget values: None or the model's default -> not given; knobs the family lacks are
    dropped; sampling knobs are dropped under greedy decoding.

    Args:
        facts: the loaded model's ``ModelFacts``.
        seed, greedy, use_cache: as in ``SynthesisParams``.
        values: control name -> widget value (names of ``generation_controls``).

    Raises:
        InputError: a value ``SynthesisParams`` refuses, naming the control.
    """
    controls = generation_controls(facts)
    given: dict[str, Any] = {}
    for name, control in controls.items():
        value = values.get(name)
        if value is None or not control.visible or _same(value, control.default, control.step):
            continue
        if greedy and name in ("temperature", "top_p", "top_k"):
            continue
        given[name] = int(round(value)) if control.integer else float(value)
    try:
        return SynthesisParams(seed=int(seed), greedy=bool(greedy), use_cache=bool(use_cache), **given)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
