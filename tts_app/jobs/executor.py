"""Where a job's lines are synthesised: the seam between the runner (validation, resume, ``results.jsonl``, the
WAVs and sidecars, all written by the driver) and the engine(s) that turn a line into audio.

    executor.open(context)              # once per job: the default voice is prepared here (ReferenceAudioError)
    outcome = executor.submit(line)     # a LineOutcome when the line failed before reaching an engine, else None
    for outcome in executor.poll(timeout_s): ...   # lines finished since the last poll, in any order
    executor.cancel(grace_s)            # outcomes of every line still in flight ("cancelled", or done meanwhile)
    executor.abort()                    # stop the lines in flight without waiting (an exception is unwinding)
    executor.num_in_flight, executor.capacity

``LocalExecutor`` runs lines on this process's ``Runtime`` (one engine); ``tts_app.jobs.cluster.RayExecutor``
runs them on Ray actors that each hold their own ``Runtime``. Both turn a line into a request with
``prepare_line`` and a finished request into a ``LineOutcome`` with ``outcome_from_result`` on the ``Runtime`` that
ran it, so a line's audio, sidecar and record are the same wherever it ran; the runner alone writes them.

Pattern: vLLM's executor classes (``UniProcExecutor`` / ``RayDistributedExecutor``): the engine core does not
know whether its model runs in-process or on Ray workers.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Union

from tts_app.audio.transcribe import Transcriber, fill_transcript
from tts_app.errors import RequestCancelledError, TTSAppError
from tts_app.finish import Finish, FinishReason
from tts_app.frontend.messages import message_of
from tts_app.jobs.messages import Notice
from tts_app.request import (EmotionControl, Priority, RequestStatus, SynthesisParams, SynthesisRequest,
                             SynthesisResult)

if TYPE_CHECKING:
    from tts_app.adapters.base import ModelFacts
    from tts_app.audio.preparer import PreparedReference
    from tts_app.jobs.schema import JobLine
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

#: what a worker gets for a line's reference audio: the path (this machine, or a folder every machine mounts) or
#: the file's bytes, named after the file for messages
ReferenceInput = Union[Path, tuple[bytes, str], None]


@dataclass(frozen=True)
class AsrSetting:
    """A job's automatic-transcript setting as plain data, so a Ray worker can build its own ``Transcriber``.

    Attributes:
        model_id: hub id or folder of the Whisper checkpoint (every worker must reach it), or None = off.
        for_every_family: transcribe for every family, not only those that need a transcript
            (``Transcriber.for_every_family``).
    """

    model_id: str | None = None
    for_every_family: bool = False

    @classmethod
    def of(cls, transcriber: Transcriber | None) -> AsrSetting:
        """The setting of ``transcriber`` (None or a disabled one = off)."""
        if transcriber is None or not transcriber.enabled:
            return cls()
        return cls(transcriber.model_id, transcriber.for_every_family)

    def build(self, device: str) -> Transcriber | None:
        """A ``Transcriber`` with this setting on ``device`` (loaded lazily on first use), or None when off."""
        if self.model_id is None:
            return None
        return Transcriber(self.model_id, device, for_every_family=self.for_every_family)


@dataclass(frozen=True)
class JobContext:
    """What every line of one job shares.

    Attributes:
        job_file_name: the job file's name (the sidecar's ``job.file``).
        params: the job's default ``SynthesisParams`` (a line's own fields override them).
        default_voice: reference audio for lines without ``prompt_audio``, or None.
        default_voice_text: its transcript, or None.
        voices: the job's ``tts_app.voices.VoiceLibrary`` (``AudioSources.voices``), for lines with a ``voice``
            field and dialogue speakers; None = none.
        asr: automatic reference transcripts for the job's lines (``fill_transcript``); a Ray worker builds its
            ``Transcriber`` from it, the local executor uses the one it was given.
    """

    job_file_name: str
    params: SynthesisParams = field(default_factory=SynthesisParams)
    default_voice: Path | None = None
    default_voice_text: str | None = None
    voices: Any = None
    asr: AsrSetting = field(default_factory=AsrSetting)


@dataclass
class LineOutcome:
    """How one line ended, as the writer needs it (plain data: it travels back from a Ray worker).

    Attributes:
        line_number, output_name: of the job line.
        status: "ok" | "failed" | "cancelled" (``tts_app.jobs.results.STATUSES``).
        error: message when not ok.
        result: the DONE ``SynthesisResult`` (audio float32 ``(num_samples,)``), only when ok.
        metadata: the sidecar without its ``audio`` block (``tts_app.outputs.output_metadata``), only when ok.
        warnings: notices for the results record (line, reference, engine), each once.
        elapsed_s: wall seconds from preparing the line to its end, on the machine that ran it.
        request_id: the engine request that ran the line (the record's ``request_id``: the id its failure's
            traceback is logged under, on the machine that ran it), or None when it never reached an engine.
        audio_format: the line's own output format (its JSONL ``format``), or None = the job's.
        finish_reason: why the line's request ended (``tts_app.finish.FinishReason``'s value), or None: derived from
            ``status`` by ``line_record``.
    """

    line_number: int
    output_name: str | None
    status: str
    error: str | None = None
    result: SynthesisResult | None = None
    metadata: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    request_id: str | None = None
    audio_format: str | None = None
    finish_reason: str | None = None


@dataclass
class PreparedLine:
    """A valid line turned into an engine request (``prepare_line``)."""

    request: SynthesisRequest
    reference: PreparedReference | None
    warnings: list[str]  # the line's own notices plus per-line knobs the model lacks
    speaker_references: list | None = None  # a dialogue line's per-speaker PreparedReference


class LineExecutor(Protocol):
    """Runs a job's valid lines somewhere and reports how each ended (module docstring)."""

    @property
    def capacity(self) -> int:
        """Lines worth keeping in flight so every engine has batch-mates (the runner's default in-flight bound)."""

    @property
    def num_in_flight(self) -> int:
        """Lines submitted and not yet returned by ``poll`` / ``cancel``."""

    def open(self, context: JobContext) -> None:
        """Start a job; prepares the default voice. Raises ``ReferenceAudioError`` when it cannot be used."""

    def submit(self, line: JobLine) -> LineOutcome | None:
        """Start one valid line; returns its outcome at once when it failed before reaching an engine."""

    def poll(self, timeout_s: float) -> list[LineOutcome]:
        """Outcomes of lines finished since the last call, waiting up to ``timeout_s`` for the first one."""

    def cancel(self, grace_s: float) -> list[LineOutcome]:
        """Cancel every line in flight; wait up to ``grace_s`` for them; an outcome for each (a line whose batch
        was already running may still end ok)."""

    def abort(self) -> None:
        """Cancel every line in flight without waiting or reporting (the job is stopping with an exception)."""


