"""The text front end: pure text in, plain data out. No torch, no model.

``prepare_text(text, ...)`` -> ``PreparedText`` (normalised text, segments with pauses, per-character readings,
warnings), called once per request by the engine; ``preview_pronunciation(text)`` -> readings + warnings for the UI;
``warm_up()`` loads the dictionaries ahead of the first call.

``TextSegment.text`` is what the MODEL reads (overridden characters replaced by homophones or ``{pinyin}`` tokens);
show users and subtitles ``TextSegment.source_text``.

Input markup: pinyin annotations ``重(zhong4)`` / ``银行(yin2 hang2)`` and pause markers ``[pause:500ms]``
(see ``tts_app.frontend.markup``). Modules: ``normalize`` (wetext per language run), ``wetext_quirks`` (fixes of
wetext's known number mistakes), ``g2p`` (pypinyin readings, homophones), ``markup``, ``segment``, ``render``,
``prepare``; ``cli`` is ``python -m tts_app frontend``.
"""

from tts_app.frontend.prepare import prepare_text, preview_pronunciation, warm_up
from tts_app.frontend.types import CharReading, PreparedText, PronunciationPreview, TextSegment

__all__ = [
    "CharReading",
    "PreparedText",
    "PronunciationPreview",
    "TextSegment",
    "prepare_text",
    "preview_pronunciation",
    "warm_up",
]
