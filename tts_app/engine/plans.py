"""Plain data the engine and the scheduler exchange: a segment waiting for or in a batch (``SegmentWork``), the
plans the scheduler returns (``SchedulePlan``, ``StepPlan``), the outcome of a batch, prefill or decode step the
engine reports (``Outcome``) and the update the scheduler decides from it (``Update``), and the batch cap
(``BatchCap``). The policy that uses them is in ``tts_app.engine.scheduler``; the speaking rates that order
segments by expected length are in ``tts_app.speaking_rate``.

No tensors, no torch import (the scheduler's test checks it for both modules).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Hashable

from tts_app.finish import Finish
from tts_app.request import Priority, StopReason

# A streaming request's next segment is admitted ahead of its turn (and may take a row as in rule e) once its
# client has less than this much audio left to play (``SegmentWork.deadline_s``): enough for a prefill and the first
# decode steps of the new row, which take a fraction of a second on the tiny CPU models and the GPU models measured
# (bench/engine_v2_bench.py prints the underruns that remain).
STREAM_HEADROOM_S = 2.0


@dataclass(eq=False)  # identity, not field equality: two segments are never "the same" segment
class SegmentWork:
    """One segment waiting for (or in) a batch.

    Attributes:
        request_id: id of the request it belongs to.
        index: 0-based segment index within the request.
        text: segment text for the model.
        seed: this segment's seed (request seed + index).
        batch_key: segments may share a batch only when equal (``SynthesisParams.batch_key()``).
        priority: ``Priority`` of the request.
        expected_steps: expected decode steps (output length) used for bucketing and padded-step counting.
        row_positions: estimated KV-cache positions of the row at the end of decoding (memory estimate).
        arrival_s: monotonic time the request was submitted, in seconds.
        sequence: global submission order (tie-breaker, keeps FIFO order stable).
        payload: anything the engine needs to run the row (opaque to the scheduler).
        max_steps: the row's decode-step cap (``max_new_tokens``); 0 = unknown (then ``row_positions`` counts as
            reached at once).
        steps_done: decode steps the row has run in the running batch (continuous batching; 0 while waiting).
        isolate: run alone (its batch failed; retried by itself to find the row at fault).
        admitted: admission order into the running batch (-1 while waiting); larger = younger.
        num_restarts: times the row was requeued after it had started (out of memory), restarting its segment.
        deadline_s: its request streams: when the client runs out of the audio sent so far (monotonic s, set by the
            engine as chunks go out); None = not streamed, or nothing sent yet.
    """

    request_id: str
    index: int
    text: str
    seed: int
    batch_key: Hashable
    priority: Priority
    expected_steps: int
    row_positions: int
    arrival_s: float
    sequence: int = 0
    payload: object = None
    max_steps: int = 0
    steps_done: int = 0
    isolate: bool = False
    admitted: int = -1
    num_restarts: int = 0
    deadline_s: float | None = None

    def urgent(self, now_s: float | None) -> bool:
        """Its request streams and its client runs out of audio within ``STREAM_HEADROOM_S`` of ``now_s``."""
        return self.deadline_s is not None and now_s is not None and self.deadline_s - now_s < STREAM_HEADROOM_S

    @property
    def order(self) -> tuple:
        return (int(self.priority), self.arrival_s, self.sequence)

    @property
    def remaining_steps(self) -> int:
        """Decode steps the row may still run (up to its cap)."""
        return max(0, self.max_steps - self.steps_done)

    @property
    def current_positions(self) -> int:
        """KV positions the row holds now: its maximum less the steps it has not run yet."""
        return self.row_positions - self.remaining_steps


class Phase(str, enum.Enum):
    """What an ``Outcome`` reports on."""

    BATCH = "batch"  # request-level: one batch ran to its end (preprocess -> generate -> postprocess)
    PREFILL = "prefill"  # continuous: rows joined the running batch
    DECODE = "decode"  # continuous: one decode step of every live row


class OutcomeKind(str, enum.Enum):
    """How a batch, prefill or decode step ended."""

    OK = "ok"
    OOM = "oom"  # torch.OutOfMemoryError (detected by type)
    REFUSED = "refused"  # the adapter refused the rows on purpose (a TTSAppError with a message for the user)
    CRASHED = "crashed"  # any other exception


@dataclass(frozen=True)
class Outcome:
    """Plain-data report of one batch / prefill / decode step, made by the engine for ``update_from_output``.

    Attributes:
        phase: ``Phase``.
        kind: ``OutcomeKind``.
        rows: the rows the call ran: the batch (BATCH), the joining rows (PREFILL), the live rows (DECODE).
        finished: rows that ended, with why (BATCH: every row; DECODE: the rows this step finished).
        error: why REFUSED / CRASHED rows fail (the engine's ``tts_app.finish.Finish``, typed where the error was
            caught); passed on to ``Update.failed`` untouched.
        measured_peak_bytes: the call's exact peak above what was allocated before it, when known (CUDA, a new
            high-water mark); feeds the estimator's calibration.
    """

    phase: Phase
    kind: OutcomeKind
    rows: tuple[SegmentWork, ...]
    finished: tuple[tuple[SegmentWork, StopReason], ...] = ()
    error: Any = None
    measured_peak_bytes: int | None = None


@dataclass
class Update:
    """What ``update_from_output`` decided.

    Attributes:
        finished: rows done, with their stop reason (their audio is final).
        failed: rows whose request fails, with why (a ``Finish``: the outcome's ``error``, or OUT_OF_MEMORY for a row
            that ran out of memory alone).
        requeued: rows put back into the queue (restart their segment).
        release: rows to take out of the running batch now (finished, failed or requeued ones).
        drop_running_batch: the running batch's state is unknown (a crashed step): drop it whole.
        cap: the batch cap after the update.
    """

    finished: list[tuple[SegmentWork, StopReason]] = field(default_factory=list)
    failed: list[tuple[SegmentWork, Any]] = field(default_factory=list)
    requeued: list[SegmentWork] = field(default_factory=list)
    release: list[SegmentWork] = field(default_factory=list)
    drop_running_batch: bool = False
    cap: int = 1


@dataclass
class StepPlan:
    """What to do before the next decode step (continuous batching).

    Attributes:
        admit: waiting segments to prefill into the running batch now (already counted as running).
        too_large: segments that cannot fit the budget even alone (removed; the engine fails their requests).
        preempted: running rows taken out for a more urgent segment or for fairness (requeued; the engine releases
            them from the running batch and restarts their segment).
        evict_bytes: bytes the engine must evict from its caches before the prefill, so the running rows (each
            to its cap) and what the caches keep stay within the budget (0 = none).
    """

    admit: list[SegmentWork] = field(default_factory=list)
    too_large: list[SegmentWork] = field(default_factory=list)
    preempted: list[SegmentWork] = field(default_factory=list)
    evict_bytes: int = 0


def oom_alone_message(work: SegmentWork) -> Finish:
    """Why a segment that ran out of device memory as a batch of one fails (OUT_OF_MEMORY, with the fix)."""
    return Finish.out_of_memory_alone(work.index, len(work.text))


@dataclass
class SchedulePlan:
    """What the engine should do next.

    Attributes:
        batch: segments to run now, as one forward call (empty: nothing to run now).
        estimated_bytes: estimated KV cache + activation bytes of ``batch``.
        wait_s: when > 0 and ``batch`` is empty, wait this long (or until new work arrives) and schedule again.
        too_large: segments that cannot fit the budget even as a batch of one (removed from the queue; the
            engine fails their requests).
        evict_bytes: bytes the engine must evict from its caches before running ``batch`` (see module docstring).
    """

    batch: list[SegmentWork] = field(default_factory=list)
    estimated_bytes: int = 0
    wait_s: float = 0.0
    too_large: list[SegmentWork] = field(default_factory=list)
    evict_bytes: int = 0


class BatchCap:
    """The current batch-size cap: multiplicative decrease on out-of-memory, additive increase after successes.

    Pattern: accelerate's ``find_executable_batch_size`` halves on OOM; growing back by one row after
    ``grow_after_successes`` consecutive successes (AIMD, as in TCP congestion control) lets the cap recover when
    the pressure was transient (a long batch-mate, another process) without oscillating wildly.

    Attributes:
        max_batch_size: the user's ceiling (>= 1).
        cap: current cap, 1 <= cap <= max_batch_size.
        grow_after_successes: consecutive successful batches before the cap grows by one.
    """

    def __init__(self, max_batch_size: int, grow_after_successes: int = 4):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        self.max_batch_size = max_batch_size
        self.cap = max_batch_size
        self.grow_after_successes = max(1, grow_after_successes)
        self.num_successes = 0
        self.num_shrinks = 0
        self.num_grows = 0
        self.history: list[int] = [self.cap]  # the cap after every change, oldest first (for gauges and tests)

    def on_oom(self, batch_size: int) -> int:
        """A batch of ``batch_size`` rows ran out of memory: cap = ceil(batch_size / 2). Returns the new cap."""
        new_cap = max(1, min(self.cap, math.ceil(batch_size / 2)))
        self.num_successes = 0
        if new_cap != self.cap:
            self.cap = new_cap
            self.num_shrinks += 1
            self.history.append(new_cap)
        return self.cap

    def on_success(self, batch_size: int) -> int:
        """A batch finished. Only batches that used the whole cap count towards growing (a small batch says
        nothing about whether a larger one fits). Returns the new cap."""
        if self.cap >= self.max_batch_size or batch_size < self.cap:
            return self.cap
        self.num_successes += 1
        if self.num_successes >= self.grow_after_successes:
            self.cap += 1
            self.num_successes = 0
            self.num_grows += 1
            self.history.append(self.cap)
        return self.cap

    def set_max(self, max_batch_size: int) -> None:
        """Change the user's ceiling. Setting the same ceiling again changes nothing (the UI sends it with every
        request, and what OOM taught the cap must survive that). A cap at the old ceiling follows the new one; a
        cap shrunk by OOM stays where it is (clamped to the new ceiling) and grows back as usual."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        if max_batch_size == self.max_batch_size:
            return
        at_ceiling = self.cap >= self.max_batch_size
        self.max_batch_size = max_batch_size
        self.cap = max_batch_size if at_ceiling else min(self.cap, max_batch_size)
        self.num_successes = 0
        self.history.append(self.cap)
