"""The output folder's layout, in one place: every module that writes or serves a file under the output root (or
next to an audio file) asks here for its path or name.

    <output root>/
        single/<owner>/                 SESSIONS_DIR, ``browser_dir``: one owner's (browser cookie or API key) outputs
            <session>/<stem>.<fmt>      ``session_dir``: one tab's single-synthesis outputs (removed when it closes)
            references/<key>.wav        REFERENCES_DIR, ``references_dir``: the owner's cleaned reference clips
            _history/<entry>/           HISTORY_DIR (``tts_app.history``)
        jobs/<job id>/                  JOBS_DIR (``tts_app.jobs.store.JobStore``)
            job.json                    STATE_NAME
            input/tasks.jsonl           INPUT_DIR, JOB_FILE_NAME; input/audio.zip AUDIO_ZIP_NAME; input/voice.<ext>
            out/                        OUT_DIR: a job's out_dir (also ``batch --out-dir``):
                <output_name>.<fmt>     one line's audio, its sidecar and chapter files (below)
                results.jsonl           RESULTS_NAME; .results.journal.jsonl JOURNAL_NAME; results.zip ZIP_NAME
                .reference_audio/       EXTRACTED_AUDIO_DIR: an uploaded audio ZIP, unpacked
        voices/                         VOICES_DIR, ``voices_dir``: the voice library (unless ``--voices-dir``)
        references/                     LEGACY_REFERENCES_DIR: the shared clip folder of earlier versions (never served)

    next to any audio file <stem>.<fmt>: <stem>.json (``metadata_path``), <stem>.srt (``subtitles_path``),
    <stem>.chNN[_title].<fmt> (``chapter_path``)

Names only: no I/O.
"""

from __future__ import annotations

from pathlib import Path

#: the web UI's per-owner output area, under the output root
SESSIONS_DIR = "single"
#: an owner's cleaned reference clips, inside its folder
REFERENCES_DIR = "references"
#: where cleaned clips lay before (shared by everyone, under the output root): refused by the file guard
LEGACY_REFERENCES_DIR = "references"
#: the page's history entries, inside an owner's folder (never a session folder: those are letters and digits)
HISTORY_DIR = "_history"
#: the voice library's default folder, under the output root
VOICES_DIR = "voices"

#: the jobs the server runs, one folder each, under the output root
JOBS_DIR = "jobs"
#: a job folder's state file
STATE_NAME = "job.json"
#: a job folder's inputs (the uploaded JSONL, audio ZIP and default voice)
INPUT_DIR = "input"
#: a job folder's outputs (the job's out_dir)
OUT_DIR = "out"
JOB_FILE_NAME = "tasks.jsonl"
AUDIO_ZIP_NAME = "audio.zip"

#: a job's per-line records, in an out_dir
RESULTS_NAME = "results.jsonl"
#: records a run wrote before they reached results.jsonl (resume reads it), in an out_dir
JOURNAL_NAME = ".results.journal.jsonl"
#: the job's audio, sidecars and results.jsonl as one download, in an out_dir
ZIP_NAME = "results.zip"
#: where an uploaded audio ZIP is unpacked, inside an out_dir
EXTRACTED_AUDIO_DIR = ".reference_audio"


def browser_dir(output_root: Path, owner: str) -> Path:
    """One owner's folder: ``<output root>/single/<owner>``."""
    return Path(output_root) / SESSIONS_DIR / owner


def session_dir(output_root: Path, owner: str, session_hash: str | None) -> Path:
    """One browser session's (tab's) folder inside its owner's: its name is the session id's letters and digits
    (at most 32; "anonymous" when none), never ``REFERENCES_DIR``."""
    safe = "".join(ch for ch in (session_hash or "anonymous") if ch.isalnum())[:32] or "anonymous"
    if safe == REFERENCES_DIR:
        safe = "session-" + safe  # never the browser's clip folder
    return browser_dir(output_root, owner) / safe


def references_dir(output_root: Path, owner: str) -> Path:
    """An owner's cleaned reference clips: ``<output root>/single/<owner>/references``."""
    return browser_dir(output_root, owner) / REFERENCES_DIR


def voices_dir(output_root: Path) -> Path:
    """The voice library's default folder: ``<output root>/voices``."""
    return Path(output_root) / VOICES_DIR


def metadata_path(audio_path: str | Path) -> Path:
    """Where the sidecar of ``audio_path`` goes: same folder, same stem, ``.json``."""
    return Path(audio_path).with_suffix(".json")


def subtitles_path(audio_path: str | Path) -> Path:
    """Where the SubRip subtitles of ``audio_path`` go (the page's downloads): same folder, same stem, ``.srt``."""
    return Path(audio_path).with_suffix(".srt")


def chapter_path(audio_path: str | Path, index: int, title: str | None) -> Path:
    """Where chapter ``index`` (0-based) of ``audio_path`` goes: ``<stem>.ch01_<first words of its title>.<ext>``
    (``tts_app.longform.name_from_text``)."""
    from tts_app.longform import name_from_text

    audio_path = Path(audio_path)
    label = f"_{name_from_text(title)}" if title else ""
    return audio_path.with_name(f"{audio_path.stem}.ch{index + 1:02d}{label}{audio_path.suffix}")
