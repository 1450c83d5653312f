"""JSONL job runner: streaming submission to the engine, per-line atomic outputs, ``results.jsonl``, resume.

Flow (one job)::

    validate every line (streaming)  ->  for each line: reference audio (the runtime's ReferencePreparer, shared
    with every other caller) -> engine.submit (at most K lines in flight, so the engine's batches mix lines)  ->  as
    each line completes: WAV and its metadata sidecar written atomically (``tts_app.outputs.save_outputs``), one
    record appended to results.jsonl (append + flush + fsync)

A failing line becomes a ``failed`` record and the job goes on. ``resume=True`` skips lines whose latest record is
``ok`` and whose audio file still decodes. Output files never leave ``out_dir``.

``results.jsonl`` record fields: ``line`` (1-based), ``output_name``, ``status`` ("ok" | "failed" | "skipped"
= cancelled before it finished), ``error`` (message or null), ``audio_path`` and ``metadata_path`` (the sidecar
JSON, see ``tts_app.outputs``; relative to ``out_dir``, or null), ``duration_s``, ``num_segments``, ``elapsed_s``
(wall seconds from submission to completion), ``warnings``.
When the job file changes between runs a line can have more than one record; the last one counts.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tts_app.audio.post import write_atomic
from tts_app.errors import InputError, RequestCancelledError, TTSAppError
from tts_app.jobs.schema import (AudioSources, InvalidLine, JobConfig, JobLine, ValidationReport,
                                 check_default_voice, extract_audio_zip, iter_job, make_sources, validate_lines,
                                 zip_audio_members)
from tts_app.request import Priority, RequestStatus, SynthesisParams, SynthesisRequest

if TYPE_CHECKING:
    from tts_app.adapters.base import ModelFacts
    from tts_app.audio.preparer import PreparedReference
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

RESULTS_NAME = "results.jsonl"
ZIP_NAME = "results.zip"
EXTRACTED_AUDIO_DIR = ".reference_audio"  # where an uploaded audio ZIP is unpacked, inside out_dir
_POLL_S = 0.2  # how often a waiting runner looks at cancel_event

ProgressFn = Callable[[int, int, dict], None]


@dataclass
class JobSummary:
    """Outcome of ``run_job``.

    Attributes:
        num_lines: non-blank lines in the job file.
        num_ok: lines synthesised in this run.
        num_failed: lines that failed (invalid, reference audio unusable, engine failure).
        num_skipped: lines already done by an earlier run (``resume``).
        num_cancelled: lines not finished because ``cancel_event`` was set.
        failed: ``(line, error)`` of every failed line, in completion order.
        elapsed_s: wall seconds of the whole job.
    """

    jsonl_path: Path
    out_dir: Path
    results_path: Path
    num_lines: int = 0
    num_ok: int = 0
    num_failed: int = 0
    num_skipped: int = 0
    num_cancelled: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def all_ok(self) -> bool:
        """True when every line has audio (now or from an earlier run)."""
        return self.num_failed == 0 and self.num_cancelled == 0

    def format_text(self) -> str:
        head = (f"{self.num_lines} lines: {self.num_ok} ok, {self.num_failed} failed, {self.num_skipped} skipped "
                f"(already done)" + (f", {self.num_cancelled} cancelled" if self.num_cancelled else "")
                + f" in {self.elapsed_s:.1f} s; results in {self.results_path}")
        return "\n".join([head] + [f"  line {n}: {err}" for n, err in self.failed])


# --------------------------------------------------------------------------------------------------- results file


class ResultsWriter:
    """Appends one JSON record per line to ``results.jsonl``: write + flush + fsync each, so a killed job loses
    at most the record being written. Opening it rewrites the file (atomically) with ``keep`` records only,
    which also drops a half-written last line left by a kill."""

    def __init__(self, path: Path, keep: list[dict]):
        self.path = path
        write_atomic(path, "".join(_dumps(r) for r in keep).encode("utf-8"))
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: dict) -> None:
        with self._lock:
            self._fh.write(_dumps(record))
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


def read_results(out_dir: str | Path) -> dict[int, dict]:
    """Latest record per line from ``out_dir/results.jsonl`` (empty when missing). Lines that are not valid JSON
    (a record cut short by a kill) are ignored."""
    path = Path(out_dir) / RESULTS_NAME
    records: dict[int, dict] = {}
    if not path.is_file():
        return records
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("line"), int):
                records[record["line"]] = record
    return records


def audio_decodes(path: Path) -> bool:
    """True when ``path`` is a complete audio file: soundfile opens it, it has samples, its last block decodes,
    and for WAV the RIFF size in the header matches the file size (libsndfile silently accepts a truncated WAV
    as a shorter one, so a cut file would otherwise pass)."""
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
        return False


def _resumable(out_dir: Path) -> dict[int, dict]:
    """Records of lines an earlier run finished: status ok and the audio file still decodes."""
    kept = {}
    for line, record in read_results(out_dir).items():
        audio = record.get("audio_path")
        if record.get("status") == "ok" and isinstance(audio, str) and "/" not in audio and \
                audio_decodes(out_dir / audio):
            kept[line] = record
    return kept


def _remove_stale_temp_files(out_dir: Path) -> None:
    """Delete temporary files a killed run left behind (``write_atomic`` names them ``.<name>.<random>.tmp``)."""
    for path in out_dir.iterdir():
        if path.name.startswith(".") and path.name.endswith(".tmp") and path.is_file():
            path.unlink(missing_ok=True)


def make_results_zip(out_dir: str | Path) -> Path:
    """Bundle ``results.jsonl`` and the audio and metadata sidecar of every ok line into ``out_dir/results.zip``
    (written atomically).

    Returns:
        Path of the ZIP.

    Raises:
        InputError: ``out_dir`` has no ``results.jsonl``.
    """
    out_dir = Path(out_dir)
    results = out_dir / RESULTS_NAME
    if not results.is_file():
        raise InputError(f"{str(out_dir)!r} has no {RESULTS_NAME}; run the job first")
    target = out_dir / ZIP_NAME
    fd, tmp = tempfile.mkstemp(prefix=f".{ZIP_NAME}.", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            zf.write(results, RESULTS_NAME, compress_type=zipfile.ZIP_DEFLATED)
            for record in sorted(read_results(out_dir).values(), key=lambda r: r["line"]):
                audio = record.get("audio_path")
                if record.get("status") == "ok" and isinstance(audio, str) and (out_dir / audio).is_file():
                    zf.write(out_dir / audio, audio, compress_type=zipfile.ZIP_STORED)  # PCM barely compresses
                    sidecar = record.get("metadata_path")
                    if isinstance(sidecar, str) and (out_dir / sidecar).is_file():
                        zf.write(out_dir / sidecar, sidecar, compress_type=zipfile.ZIP_DEFLATED)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


# --------------------------------------------------------------------------------------------------- audio sources


@contextlib.contextmanager
def _audio_root(audio_dir: str | Path | None, scratch_dir: Path, config: JobConfig) -> Iterator[Path | None]:
    """The folder to look for reference audio in: ``audio_dir`` itself, or a ZIP unpacked into ``scratch_dir``."""
    if audio_dir is None:
        yield None
        return
    audio_dir = Path(audio_dir)
    if audio_dir.is_dir():
        yield audio_dir
        return
    root = extract_audio_zip(_zip_file(audio_dir), scratch_dir, max_total_bytes=config.max_zip_bytes,
                             max_members=config.max_zip_members)
    try:
        yield root
    finally:  # only needed while the job runs; a resumed job unpacks it again
        shutil.rmtree(root, ignore_errors=True)


def _zip_file(audio_dir: str | Path) -> Path:
    """``audio_dir`` when it is a ZIP file, else an ``InputError`` saying what it is instead."""
    path = Path(audio_dir)
    if not (path.is_file() and zipfile.is_zipfile(path)):
        raise InputError(f"audio folder {str(path)!r} is neither a folder nor a ZIP file")
    return path


@contextlib.contextmanager
def _validation_sources(jsonl_path: str | Path, audio_dir: str | Path | None, config: JobConfig
                        ) -> Iterator[AudioSources]:
    """``AudioSources`` for checking a job without running it: an audio ZIP is searched by member name (nothing
    unpacked), an audio folder directly."""
    if audio_dir is not None and Path(audio_dir).is_file():
        members = zip_audio_members(_zip_file(audio_dir), max_total_bytes=config.max_zip_bytes,
                                    max_members=config.max_zip_members)
        yield AudioSources([Path(jsonl_path).parent], [Path(r) for r in config.extra_allowed_roots],
                           zip_members=members, zip_path=Path(audio_dir))
        return
    with _audio_root(audio_dir, Path("unused"), config) as root:
        yield make_sources(jsonl_path, root, config)


def validate_job(jsonl_path: str | Path, *, audio_dir: str | Path | None = None,
                 default_voice: str | Path | None = None, config: JobConfig = JobConfig()) -> ValidationReport:
    """Check a job file without loading any model: JSON, fields, parameter values, output names (safe, unique)
    and that every reference audio file exists inside the allowed folders.

    Args:
        jsonl_path: the job file.
        audio_dir: folder or ZIP of reference audio (a ZIP is only listed, not unpacked).
        default_voice: reference audio used by lines without ``prompt_audio``.

    Returns:
        ``ValidationReport``; ``report.as_table()`` gives ``[line, status, message]`` rows.

    Raises:
        InputError: the job file cannot be read or decoded, the audio folder/ZIP is unusable or unsafe, or the
            default voice file does not exist.
    """
    check_default_voice(default_voice)
    with _validation_sources(jsonl_path, audio_dir, config) as sources:
        return validate_lines(jsonl_path, sources, has_default_voice=default_voice is not None, config=config)


def _already_done(item: JobLine | InvalidLine, kept: dict[int, dict]) -> bool:
    """True when an earlier run finished this line under the same output name (``resume``)."""
    previous = kept.get(item.line_number)
    return previous is not None and item.output_name is not None and \
        previous.get("output_name") == item.output_name


def count_lines_to_run(jsonl_path: str | Path, out_dir: str | Path, *, audio_dir: str | Path | None = None,
                       default_voice: str | Path | None = None, resume: bool = False,
                       config: JobConfig = JobConfig()) -> int:
    """How many lines of a job would go to the model: valid lines, less those an earlier run finished when
    ``resume`` (same rule as ``run_job``). Loads no model and writes nothing; when it returns 0, ``run_job`` can
    be called with ``runtime=None``.

    Raises:
        InputError: as ``validate_job``.
    """
    check_default_voice(default_voice)
    out_dir = Path(out_dir)
    kept = _resumable(out_dir) if resume and out_dir.is_dir() else {}
    with _validation_sources(jsonl_path, audio_dir, config) as sources:
        return sum(1 for item in iter_job(jsonl_path, sources, has_default_voice=default_voice is not None,
                                          config=config)
                   if isinstance(item, JobLine) and not _already_done(item, kept))


# --------------------------------------------------------------------------------------------------- running


@dataclass
class _Pending:
    line: JobLine
    handle: Any  # tts_app.engine.RequestHandle
    started_s: float
    warnings: list[str]
    request: SynthesisRequest
    reference: PreparedReference | None


class _JobRun:
    """State of one running job (kept out of ``run_job`` so each step reads as a short method)."""

    def __init__(self, runtime: Runtime, out_dir: Path, writer: ResultsWriter, summary: JobSummary,
                 progress: ProgressFn | None, jsonl_path: Path):
        self.runtime = runtime
        self.out_dir = out_dir
        self.jsonl_path = jsonl_path
        self.writer = writer
        self.summary = summary
        self.progress = progress
        self.done = 0
        self.in_flight: dict[cf.Future, _Pending] = {}

    def record(self, line: int, output_name: str | None, status: str, *, error: str | None = None,
               audio_path: str | None = None, metadata_path: str | None = None, duration_s: float | None = None,
               num_segments: int | None = None, elapsed_s: float = 0.0,
               warnings: list[str] | tuple[str, ...] = ()) -> None:
        self.writer.append({"line": line, "output_name": output_name, "status": status, "error": error,
                            "audio_path": audio_path, "metadata_path": metadata_path, "duration_s": duration_s,
                            "num_segments": num_segments, "elapsed_s": round(elapsed_s, 3),
                            "warnings": list(warnings)})
        if status == "ok":
            self.summary.num_ok += 1
        elif status == "failed":
            self.summary.num_failed += 1
            self.summary.failed.append((line, error or "failed"))
        else:
            self.summary.num_cancelled += 1
        self.tick({"line": line, "output_name": output_name, "status": status, "error": error})

    def tick(self, info: dict) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.summary.num_lines, info)

    def finish(self, future: cf.Future) -> None:
        """Turn one completed engine future into an output file and a results record."""
        pending = self.in_flight.pop(future)
        line, elapsed = pending.line, time.monotonic() - pending.started_s
        try:
            result = future.result()
        except (cf.CancelledError, RequestCancelledError):
            self.record(line.line_number, line.output_name, "skipped", error="cancelled", elapsed_s=elapsed)
            return
        except TTSAppError as exc:
            self.record(line.line_number, line.output_name, "failed", error=str(exc), elapsed_s=elapsed)
            return
        except Exception as exc:  # an engine bug must not stop the other lines; logged with its traceback
            logger.exception("job line %d (request %s) raised", line.line_number,
                             getattr(pending.handle, "request_id", "?"))
            self.record(line.line_number, line.output_name, "failed", error=f"internal error: {exc!r}",
                        elapsed_s=elapsed)
            return
        reference_warnings = pending.reference.warnings if pending.reference is not None else []
        warnings = list(dict.fromkeys(pending.warnings + reference_warnings + list(result.warnings or [])))
        if result.status is RequestStatus.CANCELLED:
            self.record(line.line_number, line.output_name, "skipped", error=result.error or "cancelled",
                        elapsed_s=elapsed, warnings=warnings)
        elif not result.ok or len(result.audio) == 0:
            self.record(line.line_number, line.output_name, "failed", error=result.error or "no audio produced",
                        elapsed_s=elapsed, warnings=warnings)
        else:
            from tts_app.outputs import output_metadata, save_outputs

            job = {"job": {"file": self.jsonl_path.name, "line": line.line_number, "output_name": line.output_name}}
            metadata = output_metadata(self.runtime, pending.request, result, entry_point="job",
                                       reference=pending.reference, warnings=pending.warnings, extra=job)
            files = save_outputs(self.out_dir / f"{line.output_name}.wav", result, metadata)
            self.record(line.line_number, line.output_name, "ok", audio_path=files.audio.name,
                        metadata_path=files.metadata.name, duration_s=round(result.duration_s, 3),
                        num_segments=len(result.segments), elapsed_s=elapsed, warnings=warnings)

    def harvest(self) -> None:
        """Write out every line that has already finished, without waiting (outputs appear as lines complete)."""
        for future in [f for f in self.in_flight if f.done()]:
            self.finish(future)

    def wait(self, cancel_event: threading.Event | None, *, until_below: int) -> None:
        """Collect finished lines until fewer than ``until_below`` are in flight (or cancel is set)."""
        while len(self.in_flight) >= until_below and self.in_flight:
            if cancel_event is not None and cancel_event.is_set():
                return
            done, _ = cf.wait(list(self.in_flight), timeout=_POLL_S, return_when=cf.FIRST_COMPLETED)
            for future in done:
                self.finish(future)

    def cancel_all(self, grace_s: float = 30.0) -> None:
        """Cancel every line in flight and record how each ended."""
        for pending in self.in_flight.values():
            pending.handle.cancel()
        done, not_done = cf.wait(list(self.in_flight), timeout=grace_s)
        for future in done:
            self.finish(future)
        for future in not_done:
            pending = self.in_flight.pop(future)
            self.record(pending.line.line_number, pending.line.output_name, "skipped", error="cancelled",
                        elapsed_s=time.monotonic() - pending.started_s)


def run_job(jsonl_path: str | Path, out_dir: str | Path, runtime: Runtime | None, *, audio_dir: str | Path | None = None,
            resume: bool = False, progress: ProgressFn | None = None,
            cancel_event: threading.Event | None = None, params: SynthesisParams | None = None,
            default_voice: str | Path | None = None, default_voice_text: str | None = None,
            config: JobConfig = JobConfig()) -> JobSummary:
    """Run a JSONL job through ``runtime``: one ``<output_name>.wav`` and its sidecar ``<output_name>.json`` per line
    plus ``results.jsonl`` in ``out_dir``.

    Every line is validated (streaming) before any model work. Lines are then streamed to the engine with at most
    ``config.max_in_flight_lines`` (default 4 x the engine's max batch size) in flight, so the engine batches
    segments of several lines together while a 10 000-line job never holds more than that many references.

    Args:
        jsonl_path: the job file (see ``tts_app.jobs.schema`` for the fields).
        out_dir: output folder (created). Nothing is written outside it.
        runtime: a ``tts_app.runtime.Runtime`` (its engine runs the lines, its reference preparer cleans their
            references); None when no line needs the model (every line invalid or, with ``resume``, already done;
            see ``count_lines_to_run``).
        audio_dir: folder or ZIP of reference audio; a ZIP is unpacked (safely) into ``out_dir/.reference_audio``
            for the duration of the job.
        resume: skip lines whose latest record is ok and whose audio decodes; otherwise results.jsonl starts over.
        progress: called as ``progress(done, total, info)`` after every line; ``info`` has ``line``,
            ``output_name``, ``status`` ("ok" | "failed" | "skipped") and ``error``.
        cancel_event: when set, no more lines are submitted, lines in flight are cancelled and recorded as
            "skipped"; resume later with ``resume=True``.
        params: the job's default ``SynthesisParams`` (per-line fields override them); priority is always JOB.
        default_voice, default_voice_text: reference audio (and its transcript) for lines without prompt_audio.
        config: runner settings.

    Returns:
        ``JobSummary`` (counts, failed lines, elapsed time).

    Raises:
        InputError: job file unreadable/undecodable, audio folder/ZIP unusable or unsafe, default voice missing.
        ValueError: ``runtime`` is None but a line needs the model.
        ReferenceAudioError: the default voice cannot be used.
        OSError: an output cannot be written (disk full, permissions); finished lines are kept for ``resume``.
    """
    started = time.monotonic()
    jsonl_path, out_dir = Path(jsonl_path), Path(out_dir)
    params = params if params is not None else SynthesisParams()
    default_voice_path = check_default_voice(default_voice)
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_files(out_dir)
    summary = JobSummary(jsonl_path=jsonl_path, out_dir=out_dir, results_path=out_dir / RESULTS_NAME)

    with _audio_root(audio_dir, out_dir / EXTRACTED_AUDIO_DIR, config) as root:
        sources = make_sources(jsonl_path, root, config)
        report = validate_lines(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                config=config)
        if report.num_lines == 0:
            raise InputError(f"job file {str(jsonl_path)!r} has no lines; write one JSON object per line")
        summary.num_lines = report.num_lines
        summary.warnings.extend(r.message for r in report.rows if r.line == 0)

        default_reference = None
        if default_voice_path is not None and runtime is not None:
            default_reference = runtime.references.prepare(default_voice_path, reference_text=default_voice_text)

        kept = _resumable(out_dir) if resume else {}
        writer = ResultsWriter(summary.results_path, [kept[n] for n in sorted(kept)])
        run = _JobRun(runtime, out_dir, writer, summary, progress, jsonl_path)
        max_in_flight = config.max_in_flight_lines or (
            4 * runtime.engine.stats().max_batch_size if runtime is not None else 1)
        try:
            for item in iter_job(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                 config=config, encoding=report.encoding):
                if cancel_event is not None and cancel_event.is_set():
                    break
                if _already_done(item, kept):
                    # done by an earlier run (even if, say, its reference file has since been removed)
                    summary.num_skipped += 1
                    run.tick({"line": item.line_number, "output_name": item.output_name, "status": "skipped",
                              "error": None})
                    continue
                if isinstance(item, InvalidLine):
                    run.record(item.line_number, item.output_name, "failed", error=item.message,
                               warnings=item.warnings)
                    continue
                if runtime is None:
                    raise ValueError(f"line {item.line_number} needs the model but run_job was given runtime=None")
                _submit_line(run, item, params, default_reference, default_voice_text)
                run.harvest()
                run.wait(cancel_event, until_below=max_in_flight)
            if cancel_event is not None and cancel_event.is_set():
                run.cancel_all()
            else:
                run.wait(cancel_event, until_below=1)
                if run.in_flight:  # cancelled while draining
                    run.cancel_all()
        finally:
            if run.in_flight:  # an exception (disk full, Ctrl-C): stop the engine work of this job
                for pending in run.in_flight.values():
                    pending.handle.cancel()
            writer.close()
    summary.num_cancelled = summary.num_lines - summary.num_ok - summary.num_failed - summary.num_skipped
    summary.elapsed_s = time.monotonic() - started
    return summary


def _unsupported_knobs(facts: ModelFacts, line: JobLine) -> list[str]:
    """Warnings for per-line knobs the loaded model does not have (ignored, not an error), with the reason
    (``GenerationDefaults.sources``)."""
    defaults = facts.generation_defaults
    return [f"{name} ignored: the {facts.family} model has no such setting ({defaults.sources.get(name, 'absent')})"
            for name in ("greedy", "temperature", "top_p", "top_k", "cfg_scale")
            if name in line.params and getattr(defaults, name) is None]


def _submit_line(run: _JobRun, line: JobLine, params: SynthesisParams, default_reference: PreparedReference | None,
                 default_voice_text: str | None) -> None:
    """Reference audio + request for one valid line, submitted to the engine (or a failed record)."""
    started = time.monotonic()
    try:
        line_params = line.synthesis_params(params)
        if line.prompt_audio is None:
            reference = default_reference
            reference_text = line.prompt_text or (default_reference.text if default_reference else default_voice_text)
        else:
            reference = run.runtime.references.prepare(line.prompt_audio, reference_text=line.prompt_text)
            reference_text = reference.text  # shortened to the kept sentences, or None, when the clip was cropped
        warnings = list(line.warnings) + _unsupported_knobs(run.runtime.engine.facts, line)
        request = SynthesisRequest(text=line.input_text, reference_audio=reference.audio if reference else None,
                                   reference_text=reference_text, params=line_params, priority=Priority.JOB)
        handle = run.runtime.engine.submit(request)
    except TTSAppError as exc:
        run.record(line.line_number, line.output_name, "failed", error=exc.args[0] if exc.args else str(exc),
                   elapsed_s=time.monotonic() - started, warnings=line.warnings)
        return
    except Exception as exc:  # e.g. a decoder bug on one odd file: logged, recorded, the job goes on
        logger.exception("job line %d: preparing the request failed", line.line_number)
        run.record(line.line_number, line.output_name, "failed", error=f"internal error: {exc!r}",
                   elapsed_s=time.monotonic() - started, warnings=line.warnings)
        return
    run.in_flight[handle.future] = _Pending(line, handle, started, warnings, request, reference)
