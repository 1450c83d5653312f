"""Shared helpers of the bench scripts: set-up (offline, one torch thread), tiny adapters, real reference clips,
the fixed mixed-length workload, timers, a KV-cache meter and plain-text tables.

Import this module before torch: ``setup()`` pins threads through ``OMP_NUM_THREADS`` (read once, when torch loads)
and ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = REPO_ROOT / "tests" / "data"

# Reference clips used by the workload: (file in tests/data, seconds kept). Real speech with its transcript.
REFERENCE_CLIPS = (("en_female_1.wav", 3.0), ("zh_male_1.wav", 3.0))


def setup(num_threads: int = 1) -> None:
    """Offline hub, ``num_threads`` CPU threads, the repo and bench/ importable. Call before importing torch."""
    os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for path in (str(REPO_ROOT), str(BENCH_DIR)):
        if path not in sys.path:
            sys.path.insert(0, path)
    import torch

    torch.set_num_threads(num_threads)


# -- workload --------------------------------------------------------------------------------------------------------
_EN_WORDS = ("the quick brown fox jumps over a lazy dog near river bank at dawn while morning train was late "
             "again so she finished chapter of her book on platform before you leave office tonight").split()
_ZH_CHARS = "今天天气很好我们一起去公园散步然后在湖边喝茶银行门口排起了长队行长说还得再等十分钟才能办理业务"


def workload_texts(num_requests: int = 16, min_chars: int = 5, max_chars: int = 200, seed: int = 0) -> list[str]:
    """A fixed mixed-length, mixed-language workload: ``num_requests`` texts whose lengths (characters) are spread
    evenly between ``min_chars`` and ``max_chars`` and then shuffled; every third text is Chinese. Same arguments ->
    same texts."""
    rng = random.Random(seed)
    if num_requests == 1:
        lengths = [max_chars]
    else:
        lengths = [round(min_chars + (max_chars - min_chars) * i / (num_requests - 1)) for i in range(num_requests)]
    rng.shuffle(lengths)
    texts = []
    for i, length in enumerate(lengths):
        if i % 3 == 2:
            body = "".join(rng.choice(_ZH_CHARS) for _ in range(max(1, length - 1))) + "。"
        else:
            words: list[str] = []
            while len(" ".join(words)) < length - 1:
                words.append(rng.choice(_EN_WORDS))
            body = (" ".join(words)[: length - 1].rstrip() or "hi").capitalize() + "."
        texts.append(body)
    return texts


def reference_clip(name: str, sampling_rate: int, seconds: float | None = None):
    """Real speech from tests/data as float32 mono ``(num_samples,)`` at ``sampling_rate`` Hz, cut to ``seconds``.

    Returns (samples, transcript or None)."""
    import numpy as np
    import soundfile as sf
    import torch
    import torchaudio.functional as AF

    samples, file_rate = sf.read(DATA_DIR / name, dtype="float32", always_2d=True)
    wave = torch.from_numpy(np.ascontiguousarray(samples.mean(axis=1)))
    if file_rate != sampling_rate:
        wave = AF.resample(wave, file_rate, sampling_rate)
    wave = wave.numpy().astype(np.float32)
    if seconds is not None:
        wave = wave[: int(seconds * sampling_rate)]
    manifest = json.loads((DATA_DIR / "manifest.json").read_text(encoding="utf-8"))
    transcript = next((f.get("transcript") for f in manifest["files"] if f["name"] == name), None)
    return wave, transcript


def load_tiny_adapter(family: str, work_dir: Path, device: str = "cpu", dtype: str = "float32"):
    """Write the family's tiny random checkpoint into ``work_dir / family`` and load it like a real one
    (``tts_app.adapters.load_adapter``)."""
    from tts_app.adapters import adapter_class, load_adapter

    path = adapter_class(family).make_tiny_checkpoint(Path(work_dir) / family, seed=0)
    return load_adapter(path, device=device, dtype=dtype)


# -- timing / memory -------------------------------------------------------------------------------------------------
def synchronize(device: str) -> None:
    """Wait for queued CUDA work (so wall time covers it); no-op on CPU."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


@contextmanager
def wall_timer(device: str = "cpu") -> Iterator[dict]:
    """``with wall_timer(dev) as t: ...`` then ``t["s"]``: wall seconds (``time.perf_counter``), CUDA synchronised."""
    out: dict = {}
    synchronize(device)
    start = time.perf_counter()
    try:
        yield out
    finally:
        synchronize(device)
        out["s"] = time.perf_counter() - start


