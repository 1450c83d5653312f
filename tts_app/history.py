"""Generation history of the web app's Single tab: each browser's last N generations, kept on disk so a page reload,
a browser restart and a server restart (the same ``--output-dir``) find them again. Pure Python, no gradio.

Whose entries: the request's owner (``tts_app.server.sessions.request_owner``: a hash of its ``tts_app_browser``
cookie, or of its API key), the same identity that names the browser's output folder, so the history lies inside that folder and the server serves
its files to that browser only. Layout, under ``OUTPUT_DIR/single``::

    <owner>/                        one browser (32 hex digits; "key-..." for an API key)
        <page session>/             that tab's outputs (removed when the tab closes; not the history's business)
        _history/                   ``HISTORY_DIR``: never a session folder (session names are letters and digits)
            <entry id>/             one generation: UTC time + 4 random bytes, so folder names sort by age
                entry.json          what the user asked for: text, voice, reference name and transcript, the
                                    Settings values (``HistoryEntry``), the file names below, created time
                <name>.<fmt>        the audio, as generated
                <name>.json / .srt  its metadata sidecar and subtitles (``tts_app.outputs``)
                reference/<name>    the uploaded reference clip under its own file name, so "re-run" can use it
                                    again and its next entry still names it (none for a voice; entries of
                                    earlier versions hold ``reference<ext>``)
                emotion/<name>      the emotion clip, when the emotion came from one (IndexTTS 2)

An entry is written into a temporary folder that is renamed into place once complete (atomic: a listing never
sees half an entry); beyond ``max_entries`` the oldest entries of that browser are removed. Owners are checked
(``is_owner_key``) before they name a folder, so one browser can never reach another's or the server's files.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_app.errors import InputError
from tts_app.output_layout import HISTORY_DIR

#: generations kept per browser when ``--history-size`` is not given
DEFAULT_HISTORY_SIZE = 20
#: the largest ``--history-size`` accepted (each entry keeps its audio on disk)
MAX_HISTORY_SIZE = 500
ENTRY_FILE = "entry.json"
SCHEMA_VERSION = 1
_OWNER_KEY = re.compile(r"^(?:[0-9a-f]{32}|key-[0-9a-f]{28})$")  # sessions.owner_key / key_owner
_ENTRY_ID = re.compile(r"^\d{8}T\d{6}\d{6}Z_[0-9a-f]{8}$")


def is_owner_key(value: object) -> bool:
    """``value`` is an owner ``tts_app.server.sessions`` makes: ``owner_key`` of a cookie (32 hex digits) or
    ``key_owner`` of an API key ("key-" + 28 hex digits); safe as a folder name. "anonymous", a client without the
    cookie, has no history."""
    return isinstance(value, str) and bool(_OWNER_KEY.match(value))


@dataclass(frozen=True)
class HistoryEntry:
    """One past generation.

    Attributes:
        entry_id: folder name (UTC time + random suffix; sorts by age).
        created_utc: ISO 8601 time it was stored.
        text: the text as typed.
        voice: the saved voice used, or None (an uploaded clip, ``reference_name``).
        reference_name: file name of the uploaded reference clip, or None.
        reference_text: the reference transcript given, or None.
        settings: the Settings values the generation ran with (``seed``, ``greedy``, sampling knobs,
            ``use_cache``, ``speed``, ``duration_s``, ``loudness_lufs``, ``audio_format``...): UI input name ->
            value, as plain JSON.
        folder: the entry's folder.
        audio, metadata: its audio file and sidecar; subtitles: its SRT, or None.
        reference_audio: the stored copy of the uploaded clip, or None.
        emotion: the emotion controls (``tts_app.ui.emotion``: ``emotion_mode``, the eight slider values by name,
            ``emotion_weight``, ``emotion_text``), or None for the voice reference's own emotion.
        emotion_audio: the stored copy of the emotion clip, or None.
    """

    entry_id: str
    created_utc: str
    text: str
    voice: str | None
    reference_name: str | None
    reference_text: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    folder: Path = Path()
    audio: Path = Path()
    metadata: Path = Path()
    subtitles: Path | None = None
    reference_audio: Path | None = None
    emotion: dict[str, Any] | None = None
    emotion_audio: Path | None = None


def check_history_size(value: int) -> int:
    """``value`` as a history size.

    Raises:
        InputError: outside 0..``MAX_HISTORY_SIZE``.
    """
    if not 0 <= int(value) <= MAX_HISTORY_SIZE:
        raise InputError(f"--history-size {value} is outside 0-{MAX_HISTORY_SIZE} (0 turns history off)")
    return int(value)


class HistoryStore:
    """The history folders of all browsers (module docstring).

    Args:
        root: the browsers' folder (``OUTPUT_DIR/single``); a browser's entries go to ``root/<owner key>/_history``.
        max_entries: generations kept per browser (0 = history off: nothing is stored).

    Raises:
        InputError: ``max_entries`` outside 0..``MAX_HISTORY_SIZE``.
    """

    def __init__(self, root: str | Path, max_entries: int = DEFAULT_HISTORY_SIZE):
        self.root = Path(root)
        self.max_entries = check_history_size(max_entries)

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def _folder(self, owner: str) -> Path:
        if not is_owner_key(owner):
            raise InputError("this browser has no history (no cookie); reload the page")
        return self.root / owner / HISTORY_DIR

    def add(self, owner: str, *, audio: str | Path, metadata: str | Path, subtitles: str | Path | None,
            text: str, voice: str | None, reference_file: str | Path | None, reference_text: str | None,
            settings: dict[str, Any], emotion: dict[str, Any] | None = None,
            emotion_file: str | Path | None = None) -> HistoryEntry:
        """Store one finished generation for ``owner`` (files are copied; the originals stay where they are) and
        drop that browser's entries beyond ``max_entries``, oldest first.

        Args:
            audio, metadata, subtitles: the files ``tts_app.outputs.save_outputs`` wrote.
            text, voice, reference_text, settings: what the user asked for (``HistoryEntry``).
            reference_file: the uploaded reference clip (copied as ``reference/<its name>``), or None for a voice.
            emotion, emotion_file: the emotion controls (``HistoryEntry.emotion``) and the emotion clip (copied as
                ``emotion/<its name>``), or None.

        Returns:
            The stored entry.

        Raises:
            InputError: history is off, or ``owner`` is not an owner key.
            OSError: the files cannot be copied (disk full...); nothing is left behind.
        """
        if not self.enabled:
            raise InputError("history is off (--history-size 0)")
        folder = self._folder(owner)
        folder.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.timezone.utc)
        entry_id = f"{now.strftime('%Y%m%dT%H%M%S%f')}Z_{secrets.token_hex(4)}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry_id}.", dir=folder))
        try:
            files: dict[str, str | None] = {}
            for key, path in (("audio", audio), ("metadata", metadata), ("subtitles", subtitles)):
                if path is None:
                    files[key] = None
                    continue
                shutil.copyfile(path, tmp / Path(path).name)
                files[key] = Path(path).name
            for key, folder_name, path in (("reference_audio", "reference", reference_file),
                                           ("emotion_audio", "emotion", emotion_file)):
                files[key] = None
                if path is not None:  # under its own name, so a re-run of it (gradio keeps file names) shows it
                    stored = f"{folder_name}/{_file_name(Path(path).name, Path(path).suffix)}"
                    (tmp / folder_name).mkdir()
                    shutil.copyfile(path, tmp / stored)
                    files[key] = stored
            record = {"schema_version": SCHEMA_VERSION, "entry_id": entry_id, "created_utc": now.isoformat(),
                      "text": text, "voice": voice or None,
                      "reference_name": Path(reference_file).name if reference_file is not None else None,
                      "reference_text": reference_text or None, "settings": settings, "emotion": emotion or None,
                      "files": files}
            (tmp / ENTRY_FILE).write_text(json.dumps(record, ensure_ascii=False, indent=2), encoding="utf-8")
            os.replace(tmp, folder / entry_id)  # the entry appears complete or not at all
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._prune(folder)
        return self._read(folder / entry_id)

    def list(self, owner: str) -> list[HistoryEntry]:
        """``owner``'s entries, newest first (at most ``max_entries``); unreadable entries are skipped. An
        unknown or invalid owner has none."""
        if not is_owner_key(owner):
            return []
        folder = self.root / owner / HISTORY_DIR
        if not folder.is_dir():
            return []
        out = []
        for path in sorted((p for p in folder.iterdir() if _ENTRY_ID.match(p.name)), reverse=True):
            try:
                out.append(self._read(path))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged entry hides itself; the others still show
            if len(out) == self.max_entries:
                break
        return out

    def get(self, owner: str, entry_id: str) -> HistoryEntry:
        """One entry of ``owner``.

        Raises:
            InputError: no such entry for this browser (removed, or another browser's).
        """
        if not (is_owner_key(owner) and isinstance(entry_id, str) and _ENTRY_ID.match(entry_id)):
            raise InputError("that history entry is gone; pick another one")
        try:
            return self._read(self.root / owner / HISTORY_DIR / entry_id)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError("that history entry is gone; pick another one") from exc

    def _prune(self, folder: Path) -> None:
        entries = sorted(p for p in folder.iterdir() if _ENTRY_ID.match(p.name))
        for old in entries[:max(0, len(entries) - self.max_entries)]:
            shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def _read(path: Path) -> HistoryEntry:
        record = json.loads((path / ENTRY_FILE).read_text(encoding="utf-8"))
        files = record["files"]

        def file(key: str) -> Path | None:
            return path / files[key] if files.get(key) else None

        return HistoryEntry(entry_id=record["entry_id"], created_utc=record["created_utc"], text=record["text"],
                            voice=record.get("voice"), reference_name=record.get("reference_name"),
                            reference_text=record.get("reference_text"), settings=dict(record["settings"]),
                            folder=path, audio=path / files["audio"], metadata=path / files["metadata"],
                            subtitles=file("subtitles"), reference_audio=file("reference_audio"),
                            emotion=record.get("emotion") or None, emotion_audio=file("emotion_audio"))


def _file_name(name: str, suffix: str) -> str:
    """``name`` safe as one file name inside an entry (no folder part, no leading dot, no control characters);
    "clip" + ``suffix`` when nothing is left."""
    name = "".join(ch for ch in Path(name.replace("\\", "/")).name if ch.isprintable()).lstrip(".")
    return name or "clip" + suffix.lower()
