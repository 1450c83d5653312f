"""GLM-TTS second stage, part 2: the vocoders (80-bin mel -> waveform), batched over rows of different lengths.

- 24 kHz: **HiFT**, CosyVoice 2's neural-source-filter HiFi-GAN with an inverse STFT head (HiFTNet, arXiv 2309.09493),
  upstream `cosyvoice/hifigan_cosy2/{generator,f0_predictor}.py`, built by `utils/hift_util.py` with hard-coded
  "CosyVoice 2.0 parameters" and loaded from `ckpt/hift/hift.pt` (a state dict, weight-normalised convolutions).
  Our own module with upstream's parameter names. The channel widths are read from the weights' shapes (so the tiny
  test checkpoint loads through the same code); the strides, kernel sizes, dilations and source settings are
  upstream's constants below (`HIFT_SETTINGS`).
- 32 kHz: **Vocos2D**, shipped only as TorchScript (`ckpt/vocos2d/generator_jit.ckpt`), run with `torch.jit.load` as
  upstream's `utils/vocos_util.py` does: input mel transposed to (batch, frames, 80) plus the constant MEL_LOGDIFF, a
  one-frame mel doubled first.

Batching (HiFT): rows are right-padded; every convolution sees zeros past a row's own frames (the zero padding a row
alone gets), and the parts that look at a row's end from both sides (the sine source's linear upsampling, the
source STFT's reflect padding, the inverse STFT's window normalisation) run per row, so row i equals row i alone
within float tolerance. The sine source is random (initial harmonic phases and additive noise, as upstream): each row
draws from its own `torch.Generator` in upstream's order and shapes. Vocos2D is a black box: rows of equal length run
as one batch, others one by one (its convolutions cannot be told where a row ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from tts_app.errors import ModelLoadError

HIFT_SAMPLING_RATE = 24000
VOCOS_SAMPLING_RATE = 32000
# Vocos2D's input offset (utils/vocos_util.py MEL_LOGDIFF): the flow's log-mel + this = the vocoder's log-mel.
VOCOS_MEL_LOGDIFF = -7.847762537473608
HIFT_WEIGHTS = Path("hift") / "hift.pt"
VOCOS_WEIGHTS = Path("vocos2d") / "generator_jit.ckpt"


@dataclass(frozen=True)
class HiftSettings:
    """HiFT constants upstream sets in code (utils/hift_util.py `_build_model`, "CosyVoice 2.0 parameters")."""

    sampling_rate: int = HIFT_SAMPLING_RATE
    nb_harmonics: int = 8
    nsf_alpha: float = 0.1  # sine amplitude
    nsf_sigma: float = 0.003  # noise std in voiced frames
    nsf_voiced_threshold: float = 10.0  # Hz
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    istft_n_fft: int = 16
    istft_hop: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99

    @property
    def hop_length(self) -> int:
        """Waveform samples per mel frame: 8 * 5 * 3 * 4 = 480 (50 frames/s at 24 kHz)."""
        return int(np.prod(self.upsample_rates)) * self.istft_hop


HIFT_SETTINGS = HiftSettings()


def _masked(x_bct: torch.Tensor, mask_b1t: torch.Tensor | None) -> torch.Tensor:
    return x_bct if mask_b1t is None else x_bct * mask_b1t


def _length_mask(lengths: Sequence[int], max_length: int, device: torch.device) -> torch.Tensor | None:
    """(batch, 1, max_length) float mask, 1 on a row's own positions; None when no row is padded."""
    if all(int(n) == max_length for n in lengths):
        return None
    positions = torch.arange(max_length, device=device)[None, :]
    return (positions < torch.tensor([int(n) for n in lengths], device=device)[:, None]).float()[:, None, :]


