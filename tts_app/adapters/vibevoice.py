"""VibeVoice adapter (the default family): Qwen2 LM + acoustic tokenizer (sigma-VAE codec) + semantic encoder +
diffusion head, through transformers' ``VibeVoiceForConditionalGeneration`` / ``VibeVoiceProcessor``.

How VibeVoice speaks (next-token diffusion, arXiv 2508.19205): the LM reads a prompt
``system | Voice input: Speaker 0: <audio_bos> <audio>*N <audio_eos> | Text input: Speaker 0: text |
Speech output: <audio_bos>`` in which the N reference placeholders are replaced by the projected acoustic latents of
the reference audio (one per 3200 samples at 24 kHz = 7.5 frames/s). Each decode step the LM picks one of
{``<audio>`` = "make one more frame", ``<audio_eos>``, ``<eos>``}. On ``<audio>`` the diffusion head turns the LM's
last hidden state into one acoustic latent (DPM-Solver, v-prediction, classifier-free guidance against a second
"negative" LM stream that starts from a lone ``<audio_bos>``), the codec decoder turns it into 3200 samples, and the
next LM input is acoustic-projector(latent) + semantic-connector(semantic-encoder(those samples)).

Why this file runs its own decode loop instead of ``model.generate`` (transformers 5.24.0,
``models/vibevoice/generation_vibevoice.py``, ``VibeVoiceGenerationMixin._sample``):

* ``use_cache=False`` is wrong there. Each step it calls ``prepare_inputs_for_generation(input_ids,
  next_sequence_length=None)`` (so the model is asked to re-read the whole prefix) but then overwrites
  ``model_inputs["inputs_embeds"]`` with only the last step's ``(batch, 1, hidden)`` embedding and drops
  ``input_values``. The LM therefore sees a one-position sequence with no prefix (wrong tokens at batch 1), while the
  attention mask / position ids still describe the full prefix, which crashes at batch > 1 (mask and embeds disagree in
  length). The prefix cannot be rebuilt from ``input_ids`` either: the reference-audio embeddings and every generated
  frame's acoustic+semantic embedding exist only as embeddings, and the mixin keeps only the last one. The negative
  (CFG) stream in ``_step_negative_branch`` has the same defect.
* Rows are coupled: the diffusion noise is one global ``torch.randn(batch, ...)`` draw (``_sample_audio_latent``), the
  negative stream and the streaming codec/semantic conv caches advance for *every* row whenever *any* row makes a
  frame (``_decode_audio_latent`` decodes zeros for the others), and ``encode(sample=True)`` draws the reference
  latent noise from the global RNG. A row's audio then depends on its batch-mates.
* LM tokens are always the argmax, in the original model and in transformers (which ignores ``do_sample``; the
  converted checkpoints set ``do_sample=False``); the only randomness is the diffusion noise. We do the same, whatever
  ``greedy``/``temperature``/``top_k``/``top_p`` say: sampling the continue/stop decision would end speech early.
* A ``guidance_scale`` != 1 also switches on transformers' generic ``UnbatchedClassifierFreeGuidanceLogitsProcessor``
  (``GenerationMixin._get_logits_processor``), which applies CFG to the LM's token logits too (with an extra
  unconditional forward per step over placeholder ids). The original VibeVoice applies CFG only inside the diffusion
  head; so do we.
* Only ``<eos>`` ends a row (upstream's stopping criterion, ``generation_config.eos_token_id``). ``<audio_eos>``
  closes a speech span and the model may open another with ``<audio_bos>``; that restarts the row's CFG negative
  stream (transformers ``_reset_negative_cache_for_audio_start``), and the frames of every span make the row's audio.
  Stopping at the first ``<audio_eos>`` would cut speech the model meant to go on with.

With that LM-logit CFG processor removed, batch 1 and the KV cache on, our loop gives transformers' tokens and audio
exactly at guidance 1.3 over 30+ frames when both get the same noise (tests/integration/test_adapter_vibevoice.py).

Our loop keeps the whole input history as embeddings (no cache) or a ``DynamicCache`` (cache), computes position ids
from the attention mask (left padding), advances streams and conv caches only for the rows that make a frame, and
draws every random number of a row from ``torch.Generator().manual_seed(row.seed)``. Model math (LM, diffusion head,
codec, connectors, noise scheduler) is all transformers'/diffusers' own.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tts_app.adapters.base import AdapterRow, GenerationDefaults, ModelFacts, TTSAdapter
from tts_app.engine.scheduler import max_chars_for_speech_s
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.request import StopReason, SynthesisParams

# Published architecture of vibevoice/VibeVoice-1.5B-hf, for building the full-size model with random weights on a
# GPU benchmark (no download). Sources: the defaults of transformers 5.24.0 ``VibeVoiceConfig`` /
# ``VibeVoiceDiffusionHeadConfig`` / ``VibeVoiceAcousticTokenizerConfig`` (documented as those of
# ``vibevoice/VibeVoice-1.5B-hf``: token ids, diffusion head 4 layers x 1536 / 4608, codec 64-d latents, ratios
# [2,2,4,5,5,8] = hop 3200, semantic encoder 128-d) and the Qwen2.5-1.5B decoder the model card names (28 layers,
# hidden 1536, 12 query / 2 KV heads of 128, MLP 8960, vocab 151936, tied embeddings, rope theta 1e6).
# ``VibeVoiceConfig(**VIBEVOICE_1_5B_CONFIG)`` builds 2,704,021,987 parameters (LM 1,543,714,304; codec 687,392,001;
# semantic encoder 344,613,600; diffusion head 123,279,360), matching the published 2.7B total.
VIBEVOICE_1_5B_CONFIG: dict = {
    "text_config": {
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "max_position_embeddings": 65536,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "audio_config": {
        "model_type": "vibevoice_acoustic_tokenizer",
        "hidden_size": 64,
        "num_filters": 32,
        "downsampling_ratios": [2, 2, 4, 5, 5, 8],
        "depths": [3, 3, 3, 3, 3, 3, 8],
    },
    "semantic_model_config": {
        "model_type": "vibevoice_acoustic_tokenizer_encoder",
        "hidden_size": 128,
        "num_filters": 32,
        "downsampling_ratios": [2, 2, 4, 5, 5, 8],
        "depths": [3, 3, 3, 3, 3, 3, 8],
    },
    "diffusion_head_config": {"num_hidden_layers": 4, "intermediate_size": 4608},
    "pad_token_id": 151643,
    "eos_token_id": 151643,
    "audio_bos_token_id": 151652,
    "audio_eos_token_id": 151653,
    "audio_token_id": 151654,
}

# Prompt layout of VibeVoice's own processor (original microsoft/VibeVoice ``vibevoice_processor.py``:
# ``_process_single`` / ``_create_voice_prompt``; the same text the hf chat template renders). Speakers are numbered
# from 0 in both sections (the original renumbers a script's "Speaker 1..N" to 0..N-1) and voice k is speaker k's.
# One ``{audio}`` placeholder is expanded by ``VibeVoiceProcessor`` to one token per acoustic frame of the reference.
SYSTEM_PROMPT = (" Transform the text provided by various speakers into speech output, utilizing the distinct voice "
                 "of each respective speaker.\n")
VOICE_HEADER = " Voice input:\n"
VOICE_LINE = " Speaker {speaker}:{audio_bos}{audio}{audio_eos}\n"
TEXT_HEADER = " Text input:\n"
TEXT_LINE = " Speaker {speaker}: {text}\n"
OUTPUT_HEADER = " Speech output:\n{audio_bos}"
# Speakers one prompt takes (VibeVoice model card / technical report: "up to 4 distinct speakers").
MAX_SPEAKERS = 4

DEFAULT_CFG_SCALE = 1.3  # VibeVoice demo default (``--cfg_scale 1.3``); used when generation_config has none
DEFAULT_NUM_DIFFUSION_STEPS = 10  # transformers' VibeVoiceGenerationMixin fallback
# Decode-step cap per segment: 80 s of audio at 7.5 frames/s. The converted checkpoints' generation config sets
# max_new_tokens for a whole podcast (40500 = 90 min for 1.5B, transformers convert_vibevoice_to_hf.py); one tts_app
# segment is at most MAX_SEGMENT_CHARS characters (~60 s of slow Mandarin), and the KV-cache estimate (hence the
# batch size) grows with the cap, so the checkpoint's value is capped here.
MAX_NEW_TOKENS_PER_SEGMENT = 600
MAX_SEGMENT_CHARS = 250  # ~15-20 s of speech per segment; the 1.5B model is trained on long context, so this is safe
# Languages of the training data (VibeVoice-1.5B model card: "English and Chinese").
LANGUAGES = ("en", "zh")
_ARGMAX_ONLY = ("VibeVoice always takes the argmax for its language-model tokens (original model and transformers "
                "VibeVoiceGenerationMixin._sample; checkpoint do_sample=False); its only randomness is the "
                "diffusion noise, drawn from the row's seed")

TINY_SHARED_COMPONENT = 0.2
TINY_STOP_MARGIN = 0.12
TINY_CODEC_INIT_RANGE = 0.1

# Sample text used to measure tokens per character of whatever tokenizer the checkpoint ships (Qwen2 BPE for real
# checkpoints, one token per character for tiny ones). Mixed English / Chinese; the larger of the two ratios is used
# so the KV estimate errs high.
_TOKENS_PER_CHAR_SAMPLES = (
    "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun.",
    "今天天气很好，我们一起去公园散步，看看湖边的花开了没有。",
)


@dataclass
class VibeVoiceInputs:
    """Model inputs of one batch (output of ``preprocess``).

    Attributes:
        inputs_embeds: ``(batch_size, prompt_len, hidden_size)`` prompt embeddings with the reference frames in place.
        attention_mask: ``(batch_size, prompt_len)`` int64, 1 = real token, left padding = 0.
        input_ids: ``(batch_size, prompt_len)`` int64 prompt token ids (for inspection).
        seeds: per-row seeds.
    """

    inputs_embeds: object
    attention_mask: object
    input_ids: object
    seeds: list[int]


@dataclass
class VibeVoiceOutputs:
    """Output of ``generate``.

    Attributes:
        token_ids: per row, the generated LM token ids (``<audio>`` per frame, then ``<audio_eos>``/``<eos>`` when the
            row ended by itself; absent when it hit ``max_new_tokens``), int64 ``(num_steps,)``.
        audio_chunks: per row, float32 ``(samples_per_frame,)`` tensors, one per generated frame.
        stop_reasons: per row, why it stopped (``MAX_NEW_TOKENS`` when it was still speaking at the cap).
    """

    token_ids: list = field(default_factory=list)
    audio_chunks: list = field(default_factory=list)
    stop_reasons: list = field(default_factory=list)


class _RowStreamingCache:
    """Per-row state of a streaming causal conv stack (codec decoder or semantic encoder) for a whole batch.

    transformers' ``VibeVoiceAcousticTokenizerConv1dPaddingCache`` holds one ``(batch, channels, left_pad)`` tensor per
    conv layer and advances every row on every call. Here each call runs only the rows that produced a frame (finished
    rows cost nothing and their state is never touched): their slices are gathered into a fresh padding cache, the
    conv stack runs on that sub-batch, and the updated slices are scattered back. Rows not yet run keep zeros, which is
    what the library's lazy initialisation gives a fresh row.
    """

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.layers: dict = {}  # cache_key -> (template cache layer, tensor (batch_size, channels, left_pad))

    def run(self, conv_stack, inputs, rows):
        """Run ``conv_stack(inputs, padding_cache=..., use_cache=True)`` for batch rows ``rows`` (int64 index)."""
        from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
            VibeVoiceAcousticTokenizerConv1dPaddingCache,
        )

        sub_cache = VibeVoiceAcousticTokenizerConv1dPaddingCache()
        for key, (template, full) in self.layers.items():
            layer = copy.copy(template)
            layer.cache = full[rows].clone()
            sub_cache.layers[key] = layer
        outputs = conv_stack(inputs, padding_cache=sub_cache, use_cache=True)
        for key, layer in sub_cache.layers.items():
            if key not in self.layers:
                full = layer.cache.new_zeros((self.batch_size, *layer.cache.shape[1:]))
                self.layers[key] = (layer, full)
            self.layers[key][1][rows] = layer.cache
        return outputs


class _DecoderStream:
    """One LM input stream (the positive prompt stream, or the CFG negative stream) of a batch.

    Holds the attention mask of every position so far (left padding and finished rows are 0) and either a
    ``DynamicCache`` (``use_cache=True``: each forward reads only the new positions) or the whole embedding history
    (``use_cache=False``: each forward re-reads every position). Position ids come from the mask
    (``cumsum(mask) - 1``), so a row's positions do not depend on how much padding its batch-mates forced on it.
    """

    def __init__(self, language_model, inputs_embeds, attention_mask, use_cache: bool):
        from transformers import DynamicCache

        self.language_model = language_model
        self.use_cache = use_cache
        self.cache = DynamicCache(config=language_model.config) if use_cache else None
        self.history = inputs_embeds[:, :0]  # positions already run (kept only without cache)
        self.pending = inputs_embeds  # positions not yet run
        self.attention_mask = attention_mask

    def append(self, inputs_embeds, active):
        """Queue one position ``(batch_size, 1, hidden)``; ``active`` (bool ``(batch_size,)``) rows attend to it."""
        import torch

        self.pending = torch.cat([self.pending, inputs_embeds], dim=1)
        self.attention_mask = torch.cat([self.attention_mask, active.to(self.attention_mask.dtype)[:, None]], dim=1)

    def forward(self):
        """Run the queued positions; returns the last position's hidden state ``(batch_size, hidden)``."""
        import torch

        position_ids = (self.attention_mask.cumsum(-1) - 1).clamp(min=0)
        if self.use_cache:
            num_new = self.pending.shape[1]
            outputs = self.language_model(inputs_embeds=self.pending, attention_mask=self.attention_mask,
                                          position_ids=position_ids[:, -num_new:], cache=self.cache, use_cache=True)
        else:
            self.history = torch.cat([self.history, self.pending], dim=1)
            outputs = self.language_model(inputs_embeds=self.history, attention_mask=self.attention_mask,
                                          position_ids=position_ids, use_cache=False)
        self.pending = self.pending[:, :0]
        return outputs.last_hidden_state[:, -1]


