"""Memory: device probes, the per-row / per-batch byte estimate, the budget, and out-of-memory detection.

torch is imported lazily (inside the CUDA probe and the OOM helpers) so the scheduler and its tests stay
tensor-free.

Estimate (weights are already resident and counted once, by being excluded from the budget):

    row_kv_bytes     = facts.kv_bytes_per_position x positions x facts.cfg_multiplier
    batch_bytes      = batch_size x (kv_bytes_per_position x max(positions) x cfg_multiplier + activation_bytes_per_row)

``positions`` comes from ``adapter.estimate_positions(...)`` (reference + text + new tokens). Rows are left-padded
to the longest row, so every row of a batch holds ``max(positions)`` cache positions.

Activation overhead, when ``EngineConfig.activation_bytes_per_row`` is not given: ``ACTIVATION_KV_RATIO`` x the row's
KV bytes + ``ACTIVATION_FLOOR_BYTES``. Why: the transient peak is the prefill of one layer — hidden states, q/k/v and
the MLP's gate/up projections for every prompt position. For Qwen2.5-1.5B (VibeVoice-1.5B's backbone: hidden 1536,
intermediate 8960, 28 layers, 2 KV heads x 128, bf16) that is ~(1536 x 4 + 8960 x 2) x 2 B = ~48 KiB per position
against 28 KiB of KV per position for all layers, i.e. ~1.7x. We use 2x (plus a floor for logits of the last
position, e.g. 151,936 x 4 B = 0.6 MiB, and the codec/diffusion head) to stay on the safe side; OOM survival
catches what an estimate misses.

Calibration (CUDA): when a batch sets a new high-water mark of ``torch.cuda.max_memory_allocated``, its true peak
is known exactly (new peak - memory allocated before the batch). If that exceeds the estimate, the activation ratio
is raised so the same batch would be estimated at its measured peak (``MemoryEstimator.observe``). It only ever
grows, never resets the peak counter (the memory gauge reads it), and is off when ``activation_bytes_per_row`` is
given.
"""

from __future__ import annotations

import gc
import re
from typing import Callable, Protocol, Sequence

from tts_app.errors import InputError

ACTIVATION_KV_RATIO = 2.0
ACTIVATION_FLOOR_BYTES = 16 * 1024**2


# -- sizes -----------------------------------------------------------------------------------------------------------
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse a memory size: a number and an optional unit, case-insensitive.

    Units: B; decimal kB/MB/GB/TB (and K/M/G/T) = powers of 1000; binary KiB/MiB/GiB/TiB = powers of 1024
    (IEC 80000-13). Examples: ``"2GiB"`` -> 2147483648, ``"512MB"`` -> 512000000, ``"1.5 GiB"``, ``"1000"``.

    Raises:
        InputError: not a non-negative number with a known unit.
    """
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise InputError(f"memory size {text!r} is not understood; write a number and a unit such as 2GiB, "
                         "512MiB or 500MB")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def format_bytes(num_bytes: int | float | None) -> str:
    """``1536 MiB``-style text for messages (binary units)."""
    if num_bytes is None:
        return "unlimited"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# -- probes ----------------------------------------------------------------------------------------------------------
class MemoryProbe(Protocol):
    """What the engine needs to know about device memory. Injectable: tests pass a fake.

    Attributes:
        device: "cpu", "cuda", "cuda:0", ...
    """

    device: str

    def available_bytes(self) -> int | None:
        """Bytes the engine could still allocate on the device (None = unknown, e.g. CPU)."""

    def total_bytes(self) -> int | None:
        """Total device memory (None = unknown)."""

    def empty_cache(self) -> None:
        """Return cached, unused blocks to the device (no-op where there is no cache)."""

    def allocated_bytes(self) -> int | None:
        """Bytes allocated by this process's tensors now (None = unknown)."""

    def peak_bytes(self) -> int | None:
        """High-water mark of ``allocated_bytes`` since the process started (None = unknown)."""


class CpuMemoryProbe:
    """CPU: no device budget (the engine then uses ``EngineConfig.memory_budget_bytes`` or none)."""

    def __init__(self, device: str = "cpu"):
        self.device = device

    def available_bytes(self) -> int | None:
        return None

    def total_bytes(self) -> int | None:
        try:
            import psutil

            return int(psutil.virtual_memory().total)
        except ImportError:  # pragma: no cover - psutil is in requirements
            return None

    def empty_cache(self) -> None:
        pass  # no device cache on CPU

    def allocated_bytes(self) -> int | None:
        return None

    def peak_bytes(self) -> int | None:
        return None


class CudaMemoryProbe:
    """CUDA device memory through ``torch.cuda.mem_get_info`` (free, total of the device, all processes).

    ``available_bytes`` = free device memory + memory PyTorch's caching allocator holds but does not use
    (``memory_reserved - memory_allocated``), since our next batch can reuse those blocks.
    """

    def __init__(self, device: str = "cuda"):
        self.device = device

    def available_bytes(self) -> int | None:
        import torch

        free, _total = torch.cuda.mem_get_info(self.device)
        cached_unused = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return int(free + max(0, cached_unused))

    def total_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.mem_get_info(self.device)[1])

    def empty_cache(self) -> None:
        import torch

        gc.collect()  # tensors caught in reference cycles (e.g. an exception's frames) are freed only by the GC
        torch.cuda.empty_cache()

    def allocated_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.memory_allocated(self.device))

    def peak_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated(self.device))