class Snake(nn.Module):
    """Snake activation x + sin^2(alpha x) / alpha (Liu et al. 2020, arXiv 2006.08195); alpha per channel, linear."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x_bct: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        return x_bct + (1.0 / (alpha + 1e-9)) * torch.sin(x_bct * alpha).pow(2)


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int]):
        super().__init__()

        def conv(dilation: int) -> nn.Module:
            return weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=dilation,
                                         padding=(kernel_size * dilation - dilation) // 2))

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x_bct: torch.Tensor, mask_b1t: torch.Tensor | None) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            h = conv1(_masked(act1(x_bct), mask_b1t))
            h = conv2(_masked(act2(h), mask_b1t))
            x_bct = h + x_bct
        return x_bct


class ConvRNNF0Predictor(nn.Module):
    """Mel -> F0 in Hz per frame: five conv(3)+ELU layers and a linear head, absolute value (upstream's name)."""

    def __init__(self, in_channels: int, cond_channels: int):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [weight_norm(nn.Conv1d(in_channels if i == 0 else cond_channels, cond_channels, 3, padding=1)),
                       nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, 1)

    def forward(self, mel_bct: torch.Tensor, mask_b1t: torch.Tensor | None) -> torch.Tensor:
        x = mel_bct
        for i in range(0, len(self.condnet), 2):
            x = self.condnet[i + 1](self.condnet[i](_masked(x, mask_b1t)))
        return torch.abs(self.classifier(x.transpose(1, 2)).squeeze(-1))


class SourceModuleHnNSF2(nn.Module):
    """Harmonic-plus-noise excitation from F0 (upstream's SourceModuleHnNSF2 + SineGen2, used at 24 kHz)."""

    def __init__(self, settings: HiftSettings):
        super().__init__()
        self.settings = settings
        self.l_linear = nn.Linear(settings.nb_harmonics + 1, 1)
        self.l_tanh = nn.Tanh()

    def forward(self, f0_bt1: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """One row (batch 1): f0 per sample `(1, samples, 1)` Hz -> excitation `(1, samples, 1)`.

        Draws from `generator` exactly as upstream draws from the global generator: rand (1, harmonics+1) initial
        phases, randn (1, samples, harmonics+1) additive noise, randn (1, samples, 1) (upstream's unused noise
        branch, drawn to keep the stream in step).
        """
        s = self.settings
        upsample = s.hop_length
        harmonics = torch.arange(1, s.nb_harmonics + 2, device=f0_bt1.device, dtype=f0_bt1.dtype)[None, None, :]
        rad = (f0_bt1 * harmonics / s.sampling_rate) % 1
        # Drawn on the generator's own device (a CPU generator works for a CUDA model), then moved.
        draw_device = rad.device if generator is None else generator.device
        initial_phase = torch.rand(rad.shape[0], rad.shape[2], device=draw_device, generator=generator).to(rad.device)
        initial_phase[:, 0] = 0
        rad[:, 0, :] = rad[:, 0, :] + initial_phase
        # Phase integrated at the frame rate, then linearly upsampled back (upstream's SineGen2 with
        # flag_for_pulse False): the downsampling picks each frame's constant value.
        rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / upsample, mode="linear").transpose(1, 2)
        phase = torch.cumsum(rad, dim=1) * 2 * np.pi
        phase = F.interpolate(phase.transpose(1, 2) * upsample, scale_factor=upsample, mode="linear").transpose(1, 2)
        sines = torch.sin(phase) * s.nsf_alpha
        voiced = (f0_bt1 > s.nsf_voiced_threshold).to(sines.dtype)
        noise_amp = voiced * s.nsf_sigma + (1 - voiced) * s.nsf_alpha / 3
        noise = noise_amp * torch.randn(sines.shape, device=draw_device, dtype=sines.dtype,
                                        generator=generator).to(sines.device)
        sines = sines * voiced + noise
        torch.randn(voiced.shape, device=draw_device, dtype=voiced.dtype, generator=generator)
        return self.l_tanh(self.l_linear(sines))


class HiFTGenerator(nn.Module):
    """HiFT: mel (batch, 80, frames) -> waveform (batch, frames * 480) at 24 kHz."""

    def __init__(self, in_channels: int, base_channels: int, f0_channels: int, settings: HiftSettings = HIFT_SETTINGS):
        super().__init__()
        s = self.settings = settings
        n_fft = s.istft_n_fft
        self.m_source = SourceModuleHnNSF2(s)
        self.conv_pre = weight_norm(nn.Conv1d(in_channels, base_channels, 7, 1, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(nn.ConvTranspose1d(base_channels // 2 ** i, base_channels // 2 ** (i + 1), k, u,
                                           padding=(k - u) // 2))
            for i, (u, k) in enumerate(zip(s.upsample_rates, s.upsample_kernel_sizes)))
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        rates = [1] + list(s.upsample_rates[::-1][:-1])
        cumulative = np.cumprod(rates)[::-1]
        for i, (u, k, d) in enumerate(zip(cumulative, s.source_resblock_kernel_sizes, s.source_resblock_dilations)):
            channels = base_channels // 2 ** (i + 1)
            u = int(u)
            self.source_downs.append(nn.Conv1d(n_fft + 2, channels, 1, 1) if u == 1 else
                                     nn.Conv1d(n_fft + 2, channels, u * 2, u, padding=u // 2))
            self.source_resblocks.append(ResBlock(channels, k, d))
        self.resblocks = nn.ModuleList(
            ResBlock(base_channels // 2 ** (i + 1), k, d)
            for i in range(len(self.ups)) for k, d in zip(s.resblock_kernel_sizes, s.resblock_dilations))
        self.conv_post = weight_norm(nn.Conv1d(base_channels // 2 ** len(self.ups), n_fft + 2, 7, 1, padding=3))
        self.reflection_pad = nn.ReflectionPad1d((1, 0))
        self.register_buffer("stft_window", torch.hann_window(n_fft, periodic=True), persistent=False)
        self.f0_predictor = ConvRNNF0Predictor(in_channels, f0_channels)

    @property
    def hop_length(self) -> int:
        return self.settings.hop_length

    def _stft(self, wave_bt: torch.Tensor) -> torch.Tensor:
        n_fft, hop = self.settings.istft_n_fft, self.settings.istft_hop
        spec = torch.view_as_real(torch.stft(wave_bt, n_fft, hop, n_fft, window=self.stft_window, return_complex=True))
        return torch.cat([spec[..., 0], spec[..., 1]], dim=1)  # (batch, n_fft + 2, stft frames)

    def _istft(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        n_fft, hop = self.settings.istft_n_fft, self.settings.istft_hop
        magnitude = torch.clip(magnitude, max=1e2)
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        return torch.istft(spec, n_fft, hop, n_fft, window=self.stft_window)

    @torch.inference_mode()
    def forward(self, mel: torch.Tensor, mel_lengths: torch.Tensor | None = None,
                generators: Sequence[torch.Generator] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Waveforms of a batch of mel spectrograms.

        mel: (batch, 80, max_frames) float, right-padded; mel_lengths: (batch,) frames per row (None: all full).
        generators: one per row for the sine source's randomness; None: the global generator, row after row.
        Returns (wave (batch, max_frames * 480) float32 in [-0.99, 0.99], zero past each row's end;
        wave_lengths (batch,) int64 = frames * 480).
        """
        s = self.settings
        batch, _, max_frames = mel.shape
        lengths = [max_frames] * batch if mel_lengths is None else [int(n) for n in mel_lengths]
        device = mel.device
        mel = mel.float()
        mel_mask = _length_mask(lengths, max_frames, device)
        mel = _masked(mel, mel_mask)

        # mel -> f0 -> excitation (per row: its upsampling and the STFT's reflect padding look at the row's end).
        f0 = self.f0_predictor(mel, mel_mask)  # (batch, frames) Hz
        stft_frames = [n * s.upsample_rates[0] * s.upsample_rates[1] * s.upsample_rates[2] + 1 for n in lengths]
        source_stft = mel.new_zeros(batch, s.istft_n_fft + 2, max(stft_frames))
        for i, n in enumerate(lengths):
            row_f0 = f0[i: i + 1, :n].repeat_interleave(self.hop_length, dim=1)[:, :, None]  # nearest upsampling
            excitation = self.m_source(row_f0, None if generators is None else generators[i])  # (1, samples, 1)
            source_stft[i, :, : stft_frames[i]] = self._stft(excitation[:, :, 0])[0]

        x = self.conv_pre(mel)
        frames = list(lengths)
        for i, up in enumerate(self.ups):
            x = F.leaky_relu(x, s.lrelu_slope)
            x = up(_masked(x, _length_mask(frames, x.shape[-1], device)))
            frames = [n * s.upsample_rates[i] for n in frames]
            if i == len(self.ups) - 1:
                x = self.reflection_pad(x)
                frames = [n + 1 for n in frames]
            mask = _length_mask(frames, x.shape[-1], device)
            x = _masked(x, mask)
            source = self.source_downs[i](source_stft)
            x = x + self.source_resblocks[i](_masked(source, mask), mask)
            total = None
            for j in range(len(s.resblock_kernel_sizes)):
                out = self.resblocks[i * len(s.resblock_kernel_sizes) + j](x, mask)
                total = out if total is None else total + out
            x = total / len(s.resblock_kernel_sizes)
        x = self.conv_post(_masked(F.leaky_relu(x), _length_mask(frames, x.shape[-1], device)))
        half = s.istft_n_fft // 2 + 1
        wave = mel.new_zeros(batch, max_frames * self.hop_length)
        for i, n in enumerate(frames):  # per row: the inverse STFT's overlap-add normalisation sees the row's end
            row = self._istft(torch.exp(x[i: i + 1, :half, :n]), torch.sin(x[i: i + 1, half:, :n]))
            wave[i, : row.shape[-1]] = torch.clamp(row[0], -s.audio_limit, s.audio_limit)
        return wave, torch.tensor(lengths, dtype=torch.long) * self.hop_length


def _hift_from_state_dict(weights: dict[str, torch.Tensor]) -> HiFTGenerator:
    def out_channels(prefix: str) -> tuple[int, int]:
        for suffix in ("parametrizations.weight.original1", "weight_v", "weight"):
            if f"{prefix}.{suffix}" in weights:
                shape = weights[f"{prefix}.{suffix}"].shape
                return int(shape[0]), int(shape[1])
        raise ModelLoadError(f"HiFT weights lack '{prefix}': not a CosyVoice 2 / GLM-TTS hift.pt")

    base_channels, in_channels = out_channels("conv_pre")
    f0_channels, _ = out_channels("f0_predictor.condnet.0")
    return HiFTGenerator(in_channels, base_channels, f0_channels)


def load_hift(path: str | Path, device: str | torch.device = "cpu") -> HiFTGenerator:
    """Load upstream's `hift.pt` (weight-norm keys `parametrizations.weight.original0/1` or the older
    `weight_g/weight_v`: torch's weight-norm parametrization reads both), fold the weight norm, eval mode.
    Raises ModelLoadError when the file is missing or its names/shapes do not fit."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GLM-TTS vocoder weights {path} not found; download the whole checkpoint "
                             "(huggingface-cli download zai-org/GLM-TTS --local-dir DIR)")
    try:
        weights = dict(torch.load(path, map_location="cpu", weights_only=True))
    except (OSError, RuntimeError, EOFError) as exc:
        raise ModelLoadError(f"HiFT weights {path} could not be read ({exc}); re-download hift/hift.pt") from exc
    model = _hift_from_state_dict(weights)
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"HiFT weights {path} do not fit HiFT ({str(exc)[:300]}); re-download hift/hift.pt") \
            from exc
    for module in model.modules():  # fold weight norm once: inference needs only the product
        if torch.nn.utils.parametrize.is_parametrized(module, "weight"):
            torch.nn.utils.parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    return model.to(device).eval()


class Vocos2D(nn.Module):
    """Upstream's 32 kHz Vocos2D TorchScript generator behind the same call as `HiFTGenerator`."""

    hop_length = 640  # 32000 / 50 mel frames per second (utils/tts_model_util.py Token2Wav)

    def __init__(self, scripted: torch.jit.ScriptModule):
        super().__init__()
        self.generator = scripted

    @torch.inference_mode()
    def forward(self, mel: torch.Tensor, mel_lengths: torch.Tensor | None = None,
                generators: Sequence[torch.Generator] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """mel (batch, 80, max_frames) -> (wave (batch, max_frames * 640) float32, wave_lengths (batch,)).

        Deterministic (`generators` unused). Rows of equal length run as one batch; the output length per row is
        what the generator returns for that row (640 per frame for the released one)."""
        batch, _, max_frames = mel.shape
        lengths = [max_frames] * batch if mel_lengths is None else [int(n) for n in mel_lengths]
        outputs: dict[int, torch.Tensor] = {}
        for length in sorted(set(lengths)):
            rows = [i for i, n in enumerate(lengths) if n == length]
            group = mel[rows, :, :length].float()
            if length == 1:  # upstream doubles a one-frame mel
                group = torch.cat([group, group], dim=-1)
            waves = self.generator(group.transpose(-1, -2) + VOCOS_MEL_LOGDIFF)
            for k, i in enumerate(rows):
                outputs[i] = waves[k].reshape(-1)
        wave_lengths = torch.tensor([outputs[i].numel() for i in range(batch)], dtype=torch.long)
        wave = mel.new_zeros(batch, int(wave_lengths.max()) if batch else 0, dtype=torch.float32)
        for i in range(batch):
            wave[i, : outputs[i].numel()] = outputs[i].float()
        return wave, wave_lengths


def load_vocos2d(path: str | Path, device: str | torch.device = "cpu") -> Vocos2D:
    """`torch.jit.load` upstream's `generator_jit.ckpt` (as utils/vocos_util.py). Raises ModelLoadError."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GLM-TTS 32 kHz vocoder {path} not found; download the whole checkpoint "
                             "(huggingface-cli download zai-org/GLM-TTS --local-dir DIR) or use 24000 Hz")
    try:
        scripted = torch.jit.load(str(path), map_location=device)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"Vocos2D TorchScript {path} could not be loaded ({exc}); re-download "
                             "vocos2d/generator_jit.ckpt") from exc
    return Vocos2D(scripted.eval()).eval()


def load_vocoder(ckpt_dir: str | Path, sampling_rate: int, device: str | torch.device = "cpu") -> nn.Module:
    """The vocoder for `sampling_rate` from a checkpoint's `ckpt/` folder: 24000 -> hift/hift.pt (HiFT),
    32000 -> vocos2d/generator_jit.ckpt (Vocos2D). Both are called as
    `vocoder(mel (B, 80, T), mel_lengths (B,), generators) -> (wave (B, N), wave_lengths (B,))` and have
    `.hop_length`. Raises ValueError for another rate, ModelLoadError for missing or bad files."""
    ckpt_dir = Path(ckpt_dir)
    if sampling_rate == HIFT_SAMPLING_RATE:
        return load_hift(ckpt_dir / HIFT_WEIGHTS, device)
    if sampling_rate == VOCOS_SAMPLING_RATE:
        return load_vocos2d(ckpt_dir / VOCOS_WEIGHTS, device)
    raise ValueError(f"GLM-TTS sampling rate {sampling_rate} Hz: use 24000 (HiFT) or 32000 (Vocos2D)")
