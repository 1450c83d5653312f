"""The output processor: turns what the model worker produced into what callers receive, off the worker's thread.

Owns: delivering streamed ``AudioChunk``s (the handle's queue and ``on_audio`` callbacks: ``deliver_chunks``),
progress callbacks (``call_progress``), and a finished request's assembly (segments joined with their pauses, per-line
duration fitting, tempo, loudness: ``assemble_result``), its stream's end and its future. vLLM v1's split
(``vllm/v1/engine/output_processor.py``; ../shared/STYLE.md): nothing that is not model work runs on the engine
core's thread, so a 100 s request's tempo and loudness (seconds of CPU) never hold up the next decode step of
everyone else.

May touch: a finished request's ``RequestState`` (``tts_app.engine.state``; the core has let go of it: it left
``EngineCore._requests`` under the engine lock before its finish task was posted), the ``AudioStream`` of a request
(only ``deliver``/``finish``/``close``; the ordering bookkeeping ``add``/``complete``/``restart`` stays with the
core, under the engine lock, because a restarted row must know at once how many samples were already sent). Never
the scheduler, the adapter or the engine lock (``Engine._finish_output``, which runs these tasks, takes the lock only
to count outcomes).

Order: every task carries its request's id; tasks of one request run one at a time in the order they were posted
(chunks, then progress, then the finish), so a stream's consumer sees every chunk before ``result()`` returns. Tasks
of different requests run in parallel on up to ``max_workers`` threads, so a short request's result is not held
behind a long request's post-processing. Threads start on demand and end when idle.

No torch here: arrays are numpy float32.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Callable

import numpy as np

from tts_app.audio.post import join_segments
from tts_app.dialogue import join_pieces
from tts_app.errors import ConfigError, InputError, TTSAppError
from tts_app.finish import Finish
from tts_app.frontend.messages import Notice
from tts_app.engine import messages as _messages  # noqa: F401 - registers the retake notice's zh/en texts
from tts_app.request import ChapterSpan, RequestStatus, SegmentTiming, StopReason, SynthesisResult

if TYPE_CHECKING:
    from tts_app.engine.state import RequestState
    from tts_app.engine.streaming import AudioStream

logger = logging.getLogger(__name__)

# Threads that post-process finished requests at the same time. Two long requests' post-processing can run while a
# third request's chunks and result still go out; more would only compete for the same cores.
OUTPUT_WORKERS = 3


class OutputProcessor:
    """Runs output tasks (zero-argument callables) per request, in order within a request, in parallel across
    requests (module docstring).

    Args:
        max_workers: most threads running tasks at once (>= 1).
    """

    def __init__(self, max_workers: int = OUTPUT_WORKERS):
        if max_workers < 1:
            raise ValueError(f"max_workers={max_workers} must be >= 1")
        self.max_workers = max_workers
        self._cv = threading.Condition()
        self._tasks: dict[str, collections.deque] = {}  # request id -> its tasks not started yet, in order
        self._ready: collections.deque[str] = collections.deque()  # request ids with tasks and no thread on them
        self._active: set[str] = set()  # request ids a thread is running a task of
        self._num_threads = 0
        self._num_idle = 0
        self._local = threading.local()  # ``running`` is set on this processor's own threads

    def post(self, request_id: str, task: Callable[[], None]) -> None:
        """Queue ``task`` after the tasks already posted for ``request_id``. Never blocks on the task. A task that
        raises is logged under its request id; the others go on."""
        start = False
        with self._cv:
            queue = self._tasks.get(request_id)
            if queue is None:
                queue = self._tasks[request_id] = collections.deque()
                if request_id not in self._active:
                    self._ready.append(request_id)
            queue.append(task)
            if self._num_idle:
                self._cv.notify()
            elif self._num_threads < self.max_workers:
                self._num_threads += 1
                start = True
        if start:
            try:
                threading.Thread(target=self._run, name="tts-engine-output", daemon=True).start()
            except RuntimeError:  # interpreter shutting down (an atexit hook): run what is queued here
                with self._cv:
                    self._num_threads -= 1
                self._run(exit_when_idle=True)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every posted task has run. Returns False when ``timeout`` seconds passed first; at once (True)
        when called from a task (it would wait for itself)."""
        if getattr(self._local, "running", False):
            return True
        with self._cv:
            return self._cv.wait_for(lambda: not self._tasks and not self._active, timeout=timeout)

    def _next(self, exit_when_idle: bool) -> tuple[str, Callable[[], None]] | None:
        with self._cv:
            while not self._ready:
                if exit_when_idle:
                    return None
                self._num_idle += 1
                # a thread idle this long ends; the next post starts a new one (none lingers after the engine)
                woke = self._cv.wait(timeout=1.0)
                self._num_idle -= 1
                if not woke and not self._ready:
                    self._num_threads -= 1
                    return None
            request_id = self._ready.popleft()
            queue = self._tasks[request_id]
            task = queue.popleft()
            if not queue:
                del self._tasks[request_id]
            self._active.add(request_id)
            return request_id, task

    def _run(self, exit_when_idle: bool = False) -> None:
        was_running, self._local.running = getattr(self._local, "running", False), True
        try:
            self._run_tasks(exit_when_idle)
        finally:
            self._local.running = was_running

    def _run_tasks(self, exit_when_idle: bool) -> None:
        while True:
            item = self._next(exit_when_idle)
            if item is None:
                return
            request_id, task = item
            try:
                task()
            except Exception:  # noqa: BLE001 - a caller's callback or a bug must not stop other requests' output
                logger.exception("output of request %s raised", request_id)
            with self._cv:
                self._active.discard(request_id)
                if request_id in self._tasks:
                    self._ready.append(request_id)
                self._cv.notify_all()


