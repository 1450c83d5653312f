"""The take checker: scores each finished take of a request with a take policy (``SynthesisParams.take_check``), on
its own thread, and hands the verdict back to the engine core (keep the best take, or take the segment again with a
new seed: ``EngineCore._take_scored``).

Owns: its scoring thread, the ``TakeScorer`` (ASR + speaker encoder, ``tts_app.quality``; built on first use from
``EngineConfig.quality_asr``, on the adapter's device) and ``Take`` records. May touch: nothing of the core but the
callback it is given, which takes the engine lock itself. Never runs on the core's thread: a take's ASR costs about as
much as generating it on a CPU (``bench/bench_quality.py``), which must not hold up the next decode step.

Memory: the scorer's weights live on the model's device, beside the TTS model; ``num_bytes`` is what the engine
takes off an explicit memory budget (a budget measured from free device memory already sees them).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tts_app.request import StopReason

logger = logging.getLogger(__name__)


@dataclass
class Take:
    """One generation of a segment the take checker scored.

    Attributes:
        seed: the seed it was generated with.
        wave: its audio, float32 ``(num_samples,)`` at the model's rate.
        stop_reason: why its decoding stopped.
        batch_size, generate_s: as ``SegmentState``'s, for the take.
        scores: its ``TakeScores`` (None until scored).
        problems: the thresholds it missed (``tts_app.quality.policy.take_problems``).
    """

    seed: int
    wave: np.ndarray
    stop_reason: StopReason
    batch_size: int
    generate_s: float
    scores: object = None
    problems: tuple[str, ...] = ()

    def record(self, kept: bool) -> dict:
        """The take as ``SegmentTiming.takes`` holds it."""
        return {"seed": self.seed, "scores": self.scores.to_dict() if self.scores is not None else None,
                "problems": list(self.problems), "kept": bool(kept)}


class TakeChecker:
    """Runs scoring tasks one at a time on its own thread (``tts-take-checker``), in the order they were posted.

    Args:
        make_scorer: builds the ``TakeScorer`` on first use (None = a take cannot be scored: its scores say so).
    """

    def __init__(self, make_scorer: Callable[[], object] | None):
        self._make_scorer = make_scorer
        self._scorer = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def scorer(self):
        """The ``TakeScorer`` (built on first use; None without a factory)."""
        with self._lock:
            if self._scorer is None and self._make_scorer is not None:
                self._scorer = self._make_scorer()
            return self._scorer

    def num_bytes(self) -> int:
        """Bytes the scorer's loaded models hold (0 before they load)."""
        scorer = self._scorer
        return int(scorer.num_bytes()) if scorer is not None else 0

    def post(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the checker's thread after those already posted; a task that raises is logged."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-take-checker")
            pool = self._pool
        pool.submit(self._run, task)

    @staticmethod
    def _run(task: Callable[[], None]) -> None:
        try:
            task()
        except Exception:  # noqa: BLE001 - one take's failure must not stop the others'
            logger.exception("take checker task raised")

    def shutdown(self, wait: bool = True) -> None:
        """Stop the thread after the tasks already posted (``wait``: return once they ran)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait)