# --------------------------------------------------------------------------------------------------- shared steps


def unsupported_knobs(facts: ModelFacts, given: list[str] | tuple[str, ...]) -> list[str]:
    """Warnings for per-line knobs (``given``: the names a line set) the loaded model does not have (ignored, not
    an error), with the reason (``GenerationDefaults.sources``)."""
    defaults = facts.generation_defaults
    return [Notice("job_ignored_knob", name=name, family=facts.family, source=defaults.sources.get(name, "absent"))
            for name in ("greedy", "temperature", "top_p", "top_k", "cfg_scale", "num_beams", "length_penalty",
                         "num_diffusion_steps", "prompt_cache")
            if name in given and getattr(defaults, name) is None]


def prepare_default_voice(runtime: Runtime, context: JobContext, source: ReferenceInput = None
                          ) -> PreparedReference | None:
    """The job's default voice cleaned by ``runtime``'s reference preparer with the job's ``reference_cleanup``
    (``context.params``), or None when the job has none.

    Args:
        source: where to read it (``ReferenceInput``); None = ``context.default_voice`` on this machine.

    Raises:
        ReferenceAudioError: the default voice cannot be used.
    """
    if context.default_voice is None:
        return None
    return _prepare_reference(runtime, source if source is not None else context.default_voice,
                              context.default_voice_text, context.params.reference_cleanup)