def deliver_chunks(audio_stream: "AudioStream", chunks: list) -> None:
    """Hand streamed chunks to their consumer (an output task); a caller's callback that raises is logged, never
    stops the output of others."""
    try:
        audio_stream.deliver(chunks)
    except Exception:  # noqa: BLE001 - a caller's callback must not stop the output of others
        logger.exception("audio callback of request %s raised", audio_stream.request_id)


def call_progress(callback: Callable, event) -> None:
    """Call a request's progress callback with ``event`` (an output task); one that raises is logged."""
    try:
        callback(event)
    except Exception:  # noqa: BLE001 - a caller's callback must not stop the output of others
        logger.exception("progress callback of request %s raised", event.request_id)


def turn_lines(pieces, speakers) -> tuple[tuple[str, str], ...]:
    """(speaker name, source text) per turn of a dialogue row, consecutive pieces of one speaker joined."""
    lines: list[tuple[int, list[str]]] = []
    for piece in pieces:
        if lines and lines[-1][0] == piece.speaker:
            lines[-1][1].append(piece.source_text)
        else:
            lines.append((piece.speaker, [piece.source_text]))
    return tuple((speakers[k].name, join_pieces(texts)) for k, texts in lines)


def cap_warning(index: int, text: str, audio_s: float, max_new_tokens: int) -> Notice:
    """The warning for segment ``index`` (0-based) cut at its ``max_new_tokens`` cap after ``audio_s`` s of audio
    (English as a ``str``; each door renders it in its user's language)."""
    return Notice("eng_segment_cap", segment=index + 1, text=text[:40], audio_s=round(audio_s, 1),
                  max_new_tokens=max_new_tokens)


def take_records(segment) -> dict:
    """``SegmentTiming``'s take fields of a segment the take policy scored (``takes``, ``scores``, ``rerolled``);
    {} for one it did not."""
    if not segment.takes:
        return {}
    kept = next((t for t in segment.takes if t.seed == segment.seed), segment.takes[-1])
    records = tuple(t.record(kept=t is kept) for t in segment.takes)
    scores = dict(kept.scores.to_dict(), problems=list(kept.problems)) if kept.scores is not None else None
    return {"takes": records, "scores": scores, "rerolled": len(segment.takes) - 1}


