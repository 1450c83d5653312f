"""The model-adapter protocol: one file per model family implements it and holds ALL of that family's quirks.

The engine only ever talks to ``TTSAdapter``: ``preprocess -> generate -> postprocess`` on a batch of rows, plus the
``ModelFacts`` it needs for memory estimation. Pattern from transformers' ``pipelines/text_to_audio.py``
(preprocess -> forward -> postprocess returning audio plus ``sampling_rate``), with the model-type branches kept here
instead of in a generic layer.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tts_app.request import SynthesisParams

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelFacts:
    """Per-family facts the engine needs (memory estimation, scheduling, front end).

    Attributes:
        family: "vibevoice" | "dia" | "csm" | "higgs".
        sampling_rate: Hz of the output audio and of the reference audio the adapter expects.
        num_layers: decoder layers that keep a KV cache (sum over all stacks that keep one, e.g. backbone + depth
            decoder are counted by ``kv_positions_per_step`` instead when they do not persist).
        num_kv_heads: key/value heads per layer.
        head_dim: dimension per head.
        dtype_bytes: bytes per element of the KV cache (4 float32, 2 bfloat16/float16).
        cfg_multiplier: forward rows per user row (2 when classifier-free guidance doubles the batch, else 1).
        frames_per_second: decode steps per second of output audio (codec frame rate).
        text_positions_per_char: sequence positions one text character occupies (tokenizer-dependent estimate).
        reference_positions_per_second: sequence positions one second of reference audio occupies.
        default_max_new_tokens: decode-step cap used when the request does not give one.
        max_segment_chars: default segment length for the text front end.
        supports_pinyin: whether the tokenizer understands pinyin tokens (else overrides become homophones).
        has_cfg, has_top_k: which knobs exist for this family (the UI hides the others).
        num_parameters: total parameter count.
        kv_cache_exact: True when ``use_cache=False`` gives the same tokens as ``use_cache=True`` in this adapter.
    """

    family: str
    sampling_rate: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    cfg_multiplier: int
    frames_per_second: float
    text_positions_per_char: float
    reference_positions_per_second: float
    default_max_new_tokens: int
    max_segment_chars: int
    supports_pinyin: bool = False
    has_cfg: bool = False
    has_top_k: bool = True
    num_parameters: int = 0
    kv_cache_exact: bool = True

    @property
    def kv_bytes_per_position(self) -> int:
        """Bytes of KV cache one sequence position costs for one forward row: 2 (K and V) x layers x KV heads x
        head dim x dtype bytes. Source: the standard decoder-only KV cache layout (e.g. transformers DynamicCache)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class AdapterRow:
    """One row of a batch.

    Attributes:
        text: the segment text, already normalised and rendered for this model by the front end.
        reference_audio: float32 mono waveform, shape ``(num_samples,)``, at ``ModelFacts.sampling_rate``; or None.
        reference_text: transcript of the reference audio, or None.
        seed: this row's seed. Every random draw for the row (sampling, diffusion noise) comes from a generator seeded
            with it, so the row's audio does not depend on its batch-mates.
    """

    text: str
    reference_audio: np.ndarray | None
    reference_text: str | None
    seed: int = 0


class TTSAdapter(abc.ABC):
    """Base class of every model adapter.

    Subclasses set ``family`` and implement ``from_pretrained``, ``preprocess``, ``generate``, ``postprocess`` and
    ``make_tiny_checkpoint``. Rows of a batch are left-padded; ``postprocess`` returns one waveform per row trimmed
    to that row's own length (never padding audio).
    """

    family: ClassVar[str]
    facts: ModelFacts

    @classmethod
    @abc.abstractmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32") -> "TTSAdapter":
        """Load model + processor through transformers' ``from_pretrained(id_or_path)`` (hub id or local folder).

        Raises:
            ModelLoadError: the checkpoint cannot be loaded (message names ``--model DIR`` as the way out when the
                hub is unreachable).
        """

    @classmethod
    @abc.abstractmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Build a tiny random checkpoint of the real architecture (config, tokenizer/processor built in code) and
        ``save_pretrained`` it into ``out_dir``. Returns ``out_dir``."""

    @abc.abstractmethod
    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> Any:
        """Turn rows into model inputs (tensors on the adapter's device), left-padded."""

    @abc.abstractmethod
    def generate(self, inputs: Any, params: SynthesisParams) -> Any:
        """Run the decode loop. Must honour ``params.use_cache`` (same greedy tokens on or off) and
        ``params.greedy`` / sampling knobs / ``params.max_new_tokens``. May raise ``torch.OutOfMemoryError``."""

    @abc.abstractmethod
    def postprocess(self, outputs: Any, inputs: Any) -> list[np.ndarray]:
        """Decode generated tokens to audio: list of float32 arrays ``(num_samples,)`` at ``facts.sampling_rate``,
        one per row, each trimmed to its own length."""

    def synthesize(self, rows: list[AdapterRow], params: SynthesisParams) -> list[np.ndarray]:
        """preprocess -> generate -> postprocess for one batch."""
        inputs = self.preprocess(rows, params)
        outputs = self.generate(inputs, params)
        return self.postprocess(outputs, inputs)

    def max_new_tokens(self, params: SynthesisParams) -> int:
        return params.max_new_tokens if params.max_new_tokens is not None else self.facts.default_max_new_tokens

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """Sequence positions one row occupies at the end of decoding (reference + text + new tokens), used by
        the engine's KV-cache estimate. Families with a different layout override this."""
        f = self.facts
        return int(
            round(reference_s * f.reference_positions_per_second
                  + (text_chars + reference_text_chars) * f.text_positions_per_char)
        ) + max_new_tokens + 8
