"""GLM-TTS's speaker conditioning from a reference clip: the CAM++ speaker embedding (``frontend/campplus.onnx``
through onnxruntime) and the prompt mel features the flow model continues from.

Upstream (``cosyvoice/cli/frontend.TTSFrontEnd``):

* ``_extract_spk_embedding``: the clip at 16 kHz, Kaldi fbank (80 bins, dither 0; torchaudio's
  ``compliance.kaldi.fbank``), minus its mean over time, through the ONNX session (one thread, graph optimisations
  on) -> a 192-value embedding.
* ``_extract_speech_feat``: the clip at the output rate, ``utils/audio.mel_spectrogram`` (reflect-padded by
  ``(n_fft - hop) / 2`` on both sides, ``center=False`` STFT with a Hann window, magnitude ``sqrt(re^2 + im^2 + 1e-9)``,
  Slaney mel filterbank 0-8000 Hz, ``log(clamp(x, 1e-5))``): 80 bins at hop 480 / n_fft 1920 (24 kHz) or hop 640 /
  n_fft 2560 (32 kHz) -> ``(frames, 80)``.

The mel filterbank is transformers' ``mel_filter_bank`` with Slaney norm and scale (what librosa's default
``librosa.filters.mel`` computes, which upstream calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tts_app.errors import ModelLoadError

#: Speaker-embedding input rate (Hz) and fbank bins (upstream ``_extract_spk_embedding``).
SPEAKER_SAMPLING_RATE_HZ = 16000
FBANK_BINS = 80


@dataclass(frozen=True)
class MelSettings:
    """One output rate's prompt-mel settings (upstream ``glmtts_inference.load_frontends``)."""

    sampling_rate: int
    hop_length: int
    n_fft: int
    num_mels: int = 80
    fmin_hz: float = 0.0
    fmax_hz: float = 8000.0


#: Output rate (Hz) -> prompt mel settings, from upstream's ``load_frontends``.
MEL_SETTINGS = {24000: MelSettings(24000, 480, 1920), 32000: MelSettings(32000, 640, 2560)}


class SpeakerEncoder:
    """CAM++ (ONNX) speaker embeddings.

    Args:
        onnx_path: ``frontend/campplus.onnx``.

    Raises:
        ModelLoadError: the file is missing, onnxruntime is not installed, or the model does not load.
    """

    def __init__(self, onnx_path: str | Path):
        onnx_path = Path(onnx_path)
        if not onnx_path.is_file():
            raise ModelLoadError(f"GLM-TTS needs the CAM++ speaker model {str(onnx_path)!r} (frontend/campplus.onnx "
                                 "of the zai-org/GLM-TTS code repository); put it there")
        try:
            import onnxruntime
        except ImportError as exc:
            raise ModelLoadError("GLM-TTS needs onnxruntime for its CAM++ speaker model: "
                                 "python3 -m pip install onnxruntime") from exc
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types for bad files
            raise ModelLoadError(f"cannot load the CAM++ speaker model {str(onnx_path)!r}: {exc}") from exc
        self.input_name = self.session.get_inputs()[0].name

    def embedding(self, audio_16k: np.ndarray) -> np.ndarray:
        """float32 ``(192,)`` speaker embedding of a mono clip at 16 kHz ``(num_samples,)``."""
        import torch
        import torchaudio.compliance.kaldi as kaldi

        wave = torch.from_numpy(np.asarray(audio_16k, dtype=np.float32))[None]
        feat = kaldi.fbank(wave, num_mel_bins=FBANK_BINS, dither=0, sample_frequency=SPEAKER_SAMPLING_RATE_HZ)
        feat = feat - feat.mean(dim=0, keepdim=True)
        out = self.session.run(None, {self.input_name: feat.unsqueeze(0).numpy()})[0]
        return np.asarray(out, dtype=np.float32).reshape(-1)


class PromptMel:
    """Prompt mel features at one output rate (see the module docstring)."""

    def __init__(self, sampling_rate: int):
        if sampling_rate not in MEL_SETTINGS:
            raise ModelLoadError(f"GLM-TTS runs at {sorted(MEL_SETTINGS)} Hz, not {sampling_rate}")
        from transformers.audio_utils import mel_filter_bank

        self.settings = s = MEL_SETTINGS[sampling_rate]
        # (num_mels, n_fft // 2 + 1), as librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) (Slaney scale and norm)
        self.filters = mel_filter_bank(num_frequency_bins=s.n_fft // 2 + 1, num_mel_filters=s.num_mels,
                                       min_frequency=s.fmin_hz, max_frequency=s.fmax_hz,
                                       sampling_rate=s.sampling_rate, norm="slaney", mel_scale="slaney").T

    def __call__(self, audio: np.ndarray):
        """float32 mono clip at the output rate ``(num_samples,)`` -> torch float32 ``(frames, num_mels)``."""
        import torch

        s = self.settings
        y = torch.from_numpy(np.asarray(audio, dtype=np.float32))[None]
        pad = (s.n_fft - s.hop_length) // 2
        y = torch.nn.functional.pad(y[:, None], (pad, pad), mode="reflect")[:, 0]
        spec = torch.stft(y, s.n_fft, hop_length=s.hop_length, win_length=s.n_fft, window=torch.hann_window(s.n_fft),
                          center=False, normalized=False, onesided=True, return_complex=True)
        spec = torch.view_as_real(spec)
        magnitude = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
        mel = torch.matmul(torch.from_numpy(self.filters).float(), magnitude)
        return torch.log(torch.clamp(mel, min=1e-5))[0].T.contiguous()
