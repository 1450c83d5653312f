"""The voice library: named, reusable voices on disk (a voice = its reference audio as uploaded, the cleaned clip the
``ReferencePreparer`` made of it, its transcript, the source's SHA-256, the quality report, when it was made and its
name). No torch, no gradio: the web UI, ``synth``, JSONL jobs and an HTTP API all use this one Python API.

    library = VoiceLibrary(Path("out/voices"))          # saved voices + the bundled examples (assets/voices)
    voice = library.save("mei", "mei.wav", runtime.references, reference_text="大家好。")
    library.names()                                      # ["en-female-1", "mei", "zh-female-1"]
    prepared = library.prepare("mei", runtime.references)  # PreparedReference, as if the file were uploaded
    library.rename("mei", "Mei"); library.delete("Mei")

Layout (``root`` is ``<output folder>/voices`` in the web app)::

    root/<voice_id>/voice.json              name, created_utc, reference_text, source sha256 + file name, report,
                                        reference_cleanup (the cleanup chosen when it was saved)
    root/<voice_id>/source.<ext>            the file as it was given (bytes unchanged)
    root/<voice_id>/cleaned/<rate>_<cfg>.wav   float32 cleaned clip for one model rate and one cleanup config
    root/<voice_id>/cleaned/<rate>_<cfg>.json  its cache key and quality report

A voice is written in a hidden temporary folder and renamed into place (one ``rename``: a voice is either all there
or absent); ``voice.json`` and cleaned clips are replaced atomically (``write_atomic``); a deleted voice is renamed
away before its files are removed. Folders and files whose names start with a dot are ignored when listing.

The cleaned clip is stored as 32-bit float, so a saved voice gives bit for bit the samples that uploading its file
gives (same preparer settings); for another model rate or cleanup config it is cleaned again from the source and that
result stored next to the first.

Bundled example voices live in ``assets/voices`` (read-only, listed with ``bundled=True``; synthetic speech, see
``assets/voices/LICENSE.md``); a saved voice may not take a bundled voice's name.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import json
import os
import re
import shutil
import threading
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tts_app.audio.post import write_atomic
from tts_app.errors import InputError

if TYPE_CHECKING:
    from tts_app.audio.preparer import PreparedReference, ReferencePreparer
    from tts_app.audio.reference import ReferenceSource

#: The example voices shipped with the app (synthetic speech; licence in that folder's LICENSE.md).
BUNDLED_VOICES_DIR = Path(__file__).resolve().parents[1] / "assets" / "voices"
#: Longest voice name, in characters.
MAX_NAME_CHARS = 64
#: Audio file endings kept for a voice's source file (anything else is stored as ``source.bin``; the decoder sniffs
#: the content, not the ending).
_SOURCE_SUFFIXES = {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".webm", ".aiff", ".aif"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Unicode categories a voice name may not hold: control, format (zero-width, direction marks), private use,
#: surrogate, unassigned, line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
VOICE_FILE = "voice.json"
SCHEMA_VERSION = 1
#: Scripts a voice name may be written in, alone (Unicode Script_Extensions values; characters of the Common and
#: Inherited scripts, digits, spaces and punctuation, go with any of them).
NAME_SCRIPTS = ("Latin", "Han", "Greek", "Cyrillic", "Armenian", "Georgian", "Hebrew", "Arabic", "Thai", "Devanagari",
                "Bengali", "Tamil", "Hangul", "Hiragana", "Katakana", "Bopomofo")
#: The script mixes a voice name may hold: Unicode TR39's "highly restrictive" level
#: (https://www.unicode.org/reports/tr39/#Restriction_Level_Detection): Latin with Han and Japanese kana, with Han
#: and Bopomofo, or with Han and Hangul. Any other mix ("en-fеmale" with a Cyrillic "е", "Αnna" with a Greek "Α")
#: is how a look-alike of another voice's name is made.
NAME_SCRIPT_MIXES = (("Latin", "Han", "Hiragana", "Katakana"), ("Latin", "Han", "Bopomofo"), ("Latin", "Han", "Hangul"))


def _script_pattern(scripts) -> "regex.Pattern":
    import regex

    return regex.compile("[" + "".join(rf"\p{{scx={name}}}" for name in ("Common", "Inherited", *scripts)) + "]*")


def _name_scripts(name: str) -> list[str]:
    """The scripts of ``NAME_SCRIPTS`` the letters of ``name`` are written in ("other" for any other), in order."""
    import regex

    found: list[str] = []
    for ch in name:
        if not ch.isalpha():
            continue
        script = next((s for s in NAME_SCRIPTS if regex.match(rf"\p{{scx={s}}}", ch)), "other")
        if script not in found:
            found.append(script)
    return found


def _mixes_scripts(name: str) -> bool:
    """Does ``name`` hold letters of scripts that no single script or allowed mix (``NAME_SCRIPT_MIXES``) covers?"""
    return not any(_script_pattern(group).fullmatch(name)
                   for group in [(script,) for script in NAME_SCRIPTS] + list(NAME_SCRIPT_MIXES))


class VoiceError(InputError):
    """A voice library request that cannot be done.

    Attributes:
        voice: the name it is about.
        code: what went wrong, a stable key ("name_empty", "not_found", "name_taken", ...): the web page shows
            ``tts_app.ui.texts`` string ``voice_error_<code>`` in the user's language, formatted with ``params``;
            None for messages only the command line gives.
        params: the values in the message (names, counts), for that rendering.
    """

    def __init__(self, voice: str, message: str, *, code: str | None = None, **params: Any):
        super().__init__(message)
        self.voice = voice
        self.code = code
        self.params = params


class VoiceNotFoundError(VoiceError, KeyError):
    """No voice of that name (the message lists the names there are)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Voice:
    """One voice of the library.

    Attributes:
        name: its name (unique, compared case-insensitively).
        voice_id: folder name (stable across renames).
        created_utc: ISO 8601 time it was saved.
        reference_text: transcript of the reference audio, or None.
        source_sha256: hex SHA-256 of the file as given (the sidecar's ``reference.sha256``).
        source_name: the file's original name (for display).
        report: the quality report of its first cleanup (``ReferenceReport.to_dict()``).
        folder: where its files are.
        bundled: shipped with the app (read-only).
        reference_cleanup: the cleanup chosen when it was saved (``tts_app.config.REFERENCE_CLEANUPS``), used
            whenever the voice is used unless a request names its own; None (voices saved before it was stored,
            bundled voices) = the preparer's default.
    """

    name: str
    voice_id: str
    created_utc: str
    reference_text: str | None
    source_sha256: str
    source_name: str
    report: dict[str, Any]
    folder: Path
    bundled: bool = False
    reference_cleanup: str | None = None

    @property
    def source_path(self) -> Path:
        """The reference audio file as it was given."""
        return next(p for p in sorted(self.folder.iterdir()) if p.stem == "source" and p.is_file())

    def to_dict(self) -> dict[str, Any]:
        """What an API returns for the voice (no server paths)."""
        return {"name": self.name, "created_utc": self.created_utc, "reference_text": self.reference_text,
                "source_sha256": self.source_sha256, "source_name": self.source_name, "bundled": self.bundled,
                "reference_cleanup": self.reference_cleanup, "duration_s": self.report.get("output_duration_s"), "warnings": list(self.report.get("warnings", []))}


