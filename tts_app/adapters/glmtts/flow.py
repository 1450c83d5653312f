"""GLM-TTS second stage, part 1: the DiT flow-matching model (speech tokens -> 80-bin mel), batched.

Upstream (zai-org/GLM-TTS, `flow/flow.py`, `flow/dit.py`, `flow/modules.py`, loaded by `utils/yaml_util.py`) builds
`Flow` from `ckpt/flow/config.yaml` (HyperPyYAML, `flow: !new:flow.flow.Flow` + keyword arguments) and loads
`ckpt/flow/flow.pt` (a state dict, or `{"model": state dict}`) into it. It decodes one utterance at a time
(`Token2Wav.token2wav_with_cache` -> `Flow.inference_with_cache`, non-streaming: no block mask): prompt speech tokens +
generated tokens are stretched to `int(num_tokens / input_frame_rate * mel_framerate)` mel frames, the prompt mel is
copied at the start of the mel condition, and 10 Euler steps on a cosine time grid with classifier-free guidance
(rate 0.7) integrate from Gaussian noise. This module is our own code for the same computation, loading the same
weights by their names, with these departures, each for batching:

- Rows are padded to the longest row. Every operation that mixes frames sees only the row's own frames: the padded
  frames are zeroed before each convolution (the text ConvNeXt blocks, the convolutional position embedding) and
  before the ConvNeXt global response norm (a norm over time), and attention ignores padded keys. Upstream's single
  row has no padding, so each row equals that row decoded alone (float tolerance: kernels differ with the shape).
- The conditional and unconditional (CFG) passes run as one forward of 2 x batch rows.
- The ODE start noise is drawn per row from that row's own `torch.Generator`, in the row's own shape
  `(1, num_frames, mel_dim)` as upstream's `torch.randn_like` draws it from the global generator.

The DiT sizes (width, depth, heads, ConvNeXt layers, vocabulary) are read from the weights' shapes rather than from
upstream's two hard-coded presets (`big_model`), so the tiny test checkpoint and the real one load through the same
code; on the real checkpoint they give the preset values. `config.yaml` is read with PyYAML (a dependency of
transformers and huggingface_hub), with HyperPyYAML's tags read as plain data: HyperPyYAML itself would import
upstream's `flow.flow.Flow` class to build the model, which is not ours to import.

The rotary position embedding is x-transformers' (`RotaryEmbedding`, `apply_rotary_pos_emb`), as upstream uses it:
applied to the whole `(batch, frames, heads * 64)` projection with 64-dim frequencies, so only the first head's
features rotate (x-transformers leaves the rest unrotated); reproduced on purpose, the weights were trained with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tts_app.errors import ModelLoadError

# Upstream `Flow.__init__` keyword defaults (flow/flow.py), used where config.yaml leaves a key out. One source.
FLOW_CONFIG_DEFAULTS: dict[str, Any] = {
    "input_frame_rate": 12.5,
    "mel_framerate": 86,
    "spk_embed_dim": 80,
    "mel_dim": 80,
    "spkr_emb_adaLN": False,
    "speech_token_cfg": True,
    "use_wavlm_emb": False,
    "remove_spkr_concat_condition": False,
    "t_scheduler": "cosine",
}
# Constants upstream sets in code, not in config.yaml (flow/flow.py `Flow.__init__`, utils/tts_model_util.py
# `token2wav_with_cache(n_timesteps=10)`, flow/dit.py `DiT(dim_head=64)`, flow/dit.py `TextEmbedding`).
INFERENCE_CFG_RATE = 0.7
NUM_ODE_STEPS = 10
DIM_HEAD = 64
SPEAKER_EMBEDDING_DIM = 192  # CAM++ embedding size (flow/flow.py spk_embed_affine_layer, flow/dit.py spkr_dim)
TEXT_MAX_POSITIONS = 4096  # TextEmbedding.precompute_max_pos ("~44s of 24khz audio")
FLOW_WEIGHTS_FILE = "flow.pt"
FLOW_CONFIG_FILE = "config.yaml"


# ----------------------------------------------------------------------------------------------------------------
# config.yaml (HyperPyYAML) as plain data


def _hyperpyyaml_as_data_loader() -> type:
    """A PyYAML SafeLoader that reads HyperPyYAML tags (`!new:a.b.C`, `!name:`, `!apply:`, `!ref <key>`) as data."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        value = loader.construct_scalar(node)
        return {"!ref": value} if suffix == "ref" else value

    Loader.add_multi_constructor("!", construct_tagged)
    return Loader