class _NegativeStream:
    """The CFG negative (unconditional) stream of a batch: per row, what transformers' VibeVoice negative branch
    sees at batch 1 (``VibeVoiceGenerationMixin._step_negative_branch`` / ``_reset_negative_cache_for_audio_start``).

    A row reads one position per frame it makes, at that step: the positive stream's input of the step (a lone
    ``<audio_bos>`` at step 0). When the row says ``<audio_bos>`` (a new speech span) everything it read before is
    dropped, so its next frame is conditioned on a fresh stream starting at position 0. A fresh row is dropped the
    same way on its first frame.

    Rows that make no frame at a step still get a position (the batch shares one forward), masked out for them,
    except for a row with nothing visible yet, which gets a visible placeholder (a fully masked attention row gives
    NaN) that its first real read then drops. The drop is applied lazily, at the row's next read, for the same
    reason. A row's frames therefore never depend on its batch-mates.
    """

    def __init__(self, language_model, empty_embeds, use_cache: bool):
        import torch

        batch_size = empty_embeds.shape[0]
        mask = torch.zeros((batch_size, 0), dtype=torch.long, device=empty_embeds.device)
        self.stream = _DecoderStream(language_model, empty_embeds, mask, use_cache)
        self.drop_history = torch.ones(batch_size, dtype=torch.bool, device=empty_embeds.device)

    def reset(self, rows) -> None:
        """Rows (bool ``(batch_size,)``) that open a new speech span: their next frame sees a fresh stream."""
        self.drop_history |= rows

    def forward(self, step_inputs, reading):
        """Rows ``reading`` (bool ``(batch_size,)``) read ``step_inputs`` ``(batch_size, 1, hidden)``; returns the
        hidden state of the new position ``(batch_size, hidden)`` (meaningful for the reading rows only)."""
        stream = self.stream
        drop = reading & self.drop_history
        if bool(drop.any()):
            stream.attention_mask = stream.attention_mask.masked_fill(drop[:, None], 0)
        self.drop_history &= ~reading
        nothing_visible = stream.attention_mask.sum(dim=-1) == 0
        stream.append(step_inputs, reading | nothing_visible)
        return stream.forward()


