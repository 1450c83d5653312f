"""Speaker similarity: is a take in the reference's voice? The cosine of two speaker embeddings.

The encoder is Resemblyzer's ``VoiceEncoder`` (Resemble AI, Apache-2.0; a 3-layer LSTM over 40-band mel frames,
256-dim embeddings, trained with the GE2E loss of Wan et al. 2018, "Generalized End-to-End Loss for Speaker
Verification"). Its weights ship inside the PyPI package (``resemblyzer/pretrained.pt``, 17 MB), so it loads
offline, and it runs in real time on a CPU. The clip is prepared as the library prepares it
(``resemblyzer.preprocess_wav``: 16 kHz, long silences trimmed by WebRTC VAD, volume normalised), then embedded
(``VoiceEncoder.embed_utterance``: 1.6 s partial windows averaged, L2-normed).

Embeddings are non-negative and L2-normed (the encoder ends in a ReLU), so the cosine lies in [0, 1]: measured on
tests/data, the same voice in another recording 0.94-0.95, different voices 0.44-0.75;
``SynthesisParams.take_min_similarity`` is the threshold on it (default in ``tts_app.quality.policy``).
"""

from __future__ import annotations

import threading

import numpy as np

from tts_app.audio.transcribe import AsrUnavailableError
from tts_app.frontend.messages import Notice

#: the encoder's name in records
RESEMBLYZER = "resemblyzer"
# Bytes of Resemblyzer's weights (pretrained.pt, 17,090,379 bytes in 0.1.4), for the memory budget before it loads.
RESEMBLYZER_BYTES = 17_090_379
# A clip shorter than this after silence trimming gives no meaningful embedding (one 1.6 s window is the
# encoder's unit; below ~0.5 s of speech the padding dominates).
MIN_SPEECH_S = 0.5


class SpeakerEncoder:
    """Resemblyzer's voice encoder, loaded lazily once (thread-safe).

    Args:
        device: "cpu", "cuda", "cuda:N".
    """

    name = RESEMBLYZER

    def __init__(self, device: str = "cpu"):
        self.device = str(device)
        self._encoder = None
        self._error: Notice | None = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._encoder is not None:
                return self._encoder
            if self._error is not None:
                raise AsrUnavailableError(self._error)
            try:
                from resemblyzer import VoiceEncoder

                self._encoder = VoiceEncoder(self.device, verbose=False)
            except Exception as exc:  # noqa: BLE001 - not installed, ...
                self._error = Notice("asr_cannot_load", model=RESEMBLYZER, error=f"{type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
                raise AsrUnavailableError(self._error) from exc
            return self._encoder

    def embed(self, samples: np.ndarray, sampling_rate: int) -> np.ndarray | None:
        """The speaker embedding of a clip: float32 ``(256,)``, L2-normed; None when it holds less than
        ``MIN_SPEECH_S`` of speech after silence trimming.

        Args:
            samples: float32 mono ``(num_samples,)`` in [-1, 1].
            sampling_rate: Hz.

        Raises:
            AsrUnavailableError: resemblyzer cannot be imported or loaded (the message names it).
        """
        encoder = self._load()
        from resemblyzer import preprocess_wav
        from resemblyzer.hparams import sampling_rate as encoder_rate

        samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
        if samples.size == 0 or not np.any(samples):
            return None
        wav = preprocess_wav(samples, source_sr=int(sampling_rate))
        if wav.size < MIN_SPEECH_S * encoder_rate:
            return None
        with self._lock:  # one module shared by threads
            return np.asarray(encoder.embed_utterance(wav), dtype=np.float32)

    def num_bytes(self) -> int:
        """Bytes of its weights (for the memory budget)."""
        return RESEMBLYZER_BYTES


def similarity(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    """Cosine similarity of two embeddings (``(dim,)``), in [-1, 1]; None when either is None."""
    if a is None or b is None:
        return None
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / denominator) if denominator > 0 else 0.0