def _prepare_reference(runtime: Runtime, source: Path | tuple[bytes, str], reference_text: str | None,
                       cleanup: str | None = None) -> PreparedReference:
    """``runtime.references.prepare`` of a file or its shipped bytes, with the line's ``reference_cleanup``
    (None = the preparer's default)."""
    if isinstance(source, tuple):  # the file's bytes shipped to a worker: named as the file, hashed the same
        data, name = source
        return runtime.references.prepare(data, reference_text=reference_text, name=name, cleanup=cleanup)
    return runtime.references.prepare(source, reference_text=reference_text, cleanup=cleanup)


def line_emotion(runtime: Runtime, line: JobLine, clip: ReferenceInput = None) -> EmotionControl | None:
    """The line's ``EmotionControl``: its emotion clip cleaned by ``runtime``'s reference preparer (the model's
    rate). The engine refuses it, naming the model, when the loaded family has no emotion control.

    Args:
        clip: where to read the emotion clip (``ReferenceInput``); None = ``line.emotion.audio`` on this machine.

    Raises:
        ReferenceAudioError: the emotion clip is unusable.
    """
    emotion = line.emotion
    if emotion is None:
        return None
    audio = None
    if emotion.audio is not None:
        audio = _prepare_reference(runtime, clip if clip is not None else emotion.audio, None).audio
    return EmotionControl(reference_audio=audio, vector=emotion.vector, weight=emotion.weight,
                          from_text=emotion.from_text, text=emotion.text)


def prepare_line(runtime: Runtime, line: JobLine, context: JobContext, default_reference: PreparedReference | None,
                 reference: ReferenceInput = None, emotion_clip: ReferenceInput = None, *,
                 transcriber: Transcriber | None = None) -> PreparedLine:
    """Reference audio and emotion clip (cleaned by ``runtime``'s preparer) and the engine request for one valid
    line.

    Args:
        reference: where to read the line's reference audio; None = ``line.prompt_audio`` on this machine.
        emotion_clip: where to read its emotion clip; None = ``line.emotion.audio`` on this machine.
        transcriber: fills the transcript of a reference (the line's file, voice, default voice or a dialogue
            speaker's) that has none (``fill_transcript``: when the family needs one, or for every family when so
            set); the transcript and a warning naming it go to the request, sidecar and record. None = off.

    Raises:
        TTSAppError: the line's settings are invalid, or its reference audio or emotion clip is unusable.
    """
    line_params = line.synthesis_params(context.params)
    # a saved voice is cleaned as it was saved (``Voice.reference_cleanup``) unless the line names a cleanup itself
    voice_cleanup = line.params.get("reference_cleanup")
    if line.voice is not None:
        prepared, voice_text = context.voices.prepare_source(line.voice, runtime.references, voice_cleanup)
        line_params = replace(line_params, reference_cleanup=prepared.report.cleanup)  # what ran on the voice
        reference_text = line.prompt_text or prepared.text or voice_text
    elif line.prompt_audio is None:
        prepared = default_reference
        reference_text = line.prompt_text or (default_reference.text if default_reference else
                                              context.default_voice_text)
    else:
        prepared = _prepare_reference(runtime, reference if reference is not None else line.prompt_audio,
                                      line.prompt_text, line_params.reference_cleanup)
        reference_text = prepared.text  # shortened to the kept sentences, or None, when the clip was cropped
    warnings = list(line.warnings) + unsupported_knobs(runtime.engine.facts, tuple(line.params))
    needs_text = runtime.engine.facts.needs_reference_text

    def transcript(ref: PreparedReference | None, known: str | None) -> str | None:
        text, said = fill_transcript(transcriber, ref, known, needs_reference_text=needs_text)
        warnings.extend(said)
        return text

    if line.script is not None:
        from tts_app.dialogue import dialogue_request

        voices = [context.voices.prepare_source(value, runtime.references, voice_cleanup) if kind == "voice"
                  else (runtime.references.prepare(value, cleanup=line_params.reference_cleanup), None)
                  for kind, value in line.speaker_voices]
        voices = [(ref, transcript(ref, known)) for ref, known in voices]
        request = dialogue_request(line.script, voices, text=line.input_text, params=line_params,
                                   priority=Priority.JOB, emotion=line_emotion(runtime, line, emotion_clip))
        return PreparedLine(request, prepared, warnings, speaker_references=[ref for ref, _ in voices])
    reference_text = transcript(prepared, reference_text)
    request = SynthesisRequest(text=line.input_text, reference_audio=prepared.audio if prepared else None,
                               reference_text=reference_text, params=line_params, priority=Priority.JOB,
                               emotion=line_emotion(runtime, line, emotion_clip))
    return PreparedLine(request, prepared, warnings)