def assemble_result(state: "RequestState", sampling_rate: int, frames_per_second: float,
                    failed_result: Callable[..., SynthesisResult]) -> SynthesisResult:
    """The DONE result of a request whose segments are all made: segments joined with their pauses, then the
    request's tempo and loudness (``tts_app.audio.effects``); FAILED (``failed_result(request, error, warnings)``)
    when its target duration cannot be met (REFUSED) or post-processing fails (ERROR).

    Args:
        state: the finished request (``Engine``'s per-request state; read only).
        sampling_rate: Hz of the segments' audio.
        frames_per_second: the model's decode steps per second of audio (for a cut segment's length).
        failed_result: builds the FAILED result.
    """
    from tts_app.audio.effects import apply_request_effects

    segments = state.segments
    waves = [s.wave for s in segments if s.wave is not None]
    params = state.params
    spoke = any(w.size for w in waves)  # no speech at all: nothing to fit or level; the doors say "no audio"
    try:
        waves, cues = fit_segment_durations(state, waves, sampling_rate) if spoke else (waves, [])
        audio, spans = join_segments(waves, state.pauses_after_ms, sampling_rate)
        effects = apply_request_effects(audio, spans, sampling_rate, speed=params.speed if spoke else None,
                                        duration_s=params.duration_s if spoke else None,
                                        loudness_lufs=params.loudness_lufs if spoke else None)
        if cues:
            effects.applied["segment_durations"] = cues
    except TTSAppError as exc:  # e.g. a target duration the speech cannot meet: the user's input (REFUSED)
        return failed_result(state.request, Finish.from_error(exc), state.warnings)
    except Exception as exc:  # noqa: BLE001 - a post-processing bug fails this request only
        logger.exception("request %s: post-processing failed", state.request.request_id)
        return failed_result(state.request, Finish.error(f"post-processing failed: {type(exc).__name__}: {exc}"),
                             state.warnings)
    audio, spans = effects.audio, effects.spans
    max_new_tokens = state.params.max_new_tokens
    speakers = state.request.speakers
    timings = []
    for i, (segment, (a, b)) in enumerate(zip(segments, spans)):
        part = state.parts[segment.part]
        speaker = speakers[part.speaker].name if part.speaker is not None else None
        turns = turn_lines(segment.turns, speakers)
        if len({name for name, _ in turns}) > 1:
            speaker = None  # a dialogue row with several speakers: ``turns`` names each
        timings.append(SegmentTiming(
            index=i, text=segment.source_text, start_s=a, end_s=b, batch_size=segment.batch_size,
            generate_s=segment.generate_s, seed=segment.seed, model_text=segment.text, stop_reason=segment.stop_reason,
            max_new_tokens=max_new_tokens, chapter=part.chapter, speaker=speaker, turns=turns,
            retaken_seeds=tuple(segment.retaken_seeds), **take_records(segment)))
    chapters = []
    if len({t.chapter for t in timings}) > 1:
        for chapter in sorted({t.chapter for t in timings}):
            members = [t for t in timings if t.chapter == chapter]
            chapters.append(ChapterSpan(index=len(chapters), title=state.parts[
                segments[members[0].index].part].title, start_s=members[0].start_s,
                end_s=members[-1].end_s, segments=tuple(t.index for t in members)))
    warnings = list(state.warnings) + list(effects.warnings)
    for i, segment in enumerate(segments):
        if segment.retaken_seeds and waves[i].size:
            warnings.append(Notice("eng_retaken", segment=i + 1, seeds=", ".join(map(str, segment.retaken_seeds)),
                                   seed=segment.seed))
    for i, timing in enumerate(timings):
        if timing.needs_listening:
            warnings.append(Notice("eng_take_below", segment=i + 1, text=timing.text[:40], num_takes=len(timing.takes),
                                   problems=", ".join(timing.scores["problems"])))
    for i, wave in enumerate(waves):
        if segments[i].stop_reason is StopReason.MAX_NEW_TOKENS:
            audio_s = wave.size / sampling_rate if wave.size else max_new_tokens / frames_per_second
            warnings.append(cap_warning(i, segments[i].source_text, audio_s, max_new_tokens))
        elif wave.size == 0:
            warnings.append(Notice("eng_segment_no_audio", segment=i + 1, text=segments[i].source_text[:40]))
    return SynthesisResult(request_id=state.request.request_id, status=RequestStatus.DONE, audio=audio,
                           sampling_rate=sampling_rate, segments=timings, warnings=warnings,
                           normalized_text=state.normalized_text, effective_params=state.params,
                           post_processing=effects.applied, chapters=chapters)


def fit_segment_durations(state: "RequestState", waves: list[np.ndarray], sampling_rate: int
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
        target = state.parts[state.segments[i].part].target_s
        if target is None:
            out.append(wave)
            continue
        try:
            tempo = apply_tempo(wave, sampling_rate, duration_s=target)
        except InputError as exc:
            from tts_app.frontend.messages import message_of

            raise ConfigError("segment_durations_s", Notice(
                "tempo_line", line=i + 1, text=state.segments[i].source_text[:40], problem=message_of(exc))) from None
        out.append(tempo.audio)
        cues.append({"segment": i + 1, "target_s": target, "speed": round(tempo.speed, 4),
                     "duration_before_s": round(tempo.duration_before_s, 4)})
    return out, cues
