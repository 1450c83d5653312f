"""Streaming a request's audio while it is decoded: chunks in final order, the same samples as the final result.

A request submitted with ``stream=True`` (``Engine.submit``) gets ``AudioChunk``s: its first chunk as soon as its
first segment's first frames are decoded (continuous batching; with request-level batching, when the first segment's
batch ends), later chunks in order. Segments of one request may decode at the same time in different rows; a later
segment's audio is held back until every earlier one is complete, and the pause after each segment is sent as
silence, so ``np.concatenate([c.samples for c in chunks])`` equals ``SynthesisResult.audio`` sample for sample
(``tts_app.audio.post.join_segments``).

Consumers: ``RequestHandle.stream()`` (a blocking iterator, for the web UI and the HTTP layer) or an ``on_audio``
callback (called in the engine's output thread, ``tts_app.engine.output``; chunks of one request in order).

A request whose settings need the whole clip (``SynthesisParams.needs_whole_clip``: speed, a target duration,
loudness) does not stream: its stream is made with ``live=False``, gets no partial chunks, and ``finish`` sends its
final audio (after those effects) as one chunk when the request is done, so the concatenated chunks still equal
``SynthesisResult.audio``.

Underruns (vLLM-Omni's "audio underrun" measure): a client plays the stream in real time from its first chunk;
when a chunk arrives after everything sent before it has played, the client heard silence for the difference.
``deliver`` keeps that account per stream (``play_end_s``, ``underruns_s``), and the engine's scheduler admits a
streaming request's next segment early when its client's buffer runs low (``SegmentWork.deadline_s``).

No torch here: arrays are numpy float32.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np


@dataclass(frozen=True)
class AudioChunk:
    """A piece of a request's final audio.

    Attributes:
        request_id: the request.
        samples: float32 ``(num_samples,)`` at ``sampling_rate``.
        sampling_rate: Hz.
        start_sample: where ``samples`` begin in the request's final audio (chunks are contiguous and in order).
        segment_index: the segment the samples belong to (the pause after segment i counts as segment i).
        is_pause: the samples are the silence between two segments.
    """

    request_id: str
    samples: np.ndarray
    sampling_rate: int
    start_sample: int
    segment_index: int
    is_pause: bool = False

    @property
    def start_s(self) -> float:
        return self.start_sample / float(self.sampling_rate)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / float(self.sampling_rate)


_END = object()


class AudioStream:
    """Orders one request's decoded audio into ``AudioChunk``s (see module docstring). Driven by the engine's
    worker thread under the engine lock, delivered by the output processor; read by the consumer through ``chunks``.

    Args:
        request_id: the request.
        sampling_rate: Hz.
        pauses_after_ms: per segment, the silence after it in ms (none after the last), as ``join_segments``.
        on_audio: optional callback per chunk (the output thread).
        live: False = no partial chunks (the request needs its whole clip for post-processing); only ``finish``
            sends audio.

    Attributes:
        ended_with: why the request ended (``tts_app.finish.Finish``), set when the stream closes; None while open.
        emitted_samples: per segment, samples of that segment already sent (a segment restarted after an
            out-of-memory retry keeps them: the stream is the truth, see ``Engine``).
        first_audio_s: ``time.monotonic()`` when the first chunk was delivered (None before).
        play_end_s: when a client playing in real time since the first chunk runs out of audio (monotonic s;
            None before the first chunk).
        underruns_s: the silence of each underrun, in seconds, in order (module docstring).
    """

    def __init__(self, request_id: str, sampling_rate: int, pauses_after_ms: list[int],
                 on_audio: Callable[[AudioChunk], None] | None = None, live: bool = True):
        self.request_id = request_id
        self.live = live
        self.sampling_rate = int(sampling_rate)
        self.pauses_after_ms = list(pauses_after_ms)
        self.on_audio = on_audio
        self.emitted_samples = [0] * len(pauses_after_ms)
        self._next = 0  # the segment whose audio goes out now; later ones are held back
        self._held: dict[int, list[np.ndarray]] = {}
        self._complete: set[int] = set()
        self._cursor = 0
        self._queue: "queue.Queue" = queue.Queue()
        self._closed = False
        self.ended_with = None
        self.pending: list[AudioChunk] = []  # chunks made under the engine lock, delivered by ``flush``
        self.first_audio_s: float | None = None
        self.play_end_s: float | None = None
        self.underruns_s: list[float] = []

    @property
    def num_segments(self) -> int:
        return len(self.pauses_after_ms)

    def _emit(self, index: int, samples: np.ndarray, is_pause: bool = False) -> None:
        if samples.size == 0:
            return
        chunk = AudioChunk(self.request_id, samples, self.sampling_rate, self._cursor, index, is_pause)
        self._cursor += samples.size
        if not is_pause:
            self.emitted_samples[index] += samples.size
        self.pending.append(chunk)

    def add(self, index: int, samples: np.ndarray) -> None:
        """New decoded samples of segment ``index`` (float32 ``(n,)``), in decode order."""
        if not self.live:
            return
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if index == self._next:
            self._emit(index, samples)
        elif index > self._next:
            self._held.setdefault(index, []).append(samples)

    def restart(self, index: int) -> None:
        """Segment ``index`` restarts (its row was requeued): drop what was held back of it (nothing sent is
        taken back; the engine skips the already-sent samples of the new run)."""
        self._held.pop(index, None)

    def complete(self, index: int) -> None:
        """Segment ``index`` has all its samples (``add``ed before). Sends whatever can go now."""
        if not self.live:
            return
        self._complete.add(index)
        while self._next in self._complete:
            i = self._next
            for samples in self._held.pop(i, []):
                self._emit(i, samples)
            if i < self.num_segments - 1 and self.pauses_after_ms[i] > 0:
                gap = int(round(self.pauses_after_ms[i] * self.sampling_rate / 1000.0))
                self._emit(i, np.zeros(gap, dtype=np.float32), is_pause=True)
            self._next += 1
            if self._next < self.num_segments:
                for samples in self._held.pop(self._next, []):
                    self._emit(self._next, samples)

    def finish(self, audio: np.ndarray) -> None:
        """A request that did not stream (``live=False``) is done: its final audio (float32 ``(n,)``) as one chunk,
        delivered by the next ``flush``. No-op for a live stream (its chunks already are the final audio)."""
        if not self.live:
            self._emit(max(0, self.num_segments - 1), np.asarray(audio, dtype=np.float32).reshape(-1))

    def take_pending(self) -> list[AudioChunk]:
        """The chunks made since the last call (under the engine lock), for ``deliver`` on the output thread."""
        chunks, self.pending = self.pending, []
        return chunks

    def deliver(self, chunks: list[AudioChunk], now_s: float | None = None) -> None:
        """Hand ``chunks`` to the consumer (the output processor's thread, no engine lock): the queue, then
        ``on_audio``; and keep the underrun account (``now_s``: the delivery time, default ``time.monotonic()``)."""
        now_s = time.monotonic() if now_s is None else now_s
        for chunk in chunks:
            if self.play_end_s is None:
                self.first_audio_s = self.play_end_s = now_s
            elif now_s > self.play_end_s:
                self.underruns_s.append(now_s - self.play_end_s)
                self.play_end_s = now_s
            self.play_end_s += chunk.duration_s
            self._queue.put(chunk)
            if self.on_audio is not None:
                self.on_audio(chunk)

    def flush(self) -> None:
        """Deliver the chunks made since the last flush (``take_pending`` then ``deliver``)."""
        self.deliver(self.take_pending())

    def close(self, finish=None) -> None:
        """The request ended (done, failed or cancelled; ``finish`` says why): the iterator stops after the chunks
        already queued."""
        if not self._closed:
            self._closed = True
            self.ended_with = finish
            self._queue.put(_END)

    def chunks(self, timeout: float | None = None) -> Iterator[AudioChunk]:
        """Chunks in order until the request ends. Raises ``queue.Empty`` when none arrives within ``timeout``
        seconds (None = wait as long as it takes)."""
        while True:
            item = self._queue.get(timeout=timeout)
            if item is _END:
                self._queue.put(_END)  # a second iteration ends at once too
                return
            yield item
