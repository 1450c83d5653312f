"""Batch scheduler: picks the next batch of segments. Plain data only — no tensors, no torch import.

Pattern from vLLM's v1 scheduler (``vllm/v1/core/sched/scheduler.py``): ``schedule()`` returns a plain-data
``SchedulePlan``; the engine executes it and reports back (``requeue`` after an out-of-memory retry, ``BatchCap``
updates). "Not enough memory" is a value in the plan (``too_large``), never an exception.

Policy, in order:

1. Priority: the oldest segment of the most urgent priority class (``Priority.INTERACTIVE`` before ``JOB``) is the
   *head*; it is always in the next batch, so no segment starves.
2. Compatibility: only segments whose ``batch_key`` (``SynthesisParams.batch_key()``: every knob but the seed) and
   priority equal the head's are candidates.
3. Length bucketing: candidates are sorted by expected output length; of the windows of ``cap`` neighbours that
   contain the head, the one with the fewest padded decode steps wins (rows of a batch finish together instead of
   short rows idling while a long one decodes).
4. Memory: the window is shrunk (dropping the row farthest from the head in length) until its estimated bytes fit
   the budget. A head that does not fit alone is returned in ``too_large``.
5. Free riders: lower-priority segments with the same ``batch_key`` fill any room left, but only those not longer
   than the batch's longest row, so they never lengthen the batch the urgent request waits for.
6. Wait window: when the batch is not full and the head arrived less than ``wait_window_s`` ago, the plan says how
   long to wait, so requests submitted at nearly the same moment share a batch.
7. Isolation: a segment flagged ``isolate`` (its batch failed and it is retried to find the row at fault) runs in a
   batch of its own and never shares one.

Continuous batching (iteration-level scheduling, for adapters with a step interface; Orca, OSDI '22, and vLLM's
running batch): ``schedule_step`` is called before every decode step and admits waiting segments into the running
batch, in order (priority class first, then the oldest), while

a. the running batch has a free slot (live rows < ``BatchCap.cap``);
b. every row, admitted or running, can still finish within the budget: ``future_peak_bytes`` of the running rows
   plus the candidate, computed from each row's *current* positions and its *maximum* (its decode-step cap), assuming
   every row runs to its cap and leaves when done, never exceeds ``budget_bytes``;
c. the candidate's ``batch_key`` equals the running batch's; when the most urgent waiting segment has another key
   (or is isolated), nothing more is admitted, so the running batch drains and that segment gets the next batch.
d. preemption (``preempt=True``): a candidate that fails a or b while the running batch holds rows of a less urgent
   priority (an interactive request arriving while a JSONL job fills the batch) takes their place: the youngest of
   them (fewest steps lost) leave the batch and are requeued, restarting their segment later with the same seed,
   so they sound the same (vLLM's preemption by recomputation). Only as many leave as it takes for the candidate to
   pass a and b; if even all of them leaving would not be enough, none leaves. Rows of the same or a more urgent
   priority are never preempted.

The update step (vLLM's ``update_from_output``): the engine turns every batch, prefill or decode step into a plain
``Outcome`` (ok with per-row results / out of memory / refused rows / crashed) and ``update_from_output`` returns
what finished, what failed, what to requeue, what to release from the running batch and the new cap:

* OK: finished rows leave (released at once in continuous mode); a full batch counts towards growing the cap.
* OOM in a batch or a prefill of several rows, or in a decode step of several live rows: the cap is halved
  (``BatchCap.on_oom``) and the youngest rows beyond it (the joining rows first, then the latest admitted) are
  requeued and restart their segment; the others keep their progress. One row alone out of memory fails.
* REFUSED / CRASHED with several rows: every row is requeued ``isolate``, to be retried alone, so one request's bad
  input never fails its batch-mates; one row alone fails with the message. A crashed decode step drops the running
  batch (its state is unknown).
"""

from __future__ import annotations

import enum
import itertools
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from tts_app.config import MIN_MAX_SEGMENT_CHARS
from tts_app.finish import Finish
from tts_app.request import Priority, StopReason

# Typical read-speech rates used only to ORDER segments by expected duration (bucketing), never to cut audio.
# Mandarin: ~4-5 syllables (characters) per second; English: ~150 words/min x ~6 characters per word incl. the
# space = ~15 characters per second. Sources: common speaking-rate figures (e.g. Yuan, Liberman & Cieri 2006,
# "Towards an integrated understanding of speaking rate in conversation").
CJK_CHAR_S = 0.22
OTHER_CHAR_S = 1.0 / 15.0


