"""Post-processing of generated audio: join segments with pauses, subtitles, atomic WAV writing.

Arrays in, arrays out; file I/O only in ``write_wav_atomic``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def join_segments(waveforms: list[np.ndarray], pauses_after_ms: list[int], sampling_rate: int
                  ) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Concatenate segment waveforms with silence between them.

    Args:
        waveforms: float32 arrays ``(num_samples,)``, one per segment, in order.
        pauses_after_ms: silence after each segment in ms (same length as ``waveforms``); the pause after the last
            segment is not appended.
        sampling_rate: Hz.

    Returns:
        (audio, spans): float32 ``(total_samples,)``, and per segment its (start_s, end_s) in the joined audio.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(waveforms) != len(pauses_after_ms):
        raise ValueError(f"{len(waveforms)} waveforms but {len(pauses_after_ms)} pauses")
    parts: list[np.ndarray] = []
    spans: list[tuple[float, float]] = []
    cursor = 0
    for i, (wave, pause_ms) in enumerate(zip(waveforms, pauses_after_ms)):
        wave = np.asarray(wave, dtype=np.float32).reshape(-1)
        parts.append(wave)
        spans.append((cursor / sampling_rate, (cursor + len(wave)) / sampling_rate))
        cursor += len(wave)
        if i < len(waveforms) - 1 and pause_ms > 0:
            gap = np.zeros(int(round(pause_ms * sampling_rate / 1000.0)), dtype=np.float32)
            parts.append(gap)
            cursor += len(gap)
    audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return audio, spans


def _srt_time(seconds: float) -> str:
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


def to_srt(texts: list[str], spans: list[tuple[float, float]]) -> str:
    """SubRip subtitles, one cue per segment that has audio. Format: https://en.wikipedia.org/wiki/SubRip

    Args:
        texts: segment texts, in order.
        spans: per segment (start_s, end_s) in the joined audio, as ``join_segments`` returns them.

    A segment that produced no audio (its span is empty at SRT's millisecond resolution) gets no cue: a
    zero-length cue is never shown and some players reject it. Cues are numbered 1, 2, ... without gaps.
    """
    cues = []
    for text, (start_s, end_s) in zip(texts, spans):
        start, end = _srt_time(start_s), _srt_time(end_s)
        if end <= start:  # same-width "HH:MM:SS,mmm" strings compare in time order
            continue
        cues.append(f"{len(cues) + 1}\n{start} --> {end}\n{text.strip()}\n")
    return "\n".join(cues)


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write bytes to ``path`` atomically: temporary file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would (0666 minus the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def encode_wav(audio: np.ndarray, sampling_rate: int) -> bytes:
    """16-bit PCM WAV bytes of a float waveform ``(num_samples,)`` in [-1, 1] (clipped)."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0), sampling_rate, format="WAV",
             subtype="PCM_16")
    return buf.getvalue()


def write_wav_atomic(path: str | Path, audio: np.ndarray, sampling_rate: int) -> Path:
    """Write a 16-bit PCM WAV atomically (see ``write_atomic``)."""
    return write_atomic(path, encode_wav(audio, sampling_rate))
