"""Batch scheduler: picks the next batch of segments. Plain data only — no tensors, no torch import. The data it
takes and returns (``SegmentWork``, plans, ``Outcome``, ``Update``, ``BatchCap``) is in ``tts_app.engine.plans``.

Pattern from vLLM's v1 scheduler (``vllm/v1/core/sched/scheduler.py``): ``schedule()`` returns a plain-data
``SchedulePlan``; the engine executes it and reports back (``requeue`` after an out-of-memory retry, ``BatchCap``
updates). "Not enough memory" is a value in the plan (``too_large``), never an exception.

Policy, in order:

1. Priority, then turns: of the most urgent priority class (``Priority.INTERACTIVE`` before ``JOB``), a stream about
   to run dry (``SegmentWork.urgent``), else the request with the fewest segments scheduled so far, then the oldest,
   gives the *head* (its next segment); it is always in the next batch, so no segment starves, and a short request
   waits for at most one batch of a long one.
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

Memory: ``budget_bytes`` is the one memory budget, the same number admission (``Engine.submit``), scheduling and
every refusal message use. Part of it, ``evictable_bytes``, may be held by caches the engine can evict (the
voice-prefix cache); rows come first: a row is refused (``too_large``) only when it does not fit the whole budget,
and rows are admitted against the whole budget, the plan saying how many cached bytes to evict first
(``evict_bytes``), so a cache never makes a row wait, fail or a batch shrink.

Continuous batching (iteration-level scheduling, for adapters with a step interface; Orca, OSDI '22, and vLLM's
running batch): ``schedule_step`` is called before every decode step and admits waiting segments into the running
batch, in order (priority class first; then a streaming request whose client has less than ``STREAM_HEADROOM_S`` of
audio left (``SegmentWork.urgent``); within that round-robin by request: the request with the fewest rows in flight
first, then the oldest; a request's segments in their order), while

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
e. fairness (``preempt=True``): an interactive candidate whose request has no row in flight (or an urgent streaming
   one), still blocked after rule d, takes the place of the youngest row of the same priority class held by the
   request with the most rows, which must hold at least two more rows than the candidate's request, so one request's
   many segments never take every row while another request waits, and two requests never swap a row back and
   forth. Job rows do not do this to each other (a job's lines want throughput, not turns).

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

import itertools
from typing import Callable, Sequence

from tts_app.engine.plans import (  # noqa: F401 (the plain data of this module's API, re-exported)
    STREAM_HEADROOM_S, BatchCap, Outcome, OutcomeKind, Phase, SchedulePlan, SegmentWork, StepPlan, Update,
    oom_alone_message)
from tts_app.request import Priority

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
        preempt: continuous batching, rules d and e: a more urgent segment takes the place of less urgent running
            rows, a request with no row that of a request holding several (False: it waits for a free slot, for
            comparison).
        fair: turns by request (rule 1, continuous order, rule e) and streams ahead when their client runs low;
            False = oldest segment first, every segment of an earlier request before a later request's (for
            comparison: the engine before issue 26).

    Attributes:
        batch_cap: the ``BatchCap`` (halved on out-of-memory, grows back after successes).
    """

    def __init__(self, batch_bytes: Callable[[Sequence[int]], int], wait_window_s: float = 0.03,
                 bucketing: bool = True, *, max_batch_size: int = 8, grow_after_successes: int = 4,
                 observe: Callable[[Sequence[int], int], bool] | None = None, preempt: bool = True,
                 fair: bool = True):
        self.batch_bytes = batch_bytes
        self.preempt = preempt
        self.fair = fair
        self.wait_window_s = max(0.0, wait_window_s)
        self.bucketing = bucketing
        self.batch_cap = BatchCap(max_batch_size, grow_after_successes)
        self.observe = observe
        self._waiting: list[SegmentWork] = []
        self._running: list[SegmentWork] = []  # continuous batching: rows in the running batch, admission order
        self._released: list[SegmentWork] = []  # running rows of removed requests, for the engine to release
        self._sequence = itertools.count()
        self._admissions = itertools.count()
        self._served: dict[str, int] = {}  # request id -> its segments scheduled so far (request-level turns)

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
        self._served.pop(request_id, None)
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

    def schedule(self, now_s: float, cap: int | None, budget_bytes: int | None, *,
                 evictable_bytes: int = 0, urgent_at_s: float | None = None) -> SchedulePlan:
        """Pick the next batch (request-level batching).

        Args:
            now_s: current monotonic time in seconds (for the wait window).
            cap: most rows allowed in the batch; None = ``batch_cap.cap``.
            budget_bytes: the memory budget (KV cache + activations of the batch, and what evictable caches hold);
                None = unlimited.
            evictable_bytes: bytes of the budget held by caches the engine can evict (module docstring).
            urgent_at_s: the monotonic time streams' ``deadline_s`` are compared with (None = none is urgent); an
                urgent stream's segment is the head before any turn.

        Returns:
            A ``SchedulePlan``; the chosen segments (and ``too_large`` ones) are removed from the queue.
        """
        plan = SchedulePlan()
        cap = max(1, self.batch_cap.cap if cap is None else cap)
        while self._waiting:
            head = min(self._waiting, key=lambda s: (int(s.priority), not s.urgent(urgent_at_s),
                                                      self._served.get(s.request_id, 0), s.arrival_s, s.sequence)
                       if self.fair else s.order)
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
            for s in plan.batch:
                self._served[s.request_id] = self._served.get(s.request_id, 0) + 1
            plan.estimated_bytes = self.batch_bytes([s.row_positions for s in plan.batch])
            if budget_bytes is not None:
                plan.evict_bytes = max(0, min(evictable_bytes, plan.estimated_bytes + evictable_bytes - budget_bytes))
            return plan
        return plan

    # -- continuous policy --------------------------------------------------------------------------------------
    def schedule_step(self, budget_bytes: int | None, *, evictable_bytes: int = 0,
                      admit_only_when_empty: bool = False, now_s: float | None = None) -> StepPlan:
        """Admit waiting segments into the running batch before the next decode step (continuous batching, see
        module docstring, a-e). ``budget_bytes``: the memory budget (None = unlimited); ``evictable_bytes``: what
        evictable caches hold of it. ``admit_only_when_empty``: request-level batching on a step adapter (a new
        batch starts only when the running one has ended; it is picked by ``schedule``'s policy). ``now_s``: the
        monotonic time the rows' ``deadline_s`` are compared with (None = no stream is urgent).

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
        if self._waiting and admit_only_when_empty:
            if not self._running:
                plan.admit = self.schedule(float("inf"), None, budget_bytes, urgent_at_s=now_s).batch
                self._admit(plan.admit)
        elif self._waiting and not any(r.isolate for r in self._running):
            self._admit_step(plan, budget_bytes, now_s)
        if budget_bytes is not None and self._running:
            peak = self.future_peak_bytes(self._running)
            plan.evict_bytes = max(0, min(evictable_bytes, peak + evictable_bytes - budget_bytes))
        return plan

    def _admit_step(self, plan: StepPlan, budget_bytes: int | None, now_s: float | None) -> None:
        """Rules a-e: admit waiting segments, round-robin by request within a priority class, into ``plan``."""
        cap = max(1, self.batch_cap.cap)
        in_flight: dict[str, int] = {}
        for r in self._running:
            in_flight[r.request_id] = in_flight.get(r.request_id, 0) + 1
        remaining = list(self._waiting)
        key = self._running[0].batch_key if self._running else min(remaining, key=lambda s: s.order).batch_key
        chosen: list[SegmentWork] = []
        while remaining:
            candidate = min(remaining, key=lambda s: (int(s.priority), not s.urgent(now_s),
                                                      in_flight.get(s.request_id, 0), s.arrival_s, s.sequence)
                            if self.fair else s.order)
            if candidate.isolate:
                if not self._running and not chosen:
                    chosen.append(candidate)
                break  # an isolated row runs alone: let the batch drain for it
            if candidate.batch_key != key:
                break  # the most urgent waiting row needs another batch: let this one drain
            rows = self._running + chosen + [candidate]
            if len(rows) > cap or not self._fits_running(rows, budget_bytes):
                victims = self._victims_for(candidate, chosen, cap, budget_bytes) if self.preempt else []
                if not victims and self.preempt and self.fair and candidate.priority is Priority.INTERACTIVE \
                        and (not in_flight.get(candidate.request_id) or candidate.urgent(now_s)):
                    victims = self._fair_victims(candidate, chosen, cap, budget_bytes, in_flight)
                if not victims:
                    break  # keep the order: a later, smaller row does not jump the queue
                victim_ids = {id(v) for v in victims}
                self._running = [r for r in self._running if id(r) not in victim_ids]
                self.requeue(victims)
                plan.preempted += victims
                for v in victims:
                    in_flight[v.request_id] -= 1
            chosen.append(candidate)
            remaining = [s for s in remaining if s is not candidate]
            in_flight[candidate.request_id] = in_flight.get(candidate.request_id, 0) + 1
        if chosen:
            chosen_ids = {id(s) for s in chosen}
            self._waiting = [s for s in self._waiting if id(s) not in chosen_ids]
            self._admit(chosen)
            plan.admit = chosen

    def _fair_victims(self, candidate: SegmentWork, chosen: list[SegmentWork], cap: int, budget_bytes: int | None,
                      in_flight: dict[str, int]) -> list[SegmentWork]:
        """Rule e: the fewest running rows of ``candidate``'s priority class, each time the youngest of the request
        holding the most rows (at least two more than the candidate's request), whose leaving lets it pass rules a
        and b; [] when none."""
        counts = dict(in_flight)
        least = counts.get(candidate.request_id, 0) + 2  # a victim's request keeps more rows than the candidate's
        victims: list[SegmentWork] = []
        while True:
            pool = [r for r in self._running if r.priority == candidate.priority and counts[r.request_id] >= least
                    and all(r is not v for v in victims)]
            if not pool:
                return []
            row = max(pool, key=lambda r: (counts[r.request_id], r.admitted))
            victims.append(row)
            counts[row.request_id] -= 1
            victim_ids = {id(v) for v in victims}
            rows = [r for r in self._running if id(r) not in victim_ids] + chosen + [candidate]
            if len(rows) <= cap and self._fits_running(rows, budget_bytes):
                return victims

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
