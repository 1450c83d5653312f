"""Durable jobs: each job is a folder under ``<output root>/jobs/<job id>/`` that outlives the browser tab that
started it and the server process that ran it. Pure Python, no torch.

Folder layout::

    <job id>/job.json            JobState: status, progress, settings, input names (written atomically)
    <job id>/input/tasks.jsonl   the job file as uploaded
    <job id>/input/audio.zip     the reference audio ZIP, when one was uploaded
    <job id>/input/voice.<ext>   the default voice, when one was uploaded
    <job id>/out/                one WAV per ok line, results.jsonl (line order), results.zip

A job id (``20250101-120000-1a2b3c4d``: UTC start time + 32 random bits) sorts by age, is safe in a path and a
URL, and is hard to guess, so it doubles as the key to reopen a job. The same id and folder can carry a job whose
lines are synthesised elsewhere (a cluster): only the writer of ``out/`` and ``job.json`` needs the folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_app.audio.post import write_atomic
from tts_app.errors import InputError

logger = logging.getLogger(__name__)
#: ids of damaged jobs already logged by this process
_WARNED_DAMAGED: set[str] = set()

JOBS_DIR = "jobs"
STATE_NAME = "job.json"
INPUT_DIR = "input"
OUT_DIR = "out"
JOB_FILE_NAME = "tasks.jsonl"
AUDIO_ZIP_NAME = "audio.zip"
_JOB_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{8}$")

#: Job statuses. "interrupted": the server stopped (or died) while the job was queued or running; resume it.
#: "damaged": its ``job.json`` cannot be read (empty, truncated, not an object, a value of the wrong type): shown
#: with the reason, its folder and outputs kept, removed like any ended job once old (never resumed or rewritten).
STATUSES = ("queued", "running", "done", "cancelled", "failed", "interrupted", "damaged")
ACTIVE = ("queued", "running")


def new_job_id(now_s: float | None = None) -> str:
    """A fresh job id: UTC time of creation + 8 random hex digits."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    return f"{stamp}-{secrets.token_hex(4)}"


def check_job_id(job_id: str) -> str:
    """``job_id`` if it has the job-id form, else ``InputError`` (never a path: ``../x`` cannot name a folder).

    Raises:
        InputError: not a job id.
    """
    text = (job_id or "").strip()
    if not _JOB_ID.match(text):
        raise InputError(f"{job_id!r} is not a job id; a job id looks like 20250101-120000-1a2b3c4d")
    return text


@dataclass
class JobState:
    """What ``job.json`` holds. Times are ``time.time()`` seconds.

    Attributes:
        job_id: the job's id.
        status: one of ``STATUSES``.
        created_s, updated_s: when the job was created / this state was written.
        started_s, finished_s: when its latest run started / ended (None before).
        input_name: the job file's name as the user uploaded it (for display).
        audio_name, default_voice_name: the uploaded audio ZIP / default voice names, or None.
        settings: the job's own generation settings (use_cache, greedy, seed); the batch-size ceiling is
            the operator's (``--max-batch-size``), never a job's.
        num_lines: non-blank lines (known once validated); num_done: lines with a record.
        num_ok, num_failed, num_cancelled, num_skipped: records by outcome (skipped = kept from an earlier run).
        eta_s: estimated seconds to finish (None when unknown); batch_size: rows of the engine's latest batch.
        error: why the whole job failed (unreadable file, bad ZIP, ...), or None.
        owner: who started it and alone may see it (``tts_app.server.sessions``: a browser cookie's owner key,
            or an API key's ``key_owner``); None: nobody's (a job made before jobs had owners).
        server_id: id of the server process that ran it last (to tell a dead server's jobs).
        warnings: job-level notices (e.g. the file is not UTF-8).
        error_i18n, warnings_i18n: the same messages as ``tts_app.frontend.messages.Notice.to_json`` (None for a
            plain one), from which the page shows them in its language (``localize_record``).
    """

    job_id: str
    status: str = "queued"
    created_s: float = 0.0
    updated_s: float = 0.0
    started_s: float | None = None
    finished_s: float | None = None
    input_name: str = JOB_FILE_NAME
    audio_name: str | None = None
    default_voice_name: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    num_lines: int = 0
    num_done: int = 0
    num_ok: int = 0
    num_failed: int = 0
    num_cancelled: int = 0
    num_skipped: int = 0
    eta_s: float | None = None
    batch_size: int | None = None
    error: str | None = None
    owner: str | None = None
    server_id: str | None = None
    warnings: list[str] = field(default_factory=list)
    error_i18n: dict | None = None
    warnings_i18n: list = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "JobState":
        """The state ``job.json`` holds (unknown keys ignored, missing ones at their defaults).

        Raises:
            ValueError: ``data`` is not an object, has no usable ``job_id``, or a value of the wrong type (the
                message names the field).
        """
        if not isinstance(data, dict):
            raise ValueError(f"it holds a JSON {type(data).__name__}, not an object")
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if not _FIELD_CHECKS[f.name](value):
                raise ValueError(f"{f.name}={str(value)[:40]!r} is not a valid value")
            kwargs[f.name] = value
        if "job_id" not in kwargs:
            raise ValueError("it has no job_id")
        return cls(**kwargs)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