def read_flow_config(config_path: Path) -> dict[str, Any]:
    """Read upstream's `config.yaml` and return the `flow` keyword arguments merged over `FLOW_CONFIG_DEFAULTS`.

    `!ref <key>` values are resolved against the file's top-level keys (HyperPyYAML's meaning).
    Raises ModelLoadError if the file is missing, unreadable or has no `flow` mapping.
    """
    import yaml

    try:
        with open(config_path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=_hyperpyyaml_as_data_loader())  # noqa: S506 (a SafeLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise ModelLoadError(f"GLM-TTS flow config {config_path} could not be read ({exc}); re-download the "
                             "checkpoint's flow/ folder") from exc
    if not isinstance(data, dict) or not isinstance(data.get("flow"), dict):
        raise ModelLoadError(f"GLM-TTS flow config {config_path} has no 'flow' mapping; re-download the checkpoint's "
                             "flow/ folder")

    def resolve(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"!ref"}:
            key = str(value["!ref"]).strip().strip("<>")
            return resolve(data.get(key))
        return value

    config = dict(FLOW_CONFIG_DEFAULTS)
    config.update({key: resolve(value) for key, value in data["flow"].items()})
    return config


# ----------------------------------------------------------------------------------------------------------------
# Building blocks (module and parameter names follow upstream's so its state dict loads by name)


def _zero_padding(x_btd: torch.Tensor, frame_mask_bt: torch.Tensor | None) -> torch.Tensor:
    """Zero the padded frames of `(batch, frames, dim)`; `frame_mask_bt` is True on a row's own frames."""
    return x_btd if frame_mask_bt is None else x_btd * frame_mask_bt.unsqueeze(-1).to(x_btd.dtype)


class _SinusTimeEmbedding(nn.Module):
    """Timestep -> sinusoid (flow/modules.py SinusPositionEmbedding; scale 1000, half sin half cos)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, t_b: torch.Tensor, scale: float = 1000.0) -> torch.Tensor:
        half = self.dim // 2
        step = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t_b.device).float() * -step)
        angles = scale * t_b.unsqueeze(1) * freqs.unsqueeze(0)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, freq_embed_dim: int = 256):
        super().__init__()
        self.time_embed = _SinusTimeEmbedding(freq_embed_dim)
        self.time_mlp = nn.Sequential(nn.Linear(freq_embed_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t_b: torch.Tensor) -> torch.Tensor:
        # The sinusoid in float32 even for a bf16 model (time 0..1 scaled by 1000 needs the precision).
        return self.time_mlp(self.time_embed(t_b.float()).to(self.time_mlp[0].weight.dtype))


class GRN(nn.Module):
    """Global response norm (ConvNeXt-V2): L2 norm over frames, here over the row's own frames only."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x_btd: torch.Tensor, frame_mask_bt: torch.Tensor | None = None) -> torch.Tensor:
        x_btd = _zero_padding(x_btd, frame_mask_bt)
        norm = torch.norm(x_btd, p=2, dim=1, keepdim=True)
        scaled = norm / (norm.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x_btd * scaled) + self.beta + x_btd