class KvCacheMeter:
    """Peak bytes of live transformers KV-cache tensors during a block, measured, not estimated.

    Wraps ``transformers.cache_utils.DynamicLayer.update`` (every ``DynamicCache`` / ``EncoderDecoderCache`` layer
    grows through it): after each update the keys + values bytes of every layer still alive (weak references, so a
    cache that was dropped no longer counts) are summed, and the largest sum is kept. Static caches are not seen
    (none of our adapters uses one).

    Attributes:
        peak_bytes: largest simultaneous KV bytes seen.
        max_positions: longest sequence length (positions) any layer held.
    """

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.max_positions = 0
        self._layers: "weakref.WeakSet" = weakref.WeakSet()

    @staticmethod
    def _bytes(layer) -> int:
        total = 0
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None and hasattr(t, "numel"):
                total += t.numel() * t.element_size()
        return total

    def __enter__(self) -> "KvCacheMeter":
        from transformers.cache_utils import DynamicLayer

        meter = self
        self._original = original = DynamicLayer.update

        def update(layer, key_states, value_states, *args, **kwargs):
            result = original(layer, key_states, value_states, *args, **kwargs)
            meter._layers.add(layer)
            keys = getattr(layer, "keys", None)
            if keys is not None and keys.dim() >= 2:
                meter.max_positions = max(meter.max_positions, int(keys.shape[-2]))
            meter.peak_bytes = max(meter.peak_bytes, sum(meter._bytes(x) for x in list(meter._layers)))
            return result

        DynamicLayer.update = update
        return self

    def __exit__(self, *exc: Any) -> None:
        from transformers.cache_utils import DynamicLayer

        DynamicLayer.update = self._original


class RssPeakSampler:
    """Peak resident-set-size growth of this process during a block, sampled every ``interval_s`` by a thread
    (psutil). Coarse: the allocator keeps freed pages, and tensors smaller than a page-sized change go unseen."""

    def __init__(self, interval_s: float = 0.002):
        self.interval_s = interval_s
        self.peak_growth_bytes = 0

    def __enter__(self) -> "RssPeakSampler":
        import psutil

        self._process = psutil.Process()
        self._base = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_growth_bytes = max(self.peak_growth_bytes, self._process.memory_info().rss - self._base)
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_growth_bytes = max(self.peak_growth_bytes, self._process.memory_info().rss - self._base)


@contextmanager
def cuda_peak(device: str) -> Iterator[dict]:
    """``out["peak_bytes"]``: ``torch.cuda.max_memory_allocated`` growth over the allocation at entry (CUDA only;
    None elsewhere)."""
    out: dict = {"peak_bytes": None}
    if not str(device).startswith("cuda"):
        yield out
        return
    import torch

    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        yield out
    finally:
        torch.cuda.synchronize(device)
        out["peak_bytes"] = int(torch.cuda.max_memory_allocated(device) - base)


# -- tables ----------------------------------------------------------------------------------------------------------
@dataclass
class Table:
    """One measure's results: named columns, rows of dicts (numbers or short labels), notes printed under it.

    ``numeric`` names the columns that must hold finite numbers in every row whose ``status`` is not "n/a" (the smoke
    test checks exactly that).
    """

    name: str
    title: str
    columns: list[str]
    numeric: list[str]
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"title": self.title, "columns": self.columns, "numeric": self.numeric, "rows": self.rows,
                "notes": self.notes}

    def render(self) -> str:
        def cell(value: Any) -> str:
            if value is None:
                return "-"
            if isinstance(value, bool):
                return str(value)
            if isinstance(value, int):
                return f"{value:,}"
            if isinstance(value, float):
                if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-2):
                    return f"{value:.3g}"
                return f"{value:.2f}"
            return str(value)

        body = [[cell(row.get(c)) for c in self.columns] for row in self.rows]
        widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(self.columns)]
        lines = [f"== {self.title}", "  ".join(c.rjust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in body]
        lines += [f"   note: {n}" for n in self.notes]
        return "\n".join(lines)


def is_finite_number(value: Any) -> bool:
    """True for an int/float (not bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def ratio(a: float, b: float) -> float:
    """a / b, with b floored at 1e-9 so a zero time never divides by zero."""
    return float(a) / max(float(b), 1e-9)
