"""What callers of the engine hold and read: the ``RequestHandle`` ``Engine.submit`` returns (future, stream,
cancel), the ``ProgressEvent``s its ``on_progress`` callback gets, and the ``EngineStats`` snapshot gauges read.

Plain data and a thin handle; no torch. The engine that fills them: ``tts_app.engine.front`` (``Engine``) on
``tts_app.engine.core`` (``EngineCore``).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from tts_app.engine.streaming import AudioChunk, AudioStream
from tts_app.metrics import count_finish
from tts_app.request import SynthesisResult

if TYPE_CHECKING:
    from tts_app.engine.front import Engine


@dataclass(frozen=True)
class ProgressEvent:
    """Sent to a request's ``on_progress`` callback: once at submit (``segments_done=0``, ``batch_size=0``), then
    from the output thread (``tts_app.engine.output``) after each batch that advanced it.

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
        num_streams: streamed requests that sent audio and ended.
        num_stream_underruns: times a stream's client ran out of audio before the next chunk came
            (``tts_app.engine.streaming``); max_stream_underrun_s: the longest such silence, in seconds.
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
    num_streams: int = 0
    num_stream_underruns: int = 0
    max_stream_underrun_s: float = 0.0

    @property
    def padded_share(self) -> float | None:
        """Share of decode row-steps spent on rows that had already finished (None before any step)."""
        return self.num_padded_row_steps / self.num_row_steps if self.num_row_steps else None


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
        self.future.add_done_callback(count_finish)  # /metrics: every finished request once, by its finish reason
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