class ConvNeXtV2Block(nn.Module):
    def __init__(self, dim: int, intermediate_dim: int):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.grn = GRN(intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)

    def forward(self, x_btd: torch.Tensor, frame_mask_bt: torch.Tensor | None = None) -> torch.Tensor:
        h = self.dwconv(_zero_padding(x_btd, frame_mask_bt).transpose(1, 2)).transpose(1, 2)
        h = self.act(self.pwconv1(self.norm(h)))
        return x_btd + self.pwconv2(self.grn(h, frame_mask_bt))


def _text_positions(dim: int, max_positions: int, theta: float = 10000.0) -> torch.Tensor:
    """(max_positions, dim) table [cos | sin] added to the token embeddings (flow/modules.py precompute_freqs_cis)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(max_positions).float(), freqs)
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class TextEmbedding(nn.Module):
    """Speech tokens -> per-frame features: nearest-neighbour stretch to the frame count, embed, ConvNeXt blocks."""

    def __init__(self, num_embeddings: int, dim: int, conv_layers: int, conv_intermediate_dim: int):
        super().__init__()
        self.text_embed = nn.Embedding(num_embeddings, dim)
        self.register_buffer("freqs_cis", _text_positions(dim, TEXT_MAX_POSITIONS), persistent=False)
        self.text_blocks = nn.ModuleList(ConvNeXtV2Block(dim, conv_intermediate_dim) for _ in range(conv_layers))

    def forward(self, frame_tokens_bt: torch.Tensor, frame_mask_bt: torch.Tensor | None) -> torch.Tensor:
        hidden = self.text_embed(frame_tokens_bt)
        if len(self.text_blocks):
            positions = torch.arange(frame_tokens_bt.shape[1], device=hidden.device).clamp(max=TEXT_MAX_POSITIONS - 1)
            hidden = hidden + self.freqs_cis[positions].unsqueeze(0)
            for block in self.text_blocks:
                hidden = block(hidden, frame_mask_bt)
        return hidden


class ConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int, groups: int, kernel_size: int = 31):
        super().__init__()
        self.conv1d = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish(),
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish())

    def forward(self, x_btd: torch.Tensor, frame_mask_bt: torch.Tensor | None) -> torch.Tensor:
        h = x_btd.transpose(1, 2)
        mask_b1t = None if frame_mask_bt is None else frame_mask_bt.unsqueeze(1).to(h.dtype)
        for conv, act in ((self.conv1d[0], self.conv1d[1]), (self.conv1d[2], self.conv1d[3])):
            if mask_b1t is not None:
                h = h * mask_b1t
            h = act(conv(h))
        return h.transpose(1, 2)


class EmbeddingConcater(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, conv_groups: int):
        super().__init__()
        self.proj = nn.Linear(in_dim, out_dim)
        self.conv_pos_embed = ConvPositionEmbedding(out_dim, conv_groups)

    def forward(self, x_btd, cond_btd, text_btd, frame_mask_bt):
        x_btd = self.proj(torch.cat((x_btd, cond_btd, text_btd), dim=-1))
        return self.conv_pos_embed(x_btd, frame_mask_bt) + x_btd


class AdaLayerNormZero(nn.Module):
    def __init__(self, dim: int, condition_dim: int):
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(condition_dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x_btd, emb_bd):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.linear(self.silu(emb_bd)).chunk(6, dim=1)
        normed = self.norm(x_btd) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        return normed, gate_msa, shift_mlp, scale_mlp, gate_mlp


class AdaLayerNormZeroFinal(nn.Module):
    def __init__(self, dim: int, condition_dim: int):
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(condition_dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x_btd, emb_bd):
        scale, shift = self.linear(self.silu(emb_bd)).chunk(2, dim=1)
        return self.norm(x_btd) * (1 + scale)[:, None, :] + shift[:, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.heads = heads
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def forward(self, x_btd, rope_freqs, key_mask_b11t, frame_mask_bt):
        from x_transformers.x_transformers import apply_rotary_pos_emb

        batch = x_btd.shape[0]
        # Upstream rotates the (batch, frames, heads*dim_head) projection with dim_head-wide frequencies.
        q = apply_rotary_pos_emb(self.to_q(x_btd), rope_freqs, 1.0)
        k = apply_rotary_pos_emb(self.to_k(x_btd), rope_freqs, 1.0)
        v = self.to_v(x_btd)
        head_dim = q.shape[-1] // self.heads
        # (batch, frames, heads*head_dim) -> (batch, heads, frames, head_dim)
        q, k, v = (t.view(batch, -1, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask_b11t)
        out = out.transpose(1, 2).reshape(batch, -1, self.heads * head_dim)
        out = self.to_out[0](out)
        return _zero_padding(out, frame_mask_bt)


class FeedForward(nn.Module):
    def __init__(self, dim: int, inner_dim: int):
        super().__init__()
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner_dim), nn.GELU(approximate="tanh")),
                                nn.Dropout(0.0), nn.Linear(inner_dim, dim))

    def forward(self, x_btd):
        return self.ff(x_btd)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, ff_inner_dim: int, condition_dim: int):
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim, condition_dim)
        self.attn = Attention(dim, heads, dim_head)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim, ff_inner_dim)

    def forward(self, x_btd, emb_bd, rope_freqs, key_mask_b11t, frame_mask_bt):
        normed, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(x_btd, emb_bd)
        x_btd = x_btd + gate_msa.unsqueeze(1) * self.attn(normed, rope_freqs, key_mask_b11t, frame_mask_bt)
        normed = self.ff_norm(x_btd) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        return x_btd + gate_mlp.unsqueeze(1) * self.ff(normed)


@dataclass(frozen=True)
class DiTShape:
    """DiT sizes, read from the weights (`DiTShape.from_state_dict`); upstream's presets: 768/18/12 or 1024/22/16."""

    trans_dim: int
    depth: int
    heads: int
    ff_inner_dim: int
    mel_dim: int
    condition_dim: int  # mel condition (+ speaker projection when concatenated)
    num_text_embeddings: int  # vocab_size + 1 (0 is the filler token)
    text_emb_dim: int
    conv_layers: int
    conv_intermediate_dim: int
    conv_pos_groups: int
    speaker_adaln_dim: int  # 0, or 192 when the speaker embedding joins the time embedding (spkr_emb_adaLN)
    has_long_skip: bool = False

    @classmethod
    def from_state_dict(cls, weights: Mapping[str, torch.Tensor], prefix: str = "estimator.") -> "DiTShape":
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in weights:
                raise ModelLoadError(f"GLM-TTS flow weights lack '{prefix}{name}': not a GLM-TTS flow.pt")
            return tuple(weights[prefix + name].shape)

        def count(stem: str) -> int:
            n = 0
            while any(key.startswith(f"{prefix}{stem}.{n}.") for key in weights):
                n += 1
            return n

        mel_dim, trans_dim = shape("proj_out.weight")
        num_text, text_dim = shape("text_emb_layer.text_embed.weight")
        conv_layers = count("text_emb_layer.text_blocks")
        pos_out, pos_in_per_group, _ = shape("emb_concator.conv_pos_embed.conv1d.0.weight")
        return cls(
            trans_dim=trans_dim,
            depth=count("transformer_blocks"),
            heads=shape("transformer_blocks.0.attn.to_q.weight")[0] // DIM_HEAD,
            ff_inner_dim=shape("transformer_blocks.0.ff.ff.0.0.weight")[0],
            mel_dim=mel_dim,
            condition_dim=shape("emb_concator.proj.weight")[1] - mel_dim - text_dim,
            num_text_embeddings=num_text,
            text_emb_dim=text_dim,
            conv_layers=conv_layers,
            conv_intermediate_dim=shape("text_emb_layer.text_blocks.0.pwconv1.weight")[0] if conv_layers else 0,
            conv_pos_groups=pos_out // pos_in_per_group,
            speaker_adaln_dim=shape("norm_out.linear.weight")[1] - trans_dim,
            has_long_skip=prefix + "long_skip_connection.weight" in weights,
        )


