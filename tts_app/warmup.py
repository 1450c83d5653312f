"""Warm-up at app start: run once every lazy path a first request would otherwise pay for, off the request path.

A request's first use of the front end (the pinyin lexicon, jieba, OpenCC, wetext's FSTs, the homophone table),
of the effects (scipy through pyloudnorm, PyAV's filter graph for tempo) and of the encoders (soundfile, PyAV's MP3
encoder) imports and loads them: about 2 s on a CPU machine, during which that request holds Python's import lock
(every other thread that imports waits too). ``warm_up_in_background`` runs them at start-up in a daemon thread and
logs how long each part took; the composition root starts it while the model loads.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import numpy as np

logger = logging.getLogger(__name__)

#: sampling rate of the warm-up's synthetic clip, Hz (any rate runs the same code)
WARM_UP_SAMPLING_RATE = 24000


def _front_end() -> None:
    from tts_app.frontend import warm_up

    warm_up()


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * WARM_UP_SAMPLING_RATE), dtype=np.float32) / WARM_UP_SAMPLING_RATE
    return (0.1 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)


def _effects() -> None:
    from tts_app.audio.effects import apply_request_effects

    # 1 s: longer than pyloudnorm's 0.4 s gating block, so the loudness path runs to the end
    apply_request_effects(_tone(1.0), [(0.0, 1.0)], WARM_UP_SAMPLING_RATE, speed=1.25, loudness_lufs=-16.0)


def _encoders() -> None:
    from tts_app.audio.formats import encode_audio

    for fmt in ("wav", "mp3"):
        encode_audio(_tone(0.1), WARM_UP_SAMPLING_RATE, fmt)


#: the parts, in the order they run: (name in the log, what it runs)
PARTS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("front end dictionaries", _front_end), ("effects (scipy, PyAV)", _effects), ("encoders", _encoders))


def warm_up() -> dict[str, float]:
    """Run every part of ``PARTS``; returns seconds per part name. A part that fails is logged and skipped (its
    first request then loads it and reports any error itself): warm-up never stops the app."""
    seconds: dict[str, float] = {}
    for name, run in PARTS:
        started = time.perf_counter()
        try:
            run()
        except Exception:  # noqa: BLE001 - an optimisation only; the request path has its own errors
            logger.warning("warm-up of the %s failed; the first request loads it", name, exc_info=True)
            continue
        seconds[name] = time.perf_counter() - started
    return seconds


def warm_up_in_background(log: logging.Logger = logger) -> threading.Thread:
    """Start ``warm_up`` in a daemon thread that logs, when done, how long it took, e.g. "warm-up: 2.1 s off the
    request path (front end dictionaries 1.3 s, effects (scipy, PyAV) 0.7 s, encoders 0.1 s)"."""

    def run() -> None:
        started = time.perf_counter()
        seconds = warm_up()
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items())
        log.info("warm-up: %.1f s off the request path (%s)", time.perf_counter() - started, parts)

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread
