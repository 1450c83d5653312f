"""Path and ZIP safety of a JSONL job: where a line's audio may come from (``AudioSources``: relative paths resolved
inside the allowed roots, symlinks followed and checked, a ZIP's members by their safe names), what an audio ZIP may
hold and how it is unpacked (size, member count, unpack ratio, no members outside the folder, no symlinks), and the
portable output file name a line's ``output_name`` becomes. Pure Python, no torch, no model.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import stat
import unicodedata
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from tts_app.config import ReferenceConfig
from tts_app.errors import InputError, JobLineError
from tts_app.frontend.messages import listing
from tts_app.jobs.messages import Notice

#: most a ZIP member may unpack to, as a multiple of its packed size, by default (``JobConfig.max_zip_ratio``)
MAX_ZIP_RATIO = 100.0

# Characters Windows, macOS or shells choke on in file names; replaced by "_".
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f<>:"|?*]')
# Device names Windows refuses as file names (any extension).
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
_MAX_NAME_BYTES = 200  # leaves room for ".wav" and our temp-file prefix/suffix under the usual 255-byte limit


# --------------------------------------------------------------------------------------------------- paths


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


# How a control character got into a path: a JSON escape such as \n read where a Windows path had a backslash.
_CONTROL_NAMES = {"\n": (Notice("job_ctrl_newline"), "n"), "\t": (Notice("job_ctrl_tab"), "t"),
                  "\r": (Notice("job_ctrl_return"), "r"), "\b": (Notice("job_ctrl_backspace"), "b"),
                  "\f": (Notice("job_ctrl_formfeed"), "f")}
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _control_character_problem(value: str) -> str | None:
    """The message for a path holding control characters (e.g. ``"D:\new\take.wav"`` written in JSON, where
    ``\n`` is a newline and ``\t`` a tab), with the path rewritten with forward slashes; None when it has none."""
    found = _CONTROL_CHARS.findall(value)
    if not found:
        return None
    names = listing(list(dict.fromkeys(_CONTROL_NAMES.get(ch, (f"U+{ord(ch):04X}", ""))[0] for ch in found)))
    fixed = "".join("/" + _CONTROL_NAMES[ch][1] if ch in _CONTROL_NAMES else ch for ch in value).replace("\\", "/")
    return Notice("job_control_chars", value=value, names=names, fixed=fixed)


class AudioSources:
    """Resolves ``prompt_audio`` values safely and checks that they name usable audio.

    Relative paths are looked up in ``search_roots`` in order (audio folder first, then the JSONL's folder). The
    resolved real path (symlinks followed) must lie inside one of ``allowed_roots``; absolute paths and ``..``
    that leave them are refused. A file found is probed without decoding it: its first bytes must be an audio
    container (``tts_app.audio.decode.sniff_audio_format``) and the duration its header declares, when it declares
    one, at least ``min_reference_s``. A name that only differs in letter case from an existing file is refused
    with "did you mean ...?". Use as a context manager (or call ``close``) to release an open audio ZIP.

    Args:
        search_roots, allowed_roots: folders to look in / that paths may point into.
        zip_members, zip_path: an audio ZIP searched first, by member name, without unpacking it (validation
            only; paths returned for it are ``zip_path / member`` and are not files). The members lines named
            are collected in ``zip_used`` (a job unpacks only those).
        min_reference_s: shortest reference the header may declare, in s (``ReferenceConfig.min_speech_s``).
        has_audio_source: an audio folder or ZIP was given (when not, "not found" says to give one).
        root_labels: how messages name a root folder (e.g. "the job file's folder"), so messages hold no server
            paths; roots without a label are shown as paths.
        voices: the ``tts_app.voices.VoiceLibrary`` that ``voice`` / ``speakers`` fields name (None: the bundled
            example voices only).
    """

    _MEMO_ENTRIES = 4096  # distinct prompt_audio values remembered (a job reuses a few voices on many lines)

    def __init__(self, search_roots: list[Path], allowed_roots: list[Path], *,
                 zip_members: frozenset[str] | None = None, zip_path: Path | None = None,
                 min_reference_s: float = ReferenceConfig().min_speech_s, has_audio_source: bool = False,
                 root_labels: dict[Path, str] | None = None, voices=None):
        if voices is None:  # the tts_app.voices.VoiceLibrary that ``voice`` fields name: bundled voices only
            from tts_app.voices import VoiceLibrary

            voices = VoiceLibrary(None)
        self.voices = voices
        self.search_roots = [Path(r).resolve() for r in search_roots]
        self.allowed_roots = [Path(r).resolve() for r in dict.fromkeys([*search_roots, *allowed_roots])]
        self.zip_members = zip_members
        self.zip_path = zip_path
        self.zip_used: set[str] = set()
        self.min_reference_s = float(min_reference_s)
        self.has_audio_source = has_audio_source or zip_members is not None
        self._memo: dict[str, Path | JobLineError] = {}  # value -> resolved path, or the refusal
        self._found_as: dict[str, tuple[str, str]] = {}  # value -> (shorter path it was found as, where)
        self._zip: zipfile.ZipFile | None = None
        self._zip_casefold: dict[str, str] | None = None
        self._labels = {Path(k).resolve(): v for k, v in (root_labels or {}).items()}
        if zip_path is not None:
            self._labels.setdefault(Path(zip_path).resolve(), Notice("job_root_audio_zip", name=Path(zip_path).name))

    def _label(self, root: Path) -> str:
        return self._labels.get(Path(root).resolve(), str(root))

    def __enter__(self) -> "AudioSources":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the audio ZIP if one was opened for probing."""
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def resolve(self, value: str, line_number: int) -> Path:
        """The file ``value`` names (remembered per value: realpath calls and probes dominate validation time
        otherwise).

        Raises:
            JobLineError: control characters in the path, the path leaves the allowed folders, no such file exists
                (``code`` "audio_not_found"), or the file is not audio or too short.
        """
        found = self._memo.get(value)
        if found is None:
            try:
                found = self._resolve(value, line_number)
            except JobLineError as exc:
                found = exc
            if len(self._memo) < self._MEMO_ENTRIES:
                self._memo[value] = found
        if isinstance(found, JobLineError):
            raise JobLineError(line_number, found.reason, found.code)
        return found

    def _resolve(self, value: str, line_number: int) -> Path:
        control = _control_character_problem(value)
        if control is not None:
            raise JobLineError(line_number, control, "control_characters")
        text = value.strip().replace("\\", "/")  # JSONL written on Windows
        rel = PurePosixPath(text)
        roots_text = listing([self._label(r) for r in self.allowed_roots])
        if re.match(r"^[A-Za-z]:", text):
            raise JobLineError(line_number, Notice("job_windows_path", value=value))
        if rel.is_absolute():
            resolved = Path(text).resolve()
            if not _inside(resolved, self.allowed_roots):
                raise JobLineError(line_number, Notice("job_outside_roots", value=value, roots=roots_text))
            if not resolved.is_file():
                raise JobLineError(line_number, Notice("job_audio_missing", value=value), "audio_not_found")
            self._probe_file(value, resolved, line_number)
            return resolved
        found = self._find_relative(value, text, line_number, roots_text)
        if found is not None:
            return found[0]
        # Written from the folder above (upstream GLM-TTS's examples/example_zh.jsonl names
        # "examples/prompt/jiayan_zh.wav", relative to the checkout it runs in): the same file under the shorter
        # paths, leading folders dropped one at a time, still only inside the allowed roots; parse_line warns.
        parts = PurePosixPath(posixpath.normpath(text)).parts
        for k in range(1, len(parts) if parts and parts[0] != ".." else 0):
            shorter = "/".join(parts[k:])
            found = self._find_relative(value, shorter, line_number, roots_text)
            if found is not None:
                self._found_as[value] = (shorter, found[1])
                return found[0]
        raise JobLineError(line_number, self._not_found_message(value, text), "audio_not_found")

    def found_as(self, value: str) -> tuple[str, str] | None:
        """``(shorter path, where)`` when ``resolve(value)`` found the file only with leading folders of ``value``
        dropped (``examples/prompt/a.wav`` as ``prompt/a.wav`` in "the job file's folder"), else None."""
        return self._found_as.get(value)

    def _find_relative(self, value: str, text: str, line_number: int, roots_text: str) -> tuple[Path, str] | None:
        """The relative path ``text`` in the audio ZIP, then in each search root: ``(path, label of where)``, or
        None when it is in none of them (``value``: as the line wrote it, for messages).

        Raises:
            JobLineError: ``text`` leaves the ZIP or the allowed roots; the file found is not usable audio.
        """
        if self.zip_members is not None:
            member = posixpath.normpath(text)
            if member == ".." or member.startswith("../"):
                raise JobLineError(line_number, Notice("job_leaves_zip", value=value))
            if member in self.zip_members:
                self.zip_used.add(member)  # named by a line, usable or not: the run says why not, as here
                self._probe_zip_member(value, member, line_number)
                where = self._label(self.zip_path) if self.zip_path is not None else Notice("job_root_the_zip")
                return Path(self.zip_path or "audio.zip") / member, where
        for root in self.search_roots:
            candidate = (root / PurePosixPath(text)).resolve()
            if not _inside(candidate, self.allowed_roots):
                raise JobLineError(line_number, Notice("job_leaves_roots", value=value, roots=roots_text))
            if candidate.is_file():
                self._probe_file(value, candidate, line_number)
                return candidate, self._label(root)
        return None

    def _not_found_message(self, value: str, text: str) -> str:
        """"not found", with "did you mean ...?" for a name that differs only in letter case, and where it looked."""
        near = self._case_insensitive_match(text)
        if near is not None:
            return Notice("job_did_you_mean", value=value, near=near)
        looked = listing(([self._label(self.zip_path)] if self.zip_members is not None else [])
                         + [self._label(r) for r in self.search_roots])
        return Notice("job_not_found" if self.has_audio_source else "job_not_found_no_source", value=value,
                      looked=looked)

    def _case_insensitive_match(self, text: str) -> str | None:
        """The existing file (as the user should write it) whose path equals ``text`` ignoring letter case."""
        wanted = posixpath.normpath(text)
        if self.zip_members is not None:
            if self._zip_casefold is None:
                self._zip_casefold = {m.casefold(): m for m in self.zip_members}
            if wanted.casefold() in self._zip_casefold:
                return self._zip_casefold[wanted.casefold()]
        for root in self.search_roots:
            folder, parts = root, []
            for part in PurePosixPath(wanted).parts:
                try:
                    names = {entry.name.casefold(): entry.name for entry in folder.iterdir()}
                except OSError:
                    break
                if part.casefold() not in names:
                    break
                parts.append(names[part.casefold()])
                folder = folder / parts[-1]
            else:
                if folder.is_file() and _inside(folder.resolve(), self.allowed_roots):
                    return "/".join(parts)
        return None

    def _check_audio(self, value: str, head: bytes, duration_s: float | None, line_number: int) -> None:
        from tts_app.audio.decode import sniff_audio_format

        fmt, what = sniff_audio_format(head)
        if fmt is None:
            raise JobLineError(line_number, Notice("job_not_audio", value=value, what=what), "not_audio")
        if duration_s is not None and duration_s < self.min_reference_s:
            raise JobLineError(line_number, Notice("job_too_short", value=value, duration_s=duration_s,
                                                   min_s=self.min_reference_s), "reference_too_short")

    def _probe_file(self, value: str, path: Path, line_number: int) -> None:
        from tts_app.audio.decode import PROBE_BYTES, probe_duration_s

        try:
            with open(path, "rb") as fh:
                head = fh.read(PROBE_BYTES)
        except OSError as exc:
            raise JobLineError(line_number, Notice("job_unreadable", value=value,
                                                   reason=exc.strerror or str(exc))) from None
        self._check_audio(value, head, probe_duration_s(str(path)) if head else None, line_number)

    def _probe_zip_member(self, value: str, member: str, line_number: int) -> None:
        from tts_app.audio.decode import PROBE_BYTES, probe_duration_s

        try:
            if self._zip is None:
                self._zip = zipfile.ZipFile(self.zip_path)
            with self._zip.open(member) as fh:
                head = fh.read(PROBE_BYTES)
            duration_s = None
            if head:
                with self._zip.open(member) as fh:
                    duration_s = probe_duration_s(fh)
        except (zipfile.BadZipFile, OSError, KeyError, RuntimeError) as exc:
            raise JobLineError(line_number, Notice("job_zip_unreadable", value=value, reason=str(exc))) from None
        self._check_audio(value, head, duration_s, line_number)


#: ZIP members that unpack to fewer bytes than this are not held to ``MAX_ZIP_RATIO`` (a second of
#: silent 24 kHz WAV is 48 KB and deflates ~500-fold; so small a member cannot fill a disk).
MIN_RATIO_CHECKED_BYTES = 1024**2


def _checked_zip_members(archive: zipfile.ZipFile, *, max_total_bytes: int, max_members: int,
                         max_ratio: float = MAX_ZIP_RATIO
                         ) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """Files of an audio ZIP with their safe relative names, or an ``InputError`` naming the unsafe member."""
    members = [m for m in archive.infolist() if not m.is_dir()]
    if len(members) > max_members:
        raise InputError(Notice("job_zip_too_many", count=len(members), limit=max_members))
    declared = sum(m.file_size for m in members)
    if declared > max_total_bytes:
        raise InputError(Notice("job_zip_too_big", size=declared, limit=max_total_bytes))
    targets: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    for m in members:
        ratio = m.file_size / max(1, m.compress_size)
        if m.file_size >= MIN_RATIO_CHECKED_BYTES and ratio > max_ratio:
            raise InputError(Notice("job_zip_ratio", member=m.filename, ratio=ratio, limit=max_ratio))
        name = m.filename.replace("\\", "/")
        rel = PurePosixPath(name)
        if rel.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in rel.parts:
            raise InputError(Notice("job_zip_outside", member=m.filename))
        if stat.S_ISLNK(m.external_attr >> 16):
            raise InputError(Notice("job_zip_symlink", member=m.filename))
        targets.append((m, rel))
    return targets


def _open_zip(zip_path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(Notice("job_zip_unreadable_file", name=Path(zip_path).name, reason=str(exc))) from exc


def zip_audio_members(zip_path: Path, *, max_total_bytes: int, max_members: int,
                      max_ratio: float = MAX_ZIP_RATIO) -> frozenset[str]:
    """Relative names of the files in an audio ZIP, after the same safety checks as ``extract_audio_zip``;
    nothing is unpacked (validation of an uploaded ZIP costs no disk).

    Raises:
        InputError: see ``extract_audio_zip``.
    """
    with _open_zip(zip_path) as archive:
        return frozenset(str(rel) for _, rel in _checked_zip_members(
            archive, max_total_bytes=max_total_bytes, max_members=max_members, max_ratio=max_ratio))


def extract_audio_zip(zip_path: Path, dest_dir: Path, *, max_total_bytes: int, max_members: int,
                      max_ratio: float = MAX_ZIP_RATIO, only: frozenset[str] | None = None) -> Path:
    """Extract an uploaded audio ZIP into ``dest_dir`` (recreated empty), refusing anything unsafe.

    Refused, before anything is written: members whose name is absolute, has a drive letter or a ``..``
    component (zip-slip), symbolic links, more than ``max_members`` files, a declared total size over
    ``max_total_bytes``, or a member over ``MIN_RATIO_CHECKED_BYTES`` that unpacks to more than ``max_ratio`` times
    its packed size. While extracting, actual bytes are counted too (declared sizes can lie).

    Args:
        only: the members to unpack (relative names, as ``zip_audio_members`` gives them; the ones a job's lines
            name: ``AudioSources.zip_used``); None = all.

    Returns:
        ``dest_dir``.

    Raises:
        InputError: not a ZIP, or one of the refusals above (the message names the member and the limit).
    """
    with _open_zip(zip_path) as archive:
        targets = _checked_zip_members(archive, max_total_bytes=max_total_bytes, max_members=max_members,
                                       max_ratio=max_ratio)
        if only is not None:
            targets = [(m, rel) for m, rel in targets if str(rel) in only]
        if dest_dir.exists():
            shutil.rmtree(dest_dir)
        dest_dir.mkdir(parents=True)
        root = dest_dir.resolve()
        written = 0
        for m, rel in targets:
            out = (root / rel).resolve()
            if not out.is_relative_to(root):  # belt and braces after the name checks
                raise InputError(f"audio ZIP member {m.filename!r} points outside the archive folder")
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(m) as src, open(out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > max_total_bytes:
                        raise InputError(Notice("job_zip_grew", limit=max_total_bytes))
                    dst.write(chunk)
    return dest_dir


# --------------------------------------------------------------------------------------------------- names


def sanitize_output_name(value: Any, line_number: int) -> str:
    """A plain, portable file name (no extension) from a line's ``output_name``.

    Unsafe characters (control characters, ``<>:"|?*``) become ``_``; a trailing ``.wav`` and leading/trailing
    dots and spaces are removed; Windows device names get a ``_`` prefix. Unicode (e.g. Chinese) is kept, NFC.

    Raises:
        JobLineError: the name holds a folder separator or is ``.``/``..`` (path traversal), is not a string or
            integer, is empty after cleaning, or is longer than 200 bytes.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise JobLineError(line_number, Notice("job_name_type", type=type(value).__name__))
    raw = unicodedata.normalize("NFC", str(value)).strip()
    if "/" in raw or "\\" in raw or raw in (".", ".."):
        plain = PurePosixPath(raw.replace("\\", "/")).name.strip(". ") or "name"
        raise JobLineError(line_number, Notice("job_name_path", value=value, plain=plain))
    name = _UNSAFE_CHARS.sub("_", raw)
    if name.lower().endswith(".wav"):
        name = name[:-4]
    name = name.strip(". ")  # a leading dot would hide the file (and look like our temporary files)
    if not name:
        raise JobLineError(line_number, Notice("job_name_empty_after", value=value))
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise JobLineError(line_number, Notice("job_name_too_long", size=len(name.encode("utf-8")),
                                               limit=_MAX_NAME_BYTES))
    if name.split(".")[0].upper() in _WINDOWS_RESERVED:
        name = "_" + name
    return name


def rename_warning(value: Any, name: str) -> str | None:
    """A warning when ``sanitize_output_name`` changed the name (beyond dropping a ``.wav`` ending), else None."""
    wanted = unicodedata.normalize("NFC", str(value)).strip()
    if wanted.lower().endswith(".wav"):
        wanted = wanted[:-4]
    if name == wanted:
        return None
    return Notice("job_renamed", value=str(value), name=name, file=name + ".wav")
