"""Per-request state of the engine core: one ``RequestState`` per request in flight, holding one ``SegmentState`` per
segment (its text, where it came from, the audio decoded so far and, once finished, its waveform and how it ended).

Owns: a segment's audio bookkeeping: new samples appended (``RequestState.add_audio``), a restarted row's audio
dropped except what was already streamed (``restart_segment``), a finished segment's waveform and timings
(``finish_segment``), and the matching ``AudioStream`` bookkeeping (``add`` / ``restart`` / ``complete``).

May touch: only its own request's ``AudioStream``. Who calls it: the engine core, under the engine lock, while the
request is in flight; the output processor reads a finished request's state (``tts_app.engine.output``) once the core
has let go of it (it left ``Engine._requests`` under the lock before its finish task was posted). The input
processor builds the adapter's row of a segment from it (``InputProcessor.segment_row``).

No torch here: arrays are numpy float32 ``(num_samples,)`` at the model's sampling rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tts_app.engine.scheduler import SegmentWork
from tts_app.engine.streaming import AudioStream
from tts_app.request import StopReason, SynthesisParams, SynthesisRequest

if TYPE_CHECKING:
    from tts_app.engine.handle import ProgressEvent, RequestHandle
    from tts_app.engine.input import _Part, _RequestText, _TurnPiece


@dataclass
class SegmentState:
    """One segment of a request.

    Attributes:
        work: the segment as the scheduler holds it (index, model text, seed, expected length).
        text: what the model reads.
        source_text: what the user wrote (for timings and subtitles).
        pause_after_ms: silence after it when the request is joined, in ms.
        part: index of its ``_Part`` (chapter, dialogue turn or dubbing cue) in ``RequestState.parts``.
        turns: the dialogue turn pieces it speaks in one generation; () = not a dialogue row.
        wave: its finished audio (None until it finished).
        stop_reason: why its generation ended (valid once finished).
        batch_size: the most rows its batch (or a decode step of it) held.
        generate_s: seconds its batch's generate call took, or since its row was admitted.
        partial: audio decoded so far (continuous batching), concatenated when it finishes.
        skip_samples: samples of a restarted run to skip (already streamed).
        started_s: ``time.perf_counter()`` when its row was admitted.
        retaken_seeds: the seeds of its takes that ended speech at once and were taken again (``work.seed`` is
            the one that ran last), in order; empty for most segments.
        context_tokens: what its finished row handed back as segment context (``RowStep.context``), or None.
        context_from: with segment context, the index of the oldest earlier segment its row hears (it hears
            segments ``context_from .. index - 1``; ``InputProcessor.context_window``); None = none.
        takes: the take policy's scored takes of it, in order (``tts_app.engine.takes.Take``); empty without one.
    """

    work: SegmentWork
    text: str
    source_text: str
    pause_after_ms: int
    part: int
    turns: tuple["_TurnPiece", ...] = ()
    wave: np.ndarray | None = None
    stop_reason: StopReason = StopReason.END_OF_SPEECH
    batch_size: int = 0
    generate_s: float = 0.0
    partial: list[np.ndarray] = field(default_factory=list)
    skip_samples: int = 0
    started_s: float = 0.0
    retaken_seeds: list[int] = field(default_factory=list)
    context_tokens: Any = None
    context_from: int | None = None
    takes: list = field(default_factory=list)

    @property
    def seed(self) -> int:
        return self.work.seed


@dataclass
class RequestState:
    """One request in flight (module docstring).

    Attributes:
        request: the request as submitted.
        handle: the caller's handle (future, stream).
        params: the request's knobs with the checkpoint defaults filled in (what runs).
        segments: one ``SegmentState`` per segment, in order.
        parts: the request's parts (chapters, dialogue turns, dubbing cues).
        normalized_text: the front end's normalised text.
        warnings: warnings for the result.
        on_progress: the caller's progress callback (None = none).
        audio_stream: the request's stream (None = not streamed).
        num_done: segments finished.
        finished: the request ended (done, failed or cancelled).
        submitted_s: ``time.monotonic()`` at submit.
        queue_wait_s: submit -> its first row started (None before).
        num_audio_samples: samples of speech decoded so far over all its segments (a restarted row's dropped audio
            taken off), for the request's total-audio bound (``tts_app.request.check_audio_s``).
        num_pause_ms_done: the pauses after its finished segments, in ms (the same bound counts them).
        segment_context: its segments run one after another, each hearing the earlier ones as context (the
            request's ``segment_context`` on a family that offers it, not a dialogue): only the next segment to run
            is in the scheduler; the core queues segment i+1 when segment i finished (``EngineCore._queue_next``).
    """

    request: SynthesisRequest
    handle: "RequestHandle"
    params: SynthesisParams
    segments: list[SegmentState]
    parts: list["_Part"]
    normalized_text: str = ""
    warnings: list[str] = field(default_factory=list)
    on_progress: Callable[["ProgressEvent"], None] | None = None
    audio_stream: AudioStream | None = None
    num_done: int = 0
    finished: bool = False
    submitted_s: float = 0.0
    queue_wait_s: float | None = None
    num_audio_samples: int = 0
    num_pause_ms_done: int = 0
    segment_context: bool = False

    @classmethod
    def of(cls, request: SynthesisRequest, handle: "RequestHandle", prepared: "_RequestText",
           works: list[SegmentWork], params: SynthesisParams, **kwargs) -> "RequestState":
        """The state of a request the input processor prepared (``prepared``: its segments; ``works``: the same
        segments as the scheduler holds them, in order)."""
        turns = prepared.segment_turns or [()] * len(works)
        parts = prepared.segment_parts or [0] * len(works)
        segments = [SegmentState(work=w, text=text, source_text=source, pause_after_ms=pause, part=part, turns=t)
                    for w, text, source, pause, part, t in zip(works, prepared.texts, prepared.source_texts,
                                                                prepared.pauses_after_ms, parts, turns)]
        return cls(request=request, handle=handle, params=params, segments=segments, parts=prepared.parts,
                   normalized_text=prepared.normalized_text, **kwargs)

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    @property
    def works(self) -> list[SegmentWork]:
        return [s.work for s in self.segments]

    @property
    def pauses_after_ms(self) -> list[int]:
        return [s.pause_after_ms for s in self.segments]

    def add_audio(self, index: int, samples: np.ndarray) -> None:
        """New decoded samples of segment ``index``: skip what a restarted run already streamed."""
        segment = self.segments[index]
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if segment.skip_samples:
            cut = min(segment.skip_samples, samples.size)
            samples = samples[cut:]
            segment.skip_samples -= cut
        if samples.size == 0:
            return
        segment.partial.append(samples)
        self.num_audio_samples += samples.size
        if self.audio_stream is not None:
            self.audio_stream.add(index, samples)

    def audio_so_far_s(self, sampling_rate: int) -> float:
        """Seconds of audio the request has made so far: its speech decoded plus the pauses after its finished
        segments (what ``check_audio_s`` bounds)."""
        return self.num_audio_samples / float(sampling_rate) + self.num_pause_ms_done / 1000.0

    def restart_segment(self, index: int) -> None:
        """A row requeued (after OOM, or preempted) restarts its segment: drop its decoded audio, except what was
        already streamed (kept; the new run skips that many samples)."""
        segment = self.segments[index]
        emitted = self.audio_stream.emitted_samples[index] if self.audio_stream is not None else 0
        decoded = sum(p.size for p in segment.partial)
        self.num_audio_samples -= decoded - min(emitted, decoded)
        segment.partial = [np.concatenate(segment.partial)[:emitted]] if emitted else []
        segment.skip_samples = emitted
        if self.audio_stream is not None:
            self.audio_stream.restart(index)

    def hold_take(self, index: int) -> np.ndarray:
        """Segment ``index``'s take ended and goes to the take checker: its audio so far, taken out of the
        segment and of the request's audio total until a take is kept (``keep_take``)."""
        segment = self.segments[index]
        wave = np.concatenate(segment.partial) if segment.partial else np.zeros(0, dtype=np.float32)
        segment.partial = []
        self.num_audio_samples -= wave.size
        return wave

    def keep_take(self, index: int, wave: np.ndarray) -> None:
        """The take checker kept ``wave`` for segment ``index``: it becomes the segment's audio so far (then
        ``finish_segment``)."""
        segment = self.segments[index]
        segment.partial = [wave] if wave.size else []
        self.num_audio_samples += wave.size

    def finish_segment(self, index: int, reason: StopReason, batch_size: int, generate_s: float) -> bool:
        """Segment ``index`` ended: its audio so far becomes its waveform. Returns False when it had already
        finished (nothing changes)."""
        segment = self.segments[index]
        if segment.wave is not None:
            return False
        segment.wave = np.concatenate(segment.partial) if segment.partial else np.zeros(0, dtype=np.float32)
        segment.partial = []
        segment.stop_reason = reason
        segment.batch_size = max(segment.batch_size, batch_size)
        segment.generate_s = generate_s
        self.num_done += 1
        self.num_pause_ms_done += segment.pause_after_ms
        if self.audio_stream is not None:
            self.audio_stream.complete(index)
        return True
