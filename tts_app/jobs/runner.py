"""JSONL job runner: streaming submission to the engine, per-line atomic outputs, ``results.jsonl``, resume.

Flow (one job)::

    validate every line (streaming)  ->  for each line, in file order: writer.expect(line), then reference audio
    (the runtime's ReferencePreparer, shared with every other caller) -> engine.submit (at most K lines in flight,
    so the engine's batches mix lines)  ->  as each line completes: WAV and its metadata sidecar written atomically
    (``tts_app.outputs.save_outputs``), its record put to the ``ResultsWriter``

Every non-blank line of the job file ends with exactly one record in ``results.jsonl``, in line order (see
``tts_app.jobs.results``): "ok", "failed" (invalid line, unusable reference, engine failure) or "cancelled"
(``cancel_event`` was set before it finished, including the lines never submitted). A failing line never stops the
job. ``resume=True`` keeps the records of lines whose earlier record is ``ok`` and whose audio file still decodes,
and runs the rest. Output files never leave ``out_dir``.

The writing side (``ResultsWriter``, ``line_record``, ``tts_app.outputs.save_outputs``) does not know where a
line was synthesised; this module drives the local engine. A cluster driver can shard lines to workers and feed the same
writer with what they stream back.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import shutil
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tts_app.audio.transcribe import Transcriber, fill_transcript
from tts_app.errors import InputError, RequestCancelledError, TTSAppError
from tts_app.jobs.results import (RESULTS_NAME, ZIP_NAME, ResultsWriter, audio_decodes, line_record,
                                  make_results_zip, read_results, remove_stale_temp_files, resumable)
from tts_app.jobs.schema import (AudioSources, InvalidLine, JobConfig, JobLine, ValidationReport,
                                 check_default_voice, extract_audio_zip, iter_job, make_sources, validate_lines,
                                 zip_audio_members)
from tts_app.request import EmotionControl, Priority, RequestStatus, SynthesisParams, SynthesisRequest

if TYPE_CHECKING:
    from tts_app.adapters.base import ModelFacts
    from tts_app.audio.preparer import PreparedReference
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

__all__ = ["JobSummary", "RESULTS_NAME", "ZIP_NAME", "audio_decodes", "count_lines_to_run", "make_results_zip",
           "read_results", "run_job", "validate_job"]

EXTRACTED_AUDIO_DIR = ".reference_audio"  # where an uploaded audio ZIP is unpacked, inside out_dir
_POLL_S = 0.2  # how often a waiting runner looks at cancel_event
CANCELLED_BEFORE_START = "cancelled before it ran"

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

    def format_text(self) -> str:
        head = (f"{self.num_lines} lines: {self.num_ok} ok, {self.num_failed} failed, {self.num_skipped} skipped "
                f"(already done)" + (f", {self.num_cancelled} cancelled" if self.num_cancelled else "")
                + f" in {self.elapsed_s:.1f} s; results in {self.results_path}")
        return "\n".join([head] + [f"  line {n}: {err}" for n, err in self.failed])


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
        raise InputError(f"audio folder {path.name!r} is neither a folder nor a ZIP file")
    return path


@contextlib.contextmanager
def _validation_sources(jsonl_path: str | Path, audio_dir: str | Path | None, config: JobConfig
                        ) -> Iterator[AudioSources]:
    """``AudioSources`` for checking a job without running it: an audio ZIP is searched by member name (nothing
    unpacked), an audio folder directly."""
    if audio_dir is not None and Path(audio_dir).is_file():
        members = zip_audio_members(_zip_file(audio_dir), max_total_bytes=config.max_zip_bytes,
                                    max_members=config.max_zip_members)
        with AudioSources([Path(jsonl_path).parent], [Path(r) for r in config.extra_allowed_roots],
                          zip_members=members, zip_path=Path(audio_dir), voices=config.voice_library(),
                          root_labels={Path(jsonl_path).parent: "the job file's folder"}) as sources:
            yield sources
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
    kept = resumable(out_dir) if resume and out_dir.is_dir() else {}
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
    speaker_references: list | None = None


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
        self.voices = None  # the job's VoiceLibrary (AudioSources.voices), for lines with a ``voice`` field
        self.transcriber: Transcriber | None = None  # automatic transcripts (run_job's ``transcriber``)
        self.audio_format = "wav"  # JobConfig.audio_format

    def transcript(self, reference: PreparedReference | None, known: str | None,
                   notes: list[str]) -> str | None:
        """``known``, or the automatic transcript of ``reference`` (``fill_transcript``); notices go to ``notes``."""
        text, said = fill_transcript(self.transcriber, reference, known,
                                     needs_reference_text=self.runtime.engine.facts.needs_reference_text)
        notes.extend(said)
        return text

    def record(self, line: int, output_name: str | None, status: str, *, error: str | None = None,
               audio_path: str | None = None, metadata_path: str | None = None, duration_s: float | None = None,
               num_segments: int | None = None, elapsed_s: float = 0.0,
               warnings: list[str] | tuple[str, ...] = (), request_id: str | None = None) -> None:
        self.writer.put(line_record(line, output_name, status, error=error, audio_path=audio_path,
                                    metadata_path=metadata_path, duration_s=duration_s, num_segments=num_segments,
                                    elapsed_s=elapsed_s, warnings=warnings, request_id=request_id))
        if status == "ok":
            self.summary.num_ok += 1
        elif status == "failed":
            self.summary.num_failed += 1
            self.summary.failed.append((line, error or "failed"))
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

    def finish(self, future: cf.Future) -> None:
        """Turn one completed engine future into an output file and a results record."""
        pending = self.in_flight.pop(future)
        line, elapsed = pending.line, time.monotonic() - pending.started_s
        request_id = pending.request.request_id
        try:
            result = future.result()
        except (cf.CancelledError, RequestCancelledError):
            self.record(line.line_number, line.output_name, "cancelled", error="cancelled", elapsed_s=elapsed,
                        request_id=request_id)
            return
        except TTSAppError as exc:
            self.record(line.line_number, line.output_name, "failed", error=str(exc), elapsed_s=elapsed,
                        request_id=request_id)
            return
        except Exception as exc:  # an engine bug must not stop the other lines; logged with its traceback
            logger.exception("job line %d (request %s) raised", line.line_number, request_id)
            self.record(line.line_number, line.output_name, "failed", error=f"internal error: {exc!r}",
                        elapsed_s=elapsed, request_id=request_id)
            return
        reference_warnings = pending.reference.warnings if pending.reference is not None else []
        warnings = list(dict.fromkeys(pending.warnings + reference_warnings + list(result.warnings or [])))
        if result.status is RequestStatus.CANCELLED:
            self.record(line.line_number, line.output_name, "cancelled", error=result.error or "cancelled",
                        elapsed_s=elapsed, warnings=warnings, request_id=request_id)
        elif not result.ok or len(result.audio) == 0:
            self.record(line.line_number, line.output_name, "failed", error=result.error or "no audio produced",
                        elapsed_s=elapsed, warnings=warnings, request_id=request_id)
        else:
            from tts_app.outputs import output_metadata, save_outputs

            job = {"job": {"file": self.jsonl_path.name, "line": line.line_number, "output_name": line.output_name}}
            metadata = output_metadata(self.runtime, pending.request, result, entry_point="job",
                                       reference=pending.reference, warnings=pending.warnings, extra=job,
                                       speaker_references=pending.speaker_references)
            files = save_outputs(self.out_dir / f"{line.output_name}.{self.audio_format}", result, metadata)
            self.record(line.line_number, line.output_name, "ok", audio_path=files.audio.name,
                        metadata_path=files.metadata.name, duration_s=round(result.duration_s, 3),
                        num_segments=len(result.segments), elapsed_s=elapsed, warnings=warnings,
                        request_id=request_id)

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
        """Cancel every line in flight and record how each ended (a line whose batch was already running may
        still finish ok)."""
        for pending in self.in_flight.values():
            pending.handle.cancel()
        done, not_done = cf.wait(list(self.in_flight), timeout=grace_s)
        for future in done:
            self.finish(future)
        for future in not_done:
            pending = self.in_flight.pop(future)
            self.record(pending.line.line_number, pending.line.output_name, "cancelled", error="cancelled",
                        elapsed_s=time.monotonic() - pending.started_s, request_id=pending.request.request_id)


def run_job(jsonl_path: str | Path, out_dir: str | Path, runtime: Runtime | None, *,
            audio_dir: str | Path | None = None, resume: bool = False, progress: ProgressFn | None = None,
            cancel_event: threading.Event | None = None, params: SynthesisParams | None = None,
            default_voice: str | Path | None = None, default_voice_text: str | None = None,
            config: JobConfig = JobConfig(), transcriber: "Transcriber | None" = None) -> JobSummary:
    """Run a JSONL job through ``runtime``: one ``<output_name>.wav`` (or ``config.audio_format``) and its sidecar
    ``<output_name>.json`` per ok line, plus ``results.jsonl`` (one record per non-blank line, in line order) in
    ``out_dir``.

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
    remove_stale_temp_files(out_dir)
    summary = JobSummary(jsonl_path=jsonl_path, out_dir=out_dir, results_path=out_dir / RESULTS_NAME)
    audio_label = "the audio ZIP" if audio_dir is not None and Path(audio_dir).is_file() else "the audio folder"

    with _audio_root(audio_dir, out_dir / EXTRACTED_AUDIO_DIR, config) as root:
        sources = make_sources(jsonl_path, root, config, audio_label=audio_label)
        report = validate_lines(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                config=config)
        if report.num_lines == 0:
            raise InputError(f"job file {jsonl_path.name!r} has no lines; write one JSON object per line")
        summary.num_lines = report.num_lines
        summary.warnings.extend(r.message for r in report.rows if r.line == 0)

        default_reference = None
        if default_voice_path is not None and runtime is not None:
            default_reference = runtime.references.prepare(default_voice_path, reference_text=default_voice_text)

        kept = resumable(out_dir) if resume else {}
        writer = ResultsWriter(out_dir, keep=[kept[n] for n in sorted(kept)])
        run = _JobRun(runtime, out_dir, writer, summary, progress, jsonl_path)
        run.voices = sources.voices
        run.transcriber = transcriber
        run.audio_format = config.audio_format
        max_in_flight = config.max_in_flight_lines or (
            4 * runtime.engine.stats().max_batch_size if runtime is not None else 1)
        cancelled = False
        try:
            for item in iter_job(jsonl_path, sources, has_default_voice=default_voice_path is not None,
                                 config=config, encoding=report.encoding):
                writer.expect(item.line_number)
                if not cancelled and cancel_event is not None and cancel_event.is_set():
                    cancelled = True
                    run.cancel_all()
                if _already_done(item, kept):
                    # done by an earlier run (even if, say, its reference file has since been removed)
                    run.keep(kept[item.line_number])
                elif isinstance(item, InvalidLine):
                    run.record(item.line_number, item.output_name, "failed", error=item.message,
                               warnings=item.warnings)
                elif cancelled:
                    run.record(item.line_number, item.output_name, "cancelled", error=CANCELLED_BEFORE_START,
                               warnings=item.warnings)
                elif runtime is None:
                    raise ValueError(f"line {item.line_number} needs the model but run_job was given runtime=None")
                else:
                    _submit_line(run, item, params, default_reference, default_voice_text)
                    run.harvest()
                    run.wait(cancel_event, until_below=max_in_flight)
            run.wait(cancel_event, until_below=1)
            if run.in_flight:  # cancelled while draining
                run.cancel_all()
        finally:
            if run.in_flight:  # an exception (disk full, Ctrl-C): stop the engine work of this job
                for pending in run.in_flight.values():
                    pending.handle.cancel()
            writer.close()
    summary.elapsed_s = time.monotonic() - started
    return summary


