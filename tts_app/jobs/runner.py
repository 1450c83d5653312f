"""JSONL job runner: streaming submission to an executor, per-line atomic outputs, ``results.jsonl``, resume.

Flow (one job)::

    validate every line (streaming)  ->  for each line, in file order: writer.expect(line), then
    executor.submit(line) (at most K lines in flight, so an engine's batches mix lines)  ->  as each line
    completes: WAV and its metadata sidecar written atomically (``tts_app.outputs.save_outputs``), its record put
    to the ``ResultsWriter``

Every non-blank line of the job file ends with exactly one record in ``results.jsonl``, in line order (see
``tts_app.jobs.results``): "ok", "failed" (invalid line, unusable reference, engine failure) or "cancelled"
(``cancel_event`` was set before it finished, including the lines never submitted). A failing line never stops the
job. ``resume=True`` keeps the records of lines whose earlier record is ``ok`` and whose audio file still decodes,
and runs the rest. Output files never leave ``out_dir``.

This module is THE writer: validation, resume, records and files happen here whatever synthesises the lines.
Where lines run is a ``tts_app.jobs.executor.LineExecutor``: ``LocalExecutor`` (this process's engine, the
default) or ``tts_app.jobs.cluster.RayExecutor`` (one engine per Ray worker).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from tts_app.errors import InputError, TTSAppError
from tts_app.jobs.messages import Notice
from tts_app.jobs.results import (ResultsWriter, audio_decodes, line_record,
                                  make_results_zip, read_results, remove_stale_temp_files, resumable, take_fields)
from tts_app.jobs.executor import AsrSetting, JobContext, LineExecutor, LineOutcome, LocalExecutor
from tts_app.jobs.safety import AudioSources, extract_audio_zip, zip_audio_members
from tts_app.jobs.schema import (InvalidLine, JobConfig, JobLine, ValidationReport, check_default_voice, iter_job,
                                 make_sources, validate_lines)
from tts_app.output_layout import EXTRACTED_AUDIO_DIR, RESULTS_NAME
from tts_app.request import SynthesisParams

if TYPE_CHECKING:
    from tts_app.audio.transcribe import Transcriber
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

__all__ = ["JobSummary", "audio_decodes", "count_lines_to_run", "make_results_zip",
           "read_results", "run_job", "validate_job"]

_POLL_S = 0.2  # how often a waiting runner looks at cancel_event
CANCELLED_BEFORE_START = Notice("job_cancelled_before_start")  # "cancelled before it ran"

ProgressFn = Callable[[int, int, dict], None]


@dataclass
class JobSummary:
    """Outcome of ``run_job``.

    Attributes:
        num_lines: non-blank lines in the job file (= records in results.jsonl).
        num_ok: lines synthesised in this run.
        num_failed: lines that failed (invalid, reference audio unusable, engine failure).
        num_skipped: lines already done by an earlier run (``resume``); their records are kept.
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

    def format_text(self, lang: str = "en") -> str:
        """The summary line plus one line per failed line, in ``lang`` ("en" or "zh")."""
        cancelled = Notice("job_summary_cancelled", count=self.num_cancelled) if self.num_cancelled else ""
        head = Notice("job_summary", num_lines=self.num_lines, num_ok=self.num_ok, num_failed=self.num_failed,
                      num_skipped=self.num_skipped, cancelled=cancelled, elapsed_s=self.elapsed_s,
                      path=str(self.results_path))
        rows = [Notice("job_failed_line", line=n, message=err) for n, err in self.failed]
        return "\n".join(message.render(lang) for message in [head, *rows])


# --------------------------------------------------------------------------------------------------- audio sources


@contextlib.contextmanager
def _audio_root(audio_dir: str | Path | None, scratch_dir: Path, config: JobConfig,
                only: frozenset[str] | None = None) -> Iterator[Path | None]:
    """The folder to look for reference audio in: ``audio_dir`` itself, or a ZIP unpacked into ``scratch_dir``
    (only the members in ``only`` when given: those the job's lines name)."""
    if audio_dir is None:
        yield None
        return
    audio_dir = Path(audio_dir)
    if audio_dir.is_dir():
        yield audio_dir
        return
    root = extract_audio_zip(_zip_file(audio_dir), scratch_dir, max_total_bytes=config.max_zip_bytes,
                             max_members=config.max_zip_members, max_ratio=config.max_zip_ratio, only=only)
    try:
        yield root
    finally:  # only needed while the job runs; a resumed job unpacks it again
        shutil.rmtree(root, ignore_errors=True)


def _zip_file(audio_dir: str | Path) -> Path:
    """``audio_dir`` when it is a ZIP file, else an ``InputError`` saying what it is instead."""
    path = Path(audio_dir)
    if not (path.is_file() and zipfile.is_zipfile(path)):
        raise InputError(Notice("job_audio_dir_bad", name=path.name))
    return path


@contextlib.contextmanager
def _validation_sources(jsonl_path: str | Path, audio_dir: str | Path | None, config: JobConfig
                        ) -> Iterator[AudioSources]:
    """``AudioSources`` for checking a job without running it: an audio ZIP is searched by member name (nothing
    unpacked), an audio folder directly."""
    if audio_dir is not None and Path(audio_dir).is_file():
        members = zip_audio_members(_zip_file(audio_dir), max_total_bytes=config.max_zip_bytes,
                                    max_members=config.max_zip_members, max_ratio=config.max_zip_ratio)
        with AudioSources([Path(jsonl_path).parent], [Path(r) for r in config.extra_allowed_roots],
                          zip_members=members, zip_path=Path(audio_dir), voices=config.voice_library(),
                          root_labels={Path(jsonl_path).parent: Notice("job_root_job_folder")}) as sources:
            yield sources
        return
    with _audio_root(audio_dir, Path("unused"), config) as root:
        yield make_sources(jsonl_path, root, config)


def model_line_checks(facts, name: str):
    """The loaded model's checks of a valid job line, for ``validate_job(check_line=...)``: what the engine would
    refuse when the line runs (emotion control on a family without it, emotion from text without an emotion
    model: ``tts_app.engine.core.check_emotion_support``, the same rule and words) becomes an error, and a
    dialogue with more speakers than the family's own dialogue prompt takes gets the engine's warning.

    Args:
        facts: the loaded model's ``ModelFacts``; name: its display name.

    Returns:
        ``check(line)`` -> ``[(status, message)]``.
    """
    from tts_app.engine.core import check_emotion_support

    def check(line: JobLine) -> list[tuple[str, str]]:
        problems = []
        if line.emotion is not None:
            try:
                check_emotion_support(facts, name, from_text=line.emotion.from_text)
            except InputError as exc:
                problems.append(("error", str(exc)))
        speakers = len(getattr(line.script, "speakers", ()) or ())
        if line.script is not None and facts.max_dialogue_speakers and speakers > facts.max_dialogue_speakers:
            problems.append(("warning", f"{name}'s dialogue prompt takes at most {facts.max_dialogue_speakers} "
                                        f"speakers; with {speakers} each turn is synthesised on its own with its "
                                        "speaker's voice"))
        return problems

    return check


def _zip_members_used(jsonl_path: Path, audio_dir: str | Path | None, has_default_voice: bool,
                      config: JobConfig) -> frozenset[str] | None:
    """The members of an audio ZIP the job's lines name (read from the ZIP's listing, nothing unpacked), or None
    when ``audio_dir`` is not a ZIP file."""
    if audio_dir is None or not Path(audio_dir).is_file():
        return None
    with _validation_sources(jsonl_path, audio_dir, config) as sources:
        for _ in iter_job(jsonl_path, sources, has_default_voice=has_default_voice, config=config):
            pass
        return frozenset(sources.zip_used)