class DiT(nn.Module):
    """The velocity estimator: (noisy mel, mel condition, speech tokens, time, speaker) -> d mel / d t."""

    def __init__(self, shape: DiTShape):
        super().__init__()
        from x_transformers.x_transformers import RotaryEmbedding

        self.shape = shape
        self.time_embed = TimestepEmbedding(shape.trans_dim)
        self.text_emb_layer = TextEmbedding(shape.num_text_embeddings, shape.text_emb_dim, shape.conv_layers,
                                            shape.conv_intermediate_dim)
        self.emb_concator = EmbeddingConcater(shape.mel_dim + shape.text_emb_dim + shape.condition_dim,
                                              shape.trans_dim, shape.conv_pos_groups)
        self.rotary_embed = RotaryEmbedding(DIM_HEAD)
        condition_dim = shape.trans_dim + shape.speaker_adaln_dim
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(shape.trans_dim, shape.heads, DIM_HEAD, shape.ff_inner_dim, condition_dim)
            for _ in range(shape.depth))
        self.long_skip_connection = (nn.Linear(shape.trans_dim * 2, shape.trans_dim, bias=False)
                                     if shape.has_long_skip else None)
        self.norm_out = AdaLayerNormZeroFinal(shape.trans_dim, condition_dim)
        self.proj_out = nn.Linear(shape.trans_dim, shape.mel_dim)

    def forward(self, noisy_mel_btd: torch.Tensor, condition_btd: torch.Tensor, frame_tokens_bt: torch.Tensor,
                time_b: torch.Tensor, frame_mask_bt: torch.Tensor | None,
                speaker_bd: torch.Tensor | None) -> torch.Tensor:
        """Velocity `(batch, frames, mel_dim)`. `frame_tokens_bt`: speech tokens already stretched to the frames."""
        num_frames = noisy_mel_btd.shape[1]
        emb_bd = self.time_embed(time_b)
        if self.shape.speaker_adaln_dim:
            emb_bd = torch.cat([emb_bd, speaker_bd], dim=-1)
        text_btd = self.text_emb_layer(frame_tokens_bt, frame_mask_bt)
        x_btd = self.emb_concator(noisy_mel_btd, condition_btd, text_btd, frame_mask_bt)
        rope_freqs, _ = self.rotary_embed.forward_from_seq_len(num_frames)
        # Padded keys are ignored; a row alone (no padding) needs no mask, as upstream's non-streaming path has none.
        key_mask_b11t = None if frame_mask_bt is None else frame_mask_bt[:, None, None, :]
        residual = x_btd
        for block in self.transformer_blocks:
            x_btd = block(x_btd, emb_bd, rope_freqs, key_mask_b11t, frame_mask_bt)
        if self.long_skip_connection is not None:
            x_btd = self.long_skip_connection(torch.cat((x_btd, residual), dim=-1))
        return self.proj_out(self.norm_out(x_btd, emb_bd))