# Share of a segment's decode-step cap that typical speech of ``max_chars_for_speech_s`` characters may fill: the
# rates above are averages, and a slow reader (Mandarin ~3.5 characters/s, English ~11 characters/s) is about 1.3x
# slower, so 0.7 x the cap leaves room for them before the cap cuts a sentence.
SEGMENT_CAP_MARGIN = 0.7


def max_chars_for_speech_s(speech_s: float, languages, margin: float = SEGMENT_CAP_MARGIN) -> int:
    """Longest segment, in characters, whose typical speech fits in ``margin * speech_s`` seconds in every language
    of ``languages`` (ISO codes; "zh" reads at ``CJK_CHAR_S`` per character, any other at ``OTHER_CHAR_S``).

    Used to derive a family's default ``max_segment_chars`` from its decode-step cap, so an ordinary sentence never
    hits the cap. At least ``tts_app.config.MIN_MAX_SEGMENT_CHARS``.

    Raises:
        ValueError: ``languages`` is empty or ``speech_s`` is negative.
    """
    languages = tuple(languages)
    if not languages or speech_s < 0:
        raise ValueError(f"need languages and speech_s >= 0, got {languages!r}, {speech_s}")
    seconds_per_char = max(CJK_CHAR_S if lang == "zh" else OTHER_CHAR_S for lang in languages)
    return max(MIN_MAX_SEGMENT_CHARS, int(speech_s * margin / seconds_per_char))


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F") and ch.isalnum()


def expected_speech_s(text: str) -> float:
    """Rough spoken duration of ``text`` in seconds (CJK characters ~0.22 s each, other characters ~1/15 s).

    Used for length bucketing only, so it need only order texts correctly.
    """
    wide = sum(1 for ch in text if _is_wide(ch))
    return wide * CJK_CHAR_S + (len(text) - wide) * OTHER_CHAR_S


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
        preempted: running rows taken out for a more urgent segment (requeued; the engine releases them from the
            running batch and restarts their segment).
    """

    admit: list[SegmentWork] = field(default_factory=list)
    too_large: list[SegmentWork] = field(default_factory=list)
    preempted: list[SegmentWork] = field(default_factory=list)


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
    """

    batch: list[SegmentWork] = field(default_factory=list)
    estimated_bytes: int = 0
    wait_s: float = 0.0
    too_large: list[SegmentWork] = field(default_factory=list)


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


def padded_steps(batch: Sequence[SegmentWork]) -> int:
    """Decode steps spent on padding: every row runs until the longest row of the batch ends."""
    if not batch:
        return 0
    longest = max(s.expected_steps for s in batch)
    return sum(longest - s.expected_steps for s in batch)


