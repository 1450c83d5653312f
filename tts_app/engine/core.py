"""The engine: one model worker thread, many callers; requests -> segments -> rows -> audio.

Two ways to run, picked from what the adapter offers (``TTSAdapter.supports_decode_steps``):

* **continuous batching** (iteration-level scheduling; adapters with a step interface, e.g. VibeVoice): before every
  decode step the scheduler admits waiting segments into the running batch (``Scheduler.schedule_step``), the
  adapter's ``DecodeBatch`` prefills them and advances every live row one step, and a row that finishes leaves at
  once, freeing its slot for the next waiting segment. Each row's audio arrives step by step (streaming).
* **request-level batching** (every other adapter): the scheduler picks a batch (``Scheduler.schedule``: priority,
  length bucketing, budget), the adapter runs it whole (``preprocess -> generate -> postprocess``).

Either way the loop is vLLM's plan -> execute -> update (../shared/STYLE.md): the engine turns each batch, prefill
or decode step into a plain-data ``Outcome`` (ok / out of memory / refused rows / crashed) and the scheduler's
``update_from_output`` decides what finished, what fails, what is requeued and the batch cap; the engine only
carries that out (stores audio, resolves futures, releases rows). Out of memory (``torch.OutOfMemoryError``, detected
by type in ``memory.is_out_of_memory``) first frees the device cache and the prefix cache. Per-request failures are
never raised to callers: they come back as ``SynthesisResult`` with status FAILED / CANCELLED and ``error``.

Determinism: a row's audio depends only on its text, reference, seed and knobs (adapters draw every random number
from the row's own seed), so batching, joining a running batch, OOM retries, preemption (a job row giving its slot to an
interactive one, ``Scheduler`` rule d) and cancels of others never change what a user hears. A streamed row restarted
after OOM or preemption keeps the samples already sent and skips them in the new run.
"""

from __future__ import annotations

import atexit
import logging
import math
import random
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from tts_app.adapters.base import (AdapterRow, DecodeBatch, ModelFacts, PrefixCache, RowEmotion, RowStep, RowTurn,
                                     RowVoice, TTSAdapter)
from tts_app.audio.post import join_segments
from tts_app.config import MIN_MAX_SEGMENT_CHARS, REQUEST_LIMITS, EngineConfig
from tts_app.dialogue import join_pieces
from tts_app.errors import InputError, ReferenceAudioError, TTSAppError
from tts_app.metrics import BATCH_SIZE
from tts_app.engine.memory import (
    MemoryEstimator,
    MemoryProbe,
    format_bytes,
    free_after_oom,
    is_out_of_memory,
    make_simulated_oom,
    max_text_chars_for_budget,
    memory_budget_bytes,
    probe_for_device,
)
from tts_app.engine.scheduler import (BatchCap, Outcome, OutcomeKind, Phase, Scheduler, SegmentWork, Update,
                                     expected_speech_s)
from tts_app.engine.streaming import AudioChunk, AudioStream
from tts_app.request import (ChapterSpan, RequestStatus, SegmentTiming, StopReason, SynthesisParams,
                             SynthesisRequest, SynthesisResult)
from tts_app.zerogpu import GpuCalls, ZeroGPUConfig, on_zero_gpu

logger = logging.getLogger(__name__)

# Reference length assumed by ``EngineStats.default_row_bytes`` (a typical cleaned reference clip), in seconds.
DEFAULT_REFERENCE_S = 10.0
# Share of the memory budget the prefix cache may hold (shared voices' prefilled prompt prefixes). An eighth leaves
# the running rows most of the budget while still holding a few voices' prefixes (a 10 s reference is ~90 positions,
# ~5 MiB of KV for VibeVoice-1.5B in bfloat16).
PREFIX_CACHE_BUDGET_SHARE = 1 / 8

# Engines whose worker thread is running. A worker still alive when the interpreter finalises can abort the
# process ("terminate called without an active exception", exit status 134): when the thread ends it drops its
# reference to the engine, torch frees tensors from that thread, and freeing a tensor takes the GIL, which a
# finalising interpreter answers with pthread_exit *inside* a noexcept C++ destructor. ``shutdown(wait=True)``
# joins the worker; this atexit hook (run before finalisation) does it for any engine a caller left running.
_LIVE_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _shutdown_live_engines() -> None:
    for engine in list(_LIVE_ENGINES):
        engine.shutdown(wait=True)


@dataclass(frozen=True)
class ProgressEvent:
    """Sent to a request's ``on_progress`` callback: once at submit (``segments_done=0``, ``batch_size=0``), then
    from the worker thread after each batch that advanced it.

    Attributes:
        request_id: the request.
        segments_done: segments of the request finished so far.
        segments_total: segments of the request.
        batch_size: rows of the batch that just finished.
    """

    request_id: str
    segments_done: int
    segments_total: int
    batch_size: int


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine for gauges and logs.

    Attributes:
        batch_cap: current cap on rows per batch (shrinks after OOM, grows back).
        max_batch_size: the user's ceiling.
        num_oom: out-of-memory errors caught (simulated ones included).
        num_batches: batches run successfully.
        queue_depth: segments waiting.
        num_requests_active: requests submitted and not finished.
        num_requests_done, num_requests_failed, num_requests_cancelled: finished requests by outcome.
        num_segments_done: segments synthesised.
        last_batch_size: rows of the most recent successful batch (0 before the first).
        busy: a batch is running now.
        memory_budget_bytes: budget for one batch's KV cache + activations (None = unlimited), as last measured.
        device: the adapter's device ("cpu", "cuda", ...).
        device_total_bytes: total device memory (None = unknown).
        default_row_bytes: estimated bytes of one row with default knobs, a ``facts.max_segment_chars`` segment and
            a 10 s reference.
        max_rows_in_budget: ``memory_budget_bytes // default_row_bytes`` (None when the budget is unlimited).
        num_cap_shrinks, num_cap_grows: how often the batch cap was halved after OOM / grew back by one.
        continuous: the engine batches per decode step (the adapter offers a step interface).
        num_row_steps: rows run over all decode steps (step interface only; 0 otherwise).
        num_padded_row_steps: of those, rows that had already finished but still sat in the batch (padding).
        prefill_s: seconds spent prefilling rows (step interface only).
        num_requeued: rows requeued (restarted) after an out-of-memory error.
        num_preempted: job rows that left the running batch for an interactive request (restarted later).
        prefix_cache_bytes: bytes held by the prefix cache (counted in the budget).
        prefix_cache_hits, prefix_cache_misses: prefix-cache look-ups that found / did not find a prefix.
    """

    batch_cap: int
    max_batch_size: int
    num_oom: int
    num_batches: int
    queue_depth: int
    num_requests_active: int
    num_requests_done: int
    num_requests_failed: int
    num_requests_cancelled: int
    num_segments_done: int
    last_batch_size: int
    busy: bool
    memory_budget_bytes: int | None
    device: str
    device_total_bytes: int | None
    default_row_bytes: int
    max_rows_in_budget: int | None
    num_cap_shrinks: int = 0
    num_cap_grows: int = 0
    continuous: bool = False
    num_row_steps: int = 0
    num_padded_row_steps: int = 0
    prefill_s: float = 0.0
    num_requeued: int = 0
    num_preempted: int = 0
    prefix_cache_bytes: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_misses: int = 0

    @property
    def padded_share(self) -> float | None:
        """Share of decode row-steps spent on rows that had already finished (None before any step)."""
        return self.num_padded_row_steps / self.num_row_steps if self.num_row_steps else None


def check_emotion_support(facts: ModelFacts, name: str, *, from_text: bool) -> None:
    """Refuse emotion control the family does not have: the engine's rule for every request, also run by JSONL
    validation (``tts_app.jobs.runner.model_line_checks``) so a job line bound to fail is flagged before it runs.

    Args:
        facts: the loaded model's facts (``supports_emotion``, ``supports_emotion_text``).
        name: the model's display name, for the message.
        from_text: the emotion is to be read from text.

    Raises:
        InputError: emotion control on a family without it, or emotion from text without an emotion model.
    """
    if not facts.supports_emotion:
        raise InputError(f"emotion control (emotion clip, emotion vector, emotion from text) needs a model that "
                         f"has it, such as IndexTTS 2; the loaded model ({name}) has none: remove the emotion "
                         "settings")
    if from_text and not facts.supports_emotion_text:
        raise InputError(f"this {name} checkpoint has no emotion model to read the emotion from text; give an "
                         "emotion vector or an emotion clip instead")


class RequestHandle:
    """What ``Engine.submit`` returns.

    Attributes:
        request_id: the request's id.
        future: ``concurrent.futures.Future[SynthesisResult]``; never holds an exception for per-request failures.
    """

    def __init__(self, request_id: str, engine: "Engine", audio_stream: AudioStream | None = None):
        self.request_id = request_id
        self.future: Future = Future()
        self.future.set_running_or_notify_cancel()  # callers cancel through ``cancel()``, which frees queued work
        self._engine = engine
        self._audio_stream = audio_stream

    def stream(self, timeout: float | None = None) -> Iterator[AudioChunk]:
        """The request's audio as it is decoded: ``AudioChunk``s in order until the request ends (then
        ``result()`` has the outcome; a failed or cancelled request ends the iteration early). Their samples,
        concatenated, are ``result().audio``. Only for requests submitted with ``stream=True``.

        Raises:
            ValueError: the request was not submitted with ``stream=True``.
            queue.Empty: no chunk arrived within ``timeout`` seconds (None = no limit).
        """
        if self._audio_stream is None:
            raise ValueError(f"request {self.request_id} was not submitted with stream=True")
        return self._audio_stream.chunks(timeout=timeout)

    def result(self, timeout: float | None = None) -> SynthesisResult:
        """Block until the request finishes. Raises ``concurrent.futures.TimeoutError`` after ``timeout`` s."""
        return self.future.result(timeout=timeout)

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> bool:
        """Cancel the request: its queued segments are removed and its result is CANCELLED. Returns False when it
        had already finished. A batch already running is not interrupted; its rows for this request are dropped."""
        return self._engine._cancel(self.request_id)


@dataclass
class _RequestState:
    request: SynthesisRequest
    handle: RequestHandle
    texts: list[str]
    pauses_after_ms: list[int]
    on_progress: Callable[[ProgressEvent], None] | None
    params: SynthesisParams  # the request's knobs with the checkpoint defaults filled in (what runs)
    warnings: list[str] = field(default_factory=list)
    waves: list[np.ndarray | None] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    generate_s: list[float] = field(default_factory=list)
    stop_reasons: list[StopReason] = field(default_factory=list)
    num_done: int = 0
    finished: bool = False
    source_texts: list[str] = field(default_factory=list)  # what the user wrote, for timings and subtitles
    segment_parts: list[int] = field(default_factory=list)  # per segment, its _Part index
    parts: list[_Part] = field(default_factory=list)
    normalized_text: str = ""
    seeds: list[int] = field(default_factory=list)  # per segment, as the scheduler's SegmentWork carries them
    segment_turns: list[tuple[_TurnPiece, ...]] = field(default_factory=list)  # per segment; () = not a dialogue row
    audio_stream: AudioStream | None = None
    # continuous batching, per segment: audio decoded so far, samples of a restarted run to skip (already streamed),
    # when its row was admitted, and the most rows its batch held
    partial: list[list[np.ndarray]] = field(default_factory=list)
    skip_samples: list[int] = field(default_factory=list)
    started_s: list[float] = field(default_factory=list)

    @property
    def num_segments(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class _Part:
    """A piece of a request's text run through the front end on its own: a chapter, or a dialogue turn."""

    text: str
    chapter: int = 0
    title: str | None = None
    speaker: int | None = None  # index into request.speakers
    target_s: float | None = None  # a dubbing cue's target length (SynthesisParams.segment_durations_s)


@dataclass(frozen=True)
class _TurnPiece:
    """One front-end segment of a dialogue turn inside a dialogue row (``ModelFacts.max_dialogue_speakers``)."""

    speaker: int  # index into request.speakers
    model_text: str
    source_text: str


@dataclass
class _RequestText:
    """The front end's output for a whole request: its parts' segments in order, and which part each came from.
    ``texts`` / ``source_texts`` / ``pauses_after_ms`` are per segment; ``segment_turns[i]`` is empty, or the turn
    pieces segment ``i`` speaks in one generation (a dialogue row)."""

    normalized_text: str
    texts: list[str]
    source_texts: list[str]
    pauses_after_ms: list[int]
    warnings: list[str]
    segment_parts: list[int]
    parts: list[_Part]
    segment_turns: list[tuple[_TurnPiece, ...]]


def _turn_lines(pieces: tuple[_TurnPiece, ...], speakers) -> tuple[tuple[str, str], ...]:
    """(speaker name, source text) per turn of a dialogue row, consecutive pieces of one speaker joined."""
    lines: list[tuple[int, list[str]]] = []
    for piece in pieces:
        if lines and lines[-1][0] == piece.speaker:
            lines[-1][1].append(piece.source_text)
        else:
            lines.append((piece.speaker, [piece.source_text]))
    return tuple((speakers[k].name, join_pieces(texts)) for k, texts in lines)


def _request_parts(request: SynthesisRequest) -> list[_Part]:
    """Dialogue turns (each its own part, with its speaker), else the text's chapters (``tts_app.longform``)."""
    from tts_app.longform import split_chapters

    if request.turns:
        if request.params.segment_durations_s is not None:
            raise InputError("segment_durations_s is for plain text (one target per line); for a dialogue give the "
                             "whole request's duration_s instead")
        return [_Part(turn.text, 0, None, turn.speaker) for turn in request.turns]
    targets = request.params.segment_durations_s
    if targets is not None:  # dubbing cues: each non-blank line its own segment, with its target length
        lines = [line for line in request.text.splitlines() if line.strip()]
        if len(lines) != len(targets):
            raise InputError(f"segment_durations_s gives {len(targets)} duration(s) but the text has {len(lines)} "
                             "non-blank line(s); give one duration per line")
        return [_Part(line, 0, None, None, float(target)) for line, target in zip(lines, targets)]
    return [_Part(c.text, i, c.title) for i, c in enumerate(split_chapters(request.text))]


def _prepare_text(text: str, *, supports_pinyin: bool, max_segment_chars: int, default_pause_ms: int,
                  control_tags: tuple[str, ...] = (), unencodable_characters=None, measure=None,
                  max_segment_units: int | None = None):
    """The text front end (``tts_app.frontend.prepare_text``), sentences packed up to the segment limits."""
    from tts_app.frontend import prepare_text

    return prepare_text(text, supports_pinyin=supports_pinyin, max_segment_chars=max_segment_chars,
                        default_pause_ms=default_pause_ms, control_tags=control_tags,
                        unencodable_characters=unencodable_characters, measure=measure,
                        max_segment_units=max_segment_units)


# ISO 639-1 code -> language name in messages, for the languages the text front end tells apart.
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def segment_languages(text: str) -> set[str]:
    """Languages ("zh", "en") of the letters in ``text``: Chinese characters are "zh", Latin letters "en" (the text
    front end's ``language_runs``); digits, punctuation and symbols alone count as no language."""
    from tts_app.frontend.normalize import language_runs

    return {lang for lang, run in language_runs(text, "en") if any(ch.isalpha() for ch in run)}


def language_warnings(source_texts: list[str], languages: tuple[str, ...], model_name: str) -> list[str]:
    """One warning per language of ``source_texts`` (segment texts, in order) that is not in ``languages`` (the
    model's training languages), naming the segments (1-based) written in it.

    Why a warning and not a refusal: the speech of an untrained language is unreliable (mispronounced or garbled)
    but not always useless (an English sentence with one Chinese name still comes out mostly right), the language of
    a mixed segment is a guess from its script, and refusing would fail whole job lines or requests the user may
    still want. So the request runs and the result (UI, CLI, job line) says what to expect.
    """
    trained = set(languages)
    found: dict[str, list[int]] = {}
    for i, text in enumerate(source_texts):
        for lang in sorted(segment_languages(text) - trained):
            found.setdefault(lang, []).append(i + 1)
    trained_names = " and ".join(f"{LANGUAGE_NAMES.get(code, code)} ({code})" for code in languages)
    warnings = []
    for lang, segments in found.items():
        name = f"{LANGUAGE_NAMES.get(lang, lang)} ({lang})"
        if len(segments) == len(source_texts):
            where = "the text is"
        elif len(segments) == 1:
            where = f"segment {segments[0]} is"
        else:
            where = f"segments {', '.join(map(str, segments))} are"
        language, first = LANGUAGE_NAMES.get(lang, lang), LANGUAGE_NAMES.get(languages[0], languages[0])
        warnings.append(f"{where} in {name}, but {model_name} was trained on {trained_names} only: expect "
                        f"mispronounced or garbled speech there. Use a model trained on {language}, or write that "
                        f"text in {first}.")
    return warnings


def cap_warning(index: int, text: str, audio_s: float, max_new_tokens: int) -> str:
    """The warning for segment ``index`` (0-based) cut at its ``max_new_tokens`` cap after ``audio_s`` s of audio."""
    return (f"segment {index + 1} ({text[:40]!r}) hit the {round(audio_s, 1):g} s cap (max_new_tokens="
            f"{max_new_tokens}) and was cut off; shorten it (max_segment_chars) or raise max_new_tokens")


@dataclass(frozen=True)
class _DeviceRow:
    """One row of a batch's device work: the adapter's row and its expected decode steps (``SegmentWork``), from
    which a ZeroGPU call's duration is sized."""

    row: AdapterRow
    expected_steps: int


