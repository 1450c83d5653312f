"""Messages about one reference clip whose file name is filled in when they are shown.

The same clip can reach the app under several names (a re-upload, another job line naming the same content), and
the cache hands every caller the analysis of the first. So a message is kept as a template with a ``{name}`` slot
plus its values, and rendered for whichever name the caller uses; no message is ever rewritten by string
replacement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tts_app.errors import ReferenceAudioError


@dataclass(frozen=True)
class Notice:
    """One warning or refusal about a reference clip.

    Attributes:
        code: stable identifier of the kind of problem (e.g. "clipped", "band_limited", "too_short"); for tests,
            filters and translations.
        template: ``str.format`` template; ``{name}`` is the clip's name (rendered quoted), the other fields come
            from ``values``.
        values: the numbers and words the template shows.
    """

    code: str
    template: str
    values: dict[str, Any] = field(default_factory=dict)

    def render(self, name: str) -> str:
        """The message for a clip called ``name``."""
        return self.template.format(name=repr(name), **self.values)


def refusal(code: str, template: str, name: str, *, report: Any = None, **values: Any) -> ReferenceAudioError:
    """A ``ReferenceAudioError`` for ``name`` carrying its ``Notice`` (and the partial report, when one was made),
    so a cached refusal can be shown under another name (``ReferenceAudioError.for_name``)."""
    notice = Notice(code, template, values)
    return ReferenceAudioError(notice.render(name), report=report, notice=notice)