def outcome_from_result(runtime: Runtime, context: JobContext, line: JobLine, prepared: PreparedLine,
                        result: SynthesisResult, elapsed_s: float) -> LineOutcome:
    """The outcome of a line whose request the engine of ``runtime`` finished (any status); an ok line carries
    its sidecar, built from ``runtime`` (the model and engine that ran it)."""
    reference_warnings = prepared.reference.warnings if prepared.reference is not None else []
    warnings = list(dict.fromkeys(prepared.warnings + reference_warnings + list(result.warnings or [])))
    request_id = prepared.request.request_id
    if result.status is RequestStatus.CANCELLED:
        return LineOutcome(line.line_number, line.output_name, "cancelled", error=result.error or Notice("job_cancelled"),
                           warnings=warnings, elapsed_s=elapsed_s, request_id=request_id,
                           finish_reason=result.finish.reason.value)
    from tts_app.outputs import no_audio_error, output_metadata

    if not result.ok:
        return LineOutcome(line.line_number, line.output_name, "failed", error=result.error or Notice("job_no_audio"),
                           warnings=warnings, elapsed_s=elapsed_s, request_id=request_id,
                           finish_reason=result.finish.reason.value)
    no_audio = no_audio_error(prepared.request, result)  # the page's and synth's words for it
    if no_audio is not None:
        return LineOutcome(line.line_number, line.output_name, "failed", error=no_audio, warnings=warnings,
                           elapsed_s=elapsed_s, request_id=request_id, finish_reason=FinishReason.NO_AUDIO.value)

    job = {"job": {"file": context.job_file_name, "line": line.line_number, "output_name": line.output_name}}
    metadata = output_metadata(runtime, prepared.request, result, entry_point="job", reference=prepared.reference,
                               warnings=prepared.warnings, extra=job, speaker_references=prepared.speaker_references)
    return LineOutcome(line.line_number, line.output_name, "ok", result=result, metadata=metadata,
                       warnings=warnings, elapsed_s=elapsed_s, request_id=request_id, audio_format=line.audio_format)


def outcome_from_exception(line: JobLine, exc: BaseException, elapsed_s: float, *, request_id: str | None = None,
                           warnings: list[str] | tuple[str, ...] = ()) -> LineOutcome:
    """The outcome of a line whose preparation (``request_id`` None) or request ``request_id`` raised ``exc``:
    cancelled, failed with the project error's message, or failed as an internal error (logged with its traceback,
    under the request id; the job goes on)."""
    if isinstance(exc, (cf.CancelledError, RequestCancelledError)):
        return LineOutcome(line.line_number, line.output_name, "cancelled", error=Notice("job_cancelled"),
                           elapsed_s=elapsed_s,
                           request_id=request_id)
    if isinstance(exc, TTSAppError):
        return LineOutcome(line.line_number, line.output_name, "failed", error=message_of(exc), warnings=list(warnings),
                           elapsed_s=elapsed_s, request_id=request_id,
                           finish_reason=Finish.from_error(exc).reason.value)
    logger.error("job line %d (request %s) raised", line.line_number, request_id or "not started", exc_info=exc)
    return LineOutcome(line.line_number, line.output_name, "failed", error=Notice("job_internal_error", error=repr(exc)),
                       warnings=list(warnings), elapsed_s=elapsed_s, request_id=request_id)


