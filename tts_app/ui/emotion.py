"""The emotion controls of the Single tab (families with ``ModelFacts.supports_emotion``: IndexTTS 2). No gradio
import.

One choice of source (``EMOTION_MODES``): the voice reference's own emotion (nothing sent), an emotion clip, an
8-value emotion vector (one slider per ``tts_app.request.EMOTION_NAMES``), or emotion read from text by the
checkpoint's emotion model; plus the weight (IndexTTS 2's ``emo_alpha``). ``emotion_from_controls`` turns the widget
values into the request's ``EmotionControl``.
"""

from __future__ import annotations

from typing import Callable

from tts_app.errors import ConfigError, InputError
from tts_app.request import EMOTION_NAMES, EmotionControl, ReferenceAudio

#: widget values of the source choice, in display order
EMOTION_MODES = ("none", "clip", "vector", "text")
#: the weight's default: the package's own ``infer(emo_alpha=1.0)``
DEFAULT_EMOTION_WEIGHT = 1.0


def emotion_modes(facts) -> tuple[str, ...]:
    """The source choices a model offers: none for a family without emotion control; "text" only when the
    checkpoint has an emotion model."""
    if facts is None or not facts.supports_emotion:
        return ("none",)
    return tuple(m for m in EMOTION_MODES if m != "text" or facts.supports_emotion_text)


def emotion_from_controls(facts, *, mode: str | None, clip_path: str | None, vector: list[float | None],
                          weight: float | None, text: str | None,
                          prepare_clip: Callable[[str], ReferenceAudio]) -> EmotionControl | None:
    """The request's ``EmotionControl`` from the widget values, or None for the voice reference's own emotion.

    Args:
        facts: the loaded model's ``ModelFacts``.
        mode: one of ``EMOTION_MODES`` (None = "none").
        clip_path: uploaded emotion clip (mode "clip").
        vector: the slider values, one per ``EMOTION_NAMES`` (mode "vector"; None counts as 0).
        weight: strength in [0, 1] (None = ``DEFAULT_EMOTION_WEIGHT``).
        text: the text to read the emotion from (mode "text"); empty = the text being spoken.
        prepare_clip: cleans the clip at the model's rate (the app's reference preparer) and returns its audio.

    Raises:
        InputError: a source the loaded model does not have (naming it), an unknown mode, mode "clip" without a
            clip, values out of range; ``ReferenceAudioError`` from ``prepare_clip`` for an unusable clip.
    """
    mode = mode or "none"
    if mode not in EMOTION_MODES:
        raise InputError(f"emotion source {mode!r} is not one of {', '.join(EMOTION_MODES)}")
    if mode == "none":
        return None
    if mode not in emotion_modes(facts):
        what = "emotion from text (no emotion model in this checkpoint)" if facts.supports_emotion else \
            "emotion control"
        raise InputError(f"the loaded model ({facts.family}) has no {what}; choose another emotion source")
    weight = DEFAULT_EMOTION_WEIGHT if weight is None else float(weight)
    try:
        if mode == "clip":
            if not clip_path:
                raise InputError("emotion source 'clip' needs an emotion clip; upload one or choose another source")
            return EmotionControl(reference_audio=prepare_clip(clip_path), weight=weight)
        if mode == "vector":
            if len(vector) != len(EMOTION_NAMES):
                raise InputError(f"the emotion vector needs {len(EMOTION_NAMES)} values, got {len(vector)}")
            return EmotionControl(vector=tuple(0.0 if v is None else float(v) for v in vector), weight=weight)
        return EmotionControl(from_text=True, text=(text or "").strip() or None, weight=weight)
    except ConfigError as exc:
        raise InputError(str(exc)) from None


def emotion_inputs_shown(mode: str | None) -> dict[str, bool]:
    """Which emotion inputs the Emotion panel shows for source ``mode`` (one of ``EMOTION_MODES``; None = "none"):
    ``clip`` (the emotion clip), ``vector`` (the eight sliders), ``text`` (the emotion text) and ``weight`` (every
    source but the voice reference's own)."""
    mode = mode or "none"
    return {"clip": mode == "clip", "vector": mode == "vector", "text": mode == "text", "weight": mode != "none"}