def probe_for_device(device: str) -> MemoryProbe:
    """The right probe for a device string ("cuda..." -> CUDA probe, anything else -> CPU probe)."""
    return CudaMemoryProbe(device) if str(device).startswith("cuda") else CpuMemoryProbe(str(device))


def memory_budget_bytes(probe: MemoryProbe, *, memory_budget_bytes: int | None, memory_utilization: float,
                        safety_margin_bytes: int) -> int | None:
    """Bytes the engine may plan to use for one batch (KV cache + activations).

    ``memory_budget_bytes`` when given; else ``available x memory_utilization - safety_margin`` (>= 0) from the
    probe; else None (unlimited: CPU without an explicit budget).
    """
    if memory_budget_bytes is not None:
        return int(memory_budget_bytes)
    available = probe.available_bytes()
    if available is None:
        return None
    return max(0, int(available * memory_utilization) - int(safety_margin_bytes))


# -- estimate --------------------------------------------------------------------------------------------------------
class MemoryEstimator:
    """Per-row and per-batch memory estimate (see module docstring for the formula and its sources).

    Args:
        kv_bytes_per_position: ``ModelFacts.kv_bytes_per_position`` (2 x layers x KV heads x head dim x dtype bytes).
        cfg_multiplier: forward rows per user row (2 with classifier-free guidance).
        activation_bytes_per_row: fixed per-row activation overhead; None = ``activation_kv_ratio`` x row KV bytes +
            ``ACTIVATION_FLOOR_BYTES``, with the ratio starting at ``ACTIVATION_KV_RATIO`` and raised by ``observe``.
    """

    def __init__(self, kv_bytes_per_position: int, cfg_multiplier: int = 1,
                 activation_bytes_per_row: int | None = None):
        self.kv_bytes_per_position = int(kv_bytes_per_position)
        self.cfg_multiplier = int(cfg_multiplier)
        self.activation_bytes_per_row = activation_bytes_per_row
        self.activation_kv_ratio = ACTIVATION_KV_RATIO

    def kv_bytes(self, positions: int) -> int:
        """KV-cache bytes of one user row holding ``positions`` positions (all its CFG rows included)."""
        return self.kv_bytes_per_position * int(positions) * self.cfg_multiplier

    def activation_bytes(self, positions: int) -> int:
        """Transient activation bytes of one row (see module docstring)."""
        if self.activation_bytes_per_row is not None:
            return int(self.activation_bytes_per_row)
        return int(self.activation_kv_ratio * self.kv_bytes(positions)) + ACTIVATION_FLOOR_BYTES

    def row_bytes(self, positions: int) -> int:
        """KV cache + activations of one row running alone."""
        return self.kv_bytes(positions) + self.activation_bytes(positions)

    def batch_bytes(self, row_positions: Sequence[int]) -> int:
        """Estimated bytes of a batch whose rows hold ``row_positions`` positions (left-padded to the longest)."""
        if not row_positions:
            return 0
        return len(row_positions) * self.row_bytes(max(row_positions))

    def observe(self, row_positions: Sequence[int], measured_peak_bytes: int) -> bool:
        """Learn from a batch whose true peak is known: if ``measured_peak_bytes`` exceeds the estimate, raise the
        activation ratio so this batch would be estimated at its measured peak. Never lowers it; does nothing when
        a fixed ``activation_bytes_per_row`` was given. Returns True when the ratio was raised."""
        if self.activation_bytes_per_row is not None or not row_positions:
            return False
        if measured_peak_bytes <= self.batch_bytes(row_positions):
            return False
        kv = self.kv_bytes(max(row_positions))
        if kv <= 0:
            return False
        per_row = measured_peak_bytes / len(row_positions)
        self.activation_kv_ratio = max(self.activation_kv_ratio, (per_row - kv - ACTIVATION_FLOOR_BYTES) / kv)
        # round up by a hair so integer truncation cannot leave the estimate just below the measurement
        self.activation_kv_ratio += 1e-6
        return True


def max_text_chars_for_budget(row_bytes_for_chars: Callable[[int], int], budget_bytes: int,
                              upper_chars: int = 100_000) -> int:
    """Largest text length (characters) whose one-row estimate fits ``budget_bytes`` (0 if none does).

    ``row_bytes_for_chars`` must be non-decreasing in its argument (binary search).
    """
    if row_bytes_for_chars(0) > budget_bytes:
        return 0
    lo, hi = 0, upper_chars
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if row_bytes_for_chars(mid) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


# -- out of memory ---------------------------------------------------------------------------------------------------
def is_out_of_memory(exc: BaseException) -> bool:
    """True for a device out-of-memory error, detected by TYPE (``torch.OutOfMemoryError``), never by message text
    (accelerate's ``should_reduce_batch_size`` idea, minus its message matching)."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


def make_simulated_oom(batch_size: int, reason: str) -> BaseException:
    """A real ``torch.OutOfMemoryError`` for the ``simulate_oom_*`` testing aids."""
    import torch

    return torch.OutOfMemoryError(f"simulated out of memory ({reason}) for a batch of {batch_size} rows")


def free_after_oom(probe: MemoryProbe) -> None:
    """Return cached blocks after an out-of-memory error: the probe's ``empty_cache`` (on CUDA: ``gc.collect()`` +
    ``torch.cuda.empty_cache()``; on CPU nothing, since a full collection costs ~0.3 s with transformers loaded
    and frees no device memory)."""
    probe.empty_cache()
