"""What the HTTP API serves from: the web app's shared state, seen through a typed interface (no gradio here).

``tts_app.ui.context.AppContext`` is one (the composition root, ``tts_app.server.main``, passes it), so the API
and the web page use one runtime (one engine: their requests share batches), one voice library and one output
folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tts_app.runtime import Runtime
    from tts_app.voices import VoiceLibrary


class AppHost(Protocol):
    """The app state the HTTP API reads.

    Attributes:
        runtime: the loaded model's runtime, or None while it loads (``load_error`` None) or after loading failed
            (``load_error`` says why).
        load_error: why no model is loaded, or None.
        voices: the voice library (saved voices + bundled examples).
        output_root: the web UI's output folder (its per-browser area is guarded: ``tts_app.server.sessions``).
    """

    runtime: Runtime | None
    load_error: str | None
    voices: VoiceLibrary
    output_root: Path
