"""Set-up shared by the adapter integration tests (tests/integration/test_adapter_*.py): real reference clips at the
adapter's sampling rate, the ``make-tiny-model`` CLI, a spy on transformers' ``from_pretrained`` and one
preprocess -> generate -> postprocess run. Assertions stay in the test files."""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(__file__).resolve().parent / "data"


@lru_cache(maxsize=1)
def _transcripts() -> dict[str, str | None]:
    manifest = json.loads((DATA_DIR / "manifest.json").read_text(encoding="utf-8"))
    return {f["name"]: f.get("transcript") for f in manifest["files"]}


def load_reference(name: str, sampling_rate: int, seconds: float | None = None) -> tuple[np.ndarray, str | None]:
    """A real speech clip of tests/data, mixed to mono and resampled (torchaudio) to ``sampling_rate`` Hz.

    Returns:
        (waveform float32 ``(num_samples,)``, cut to its first ``seconds`` when given; the clip's transcript from
        ``manifest.json``, or None).
    """
    import soundfile as sf
    import torch
    import torchaudio

    samples, file_rate = sf.read(DATA_DIR / name, dtype="float32", always_2d=True)
    mono = torch.from_numpy(samples.mean(axis=1))
    wave = torchaudio.functional.resample(mono, file_rate, sampling_rate).numpy().astype(np.float32)
    if seconds is not None:
        wave = wave[: int(seconds * sampling_rate)]
    return wave, _transcripts()[name]


def skip_without(module: str) -> None:
    """Skip the calling test (or, at module level, its module) when ``module`` is not installed, found with
    ``importlib.util.find_spec`` without importing it: ``pytest.importorskip("indextts")`` imports IndexTTS 2's
    package, 13 s at collection on 2 shared cores, even for a run that never uses it. A package that is installed
    but fails to import fails the tests that use it instead of skipping them."""
    import importlib.util

    import pytest

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (scripts/test.sh installs it)", allow_module_level=True)


def run_make_tiny_model(family: str, out: Path) -> subprocess.CompletedProcess:
    """``python -m tts_app make-tiny-model --family FAMILY --out OUT`` in a child process, offline, one thread:
    forked from the tests' forkserver (``tests.ui_app.run_python_forked``), so it skips a fresh interpreter's ~10-30 s
    of imports but still runs in another process than the tests' own build of the same checkpoint (another Python
    hash seed and global random states)."""
    from tests.ui_app import run_python_forked

    return run_python_forked("-m", "tts_app", "make-tiny-model", "--family", family, "--out", str(out),
                             env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, timeout_s=300)


def spy_from_pretrained(monkeypatch, *classes) -> list[tuple[str, str]]:
    """Record every ``cls.from_pretrained(path, ...)`` call of ``classes`` (still calling the real one).

    Returns the list the calls are appended to, as (class name, path) pairs, in call order."""
    seen: list[tuple[str, str]] = []
    for cls in classes:
        original = cls.from_pretrained.__func__

        def spy(klass, path, *args, _original=original, _name=cls.__name__, **kwargs):
            seen.append((_name, path))
            return _original(klass, path, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    return seen


def run_batch(adapter, rows, params, mutate=None):
    """``preprocess -> [mutate(inputs)] -> generate -> postprocess``; returns (inputs, outputs, waveforms)."""
    inputs = adapter.preprocess(rows, params)
    if mutate is not None:
        mutate(inputs)
    outputs = adapter.generate(inputs, params)
    return inputs, outputs, adapter.postprocess(outputs, inputs)


def rows_with_references(sampling_rate: int, clips, texts, first_seed: int = 0) -> list:
    """One ``AdapterRow`` per (clip, text): ``texts[i]`` in the voice of ``clips[i] = (name, seconds)`` (cut, so
    clip lengths differ), reference text = the clip transcript's first clause (up to its first comma), seed
    ``first_seed + i``."""
    from tts_app.adapters.base import AdapterRow

    rows = []
    for seed, ((name, seconds), text) in enumerate(zip(clips, texts), start=first_seed):
        wave, transcript = load_reference(name, sampling_rate, seconds)
        rows.append(AdapterRow(text=text, reference_audio=wave, reference_text=transcript.split(",")[0], seed=seed))
    return rows
