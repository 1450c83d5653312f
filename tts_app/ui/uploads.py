"""Upload limits of the web app, per kind of file. No gradio import.

Gradio itself refuses any upload over the largest limit while it streams in (HTTP 413; its page says so before
sending when it can), so a 2 GB file never reaches the disk; ``check_upload`` then holds each kind to its own,
smaller limit (a reference clip or a job file is small, a ZIP of voices is not) and deletes what it refuses.
"""

from __future__ import annotations

from pathlib import Path

from tts_app.errors import InputError


def format_size(num_bytes: int) -> str:
    """``12.3 MB`` / ``1.50 GB`` (decimal units, as file managers show sizes)."""
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes < 1e9 else f"{num_bytes / 1e9:.2f} GB"


def check_upload(path: str | Path | None, limit_bytes: int, message: str) -> None:
    """Refuse (and delete) an uploaded file larger than ``limit_bytes``.

    Args:
        path: the uploaded file (None: nothing uploaded).
        message: the user's message, a ``str.format`` template with ``{name}``, ``{size}`` and ``{limit}``.

    Raises:
        InputError: the file is too large (the message names it, its size and the limit).
    """
    if not path:
        return
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size > limit_bytes:
        path.unlink(missing_ok=True)
        raise InputError(message.format(name=path.name, size=format_size(size), limit=format_size(limit_bytes)))
