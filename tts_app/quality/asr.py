"""Speech recognition for scoring takes, two backends behind one call (``AsrBackend.transcribe``):

* ``PipelineAsr``: transformers' automatic-speech-recognition pipeline (``tts_app.audio.transcribe.Transcriber``, the
  one the app already uses for reference transcripts), a hub id or a local folder of a transformers Whisper
  checkpoint; runs on the TTS model's device.
* ``FasterWhisperAsr``: CTranslate2 through ``faster-whisper`` (a hub id such as ``Systran/faster-whisper-base``,
  a size name such as ``base``, or a local folder of CTranslate2 files: ``model.bin``, ``config.json``,
  ``tokenizer.json``, ``vocabulary.*``). Several times faster on a CPU (int8), measured in
  ``bench/bench_quality.py``.

``asr_backend(spec, device)`` picks one from a ``--quality-asr`` value: ``faster-whisper:ID_OR_DIR`` or
``transformers:ID_OR_DIR`` (a bare id = transformers). Both load lazily on first use, once, thread-safe.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from tts_app.config import DEFAULT_QUALITY_ASR  # noqa: F401 - the default, defined once there
from tts_app.audio.transcribe import WHISPER_SAMPLING_RATE, AsrUnavailableError, Transcriber
from tts_app.frontend.messages import Notice

#: the backends' names, as ``--quality-asr`` prefixes
TRANSFORMERS = "transformers"
FASTER_WHISPER = "faster-whisper"
BACKENDS = (TRANSFORMERS, FASTER_WHISPER)
# Decoded tokens per take: a segment is at most ~30 s (Whisper's window); 30 s of fast English is ~120 words.
MAX_ASR_TOKENS = 224


class AsrBackend(Protocol):
    """What the scorer needs of a speech recogniser."""

    name: str  # "transformers:ID" / "faster-whisper:ID", for records

    def transcribe(self, samples: np.ndarray, sampling_rate: int, language: str | None = None) -> str:
        """The transcript of a mono float32 clip ``(num_samples,)`` at ``sampling_rate`` Hz; ``language`` ("zh",
        "en") = decode in that language (None = detect). Raises ``AsrUnavailableError`` when the model cannot
        load."""


def to_16k(samples: np.ndarray, sampling_rate: int) -> np.ndarray:
    """``samples`` (float32 ``(num_samples,)``) resampled to Whisper's 16 kHz (torchaudio's sinc resampler)."""
    samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
    if int(sampling_rate) == WHISPER_SAMPLING_RATE:
        return samples
    import torch
    import torchaudio.functional as F

    return F.resample(torch.from_numpy(samples), int(sampling_rate), WHISPER_SAMPLING_RATE).numpy()


class PipelineAsr:
    """transformers' Whisper pipeline (a ``Transcriber``; shared with reference transcription when given one).

    Args:
        model_id: hub id or folder of a transformers Whisper checkpoint.
        device: "cpu", "cuda", "cuda:N".
        transcriber: an existing ``Transcriber`` of the same checkpoint to share (one load).
    """

    def __init__(self, model_id: str, device: str = "cpu", transcriber: Transcriber | None = None):
        self.transcriber = transcriber or Transcriber(model_id, device)
        self.name = f"{TRANSFORMERS}:{self.transcriber.model_id}"

    def transcribe(self, samples: np.ndarray, sampling_rate: int, language: str | None = None) -> str:
        return self.transcriber.transcribe(samples, sampling_rate, max_new_tokens=MAX_ASR_TOKENS, language=language)

    def num_bytes(self) -> int:
        """Bytes of its loaded weights (0 before it loaded)."""
        pipe = self.transcriber._pipeline
        if pipe is None:
            return 0
        return sum(p.numel() * p.element_size() for p in pipe.model.parameters())


class FasterWhisperAsr:
    """Whisper through CTranslate2 (``faster_whisper.WhisperModel``): greedy decoding (beam 1), no VAD filter, no
    conditioning on earlier windows (a take is one short clip; these are what make it fast and repeatable).

    Args:
        model: a size name (``base``), hub id or local folder of CTranslate2 Whisper files.
        device: "cpu" or "cuda[:N]".
        compute_type: CTranslate2's (``int8`` on CPU, ``float16`` on CUDA by default).
        cpu_threads: CTranslate2 intra-op threads on CPU (0 = its default).
    """

    def __init__(self, model: str, device: str = "cpu", compute_type: str | None = None, cpu_threads: int = 0):
        self.model = str(model)
        self.device = str(device)
        self.compute_type = compute_type or ("float16" if self.device.startswith("cuda") else "int8")
        self.cpu_threads = int(cpu_threads)
        self.name = f"{FASTER_WHISPER}:{self.model}"
        self._whisper = None
        self._error: Notice | None = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._whisper is not None:
                return self._whisper
            if self._error is not None:
                raise AsrUnavailableError(self._error)
            try:
                from faster_whisper import WhisperModel

                device, _, index = self.device.partition(":")
                self._whisper = WhisperModel(self.model, device=device, device_index=int(index or 0),
                                             compute_type=self.compute_type, cpu_threads=self.cpu_threads,
                                             local_files_only=Path(self.model).is_dir())
            except Exception as exc:  # noqa: BLE001 - not installed, offline, missing files, ...
                self._error = Notice("asr_cannot_load", model=self.name, error=f"{type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
                raise AsrUnavailableError(self._error) from exc
            return self._whisper

    def transcribe(self, samples: np.ndarray, sampling_rate: int, language: str | None = None) -> str:
        whisper = self._load()
        segments, _ = whisper.transcribe(to_16k(samples, sampling_rate), language=language, beam_size=1,
                                         vad_filter=False, condition_on_previous_text=False,
                                         without_timestamps=True)
        return "".join(segment.text for segment in segments).strip()

    def num_bytes(self) -> int:
        """Bytes of its weights file (``model.bin`` of a local folder; 0 before it loaded or when not local)."""
        path = Path(self.model) / "model.bin"
        return path.stat().st_size if self._whisper is not None and path.is_file() else 0


def asr_backend(spec: str, device: str = "cpu", transcriber: Transcriber | None = None) -> AsrBackend:
    """The backend of a ``--quality-asr`` value (module docstring): ``faster-whisper:ID_OR_DIR``,
    ``transformers:ID_OR_DIR`` or a bare transformers id / folder. ``transcriber``: the app's reference
    ``Transcriber``, shared when it holds the same checkpoint.

    Raises:
        ValueError: an empty id.
    """
    backend, sep, model = str(spec).partition(":")
    if not sep or backend not in BACKENDS:
        backend, model = TRANSFORMERS, str(spec)
    if not model:
        raise ValueError(f"--quality-asr {spec!r}: give BACKEND:ID_OR_DIR, BACKEND one of {', '.join(BACKENDS)}")
    if backend == FASTER_WHISPER:
        return FasterWhisperAsr(model, device)
    shared = transcriber if transcriber is not None and transcriber.model_id == model else None
    return PipelineAsr(model, device, shared)
