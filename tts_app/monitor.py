"""Device-memory readings for the live gauge (UI) and the benchmarks. Pure: no gradio.

On CUDA: device name, total / used / free (``torch.cuda.mem_get_info``), memory held by torch (allocated, reserved,
peak), and utilisation through NVML (nvidia-ml-py) where present. On CPU: process RSS and system RAM (psutil), and the
reading says it is CPU memory.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import asdict, dataclass, field

GIB = 1024**3
#: Seconds between two readings of the app's memory sampler, and between two ticks of the gauge's timer on a page
#: (one reading a second: enough for a gauge, and a CUDA reading costs well under a millisecond).
MEMORY_SAMPLE_PERIOD_S = 1.0


@dataclass(frozen=True)
class MemoryReading:
    """One snapshot. All sizes in bytes; ``utilization_percent`` is None when NVML is unavailable.

    Attributes:
        time_s: ``time.time()`` of the reading.
        device: "cuda:0" or "cpu".
        device_name: e.g. "NVIDIA H200" or the CPU's description.
        total_bytes, used_bytes, free_bytes: device memory (CUDA) or system RAM (CPU).
        torch_allocated_bytes, torch_reserved_bytes, torch_peak_bytes: torch's caching allocator (CUDA); on CPU the
            process resident set size is reported as allocated and reserved, peak = max seen.
        utilization_percent: GPU utilisation from NVML.
        is_cpu: True when the numbers are CPU RAM.
    """

    time_s: float
    device: str
    device_name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    torch_allocated_bytes: int
    torch_reserved_bytes: int
    torch_peak_bytes: int
    utilization_percent: float | None
    is_cpu: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _nvml_utilization(index: int) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:  # NVML absent or no NVIDIA driver: utilisation is optional
        return None


_cpu_peak_rss = 0


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def read_memory(device: str = "cpu") -> MemoryReading:
    """Read memory now for ``device`` ("cpu", "cuda" or "cuda:N")."""
    global _cpu_peak_rss
    now = time.time()
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index or 0
        free, total = torch.cuda.mem_get_info(index)
        return MemoryReading(
            time_s=now, device=f"cuda:{index}", device_name=torch.cuda.get_device_name(index), total_bytes=total,
            used_bytes=total - free, free_bytes=free,
            torch_allocated_bytes=torch.cuda.memory_allocated(index),
            torch_reserved_bytes=torch.cuda.memory_reserved(index),
            torch_peak_bytes=torch.cuda.max_memory_allocated(index),
            utilization_percent=_nvml_utilization(index), is_cpu=False)
    import psutil

    vm = psutil.virtual_memory()
    rss = psutil.Process().memory_info().rss
    _cpu_peak_rss = max(_cpu_peak_rss, rss)
    return MemoryReading(
        time_s=now, device="cpu", device_name=_cpu_name(),
        total_bytes=vm.total, used_bytes=vm.total - vm.available, free_bytes=vm.available,
        torch_allocated_bytes=rss, torch_reserved_bytes=rss, torch_peak_bytes=_cpu_peak_rss,
        utilization_percent=None, is_cpu=True)


@dataclass
class MemoryHistory:
    """Bounded, thread-safe history of readings plus OOM event times, for the gauge's line plot.

    Attributes:
        window_s: readings older than this (seconds) are dropped.
    """

    window_s: float = 300.0
    _readings: collections.deque = field(default_factory=collections.deque)
    _oom_times: collections.deque = field(default_factory=collections.deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, reading: MemoryReading) -> None:
        with self._lock:
            self._readings.append(reading)
            self._trim(reading.time_s)

    def add_oom(self, time_s: float | None = None) -> None:
        with self._lock:
            self._oom_times.append(time.time() if time_s is None else time_s)

    def oom_times(self) -> list[float]:
        """``time.time()`` of the OOM events still inside the window, oldest first."""
        with self._lock:
            return list(self._oom_times)

    def _trim(self, now: float) -> None:
        while self._readings and now - self._readings[0].time_s > self.window_s:
            self._readings.popleft()
        while self._oom_times and now - self._oom_times[0] > self.window_s:
            self._oom_times.popleft()

    def rows(self) -> list[dict]:
        """Rows for a line plot: seconds ago (negative), used GiB, and whether an OOM happened in that interval."""
        with self._lock:
            readings = list(self._readings)
            ooms = list(self._oom_times)
        if not readings:
            return []
        now = readings[-1].time_s
        out = []
        prev_t = -float("inf")
        for r in readings:
            had_oom = any(prev_t < t <= r.time_s for t in ooms)
            out.append({"seconds_ago": round(r.time_s - now, 1), "used_gib": r.used_bytes / GIB,
                        "torch_gib": r.torch_allocated_bytes / GIB, "event": "OOM" if had_oom else "ok"})
            prev_t = r.time_s
        return out


class MemorySampler:
    """The one writer of a ``MemoryHistory``: a daemon thread that, every ``period_s`` seconds, reads memory once,
    marks the OOM events the engine counted since the last reading, and appends the reading. Every viewer of the
    gauge only reads the history (``latest`` / ``MemoryHistory.rows``), so three open Memory tabs still give one
    reading per period (gradio's guide on timers polls from each page; the sampling belongs to the server).

    Args:
        history: the history to feed.
        read: returns one ``MemoryReading`` (e.g. ``read_memory`` of the engine's device).
        num_oom: returns the engine's count of OOM errors so far (``EngineStats.num_oom``), or None without one.
        period_s: seconds between two readings (the gauge's timer ticks at the same period).
    """

    def __init__(self, history: MemoryHistory, read, num_oom=lambda: None, period_s: float = 1.0):
        self.history = history
        self.period_s = float(period_s)
        self._read = read
        self._num_oom = num_oom
        self._last_oom_count: int | None = None
        self._latest: MemoryReading | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def latest(self) -> MemoryReading | None:
        """The most recent reading (None before the first)."""
        return self._latest

    def sample_once(self) -> MemoryReading:
        """Take one reading now: OOM events first (so the reading's interval holds them), then the reading."""
        count = self._num_oom()
        if count is not None:
            if self._last_oom_count is not None and count > self._last_oom_count:
                for _ in range(count - self._last_oom_count):
                    self.history.add_oom()
            self._last_oom_count = count
        reading = self._read()
        self.history.add(reading)
        self._latest = reading
        return reading

    def start(self) -> "MemorySampler":
        """Start the thread (idempotent); its first reading is taken at once. Returns self."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="tts-memory-sampler", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (returns once it has ended)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        import logging

        while True:
            try:
                self.sample_once()
            except Exception:  # noqa: BLE001 - a failed reading must not end the gauge for every viewer
                logging.getLogger(__name__).exception("memory reading failed")
            if self._stop.wait(self.period_s):
                return
