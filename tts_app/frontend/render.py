"""Rendering a segment's text for the model, so pronunciation overrides reach models that do their own G2P.

Two ways, chosen by ``ModelFacts.supports_pinyin``:

* ``supports_pinyin=True``: each overridden character is replaced by a pinyin token ``{zhong4}`` (TONE3 in braces,
  lower case, ``v`` for ü, ``5`` for the neutral tone). The adapter of such a model turns the token into whatever
  its tokenizer expects (e.g. upper-case pinyin); braces never occur in normalised text otherwise.
* ``supports_pinyin=False`` (characters-only models): each overridden *polyphonic* character is replaced by a
  homophone, a common character whose ONLY reading is the requested one (``g2p.homophone_table``), so the model's
  own G2P has no choice: 行(hang2) -> 航, 还(huan2) -> 环. Trade-off: the model now sees a different word ("银航"),
  which can cost naturalness of prosody and of neighbouring readings chosen from context, and for the rare readings
  with no single-reading character in GB2312 (mostly neutral tones, e.g. ``le5``) the original character is kept
  (with a warning) and the override cannot be enforced. A character whose only reading in common use is the
  requested one is left as it is.
"""

from __future__ import annotations

from typing import Callable

from tts_app.frontend.g2p import _ranked_characters, common_readings


def pinyin_token(reading: str) -> str:
    """The pinyin token for a TONE3 reading: ``"zhong4"`` -> ``"{zhong4}"``."""
    return "{" + reading + "}"


def render_char(char: str, reading: str, *, supports_pinyin: bool,
                usable: Callable[[str], bool] | None = None) -> tuple[str, bool]:
    """How one overridden character is written for the model.

    Args:
        usable: accepts a stand-in character (e.g. one the model's tokenizer can encode); default: any.

    Returns:
        ``(text, enforced)``: ``enforced`` is False when the override cannot be enforced for a characters-only
        model (no single-reading homophone exists) and the character is sent as it is.
    """
    if supports_pinyin:
        return pinyin_token(reading), True
    if common_readings(char) == (reading,) and (usable is None or usable(char)):  # nothing else a model would say
        return char, True
    if reading.endswith("5") and (usable is None or usable(char)):
        # The neutral tone belongs to the word (东西 xi5), and no character reads only so: the character itself is
        # the best a characters-only model can be given (it applies the neutral tone from the word).
        return char, True
    sub = next((c for c in _single(reading) if usable is None or usable(c)), None)
    if sub is None:
        return char, False
    return sub, True


def _single(reading: str) -> tuple[str, ...]:
    return _ranked_characters()[0].get(reading, ())


def render_text(text: str, start: int, end: int, overrides: dict[int, str], *, supports_pinyin: bool,
                substitutions: dict[int, str] | None = None, usable: Callable[[str], bool] | None = None) -> str:
    """``text[start:end]`` for the model: ``substitutions`` (offset -> text, e.g. a stand-in for a character the
    model cannot encode, or "" to skip it) first, then every overridden character (``overrides``: offset in
    ``text`` -> TONE3 reading) rendered by ``render_char``; the rest as it is."""
    substitutions = substitutions or {}
    out = []
    for i in range(start, end):
        if i in substitutions:
            out.append(substitutions[i])
        elif i in overrides:
            out.append(render_char(text[i], overrides[i], supports_pinyin=supports_pinyin, usable=usable)[0])
        else:
            out.append(text[i])
    return "".join(out)
