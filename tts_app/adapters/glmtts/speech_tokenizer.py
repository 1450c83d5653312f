"""GLM-TTS's speech tokenizer (``ckpt/speech_tokenizer``): a Whisper encoder cut at a vector quantiser, as our own
torch module built from transformers' ``WhisperEncoderLayer``, loading upstream's weights by their names.

What upstream runs (``utils/yaml_util.load_quantize_encoder`` +
``utils/whisper_models/modeling_whisper.WhisperVQEncoder`` with ``quantize_encoder_only=True``;
``cosyvoice/cli/frontend.SpeechTokenizer.extract_speech_token``):

1. The clip at 16 kHz, cut into 30 s pieces; transformers' ``WhisperFeatureExtractor`` (the folder's
   ``preprocessor_config.json``) gives log-mel features padded to a multiple of the token stride, with a mask.
2. ``conv1`` (k=3) and ``conv2`` (k=3, stride 2), each followed by GELU (causal, left-padded convolutions when the
   config sets ``encoder_causal_convolution``), plus the learned position table ``embed_positions``.
3. The first ``quantize_position`` encoder layers (pre-LayerNorm self-attention + MLP: transformers'
   ``WhisperEncoderLayer``, the same weights). Attention is causal when the config sets ``encoder_causal_attention``
   or ``quantize_causal_encoder`` (upstream then ignores the padding mask), else block-causal
   (``quantize_causal_block_size``) or plain, with padded frames masked out.
4. After layer ``pooling_position``: max / average pooling over time by ``pooling_kernel_size`` (right-padded with
   zeros to a multiple), the mask subsampled alike.
5. After layer ``quantize_position``: each frame's nearest codebook row (squared Euclidean distance) is its token.

Tokens of padded frames are dropped; the 30 s pieces' tokens are concatenated. Weights: the ``model.encoder.*``
tensors of ``model*.safetensors`` (layers at or past ``quantize_position`` and the final ``layer_norm`` are not used).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from tts_app.errors import ModelLoadError

#: Input rate of the Whisper feature extractor (Hz) and the piece length upstream cuts clips into (s).
SAMPLING_RATE_HZ = 16000
PIECE_S = 30


class _CausalConv1d(nn.Conv1d):
    """A Conv1d left-padded by ``dilation x (kernel_size - 1)`` (upstream's ``CausalConv1d``)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0)
        self.left_padding = self.dilation[0] * (kernel_size - 1)

    def forward(self, x):
        return super().forward(nn.functional.pad(x, (self.left_padding, 0)))


class WhisperVQEncoder(nn.Module):
    """Whisper encoder up to the quantiser (see the module docstring). ``config``: transformers ``WhisperConfig`` of
    the folder's ``config.json``, which also carries upstream's ``WhisperVQConfig`` fields (``quantize_position``,
    ``quantize_vocab_size``, ``pooling_kernel_size``, ...) as plain attributes."""

    def __init__(self, config):
        from transformers.models.whisper.modeling_whisper import WhisperEncoderLayer

        super().__init__()
        self.config = config
        dim = int(config.d_model)
        conv = _CausalConv1d if getattr(config, "encoder_causal_convolution", False) else nn.Conv1d
        self.conv1 = conv(int(config.num_mel_bins), dim, kernel_size=3, padding=1)
        self.conv2 = conv(dim, dim, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(int(config.max_source_positions), dim)
        self.quantize_position = int(getattr(config, "quantize_position", 16))
        self.layers = nn.ModuleList([WhisperEncoderLayer(config) for _ in range(self.quantize_position)])
        self.pooling_kernel_size = getattr(config, "pooling_kernel_size", None)
        self.pooling_position = getattr(config, "pooling_position", 0)
        pooling = getattr(config, "pooling_type", "max")
        self.pooling = None
        if self.pooling_kernel_size:
            if pooling not in ("max", "avg"):
                raise ModelLoadError(f"speech tokenizer pooling_type {pooling!r} is not 'max' or 'avg'")
            cls = nn.MaxPool1d if pooling == "max" else nn.AvgPool1d
            self.pooling = cls(kernel_size=int(self.pooling_kernel_size))
        self.codebook = nn.Embedding(int(config.quantize_vocab_size), dim)
        self.causal = bool(getattr(config, "encoder_causal_attention", False)
                           or getattr(config, "quantize_causal_encoder", False))
        self.block_size = getattr(config, "quantize_causal_block_size", None)

    @property
    def token_stride(self) -> int:
        """Feature frames per token: conv strides x pooling."""
        return int(self.conv1.stride[0] * self.conv2.stride[0] * (self.pooling_kernel_size or 1))

    def _mask(self, frame_mask, block_size):
        """Additive attention mask ``(batch, 1, frames, frames)`` from ``frame_mask`` ``(batch, frames)`` (1 = real)."""
        batch, frames = frame_mask.shape
        dtype = self.codebook.weight.dtype
        if self.causal:  # upstream: SDPA is_causal, the padding mask ignored
            allowed = torch.ones(frames, frames, dtype=torch.bool, device=frame_mask.device).tril()[None]
            allowed = allowed.expand(batch, -1, -1)
        elif block_size:
            causal = torch.ones(frames, frames, dtype=torch.bool, device=frame_mask.device).tril()
            blocks = torch.block_diag(*[causal.new_ones(min(block_size, frames - s), min(block_size, frames - s))
                                        for s in range(0, frames, block_size)])
            allowed = (causal | blocks)[None] & frame_mask.bool()[:, None, :]
        else:
            allowed = frame_mask.bool()[:, None, :].expand(-1, frames, -1)
        return torch.zeros(allowed.shape, dtype=dtype, device=frame_mask.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)[:, None]

    @torch.no_grad()
    def forward(self, input_features, attention_mask):
        """Log-mel features ``(batch, num_mel_bins, frames)`` float + their mask ``(batch, frames)`` -> (token ids
        ``(batch, tokens)`` int64, token mask ``(batch, tokens)``)."""
        stride = self.conv1.stride[0] * self.conv2.stride[0]
        mask = attention_mask[:, ::stride]
        hidden = nn.functional.gelu(self.conv1(input_features))
        hidden = nn.functional.gelu(self.conv2(hidden)).permute(0, 2, 1)  # (batch, frames / 2, dim)
        frames = hidden.shape[1]
        hidden = hidden + self.embed_positions.weight[:frames]
        extended = self._mask(mask, self.block_size)
        for index, layer in enumerate(self.layers):
            out = layer(hidden, extended)
            hidden = out[0] if isinstance(out, tuple) else out
            if index + 1 == self.pooling_position and self.pooling is not None:
                k = int(self.pooling_kernel_size)
                hidden = hidden.permute(0, 2, 1)
                if hidden.shape[-1] % k:
                    hidden = nn.functional.pad(hidden, (0, k - hidden.shape[-1] % k))
                hidden = self.pooling(hidden).permute(0, 2, 1)
                mask = mask[:, ::k]
                extended = self._mask(mask, self.block_size // k if self.block_size else None)
        flat = hidden.reshape(-1, hidden.shape[-1])
        codebook = self.codebook.weight
        # squared distances as upstream's vector_quantize computes them (addmm of the norms and -2 x dot products)
        distances = torch.addmm((codebook ** 2).sum(dim=1) + (flat ** 2).sum(dim=1, keepdim=True), flat,
                                codebook.t(), alpha=-2.0, beta=1.0)
        ids = distances.argmin(dim=1).reshape(hidden.shape[0], hidden.shape[1])
        return ids, mask[:, :ids.shape[1]]


class SpeechTokenizer:
    """Reference clip -> GLM-TTS speech tokens (25 per second of speech on the real checkpoint).

    Args:
        folder: ``ckpt/speech_tokenizer`` (``config.json``, ``model*.safetensors``, ``preprocessor_config.json``).
        device: torch device string.

    Raises:
        ModelLoadError: missing or unreadable files, or weights that do not match the config.
    """

    def __init__(self, folder: str | Path, device: str = "cpu"):
        from safetensors import safe_open
        from transformers import WhisperConfig, WhisperFeatureExtractor

        folder = Path(folder)
        files = sorted(folder.glob("model*.safetensors"))
        if not files or not (folder / "config.json").is_file():
            raise ModelLoadError(f"the GLM-TTS speech tokenizer folder {str(folder)!r} needs config.json and "
                                 "model*.safetensors; download the whole zai-org/GLM-TTS checkpoint")
        try:
            config = WhisperConfig.from_pretrained(folder)
            self.feature_extractor = WhisperFeatureExtractor.from_pretrained(folder)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read the GLM-TTS speech tokenizer config in {str(folder)!r}: {exc}") from exc
        config._attn_implementation = "eager"
        model = WhisperVQEncoder(config)
        state = {}
        for path in files:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for key in f.keys():
                    if not key.startswith("model.encoder."):
                        continue
                    name = key[len("model.encoder."):]
                    if name.startswith("layers.") and int(name.split(".")[1]) >= model.quantize_position:
                        continue
                    if name.startswith(("layer_norm", "embed_positions2")):  # after the quantiser: not used
                        continue
                    state[name] = f.get_tensor(key)
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise ModelLoadError(f"the GLM-TTS speech tokenizer weights in {str(folder)!r} do not match its "
                                 f"config: {exc}") from exc
        self.model = model.to(device).eval()
        self.device = device

    @property
    def vocab_size(self) -> int:
        return int(self.model.codebook.num_embeddings)

    def tokens(self, audio_16k: np.ndarray) -> list[int]:
        """Speech tokens of a mono float32 clip at 16 kHz ``(num_samples,)`` (see the module docstring)."""
        audio_16k = np.asarray(audio_16k, dtype=np.float32)
        pieces = [audio_16k[start: start + PIECE_S * SAMPLING_RATE_HZ]
                  for start in range(0, len(audio_16k), PIECE_S * SAMPLING_RATE_HZ)]
        stride = self.model.token_stride * int(self.feature_extractor.hop_length)
        out: list[int] = []
        for piece in pieces:
            features = self.feature_extractor([piece], sampling_rate=SAMPLING_RATE_HZ, return_attention_mask=True,
                                              return_tensors="pt", padding="longest", pad_to_multiple_of=stride)
            ids, mask = self.model(features.input_features.to(self.device, self.model.codebook.weight.dtype),
                                   features.attention_mask.to(self.device))
            out.extend(ids[0][mask[0].bool()].tolist())
        return out
