"""The engine core: the only owner of the scheduler, the running batch and the per-request state; runs the model
worker's one step loop. One model worker thread, many callers; requests -> segments -> rows -> audio.

The shape (vLLM v1's split, ../shared/STYLE.md), one module each:

* ``tts_app.engine.input``: a request -> checked segments, in the caller's thread (``InputProcessor.prepare``).
* ``tts_app.engine.front``: ``Engine``, what callers use (``submit``, cancel, ``stats``, start/shutdown) on top of this
  core; it admits a prepared request (budget check, ``Scheduler.add``) and runs a finished request's output task.
* this module, ``EngineCore``: the scheduler, the running batch, the request table (``tts_app.engine.state``) and the
  loop below. It may touch the scheduler, the prefix cache, the memory probe and the per-request state (under its
  lock, ``_cv``); device work goes through the executor; everything else is posted to the output processor. It never
  runs post-processing or a caller's callback.
* ``tts_app.engine.executor``: the device work of a step (prefill, decode step, a whole batch) -> a plain ``Outcome``.
* ``tts_app.engine.scheduler`` / ``plans``: the policy, plain data, no torch.
* ``tts_app.engine.output``: chunks, progress, join, tempo, loudness, futures, on its own threads.

One loop, ``schedule -> execute -> update`` (``EngineCore._serve``), for every family:

* **schedule** (``_schedule``, lock held): a family with a step interface (``TTSAdapter.supports_decode_steps``, e.g.
  VibeVoice, IndexTTS 2) batches continuously (iteration-level scheduling): before every decode step the scheduler
  admits waiting segments into the running batch (``Scheduler.schedule_step``). Any other family (Dia, CSM, Higgs;
  every family on ZeroGPU) gets a whole batch at a time (``Scheduler.schedule``: priority, length bucketing, budget).
* **execute** (``tts_app.engine.executor``, no lock): the admitted rows are prefilled into the running batch, then
  the batch advances one decode step. A family without a step interface runs as a ``OneStepBatch``: its prefill only
  gathers the rows, its one decode step runs ``preprocess -> generate -> postprocess`` and ends every row, so it goes
  through the same step as a continuous batch (the seam; only the outcome's ``Phase`` differs).
* **update** (``_update_locked``, the one place): a row's new audio is stored, the scheduler's
  ``update_from_output`` decides from the plain-data ``Outcome`` what finished, failed or is requeued, and the core
  carries that out; chunks, progress and finished requests go to the output processor.

As in vLLM's plan -> execute -> update (../shared/STYLE.md), the engine turns each batch, prefill or decode step
into a plain-data ``Outcome`` (ok / out of memory / refused rows / crashed) and the scheduler's
``update_from_output`` decides what finished, what fails, what is requeued and the batch cap; the engine only
carries that out (stores audio, resolves futures, releases rows). Out of memory (``torch.OutOfMemoryError``, detected
by type in ``memory.is_out_of_memory``) first frees the device cache and the prefix cache. Per-request failures are
never raised to callers: they come back as ``SynthesisResult`` with status FAILED / CANCELLED and a typed ``finish``
(``tts_app.finish``: the reason is decided here, where the error is caught, from its type).

Segment context (``SynthesisParams.segment_context``, on a family that offers it): a request's segments run in
order; only its next segment is in the scheduler, queued by the update when its predecessor finished
(``_queue_next``), with the earlier segments it hears counted in its row's positions. Until then it is not a
candidate, so fairness, preemption (a preempted row restarts the same segment), retakes and streaming are as for any
row; other requests' rows still share its batches.

Determinism: a row's audio depends only on its text, reference, seed and knobs (adapters draw every random number
from the row's own seed), so batching, joining a running batch, OOM retries, preemption (a job row giving its slot to an
interactive one, or a row of a request holding several to a request with none: ``Scheduler`` rules d, e) and cancels
of others never change what a user hears. A streamed row restarted
after OOM or preemption keeps the samples already sent and skips them in the new run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future

from tts_app.adapters.base import DecodeBatch, ModelFacts, PrefixCache, TTSAdapter
from tts_app.adapters.kv_pool import DecodeSettings, held_pool_bytes
from tts_app.config import EngineConfig
from tts_app.errors import InputError
from tts_app.finish import Finish
from tts_app.metrics import BATCH_SIZE, QUEUE_WAIT, TAKE_SCORE_SECONDS, TAKES_REROLLED, TAKES_SCORED
from tts_app.engine.memory import (
    MemoryEstimator,
    MemoryProbe,
    format_bytes,
    memory_budget_bytes,
    probe_for_device,
)
from tts_app.engine.scheduler import BatchCap, Outcome, OutcomeKind, Phase, Scheduler, SegmentWork, Update
from tts_app.engine.executor import Executor
from tts_app.engine.state import RequestState
from tts_app.engine.takes import Take, TakeChecker
from tts_app.engine.handle import ProgressEvent
from tts_app.engine.input import InputProcessor
from tts_app.engine.input import check_emotion_support  # noqa: F401 (its home before; tts_app.jobs.runner)
from tts_app.engine.output import OutputProcessor, call_progress, deliver_chunks
from tts_app.engine.streaming import AudioStream
from tts_app.request import RequestStatus, StopReason, SynthesisRequest, SynthesisResult, check_audio_s
from tts_app.zerogpu import ZeroGPUConfig, on_zero_gpu

logger = logging.getLogger(__name__)

# Share of the memory budget the prefix cache may hold (shared voices' prefilled prompt prefixes). An eighth leaves
# the running rows most of the budget while still holding a few voices' prefixes (a 10 s reference is ~90 positions,
# ~5 MiB of KV for VibeVoice-1.5B in bfloat16).
PREFIX_CACHE_BUDGET_SHARE = 1 / 8
# A sampled segment that ends speech at once is taken again with another seed at most this many times
# (``EngineCore._retake_empty``; our choice: on the tiny IndexTTS 2 ~1 seed in 6 ends at once, so 3 retakes leave
# well under 1 in 1,000 segments empty if draws are independent). Take k's seed: seed + k * RETAKE_SEED_STRIDE, a
# prime far from the seed + i of a request's other segments.
MAX_EMPTY_RETAKES = 3
RETAKE_SEED_STRIDE = 1_000_003

class EngineCore:
    """The engine core (module docstring): the scheduler, the running batch, the per-request state and the one
    step loop. ``tts_app.engine.front.Engine`` builds on it (submit, cancel, stats, lifecycle); use that.

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
            waits for a free slot (for comparisons; ``Scheduler`` rules d, e).
        fair: rows shared across requests by turns, and a stream's next segment admitted before its client runs dry
            (``Scheduler``'s ``fair``); False = oldest segment first (for comparisons).
        zero_gpu: how a batch's device work is sized into ``spaces.GPU`` calls on a ZeroGPU Space
            (``tts_app.zerogpu``); used only there (``SPACES_ZERO_GPU``), a no-op elsewhere.
        take_scorer: the ``tts_app.quality.scorer.TakeScorer`` that scores takes under a take policy
            (``SynthesisParams.take_check``); None = built on first use from ``config.quality_asr`` and Resemblyzer,
            on the adapter's device (``tts_app.engine.takes``).
    """

    def __init__(self, adapter: TTSAdapter, config: EngineConfig | None = None,
                 memory_probe: MemoryProbe | None = None, *, bucketing: bool = True, continuous: bool | None = None,
                 preempt: bool = True, fair: bool = True, zero_gpu: ZeroGPUConfig = ZeroGPUConfig(),
                 take_scorer=None):
        self.adapter = adapter
        self.config = config = config or EngineConfig()  # EngineConfig checks its own values
        self.device = str(adapter.device)
        # scores takes under a take policy, on its own thread (its models count in the budget: ``_measure_budget``)
        self.takes = TakeChecker((lambda: take_scorer) if take_scorer is not None else self._build_take_scorer)
        self.probe = memory_probe if memory_probe is not None else probe_for_device(self.device)
        self.estimator = MemoryEstimator(
            kv_bytes_per_position=adapter.facts.kv_bytes_per_position,
            cfg_multiplier=adapter.facts.cfg_multiplier,
            activation_bytes_per_row=config.activation_bytes_per_row,
        )
        self.inputs = InputProcessor(adapter, self.estimator)  # the request front end, in callers' threads
        self.scheduler = Scheduler(self.estimator.batch_bytes, wait_window_s=config.wait_window_ms / 1000.0,
                                   bucketing=bucketing, max_batch_size=config.max_batch_size,
                                   grow_after_successes=config.grow_after_successes,
                                   observe=self._observe, preempt=preempt, fair=fair)
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
        self._output = OutputProcessor()  # chunks, progress, assembly and futures, off the worker's thread
        self._cv = threading.Condition()
        self._requests: dict[str, RequestState] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped_finish = Finish.shut_down()
        self._busy = False
        self._budget_bytes = self._measure_budget()  # the one memory budget (``_remeasure_budget``)
        # how the adapter's step-wise decode runs: KV pool sized from the batch cap, bounded by the budget
        adapter.decode_settings = DecodeSettings(pooled=True, compile=config.resolve_compile(self.device),
                                                 max_kv_bytes=self._budget_bytes, max_rows=config.max_batch_size)
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
        self._num_streams = 0  # streams that sent audio and ended
        self._num_underruns = 0
        self._max_underrun_s = 0.0
        self._outcomes = {RequestStatus.DONE: 0, RequestStatus.FAILED: 0, RequestStatus.CANCELLED: 0}
        # the device work of each step (a OneStepBatch for a family without a step interface, or on ZeroGPU)
        self.executor = Executor(adapter, config, self.probe, step_mode=self.step_mode, zero_gpu=zero_gpu)
        self.gpu_calls = self.executor.gpu_calls

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

    # -- estimates -----------------------------------------------------------------------------------------------
    def _measure_budget(self) -> int | None:
        """The memory budget for rows. An explicit budget (``--memory-budget``) is shared with the take checker's
        models once they loaded (their bytes are taken off it); a budget measured from free device memory already
        leaves them out."""
        budget = memory_budget_bytes(self.probe, memory_budget_bytes=self.config.memory_budget_bytes,
                                     memory_utilization=self.config.memory_utilization,
                                     safety_margin_bytes=self.config.safety_margin_bytes)
        if budget is not None and self.config.memory_budget_bytes is not None:
            budget = max(0, budget - self.takes.num_bytes())
        return budget

    def _build_take_scorer(self):
        """The default take scorer (``config.quality_asr`` + Resemblyzer, on the adapter's device)."""
        from tts_app.quality.asr import asr_backend
        from tts_app.quality.scorer import TakeScorer
        from tts_app.quality.speaker import SpeakerEncoder

        device = self.device if self.device.startswith("cuda") else "cpu"
        return TakeScorer(asr_backend(self.config.quality_asr, device), SpeakerEncoder(device))

    def _cache_bytes(self) -> int:
        """Bytes of the memory budget the prefix cache holds (it is evictable: the scheduler admits rows against
        the whole budget and says how much of it to evict, ``StepPlan.evict_bytes``), after trimming the cache to
        ``PREFIX_CACHE_BUDGET_SHARE`` of the budget. Lock held."""
        budget = self._budget_bytes
        if budget is None:
            return 0
        self.prefix_cache.trim(int(budget * PREFIX_CACHE_BUDGET_SHARE))
        return self.prefix_cache.num_bytes

    def _remeasure_budget(self) -> None:
        """Measure the one memory budget now (nothing of ours is running): rows plus the evictable prefix cache. A
        budget measured from free device memory leaves out what the cache held then, so that is added back (the
        cache is counted in ``_cache_bytes`` instead). Lock held."""
        budget = self._measure_budget()
        if budget is not None and self.config.memory_budget_bytes is None:
            budget += self.prefix_cache.num_bytes
            budget += held_pool_bytes(self.adapter)  # the KV pool is ours, allocated once and reused
        self._budget_bytes = budget

    def _evict(self, num_bytes: int) -> None:
        """Evict ``num_bytes`` from the prefix cache (the scheduler's ``evict_bytes``), logged. Lock held."""
        if num_bytes > 0:
            freed = self.prefix_cache.evict(num_bytes)
            logger.info("evicted %s of voice prefixes from the cache to make room for rows", format_bytes(freed))

    # -- requests: finish, cancel ----------------------------------------------------------------------------
    def _failed_result(self, request: SynthesisRequest, finish: Finish, warnings: list[str] | None = None,
                       status: RequestStatus = RequestStatus.FAILED) -> SynthesisResult:
        return SynthesisResult(request_id=request.request_id, status=status, sampling_rate=self.sampling_rate,
                               error=finish.message, warnings=list(warnings or []), finish=finish)

    def _finish_locked(self, state: RequestState, status: RequestStatus, error: Finish | None,
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
            result = self._failed_result(state.request, error or Finish.error(status.value), state.warnings, status)
            resolved.append((state.handle.future, result, state.audio_stream))

    def _resolve(self, resolved: list[tuple[Future, SynthesisResult | RequestState, AudioStream | None]]) -> None:
        """Hand finished requests to the output processor (``tts_app.engine.output``), each after its own chunks and
        progress already posted: there it is assembled (join, tempo, loudness) if DONE, its last chunks delivered (a
        request that did not stream gets its final audio as one chunk), its stream ended and its future resolved (in
        that order, so a stream's consumer sees every chunk before ``result()`` returns)."""
        for future, result, audio_stream in resolved:
            request_id = result.request.request_id if isinstance(result, RequestState) else result.request_id
            self._output.post(request_id, lambda f=future, r=result, a=audio_stream: self._finish_output(f, r, a))

    def _finish_output(self, future: Future, result: SynthesisResult | RequestState,
                       audio_stream: AudioStream | None) -> None:
        """A finished request's output task, run on the output thread (``Engine._finish_output``: assembly, the
        stream's end, the future)."""
        raise NotImplementedError

    def _cancel_all(self, reason: Finish, status: RequestStatus = RequestStatus.CANCELLED) -> None:
        resolved: list = []
        with self._cv:
            for state in list(self._requests.values()):
                self._finish_locked(state, status, reason, resolved)
        self._resolve(resolved)

    def _fail_all(self, reason: Finish) -> None:
        self._cancel_all(reason, RequestStatus.FAILED)

    # -- worker --------------------------------------------------------------------------------------------------
    def _worker(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # a bug in the loop itself: fail everything rather than leave callers hanging
            logger.exception("engine worker crashed")
            reason = Finish.error(f"engine worker crashed: {type(exc).__name__}: {exc}", code="engine_crashed")
            with self._cv:
                self._stopping = True
                self._stopped_finish = reason
            self._fail_all(reason)
            raise
        self._cancel_all(Finish.shut_down())

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

    def _note_started(self, state: RequestState) -> None:
        """A row of ``state`` starts running: the first one ends its wait behind other requests (lock held)."""
        if state.queue_wait_s is None:
            state.queue_wait_s = time.monotonic() - state.submitted_s
            QUEUE_WAIT.labels(priority=state.request.priority.name.lower()).observe(state.queue_wait_s)

    def _note_stream_deadlines(self) -> None:
        """Give the waiting segments of each live stream the moment its client runs out of audio
        (``AudioStream.play_end_s``), so the scheduler admits the next one before that (lock held)."""
        for state in self._requests.values():
            stream = state.audio_stream
            if stream is not None and stream.live and stream.play_end_s is not None:
                for work in state.works:
                    work.deadline_s = stream.play_end_s

    def _fail_too_large(self, works: list[SegmentWork], budget: int | None, resolved: list) -> None:
        """Fail the requests of rows that do not fit ``budget`` (the budget the scheduler checked them against,
        quoted in the message) even alone. Lock held."""
        for work in works:
            state = self._requests.get(work.request_id)
            if state is not None:
                msg = self.inputs.too_large_message(state.request, work.index, work.text, budget or 0)
                logger.warning("request %s: %s", work.request_id, msg)
                self._finish_locked(state, RequestStatus.FAILED, Finish.too_large(msg), resolved)

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
                state.restart_segment(work.index)
        for work, finish in update.failed:
            state = self._requests.get(work.request_id)
            if state is not None and not state.finished:
                # INFO, not WARNING: the message reaches the request's result (the CLI prints it, the UI shows it),
                # and _run_phase already logged the out-of-memory error or crash that caused it.
                logger.info("request %s failed (%s): %s", work.request_id, finish.reason.value, finish.message)
                self._finish_locked(state, RequestStatus.FAILED, finish, resolved)
        touched: dict[str, RequestState] = {}
        now = time.perf_counter()
        for work, reason in update.finished:
            state = self._requests.get(work.request_id)
            if state is None or state.finished:
                continue
            if self._retake_empty(state, work, reason):
                continue
            seconds = (generate_s or {}).get(id(work), now - state.segments[work.index].started_s)
            if self._check_take(state, work, reason, batch_size, seconds):
                continue
            if state.finish_segment(work.index, reason, batch_size, seconds):
                self._num_segments_done += 1
                touched[work.request_id] = state
                self._queue_next(state, work.index)
        for state in touched.values():
            if state.on_progress is not None:
                events.append((state.on_progress, ProgressEvent(state.request.request_id, state.num_done,
                                                                state.num_segments, batch_size)))
            if state.num_done == state.num_segments:
                self._finish_locked(state, RequestStatus.DONE, None, resolved)

    def _queue_next(self, state: RequestState, index: int) -> None:
        """Segment context (``RequestState.segment_context``; lock held): segment ``index`` finished, so the next
        segment of its request can hear it: choose the earlier segments it hears (``InputProcessor.context_window``,
        within the model's input limit and the memory budget), count them in its row's positions and queue it. It
        keeps its request's arrival time, so it takes its turn among other requests' rows as if queued at submit."""
        following = index + 1
        if not state.segment_context or following >= state.num_segments:
            return
        segment = state.segments[following]
        segment.context_from, segment.work.row_positions = self.inputs.context_window(state, following,
                                                                                      self._budget_bytes)
        self.scheduler.add([segment.work])

    def _retake_empty(self, state: RequestState, work: SegmentWork, reason: StopReason) -> bool:
        """A sampled segment that ended speech at once (no audio, the model's own end, not a cap) is generated
        again with another seed, up to ``MAX_EMPTY_RETAKES`` times (lock held); True when it was requeued.

        Why: a model can pick its end-of-speech token first (IndexTTS 2 on the tiny checkpoint does for ~1 seed in
        6 with upstream's 3 sampled beams and length_penalty 0, where upstream's ``infer()`` then fails in s2mel);
        a take with no audio is never what the user wants. Take ``k`` uses ``seed + k * RETAKE_SEED_STRIDE`` (the
        seed a result's segment reports is the one that spoke; the retakes are in its ``retaken_seeds``), so it is
        deterministic: the same request gives the same audio alone or in any batch. A greedy segment is not
        retaken (another seed changes nothing): it finishes empty and the doors say so (``no_audio_error``)."""
        segment = state.segments[work.index]
        if (reason is not StopReason.END_OF_SPEECH or segment.partial or segment.wave is not None
                or state.params.greedy is not False or len(segment.retaken_seeds) >= MAX_EMPTY_RETAKES):
            return False
        segment.retaken_seeds.append(work.seed)
        retake = self._take_again(state, work)
        logger.info("request %s: segment %d ended speech at once with seed %d; taken again with seed %d",
                    work.request_id, work.index + 1, work.seed, retake.seed)
        return True

    def _take_again(self, state: RequestState, work: SegmentWork) -> SegmentWork:
        """Generate segment ``work`` again with the next take's seed (``seed + RETAKE_SEED_STRIDE``): the one retake
        mechanism, for an empty take (``_retake_empty``) and a take below the take policy's thresholds
        (``_take_scored``). Lock held. Returns the new work, queued."""
        retake = dataclasses.replace(work, seed=work.seed + RETAKE_SEED_STRIDE, steps_done=0, admitted=-1,
                                     num_restarts=0, isolate=False)
        state.segments[work.index].work = retake
        self.scheduler.requeue([retake])
        self._cv.notify_all()
        return retake

    # -- the take policy (``SynthesisParams.take_check``; ``tts_app.engine.takes``) -------------------------------
    def _check_take(self, state: RequestState, work: SegmentWork, reason: StopReason, batch_size: int,
                    generate_s: float) -> bool:
        """A segment's take ended under a take policy: hold it aside and post it to the take checker (lock held);
        True when it went there (the segment finishes when its verdict comes back, ``_take_scored``)."""
        params = state.params
        segment = state.segments[work.index]
        if params.take_check == "off" or segment.wave is not None:
            return False
        take = Take(seed=work.seed, wave=state.hold_take(work.index), stop_reason=reason, batch_size=batch_size,
                    generate_s=generate_s)
        reference = self._take_reference(state, segment)
        text = segment.source_text
        self.takes.post(lambda: self._score_take(state, work, take, text, reference))
        return True

    @staticmethod
    def _take_reference(state: RequestState, segment) -> tuple | None:
        """(samples, sampling rate, cache key) of the voice a segment's take should have: the request's reference,
        or its dialogue speaker's; None when it has none or holds several speakers' turns."""
        request = state.request
        if request.speakers:
            part = state.parts[segment.part]
            if part.speaker is None or len({piece.speaker for piece in segment.turns}) > 1:
                return None
            ref = request.speakers[part.speaker].reference_audio
        else:
            ref = request.reference_audio
        return None if ref is None else (ref.samples, ref.sampling_rate, ref.key)

    def _score_take(self, state: RequestState, work: SegmentWork, take: Take, text: str, reference) -> None:
        """On the take checker's thread: score ``take``, then hand the verdict to ``_take_scored``."""
        from tts_app.quality.policy import take_problems
        from tts_app.quality.scorer import TakeScores
        from tts_app.quality.signal import check_signal

        if state.finished:  # cancelled or failed while it waited: nothing to score for
            return
        params = state.params
        try:
            scorer = self.takes.scorer
            scores = scorer.score(take.wave, self.sampling_rate, text,
                                  reference=None if reference is None else reference[:2],
                                  reference_key=reference[2] if reference is not None else "",
                                  truncated=take.stop_reason is StopReason.MAX_NEW_TOKENS)
        except Exception as exc:  # noqa: BLE001 - a scoring failure never fails the request: the take is kept
            logger.exception("request %s: scoring segment %d failed", work.request_id, work.index + 1)
            scores = TakeScores(None, None, None, None, check_signal(take.wave, self.sampling_rate, text),
                                error=f"{type(exc).__name__}: {exc}")
        take.scores = scores
        take.problems = take_problems(scores, max_error_rate=params.take_max_error_rate,
                                      min_similarity=params.take_min_similarity)
        TAKE_SCORE_SECONDS.observe(scores.score_s)
        TAKES_SCORED.labels(outcome="unscored" if scores.error is not None else
                            "below" if take.problems else "pass").inc()
        self._take_scored(state, work, take)

    def _take_scored(self, state: RequestState, work: SegmentWork, take: Take) -> None:
        """A take's verdict (the take checker's thread; takes the engine lock): below a threshold under "reroll"
        with re-rolls left, sampled (a greedy take is the same with any seed), and none of it streamed yet (a live
        stream sent it already): generate the segment again with the next
        seed; else keep the best of its takes (``tts_app.quality.policy.best_take``) and finish the segment."""
        from tts_app.quality.policy import best_take

        resolved: list = []
        events: list = []
        with self._cv:
            if state.finished or self._stopping:
                return
            params = state.params
            segment = state.segments[work.index]
            segment.takes.append(take)
            reroll = (take.problems and take.problems != ("unscored",) and params.take_check == "reroll"
                      and len(segment.takes) <= params.take_max_rerolls
                      and params.greedy is False  # greedy decoding: another seed gives the same take
                      and (state.audio_stream is None or not state.audio_stream.live))  # none of it sent yet
            if reroll:
                retake = self._take_again(state, work)
                TAKES_REROLLED.inc()
                logger.info("request %s: segment %d below threshold with seed %d (%s); taken again with seed %d",
                            work.request_id, work.index + 1, take.seed, ", ".join(take.problems), retake.seed)
                return
            kept = segment.takes[best_take([(t.scores, t.problems) for t in segment.takes])]
            state.keep_take(work.index, kept.wave)
            segment.work = dataclasses.replace(segment.work, seed=kept.seed)
            if state.finish_segment(work.index, kept.stop_reason, kept.batch_size, kept.generate_s):
                self._num_segments_done += 1
                if state.on_progress is not None:
                    events.append((state.on_progress, ProgressEvent(state.request.request_id, state.num_done,
                                                                    state.num_segments, kept.batch_size)))
                if state.num_done == state.num_segments:
                    self._finish_locked(state, RequestStatus.DONE, None, resolved)
            self._cv.notify_all()
        self._deliver(resolved, events)

    def _restart_preempted(self, preempted: list[SegmentWork]) -> None:
        """Running rows the scheduler took out for a more urgent segment or a fair share (``Scheduler`` rules d, e;
        lock held): they restart their segment
        (the engine releases them from the running batch with the cancelled rows)."""
        if not preempted:
            return
        self._num_preempted += len(preempted)
        logger.info("%d rows (requests %s) make room for a more urgent request or one with no row yet; they restart "
                    "later", len(preempted), ", ".join(sorted({w.request_id for w in preempted})))
        for work in preempted:
            state = self._requests.get(work.request_id)
            if state is not None and not state.finished:
                state.restart_segment(work.index)

    def _deliver(self, resolved: list, events: list) -> None:
        """Outside the lock: post to the output processor the stream chunks of live requests, progress callbacks,
        then finished requests (each request's in that order; none of it runs on this thread)."""
        with self._cv:
            chunks = [(s.audio_stream, s.audio_stream.take_pending()) for s in self._requests.values()
                      if s.audio_stream is not None and s.audio_stream.pending]
        for audio_stream, pending in chunks:
            self._output.post(audio_stream.request_id,
                              lambda a=audio_stream, c=pending: deliver_chunks(a, c))
        for callback, event in events:
            self._output.post(event.request_id, lambda f=callback, e=event: call_progress(f, e))
        self._resolve(resolved)

    # -- the step loop: schedule -> execute -> update ---------------------------------------------------------------
    def _schedule(self, batch: DecodeBatch | None
                  ) -> tuple[list[tuple[SegmentWork, RequestState]], list[SegmentWork], float, list]:
        """The schedule part of a step (lock held): which waiting segments join the batch now. A step adapter's
        running batch admits per decode step (``Scheduler.schedule_step``); a ``OneStepBatch`` takes a whole batch
        (``Scheduler.schedule``: bucketing, wait window). Returns (admitted rows, rows to release from the running
        batch, seconds to wait before scheduling again (0 = none), requests failed as too large); each admitted row
        comes with its request's state, taken now (a cancel may drop it from ``_requests`` before the prefill)."""
        resolved: list = []
        if batch is None:
            self._remeasure_budget()  # no running batch: a clean reading
        budget = self._budget_bytes
        self._note_stream_deadlines()
        now = time.monotonic()
        if self.step_mode:
            released = self.scheduler.take_released()
            plan = self.scheduler.schedule_step(budget, evictable_bytes=self._cache_bytes(),
                                                admit_only_when_empty=not self.continuous, now_s=now)
            admit, wait_s = plan.admit, 0.0
            self._restart_preempted(plan.preempted)
            released += plan.preempted
        else:
            plan = self.scheduler.schedule(now, None, budget, evictable_bytes=self._cache_bytes(), urgent_at_s=now)
            admit, wait_s, released = plan.batch, plan.wait_s, []
        self._fail_too_large(plan.too_large, budget, resolved)
        self._evict(plan.evict_bytes)  # before the prefill: rows come before cached voices
        started = time.perf_counter()
        admitted = [(work, self._requests[work.request_id]) for work in admit]
        for work, state in admitted:
            state.segments[work.index].started_s = started
            self._note_started(state)
        return admitted, released, wait_s, resolved

    def _serve(self) -> None:
        """The engine core's one loop (module docstring): schedule -> prefill the admitted rows -> one decode step
        of the running batch -> update, until stopped. With ``continuous=False`` (request-level batching on a step
        adapter) a new batch starts only when the running one has ended, and finished rows stay in it (padding)
        until then; a ``OneStepBatch`` ends in its one step."""
        batch: DecodeBatch | None = None
        idle_since: float | None = None
        while True:
            empty_cache = False
            with self._cv:
                if self._stopping:
                    break
                admit, released, wait_s, resolved = self._schedule(batch)
                if self.scheduler.num_running == 0 and not admit and not released:
                    if batch is not None and batch.num_rows == 0:
                        batch = None
                    if batch is None and not resolved:
                        if wait_s > 0:
                            self._cv.wait(timeout=wait_s)
                            continue
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
            batch = self._step(batch, admit)

    def _note_oom(self) -> None:
        """After an out-of-memory error (``Executor.run_phase``): count it, empty the prefix cache."""
        with self._cv:
            self._num_oom += 1
            self.prefix_cache.clear()

    def _prefill(self, batch: DecodeBatch | None, admit: list[tuple[SegmentWork, RequestState]]
                 ) -> DecodeBatch | None:
        """Prefill the admitted rows into ``batch`` (a new one, ``Executor.start_batch``, when None) and apply the
        outcome. Returns the running batch (None when there was none and it could not be made)."""
        works = [w for w, _ in admit]
        rows = [(w, self.inputs.segment_row(s, w)) for w, s in admit]
        head, state = admit[0]
        # a step adapter's rows carry their seeds; a whole batch runs with its head row's (``batch_key``: the knobs
        # but the seed are equal across it)
        params = state.params if self.step_mode else state.params.with_seed(head.seed)
        if not self.step_mode:  # a OneStepBatch only gathers its rows: no device work, nothing to report
            batch = batch or self.executor.start_batch(params, self.prefix_cache)
            batch.prefill(rows)
            return batch
        holder = {"batch": batch}

        def call():
            if holder["batch"] is None:
                holder["batch"] = self.executor.start_batch(params, self.prefix_cache)
            return self.executor.prefill(holder["batch"], rows)

        outcome, seconds = self.executor.run_phase(Phase.PREFILL, works, call, self._note_oom)
        batch = holder["batch"]
        with self._cv:
            self._prefill_s += seconds or 0.0
            update, resolved, events = self._update_locked(outcome, batch.num_rows if batch is not None else 0)
        if batch is not None:
            self._release(batch, update)
        self._deliver(resolved, events)
        return batch

    def _step(self, batch: DecodeBatch | None, admit: list[tuple[SegmentWork, RequestState]]
              ) -> DecodeBatch | None:
        """One decode step of the running batch and its update. Returns the batch to go on with (None when it ended
        or was dropped)."""
        phase = Phase.DECODE if batch is None else self.executor.phase_of(batch)
        with self._cv:
            live = self.scheduler.running() if phase is Phase.DECODE else [w for w, _ in admit]
            if not live:
                self._busy = False
        if batch is None:
            return None
        if not live:
            return self._end_if_done(batch)
        by_key = {id(w): w for w in live}
        num_rows = batch.num_rows
        row_steps_before, padded_before = batch.num_row_steps, batch.num_padded_row_steps
        outcome, steps = self.executor.run_phase(phase, live, lambda: self.executor.decode_step(batch),
                                                 self._note_oom)
        if outcome.kind is OutcomeKind.OOM and num_rows > len(live):
            # Request-level batching keeps finished rows as padding: out of memory then is not the live rows'
            # fault. Drop the padding and retry the step before the scheduler shrinks the batch or fails a row.
            batch.release([key for key in batch.keys if id(key) not in by_key])
            with self._cv:
                self._busy = False
            return batch
        generate_s = None
        over_limit: list[tuple[RequestState, InputError]] = []
        with self._cv:
            self._busy = False
            self._used_since_empty = True
            self._num_row_steps += batch.num_row_steps - row_steps_before
            self._num_padded_row_steps += batch.num_padded_row_steps - padded_before
            if steps is not None:
                for work in live:  # a segment's batch size: the most rows it shared a decode step with
                    state = self._requests.get(work.request_id)
                    if state is not None and not state.finished:
                        segment = state.segments[work.index]
                        segment.batch_size = max(segment.batch_size, num_rows)
                finished = []
                for step in steps:
                    work = by_key.get(id(step.key))
                    if work is None:
                        continue
                    state = self._requests.get(work.request_id)
                    if state is not None and not state.finished:
                        if phase is Phase.BATCH:
                            segment = state.segments[work.index]
                            state.num_audio_samples -= sum(p.size for p in segment.partial)
                            segment.partial = []  # a whole batch's waveform replaces it
                        state.add_audio(work.index, step.audio)
                        if step.context is not None:  # the family's carrier of segment context (codec frames)
                            state.segments[work.index].context_tokens = step.context
                        try:  # RequestLimits.max_audio_s: a model that never stops cannot fill memory or disk
                            check_audio_s(state.audio_so_far_s(self.sampling_rate))
                        except InputError as exc:
                            over_limit.append((state, exc))
                    if step.stop_reason is not None:
                        finished.append((work, step.stop_reason))
                outcome = Outcome(phase=outcome.phase, kind=outcome.kind, rows=outcome.rows,
                                  finished=tuple(finished), measured_peak_bytes=outcome.measured_peak_bytes)
                self._num_batches += 1
                self._last_batch_size = num_rows
                BATCH_SIZE.observe(len(live))  # rows that decoded this step (request-level padding rows excluded)
                if phase is Phase.BATCH:
                    generate_s = {id(w): batch.generate_s for w in live}
            update, resolved, events = self._update_locked(outcome, num_rows, generate_s)
            for state, exc in over_limit:
                if not state.finished:
                    logger.info("request %s stopped: %s", state.request.request_id, exc)
                    self._finish_locked(state, RequestStatus.FAILED, Finish.from_error(exc), resolved)
        self._deliver(resolved, events)
        if phase is Phase.BATCH or update.drop_running_batch:
            return None  # a OneStepBatch ends in its step; a crashed step's batch state is unknown
        self._release(batch, update)
        return self._end_if_done(batch)

    def _update_locked(self, outcome: Outcome, batch_size: int, generate_s: dict[int, float] | None = None
                       ) -> tuple[Update, list, list]:
        """The update part of a step, the one place it happens (lock held): the scheduler's ``update_from_output``
        decides, ``_apply_update`` carries it out. Returns (the update, finished requests and progress events for
        ``_deliver``, which the caller runs outside the lock)."""
        resolved: list = []
        events: list = []
        update = self.scheduler.update_from_output(outcome)
        self._apply_update(update, resolved, events, batch_size=batch_size, generate_s=generate_s)
        self._cv.notify_all()
        return update, resolved, events

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