class Scheduler:
    """Waiting and running segments, the batch-picking and admission policy and the update step (see module
    docstring). Not thread-safe: the engine calls it under its lock.

    Args:
        batch_bytes: estimated bytes of a batch, from its rows' positions (``MemoryEstimator.batch_bytes``).
        wait_window_s: how long a not-full batch waits for more requests, in seconds (request-level batching).
        bucketing: sort by expected length (True) or plain FIFO among compatible segments (False, for comparison).
        max_batch_size: the operator's ceiling on rows per batch / live rows (``BatchCap.max_batch_size``).
        grow_after_successes: ``BatchCap.grow_after_successes``.
        observe: ``observe(row_positions, measured_peak_bytes)`` called with an outcome's measured peak
            (``MemoryEstimator.observe``); None = no calibration.
        preempt: continuous batching, rule d: a more urgent segment takes the place of less urgent running rows
            (False: it waits for a free slot, for comparison).

    Attributes:
        batch_cap: the ``BatchCap`` (halved on out-of-memory, grows back after successes).
    """

    def __init__(self, batch_bytes: Callable[[Sequence[int]], int], wait_window_s: float = 0.03,
                 bucketing: bool = True, *, max_batch_size: int = 8, grow_after_successes: int = 4,
                 observe: Callable[[Sequence[int], int], bool] | None = None, preempt: bool = True):
        self.batch_bytes = batch_bytes
        self.preempt = preempt
        self.wait_window_s = max(0.0, wait_window_s)
        self.bucketing = bucketing
        self.batch_cap = BatchCap(max_batch_size, grow_after_successes)
        self.observe = observe
        self._waiting: list[SegmentWork] = []
        self._running: list[SegmentWork] = []  # continuous batching: rows in the running batch, admission order
        self._released: list[SegmentWork] = []  # running rows of removed requests, for the engine to release
        self._sequence = itertools.count()
        self._admissions = itertools.count()

    # -- queue -------------------------------------------------------------------------------------------------
    def add(self, segments: Sequence[SegmentWork]) -> None:
        """Queue new segments (their ``sequence`` is assigned here)."""
        for s in segments:
            s.sequence = next(self._sequence)
            self._waiting.append(s)

    def requeue(self, segments: Sequence[SegmentWork]) -> None:
        """Put segments back (they restart their segment) keeping their original arrival order."""
        for s in segments:
            if s.steps_done or s.admitted >= 0:
                s.num_restarts += 1
            s.steps_done = 0
            s.admitted = -1
            self._waiting.append(s)

    def remove_request(self, request_id: str) -> int:
        """Drop every waiting segment of a request; its running rows leave the running batch (the engine releases
        them, see ``take_released``). Returns how many waiting segments were removed."""
        before = len(self._waiting)
        self._waiting = [s for s in self._waiting if s.request_id != request_id]
        gone = [s for s in self._running if s.request_id == request_id]
        if gone:
            self._running = [s for s in self._running if s.request_id != request_id]
            self._released += gone
        return before - len(self._waiting)

    def take_released(self) -> list[SegmentWork]:
        """Running rows taken out by ``remove_request`` since the last call (the engine releases their cache)."""
        released, self._released = self._released, []
        return released

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def waiting(self) -> list[SegmentWork]:
        return list(self._waiting)

    def running(self) -> list[SegmentWork]:
        """Rows of the running batch, oldest admission first."""
        return list(self._running)

    # -- memory ------------------------------------------------------------------------------------------------
    def _fits(self, rows: Sequence[SegmentWork], budget_bytes: int | None) -> bool:
        return budget_bytes is None or self.batch_bytes([r.row_positions for r in rows]) <= budget_bytes

    def future_peak_bytes(self, rows: Sequence[SegmentWork]) -> int:
        """Most bytes ``rows`` will hold together from now until the last of them ends, assuming each runs to its
        decode-step cap and leaves when done: at ``k`` steps from now the rows with ``remaining_steps >= k`` are
        live, each at ``current_positions + k``; between two leavings the batch only grows, so the peak is at one of
        the rows' ``remaining_steps``. O(n^2) in the number of rows (a few dozen)."""
        if not rows:
            return 0
        peak = 0
        for k in sorted({r.remaining_steps for r in rows}):
            live = [r.current_positions + k for r in rows if r.remaining_steps >= k]
            peak = max(peak, self.batch_bytes(live))
        return peak

    def _fits_running(self, rows: Sequence[SegmentWork], budget_bytes: int | None) -> bool:
        return budget_bytes is None or self.future_peak_bytes(rows) <= budget_bytes

    # -- request-level policy -----------------------------------------------------------------------------------
    def _pick_window(self, head: SegmentWork, candidates: list[SegmentWork], cap: int) -> list[SegmentWork]:
        """``cap`` candidates containing ``head``: length-bucketed (fewest padded steps) or FIFO."""
        if not self.bucketing:
            return sorted(candidates, key=lambda s: s.order)[:cap]
        ordered = sorted(candidates, key=lambda s: (s.expected_steps, s.order))
        pos = ordered.index(head)
        size = min(cap, len(ordered))
        best: list[SegmentWork] | None = None
        best_key: tuple | None = None
        for start in range(max(0, pos - size + 1), min(pos, len(ordered) - size) + 1):
            window = ordered[start:start + size]
            # fewest padded steps; then fewest total steps (shorter batch returns sooner); then oldest rows
            key = (padded_steps(window), max(s.expected_steps for s in window), sum(s.sequence for s in window))
            if best_key is None or key < best_key:
                best, best_key = window, key
        assert best is not None
        return best

    def schedule(self, now_s: float, cap: int | None, budget_bytes: int | None) -> SchedulePlan:
        """Pick the next batch (request-level batching).

        Args:
            now_s: current monotonic time in seconds (for the wait window).
            cap: most rows allowed in the batch; None = ``batch_cap.cap``.
            budget_bytes: memory the batch may use (KV cache + activations); None = unlimited.

        Returns:
            A ``SchedulePlan``; the chosen segments (and ``too_large`` ones) are removed from the queue.
        """
        plan = SchedulePlan()
        cap = max(1, self.batch_cap.cap if cap is None else cap)
        while self._waiting:
            head = min(self._waiting, key=lambda s: s.order)
            if not self._fits([head], budget_bytes):
                self._waiting.remove(head)
                plan.too_large.append(head)
                continue
            if head.isolate:
                window = [head]
            else:
                candidates = [s for s in self._waiting if s.batch_key == head.batch_key
                              and s.priority == head.priority and not s.isolate]
                window = self._pick_window(head, candidates, cap)
                # shrink to the budget: drop the row whose length is farthest from the head's
                while not self._fits(window, budget_bytes):
                    others = [s for s in window if s is not head]
                    drop = max(others, key=lambda s: (abs(s.expected_steps - head.expected_steps), s.order))
                    window.remove(drop)
                # free riders of lower priority that do not lengthen the batch
                if len(window) < cap:
                    longest = max(s.expected_steps for s in window)
                    riders = sorted((s for s in self._waiting if s.batch_key == head.batch_key and not s.isolate
                                     and s.priority > head.priority and s.expected_steps <= longest),
                                    key=lambda s: (-s.expected_steps, s.order))
                    for rider in riders:
                        if len(window) >= cap:
                            break
                        if self._fits(window + [rider], budget_bytes):
                            window.append(rider)
                if len(window) < cap and now_s - head.arrival_s < self.wait_window_s:
                    plan.wait_s = self.wait_window_s - (now_s - head.arrival_s)
                    return plan
            chosen = {id(s) for s in window}
            self._waiting = [s for s in self._waiting if id(s) not in chosen]
            plan.batch = sorted(window, key=lambda s: s.order)
            plan.estimated_bytes = self.batch_bytes([s.row_positions for s in plan.batch])
            return plan
        return plan

    # -- continuous policy --------------------------------------------------------------------------------------
    def schedule_step(self, budget_bytes: int | None, *, admit_only_when_empty: bool = False) -> StepPlan:
        """Admit waiting segments into the running batch before the next decode step (continuous batching, see
        module docstring, a-c). ``budget_bytes``: memory the running batch may use (None = unlimited).
        ``admit_only_when_empty``: request-level batching on a step adapter (a new batch starts only when the
        running one has ended; it is picked by ``schedule``'s policy).

        Returns:
            A ``StepPlan``; admitted segments move from the queue to the running rows (``running()``).
        """
        plan = StepPlan()
        while self._waiting:  # refuse what cannot fit even alone, wherever it is in the queue
            too_large = [s for s in self._waiting if not self._fits_running([s], budget_bytes)]
            if not too_large:
                break
            plan.too_large += too_large
            self._waiting = [s for s in self._waiting if all(s is not t for t in too_large)]
        if not self._waiting:
            return plan
        if admit_only_when_empty:
            if not self._running:
                plan.admit = self.schedule(float("inf"), None, budget_bytes).batch
                self._admit(plan.admit)
            return plan
        if any(r.isolate for r in self._running):
            return plan
        cap = max(1, self.batch_cap.cap)
        ordered = sorted(self._waiting, key=lambda s: s.order)
        key = self._running[0].batch_key if self._running else ordered[0].batch_key
        chosen: list[SegmentWork] = []
        for candidate in ordered:
            if candidate.isolate:
                if not self._running and not chosen:
                    chosen.append(candidate)
                break  # an isolated row runs alone: let the batch drain for it
            if candidate.batch_key != key:
                break  # the most urgent waiting row needs another batch: let this one drain
            rows = self._running + chosen + [candidate]
            if len(rows) > cap or not self._fits_running(rows, budget_bytes):
                victims = self._victims_for(candidate, chosen, cap, budget_bytes) if self.preempt else []
                if not victims:
                    break  # keep the order: a later, smaller row does not jump the queue
                victim_ids = {id(v) for v in victims}
                self._running = [r for r in self._running if id(r) not in victim_ids]
                self.requeue(victims)
                plan.preempted += victims
            chosen.append(candidate)
        if chosen:
            chosen_ids = {id(s) for s in chosen}
            self._waiting = [s for s in self._waiting if id(s) not in chosen_ids]
            self._admit(chosen)
            plan.admit = chosen
        return plan

    def _victims_for(self, candidate: SegmentWork, chosen: list[SegmentWork], cap: int,
                     budget_bytes: int | None) -> list[SegmentWork]:
        """The fewest running rows less urgent than ``candidate`` (youngest admission first) whose leaving lets it
        pass rules a and b with ``chosen``; [] when none are or even all of them leaving is not enough (rule d)."""
        movable = sorted((r for r in self._running if int(r.priority) > int(candidate.priority)),
                         key=lambda r: r.admitted, reverse=True)
        victims: list[SegmentWork] = []
        for row in movable:
            victims.append(row)
            victim_ids = {id(v) for v in victims}
            rows = [r for r in self._running if id(r) not in victim_ids] + chosen + [candidate]
            if len(rows) <= cap and self._fits_running(rows, budget_bytes):
                return victims
        return []

    def _admit(self, rows: Sequence[SegmentWork]) -> None:
        for r in rows:
            r.admitted = next(self._admissions)
            r.steps_done = 0
            self._running.append(r)

    # -- the update step ----------------------------------------------------------------------------------------
    def update_from_output(self, outcome: Outcome) -> Update:
        """Apply one ``Outcome`` (see module docstring for the policy). Rows of the outcome that are no longer
        queued or running (their request was cancelled meanwhile) are ignored.

        Returns:
            An ``Update`` the engine carries out (store audio of ``finished``, fail ``failed``, release rows).
        """
        update = Update()
        cap = self.batch_cap
        running_ids = {id(r) for r in self._running}
        if outcome.phase is Phase.BATCH:
            rows = list(outcome.rows)
        else:
            rows = [r for r in outcome.rows if id(r) in running_ids]
        if outcome.kind is OutcomeKind.OK:
            if outcome.measured_peak_bytes is not None and self.observe is not None and outcome.rows:
                self.observe([r.current_positions if outcome.phase is Phase.DECODE else r.row_positions
                              for r in outcome.rows], outcome.measured_peak_bytes)
            if outcome.phase is Phase.BATCH:
                cap.on_success(len(rows))
                update.finished = list(outcome.finished)
            elif outcome.phase is Phase.DECODE:
                live = len(self._running)
                for r in rows:
                    r.steps_done += 1
                done = [(w, reason) for w, reason in outcome.finished if id(w) in running_ids]
                for _ in done:  # a row lived through a full batch: counts towards growing the cap
                    cap.on_success(live)
                update.finished = done
                self._leave([w for w, _ in done], update)
        elif outcome.kind is OutcomeKind.OOM:
            self._on_oom(outcome.phase, rows, update)
        else:  # REFUSED / CRASHED: retry each row alone, so only the row at fault fails
            group = rows if outcome.phase is not Phase.DECODE else list(self._running)
            if outcome.phase is Phase.DECODE:
                update.drop_running_batch = True
            if len(group) > 1:
                for r in group:
                    r.isolate = True
                self._leave(group, update)
                self._requeue_into(group, update)
            else:
                self._leave(group, update)
                update.failed = [(r, outcome.error) for r in group]
        update.cap = cap.cap
        return update

    def _on_oom(self, phase: Phase, rows: list[SegmentWork], update: Update) -> None:
        cap = self.batch_cap
        if phase is Phase.BATCH:
            if len(rows) > 1:
                cap.on_oom(len(rows))
                self._requeue_into(rows, update)
            else:
                update.failed = [(r, oom_alone_message(r)) for r in rows]
            return
        live = list(self._running)  # admission order, oldest first (joining rows are the last)
        if len(live) <= 1:
            self._leave(live, update)
            update.failed = [(r, oom_alone_message(r)) for r in live]
            return
        new_cap = cap.on_oom(len(live))
        joining = {id(r) for r in rows} if phase is Phase.PREFILL else set()
        # the joining rows go first (nothing of theirs is in the batch), then the youngest beyond the new cap
        out = [r for r in live if id(r) in joining]
        kept = [r for r in live if id(r) not in joining]
        if len(kept) > new_cap:
            out += kept[new_cap:]
        self._leave(out, update)
        self._requeue_into(out, update)

    def _leave(self, rows: Sequence[SegmentWork], update: Update) -> None:
        ids = {id(r) for r in rows}
        self._running = [r for r in self._running if id(r) not in ids]
        update.release += [r for r in rows if all(r is not x for x in update.release)]

    def _requeue_into(self, rows: Sequence[SegmentWork], update: Update) -> None:
        self.requeue(rows)
        update.requeued += list(rows)