# ----------------------------------------------------------------------------------------------------------------
# The flow model


@dataclass(frozen=True)
class FlowOptions:
    """The non-weight settings of `config.yaml` that change inference (names as upstream's `Flow` arguments)."""

    input_frame_rate: float  # speech tokens per second (25 for the released checkpoint)
    mel_framerate: float  # mel frames per second (50: hop 480 at 24 kHz, hop 640 at 32 kHz)
    spk_embed_dim: int
    spkr_emb_adaLN: bool
    remove_spkr_concat_condition: bool
    speech_token_cfg: bool  # True: the unconditional pass sees all-zero tokens; False: the same tokens
    t_scheduler: str
    use_wavlm_emb: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "FlowOptions":
        if config.get("use_wavlm_emb"):
            raise ModelLoadError("GLM-TTS flow config sets use_wavlm_emb: true; this app has no WavLM speaker "
                                 "embedding (the released checkpoint does not use it)")
        if config.get("t_scheduler") != "cosine":
            raise ModelLoadError(f"GLM-TTS flow config t_scheduler={config.get('t_scheduler')!r}: only 'cosine' "
                                 "is implemented (upstream implements only that one too)")
        return cls(input_frame_rate=float(config["input_frame_rate"]), mel_framerate=float(config["mel_framerate"]),
                   spk_embed_dim=int(config["spk_embed_dim"]), spkr_emb_adaLN=bool(config["spkr_emb_adaLN"]),
                   remove_spkr_concat_condition=bool(config["remove_spkr_concat_condition"]),
                   speech_token_cfg=bool(config["speech_token_cfg"]), t_scheduler=str(config["t_scheduler"]),
                   use_wavlm_emb=False)