def check_voice_name(name: Any) -> str:
    """The name, trimmed and NFC-normalised, if it can name a voice.

    Raises:
        VoiceError: not a string, empty, longer than ``MAX_NAME_CHARS``, holding control characters, invisible
            or direction-changing ones (Unicode categories Cc, Cf, Co, Cs, Cn, Zl, Zp: a zero-width space or a
            right-to-left override makes a name look like another) or a "/" or "\\" (names are also written in
            JSONL lines and on command lines), or only dots (".."); a look-alike of plainer text: characters that
            Unicode compatibility normalisation (NFKC) changes (full-width "ｅｎ", ligatures, mathematical letters
            "𝐞𝐧"), or letters of scripts mixed as no language writes them (``NAME_SCRIPT_MIXES``: a Cyrillic "е" in
            "en-fеmale").
    """
    if not isinstance(name, str):
        raise VoiceError(str(name), f"a voice name must be text, not {type(name).__name__}", code="name_not_text")
    clean = unicodedata.normalize("NFC", name).strip()
    if not clean:
        raise VoiceError(name, "the voice name is empty; give the voice a name", code="name_empty")
    if len(clean) > MAX_NAME_CHARS:
        raise VoiceError(clean, f"voice name {clean[:20]!r}... is {len(clean)} characters; at most {MAX_NAME_CHARS}",
                         code="name_too_long", head=clean[:20], length=len(clean), limit=MAX_NAME_CHARS)
    if _CONTROL.search(clean) or "/" in clean or "\\" in clean or any(
            unicodedata.category(ch) in _HIDDEN_CATEGORIES for ch in clean):
        raise VoiceError(clean, f"voice name {clean!r} holds a control, invisible or direction character or a slash; "
                                "use letters, digits, spaces, '-' or '_'", code="name_bad_characters", name=clean)
    if not clean.strip("."):
        raise VoiceError(clean, f"voice name {clean!r} is only dots; use letters or digits", code="name_dots",
                         name=clean)
    plain = unicodedata.normalize("NFKC", clean)
    if plain != clean:
        raise VoiceError(clean, f"voice name {clean!r} looks like {plain!r} but is written with other characters; "
                                f"write it as {plain!r}", code="name_lookalike", name=clean, plain=plain)
    if _mixes_scripts(clean):
        scripts = ", ".join(_name_scripts(clean))
        raise VoiceError(clean, f"voice name {clean!r} mixes letters of {scripts}, as look-alikes of other names do; "
                                "write it in one script (Latin may go with Chinese, Japanese or Korean)",
                         code="name_mixed_scripts", name=clean, scripts=scripts)
    return clean


