"""Hugging Face Spaces and ZeroGPU. No gradio, no torch.

On a ZeroGPU Space (``SPACES_ZERO_GPU=true``) a GPU is lent only while a function decorated with the ``spaces``
package's ``@spaces.GPU(duration=...)`` runs: the call is queued until a GPU is free, then runs in a forked worker
process that has the GPU, and its arguments and result travel between the processes pickled
(https://huggingface.co/docs/hub/spaces-zerogpu). A visitor's daily quota is counted in the durations asked for,
and shorter requests get ahead in the queue, so each call asks for what it needs: ``GpuCalls`` computes a duration
from the batch's size (its rows' expected decode steps) and the speed measured on earlier calls, and splits a batch
whose estimate is over ``ZeroGPUConfig.max_call_s`` into several calls that each fit (a JSONL job thus becomes many
short calls, never one that ZeroGPU would cut off).

Off ZeroGPU (a local machine, a CPU Space, a Space with a dedicated GPU) ``GpuCalls.wrap`` returns the function
itself and nothing else changes: the ``spaces`` package is not even imported.

    calls = GpuCalls(ZeroGPUConfig(), steps_of=lambda rows, params: [...])
    run = calls.wrap(engine_run_rows)          # run(rows, params) -> outputs (one per row)
    outputs = calls.run(run, rows, params)     # split into calls that fit; speed measured from their timing

The function wrapped must take picklable arguments (rows of numpy arrays and a frozen params dataclass) and return
picklable results; in the worker it runs on the forked copy of the model, which ZeroGPU has moved to the GPU.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Sequence, TypeVar

logger = logging.getLogger(__name__)

#: Set on every Hugging Face Space (the Space's "owner/name").
SPACE_ID_ENV = "SPACE_ID"
#: Set to "true" on ZeroGPU hardware (read the same way as the ``spaces`` package's own config).
ZERO_GPU_ENV = "SPACES_ZERO_GPU"

Row = TypeVar("Row")
Out = TypeVar("Out")


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "t", "true", "yes")


def on_spaces(environ: Mapping[str, str] | None = None) -> bool:
    """True when running on a Hugging Face Space."""
    return bool((os.environ if environ is None else environ).get(SPACE_ID_ENV))


def on_zero_gpu(environ: Mapping[str, str] | None = None) -> bool:
    """True on ZeroGPU hardware (``SPACES_ZERO_GPU`` true)."""
    return _truthy((os.environ if environ is None else environ).get(ZERO_GPU_ENV))


@dataclass(frozen=True)
class ZeroGPUConfig:
    """How GPU calls are sized on ZeroGPU.

    Attributes:
        max_call_s: longest duration one call asks for; batches estimated longer are split. ZeroGPU's default is
            60 s and longer requests lower the caller's queue priority; 120 s keeps a long segment in one call.
        min_call_s: shortest duration asked for (the worker's start-up and the weights' transfer alone take a few
            seconds).
        overhead_s: seconds added to every call for that start-up.
        safety_factor: the estimate is multiplied by this (a call that runs past its duration is aborted).
        initial_s_per_step: seconds per decode step of one row assumed before any call has been timed (a 1.5B
            model decodes ~20-40 frames/s per row on an A100/H200 slice; 0.1 s is on the safe side).
    """

    max_call_s: float = 120.0
    min_call_s: float = 5.0
    overhead_s: float = 5.0
    safety_factor: float = 1.5
    initial_s_per_step: float = 0.1

    def __post_init__(self) -> None:
        from tts_app.errors import ConfigError

        if not 0 < self.min_call_s <= self.max_call_s:
            raise ConfigError("max_call_s", f"ZeroGPU call limits need 0 < min_call_s ({self.min_call_s}) <= "
                                            f"max_call_s ({self.max_call_s})")
        if self.overhead_s < 0 or self.safety_factor < 1 or self.initial_s_per_step <= 0:
            raise ConfigError("safety_factor", "ZeroGPU call sizing needs overhead_s >= 0, safety_factor >= 1 and "
                                               "initial_s_per_step > 0")


class StepSpeed:
    """Seconds per decode step, measured from timed calls (an exponential moving average, weight ``alpha`` for
    the newest), per batch size rounded up to a power of two (a bigger batch takes longer per step)."""

    def __init__(self, initial_s_per_step: float, alpha: float = 0.3):
        self.initial = float(initial_s_per_step)
        self.alpha = float(alpha)
        self._by_size: dict[int, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _bucket(batch_size: int) -> int:
        return 1 << max(0, math.ceil(math.log2(max(1, batch_size))))

    def seconds_per_step(self, batch_size: int) -> float:
        """The estimate for a batch of ``batch_size`` rows: its own measurement, else the nearest smaller batch's
        scaled by the size ratio (memory-bound decoding grows slower than that: an upper bound), else the initial
        guess."""
        bucket = self._bucket(batch_size)
        with self._lock:
            if bucket in self._by_size:
                return self._by_size[bucket]
            smaller = [size for size in self._by_size if size < bucket]
            if smaller:
                size = max(smaller)
                return self._by_size[size] * bucket / size
        return self.initial

    def observe(self, batch_size: int, steps: int, seconds: float) -> None:
        """A call of ``batch_size`` rows ran ``steps`` decode steps in ``seconds`` (start-up included: it is part of
        what a call costs)."""
        if steps <= 0 or seconds <= 0:
            return
        bucket = self._bucket(batch_size)
        value = seconds / steps
        with self._lock:
            old = self._by_size.get(bucket)
            self._by_size[bucket] = value if old is None else (1 - self.alpha) * old + self.alpha * value


class GpuCalls(Generic[Row, Out]):
    """Sizes, splits and times the GPU calls of one model on ZeroGPU (module docstring); a no-op elsewhere.

    Args:
        config: call limits.
        steps_of: ``steps_of(rows, params)`` -> expected decode steps per row (e.g. from the text length and the
            model's frames per second, capped at its ``max_new_tokens``).
        enabled: use ``spaces.GPU``; None = ``on_zero_gpu()``.
    """

    def __init__(self, config: ZeroGPUConfig, steps_of: Callable[[Sequence, object], list[int]], *,
                 enabled: bool | None = None):
        self.config = config
        self.steps_of = steps_of
        self.enabled = on_zero_gpu() if enabled is None else bool(enabled)
        self.speed = StepSpeed(config.initial_s_per_step)
        self.num_calls = 0

    def duration_s(self, rows: Sequence, params: object) -> float:
        """Seconds to ask ZeroGPU for one call running ``rows`` as one batch: overhead + the longest row's expected
        steps x the measured seconds per step at that batch size, x the safety factor, within the call limits."""
        steps = max(self.steps_of(rows, params), default=0)
        estimate = (self.config.overhead_s + steps * self.speed.seconds_per_step(len(rows))) * self.config.safety_factor
        return float(min(self.config.max_call_s, max(self.config.min_call_s, estimate)))

    def split(self, rows: Sequence[Row], params: object) -> list[list[Row]]:
        """``rows`` in consecutive groups whose estimated duration fits ``max_call_s`` (halving a group until it
        fits; a single row always makes a group, its segment is as long as the model allows)."""
        groups: list[list[Row]] = []
        pending = [list(rows)]
        while pending:
            group = pending.pop(0)
            unbounded = ((self.config.overhead_s + max(self.steps_of(group, params), default=0)
                          * self.speed.seconds_per_step(len(group))) * self.config.safety_factor)
            if len(group) > 1 and unbounded > self.config.max_call_s:
                half = len(group) // 2
                pending[:0] = [group[:half], group[half:]]
            else:
                groups.append(group)
        return groups

    def wrap(self, fn: Callable[[list[Row], object], list[Out]]) -> Callable[[list[Row], object], list[Out]]:
        """``fn`` decorated with ``spaces.GPU(duration=self.duration_s)`` on ZeroGPU, else ``fn`` itself.

        Raises:
            ImportError: on ZeroGPU without the ``spaces`` package (a ZeroGPU Space has it preinstalled).
        """
        if not self.enabled:
            return fn
        import spaces

        return spaces.GPU(duration=self.duration_s)(fn)

    def run(self, wrapped: Callable[[list[Row], object], list[Out]], rows: Sequence[Row], params: object
            ) -> list[Out]:
        """``wrapped`` (from ``wrap``) over ``rows``: one call when not on ZeroGPU; on ZeroGPU one call per group of
        ``split``, each timed to refine the speed estimate. Returns one output per row, in order."""
        if not self.enabled:
            return list(wrapped(list(rows), params))
        outputs: list[Out] = []
        for group in self.split(rows, params):
            started = time.perf_counter()
            outputs.extend(wrapped(group, params))
            self.num_calls += 1
            self.speed.observe(len(group), max(self.steps_of(group, params), default=0),
                               time.perf_counter() - started)
        return outputs