def frames_for_tokens(num_tokens: int, input_frame_rate: float, mel_framerate: float) -> int:
    """Mel frames for `num_tokens` speech tokens, as upstream computes it (flow/flow.py: int(n / rate * mel_rate))."""
    return int(num_tokens / input_frame_rate * mel_framerate)


class Flow(nn.Module):
    """Upstream's `Flow`: a speaker projection (when concatenated) + the DiT `estimator`; batched inference."""

    def __init__(self, options: FlowOptions, shape: DiTShape):
        super().__init__()
        self.options = options
        self.input_frame_rate = options.input_frame_rate
        self.mel_dim = shape.mel_dim
        if not options.remove_spkr_concat_condition:
            self.spk_embed_affine_layer = nn.Linear(SPEAKER_EMBEDDING_DIM, options.spk_embed_dim)
        self.estimator = DiT(shape)

    @property
    def device(self) -> torch.device:
        return self.estimator.proj_out.weight.device

    def _row_inputs(self, tokens: torch.Tensor, prompt_tokens: torch.Tensor, prompt_mel: torch.Tensor):
        """One row: (frame tokens (frames,), mel condition (frames, mel_dim), prompt mel frames to drop)."""
        all_tokens = torch.cat([prompt_tokens, tokens]).long()
        num_frames = frames_for_tokens(all_tokens.numel(), self.options.input_frame_rate, self.options.mel_framerate)
        if num_frames < 1:
            raise ValueError(f"GLM-TTS flow got {all_tokens.numel()} speech tokens: too few for one mel frame "
                             "(the caller must pass the reference audio's speech tokens as the prompt)")
        num_embeddings = self.estimator.text_emb_layer.text_embed.num_embeddings
        if all_tokens.numel() and (int(all_tokens.max()) >= num_embeddings or int(all_tokens.min()) < 0):
            raise ModelLoadError(f"GLM-TTS flow got speech token {int(all_tokens.max())}, outside 0..{num_embeddings - 1}"
                             " of this checkpoint's flow: the LM and flow come from different checkpoints")
        # Nearest-neighbour stretch of token ids to the frame count (upstream: length_align="interpolate_token").
        frame_tokens = F.interpolate(all_tokens[None, None].float(), size=num_frames, mode="nearest")[0, 0].long()
        condition = prompt_mel.new_zeros(num_frames, self.mel_dim)
        copy = min(prompt_mel.shape[0], num_frames)
        if copy:
            condition[:copy] = prompt_mel[prompt_mel.shape[0] - copy:]
        return frame_tokens, condition, prompt_mel.shape[0]

    @torch.inference_mode()
    def token_to_mel(self, tokens: torch.Tensor, token_lengths: torch.Tensor, prompt_tokens: torch.Tensor,
                     prompt_token_lengths: torch.Tensor, prompt_mel: torch.Tensor, prompt_mel_lengths: torch.Tensor,
                     speaker_embedding: torch.Tensor, generators: Sequence[torch.Generator] | None = None,
                     num_steps: int = NUM_ODE_STEPS) -> tuple[torch.Tensor, torch.Tensor]:
        """Mel spectrograms of the generated speech tokens of a batch of rows.

        tokens: (batch, max_tokens) int, generated speech tokens, right-padded; token_lengths: (batch,).
        prompt_tokens: (batch, max_prompt_tokens) int, the reference audio's speech tokens; prompt_token_lengths.
        prompt_mel: (batch, max_prompt_frames, mel_dim) float, the reference audio's log-mel (upstream's feature
            extractor), frames as rows; prompt_mel_lengths: (batch,).
        speaker_embedding: (batch, 192) float, CAM++ embedding (normalised here, as upstream does).
        generators: one `torch.Generator` per row (CPU or the model's device) for the ODE start noise; None: the
            global generator, drawn row after row.
        Returns (mel (batch, mel_dim, max_frames) float32, right-padded with zeros; mel_lengths (batch,) int64):
            the generated part only (the prompt's frames removed), as upstream's `inference_with_cache` returns.
        Row i equals that row run alone (within float tolerance), with the same generator state.
        Raises ValueError for a row with no mel frame; ModelLoadError for a token outside the flow's vocabulary (the
        LM and the flow come from different checkpoints).
        """
        batch = tokens.shape[0]
        if generators is not None and len(generators) != batch:
            raise ValueError(f"token_to_mel: {len(generators)} generators for {batch} rows; pass one per row")
        device, dtype = self.device, self.estimator.proj_out.weight.dtype
        rows = [self._row_inputs(tokens[i, : int(token_lengths[i])].to(device),
                                 prompt_tokens[i, : int(prompt_token_lengths[i])].to(device),
                                 prompt_mel[i, : int(prompt_mel_lengths[i])].to(device, torch.float32))
                for i in range(batch)]
        frame_counts = [row[0].numel() for row in rows]
        max_frames = max(frame_counts)
        frame_tokens = torch.zeros(batch, max_frames, dtype=torch.long, device=device)
        mel_condition = torch.zeros(batch, max_frames, self.mel_dim, device=device)
        noise = torch.zeros(batch, max_frames, self.mel_dim, device=device)
        for i, (row_tokens, row_condition, _) in enumerate(rows):
            n = frame_counts[i]
            frame_tokens[i, :n] = row_tokens
            mel_condition[i, :n] = row_condition
            # Upstream: torch.randn_like(mel_cond) of shape (1, frames, mel_dim); same draw from the row's generator,
            # on the generator's own device (a CPU generator works for a CUDA model).
            generator = None if generators is None else generators[i]
            noise[i, :n] = torch.randn((1, n, self.mel_dim), generator=generator,
                                       device=device if generator is None else generator.device)[0].to(device)
        counts = torch.tensor(frame_counts, device=device)
        frame_mask = torch.arange(max_frames, device=device)[None, :] < counts[:, None]  # (batch, frames)
        # A batch of one has no padding: run it exactly as upstream does (no masks).
        mask = None if batch == 1 else frame_mask

        speaker = F.normalize(speaker_embedding.to(device, torch.float32), dim=1)
        if self.options.remove_spkr_concat_condition:
            condition = mel_condition
        else:
            projected = self.spk_embed_affine_layer(speaker.to(dtype)).float()
            condition = torch.cat([mel_condition, projected[:, None, :].expand(-1, max_frames, -1)], dim=-1)
        speaker_adaln = speaker if self.options.spkr_emb_adaLN else None

        # Conditional and unconditional passes as one forward of 2 x batch rows (upstream: two forwards).
        uncond_tokens = torch.zeros_like(frame_tokens) if self.options.speech_token_cfg else frame_tokens
        tokens_2b = torch.cat([frame_tokens, uncond_tokens])
        condition_2b = torch.cat([condition, torch.zeros_like(condition)]).to(dtype)
        speaker_2b = None if speaker_adaln is None else torch.cat([speaker_adaln, torch.zeros_like(speaker_adaln)])
        speaker_2b = None if speaker_2b is None else speaker_2b.to(dtype)
        mask_2b = None if mask is None else torch.cat([mask, mask])

        t_span = torch.linspace(0, 1, num_steps + 1, device=device)
        t_span = 1 - torch.cos(t_span * 0.5 * torch.pi)  # cosine time grid (t_scheduler "cosine")
        x = noise
        t = t_span[0]
        dt = t_span[1] - t_span[0]
        for step in range(1, num_steps + 1):
            velocity = self.estimator(torch.cat([x, x]).to(dtype), condition_2b, tokens_2b,
                                      t.expand(2 * batch), mask_2b, speaker_2b).float()
            cond_v, uncond_v = velocity[:batch], velocity[batch:]
            x = x + dt * ((1.0 + INFERENCE_CFG_RATE) * cond_v - INFERENCE_CFG_RATE * uncond_v)
            t = t + dt
            if step < num_steps:
                dt = t_span[step + 1] - t

        mel_lengths = torch.tensor([n - row[2] for n, row in zip(frame_counts, rows)], dtype=torch.long)
        mel_lengths = mel_lengths.clamp(min=0)
        out = torch.zeros(batch, self.mel_dim, int(mel_lengths.max()) if batch else 0, device=device)
        for i, (n, row) in enumerate(zip(frame_counts, rows)):
            out[i, :, : int(mel_lengths[i])] = x[i, row[2]: n].transpose(0, 1)
        return out, mel_lengths


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise ModelLoadError(f"GLM-TTS flow weights {path} could not be read ({exc}); re-download the checkpoint's "
                             "flow/ folder") from exc
    # Upstream (utils/yaml_util.py) takes checkpoint["model"] when the file holds a plain dict, else the state dict.
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), Mapping):
        checkpoint = checkpoint["model"]
    return dict(checkpoint)


