"""Cheap signal checks of a take, no model: how much of it is silence, how much is clipped, whether its length fits
its text, and whether the model was cut at its decode-step cap.

These catch the failures an ASR score misses or catches late: a take that babbles or hums past the end (too long
for its text, or mostly silence), one that stops after half a sentence (too short), a take at full scale (clipped),
a segment cut at ``max_new_tokens`` (its last word may be gone: the engine knows, ``StopReason.MAX_NEW_TOKENS``).

No torch: numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tts_app.speaking_rate import expected_speech_s

# A 20 ms frame is "silent" below this RMS level in dBFS. -40 dBFS is the usual split between speech pauses and
# speech in read audio (Silero and WebRTC VADs are model-based; an energy gate is enough for a share of silence).
SILENCE_DB = -40.0
FRAME_S = 0.02
# A sample is clipped at or above this magnitude (int16 full scale is 32767/32768 = 0.99997).
CLIP_LEVEL = 0.999
# A take's length against its text's typical spoken length (``tts_app.speaking_rate.expected_speech_s``: Mandarin
# ~0.22 s a character, English ~1/15 s): outside [MIN_SPEECH_RATIO, MAX_SPEECH_RATIO] x that is out of range. A slow
# reader is ~1.3x the typical length (``speaking_rate.SEGMENT_CAP_MARGIN``); our bounds leave room for pauses and
# slow, expressive reads both ways, and flag what no reading of the text explains (half a sentence skipped, a
# repeated sentence, babbling past the end).
MIN_SPEECH_RATIO = 0.4
MAX_SPEECH_RATIO = 2.5


@dataclass(frozen=True)
class SignalChecks:
    """The cheap checks of one take.

    Attributes:
        duration_s: length of the take in seconds.
        silence_share: share of its 20 ms frames below ``SILENCE_DB`` RMS, in [0, 1] (1.0 for an empty take).
        clipping_share: share of its samples at or above ``CLIP_LEVEL`` magnitude, in [0, 1].
        s_per_char: seconds of the take per character of its text (None for an empty text).
        expected_s: the text's typical spoken length in seconds (``expected_speech_s``).
        duration_ok: ``duration_s`` within [MIN_SPEECH_RATIO, MAX_SPEECH_RATIO] x ``expected_s`` (True for an empty
            text).
        truncated: the model was cut at its decode-step cap (``max_new_tokens``), so its end may be missing.
    """

    duration_s: float
    silence_share: float
    clipping_share: float
    s_per_char: float | None
    expected_s: float
    duration_ok: bool
    truncated: bool


def silence_share(samples: np.ndarray, sampling_rate: int, *, silence_db: float = SILENCE_DB) -> float:
    """Share of 20 ms frames of ``samples`` (float32 ``(num_samples,)`` in [-1, 1]) whose RMS is below
    ``silence_db`` dBFS; 1.0 for an empty clip."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    frame = max(1, int(round(FRAME_S * sampling_rate)))
    num_frames = samples.size // frame
    if num_frames == 0:
        return 1.0
    frames = samples[: num_frames * frame].reshape(num_frames, frame).astype(np.float64)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    return float(np.mean(rms < 10.0 ** (silence_db / 20.0)))


def check_signal(samples: np.ndarray, sampling_rate: int, text: str, *, truncated: bool = False) -> SignalChecks:
    """The cheap checks of a take of ``text``.

    Args:
        samples: float32 mono ``(num_samples,)`` in [-1, 1].
        sampling_rate: Hz.
        text: what the take should say (its segment's text).
        truncated: the engine cut it at ``max_new_tokens`` (``StopReason.MAX_NEW_TOKENS``).
    """
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    duration_s = samples.size / float(sampling_rate)
    num_chars = len("".join(text.split()))
    expected_s = expected_speech_s(" ".join(text.split()))
    clipping = float(np.mean(np.abs(samples) >= CLIP_LEVEL)) if samples.size else 0.0
    duration_ok = expected_s <= 0 or MIN_SPEECH_RATIO * expected_s <= duration_s <= MAX_SPEECH_RATIO * expected_s
    return SignalChecks(duration_s=round(duration_s, 3), silence_share=round(silence_share(samples, sampling_rate), 4),
                        clipping_share=round(clipping, 5),
                        s_per_char=round(duration_s / num_chars, 4) if num_chars else None,
                        expected_s=round(expected_s, 3), duration_ok=bool(duration_ok), truncated=bool(truncated))