def validate_job(jsonl_path: str | Path, *, audio_dir: str | Path | None = None,
                 default_voice: str | Path | None = None, config: JobConfig = JobConfig(),
                 check_line=None) -> ValidationReport:
    """Check a job file without loading any model: JSON, fields, parameter values, output names (safe, unique)
    and that every reference audio file exists inside the allowed folders; with ``check_line``
    (``model_line_checks``), also what the loaded model would refuse.

    Args:
        jsonl_path: the job file.
        audio_dir: folder or ZIP of reference audio (a ZIP is only listed, not unpacked).
        default_voice: reference audio used by lines without ``prompt_audio``.
        check_line: per-line model checks (``validate_lines``), or None.

    Returns:
        ``ValidationReport``; ``report.as_table()`` gives ``[line, status, message]`` rows.

    Raises:
        InputError: the job file cannot be read or decoded, the audio folder/ZIP is unusable or unsafe, or the
            default voice file does not exist.
    """
    check_default_voice(default_voice)
    with _validation_sources(jsonl_path, audio_dir, config) as sources:
        return validate_lines(jsonl_path, sources, has_default_voice=default_voice is not None, config=config,
                              check_line=check_line)


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
    kept = resumable(out_dir) if resume and out_dir.is_dir() else {}
    with _validation_sources(jsonl_path, audio_dir, config) as sources:
        return sum(1 for item in iter_job(jsonl_path, sources, has_default_voice=default_voice is not None,
                                          config=config)
                   if isinstance(item, JobLine) and not _already_done(item, kept))


# --------------------------------------------------------------------------------------------------- running


class _JobRun:
    """State of one running job: the writing side (records, outputs, progress) fed by a ``LineExecutor``."""

    def __init__(self, out_dir: Path, writer: ResultsWriter, summary: JobSummary, progress: ProgressFn | None, *,
                 audio_format: str = "wav"):
        self.out_dir = out_dir
        self.audio_format = audio_format  # JobConfig.audio_format: the extension (and format) of every ok line
        self.writer = writer
        self.summary = summary
        self.progress = progress
        self.done = 0

    def record(self, line: int, output_name: str | None, status: str, *, error: str | None = None,
               audio_path: str | None = None, metadata_path: str | None = None, duration_s: float | None = None,
               num_segments: int | None = None, elapsed_s: float = 0.0,
               warnings: list[str] | tuple[str, ...] = (), request_id: str | None = None,
               finish_reason: str | None = None, quality: dict | None = None) -> None:
        self.writer.put(line_record(line, output_name, status, error=error, audio_path=audio_path,
                                    metadata_path=metadata_path, duration_s=duration_s, num_segments=num_segments,
                                    elapsed_s=elapsed_s, warnings=warnings, request_id=request_id,
                                    finish_reason=finish_reason, quality=quality))
        if status == "ok":
            self.summary.num_ok += 1
        elif status == "failed":
            self.summary.num_failed += 1
            self.summary.failed.append((line, error or Notice("job_failed")))
        else:
            self.summary.num_cancelled += 1
        self.tick({"line": line, "output_name": output_name, "status": status, "error": error})

    def keep(self, record: dict) -> None:
        """An earlier run's record for a line already done (``resume``)."""
        self.writer.put(record)
        self.summary.num_skipped += 1
        self.tick({"line": record["line"], "output_name": record.get("output_name"), "status": "skipped",
                   "error": None})

    def tick(self, info: dict) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.summary.num_lines, info)

    def write(self, outcome: LineOutcome) -> None:
        """One line's end, wherever it ran: an ok line's WAV and sidecar written atomically, then its record."""
        if outcome.status != "ok" or outcome.result is None or outcome.metadata is None:
            self.record(outcome.line_number, outcome.output_name, outcome.status, error=outcome.error,
                        elapsed_s=outcome.elapsed_s, warnings=outcome.warnings, request_id=outcome.request_id,
                        finish_reason=outcome.finish_reason)
            return
        from tts_app.outputs import save_outputs

        result = outcome.result
        fmt = outcome.audio_format or self.audio_format  # the line's ``format`` field, else the job's
        try:
            files = save_outputs(self.out_dir / f"{outcome.output_name}.{fmt}", result, outcome.metadata)
        except OSError as exc:  # disk full, quota, permissions: this line fails in words, the job goes on
            logger.warning("line %d: its audio could not be written: %s", outcome.line_number, exc)
            self.record(outcome.line_number, outcome.output_name, "failed",
                        error=Notice("job_write_failed", name=f"{outcome.output_name}.{fmt}",
                                     reason=exc.strerror or str(exc)),
                        elapsed_s=outcome.elapsed_s, warnings=outcome.warnings, request_id=outcome.request_id)
            return
        self.record(outcome.line_number, outcome.output_name, "ok", audio_path=files.audio.name,
                    metadata_path=files.metadata.name, duration_s=round(result.duration_s, 3),
                    num_segments=len(result.segments), elapsed_s=outcome.elapsed_s, warnings=outcome.warnings,
                    request_id=outcome.request_id, quality=take_fields(result.segments))
        from tts_app import metrics

        # a line's audio is first available when its file is written: its time to first audio is its wall time
        metrics.observe_synthesis("job", wall_s=outcome.elapsed_s, audio_s=result.duration_s,
                                  first_audio_s=outcome.elapsed_s)

    def harvest(self, executor: LineExecutor) -> None:
        """Write out every line that has already finished, without waiting (outputs appear as lines complete)."""
        for outcome in executor.poll(0):
            self.write(outcome)

    def wait(self, executor: LineExecutor, cancel_event: threading.Event | None, *, until_below: int) -> None:
        """Collect finished lines until fewer than ``until_below`` are in flight (or cancel is set)."""
        while executor.num_in_flight >= until_below and executor.num_in_flight:
            if cancel_event is not None and cancel_event.is_set():
                return
            for outcome in executor.poll(_POLL_S):
                self.write(outcome)

    def cancel_all(self, executor: LineExecutor, grace_s: float = 30.0) -> None:
        """Cancel every line in flight and record how each ended (a line whose batch was already running may
        still finish ok)."""
        for outcome in executor.cancel(grace_s):
            self.write(outcome)


