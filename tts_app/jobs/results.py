"""The writing side of a job: ``results.jsonl`` in line order with exactly one record per line, the WAV of every
ok line, reading results back (also after a crash), and the results ZIP.

Nothing here knows where a line was synthesised: the local runner (``runner.py``) feeds it from the engine's
futures (writing each ok line's audio and sidecar with ``tts_app.outputs.save_outputs``), and a cluster driver can
feed it results streamed back from workers in any order. The contract:

    writer = ResultsWriter(out_dir)        # results.jsonl + a journal, both started empty
    writer.expect(line)                    # once per line of the job file, in file order
    writer.put(record)                     # once per expected line, in any order (line_record(...) builds one)
    writer.close()                         # every expected line has its record: results.jsonl is complete

``put`` appends the record to the journal (``.results.journal.jsonl``: write + flush + fsync) at once, and to
``results.jsonl`` as soon as every earlier line has its record, so ``results.jsonl`` is always a line-ordered
prefix of the job and a kill loses at most the record being written. ``read_results`` merges both files.

Record fields: ``line`` (1-based physical line of the job file), ``output_name``, ``status`` ("ok" | "failed" |
"cancelled"), ``error`` (message or null), ``audio_path`` and ``metadata_path`` (the sidecar JSON, see
``tts_app.outputs``; file names relative to the output folder, or null), ``duration_s``, ``num_segments``,
``elapsed_s`` (wall seconds from submission to completion), ``warnings``, ``request_id`` (the engine request
that ran the line: the id a failure's traceback is logged under and its sidecar's ``request_id``; null for a line
that never reached the engine: invalid, cancelled before it started, or on a Ray worker that stopped before
answering), ``finish_reason`` (why the line ended, ``tts_app.finish.FinishReason``'s value: "done", "refused" for
a line the user must fix, "too_large", "out_of_memory", "cancelled", "unavailable", "error" for a bug; the status
says what was written, the reason says who can fix it). A line run with a take policy (``take_check``) also has
``takes``, ``scores``, ``rerolled`` and ``needs_listening`` (``take_fields``). ``error`` and ``warnings`` are English; when they come from the message tables the record also has
``error_i18n`` / ``warnings_i18n`` (``{"code", "params"}`` per message, null for a plain one), from which the page
and the CLI render them in their user's language (``tts_app.frontend.messages.localize_record``).
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

from tts_app.audio.post import write_atomic
from tts_app.errors import InputError
from tts_app.frontend.messages import Notice, to_json
from tts_app.output_layout import JOURNAL_NAME, RESULTS_NAME, ZIP_NAME

STATUSES = ("ok", "failed", "cancelled")


def line_record(line: int, output_name: str | None, status: str, *, error: str | None = None,
                audio_path: str | None = None, metadata_path: str | None = None, duration_s: float | None = None,
                num_segments: int | None = None, elapsed_s: float = 0.0,
                warnings: list[str] | tuple[str, ...] = (), request_id: str | None = None,
                finish_reason: str | None = None, quality: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``results.jsonl`` record (see the module docstring for the fields). ``finish_reason`` None: "done" for
    an ok line, "cancelled" for a cancelled one, "error" for a failed one. ``quality``: an ok line's take-policy
    fields (``take_fields``), added as they are.

    Raises:
        ValueError: ``status`` is not one of ``STATUSES``, or a path is not a plain file name.
    """
    if status not in STATUSES:
        raise ValueError(f"status {status!r} must be one of {STATUSES}")
    for path in (audio_path, metadata_path):
        if path is not None and (Path(path).name != path or path.startswith(".")):
            raise ValueError(f"{path!r} must be a plain file name inside the output folder")
    record = {"line": int(line), "output_name": output_name, "status": status, "error": error,
              "audio_path": audio_path, "metadata_path": metadata_path, "duration_s": duration_s,
              "num_segments": num_segments, "elapsed_s": round(float(elapsed_s), 3), "warnings": list(warnings),
              "request_id": request_id,
              "finish_reason": finish_reason or {"ok": "done", "cancelled": "cancelled"}.get(status, "error")}
    record.update(quality or {})
    # Twins of the messages, for a door that shows them in another language (``localize_record``).
    if isinstance(error, Notice):
        record["error_i18n"] = error.to_json()
    if any(isinstance(w, Notice) for w in warnings):
        record["warnings_i18n"] = [to_json(w) for w in warnings]
    return record


