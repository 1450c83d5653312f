"""The range of the page's number inputs (sliders, number boxes), checked in the caller's language.

gradio checks a ``gr.Slider`` / ``gr.Number`` value against its ``minimum`` / ``maximum`` in the component's
``preprocess``, before any handler runs and without the request: a ``gradio_client`` call with ``seed=-1`` got
"Value -1 is less than minimum value 0." (no field name, always English) and a traceback in the server log. The
browser cannot send such a value (its widgets keep to the range), so this is what an API caller sees.

Here each bounded input's ``preprocess`` (on the component object, ``defer_range_checks``) lets an out-of-range
value through as an ``OutOfRange`` (a ``float`` that remembers the bounds and the field's label key) instead of
raising; the page's handler wrapper (``tts_app.ui.layout._wrap``) then refuses the call before the handler runs,
with ``range_error``: the field's label and API parameter name, the value and the allowed range, in the caller's
language, as a ``gr.Error`` without traceback. A value inside the range is preprocessed by gradio as before.
A radio or single-choice dropdown does the same with a value that is not one of its choices (``NotAChoice``; was
gradio's "Value: 'bogus' (type: <class 'str'>) is not in the list of choices: [...]").
"""

from __future__ import annotations

import types
from typing import Any

import gradio as gr

from tts_app.ui import texts


class OutOfRange(float):
    """A number input's value outside its range, as ``defer_range_checks`` hands it on.

    Attributes:
        minimum, maximum: the component's bounds (None: unbounded on that side).
        label_key: the key of the component's label in ``tts_app.ui.texts`` (None when it has no translated label).
    """

    minimum: float | None
    maximum: float | None
    label_key: str | None

    def __new__(cls, value: float, minimum: float | None, maximum: float | None, label_key: str | None):
        self = super().__new__(cls, value)
        self.minimum, self.maximum, self.label_key = minimum, maximum, label_key
        return self


class NotAChoice(str):
    """A choice input's value that is not one of its choices, as ``defer_range_checks`` hands it on.

    Attributes:
        choices: the values the component accepts, in order.
        label_key: as ``OutOfRange.label_key``.
    """

    choices: tuple
    label_key: str | None

    def __new__(cls, value: str, choices: tuple, label_key: str | None):
        self = super().__new__(cls, value)
        self.choices, self.label_key = choices, label_key
        return self


def _checked_choice(component, payload):
    """gradio's own ``preprocess`` for one of the component's choices (or None); a ``NotAChoice`` otherwise."""
    values = tuple(value for _, value in component.choices)
    if isinstance(payload, str) and payload not in values:
        label = getattr(component, "label", None)
        return NotAChoice(payload, values, getattr(label, "key", None))
    return type(component).preprocess(component, payload)


def _checked_preprocess(component, payload):
    """gradio's own ``preprocess`` for a value in range; an ``OutOfRange`` for a number outside it."""
    if isinstance(payload, (int, float)) and not isinstance(payload, bool) and (
            (component.minimum is not None and payload < component.minimum)
            or (component.maximum is not None and payload > component.maximum)):
        label = getattr(component, "label", None)
        return OutOfRange(payload, component.minimum, component.maximum, getattr(label, "key", None))
    return type(component).preprocess(component, payload)


def defer_range_checks(blocks: gr.Blocks) -> None:
    """Every ``gr.Slider`` and ``gr.Number`` of ``blocks`` hands an out-of-range value on as an ``OutOfRange``
    instead of raising gradio's message (the module docstring). The component objects are changed, not their
    class: the page, the widgets' range and the API's description stay as gradio makes them."""
    for block in blocks.blocks.values():
        if isinstance(block, (gr.Slider, gr.Number)):
            block.preprocess = types.MethodType(_checked_preprocess, block)
        elif isinstance(block, gr.Radio) or (isinstance(block, gr.Dropdown) and not block.multiselect
                                             and not block.allow_custom_value):
            block.preprocess = types.MethodType(_checked_choice, block)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def range_error(names: list[str], args: tuple, kwargs: dict[str, Any], lang: str) -> gr.Error | None:
    """The refusal of a handler call one of whose values is an ``OutOfRange`` or a ``NotAChoice``, or None.

    Args:
        names: the handler's parameter names, in order (the API's parameter names).
        args, kwargs: the call's arguments as gradio passes them.
        lang: "en" or "zh".
    """
    refused = (OutOfRange, NotAChoice)
    found = [(names[i] if i < len(names) else "?", v) for i, v in enumerate(args) if isinstance(v, refused)]
    found += [(k, v) for k, v in kwargs.items() if isinstance(v, refused)]
    if not found:
        return None
    name, value = found[0]
    label = (texts.ZH if lang == "zh" else texts.EN).get(value.label_key) if value.label_key else None
    field = f"{label} ({name})" if label and label != name else name
    if isinstance(value, NotAChoice):
        message = texts.server_text(lang, "not_a_choice", field=field, value=repr(str(value)),
                                    choices=", ".join(map(str, value.choices)))
        return gr.Error(message, duration=None, print_exception=False)
    if value.minimum is not None and value.maximum is not None:
        key = "out_of_range"
    else:
        key = "below_minimum" if value.minimum is not None else "above_maximum"
    message = texts.server_text(lang, key, field=field, value=_number(float(value)), minimum=_number(value.minimum),
                          maximum=_number(value.maximum))
    return gr.Error(message, duration=None, print_exception=False)