def config_fingerprint(config: Any) -> str:
    """Short hex digest of a frozen config dataclass's values (which cleanup settings a stored clip was made with)."""
    return hashlib.sha256(repr(dataclasses.astuple(config)).encode()).hexdigest()[:12]


def _stored_cleanup(value: Any) -> str | None:
    """A voice.json's ``reference_cleanup`` if it is one of ``REFERENCE_CLEANUPS``, else None (the default)."""
    from tts_app.config import REFERENCE_CLEANUPS

    return value if value in REFERENCE_CLEANUPS else None


def _cleaned_stem(preparer: ReferencePreparer, cleanup: str) -> str:
    """File stem of a voice's cleaned clip for ``preparer``'s rate and its config with ``cleanup``.

    Raises:
        InputError: ``cleanup`` is not one of ``REFERENCE_CLEANUPS``.
    """
    from tts_app.audio.preparer import check_reference_cleanup

    config = preparer.config if cleanup == preparer.config.cleanup else check_reference_cleanup(preparer.config,
                                                                                                 cleanup)
    return f"{preparer.sampling_rate}_{config_fingerprint(config)}"


def _now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _json_bytes(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def _float_wav(samples: np.ndarray, sampling_rate: int) -> bytes:
    """32-bit float WAV bytes (lossless for the float32 clip)."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.asarray(samples, dtype=np.float32), int(sampling_rate), format="WAV", subtype="FLOAT")
    return buf.getvalue()


class VoiceLibrary:
    """Saved voices in ``root`` plus the bundled examples. Thread-safe within one process (one lock around every
    change); names are unique case-insensitively across both.

    Args:
        root: folder of saved voices (created on first save); None = no saved voices (the bundled ones only;
            ``save`` says how to give a folder).
        bundled_dir: folder of read-only example voices; None = none.
    """

    def __init__(self, root: str | Path | None, bundled_dir: str | Path | None = BUNDLED_VOICES_DIR):
        self.root = Path(root) if root is not None else None
        self.bundled_dir = Path(bundled_dir) if bundled_dir is not None else None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ reading

    def _read(self, folder: Path, bundled: bool) -> Voice | None:
        try:
            data = json.loads((folder / VOICE_FILE).read_text(encoding="utf-8"))
            return Voice(name=str(data["name"]), voice_id=folder.name, created_utc=str(data.get("created_utc", "")),
                         reference_text=data.get("reference_text") or None,
                         source_sha256=str(data["source_sha256"]), source_name=str(data.get("source_name", "")),
                         report=dict(data.get("report") or {}), folder=folder, bundled=bundled,
                         reference_cleanup=_stored_cleanup(data.get("reference_cleanup")))
        except (OSError, ValueError, KeyError, TypeError):  # a broken or foreign folder is not a voice
            return None

    def _scan(self, base: Path | None, bundled: bool) -> list[Voice]:
        if base is None or not base.is_dir():
            return []
        found = []
        for folder in sorted(base.iterdir()):
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            voice = self._read(folder, bundled)
            if voice is not None:
                found.append(voice)
        return found

    def list(self) -> list[Voice]:
        """Every voice, bundled ones included, sorted by name (case-insensitively). A saved voice that has the name
        of a bundled one (only possible by editing files by hand) hides the bundled one."""
        saved = self._scan(self.root, False)
        taken = {v.name.casefold() for v in saved}
        bundled = [v for v in self._scan(self.bundled_dir, True) if v.name.casefold() not in taken]
        return sorted(saved + bundled, key=lambda v: v.name.casefold())

    def names(self) -> list[str]:
        """The names of ``list()``."""
        return [v.name for v in self.list()]

    def cleaned_keys(self) -> set[str]:
        """The reference keys (``ReferenceAudio.key``) of every cleaned clip the voices keep, at any model rate."""
        keys = set()
        for voice in self.list():
            for info in (voice.folder / "cleaned").glob("*.json"):
                try:
                    key = json.loads(info.read_text(encoding="utf-8")).get("key")
                except (OSError, ValueError, AttributeError):
                    continue
                if key:
                    keys.add(str(key))
        return keys

    def find(self, name: str) -> Voice | None:
        """The voice called ``name`` (case-insensitively), or None."""
        if not isinstance(name, str):
            return None
        key = unicodedata.normalize("NFC", name).strip().casefold()
        return next((v for v in self.list() if v.name.casefold() == key), None)

    def get(self, name: str) -> Voice:
        """The voice called ``name`` (case-insensitively).

        Raises:
            VoiceNotFoundError: no such voice; the message lists the voices there are.
        """
        voice = self.find(name)
        if voice is None:
            names = self.names()
            known = ", ".join(repr(n) for n in names) if names else "none yet"
            raise VoiceNotFoundError(str(name), f"there is no voice named {name!r} (voices: {known}); save it "
                                                "first or check the spelling",
                                     code="not_found" if names else "not_found_none", name=str(name),
                                     voices=", ".join(repr(n) for n in names))
        return voice

    # ------------------------------------------------------------------ changing

    def save(self, name: str, source: ReferenceSource, preparer: ReferencePreparer, *,
             reference_text: str | None = None, source_name: str | None = None,
             overwrite: bool = False, cleanup: str | None = None) -> Voice:
        """Clean ``source`` with ``preparer`` (refusing an unusable clip before anything is written) and store it as
        voice ``name``.

        Args:
            name: the voice's name (``check_voice_name``).
            source: a file path or the file's bytes (arrays have no file to keep: write them to a WAV first).
            preparer: the runtime's ``ReferencePreparer`` (its cleaned clip is stored and reused).
            reference_text: transcript of the clip, or None.
            source_name: the file name to show (default: the path's name).
            overwrite: replace a saved voice of the same name (a bundled voice is never replaced).
            cleanup: what is done to the clip (``REFERENCE_CLEANUPS``; None = the preparer's default), stored
                with the voice and used whenever it is used (``prepare``) unless a request names its own.

        Returns:
            The saved ``Voice``.

        Raises:
            VoiceError: bad name, or the name is taken (and ``overwrite`` is False, or it is a bundled voice).
            ReferenceAudioError: the clip cannot be used (nothing is written).
            InputError: ``cleanup`` is not one of ``REFERENCE_CLEANUPS`` (nothing is written).
            OSError: the files cannot be written (nothing half-written is left).
        """
        name = check_voice_name(name)
        if self.root is None:
            raise VoiceError(name, "there is no voices folder to save into; give --voices-dir DIR", code="no_folder")
        if isinstance(source, (str, Path)):
            path = Path(source)
            data = path.read_bytes() if path.is_file() else None
            source_name = source_name or path.name
            suffix = path.suffix.lower()
        elif isinstance(source, (bytes, bytearray, memoryview)):
            data, suffix = bytes(source), Path(source_name or "").suffix.lower()
            source_name = source_name or "upload"
        else:
            raise VoiceError(name, "a voice is saved from an audio file (a path or its bytes)", code="not_a_file")
        if data is None:
            raise VoiceError(name, f"reference audio {source_name!r} does not exist; give an audio file",
                             code="no_source", source=source_name)
        text = (reference_text or "").strip() or None
        cleanup = cleanup or preparer.config.cleanup
        prepared = preparer.prepare(data, reference_text=text, name=source_name, cleanup=cleanup)
        with self._lock:
            existing = self.find(name)
            if existing is not None and (existing.bundled or not overwrite):
                why = "is a bundled example voice" if existing.bundled else "is already taken"
                raise VoiceError(name, f"the voice name {existing.name!r} {why}; choose another name"
                                       + ("" if existing.bundled else " or delete that voice first"),
                                 code="name_bundled" if existing.bundled else "name_taken_save", name=existing.name)
            voice_id = uuid.uuid4().hex[:16]
            self.root.mkdir(parents=True, exist_ok=True)
            staging = self.root / f".new-{voice_id}"
            staging.mkdir()
            try:
                suffix = suffix if suffix in _SOURCE_SUFFIXES else ".bin"
                write_atomic(staging / f"source{suffix}", data)
                self._store_cleaned(staging, prepared, preparer, cleanup)
                write_atomic(staging / VOICE_FILE, _json_bytes({
                    "schema_version": SCHEMA_VERSION, "name": name, "created_utc": _now_utc(),
                    "reference_text": text, "source_sha256": prepared.sha256, "source_name": source_name,
                    "report": prepared.report.to_dict(), "reference_cleanup": cleanup}))
                os.replace(staging, self.root / voice_id)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if existing is not None:
                self._remove_folder(existing.folder)
        return self.get(name)

    def rename(self, name: str, new_name: str) -> Voice:
        """Give voice ``name`` the name ``new_name`` (its files stay where they are).

        Raises:
            VoiceNotFoundError: no voice ``name``.
            VoiceError: ``new_name`` is not a valid name or is taken, or ``name`` is a bundled voice.
        """
        new_name = check_voice_name(new_name)
        with self._lock:
            voice = self.get(name)
            if voice.bundled:
                raise VoiceError(voice.name, f"{voice.name!r} is a bundled example voice and cannot be renamed; save "
                                             "it under another name instead", code="bundled_rename", name=voice.name)
            other = self.find(new_name)
            if other is not None and other.voice_id != voice.voice_id:
                raise VoiceError(new_name, f"the voice name {other.name!r} is already taken; choose another name",
                                 code="name_taken", name=other.name)
            data = json.loads((voice.folder / VOICE_FILE).read_text(encoding="utf-8"))
            data["name"] = new_name
            write_atomic(voice.folder / VOICE_FILE, _json_bytes(data))
        return self.get(new_name)

    def set_reference_text(self, name: str, reference_text: str | None) -> Voice:
        """Replace the stored transcript of voice ``name`` (e.g. after correcting an automatic one).

        Raises:
            VoiceNotFoundError, VoiceError: no such voice, or it is bundled.
        """
        with self._lock:
            voice = self.get(name)
            if voice.bundled:
                raise VoiceError(voice.name, f"{voice.name!r} is a bundled example voice and cannot be changed",
                                 code="bundled_change", name=voice.name)
            data = json.loads((voice.folder / VOICE_FILE).read_text(encoding="utf-8"))
            data["reference_text"] = (reference_text or "").strip() or None
            write_atomic(voice.folder / VOICE_FILE, _json_bytes(data))
        return self.get(voice.name)

    def delete(self, name: str) -> None:
        """Remove voice ``name`` and its files.

        Raises:
            VoiceNotFoundError: no such voice.
            VoiceError: it is a bundled voice.
        """
        with self._lock:
            voice = self.get(name)
            if voice.bundled:
                raise VoiceError(voice.name, f"{voice.name!r} is a bundled example voice and cannot be deleted",
                                 code="bundled_delete", name=voice.name)
            self._remove_folder(voice.folder)

    def _remove_folder(self, folder: Path) -> None:
        """Rename the folder away (so it stops being a voice at once), then delete it."""
        gone = folder.parent / f".deleted-{folder.name}-{uuid.uuid4().hex[:6]}"
        os.replace(folder, gone)
        shutil.rmtree(gone, ignore_errors=True)

    # ------------------------------------------------------------------ using

    def prepare(self, name: str, preparer: ReferencePreparer, cleanup: str | None = None) -> PreparedReference:
        """Voice ``name`` as a ``PreparedReference`` for ``preparer``'s model: the stored cleaned clip when one was
        made at the preparer's rate with its settings (no cleanup runs), else the source cleaned now (and stored,
        for a saved voice). The result equals ``preparer.prepare(voice's file, cleanup=...)``: same samples,
        report, key and source hash; its ``name`` is the voice's name.

        Args:
            cleanup: the request's own ``reference_cleanup``; None = the one stored with the voice
                (``Voice.reference_cleanup``), else the preparer's default.

        Raises:
            VoiceNotFoundError: no such voice.
            ReferenceAudioError: the stored source cannot be used any more (e.g. edited by hand).
            InputError: ``cleanup`` is not one of ``REFERENCE_CLEANUPS``.
        """
        from tts_app.audio.preparer import PreparedReference
        from tts_app.audio.reference import ReferenceReport
        from tts_app.request import ReferenceAudio

        voice = self.get(name)
        cleanup = cleanup or voice.reference_cleanup or preparer.config.cleanup
        stem = _cleaned_stem(preparer, cleanup)
        cleaned = voice.folder / "cleaned"
        stored = self._load_cleaned(cleaned / f"{stem}.wav", cleaned / f"{stem}.json")
        if stored is not None:
            samples, sampling_rate, info = stored
            fields = {f.name for f in dataclasses.fields(ReferenceReport)}
            report = ReferenceReport(**{k: v for k, v in info["report"].items() if k in fields})
            report = dataclasses.replace(report, name=voice.name)
            audio = ReferenceAudio(samples=samples, sampling_rate=sampling_rate, key=str(info.get("key", "")))
            return PreparedReference(audio=audio, report=report, name=voice.name, sha256=voice.source_sha256,
                                     voice=voice.name)
        source = voice.source_path.read_bytes()
        prepared = dataclasses.replace(preparer.prepare(source, reference_text=voice.reference_text,
                                                        name=voice.name, cleanup=cleanup), voice=voice.name)
        if not voice.bundled:
            try:
                self._store_cleaned(voice.folder, prepared, preparer, cleanup)
            except OSError:  # a read-only library still works, it just cleans again next time
                pass
        return prepared

    def prepare_source(self, name: str, preparer: ReferencePreparer, cleanup: str | None = None
                       ) -> tuple[PreparedReference, str | None]:
        """(``prepare(name, preparer, cleanup)``, the voice's transcript): what a request needs from a voice."""
        voice = self.get(name)
        return self.prepare(voice.name, preparer, cleanup), voice.reference_text

    def check_voice_or_file(self, value: str) -> None:
        """Refuse ``value`` unless it is an audio file that exists or the name of a voice (command-line voices).

        Raises:
            VoiceNotFoundError: neither (the message lists the voices there are).
        """
        if Path(value).expanduser().is_file() or self.find(value) is not None:
            return
        names = ", ".join(repr(n) for n in self.names()) or "none yet"
        raise VoiceNotFoundError(value, f"{value!r} is neither an audio file nor a saved voice (voices: {names})",
                                 code="not_voice_or_file", name=value, voices=names)

    def resolve(self, value: str, preparer: ReferencePreparer, cleanup: str | None = None
                ) -> tuple[PreparedReference, str | None]:
        """(prepared reference, transcript or None) for ``value``: an audio file (cleaned by ``preparer`` with
        ``cleanup``, None = its default), else the voice of that name (``prepare_source``: ``cleanup``, None = the
        voice's own).

        Raises:
            VoiceNotFoundError: neither a file nor a voice.
            ReferenceAudioError: the clip cannot be used.
        """
        self.check_voice_or_file(value)
        path = Path(value).expanduser()
        if path.is_file():
            return preparer.prepare(path, cleanup=cleanup), None
        return self.prepare_source(value, preparer, cleanup)

    @staticmethod
    def _store_cleaned(folder: Path, prepared: PreparedReference, preparer: ReferencePreparer, cleanup: str) -> None:
        stem = _cleaned_stem(preparer, cleanup)
        audio = prepared.audio
        write_atomic(folder / "cleaned" / f"{stem}.wav", _float_wav(audio.samples, audio.sampling_rate))
        write_atomic(folder / "cleaned" / f"{stem}.json", _json_bytes({
            "key": audio.key, "sampling_rate": audio.sampling_rate, "report": prepared.report.to_dict()}))

    @staticmethod
    def _load_cleaned(wav: Path, info_path: Path) -> tuple[np.ndarray, int, dict] | None:
        if not (wav.is_file() and info_path.is_file()):
            return None
        try:
            import soundfile as sf

            info = json.loads(info_path.read_text(encoding="utf-8"))
            samples, sampling_rate = sf.read(str(wav), dtype="float32", always_2d=False)
            if samples.ndim != 1 or samples.size == 0 or int(sampling_rate) != int(info["sampling_rate"]):
                return None
            return np.ascontiguousarray(samples), int(sampling_rate), info
        except Exception:  # noqa: BLE001 - a damaged cache file: clean the source again
            return None