def take_fields(segments) -> dict[str, Any]:
    """The take-policy fields of an ok line whose request had one (``SynthesisParams.take_check``; {} otherwise):
    ``takes`` (per segment, every take made: seed, scores, problems, kept), ``scores`` (per segment, the kept
    take's scores and the thresholds it still misses), ``rerolled`` (re-generations over all its segments) and
    ``needs_listening`` (a segment is still below a threshold: the Batch tab's filter).

    Args:
        segments: the result's ``SegmentTiming`` list.
    """
    if not any(s.takes for s in segments):
        return {}
    return {"takes": [list(s.takes) for s in segments], "scores": [s.scores for s in segments],
            "rerolled": sum(s.rerolled for s in segments),
            "needs_listening": any(s.needs_listening for s in segments)}


def _dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


class ResultsWriter:
    """Writes ``results.jsonl`` in line order, one record per line; thread-safe (see the module docstring).

    Args:
        out_dir: the job's output folder (exists).
        keep: records of an earlier run that the caller will ``put`` again (``resume``); they seed the journal
            before ``results.jsonl`` starts over, so a kill right after opening loses none of them.

    Raises:
        ValueError: from ``put``: a record for a line that was not expected, or a second record for a line.
    """

    def __init__(self, out_dir: str | Path, keep: list[dict] | tuple[dict, ...] = ()):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / RESULTS_NAME
        self.journal_path = self.out_dir / JOURNAL_NAME
        write_atomic(self.journal_path, "".join(_dumps(r) for r in keep).encode("utf-8"))
        write_atomic(self.path, b"")
        self._results = open(self.path, "a", encoding="utf-8")
        self._journal = open(self.journal_path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self._order: dict[int, int] = {}  # line -> position in file order
        self._lines: list[int] = []  # expected lines, in file order
        self._next = 0  # position of the next line results.jsonl waits for
        self._pending: list[tuple[int, str]] = []  # heap of (position, serialised record) not yet in order
        self._done: set[int] = set()
        self.counts = {status: 0 for status in STATUSES}

    @property
    def num_expected(self) -> int:
        return len(self._lines)

    @property
    def num_written(self) -> int:
        """Records in ``results.jsonl`` (the in-order prefix)."""
        return self._next

    def expect(self, line: int) -> None:
        """Register the next line of the job file (call in file order, before its ``put``)."""
        with self._lock:
            if line in self._order:
                raise ValueError(f"line {line} expected twice")
            self._order[line] = len(self._lines)
            self._lines.append(line)

    def put(self, record: dict[str, Any]) -> None:
        """Record how a line ended (any order): journal now, ``results.jsonl`` once the lines before it are in."""
        line = record["line"]
        text = _dumps(record)
        with self._lock:
            if line not in self._order:
                raise ValueError(f"a record for line {line}, which was not expected")
            if line in self._done:
                raise ValueError(f"a second record for line {line}")
            self._done.add(line)
            self.counts[record["status"]] = self.counts.get(record["status"], 0) + 1
            self._journal.write(text)
            self._journal.flush()
            os.fsync(self._journal.fileno())
            heapq.heappush(self._pending, (self._order[line], text))
            wrote = False
            while self._pending and self._pending[0][0] == self._next:
                self._results.write(heapq.heappop(self._pending)[1])
                self._next += 1
                wrote = True
            if wrote:
                self._results.flush()
                os.fsync(self._results.fileno())

    @property
    def complete(self) -> bool:
        """Every expected line has its record in ``results.jsonl``."""
        with self._lock:
            return self._next == len(self._lines)

    def close(self) -> None:
        """Close both files; when every expected line is in ``results.jsonl`` the journal is removed."""
        with self._lock:
            self._results.close()
            self._journal.close()
            if self._next == len(self._lines):
                self.journal_path.unlink(missing_ok=True)


def _read_records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # a record cut short by a kill, or damaged (JSONDecodeError, a
                continue  # number beyond Python's int-to-str limit, nesting beyond its recursion limit)
            if isinstance(record, dict) and isinstance(record.get("line"), int):
                records.append(record)
    return records


def read_results(out_dir: str | Path) -> dict[int, dict]:
    """The record of each line from ``out_dir/results.jsonl`` plus the journal a killed run left (empty when
    neither exists). When a line has several records (an old file edited between runs), the last one counts."""
    out_dir = Path(out_dir)
    records: dict[int, dict] = {}
    for record in _read_records(out_dir / RESULTS_NAME) + _read_records(out_dir / JOURNAL_NAME):
        records[record["line"]] = record
    return records


def audio_decodes(path: Path) -> bool:
    """True when ``path`` is a complete audio file: soundfile opens it, it has samples, its last block decodes,
    and for WAV the RIFF size in the header matches the file size (libsndfile silently accepts a truncated WAV
    as a shorter one, so a cut file would otherwise pass). An MP3 / Opus file libsndfile cannot open counts when
    PyAV decodes samples from it."""
    import soundfile as sf

    try:
        if path.suffix.lower() == ".wav":
            with open(path, "rb") as fh:
                head = fh.read(12)
            # RIFF header: b"RIFF", little-endian uint32 (file size - 8), b"WAVE" (Microsoft RIFF/WAVE spec)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE" or \
                    int.from_bytes(head[4:8], "little") != path.stat().st_size - 8:
                return False
        with sf.SoundFile(str(path)) as f:
            if f.frames <= 0:
                return False
            f.seek(max(0, f.frames - 1024))
            return len(f.read(1024, dtype="float32")) > 0
    except Exception:  # soundfile raises LibsndfileError/RuntimeError/OSError variants for broken files
        if path.suffix.lower() not in (".mp3", ".opus"):
            return False
    # libsndfile refuses some valid short Ogg Opus / MP3 files: decode them with PyAV, which wrote them
    from tts_app.audio.formats import decode_audio

    try:
        return decode_audio(path)[0].size > 0
    except Exception:  # PyAV raises av.error.* (InvalidDataError, EOFError...) for broken files
        return False


def resumable(out_dir: Path) -> dict[int, dict]:
    """Records of lines an earlier run finished: status ok and the audio file still decodes."""
    kept = {}
    for line, record in read_results(out_dir).items():
        audio = record.get("audio_path")
        if record.get("status") == "ok" and isinstance(audio, str) and "/" not in audio and \
                audio_decodes(out_dir / audio):
            kept[line] = record
    return kept


def remove_stale_temp_files(out_dir: Path) -> None:
    """Delete temporary files a killed run left behind (``write_atomic`` names them ``.<name>.<random>.tmp``)."""
    for path in out_dir.iterdir():
        if path.name.startswith(".") and path.name.endswith(".tmp") and path.is_file():
            path.unlink(missing_ok=True)


def _chapter_files(sidecar: Path) -> list[str]:
    """Names of the per-chapter audio files a sidecar lists (``chapters[].file``) that exist next to it."""
    try:
        chapters = json.loads(sidecar.read_text(encoding="utf-8")).get("chapters") or []
    except (OSError, ValueError):
        return []
    names = [c.get("file") for c in chapters if isinstance(c, dict)]
    return [n for n in names if isinstance(n, str) and "/" not in n and (sidecar.parent / n).is_file()]


def make_results_zip(out_dir: str | Path) -> Path:
    """Bundle ``results.jsonl`` (line order, relative paths only) and the audio, per-chapter audio and metadata
    sidecar of every ok line into ``out_dir/results.zip`` (written atomically).

    Returns:
        Path of the ZIP.

    Raises:
        InputError: ``out_dir`` has no ``results.jsonl``.
    """
    out_dir = Path(out_dir)
    if not (out_dir / RESULTS_NAME).is_file():
        raise InputError(f"{str(out_dir)!r} has no {RESULTS_NAME}; run the job first")
    records = sorted(read_results(out_dir).values(), key=lambda r: r["line"])
    target = out_dir / ZIP_NAME
    fd, tmp = tempfile.mkstemp(prefix=f".{ZIP_NAME}.", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            zf.writestr(RESULTS_NAME, "".join(_dumps(r) for r in records), compress_type=zipfile.ZIP_DEFLATED)
            for record in records:
                audio = record.get("audio_path")
                if record.get("status") == "ok" and isinstance(audio, str) and (out_dir / audio).is_file():
                    zf.write(out_dir / audio, audio, compress_type=zipfile.ZIP_STORED)  # PCM barely compresses
                    sidecar = record.get("metadata_path")
                    if isinstance(sidecar, str) and (out_dir / sidecar).is_file():
                        zf.write(out_dir / sidecar, sidecar, compress_type=zipfile.ZIP_DEFLATED)
                        for chapter in _chapter_files(out_dir / sidecar):
                            zf.write(out_dir / chapter, chapter, compress_type=zipfile.ZIP_STORED)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