def _unsupported_knobs(facts: ModelFacts, line: JobLine) -> list[str]:
    """Warnings for per-line knobs the loaded model does not have (ignored, not an error), with the reason
    (``GenerationDefaults.sources``)."""
    defaults = facts.generation_defaults
    return [f"{name} ignored: the {facts.family} model has no such setting ({defaults.sources.get(name, 'absent')})"
            for name in ("greedy", "temperature", "top_p", "top_k", "cfg_scale")
            if name in line.params and getattr(defaults, name) is None]


def _emotion(run: _JobRun, line: JobLine) -> EmotionControl | None:
    """The line's ``EmotionControl``: its emotion clip cleaned by the runtime's reference preparer (the model's rate).
    The engine refuses it, naming the model, when the loaded family has no emotion control.

    Raises:
        ReferenceAudioError: the emotion clip is unusable.
    """
    emotion = line.emotion
    if emotion is None:
        return None
    clip = run.runtime.references.prepare(emotion.audio).audio if emotion.audio is not None else None
    return EmotionControl(reference_audio=clip, vector=emotion.vector, weight=emotion.weight,
                          from_text=emotion.from_text, text=emotion.text)


def _submit_line(run: _JobRun, line: JobLine, params: SynthesisParams, default_reference: PreparedReference | None,
                 default_voice_text: str | None) -> None:
    """Reference audio + request for one valid line, submitted to the engine (or a failed record)."""
    started = time.monotonic()
    try:
        line_params = line.synthesis_params(params)
        if line.voice is not None:
            reference, voice_text = run.voices.prepare_source(line.voice, run.runtime.references)
            reference_text = line.prompt_text or reference.text or voice_text
        elif line.prompt_audio is None:
            reference = default_reference
            reference_text = line.prompt_text or (default_reference.text if default_reference else default_voice_text)
        else:
            reference = run.runtime.references.prepare(line.prompt_audio, reference_text=line.prompt_text)
            reference_text = reference.text  # shortened to the kept sentences, or None, when the clip was cropped
        warnings = list(line.warnings) + _unsupported_knobs(run.runtime.engine.facts, line)
        if line.script is not None:
            from tts_app.dialogue import dialogue_request

            voices = [run.voices.prepare_source(value, run.runtime.references) if kind == "voice"
                      else (run.runtime.references.prepare(value), None) for kind, value in line.speaker_voices]
            voices = [(ref, run.transcript(ref, known, warnings)) for ref, known in voices]
            request = dialogue_request(line.script, voices, text=line.input_text, params=line_params,
                                       priority=Priority.JOB, emotion=_emotion(run, line))
            speaker_references = [ref for ref, _ in voices]
        else:
            reference_text = run.transcript(reference, reference_text, warnings)
            request = SynthesisRequest(text=line.input_text, reference_audio=reference.audio if reference else None,
                                       reference_text=reference_text, params=line_params, priority=Priority.JOB,
                                       emotion=_emotion(run, line))
            speaker_references = None
        handle = run.runtime.engine.submit(request)
    except TTSAppError as exc:
        run.record(line.line_number, line.output_name, "failed", error=str(exc),
                   elapsed_s=time.monotonic() - started, warnings=line.warnings)
        return
    except Exception as exc:  # e.g. a decoder bug on one odd file: logged, recorded, the job goes on
        logger.exception("job line %d: preparing the request failed", line.line_number)
        run.record(line.line_number, line.output_name, "failed", error=f"internal error: {exc!r}",
                   elapsed_s=time.monotonic() - started, warnings=line.warnings)
        return
    run.in_flight[handle.future] = _Pending(line, handle, started, warnings, request, reference,
                                            speaker_references)