# --------------------------------------------------------------------------------------------------- local


@dataclass
class _Pending:
    line: JobLine
    handle: Any  # tts_app.engine.RequestHandle
    started_s: float
    prepared: PreparedLine


class LocalExecutor:
    """Lines on this process's ``Runtime``: references cleaned in the caller's thread, requests batched by its
    engine (several jobs and the UI's requests share its batches).

    Args:
        runtime: the loaded model's ``Runtime``.
        transcriber: automatic reference transcripts (``prepare_line``), shared with the rest of the process (one
            ASR model loaded once); None = off.
    """

    #: lines in flight per unit of the engine's max batch size (keeps the batches full across line boundaries)
    IN_FLIGHT_PER_BATCH_ROW = 4

    def __init__(self, runtime: Runtime, *, transcriber: Transcriber | None = None):
        self.runtime = runtime
        self.transcriber = transcriber
        self.context = JobContext(job_file_name="")
        self.default_reference: PreparedReference | None = None
        self._in_flight: dict[cf.Future, _Pending] = {}

    @property
    def capacity(self) -> int:
        return self.IN_FLIGHT_PER_BATCH_ROW * self.runtime.engine.stats().max_batch_size

    @property
    def num_in_flight(self) -> int:
        return len(self._in_flight)

    def open(self, context: JobContext) -> None:
        self.context = context
        self.default_reference = prepare_default_voice(self.runtime, context)

    def submit(self, line: JobLine) -> LineOutcome | None:
        started = time.monotonic()
        try:
            prepared = prepare_line(self.runtime, line, self.context, self.default_reference,
                                    transcriber=self.transcriber)
            handle = self.runtime.engine.submit(prepared.request)
        except Exception as exc:  # a bad reference, or a decoder bug on one odd file: recorded, the job goes on
            return outcome_from_exception(line, exc, time.monotonic() - started, warnings=line.warnings)
        self._in_flight[handle.future] = _Pending(line, handle, started, prepared)
        return None

    def _finish(self, future: cf.Future) -> LineOutcome:
        pending = self._in_flight.pop(future)
        elapsed = time.monotonic() - pending.started_s
        try:
            result = future.result()
        except BaseException as exc:  # noqa: BLE001 - sorted by outcome_from_exception
            return outcome_from_exception(pending.line, exc, elapsed, request_id=pending.prepared.request.request_id)
        return outcome_from_result(self.runtime, self.context, pending.line, pending.prepared, result, elapsed)

    def poll(self, timeout_s: float) -> list[LineOutcome]:
        if not self._in_flight:
            return []
        done, _ = cf.wait(list(self._in_flight), timeout=timeout_s, return_when=cf.FIRST_COMPLETED)
        return [self._finish(future) for future in done]

    def cancel(self, grace_s: float) -> list[LineOutcome]:
        for pending in self._in_flight.values():
            pending.handle.cancel()
        done, not_done = cf.wait(list(self._in_flight), timeout=grace_s)
        outcomes = [self._finish(future) for future in done]
        for future in not_done:
            pending = self._in_flight.pop(future)
            outcomes.append(LineOutcome(pending.line.line_number, pending.line.output_name, "cancelled",
                                        error=Notice("job_cancelled"), elapsed_s=time.monotonic() - pending.started_s,
                                        request_id=pending.prepared.request.request_id))
        return outcomes

    def abort(self) -> None:
        for pending in self._in_flight.values():
            pending.handle.cancel()
        self._in_flight.clear()
