"""The engine's front, as callers use it: ``Engine`` (``submit`` -> ``RequestHandle``, cancel, ``stats``, start and
shutdown), built on the engine core (``tts_app.engine.core.EngineCore``: scheduler, running batch, one step loop).

vLLM v1's split (../shared/STYLE.md): ``submit`` runs the input processor (``tts_app.engine.input``) in the caller's
thread, checks the request against the one memory budget and hands its segments to the core's scheduler; a
finished request's output task (assembly, tempo, loudness, its stream's end, its future) runs on the output
processor's threads (``tts_app.engine.output``), here in ``_finish_output``.

Owns: the request doors (admission, refusal with a typed ``Finish``, cancel), the stats snapshot, the worker thread's
start and shutdown (and the atexit hook that joins a worker left running), a finished request's output task. May
touch: the core's lock, request table and scheduler queue (``Scheduler.add``), the input processor, the output
processor. Never the adapter's device work or the running batch (the core's).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable

from tts_app.engine.core import EngineCore
from tts_app.engine.handle import EngineStats, ProgressEvent, RequestHandle
from tts_app.engine.input import _RequestText
from tts_app.engine.output import assemble_result
from tts_app.engine.state import RequestState
from tts_app.engine.streaming import AudioChunk, AudioStream
from tts_app.errors import InputError, TTSAppError
from tts_app.finish import Finish
from tts_app.metrics import STREAM_UNDERRUN
from tts_app.request import RequestStatus, SynthesisRequest, SynthesisResult

logger = logging.getLogger(__name__)

# Reference length assumed by ``EngineStats.default_row_bytes`` (a typical cleaned reference clip), in seconds.
DEFAULT_REFERENCE_S = 10.0

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


class Engine(EngineCore):
    """Batches segments of many requests on one model, sized from memory, surviving out-of-memory.

    Args: as ``EngineCore`` (adapter, config, memory_probe, bucketing, continuous, preempt, fair, zero_gpu).
    """

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
            self._cancel_all(Finish.shut_down())
            self.takes.shutdown(wait=wait)  # a take still being scored finds its request cancelled
            if thread is not threading.current_thread():
                self._output.join()  # every result resolved, every stream ended (at once from an output callback)
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

    def _default_row_bytes(self) -> int:
        f = self.facts
        return self.estimator.row_bytes(self.inputs.positions(f.max_segment_chars, DEFAULT_REFERENCE_S, 0,
                                                        f.default_max_new_tokens))

    def estimate_request_bytes(self, request: SynthesisRequest) -> int:
        """Estimated bytes (KV cache + activations) the request's longest segment needs as a batch of one: the
        least memory that can serve it. Weights are not included (already resident).

        Raises:
            InputError: the text is empty or unspeakable (from the front end).
        """
        return self.inputs.estimate_request_bytes(request)

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
                num_streams=self._num_streams, num_stream_underruns=self._num_underruns,
                max_stream_underrun_s=self._max_underrun_s,
            )

    def _segments_of(self, request: SynthesisRequest) -> _RequestText:
        """The front end's output for the request (``InputProcessor.segments_of``)."""
        return self.inputs.segments_of(request)

    def submit(self, request: SynthesisRequest,
               on_progress: Callable[[ProgressEvent], None] | None = None, *, stream: bool = False,
               on_audio: Callable[[AudioChunk], None] | None = None) -> RequestHandle:
        """Queue a request (runs the text front end here, in the caller's thread). Work queued before ``start()``
        waits for it. Never raises for a bad request: the handle's result is FAILED with ``error`` instead.

        Args:
            request: the synthesis; ``reference_audio`` must be at ``engine.sampling_rate``.
            on_progress: called once here (``segments_done=0, batch_size=0``, in the caller's thread), then from
                the output thread after each batch or step that finished a segment of this request.
            stream: deliver the audio while it is decoded: iterate ``handle.stream()`` (``AudioChunk``s in order,
                concatenating to the final audio; see ``tts_app.engine.streaming``).
            on_audio: called with each ``AudioChunk`` from the output thread (implies ``stream``), in order.
        """
        handle = RequestHandle(request.request_id, self)
        try:
            ready = self.inputs.prepare(request)
        except TTSAppError as exc:
            finish = Finish.from_error(exc)
            if stream or on_audio is not None:
                handle._audio_stream = AudioStream(request.request_id, self.sampling_rate, [], on_audio)
                handle._audio_stream.close(finish)
            handle.future.set_result(self._failed_result(request, finish))
            with self._cv:
                self._outcomes[RequestStatus.FAILED] += 1
            return handle

        prepared, params, warnings, works, now = ready.text, ready.params, ready.warnings, ready.works, ready.arrival_s
        pauses = prepared.pauses_after_ms
        audio_stream = None
        if stream or on_audio is not None:
            # settings that need the whole clip (tempo, duration, loudness): no partial chunks, only the final audio
            audio_stream = AudioStream(request.request_id, self.sampling_rate, pauses, on_audio,
                                       live=not params.needs_whole_clip)
            handle._audio_stream = audio_stream
        state = RequestState.of(request, handle, prepared, works, params, warnings=warnings, on_progress=on_progress,
                                audio_stream=audio_stream, submitted_s=now, segment_context=ready.segment_context)
        error: Finish | None = None
        with self._cv:
            budget = self._budget_bytes
            if self._stopping:
                error = self._stopped_finish
            elif budget is not None:
                for w in works:
                    if self.estimator.batch_bytes([w.row_positions]) > budget:
                        error = Finish.too_large(self.inputs.too_large_message(request, w.index, w.text, budget))
                        break
            if error is None:
                self._requests[request.request_id] = state
                # with segment context only the first segment now; each next one once its predecessor's audio
                # exists (``EngineCore._queue_next``)
                self.scheduler.add(works[:1] if state.segment_context else works)
                self._cv.notify_all()
            else:
                self._outcomes[RequestStatus.FAILED] += 1
        if error is not None:
            logger.info("request %s rejected: %s", request.request_id, error.message)
            if audio_stream is not None:
                audio_stream.close(error)
            handle.future.set_result(self._failed_result(request, error, warnings))
        elif on_progress is not None:
            try:  # tell the caller the segment count at once (batch_size 0: nothing has run yet)
                on_progress(ProgressEvent(request.request_id, 0, state.num_segments, 0))
            except Exception:  # noqa: BLE001 - a caller's callback must not break submission
                logger.exception("progress callback of request %s raised", request.request_id)
        return handle

    def _finish_output(self, future: Future, result: SynthesisResult | RequestState,
                       audio_stream: AudioStream | None) -> None:
        """A finished request's output (the output thread; see ``_resolve``). Whatever raises in it, the caller's
        future is resolved (FAILED with an ERROR finish naming the exception's type) and its stream ended, so no
        caller ever waits for a result that will not come."""
        request_id = result.request.request_id if isinstance(result, RequestState) else result.request_id
        try:
            self._finish_output_unguarded(future, result, audio_stream)
        except Exception as exc:  # noqa: BLE001 - a bug here fails this request only, never hangs its caller
            logger.exception("request %s: output failed", request_id)
            finish = Finish.from_error(exc)
            failed = SynthesisResult(request_id=request_id, status=RequestStatus.FAILED,
                                     sampling_rate=self.sampling_rate, error=finish.message, finish=finish)
            if audio_stream is not None:
                try:
                    audio_stream.close(failed.finish)
                except Exception:  # noqa: BLE001 - already failing; the future below is what the caller waits on
                    logger.exception("request %s: stream could not be closed", request_id)
            if not future.done():
                future.set_result(failed)

    def _finish_output_unguarded(self, future: Future, result: SynthesisResult | RequestState,
                                 audio_stream: AudioStream | None) -> None:
        if isinstance(result, RequestState):
            result = assemble_result(result, self.sampling_rate, self.facts.frames_per_second, self._failed_result)
            if not result.ok:
                with self._cv:
                    self._outcomes[RequestStatus.DONE] -= 1
                    self._outcomes[RequestStatus.FAILED] += 1
            elif audio_stream is not None:
                audio_stream.finish(result.audio)
        if audio_stream is not None:
            try:
                audio_stream.flush()
            except Exception:  # noqa: BLE001 - a caller's callback must not stop the output of others
                logger.exception("audio callback of request %s raised", result.request_id)
            audio_stream.close(result.finish)
            self._count_underruns(audio_stream)
        if not future.done():
            future.set_result(result)

    def _cancel(self, request_id: str) -> bool:
        resolved: list = []
        with self._cv:
            state = self._requests.get(request_id)
            if state is None or state.finished:
                return False
            self._finish_locked(state, RequestStatus.CANCELLED, Finish.cancelled(), resolved)
            self._cv.notify_all()
        self._resolve(resolved)
        return True

    def _count_underruns(self, audio_stream: AudioStream) -> None:
        """An ended stream's underruns into the stats and ``tts_stream_underrun_seconds`` (output thread)."""
        for silence_s in audio_stream.underruns_s:
            STREAM_UNDERRUN.observe(silence_s)
        with self._cv:
            self._num_streams += 1 if audio_stream.first_audio_s is not None else 0
            self._num_underruns += len(audio_stream.underruns_s)
            self._max_underrun_s = max([self._max_underrun_s, *audio_stream.underruns_s])
