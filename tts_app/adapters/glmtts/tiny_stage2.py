"""Tiny random GLM-TTS second-stage files in upstream's exact layout and formats (for `make-tiny-model`).

- `flow/config.yaml`: HyperPyYAML, `flow: !new:flow.flow.Flow` with the released checkpoint's switches (25 tokens/s,
  50 mel frames/s, speaker embedding in the adaptive norm, not concatenated, same tokens in the CFG pass).
- `flow/flow.pt`: `torch.save` of the state dict (an OrderedDict, which upstream's `load_flow_model` loads as is),
  upstream's names, x-transformers' persistent `rotary_embed.inv_freq` included. Only the sizes are tiny (upstream's
  DiT presets are 768 or 1024 wide; its code builds those from `big_model`, our loader reads sizes from the shapes).
- `hift/hift.pt`: HiFT state dict with weight-norm parametrization names, channel widths tiny, strides as upstream.
- `vocos2d/generator_jit.ckpt`: the real file is a TorchScript archive of a Vocos2D generator whose source is not
  published; this writes a tiny scripted generator with the same call (`(batch, frames, 80)` log-mel ->
  `(batch, frames * 640)` samples) and the attributes upstream's wrapper touches (`fbs`, `spec_min`, `_stft`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tts_app.adapters.glmtts.flow import DIM_HEAD, FLOW_CONFIG_FILE, FLOW_WEIGHTS_FILE, DiTShape, Flow, FlowOptions
from tts_app.adapters.glmtts.vocoder import HiFTGenerator

# Speech tokens the LM can emit: <|audio_0|>..<|audio_32767|> (h28a's tiny LM carries all of them).
TINY_SPEECH_VOCAB = 32768
TINY_FLOW_CONFIG = {
    "speech_token_dim": 16,
    "vocab_size": TINY_SPEECH_VOCAB,
    "input_frame_rate": 25,
    "spk_embed_dim": 80,
    "mel_dim": 80,
    "big_model": False,
    "spkr_emb_adaLN": True,
    "speech_token_cfg": False,
    "remove_spkr_concat_condition": True,
    "t_scheduler": "cosine",
    "mel_framerate": 50,
}
TINY_DIT = DiTShape(trans_dim=64, depth=2, heads=2, ff_inner_dim=128, mel_dim=80, condition_dim=80,
                    num_text_embeddings=TINY_SPEECH_VOCAB + 1, text_emb_dim=16, conv_layers=2,
                    conv_intermediate_dim=32, conv_pos_groups=16, speaker_adaln_dim=192)
TINY_HIFT_CHANNELS = {"in_channels": 80, "base_channels": 16, "f0_channels": 16}
# Voiced F0 for random weights: the F0 head's bias, so the sine source (voiced above 10 Hz) is exercised.
TINY_HIFT_F0_BIAS_HZ = 150.0


def _perturb(module: nn.Module, generator: torch.Generator, std: float = 0.05) -> None:
    """Add noise to every parameter, so zero-initialised ones (norm gains, GRN) carry signal too."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * std)


def write_tiny_flow(flow_dir: str | Path, seed: int = 0) -> Path:
    """Write `config.yaml` + `flow.pt` of a tiny random flow into `flow_dir` (created); returns `flow_dir`."""
    flow_dir = Path(flow_dir)
    flow_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# GLM-TTS flow (tiny random test weights); read by upstream with HyperPyYAML",
             "flow: !new:flow.flow.Flow"]
    for key, value in TINY_FLOW_CONFIG.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"    {key}: {text}")
    (flow_dir / FLOW_CONFIG_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")

    options = FlowOptions.from_config({**TINY_FLOW_CONFIG, "use_wavlm_emb": False})
    with torch.random.fork_rng(devices=[]):  # module init draws from the global generator: leave it as it was
        torch.manual_seed(seed)
        model = Flow(options, TINY_DIT)
    _perturb(model, torch.Generator().manual_seed(seed))
    state = model.state_dict()
    # x-transformers 1.x (upstream's pin) keeps the rotary inverse frequencies as a persistent buffer.
    key = "estimator.rotary_embed.inv_freq"
    if key not in state:
        state[key] = 1.0 / (10000 ** (torch.arange(0, DIM_HEAD, 2).float() / DIM_HEAD))
    torch.save(state, flow_dir / FLOW_WEIGHTS_FILE)
    return flow_dir


def write_tiny_hift(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random HiFT `hift.pt` (state dict, weight-norm parametrization names); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HiFTGenerator(**TINY_HIFT_CHANNELS)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("original0"):  # weight-norm gains: moderate, small at the output (log-magnitude)
                scale = 0.05 if name.startswith("conv_post") else 0.5
                parameter.copy_(scale * (0.5 + torch.rand(parameter.shape, generator=generator)))
        model.f0_predictor.classifier.bias.fill_(TINY_HIFT_F0_BIAS_HZ)
    torch.save(model.state_dict(), path)
    return path


class TinyVocos2DGenerator(nn.Module):
    """A tiny stand-in for the Vocos2D TorchScript generator: log-mel (batch, frames, 80) -> (batch, frames * 640).

    A frame-mixing convolution, then a per-frame projection to 640 samples, tanh. Not Vocos: the real architecture's
    source is not published, only its TorchScript file; this keeps the call and the attributes upstream uses."""

    def __init__(self, num_mels: int = 80, hop_length: int = 640, n_fft: int = 2560):
        super().__init__()
        self.hop_length = hop_length
        self.n_fft = n_fft
        self.mix = nn.Conv1d(num_mels, 32, kernel_size=3, padding=1)
        self.project = nn.Linear(32, hop_length)
        self.register_buffer("fbs", torch.rand(n_fft // 2 + 1, num_mels) * 0.01)
        self.register_buffer("spec_min", torch.tensor(1e-5))
        self.register_buffer("window", torch.hann_window(n_fft))

    @torch.jit.export
    def _stft(self, wave: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(wave, self.n_fft, self.hop_length, self.n_fft, window=self.window, return_complex=True)
        return spec.transpose(-1, -2)

    def forward(self, log_mel_btc: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.mix(log_mel_btc.transpose(1, 2) / 8.0)).transpose(1, 2)
        samples = torch.tanh(self.project(hidden))  # (batch, frames, hop)
        return samples.reshape(samples.shape[0], -1)


def write_tiny_vocos2d(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny scripted Vocos2D stand-in to `path` (`torch.jit.save`); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        scripted = torch.jit.script(TinyVocos2DGenerator().eval())
    torch.jit.save(scripted, str(path))
    return path


def write_tiny_stage2(ckpt_dir: str | Path, seed: int = 0) -> None:
    """All three into a checkpoint's `ckpt/` folder: flow/, hift/hift.pt, vocos2d/generator_jit.ckpt."""
    ckpt_dir = Path(ckpt_dir)
    write_tiny_flow(ckpt_dir / "flow", seed)
    write_tiny_hift(ckpt_dir / "hift" / "hift.pt", seed)
    write_tiny_vocos2d(ckpt_dir / "vocos2d" / "generator_jit.ckpt", seed)