class Engine:
    """Batches segments of many requests on one model, sized from memory, surviving out-of-memory.

    Args:
        adapter: a loaded ``TTSAdapter`` (its ``device`` attribute, when present, picks the memory probe).
        config: ``EngineConfig`` (batching, memory, OOM testing aids).
        memory_probe: device-memory probe; None = CUDA probe for a CUDA adapter, else CPU probe (no device budget).
        bucketing: length bucketing in the scheduler (False = FIFO; for comparisons).
        continuous: batch per decode step (None = when the adapter has a step interface and not on ZeroGPU;
            False = request-level batching on a step adapter, for comparisons). Raises ValueError when True for an
            adapter without a step interface, or on ZeroGPU (a ``spaces.GPU`` call cannot hold a running batch).
        preempt: continuous batching: an interactive segment arriving while job rows fill the batch takes the place
            of the youngest of them at the next decode step (they restart later, same seed, same audio); False = it
            waits for a free slot (for comparisons; ``Scheduler`` rule d).
        zero_gpu: how a batch's device work is sized into ``spaces.GPU`` calls on a ZeroGPU Space
            (``tts_app.zerogpu``); used only there (``SPACES_ZERO_GPU``), a no-op elsewhere.
    """

    def __init__(self, adapter: TTSAdapter, config: EngineConfig | None = None,
                 memory_probe: MemoryProbe | None = None, *, bucketing: bool = True, continuous: bool | None = None,
                 preempt: bool = True, zero_gpu: ZeroGPUConfig = ZeroGPUConfig()):
        self.adapter = adapter
        self.config = config = config or EngineConfig()  # EngineConfig checks its own values
        self.device = str(getattr(adapter, "device", "cpu"))
        self.probe = memory_probe if memory_probe is not None else probe_for_device(self.device)
        self.estimator = MemoryEstimator(
            kv_bytes_per_position=adapter.facts.kv_bytes_per_position,
            cfg_multiplier=adapter.facts.cfg_multiplier,
            activation_bytes_per_row=config.activation_bytes_per_row,
        )
        self.scheduler = Scheduler(self.estimator.batch_bytes, wait_window_s=config.wait_window_ms / 1000.0,
                                   bucketing=bucketing, max_batch_size=config.max_batch_size,
                                   grow_after_successes=config.grow_after_successes,
                                   observe=self._observe, preempt=preempt)
        # Step interface: continuous batching unless asked for request-level batching (comparisons, benches).
        # Not on ZeroGPU: a spaces.GPU call lends the GPU for one call, while a continuous batch keeps its KV cache on
        # the device across decode steps and requests; there each batch runs whole inside its calls (request-level).
        zero_gpu_hardware = on_zero_gpu()
        self.step_mode = bool(adapter.supports_decode_steps) and not zero_gpu_hardware
        if continuous and not self.step_mode:
            reason = "on ZeroGPU each batch runs inside a spaces.GPU call" if zero_gpu_hardware else "it has no step interface"
            raise ValueError(f"{adapter.display_name} cannot batch continuously: {reason}")
        if zero_gpu_hardware and adapter.supports_decode_steps:
            logger.info("ZeroGPU: %s batches request-level (each batch inside spaces.GPU calls), not per decode step",
                     adapter.display_name)
        self.continuous = self.step_mode if continuous is None else bool(continuous)
        self.prefix_cache = PrefixCache(config.prefix_cache_entries)
        self._cv = threading.Condition()
        self._requests: dict[str, _RequestState] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped_reason = "engine shut down"
        self._busy = False
        self._rng = random.Random(0)  # simulated-OOM draws; seeded so a test run is repeatable
        self._budget_bytes = self._measure_budget()
        self._prefix_bytes_at_measure = 0
        self._used_since_empty = False
        self._num_oom = 0
        self._num_batches = 0
        self._num_segments_done = 0
        self._last_batch_size = 0
        self._num_row_steps = 0
        self._num_padded_row_steps = 0
        self._prefill_s = 0.0
        self._num_requeued = 0
        self._num_preempted = 0
        self._outcomes = {RequestStatus.DONE: 0, RequestStatus.FAILED: 0, RequestStatus.CANCELLED: 0}
        # On ZeroGPU every batch's device work (preprocess -> generate -> postprocess) runs inside spaces.GPU calls
        # sized from the rows' expected decode steps; elsewhere ``wrap`` returns the function itself.
        self.gpu_calls: GpuCalls[_DeviceRow, tuple[np.ndarray, StopReason]] = GpuCalls(
            zero_gpu, lambda rows, _params: [row.expected_steps for row in rows])
        self._rows_on_device = self.gpu_calls.wrap(self._run_rows)

    @property
    def batch_cap(self) -> BatchCap:
        """The scheduler's batch cap (halved on OOM, grows back; ceiling ``--max-batch-size``)."""
        return self.scheduler.batch_cap

    def _observe(self, row_positions, measured_peak_bytes: int) -> bool:
        """Calibration hook for the scheduler's update step (``MemoryEstimator.observe``), logged when it learns."""
        estimate = self.estimator.batch_bytes(row_positions)
        raised = self.estimator.observe(row_positions, measured_peak_bytes)
        if raised:
            logger.info("a batch of %d rows peaked at %s against an estimate of %s; activation estimate raised "
                        "to %.2f x the KV cache", len(row_positions), format_bytes(measured_peak_bytes),
                        format_bytes(estimate), self.estimator.activation_kv_ratio)
        return raised

    # -- facts ---------------------------------------------------------------------------------------------------
    @property
    def facts(self) -> ModelFacts:
        return self.adapter.facts

    @property
    def sampling_rate(self) -> int:
        """Hz of every result's audio (and of the reference audio requests must carry)."""
        return self.adapter.facts.sampling_rate

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> "Engine":
        """Start the model worker thread (idempotent). Returns self."""
        with self._cv:
            if self._stopping:
                raise RuntimeError("engine was shut down; build a new Engine")
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="tts-engine-worker", daemon=True)
                self._thread.start()
                _LIVE_ENGINES.add(self)
        return self

    def shutdown(self, wait: bool = True) -> None:
        """Stop the worker after the batch in flight; unfinished requests end CANCELLED ("engine shut down").

        ``wait=True`` (what every command line and the web app use) returns once the worker thread has ended, so
        no thread holding model tensors outlives the caller (see ``_LIVE_ENGINES``); it waits for the batch in
        flight. ``wait=False`` only signals the worker; an atexit hook joins it before the interpreter exits.
        """
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and wait and thread is not threading.current_thread():
            thread.join()
        if thread is None or wait:
            self._cancel_all("engine shut down")
            _LIVE_ENGINES.discard(self)

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown(wait=True)

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Change the server-wide ceiling on rows per batch (the operator's ``--max-batch-size``; see
        ``BatchCap.set_max``: setting the same value again keeps a cap that OOM shrank). The web UI never calls it:
        one user must not change the ceiling for everyone.

        Raises:
            InputError: ``max_batch_size`` < 1.
        """
        if int(max_batch_size) < 1:
            raise InputError(f"max batch size {max_batch_size} must be >= 1")
        with self._cv:
            self.batch_cap.set_max(int(max_batch_size))
            self._cv.notify_all()

    # -- estimates -----------------------------------------------------------------------------------------------
    def _positions(self, text_chars: int, reference_s: float, reference_text_chars: int, max_new_tokens: int) -> int:
        return int(self.adapter.estimate_positions(text_chars, reference_s, reference_text_chars, max_new_tokens))

    def _default_row_bytes(self) -> int:
        f = self.facts
        return self.estimator.row_bytes(self._positions(f.max_segment_chars, DEFAULT_REFERENCE_S, 0,
                                                        f.default_max_new_tokens))

    def _measure_budget(self) -> int | None:
        return memory_budget_bytes(self.probe, memory_budget_bytes=self.config.memory_budget_bytes,
                                   memory_utilization=self.config.memory_utilization,
                                   safety_margin_bytes=self.config.safety_margin_bytes)

    def _rows_budget(self) -> int | None:
        """The budget left for rows: the memory budget less what the prefix cache holds (bounded to
        ``PREFIX_CACHE_BUDGET_SHARE`` of it). A budget measured from free device memory already leaves out what the
        cache held then, so only its growth since is subtracted. Lock held."""
        budget = self._budget_bytes
        if budget is None:
            return None
        self.prefix_cache.trim(int(budget * PREFIX_CACHE_BUDGET_SHARE))
        held = self.prefix_cache.num_bytes
        if self.config.memory_budget_bytes is None:
            held -= self._prefix_bytes_at_measure
        return max(0, budget - max(0, held))

    def _remeasure_budget(self) -> None:
        """Measure the budget now (nothing of ours is running). Lock held."""
        self._budget_bytes = self._measure_budget()
        self._prefix_bytes_at_measure = self.prefix_cache.num_bytes

    def estimate_request_bytes(self, request: SynthesisRequest) -> int:
        """Estimated bytes (KV cache + activations) the request's longest segment needs as a batch of one: the
        least memory that can serve it. Weights are not included (already resident).

        Raises:
            InputError: the text is empty or unspeakable (from the front end).
        """
        texts = self._segments_of(request).texts
        ref_s, ref_chars, max_new = self._row_context(request)
        return max(self.estimator.row_bytes(self._positions(len(t), ref_s, ref_chars, max_new)) for t in texts)

    def stats(self) -> EngineStats:
        with self._cv:
            default_row = self._default_row_bytes()
            budget = self._budget_bytes
            return EngineStats(
                batch_cap=self.batch_cap.cap,
                max_batch_size=self.batch_cap.max_batch_size,
                num_oom=self._num_oom,
                num_batches=self._num_batches,
                queue_depth=self.scheduler.num_waiting,
                num_requests_active=len(self._requests),
                num_requests_done=self._outcomes[RequestStatus.DONE],
                num_requests_failed=self._outcomes[RequestStatus.FAILED],
                num_requests_cancelled=self._outcomes[RequestStatus.CANCELLED],
                num_segments_done=self._num_segments_done,
                last_batch_size=self._last_batch_size,
                busy=self._busy,
                memory_budget_bytes=budget,
                device=self.device,
                device_total_bytes=self.probe.total_bytes(),
                default_row_bytes=default_row,
                max_rows_in_budget=None if budget is None else budget // max(1, default_row),
                num_cap_shrinks=self.batch_cap.num_shrinks,
                num_cap_grows=self.batch_cap.num_grows,
                continuous=self.continuous,
                num_row_steps=self._num_row_steps,
                num_padded_row_steps=self._num_padded_row_steps,
                prefill_s=self._prefill_s,
                num_requeued=self._num_requeued, num_preempted=self._num_preempted,
                prefix_cache_bytes=self.prefix_cache.num_bytes,
                prefix_cache_hits=self.prefix_cache.num_hits,
                prefix_cache_misses=self.prefix_cache.num_misses,
            )

    # -- submit / cancel -----------------------------------------------------------------------------------------
    def _segments_of(self, request: SynthesisRequest) -> _RequestText:
        """The front end's output for the request: normalised text and segments (each with the model text, which
        may hold homophone stand-ins or pinyin tokens, the source text the user wrote, for subtitles, and the pause
        after it in ms) and warnings. Each chapter or dialogue turn (``_request_parts``) goes through the front end
        on its own; the last segment of a chapter is followed by ``chapter_pause_ms``, that of a turn by the usual
        pause.

        Raises:
            InputError: the text has nothing to speak; a turn names a speaker the request does not have.
        """
        import dataclasses

        params = request.params
        # The model's own segment unit and limit (``ModelFacts.max_segment_chars`` / ``max_segment_tokens``); a
        # request's max_segment_chars is the user's own character limit instead of the model's (0 or None = none;
        # a token limit still applies).
        max_chars = params.max_segment_chars or self.facts.max_segment_chars
        measure = self.adapter.segment_measure() if self.facts.max_segment_tokens else None
        parts = _request_parts(request)
        segments, warnings, normalized, owners = [], [], [], []
        for index, part in enumerate(parts):
            if part.speaker is not None and not 0 <= part.speaker < len(request.speakers):
                raise InputError(f"turn {index + 1} names speaker {part.speaker + 1} but the dialogue has "
                                 f"{len(request.speakers)} speaker(s)")
            prepared = _prepare_text(part.text, supports_pinyin=self.facts.supports_pinyin,
                                     max_segment_chars=max_chars, default_pause_ms=params.pause_between_segments_ms,
                                     control_tags=self.facts.control_tags,
                                     unencodable_characters=self.adapter.unencodable_characters,
                                     measure=measure, max_segment_units=self.facts.max_segment_tokens)
            if part.target_s is not None and not prepared.segments:
                raise InputError(f"line {index + 1} ({part.text.strip()[:40]!r}) has a target duration but nothing to "
                                 "speak; give it words or remove the line and its duration")
            if not prepared.segments:
                if len(parts) > 1 and part.speaker is not None:
                    raise InputError(f"turn {index + 1} has nothing to speak; give it some words or remove it")
                continue
            part_segments = list(prepared.segments)
            if part.target_s is not None and len(part_segments) != 1:
                raise InputError(f"line {index + 1} ({part.text.strip()[:40]!r}) has a target duration but would be "
                                 f"split into {len(part_segments)} segments (longer than {max_chars} characters); "
                                 "shorten it, split it into lines with a duration each, or raise max_segment_chars")
            if index < len(parts) - 1:  # the pause after a part: a chapter's is longer
                last_pause = (params.chapter_pause_ms if part.speaker is None and part.target_s is None
                              else max(part_segments[-1].pause_after_ms, params.pause_between_segments_ms))
                part_segments[-1] = dataclasses.replace(part_segments[-1], pause_after_ms=last_pause)
            segments += part_segments
            owners += [index] * len(part_segments)
            warnings += list(prepared.warnings)
            normalized.append(prepared.normalized_text)
        if not segments:
            raise InputError("the text has nothing to speak; type some words")
        silence_s = sum(int(seg.pause_after_ms) for seg in segments[:-1]) / 1000.0
        if silence_s > REQUEST_LIMITS.max_silence_s:  # e.g. [pause:10s] after every word
            from tts_app.frontend.messages import Notice

            raise InputError(Notice("limit_silence", value_s=round(silence_s, 1), max_s=REQUEST_LIMITS.max_silence_s))
        out = _RequestText(normalized_text="\n\n".join(normalized), texts=[seg.text for seg in segments],
                           source_texts=[seg.source_text for seg in segments],
                           pauses_after_ms=[int(seg.pause_after_ms) for seg in segments], warnings=warnings,
                           segment_parts=owners, parts=parts, segment_turns=[()] * len(segments))
        if request.turns and self.facts.max_dialogue_speakers:
            if self._dialogue_rows(request):
                return self._pack_dialogue(out, max_chars)
            warnings.append(f"{self.adapter.display_name}'s dialogue prompt takes at most "
                            f"{self.facts.max_dialogue_speakers} speakers; with {len(request.speakers)} each turn is "
                            "synthesised on its own with its speaker's voice")
        return out

    def _dialogue_rows(self, request: SynthesisRequest) -> bool:
        """The request is a dialogue the family speaks from its own multi-speaker prompt (dialogue rows)."""
        return bool(request.turns) and 0 < len(request.speakers) <= self.facts.max_dialogue_speakers

    @staticmethod
    def _pack_dialogue(text: _RequestText, max_chars: int) -> _RequestText:
        """Pack the turns' segments, in order, into dialogue rows of at most ``max_chars`` characters
        (``tts_app.dialogue.pack_turn_pieces``); a row's pause is its last piece's."""
        from tts_app.dialogue import pack_turn_pieces

        groups = pack_turn_pieces([len(t) for t in text.texts], max_chars)
        pieces = [_TurnPiece(text.parts[part].speaker, model, source)
                  for part, model, source in zip(text.segment_parts, text.texts, text.source_texts)]
        return _RequestText(
            normalized_text=text.normalized_text,
            texts=["\n".join(text.texts[i] for i in group) for group in groups],
            source_texts=["\n".join(text.source_texts[i] for i in group) for group in groups],
            pauses_after_ms=[text.pauses_after_ms[group[-1]] for group in groups], warnings=text.warnings,
            segment_parts=[text.segment_parts[group[0]] for group in groups], parts=text.parts,
            segment_turns=[tuple(pieces[i] for i in group) for group in groups])

    def _row_context(self, request: SynthesisRequest) -> tuple[float, int, int]:
        """(reference seconds, reference-text characters, decode-step cap) a row of the request may carry: for a
        dialogue, its longest speaker reference (every row is estimated as the largest); for dialogue rows, all
        speakers' references together (each row's prompt holds every voice)."""
        if request.turns:
            voices = [(s.reference_audio, s.reference_text) for s in request.speakers]
        else:
            voices = [(request.reference_audio, request.reference_text)]
        seconds = [ref.duration_s for ref, _ in voices if ref is not None]
        chars = [len(text or "") for _, text in voices]
        together = self._dialogue_rows(request)
        ref_s = sum(seconds) if together else max(seconds, default=0.0)
        ref_chars = sum(chars) if together else max(chars, default=0)
        return ref_s, ref_chars, int(self.adapter.max_new_tokens(request.params))

    def _too_large_message(self, request: SynthesisRequest, index: int, text: str, budget: int) -> str:
        ref_s, ref_chars, max_new = self._row_context(request)
        need = self.estimator.row_bytes(self._positions(len(text), ref_s, ref_chars, max_new))
        fit_chars = max_text_chars_for_budget(
            lambda n: self.estimator.row_bytes(self._positions(n, ref_s, ref_chars, max_new)), budget,
            upper_chars=max(len(text), 1))
        head = (f"out of memory (estimated): segment {index + 1} ({len(text)} characters) needs "
                f"{format_bytes(need)} but the memory budget is {format_bytes(budget)}")
        if fit_chars > 0:
            return (f"{head}; segments of at most {fit_chars} characters fit — shorten the text or set "
                    f"max_segment_chars <= {max(MIN_MAX_SEGMENT_CHARS, fit_chars)}, or lower max_new_tokens (now {max_new})")
        return (f"{head}; even an empty segment does not fit with max_new_tokens={max_new} and a {ref_s:.1f} s "
                "reference — lower max_new_tokens, use a shorter reference, or raise the memory budget")

    def submit(self, request: SynthesisRequest,
               on_progress: Callable[[ProgressEvent], None] | None = None, *, stream: bool = False,
               on_audio: Callable[[AudioChunk], None] | None = None) -> RequestHandle:
        """Queue a request (runs the text front end here, in the caller's thread). Work queued before ``start()``
        waits for it. Never raises for a bad request: the handle's result is FAILED with ``error`` instead.

        Args:
            request: the synthesis; ``reference_audio`` must be at ``engine.sampling_rate``.
            on_progress: called once here (``segments_done=0, batch_size=0``, in the caller's thread), then from
                the worker thread after each batch or step that finished a segment of this request.
            stream: deliver the audio while it is decoded: iterate ``handle.stream()`` (``AudioChunk``s in order,
                concatenating to the final audio; see ``tts_app.engine.streaming``).
            on_audio: called with each ``AudioChunk`` from the worker thread (implies ``stream``); keep it quick.
        """
        handle = RequestHandle(request.request_id, self)
        try:
            prepared = self._segments_of(request)
            texts, pauses, source_texts = prepared.texts, prepared.pauses_after_ms, prepared.source_texts
            warnings = list(prepared.warnings)
            for ref in [request.reference_audio] + [speaker.reference_audio for speaker in request.speakers]:
                if ref is None or int(ref.sampling_rate) == self.sampling_rate:
                    continue
                raise ReferenceAudioError(
                    f"reference audio is at {ref.sampling_rate} Hz but the model needs {self.sampling_rate} Hz; "
                    "clean it with tts_app.audio.reference.prepare_reference(path, "
                    f"target_sampling_rate={self.sampling_rate})")
            self._check_emotion(request)
        except TTSAppError as exc:
            if stream or on_audio is not None:
                handle._audio_stream = AudioStream(request.request_id, self.sampling_rate, [], on_audio)
                handle._audio_stream.close()
            handle.future.set_result(self._failed_result(request, str(exc)))
            with self._cv:
                self._outcomes[RequestStatus.FAILED] += 1
            return handle

        # Resolved once here: "not given" and "given as the default" then share batches, and the result records
        # what really ran.
        params = self.adapter.resolve(request.params)
        warnings += language_warnings(source_texts, self.facts.languages, self.adapter.display_name)
        ref_s, ref_chars, max_new = self._row_context(request)
        now = time.monotonic()
        works: list[SegmentWork] = []
        for i, text in enumerate(texts):
            steps = max(1, min(max_new, math.ceil(expected_speech_s(text) * self.facts.frames_per_second)))
            works.append(SegmentWork(
                request_id=request.request_id, index=i, text=text, seed=params.seed + i,
                batch_key=params.batch_key(), priority=request.priority, expected_steps=steps,
                row_positions=self._positions(len(text), ref_s, ref_chars, max_new), arrival_s=now,
                max_steps=max_new,
            ))
        audio_stream = None
        if stream or on_audio is not None:
            # settings that need the whole clip (tempo, duration, loudness): no partial chunks, only the final audio
            audio_stream = AudioStream(request.request_id, self.sampling_rate, pauses, on_audio,
                                       live=not params.needs_whole_clip)
            handle._audio_stream = audio_stream
        n = len(texts)
        state = _RequestState(request=request, handle=handle, texts=texts, pauses_after_ms=pauses,
                              on_progress=on_progress, params=params, warnings=warnings, waves=[None] * n,
                              batch_sizes=[0] * n, generate_s=[0.0] * n,
                              stop_reasons=[StopReason.END_OF_SPEECH] * n, source_texts=source_texts,
                              normalized_text=prepared.normalized_text, seeds=[w.seed for w in works],
                              segment_parts=prepared.segment_parts, parts=prepared.parts,
                              segment_turns=prepared.segment_turns,
                              audio_stream=audio_stream, partial=[[] for _ in range(n)], skip_samples=[0] * n,
                              started_s=[0.0] * n)
        error = None
        with self._cv:
            budget = self._budget_bytes
            if self._stopping:
                error = self._stopped_reason
            elif budget is not None:
                for w in works:
                    if self.estimator.batch_bytes([w.row_positions]) > budget:
                        error = self._too_large_message(request, w.index, w.text, budget)
                        break
            if error is None:
                self._requests[request.request_id] = state
                self.scheduler.add(works)
                self._cv.notify_all()
            else:
                self._outcomes[RequestStatus.FAILED] += 1
        if error is not None:
            logger.info("request %s rejected: %s", request.request_id, error)
            if audio_stream is not None:
                audio_stream.close()
            handle.future.set_result(self._failed_result(request, error, warnings))
        elif on_progress is not None:
            try:  # tell the caller the segment count at once (batch_size 0: nothing has run yet)
                on_progress(ProgressEvent(request.request_id, 0, len(texts), 0))
            except Exception:  # noqa: BLE001 - a caller's callback must not break submission
                logger.exception("progress callback of request %s raised", request.request_id)
        return handle

    def _check_emotion(self, request: SynthesisRequest) -> None:
        """Refuse emotion control the loaded family does not have (``ModelFacts.supports_emotion`` /
        ``supports_emotion_text``), and an emotion clip at the wrong sampling rate.

        Raises:
            InputError: emotion control on a family without it, or emotion from text without an emotion model.
            ReferenceAudioError: the emotion clip is not at ``engine.sampling_rate``.
        """
        emotion = request.emotion
        if emotion is None:
            return
        check_emotion_support(self.facts, getattr(self.adapter, "display_name", self.facts.family),
                              from_text=emotion.from_text)
        clip = emotion.reference_audio
        if clip is not None and int(clip.sampling_rate) != self.sampling_rate:
            raise ReferenceAudioError(
                f"emotion reference audio is at {clip.sampling_rate} Hz but the model needs {self.sampling_rate} Hz; "
                f"clean it with tts_app.audio.reference.prepare_reference(path, "
                f"target_sampling_rate={self.sampling_rate})")

    @staticmethod
    def _row_emotion(request: SynthesisRequest) -> RowEmotion | None:
        """The request's emotion control as adapters take it: the clip as samples, and for emotion from text the
        request's whole text when it gave no text of its own (IndexTTS 2's ``infer`` reads the emotion of the whole
        input, not of each segment)."""
        emotion = request.emotion
        if emotion is None:
            return None
        clip = emotion.reference_audio
        text = None
        if emotion.from_text:
            text = emotion.text if emotion.text is not None else request.text
        return RowEmotion(reference_audio=None if clip is None else clip.samples, vector=emotion.vector,
                          weight=emotion.weight, text=text)

    def _failed_result(self, request: SynthesisRequest, error: str, warnings: list[str] | None = None,
                       status: RequestStatus = RequestStatus.FAILED) -> SynthesisResult:
        return SynthesisResult(request_id=request.request_id, status=status, sampling_rate=self.sampling_rate,
                               error=error, warnings=list(warnings or []))

    def _finish_locked(self, state: _RequestState, status: RequestStatus, error: str | None,
                       resolved: list) -> None:
        """Mark a request finished (lock held); its future is resolved later, outside the lock."""
        if state.finished:
            return
        state.finished = True
        self._requests.pop(state.request.request_id, None)
        self.scheduler.remove_request(state.request.request_id)
        self._outcomes[status] += 1
        if status is RequestStatus.DONE:
            # assembled in ``_resolve``, outside the lock: joining and post-processing (tempo, loudness) of a long
            # request takes a while and must not hold up submitters or the scheduler
            resolved.append((state.handle.future, state, state.audio_stream))
        else:
            result = self._failed_result(state.request, error or status.value, state.warnings, status)
            resolved.append((state.handle.future, result, state.audio_stream))

    def _resolve(self, resolved: list[tuple[Future, SynthesisResult | _RequestState, AudioStream | None]]) -> None:
        """Outside the lock: assemble DONE requests (join, tempo, loudness), deliver pending audio chunks (a request
        that did not stream gets its final audio as one chunk), end finished streams, resolve futures (in that order,
        so a stream's consumer sees every chunk before ``result()`` returns)."""
        for future, result, audio_stream in resolved:
            if isinstance(result, _RequestState):
                result = self._assemble(result)
                if not result.ok:
                    with self._cv:
                        self._outcomes[RequestStatus.DONE] -= 1
                        self._outcomes[RequestStatus.FAILED] += 1
                elif audio_stream is not None:
                    audio_stream.finish(result.audio)
            if audio_stream is not None:
                try:
                    audio_stream.flush()
                except Exception:  # noqa: BLE001 - a caller's callback must not stop the worker
                    logger.exception("audio callback of request %s raised", result.request_id)
                audio_stream.close()
            if not future.done():
                future.set_result(result)

    def _cancel(self, request_id: str) -> bool:
        resolved: list = []
        with self._cv:
            state = self._requests.get(request_id)
            if state is None or state.finished:
                return False
            self._finish_locked(state, RequestStatus.CANCELLED, "cancelled", resolved)
            self._cv.notify_all()
        self._resolve(resolved)
        return True

    def _cancel_all(self, reason: str, status: RequestStatus = RequestStatus.CANCELLED) -> None:
        resolved: list = []
        with self._cv:
            for state in list(self._requests.values()):
                self._finish_locked(state, status, reason, resolved)
        self._resolve(resolved)

    def _fail_all(self, reason: str) -> None:
        self._cancel_all(reason, RequestStatus.FAILED)

    def _assemble(self, state: _RequestState) -> SynthesisResult:
        """The DONE result of a request whose segments are all made: segments joined with their pauses, then the
        request's tempo and loudness (``tts_app.audio.effects``); FAILED when its target duration cannot be met."""
        from tts_app.audio.effects import apply_request_effects

        waves = [w for w in state.waves if w is not None]
        params = state.params
        try:
            waves, cues = self._fit_segment_durations(state, waves)
            audio, spans = join_segments(waves, state.pauses_after_ms, self.sampling_rate)
            effects = apply_request_effects(audio, spans, self.sampling_rate, speed=params.speed,
                                            duration_s=params.duration_s, loudness_lufs=params.loudness_lufs)
            if cues:
                effects.applied["segment_durations"] = cues
        except TTSAppError as exc:
            return self._failed_result(state.request, str(exc), state.warnings)
        except Exception as exc:  # noqa: BLE001 - a post-processing bug fails this request only
            logger.exception("request %s: post-processing failed", state.request.request_id)
            return self._failed_result(state.request, f"post-processing failed: {type(exc).__name__}: {exc}",
                                       state.warnings)
        audio, spans = effects.audio, effects.spans
        max_new_tokens = state.params.max_new_tokens
        speakers = state.request.speakers
        timings = []
        for i, (t, (a, b)) in enumerate(zip(state.source_texts, spans)):
            part = state.parts[state.segment_parts[i]]
            speaker = speakers[part.speaker].name if part.speaker is not None else None
            turns = _turn_lines(state.segment_turns[i], speakers)
            if len({name for name, _ in turns}) > 1:
                speaker = None  # a dialogue row with several speakers: ``turns`` names each
            timings.append(SegmentTiming(
                index=i, text=t, start_s=a, end_s=b, batch_size=state.batch_sizes[i], generate_s=state.generate_s[i],
                seed=state.seeds[i], model_text=state.texts[i], stop_reason=state.stop_reasons[i],
                max_new_tokens=max_new_tokens, chapter=part.chapter, speaker=speaker, turns=turns))
        chapters = []
        if len({t.chapter for t in timings}) > 1:
            for chapter in sorted({t.chapter for t in timings}):
                members = [t for t in timings if t.chapter == chapter]
                chapters.append(ChapterSpan(index=len(chapters), title=state.parts[
                    state.segment_parts[members[0].index]].title, start_s=members[0].start_s,
                    end_s=members[-1].end_s, segments=tuple(t.index for t in members)))
        warnings = list(state.warnings) + list(effects.warnings)
        for i, wave in enumerate(waves):
            if state.stop_reasons[i] is StopReason.MAX_NEW_TOKENS:
                audio_s = wave.size / self.sampling_rate if wave.size else max_new_tokens / self.facts.frames_per_second
                warnings.append(cap_warning(i, state.source_texts[i], audio_s, max_new_tokens))
            elif wave.size == 0:
                warnings.append(f"segment {i + 1} ({state.source_texts[i][:40]!r}) produced no audio: the model ended "
                                "speech at once; try another seed, sampling instead of greedy, or a longer segment")
        return SynthesisResult(request_id=state.request.request_id, status=RequestStatus.DONE, audio=audio,
                               sampling_rate=self.sampling_rate, segments=timings, warnings=warnings,
                               normalized_text=state.normalized_text, effective_params=state.params,
                               post_processing=effects.applied, chapters=chapters)

    def _fit_segment_durations(self, state: _RequestState, waves: list[np.ndarray]
                               ) -> tuple[list[np.ndarray], list[dict]]:
        """Each segment of a line with a target duration (``SynthesisParams.segment_durations_s``) stretched to
        exactly that length, pitch kept (``tts_app.audio.effects.apply_tempo``) -> (waves, per such segment a record
        for the sidecar: ``segment`` (1-based), ``target_s``, ``speed``, ``duration_before_s``).

        Raises:
            InputError: a line's factor is outside the speed range (the message names the line and what fits).
        """
        from tts_app.audio.effects import apply_tempo

        if state.params.segment_durations_s is None:
            return waves, []
        out, cues = [], []
        for i, wave in enumerate(waves):
            target = state.parts[state.segment_parts[i]].target_s
            if target is None:
                out.append(wave)
                continue
            try:
                tempo = apply_tempo(wave, self.sampling_rate, duration_s=target)
            except InputError as exc:
                raise InputError(f"line {i + 1} ({state.source_texts[i][:40]!r}): {exc}") from None
            out.append(tempo.audio)
            cues.append({"segment": i + 1, "target_s": target, "speed": round(tempo.speed, 4),
                         "duration_before_s": round(tempo.duration_before_s, 4)})
        return out, cues

    # -- worker --------------------------------------------------------------------------------------------------
    def _worker(self) -> None:
        try:
            if self.step_mode:
                self._serve_steps()
            else:
                self._serve_batches()
        except BaseException as exc:  # a bug in the loop itself: fail everything rather than leave callers hanging
            logger.exception("engine worker crashed")
            reason = f"engine worker crashed: {type(exc).__name__}: {exc}"
            with self._cv:
                self._stopping = True
                self._stopped_reason = reason
            self._fail_all(reason)
            raise
        self._cancel_all("engine shut down")

    def _idle_wait(self, idle_since: float | None) -> tuple[float, bool]:
        """Nothing to run (lock held): wait for work; after ``empty_cache_when_idle_s`` idle seconds since the last
        batch, return True so the caller empties the device cache outside the lock. Returns (idle since, empty)."""
        if idle_since is None:
            idle_since = time.monotonic()
        idle_for = time.monotonic() - idle_since
        if self._used_since_empty and idle_for >= self.config.empty_cache_when_idle_s:
            self._used_since_empty = False
            return idle_since, True
        timeout = max(0.0, self.config.empty_cache_when_idle_s - idle_for) if self._used_since_empty else None
        self._cv.wait(timeout=timeout)
        return idle_since, False

    def _fail_too_large(self, works: list[SegmentWork], resolved: list) -> None:
        for work in works:
            state = self._requests.get(work.request_id)
            if state is not None:
                msg = self._too_large_message(state.request, work.index, work.text, self._budget_bytes or 0)
                logger.warning("request %s: %s", work.request_id, msg)
                self._finish_locked(state, RequestStatus.FAILED, msg, resolved)

    def _simulated_oom(self, batch_size: int) -> BaseException | None:
        """The testing aids: a real ``torch.OutOfMemoryError`` for batches above ``simulate_oom_above_batch`` rows,
        or with ``simulate_oom_probability`` for batches of more than one row. None = no simulated OOM."""
        cfg = self.config
        if cfg.simulate_oom_above_batch is not None and batch_size > cfg.simulate_oom_above_batch:
            return make_simulated_oom(batch_size, f"simulate_oom_above_batch={cfg.simulate_oom_above_batch}")
        if cfg.simulate_oom_probability > 0 and batch_size > 1 and self._rng.random() < cfg.simulate_oom_probability:
            return make_simulated_oom(batch_size, f"simulate_oom_probability={cfg.simulate_oom_probability}")
        return None

    def _probe_reading(self, name: str) -> int | None:
        reader = getattr(self.probe, name, None)  # optional probe methods (older/custom probes may lack them)
        return reader() if reader is not None else None

    def _run_phase(self, phase: Phase, rows: list[SegmentWork], call: Callable[[], Any]) -> tuple[Outcome, Any]:
        """Run ``call`` (a batch, a prefill or a decode step over ``rows``) and describe how it ended as a plain
        ``Outcome`` (its ``finished`` is filled by the caller). Returns (outcome, what ``call`` returned or None).
        After an out-of-memory error the device cache and the prefix cache are freed."""
        ids = ", ".join(sorted({w.request_id for w in rows}))
        allocated_before, peak_before = self._probe_reading("allocated_bytes"), self._probe_reading("peak_bytes")
        kind, error, value = OutcomeKind.OK, "", None
        try:
            value = call()
        except Exception as exc:  # noqa: BLE001 - the worker must survive any batch
            if is_out_of_memory(exc):
                kind = OutcomeKind.OOM
                logger.warning("out of memory in %s of %d rows (requests %s): %s", phase.value, len(rows), ids, exc)
            elif isinstance(exc, TTSAppError):  # the adapter refused these rows on purpose, with a message
                kind, error = OutcomeKind.REFUSED, str(exc)
                # INFO, not WARNING: the message reaches every request's result (the CLI prints it, the UI shows
                # it), so a WARNING here would show the user the same error twice.
                logger.info("%s of %d rows refused (requests %s): %s", phase.value, len(rows), ids, error)
            else:
                # The bare cause: every door frames it once in its user's language ("Synthesis failed (request
                # ..., seed ...): <cause>" in the UI table, "request ... failed: <cause>" in the API, "error:
                # <cause>" in the CLI), so it must not say "synthesis failed" itself.
                kind, error = OutcomeKind.CRASHED, f"{type(exc).__name__}: {exc}"
                if len(rows) > 1:
                    # one line, no traceback: each row now runs alone, and the request whose row still fails
                    # logs its traceback then, once, under its own id
                    logger.warning("%s of %d rows failed (requests %s): %s; running each row alone", phase.value,
                                   len(rows), ids, error)
                else:
                    # the request's one traceback in the server log, under the id its user is shown
                    logger.error("request %s failed (segment %d): %s", rows[0].request_id, rows[0].index + 1,
                                 error, exc_info=exc)
            del exc  # drop the traceback (and the tensors its frames hold) before freeing memory
        if kind is OutcomeKind.OOM:
            with self._cv:
                self._num_oom += 1
                self.prefix_cache.clear()
            free_after_oom(self.probe)
        measured = None
        peak_after = self._probe_reading("peak_bytes")
        if kind is OutcomeKind.OK and None not in (allocated_before, peak_before, peak_after) \
                and peak_after > peak_before:
            measured = peak_after - allocated_before  # a new high-water mark: this call's exact peak
        return Outcome(phase=phase, kind=kind, rows=tuple(rows), error=error, measured_peak_bytes=measured), value

    def _apply_update(self, update: Update, resolved: list, events: list, *, batch_size: int,
                      generate_s: dict[int, float] | None = None) -> None:
        """Carry out the scheduler's ``Update`` (lock held): store finished rows' audio, fail failed rows, note
        requeued ones. ``generate_s``: per finished row (``id``), its seconds (default: since it was admitted)."""
        self._num_requeued += len(update.requeued)
        after_oom = [w for w in update.requeued if not w.isolate]
        isolated = [w for w in update.requeued if w.isolate]
        if after_oom:
            logger.warning("requeued %d rows after out of memory (requests %s); cap -> %d", len(after_oom),
                           ", ".join(sorted({w.request_id for w in after_oom})), update.cap)
        if isolated:
            logger.info("retrying the %d rows of a failed batch one by one (requests %s)", len(isolated),
                        ", ".join(sorted({w.request_id for w in isolated})))
        for work in update.requeued:
            state = self._requests.get(work.request_id)
            if state is not None and not state.finished:
                self._restart_segment(state, work.index)
        for work, message in update.failed:
            state = self._requests.get(work.request_id)
            if state is not None and not state.finished:
                # INFO, not WARNING: the message reaches the request's result (the CLI prints it, the UI shows it),
                # and _run_phase already logged the out-of-memory error or crash that caused it.
                logger.info("request %s failed: %s", work.request_id, message)
                self._finish_locked(state, RequestStatus.FAILED, message, resolved)
        touched: dict[str, _RequestState] = {}
        now = time.perf_counter()
        for work, reason in update.finished:
            state = self._requests.get(work.request_id)
            if state is None or state.finished or state.waves[work.index] is not None:
                continue
            wave = np.concatenate(state.partial[work.index]) if state.partial[work.index] else \
                np.zeros(0, dtype=np.float32)
            state.partial[work.index] = []
            state.waves[work.index] = wave
            state.stop_reasons[work.index] = reason
            state.batch_sizes[work.index] = max(state.batch_sizes[work.index], batch_size)
            state.generate_s[work.index] = (generate_s or {}).get(id(work), now - state.started_s[work.index])
            state.num_done += 1
            self._num_segments_done += 1
            if state.audio_stream is not None:
                state.audio_stream.complete(work.index)
            touched[work.request_id] = state
        for state in touched.values():
            if state.on_progress is not None:
                events.append((state.on_progress, ProgressEvent(state.request.request_id, state.num_done,
                                                                state.num_segments, batch_size)))
            if state.num_done == state.num_segments:
                self._finish_locked(state, RequestStatus.DONE, None, resolved)

    def _restart_preempted(self, preempted: list[SegmentWork]) -> None:
        """Running rows the scheduler took out for a more urgent segment (lock held): they restart their segment
        (the engine releases them from the running batch with the cancelled rows)."""
        if not preempted:
            return
        self._num_preempted += len(preempted)
        logger.info("%d job rows (requests %s) make room for an interactive request; they restart later",
                    len(preempted), ", ".join(sorted({w.request_id for w in preempted})))
        for work in preempted:
            state = self._requests.get(work.request_id)
            if state is not None and not state.finished:
                self._restart_segment(state, work.index)

    def _restart_segment(self, state: _RequestState, index: int) -> None:
        """A row requeued (after OOM, or preempted) restarts its segment: drop its decoded audio, except what was
        already streamed (kept; the new run skips that many samples, see module docstring). Lock held."""
        emitted = state.audio_stream.emitted_samples[index] if state.audio_stream is not None else 0
        if emitted:
            kept = np.concatenate(state.partial[index])[:emitted]
            state.partial[index] = [kept]
        else:
            state.partial[index] = []
        state.skip_samples[index] = emitted
        if state.audio_stream is not None:
            state.audio_stream.restart(index)

    def _add_audio(self, state: _RequestState, index: int, samples: np.ndarray) -> None:
        """New decoded samples of segment ``index`` (lock held): skip what a restarted run already streamed."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        skip = state.skip_samples[index]
        if skip:
            cut = min(skip, samples.size)
            samples = samples[cut:]
            state.skip_samples[index] = skip - cut
        if samples.size == 0:
            return
        state.partial[index].append(samples)
        if state.audio_stream is not None:
            state.audio_stream.add(index, samples)

    def _deliver(self, resolved: list, events: list) -> None:
        """Outside the lock: stream chunks of live requests, progress callbacks, then finished requests."""
        with self._cv:
            streams = [s.audio_stream for s in self._requests.values() if s.audio_stream is not None
                       and s.audio_stream.pending]
        for audio_stream in streams:
            try:
                audio_stream.flush()
            except Exception:  # noqa: BLE001 - a caller's callback must not stop the worker
                logger.exception("audio callback of request %s raised", audio_stream.request_id)
        for callback, event in events:
            try:
                callback(event)
            except Exception:  # noqa: BLE001 - a caller's callback must not stop the worker
                logger.exception("progress callback of request %s raised", event.request_id)
        self._resolve(resolved)

    # -- request-level batching -----------------------------------------------------------------------------------
    def _serve_batches(self) -> None:
        idle_since: float | None = None
        while True:
            empty_cache = False
            resolved: list = []
            batch = None
            with self._cv:
                if self._stopping:
                    break
                if not self._busy:
                    self._budget_bytes = self._measure_budget()
                plan = self.scheduler.schedule(time.monotonic(), None, self._budget_bytes)
                self._fail_too_large(plan.too_large, resolved)
                if plan.batch:
                    idle_since = None
                    batch = plan.batch
                    states = [self._requests[w.request_id] for w in batch]
                    self._busy = True
                elif not resolved:
                    if plan.wait_s > 0:
                        self._cv.wait(timeout=plan.wait_s)
                    else:
                        idle_since, empty_cache = self._idle_wait(idle_since)
            self._resolve(resolved)
            if empty_cache:
                self.probe.empty_cache()
            if batch is not None:
                self._execute_batch(batch, states)

    def _generate(self, inputs: Any, params: Any, batch_size: int) -> Any:
        """``adapter.generate`` with the testing aids (``_simulated_oom``)."""
        oom = self._simulated_oom(batch_size)
        if oom is not None:
            raise oom
        return self.adapter.generate(inputs, params)

    def _run_batch(self, batch: list[SegmentWork], states: list[_RequestState]
                   ) -> tuple[list[np.ndarray], list[StopReason], float]:
        """preprocess -> generate -> postprocess of one batch: (one waveform and one stop reason per row, seconds
        of the generate call)."""
        rows = [_DeviceRow(self._segment_row(state, work), work.expected_steps) for work, state in zip(batch, states)]
        params = states[0].params.with_seed(batch[0].seed)  # knobs equal across the batch (batch_key)
        t0 = time.perf_counter()
        # one call off ZeroGPU; on ZeroGPU as many spaces.GPU calls as the batch needs to fit their time limit
        outputs = self.gpu_calls.run(self._rows_on_device, rows, params)
        generate_s = time.perf_counter() - t0
        return [wave for wave, _ in outputs], [reason for _, reason in outputs], generate_s

    def _run_rows(self, rows: list["_DeviceRow"], params: SynthesisParams) -> list[tuple[np.ndarray, StopReason]]:
        """The device work of one batch: preprocess -> generate -> postprocess -> (waveform float32
        ``(num_samples,)``, stop reason) per row. On ZeroGPU this runs inside a ``spaces.GPU`` call (in ZeroGPU's GPU
        worker: its arguments and result are pickled), so all of it, the codec's decode included, sees the GPU.

        Raises:
            RuntimeError: the adapter returned a different number of waveforms or stop reasons than rows.
        """
        adapter_rows = [row.row for row in rows]
        inputs = self.adapter.preprocess(adapter_rows, params)
        outputs = self._generate(inputs, params, len(adapter_rows))
        waves = self.adapter.postprocess(outputs, inputs)
        reasons = list(self.adapter.stop_reasons(outputs, inputs))
        if len(waves) != len(rows) or len(reasons) != len(rows):
            raise RuntimeError(f"adapter returned {len(waves)} waveforms and {len(reasons)} stop reasons for "
                               f"{len(rows)} rows")
        return [(np.asarray(w, dtype=np.float32).reshape(-1), r) for w, r in zip(waves, reasons)]

    def _segment_row(self, state: _RequestState, work: SegmentWork) -> AdapterRow:
        """The adapter row of segment ``work.index``: a dialogue row (every speaker's voice and the turns it
        speaks), else the text with its dialogue speaker's reference, else with the request's."""
        request = state.request
        turns = state.segment_turns[work.index] if state.segment_turns else ()
        if turns:
            voices = tuple(RowVoice(None if s.reference_audio is None else s.reference_audio.samples,
                                    s.reference_text) for s in request.speakers)
            runs: list[tuple[int, list[str]]] = []  # consecutive pieces of one speaker make one turn line
            for piece in turns:
                if runs and runs[-1][0] == piece.speaker:
                    runs[-1][1].append(piece.model_text)
                else:
                    runs.append((piece.speaker, [piece.model_text]))
            return AdapterRow(text=work.text, reference_audio=None, reference_text=None, seed=work.seed,
                              emotion=self._row_emotion(request), voices=voices,
                              turns=tuple(RowTurn(k, join_pieces(texts)) for k, texts in runs))
        part = state.parts[state.segment_parts[work.index]] if state.parts else None
        if part is not None and part.speaker is not None:
            speaker = request.speakers[part.speaker]
            ref, ref_text = speaker.reference_audio, speaker.reference_text
        else:
            ref, ref_text = request.reference_audio, request.reference_text
        return AdapterRow(text=work.text, reference_audio=None if ref is None else ref.samples,
                          reference_text=ref_text, seed=work.seed, emotion=self._row_emotion(request))

    def _execute_batch(self, batch: list[SegmentWork], states: list[_RequestState]) -> None:
        outcome, value = self._run_phase(Phase.BATCH, batch, lambda: self._run_batch(batch, states))
        resolved: list = []
        events: list = []
        with self._cv:
            self._busy = False
            self._used_since_empty = True
            generate_s: dict[int, float] = {}
            if value is not None:
                waves, reasons, seconds = value
                outcome = Outcome(phase=outcome.phase, kind=outcome.kind, rows=outcome.rows,
                                  finished=tuple(zip(batch, reasons)), measured_peak_bytes=outcome.measured_peak_bytes)
                for work, state, wave in zip(batch, states, waves):
                    if not state.finished:
                        state.partial[work.index] = []
                        self._add_audio(state, work.index, wave)
                    generate_s[id(work)] = seconds
                self._num_batches += 1
                self._last_batch_size = len(batch)
                BATCH_SIZE.observe(len(batch))
            update = self.scheduler.update_from_output(outcome)
            self._apply_update(update, resolved, events, batch_size=len(batch), generate_s=generate_s)
            self._cv.notify_all()
        self._deliver(resolved, events)

    # -- continuous batching (step interface) ---------------------------------------------------------------------
    def _serve_steps(self) -> None:
        """Iteration-level loop: admit -> prefill -> one decode step -> update, until stopped (module docstring).
        With ``continuous=False`` (request-level batching on a step adapter) a new batch starts only when the
        running one has ended, and finished rows stay in it (padding) until then."""
        batch: DecodeBatch | None = None
        idle_since: float | None = None
        while True:
            empty_cache = False
            resolved: list = []
            with self._cv:
                if self._stopping:
                    break
                if batch is None:
                    self._remeasure_budget()  # no running batch: a clean reading
                released = self.scheduler.take_released()
                plan = self.scheduler.schedule_step(self._rows_budget(), admit_only_when_empty=not self.continuous)
                self._fail_too_large(plan.too_large, resolved)
                self._restart_preempted(plan.preempted)
                released += plan.preempted
                admit = [(w, self._requests[w.request_id]) for w in plan.admit]
                now = time.perf_counter()
                for work, state in admit:
                    state.started_s[work.index] = now
                running = self.scheduler.num_running
                if running == 0 and not admit and not released:
                    if batch is not None and batch.num_rows == 0:
                        batch = None
                    if batch is None and not resolved:
                        idle_since, empty_cache = self._idle_wait(idle_since)
                        if not empty_cache:
                            continue
                else:
                    idle_since = None
                    self._busy = True
            self._resolve(resolved)
            if empty_cache:
                self.probe.empty_cache()
            if batch is not None and released:
                batch.release(released)
            if admit:
                batch = self._prefill(batch if batch is not None and batch.num_rows else None, admit)
            batch = self._step(batch)

    def _prefill(self, batch: DecodeBatch | None, admit: list[tuple[SegmentWork, _RequestState]]
                 ) -> DecodeBatch | None:
        """Prefill the admitted rows into ``batch`` (a new one from ``adapter.start_decode`` when None) and apply
        the outcome. Returns the running batch (None when there was none and it could not be made)."""
        works = [w for w, _ in admit]
        rows = [(w, self._segment_row(s, w)) for w, s in admit]
        holder = {"batch": batch}

        def call():
            if holder["batch"] is None:
                holder["batch"] = self.adapter.start_decode(admit[0][1].params, self.prefix_cache)
            running = holder["batch"]
            oom = self._simulated_oom(running.num_rows + len(rows))
            if oom is not None:
                raise oom
            before = running.prefill_s
            running.prefill(rows)
            return running.prefill_s - before

        outcome, seconds = self._run_phase(Phase.PREFILL, works, call)
        batch = holder["batch"]
        resolved: list = []
        events: list = []
        with self._cv:
            self._prefill_s += seconds or 0.0
            update = self.scheduler.update_from_output(outcome)
            self._apply_update(update, resolved, events, batch_size=batch.num_rows if batch is not None else 0)
            self._cv.notify_all()
        if batch is not None:
            self._release(batch, update)
        self._deliver(resolved, events)
        return batch

    def _step(self, batch: DecodeBatch | None) -> DecodeBatch | None:
        """One decode step of the running batch and its update. Returns the batch to go on with (None when it ended
        or was dropped)."""
        with self._cv:
            live = self.scheduler.running()
            if not live:
                self._busy = False
        if batch is None:
            return None
        if not live:
            return self._end_if_done(batch)
        by_key = {id(w): w for w in live}
        num_rows = batch.num_rows

        def call():
            oom = self._simulated_oom(num_rows)
            if oom is not None:
                raise oom
            if self.config.simulate_step_delay_ms:
                time.sleep(self.config.simulate_step_delay_ms / 1000.0)
            return batch.decode_step()

        row_steps_before, padded_before = batch.num_row_steps, batch.num_padded_row_steps
        outcome, steps = self._run_phase(Phase.DECODE, live, call)
        if outcome.kind is OutcomeKind.OOM and num_rows > len(live):
            # Request-level batching keeps finished rows as padding: out of memory then is not the live rows'
            # fault. Drop the padding and retry the step before the scheduler shrinks the batch or fails a row.
            batch.release([key for key in batch.keys if id(key) not in by_key])
            with self._cv:
                self._busy = False
            return batch
        resolved: list = []
        events: list = []
        with self._cv:
            self._busy = False
            self._used_since_empty = True
            self._num_row_steps += batch.num_row_steps - row_steps_before
            self._num_padded_row_steps += batch.num_padded_row_steps - padded_before
            if steps is not None:
                for work in live:  # a segment's batch size: the most rows it shared a decode step with
                    state = self._requests.get(work.request_id)
                    if state is not None and not state.finished:
                        state.batch_sizes[work.index] = max(state.batch_sizes[work.index], num_rows)
                finished = []
                for step in steps:
                    work = by_key.get(id(step.key))
                    if work is None:
                        continue
                    state = self._requests.get(work.request_id)
                    if state is not None and not state.finished:
                        self._add_audio(state, work.index, step.audio)
                    if step.stop_reason is not None:
                        finished.append((work, step.stop_reason))
                outcome = Outcome(phase=outcome.phase, kind=outcome.kind, rows=outcome.rows,
                                  finished=tuple(finished), measured_peak_bytes=outcome.measured_peak_bytes)
                self._num_batches += 1
                self._last_batch_size = num_rows
                BATCH_SIZE.observe(len(live))  # rows that decoded this step (request-level padding rows excluded)
            update = self.scheduler.update_from_output(outcome)
            self._apply_update(update, resolved, events, batch_size=num_rows)
            self._cv.notify_all()
        if update.drop_running_batch:
            batch = None
        else:
            self._release(batch, update)
        self._deliver(resolved, events)
        return None if batch is None else self._end_if_done(batch)

    def _end_if_done(self, batch: DecodeBatch) -> DecodeBatch | None:
        """The batch to go on with: None once no row runs in it (request-level batching releases its finished
        rows then, all together)."""
        with self._cv:
            running = self.scheduler.num_running
        if running == 0 and batch.num_rows and not self.continuous:
            batch.release(list(batch.keys))
        return None if batch.num_rows == 0 else batch

    def _release(self, batch: DecodeBatch, update: Update) -> None:
        """Take the update's rows out of the running batch. Request-level batching keeps finished rows in it (they
        are padding until the whole batch ends); requeued and failed rows leave at once either way."""
        if not update.release:
            return
        if self.continuous:
            batch.release(update.release)
        else:
            finished = {id(w) for w, _ in update.finished}
            leaving = [w for w in update.release if id(w) not in finished]
            if leaving:
                batch.release(leaving)
