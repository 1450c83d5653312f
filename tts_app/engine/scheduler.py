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
"""

from __future__ import annotations

import itertools
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from tts_app.config import MIN_MAX_SEGMENT_CHARS
from tts_app.request import Priority

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

    @property
    def order(self) -> tuple:
        return (int(self.priority), self.arrival_s, self.sequence)


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
    """Waiting segments and the batch-picking policy (see module docstring).

    Args:
        batch_bytes: estimated bytes of a batch, from its rows' ``row_positions`` (``MemoryEstimator.batch_bytes``).
        wait_window_s: how long a not-full batch waits for more requests, in seconds.
        bucketing: sort by expected length (True) or plain FIFO among compatible segments (False, for comparison).
    """

    def __init__(self, batch_bytes: Callable[[Sequence[int]], int], wait_window_s: float = 0.03,
                 bucketing: bool = True):
        self.batch_bytes = batch_bytes
        self.wait_window_s = max(0.0, wait_window_s)
        self.bucketing = bucketing
        self._waiting: list[SegmentWork] = []
        self._sequence = itertools.count()

    # -- queue -------------------------------------------------------------------------------------------------
    def add(self, segments: Sequence[SegmentWork]) -> None:
        """Queue new segments (their ``sequence`` is assigned here)."""
        for s in segments:
            s.sequence = next(self._sequence)
            self._waiting.append(s)

    def requeue(self, segments: Sequence[SegmentWork]) -> None:
        """Put segments back (after an out-of-memory retry) keeping their original arrival order."""
        self._waiting.extend(segments)

    def remove_request(self, request_id: str) -> int:
        """Drop every waiting segment of a request. Returns how many were removed."""
        before = len(self._waiting)
        self._waiting = [s for s in self._waiting if s.request_id != request_id]
        return before - len(self._waiting)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def waiting(self) -> list[SegmentWork]:
        return list(self._waiting)

    # -- policy ------------------------------------------------------------------------------------------------
    def _fits(self, rows: Sequence[SegmentWork], budget_bytes: int | None) -> bool:
        return budget_bytes is None or self.batch_bytes([r.row_positions for r in rows]) <= budget_bytes

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

    def schedule(self, now_s: float, cap: int, budget_bytes: int | None) -> SchedulePlan:
        """Pick the next batch.

        Args:
            now_s: current monotonic time in seconds (for the wait window).
            cap: most rows allowed in the batch (current ``BatchCap.cap``), >= 1.
            budget_bytes: memory the batch may use (KV cache + activations); None = unlimited.

        Returns:
            A ``SchedulePlan``; the chosen segments (and ``too_large`` ones) are removed from the queue.
        """
        plan = SchedulePlan()
        cap = max(1, cap)
        while self._waiting:
            head = min(self._waiting, key=lambda s: s.order)
            if not self._fits([head], budget_bytes):
                self._waiting.remove(head)
                plan.too_large.append(head)
                continue
            candidates = [s for s in self._waiting if s.batch_key == head.batch_key and s.priority == head.priority]
            window = self._pick_window(head, candidates, cap)
            # shrink to the budget: drop the row whose length is farthest from the head's
            while not self._fits(window, budget_bytes):
                others = [s for s in window if s is not head]
                drop = max(others, key=lambda s: (abs(s.expected_steps - head.expected_steps), s.order))
                window.remove(drop)
            # free riders of lower priority that do not lengthen the batch
            if len(window) < cap:
                longest = max(s.expected_steps for s in window)
                riders = sorted((s for s in self._waiting if s.batch_key == head.batch_key
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