#: field -> does a ``job.json`` value fit it (a wrong type once stopped the server's start in ``JobStore.prune``)
_FIELD_CHECKS = {
    "job_id": lambda v: isinstance(v, str) and bool(_JOB_ID.match(v)), "status": lambda v: v in STATUSES,
    "created_s": _number, "updated_s": _number, "started_s": lambda v: v is None or _number(v),
    "finished_s": lambda v: v is None or _number(v), "input_name": lambda v: isinstance(v, str),
    "audio_name": _text_or_none, "default_voice_name": _text_or_none,
    "settings": lambda v: isinstance(v, dict), "num_lines": _count, "num_done": _count, "num_ok": _count,
    "num_failed": _count, "num_cancelled": _count, "num_skipped": _count,
    "eta_s": lambda v: v is None or _number(v), "batch_size": lambda v: v is None or _count(v),
    "error": _text_or_none, "owner": _text_or_none, "server_id": _text_or_none,
    "warnings": lambda v: isinstance(v, list) and all(isinstance(w, str) for w in v),
    # a message's key and values (``tts_app.frontend.messages.Notice.to_json``) to show it in the page's language
    "error_i18n": lambda v: v is None or isinstance(v, dict),
    "warnings_i18n": lambda v: isinstance(v, list),
}


class JobStore:
    """The job folders under ``root/jobs`` (created on first use).

    Args:
        root: the app's output folder.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root) / JOBS_DIR

    def folder(self, job_id: str) -> Path:
        """The job's folder (it may not exist). Raises ``InputError`` for a malformed id."""
        return self.root / check_job_id(job_id)

    def out_dir(self, job_id: str) -> Path:
        return self.folder(job_id) / OUT_DIR

    def job_file(self, job_id: str) -> Path:
        return self.folder(job_id) / INPUT_DIR / JOB_FILE_NAME

    def audio_zip(self, job_id: str) -> Path | None:
        path = self.folder(job_id) / INPUT_DIR / AUDIO_ZIP_NAME
        return path if path.is_file() else None

    def default_voice(self, job_id: str) -> Path | None:
        found = sorted((self.folder(job_id) / INPUT_DIR).glob("voice.*"))
        return found[0] if found else None

    def create(self, job_file: str | Path, *, audio_zip: str | Path | None = None,
               default_voice: str | Path | None = None, settings: dict[str, Any] | None = None,
               owner: str | None = None, names: dict[str, str | None] | None = None) -> JobState:
        """A new queued job whose inputs are copied into its folder (uploads in a temp folder may vanish; the
        copies let the job resume after a restart).

        Args:
            job_file, audio_zip, default_voice: the uploaded files.
            settings: the job's own generation settings; owner: the browser's opaque id.
            names: display names of the uploads (``input``, ``audio``, ``voice``) when the paths are temp names.

        Raises:
            InputError: the job file is missing.
        """
        job_file = Path(job_file)
        if not job_file.is_file():
            raise InputError(f"job file {job_file.name!r} does not exist")
        names = names or {}
        now = time.time()
        job_id = new_job_id(now)
        folder = self.root / job_id
        (folder / INPUT_DIR).mkdir(parents=True)
        (folder / OUT_DIR).mkdir()
        shutil.copyfile(job_file, folder / INPUT_DIR / JOB_FILE_NAME)
        if audio_zip is not None:
            shutil.copyfile(audio_zip, folder / INPUT_DIR / AUDIO_ZIP_NAME)
        if default_voice is not None:
            suffix = Path(default_voice).suffix.lower() or ".wav"
            shutil.copyfile(default_voice, folder / INPUT_DIR / f"voice{suffix}")
        state = JobState(job_id=job_id, created_s=now, settings=dict(settings or {}), owner=owner,
                         input_name=names.get("input") or job_file.name,
                         audio_name=None if audio_zip is None else (names.get("audio") or Path(audio_zip).name),
                         default_voice_name=None if default_voice is None else (
                             names.get("voice") or Path(default_voice).name))
        self.save(state)
        return state

    def save(self, state: JobState) -> None:
        """Write ``job.json`` atomically (a reader never sees half a file)."""
        state.updated_s = time.time()
        write_atomic(self.folder(state.job_id) / STATE_NAME,
                     json.dumps(state.to_dict(), ensure_ascii=False, indent=1).encode("utf-8"))

    def load(self, job_id: str) -> JobState | None:
        """The job's state; None when there is no such job. A ``job.json`` that cannot be read (empty, truncated,
        not a job's state) gives a "damaged" state naming the problem, timed by the file's (or folder's)
        modification time and owned by nobody, after a logged warning: the job stays listed and prunable, and its
        outputs stay where they are."""
        folder = self.folder(job_id)
        path = folder / STATE_NAME
        data: Any = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            state = JobState.from_dict(data)
            if state.job_id != job_id:
                raise ValueError(f"it names another job, {state.job_id}")
            return state
        except FileNotFoundError:
            if not folder.is_dir():
                return None
            problem = "it is missing"
        except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            problem = str(exc) or type(exc).__name__
        try:
            mtime_s = (path if path.exists() else folder).stat().st_mtime
        except OSError:
            return None
        if job_id not in _WARNED_DAMAGED:  # once per job and process: the page lists jobs every few seconds
            _WARNED_DAMAGED.add(job_id)
            logger.warning("job %s: %s is damaged (%s); its folder is kept and removed when old", job_id, STATE_NAME,
                           problem)
        owner = data.get("owner") if isinstance(data, dict) and isinstance(data.get("owner"), str) else None
        return JobState(job_id=job_id, status="damaged", created_s=mtime_s, updated_s=mtime_s, finished_s=mtime_s,
                        owner=owner,
                        error=f"{STATE_NAME} cannot be read: {problem}; the job's outputs are kept in its folder")

    def list(self, *, owner: str | None = None, limit: int = 50) -> list[JobState]:
        """Jobs newest first (only ``owner``'s when given)."""
        if not self.root.is_dir():
            return []
        out = []
        for folder in sorted(self.root.iterdir(), reverse=True):
            if not _JOB_ID.match(folder.name):
                continue
            state = self.load(folder.name)
            if state is not None and (owner is None or state.owner == owner):
                out.append(state)
                if len(out) >= limit:
                    break
        return out

    def recover(self, server_id: str) -> list[JobState]:
        """Mark jobs another (stopped or crashed) server left queued or running as "interrupted"; returns them."""
        found = []
        for state in self.list(limit=10**9):
            if state.active and state.server_id != server_id:
                state.status = "interrupted"
                state.eta_s = None
                self.save(state)
                found.append(state)
        return found

    def prune(self, max_age_s: float, failed_inputs_max_age_s: float | None = None) -> int:
        """Remove the folders of jobs that ended more than ``max_age_s`` ago, and the uploaded inputs (``input/``)
        of jobs that failed as a whole more than ``failed_inputs_max_age_s`` ago (their records, outputs and error
        stay until ``max_age_s``; None = kept as long); returns how many folders were removed."""
        removed = 0
        now = time.time()
        cutoff = now - max_age_s
        for state in self.list(limit=10**9):
            ended = state.finished_s or state.updated_s
            if state.active or not ended:
                continue
            if ended < cutoff:
                shutil.rmtree(self.folder(state.job_id), ignore_errors=True)
                removed += 1
            elif (state.status == "failed" and failed_inputs_max_age_s is not None
                  and ended < now - failed_inputs_max_age_s):
                shutil.rmtree(self.folder(state.job_id) / INPUT_DIR, ignore_errors=True)
        return removed