def run_job(jsonl_path: str | Path, out_dir: str | Path, runtime: Runtime | None, *,
            audio_dir: str | Path | None = None, resume: bool = False, progress: ProgressFn | None = None,
            cancel_event: threading.Event | None = None, params: SynthesisParams | None = None,
            default_voice: str | Path | None = None, default_voice_text: str | None = None,
            config: JobConfig = JobConfig(), transcriber: Transcriber | None = None,
            executor: LineExecutor | None = None) -> JobSummary:
    """Run a JSONL job: one ``<output_name>.wav`` (or the line's ``format``, else ``config.audio_format``) and its
    sidecar ``<output_name>.json`` per ok line, plus ``results.jsonl`` (one record per non-blank line, in line order)
    in ``out_dir``.

    Every line is validated (streaming) before any model work. Lines are then streamed to the executor with at
    most ``config.max_in_flight_lines`` (default: ``executor.capacity``, 4 x the engine's max batch size for the
    local engine) in flight, so an engine batches segments of several lines together while a 10 000-line job never
    holds more than that many references.

    Args:
        jsonl_path: the job file (see ``tts_app.jobs.schema`` for the fields).
        out_dir: output folder (created). Nothing is written outside it.
        runtime: a ``tts_app.runtime.Runtime`` (its engine runs the lines, its reference preparer cleans their
            references); None when an ``executor`` is given or when no line needs the model (every line invalid
            or, with ``resume``, already done; see ``count_lines_to_run``).
        audio_dir: folder or ZIP of reference audio; a ZIP's members the lines name are unpacked (safely) into
            ``out_dir/.reference_audio`` for the duration of the job.
        resume: keep lines whose earlier record is ok and whose audio decodes; otherwise every line runs again.
        progress: called as ``progress(done, total, info)`` after every line; ``info`` has ``line``,
            ``output_name``, ``status`` ("ok" | "failed" | "cancelled", or "skipped" for a line kept from an
            earlier run) and ``error``.
        cancel_event: when set, no more lines are submitted, lines in flight are cancelled, and every line not
            finished is recorded "cancelled"; resume later with ``resume=True``.
        params: the job's default ``SynthesisParams`` (per-line fields override them); priority is always JOB.
        default_voice, default_voice_text: reference audio (and its transcript) for lines without prompt_audio.
        config: runner settings.
        transcriber: fills the transcript of a line's reference (its file, voice, default voice or a dialogue
            speaker's) that has none, when the family needs one or the transcriber runs for every family
            (``tts_app.audio.transcribe.fill_transcript``; the line's sidecar and warnings show it); None = off.
            The local executor uses this one; Ray workers each build their own from its settings
            (``JobContext.asr``).
        executor: where lines are synthesised (``tts_app.jobs.executor``; e.g. ``tts_app.jobs.cluster.RayExecutor``
            for Ray workers); None = a ``LocalExecutor`` on ``runtime``. Outputs and records are written here
            either way.

    Returns:
        ``JobSummary`` (counts, failed lines, elapsed time).

    Raises:
        InputError: job file unreadable/undecodable, audio folder/ZIP unusable or unsafe, default voice missing.
        ValueError: neither ``runtime`` nor ``executor`` is given but a line needs the model.
        ReferenceAudioError: the default voice cannot be used.
        TTSAppError: a record cannot be written (disk full): the job stops, its message says how many lines are
            recorded; finished lines are kept for ``resume``. (A line whose audio cannot be written is that line's
            failed record, and the job goes on.)
    """
    started = time.monotonic()
    jsonl_path, out_dir = Path(jsonl_path), Path(out_dir)
    params = params if params is not None else SynthesisParams()
    default_voice_path = check_default_voice(default_voice)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out_dir)
    summary = JobSummary(jsonl_path=jsonl_path, out_dir=out_dir, results_path=out_dir / RESULTS_NAME)
    audio_label = Notice("job_root_the_zip" if audio_dir is not None and Path(audio_dir).is_file()
                         else "job_root_audio_folder")
    if executor is None and runtime is not None:
        executor = LocalExecutor(runtime, transcriber=transcriber)

    # a ZIP's members that no line names are never unpacked (a small job cannot make a large ZIP fill the disk)
    used = _zip_members_used(jsonl_path, audio_dir, default_voice_path is not None, config)
    with _audio_root(audio_dir, out_dir / EXTRACTED_AUDIO_DIR, config, only=used) as root:
        sources = make_sources(jsonl_path, root, config, audio_label=audio_label)
        report = validate_lines(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                config=config)
        if report.num_lines == 0:
            raise InputError(Notice("job_file_no_lines", name=jsonl_path.name))
        summary.num_lines = report.num_lines
        summary.warnings.extend(r.message for r in report.rows if r.line == 0)

        if executor is not None:
            executor.open(JobContext(job_file_name=jsonl_path.name, params=params, default_voice=default_voice_path,
                                     default_voice_text=default_voice_text, voices=sources.voices,
                                     asr=AsrSetting.of(transcriber)))

        kept = resumable(out_dir) if resume else {}
        writer = ResultsWriter(out_dir, keep=[kept[n] for n in sorted(kept)])
        run = _JobRun(out_dir, writer, summary, progress, audio_format=config.audio_format)
        max_in_flight = config.max_in_flight_lines or (executor.capacity if executor is not None else 1)
        cancelled = False
        try:
            for item in iter_job(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                 config=config, encoding=report.encoding):
                writer.expect(item.line_number)
                if not cancelled and cancel_event is not None and cancel_event.is_set():
                    cancelled = True
                    if executor is not None:
                        run.cancel_all(executor)
                if _already_done(item, kept):
                    # done by an earlier run (even if, say, its reference file has since been removed)
                    run.keep(kept[item.line_number])
                elif isinstance(item, InvalidLine):
                    run.record(item.line_number, item.output_name, "failed", error=item.message,
                               warnings=item.warnings, finish_reason="refused")
                elif cancelled:
                    run.record(item.line_number, item.output_name, "cancelled", error=CANCELLED_BEFORE_START,
                               warnings=item.warnings)
                elif executor is None:
                    raise ValueError(f"line {item.line_number} needs the model but run_job was given runtime=None")
                else:
                    failed_at_once = executor.submit(item)
                    if failed_at_once is not None:
                        run.write(failed_at_once)
                    run.harvest(executor)
                    run.wait(executor, cancel_event, until_below=max_in_flight)
            if executor is not None:
                run.wait(executor, cancel_event, until_below=1)
                if executor.num_in_flight:  # cancelled while draining
                    run.cancel_all(executor)
        except OSError as exc:  # a record could not be written (disk full): stop, resumably, and say so
            raise TTSAppError(Notice("job_stopped_write", reason=exc.strerror or str(exc),
                                     num_recorded=writer.num_written, num_lines=summary.num_lines)) from exc
        finally:
            if executor is not None and executor.num_in_flight:  # an exception (disk full, Ctrl-C): stop this job
                executor.abort()
            try:
                writer.close()
            except OSError as exc:  # the disk is full: the journal keeps what was recorded, for the resume
                logger.warning("results of %s could not be closed: %s", out_dir, exc)
    summary.elapsed_s = time.monotonic() - started
    return summary