def load_flow(flow_dir: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Flow:
    """Load upstream's `flow/` folder (`config.yaml` + `flow.pt`) into our `Flow`, in eval mode on `device`.

    Raises ModelLoadError when a file is missing or the weights do not fit the config (names and shapes are checked
    strictly; x-transformers' persistent `rotary_embed.inv_freq` buffer is taken from the file as well).
    """
    flow_dir = Path(flow_dir)
    for name in (FLOW_CONFIG_FILE, FLOW_WEIGHTS_FILE):
        if not (flow_dir / name).is_file():
            raise ModelLoadError(f"GLM-TTS flow folder {flow_dir} lacks {name}; download the whole checkpoint "
                                 "(huggingface-cli download zai-org/GLM-TTS --local-dir DIR)")
    options = FlowOptions.from_config(read_flow_config(flow_dir / FLOW_CONFIG_FILE))
    weights = _read_weights(flow_dir / FLOW_WEIGHTS_FILE)
    shape = DiTShape.from_state_dict(weights)
    expected_condition = shape.mel_dim + (0 if options.remove_spkr_concat_condition else options.spk_embed_dim)
    if shape.condition_dim != expected_condition or bool(shape.speaker_adaln_dim) != options.spkr_emb_adaLN:
        raise ModelLoadError(f"GLM-TTS flow weights in {flow_dir} do not match its config.yaml (condition width "
                             f"{shape.condition_dim}, expected {expected_condition}); re-download the flow/ folder")
    model = Flow(options, shape)
    # The rotary inverse frequencies are a fixed function of dim_head (persistent in some x-transformers versions,
    # not in others): taken from the file when both have them, never required.
    own = model.state_dict()
    weights = {key: value for key, value in weights.items() if key in own or not key.endswith("inv_freq")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [key for key in missing if not key.endswith("inv_freq")]
    if missing or unexpected:
        raise ModelLoadError(f"GLM-TTS flow weights in {flow_dir} do not fit: missing {missing[:5]}, unexpected "
                             f"{unexpected[:5]}; re-download the flow/ folder")
    return model.to(device=device, dtype=dtype).eval()