class VibeVoiceAdapter(TTSAdapter):
    """Adapter for VibeVoice checkpoints (``model_type == "vibevoice"``, e.g. ``vibevoice/VibeVoice-1.5B-hf``).

    Reference text is not used (VibeVoice clones from the reference audio alone). Rows without reference audio get
    the prompt without its "Voice input" section. Dialogues of up to 4 speakers run as dialogue rows
    (``ModelFacts.max_dialogue_speakers``): each row's prompt holds every speaker's voice, numbered as in the whole
    script, and a run of consecutive turns, as VibeVoice's processor builds a script's prompt.
    """

    family = "vibevoice"
    display_name = "VibeVoice"
    # Original releases (microsoft/VibeVoice format: decoder_config / acoustic_tokenizer_config) -> their transformers
    # conversions (transformers convert_vibevoice_to_hf.py; model_doc/vibevoice.md names the 7B one).
    original_format_repos = {
        "microsoft/VibeVoice-1.5B": "vibevoice/VibeVoice-1.5B-hf",
        "vibevoice/VibeVoice-1.5B": "vibevoice/VibeVoice-1.5B-hf",
        "aoi-ot/VibeVoice-Large": "bezzam/VibeVoice-7B-hf",
        "vibevoice/VibeVoice-7B": "bezzam/VibeVoice-7B-hf",
    }

    @classmethod
    def original_format_hint(cls, config) -> str | None:
        """The original format keeps the LM under ``decoder_config`` and the codec under
        ``acoustic_tokenizer_config`` (renamed ``text_config`` / ``audio_config`` by the conversion)."""
        if config.get("model_type") == "vibevoice" and "decoder_config" in config and "text_config" not in config:
            return "vibevoice/VibeVoice-1.5B-hf (or bezzam/VibeVoice-7B-hf for the 7B model)"
        return None

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32"
                        ) -> "VibeVoiceAdapter":
        """Load with ``VibeVoiceForConditionalGeneration.from_pretrained(id_or_path)`` and
        ``AutoProcessor.from_pretrained(id_or_path)`` (hub id or local folder alike; ``TTSAdapter._load_pretrained``).

        Args:
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32", "bfloat16" or "float16".

        Raises:
            ModelLoadError: unknown dtype, or the checkpoint cannot be read / is not a VibeVoice checkpoint.
        """
        from transformers import VibeVoiceForConditionalGeneration

        model, processor = cls._load_pretrained(VibeVoiceForConditionalGeneration, id_or_path, device, dtype)
        processor.tokenizer.padding_side = "left"
        return cls(model, processor, device=device, dtype=dtype)

    def _measure_facts(self) -> ModelFacts:
        config = self.model.config
        text_config = config.text_config
        feature_extractor = self.processor.feature_extractor
        hop = int(config.audio_config.hop_length)
        tokenizer = self.processor.tokenizer
        tokens_per_char = max(len(tokenizer(s, add_special_tokens=False)["input_ids"]) / len(s)
                              for s in _TOKENS_PER_CHAR_SAMPLES)
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
        generation_config = self.model.generation_config
        defaults = GenerationDefaults.from_generation_config(
            generation_config,
            family_defaults={"cfg_scale": (DEFAULT_CFG_SCALE, "VibeVoice demo default (--cfg_scale 1.3)"),
                             "max_new_tokens": (MAX_NEW_TOKENS_PER_SEGMENT,
                                                "tts_app per-segment cap (80 s at 7.5 frames/s)")},
            absent={"greedy": _ARGMAX_ONLY, "temperature": _ARGMAX_ONLY, "top_p": _ARGMAX_ONLY,
                    "top_k": _ARGMAX_ONLY})
        if defaults.max_new_tokens > MAX_NEW_TOKENS_PER_SEGMENT:
            defaults = defaults.with_value(
                "max_new_tokens", MAX_NEW_TOKENS_PER_SEGMENT,
                f"{defaults.sources['max_new_tokens']}, capped to {MAX_NEW_TOKENS_PER_SEGMENT} per segment "
                "(80 s at 7.5 frames/s; the checkpoint's value covers a whole podcast)")
        # The checkpoint's noise scheduler (diffusers class + config named in its generation config), built once:
        # importing diffusers takes seconds.
        self._noise_scheduler = self.model._build_default_noise_scheduler(generation_config)
        self._num_diffusion_steps = int(getattr(generation_config, "num_diffusion_steps", None)
                                        or DEFAULT_NUM_DIFFUSION_STEPS)
        # Fixed prompt positions besides the text and the reference frames (system prompt, headers, speaker tags),
        # for the largest prompt: MAX_SPEAKERS voice lines (a dialogue row carries every speaker's voice).
        self._prompt_overhead = len(tokenizer(self._build_prompt([(0, "")], [(k, 0) for k in range(MAX_SPEAKERS)]),
                                              add_special_tokens=False)["input_ids"])
        frames_per_second = feature_extractor.sampling_rate / hop
        return self._model_facts(
            sampling_rate=int(feature_extractor.sampling_rate),
            num_layers=int(text_config.num_hidden_layers),
            num_kv_heads=int(text_config.num_key_value_heads),
            head_dim=int(head_dim),
            cfg_multiplier=2,
            frames_per_second=frames_per_second,
            text_positions_per_char=tokens_per_char,
            reference_positions_per_second=feature_extractor.sampling_rate / hop,
            max_segment_chars=min(MAX_SEGMENT_CHARS, max_chars_for_speech_s(
                defaults.max_new_tokens / frames_per_second, LANGUAGES)),
            generation_defaults=defaults,
            languages=LANGUAGES,
            max_dialogue_speakers=MAX_SPEAKERS,
        )

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """KV positions per forward row, such that ``kv_bytes_per_position x positions x cfg_multiplier`` is the
        row's whole KV cache.

        A row keeps two caches of the same LM: the prompt stream (prompt + reference frames + new tokens) and the CFG
        negative stream (1 + new tokens; it never sees the prompt). Their sum is split over ``cfg_multiplier = 2``,
        rounded up. The reference text is not part of VibeVoice's prompt. The fixed part counts the largest voice
        section (4 speakers); a dialogue row's per-turn ``Speaker k:`` prefixes (~4 positions each) ride on the
        estimator's measured activation margin.
        """
        f = self.facts
        prompt = (self._prompt_overhead + math.ceil(reference_s * f.reference_positions_per_second)
                  + math.ceil(text_chars * f.text_positions_per_char))
        positive = prompt + max_new_tokens
        negative = 1 + max_new_tokens
        return math.ceil((positive + negative) / f.cfg_multiplier)

    # ------------------------------------------------------------------ tiny checkpoint

    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a tiny random VibeVoice (real architecture, every sub-model shrunk) plus its processor.

        Qwen2 LM: 2 layers, hidden 32, 4 query / 2 KV heads of 8. Codec and semantic encoder: the real downsampling
        ratios (hop 3200 samples = 7.5 frames/s at 24 kHz) with 2 base filters and one block per stage. Diffusion
        head: 1 layer. Tokenizer: one token per character (``build_char_tokenizer``) plus the Qwen2 special tokens
        VibeVoice uses. Same seed -> identical weights. Returns ``out_dir``.
        """
        import torch
        from transformers import (VibeVoiceAcousticTokenizerFeatureExtractor, VibeVoiceConfig,
                                  VibeVoiceForConditionalGeneration, VibeVoiceProcessor)

        from tts_app.adapters.tiny_vocab import build_char_tokenizer

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        specials = ["<unk>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>"]
        tokenizer = build_char_tokenizer(specials, unk_token="<unk>", pad_token="<|endoftext|>",
                                         eos_token="<|endoftext|>", padding_side="left")
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
        # initializer_range / layer_scale_init_value: the codec's defaults (0.01, 1e-6) make a random decoder output
        # ~1e-9; these give an audible (if meaningless) waveform.
        codec = {"num_filters": 2, "downsampling_ratios": [2, 2, 4, 5, 5, 8], "depths": [1] * 7,
                 "initializer_range": TINY_CODEC_INIT_RANGE, "layer_scale_init_value": 1.0}
        config = VibeVoiceConfig(
            text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": 32,
                         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 4096,
                         "tie_word_embeddings": True},
            audio_config={"model_type": "vibevoice_acoustic_tokenizer", "hidden_size": 8, **codec},
            semantic_model_config={"model_type": "vibevoice_acoustic_tokenizer_encoder", "hidden_size": 8, **codec},
            diffusion_head_config={"num_hidden_layers": 1, "intermediate_size": 64, "frequency_embedding_size": 32},
            pad_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
            audio_bos_token_id=ids["<|vision_start|>"], audio_eos_token_id=ids["<|vision_end|>"],
            audio_token_id=ids["<|vision_pad|>"],
        )
        torch.manual_seed(seed)
        model = VibeVoiceForConditionalGeneration(config).eval()
        # A random LM picks among <audio> / <audio_bos> / <audio_eos> / <eos> arbitrarily (mostly: stops at once).
        # Give every input embedding (text tokens and both frame connectors) a shared component on feature 0 and give
        # the other tokens a slightly smaller one, so the tied LM head leans towards <audio> with a margin of the same
        # size as the step-to-step variation: rows then speak for a few to a few dozen frames and stop at different
        # steps, like a trained model. Values chosen by a scan on seed 0 (TINY_SHARED_COMPONENT, TINY_STOP_MARGIN).
        with torch.no_grad():
            embeddings = model.model.language_model.embed_tokens.weight
            embeddings[:, 0] = TINY_SHARED_COMPONENT
            embeddings[config.eos_token_id, 0] -= TINY_STOP_MARGIN
            embeddings[config.audio_eos_token_id, 0] -= TINY_STOP_MARGIN
            # <audio_bos> (open a new speech span) is the <audio> embedding minus the same margin: with tied weights
            # a random row would win by self-similarity after the prompt's own <audio_bos> and the model would open
            # spans forever instead of speaking.
            embeddings[config.audio_bos_token_id] = embeddings[config.audio_token_id]
            embeddings[config.audio_bos_token_id, 0] -= TINY_STOP_MARGIN
            model.model.multi_modal_projector.linear_2.bias[0] += TINY_SHARED_COMPONENT
            model.model.semantic_connector.linear_2.bias[0] += TINY_SHARED_COMPONENT
        model.generation_config.noise_scheduler_class = "DPMSolverMultistepScheduler"
        model.generation_config.noise_scheduler_config = {"beta_schedule": "squaredcos_cap_v2",
                                                          "prediction_type": "v_prediction"}
        model.generation_config.num_diffusion_steps = 4
        model.generation_config.guidance_scale = DEFAULT_CFG_SCALE
        feature_extractor = VibeVoiceAcousticTokenizerFeatureExtractor(
            sampling_rate=24000, pad_to_multiple_of=config.audio_config.hop_length)
        processor = VibeVoiceProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer)
        model.save_pretrained(out_dir, safe_serialization=True)
        processor.save_pretrained(out_dir)
        return out_dir

    # ------------------------------------------------------------------ batch pipeline

    def _build_prompt(self, turns: list[tuple[int, str]], voices: list[tuple[int, int]]) -> str:
        """VibeVoice's prompt text (see ``SYSTEM_PROMPT``): the voice section holds one line per ``(speaker,
        placeholders)`` of ``voices`` (placeholders 1 = an audio placeholder the processor expands to the reference's
        frame count, 0 = none, for length measurements), omitted when ``voices`` is empty; the text section one line
        per ``(speaker, text)`` of ``turns``."""
        p = self.processor
        voice = ""
        if voices:
            voice = VOICE_HEADER + "".join(
                VOICE_LINE.format(speaker=k, audio_bos=p.audio_bos_token, audio=p.audio_token * n,
                                  audio_eos=p.audio_eos_token) for k, n in voices)
        text = TEXT_HEADER + "".join(TEXT_LINE.format(speaker=k, text=t) for k, t in turns)
        return SYSTEM_PROMPT + voice + text + OUTPUT_HEADER.format(audio_bos=p.audio_bos_token)

    def _prompt(self, text: str, num_frames: int | None) -> str:
        """Prompt text of a single-voice row (speaker 0); ``num_frames=None`` = no reference audio, else one audio
        placeholder (the processor expands it to the frame count)."""
        return self._build_prompt([(0, text)], [] if num_frames is None else [(0, int(num_frames > 0))])

    def _row_prompt(self, row: AdapterRow) -> tuple[str, list[np.ndarray]]:
        """(prompt text, reference clips in placeholder order) of one row. A dialogue row (``row.turns``) puts every
        speaker's voice in the voice section (speaker k = ``row.voices[k]``, a voice without audio has no line) and
        its turns in the text section, as VibeVoice's processor does for a script; any other row is speaker 0."""
        if row.is_dialogue:
            if len(row.voices) > MAX_SPEAKERS:
                raise InputError(f"VibeVoice takes at most {MAX_SPEAKERS} speakers in one prompt; this dialogue has "
                                 f"{len(row.voices)}")
            voiced = [(k, v.reference_audio) for k, v in enumerate(row.voices) if v.reference_audio is not None]
            turns = [(t.speaker, t.text.strip()) for t in row.turns]
            return self._build_prompt(turns, [(k, 1) for k, _ in voiced]), [a for _, a in voiced]
        prompt = self._prompt(row.text.strip(), None if row.reference_audio is None else 1)
        return prompt, [] if row.reference_audio is None else [row.reference_audio]

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> VibeVoiceInputs:
        """Tokenise the rows (left-padded) and put each row's reference frames into its prompt embeddings.

        Each reference clip (float32 ``(num_samples,)`` at ``facts.sampling_rate``) is encoded on its own, with the
        codec's sigma-VAE noise drawn from a generator seeded with ``row.seed`` (a dialogue row's clips in voice
        order, one after the other from that generator). A dialogue row (``row.turns``) is VibeVoice's
        multi-speaker prompt: every voice in the voice section, its turns as ``Speaker k:`` lines (``_row_prompt``).

        Raises:
            InputError: no rows, a row's text is empty, a dialogue row with more than 4 speakers.
            ReferenceAudioError: a reference is not a finite 1-D array with at least one sample.
        """
        import torch

        if not rows:
            raise InputError("preprocess got no rows; pass at least one AdapterRow")
        prompts, audios, row_audios = [], [], []
        for i, row in enumerate(rows):
            if not row.text or not row.text.strip() or any(not t.text.strip() for t in row.turns):
                raise InputError(f"row {i}: text is empty; give the segment some text to speak")
            prompt, clips = self._row_prompt(row)
            for clip in clips:
                ref = np.asarray(clip, dtype=np.float32)
                if ref.ndim != 1 or ref.size == 0 or not np.isfinite(ref).all():
                    raise ReferenceAudioError(
                        f"row {i}: reference audio must be a finite mono array (num_samples,) with samples; got shape "
                        f"{ref.shape}. Clean it with `python -m tts_app reference FILE` first.")
                audios.append(ref)
            prompts.append(prompt)
            row_audios.append(len(clips))
        kwargs = {"padding": True, "return_tensors": "pt"}
        if audios:
            kwargs.update(audio=audios, sampling_rate=self.facts.sampling_rate)
        batch = self.processor(text=prompts, **kwargs)
        input_ids = batch["input_ids"].to(self.device)
        attention_mask = batch["attention_mask"].to(self.device)
        lm = self.model.model
        with torch.inference_mode():
            inputs_embeds = lm.get_input_embeddings()(input_ids)
            audio_index = 0
            multiple = self.processor.feature_extractor.pad_to_multiple_of
            for i, row in enumerate(rows):
                if not row_audios[i]:
                    continue
                row_frames = []
                with torch.random.fork_rng(devices=self._rng_devices()):
                    torch.manual_seed(row.seed)
                    for _ in range(row_audios[i]):
                        num_samples = int(batch["padding_mask"][audio_index].sum())
                        padded = math.ceil(num_samples / multiple) * multiple
                        values = batch["input_values"][audio_index:audio_index + 1, :, :padded].to(self.device,
                                                                                                    lm.dtype)
                        mask = batch["padding_mask"][audio_index:audio_index + 1, :padded].to(self.device)
                        row_frames.append(lm.get_audio_features(values, mask, sample=True).pooler_output)
                        audio_index += 1
                frames = torch.cat(row_frames, dim=0)  # (num_frames of all the row's clips, hidden), prompt order
                placeholder = input_ids[i] == self.model.config.audio_token_id
                inputs_embeds[i, placeholder] = frames.to(inputs_embeds.dtype)
        return VibeVoiceInputs(inputs_embeds=inputs_embeds, attention_mask=attention_mask, input_ids=input_ids,
                               seeds=[int(row.seed) for row in rows])

    def _rng_devices(self) -> list[int]:
        """CUDA device indices whose RNG state ``fork_rng`` must save and restore (none on CPU)."""
        import torch

        device = torch.device(self.device)
        if device.type != "cuda":
            return []
        return [device.index if device.index is not None else torch.cuda.current_device()]

    def _select_tokens(self, hidden, allowed):
        """Next token per row ``(batch,)`` int64: the argmax of the LM head restricted to ``allowed``, always (as the
        original model and transformers do; sampling the stop decision would end speech early)."""
        import torch

        logits = self.model.lm_head(hidden).float()  # (batch, vocab)
        scores = torch.full_like(logits, float("-inf"))
        scores[:, allowed] = logits[:, allowed]
        return scores.argmax(dim=-1)

    def _sample_latents(self, positive, negative, cfg_scale: float, generators, scheduler):
        """One acoustic latent per row ``(n, latent_size)`` by DPM-Solver with classifier-free guidance; the starting
        noise of row i comes from ``generators[i]``. Follows ``VibeVoiceGenerationMixin._sample_audio_latent``."""
        import torch

        head = self.model.model.diffusion_head
        latent_size = self.model.config.audio_config.hidden_size
        scheduler.set_timesteps(num_inference_steps=self._num_diffusion_steps)
        noise = torch.stack([torch.randn(latent_size, generator=g, device=positive.device) for g in generators])
        latent = noise.to(positive.dtype)
        condition = torch.cat([positive, negative], dim=0)
        for timestep in scheduler.timesteps:
            both = torch.cat([latent, latent], dim=0)
            eps = head(both, timestep.repeat(both.shape[0]).to(both), condition=condition)
            cond_eps, uncond_eps = eps.chunk(2, dim=0)
            guided = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
            latent = scheduler.step(guided, timestep, latent).prev_sample
        return latent

    def generate(self, inputs: VibeVoiceInputs, params: SynthesisParams) -> VibeVoiceOutputs:
        """Decode until every row says ``<eos>`` or ``max_new_tokens`` tokens are made.

        Each step the LM picks, by argmax over {``<audio>``, ``<audio_bos>``, ``<audio_eos>``, ``<eos>``} (as
        transformers' ``VibeVoiceTokenConstraintProcessor``), what the row does: ``<audio>`` makes one frame,
        ``<audio_eos>`` closes the speech span and ``<audio_bos>`` opens a new one (its CFG negative stream starts
        afresh), ``<eos>`` ends the row. ``greedy``, ``temperature``, ``top_k`` and ``top_p`` do not apply; the
        diffusion noise comes from the row's seed. Honours ``cfg_scale`` (guidance of the diffusion head; default
        from the checkpoint's generation config, else 1.3), ``max_new_tokens`` and ``use_cache`` (same tokens on or
        off). May raise ``torch.OutOfMemoryError``.
        """
        import torch

        from tts_app.adapters.sampling import RowSampler

        model, config = self.model, self.model.config
        params = self.resolve(params)
        batch_size = inputs.inputs_embeds.shape[0]
        max_new_tokens = params.max_new_tokens
        device = inputs.inputs_embeds.device
        # One random stream per row for its diffusion noise, in decode order.
        generators = RowSampler(inputs.seeds).generators(device)
        allowed = torch.tensor([config.audio_token_id, config.audio_bos_token_id, config.audio_eos_token_id,
                                config.eos_token_id], device=device)
        scheduler = copy.deepcopy(self._noise_scheduler)
        language_model = model.model.language_model
        embed = model.model.get_input_embeddings()
        hop = int(config.audio_config.hop_length)
        outputs = VibeVoiceOutputs(token_ids=[[] for _ in range(batch_size)],
                                   audio_chunks=[[] for _ in range(batch_size)])
        with torch.inference_mode():
            positive = _DecoderStream(language_model, inputs.inputs_embeds, inputs.attention_mask, params.use_cache)
            negative = _NegativeStream(language_model, inputs.inputs_embeds[:, :0], params.use_cache)
            decoder_cache = _RowStreamingCache(batch_size)
            semantic_cache = _RowStreamingCache(batch_size)
            finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
            # What the negative stream reads when a row makes a frame this step: the positive stream's input of the
            # step (upstream passes the same embeddings to both), and at step 0 a lone <audio_bos>.
            step_inputs = embed(torch.full((batch_size, 1), config.audio_bos_token_id, device=device))
            hidden = positive.forward()  # prefill: (batch, hidden)
            for step in range(max_new_tokens):
                next_tokens = self._select_tokens(hidden, allowed)
                live = ~finished
                for i in live.nonzero().flatten().tolist():
                    outputs.token_ids[i].append(int(next_tokens[i]))
                negative.reset(live & (next_tokens == config.audio_bos_token_id))
                making = live & (next_tokens == config.audio_token_id)
                next_embeds = embed(next_tokens)[:, None, :]
                if making.any():
                    rows = making.nonzero().flatten()
                    negative_hidden = negative.forward(step_inputs, making)
                    latent = self._sample_latents(hidden[rows], negative_hidden[rows], params.cfg_scale,
                                                  [generators[i] for i in rows.tolist()], scheduler)  # (n, latent)
                    scaled = latent / model.model.latent_scaling_factor - model.model.latent_bias_factor
                    audio = decoder_cache.run(model.model.audio_tower.decode, scaled[:, None, :], rows).audio
                    semantic = semantic_cache.run(model.model.semantic_tokenizer_encoder, audio, rows).latents
                    frame_embeds = (model.model.multi_modal_projector(latent[:, None, :])
                                    + model.model.semantic_connector(semantic))  # (n, 1, hidden)
                    for j, i in enumerate(rows.tolist()):
                        outputs.audio_chunks[i].append(audio[j, 0, :hop].float())
                    next_embeds[rows] = frame_embeds.to(next_embeds.dtype)
                finished = finished | (live & (next_tokens == config.eos_token_id))
                if bool(finished.all()) or step + 1 == max_new_tokens:
                    break
                positive.append(next_embeds, ~finished)
                step_inputs = next_embeds
                hidden = positive.forward()
        outputs.token_ids = [torch.tensor(t, dtype=torch.long) for t in outputs.token_ids]
        outputs.stop_reasons = [StopReason.END_OF_SPEECH if done else StopReason.MAX_NEW_TOKENS
                                for done in finished.tolist()]
        return outputs

    def stop_reasons(self, outputs: VibeVoiceOutputs, inputs: VibeVoiceInputs) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row still making frames at the cap, else ``END_OF_SPEECH``."""
        return list(outputs.stop_reasons)

    def postprocess(self, outputs: VibeVoiceOutputs, inputs: VibeVoiceInputs) -> list[np.ndarray]:
        """One float32 waveform ``(num_frames * 3200,)`` per row at ``facts.sampling_rate``, only that row's frames
        (empty when the row ended before making a frame)."""
        import torch

        return [torch.cat(chunks).cpu().numpy().astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)
                for chunks in outputs.audio_chunks]
