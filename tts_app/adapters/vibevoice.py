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

Our loop keeps the whole input history as embeddings (no cache) or a KV pool (cache: ``tts_app/adapters/kv_pool.py``,
each row in its own slot of memory allocated once), computes position ids
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

from tts_app.adapters.base import (AdapterRow, DecodeBatch, GenerationDefaults, ModelFacts, PrefixCache, RowStep,
                                   TTSAdapter)
from tts_app.adapters.decode_stream import DecoderStream, pad_left
from tts_app.adapters.kv_pool import PooledStream, make_stream
from tts_app.speaking_rate import max_chars_for_speech_s
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.frontend.messages import Notice, register
from tts_app.request import StopReason, SynthesisParams

# VibeVoice's refusals of a request, in English and Chinese (``tts_app.frontend.messages``).
VIBEVOICE_EN = {
    "vv_speakers": "VibeVoice takes at most {max_speakers} speakers in one prompt; this dialogue has {num_speakers}",
}
VIBEVOICE_ZH = {
    "vv_speakers": "VibeVoice 一个提示最多 {max_speakers} 个说话人；这段对话有 {num_speakers} 个",
}
register(__name__, VIBEVOICE_EN, VIBEVOICE_ZH)

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


def voice_digest(reference: np.ndarray) -> bytes:
    """SHA-256 of a reference clip's float32 samples: identifies a voice (prefix-cache key, noise seed)."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(reference, dtype=np.float32).tobytes()).digest()


def voice_seed(reference: np.ndarray) -> int:
    """Seed of a reference clip's sigma-VAE encoding noise: from its samples (``voice_digest``), so the same clip
    always gives the same conditioning and rows of one voice can share their prompt prefix."""
    return int.from_bytes(voice_digest(reference)[:8], "little") & (2**63 - 1)


@dataclass
class VibeVoiceInputs:
    """Model inputs of one batch (output of ``preprocess``).

    Attributes:
        inputs_embeds: ``(batch_size, prompt_len, hidden_size)`` prompt embeddings with the reference frames in place.
        attention_mask: ``(batch_size, prompt_len)`` int64, 1 = real token, left padding = 0.
        input_ids: ``(batch_size, prompt_len)`` int64 prompt token ids (for inspection).
        seeds: per-row seeds.
        rows: the ``AdapterRow``s, in order.
    """

    inputs_embeds: object
    attention_mask: object
    input_ids: object
    seeds: list[int]
    rows: list = field(default_factory=list)


@dataclass
class VibeVoiceOutputs:
    """Output of ``generate``.

    Attributes:
        token_ids: per row, the generated LM token ids (``<audio>`` per frame, then ``<audio_eos>``/``<eos>`` when the
            row ended by itself; absent when it hit ``max_new_tokens``), int64 ``(num_steps,)``.
        audio_chunks: per row, float32 numpy ``(samples_per_frame,)`` arrays, one per generated frame.
        stop_reasons: per row, why it stopped (``MAX_NEW_TOKENS`` when it was still speaking at the cap).
    """

    token_ids: list = field(default_factory=list)
    audio_chunks: list = field(default_factory=list)
    stop_reasons: list = field(default_factory=list)


class _RowStreamingCache:
    """Per-row state of a streaming causal conv stack (codec decoder or semantic encoder) for a running batch.

    transformers' ``VibeVoiceAcousticTokenizerConv1dPaddingCache`` holds one ``(batch, channels, left_pad)`` tensor per
    conv layer and advances every row on every call. Here each call runs only the rows that produced a frame (finished
    rows cost nothing and their state is never touched): their slices are gathered into a fresh padding cache, the
    conv stack runs on that sub-batch, and the updated slices are scattered back by ``commit`` once the whole decode
    step has succeeded (so a step that fails leaves the state as it was). Rows not yet run keep zeros, which is what
    the library's lazy initialisation gives a fresh row. Rows join (``add_rows``) and leave (``keep``).
    """

    def __init__(self):
        self.num_rows = 0
        self.layers: dict = {}  # cache_key -> (template cache layer, tensor (num_rows, channels, left_pad))

    def run(self, conv_stack, inputs, rows):
        """Run ``conv_stack(inputs, padding_cache=..., use_cache=True)`` for batch rows ``rows`` (int64 index).
        Returns (outputs, pending state for ``commit``)."""
        from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
            VibeVoiceAcousticTokenizerConv1dPaddingCache,
        )

        sub_cache = VibeVoiceAcousticTokenizerConv1dPaddingCache()
        for key, (template, full) in self.layers.items():
            layer = copy.copy(template)
            layer.cache = full[rows].clone()
            sub_cache.layers[key] = layer
        outputs = conv_stack(inputs, padding_cache=sub_cache, use_cache=True)
        return outputs, (rows, sub_cache)

    def commit(self, pending) -> None:
        """Write back what ``run`` computed (the rows' new conv states)."""
        rows, sub_cache = pending
        for key, layer in sub_cache.layers.items():
            if key not in self.layers:
                full = layer.cache.new_zeros((self.num_rows, *layer.cache.shape[1:]))
                self.layers[key] = (layer, full)
            self.layers[key][1][rows] = layer.cache

    def prepare_add_rows(self, num_new: int) -> dict:
        """The layers with ``num_new`` fresh (zero) rows appended, for ``set_layers`` (nothing changes yet)."""
        import torch

        return {key: (template, torch.cat([full, full.new_zeros((num_new, *full.shape[1:]))]))
                for key, (template, full) in self.layers.items()}

    def set_layers(self, layers: dict, num_rows: int) -> None:
        self.layers = layers
        self.num_rows = num_rows

    def keep(self, rows) -> None:
        """Keep only batch rows ``rows`` (int64 index), in that order."""
        self.layers = {key: (template, full[rows]) for key, (template, full) in self.layers.items()}
        self.num_rows = int(rows.numel())


class _NegativeStream:
    """The CFG negative (unconditional) stream of a running batch: per row, what transformers' VibeVoice negative
    branch sees at batch 1 (``VibeVoiceGenerationMixin._step_negative_branch`` /
    ``_reset_negative_cache_for_audio_start``).

    A row reads one position per frame it makes, at that step: the positive stream's input of the step (a lone
    ``<audio_bos>`` at the row's first step). When the row says ``<audio_bos>`` (a new speech span) everything it read
    before is dropped, so its next frame is conditioned on a fresh stream starting at position 0. A fresh row is
    dropped the same way on its first frame.

    Rows that make no frame at a step still get a position (the batch shares one forward), masked out for them,
    except for a row with nothing visible yet, which gets a visible placeholder (a fully masked attention row gives
    NaN) that its first real read then drops. The drop is applied lazily, at the row's next read, for the same
    reason. A row's frames therefore never depend on its batch-mates.
    """

    def __init__(self, stream: DecoderStream):
        import torch

        self.stream = stream
        self.drop_history = torch.zeros(0, dtype=torch.bool, device=stream.device)

    @staticmethod
    def reset(drop_history, rows):
        """Drop flags after rows (bool ``(num_rows,)``) open a new speech span: their next frame sees a fresh
        stream."""
        return drop_history | rows

    def forward(self, step_inputs, reading, drop_history):
        """Rows ``reading`` (bool ``(num_rows,)``) read ``step_inputs`` ``(num_rows, 1, hidden)``; ``drop_history``:
        rows whose earlier reads are to be dropped at their next read (this step's ``<audio_bos>`` rows included).
        Returns (hidden state of the new position ``(num_rows, hidden)``, meaningful for the reading rows only; the
        rows' drop flags after this read, for the caller to keep once the whole step has succeeded)."""
        stream = self.stream
        drop = reading & drop_history
        if isinstance(stream, PooledStream):  # a row not fed keeps nothing: no placeholder, no host sync
            return stream.forward(step_inputs, reading[:, None], reset=drop), drop_history & ~reading
        if bool(drop.any()):
            stream.attention_mask = stream.attention_mask.masked_fill(drop[:, None], 0)
        nothing_visible = stream.attention_mask.sum(dim=-1) == 0
        hidden = stream.forward(step_inputs, (reading | nothing_visible)[:, None])
        return hidden, drop_history & ~reading


@dataclass
class _Row:
    """One row of a running VibeVoice batch.

    Attributes:
        key: the engine's key for it.
        row: the ``AdapterRow``.
        generator: its diffusion-noise stream (``torch.Generator`` seeded with ``row.seed``).
        max_new_tokens: its own decode-step cap (``TTSAdapter.row_max_new_tokens``: the request's, bounded by a
            checkpoint ``max_length`` less the row's own prompt).
        num_steps: tokens it has chosen so far.
        token_ids: those tokens.
        stop_reason: None while it decodes.
    """

    key: object
    row: AdapterRow
    generator: object
    max_new_tokens: int
    num_steps: int = 0
    token_ids: list = field(default_factory=list)
    stop_reason: StopReason | None = None


class VibeVoiceDecodeBatch(DecodeBatch):
    """A running VibeVoice batch (step interface, ``DecodeBatch``): the positive and CFG-negative LM streams, the
    codec-decoder and semantic-encoder conv states and each row's last hidden state, for rows that join and leave
    at any step. ``VibeVoiceAdapter.generate`` runs one of these with every row from the start and none released
    early (request-level semantics); the engine's continuous batching admits and releases rows between steps.

    Each decode step (one token per live row, ``VibeVoiceAdapter.generate`` describes the choices):

    1. the LM head picks each live row's token from its last hidden state (``_select_tokens``);
    2. rows saying ``<audio>`` make a frame: the negative stream reads the row's step input, the diffusion head turns
       (positive, negative) hidden states into a latent with the row's own noise, the codec decodes it to 3200
       samples and the semantic encoder + connectors make the row's next LM input;
    3. rows saying ``<eos>`` end (``END_OF_SPEECH``), rows at their own cap end (``MAX_NEW_TOKENS``: ``max_new_tokens``,
       or fewer when the checkpoint's ``max_length`` less the row's prompt is lower); the others
       feed their next input to the positive stream, whose forward gives their next hidden state.

    Everything a step changes is committed only after its last forward succeeded; on an exception the streams are
    rolled back and the rows' noise generators restored, so the step can be retried with fewer rows.
    """

    def __init__(self, adapter: "VibeVoiceAdapter", params: SynthesisParams, prefix_cache=None):
        import torch

        super().__init__(params)
        self.adapter = adapter
        model = adapter.model
        self.config = config = model.config
        self.device = torch.device(adapter.device)
        # prefixes are kept as KV caches: none without the KV cache, none when the engine keeps none
        self.prefix_cache = prefix_cache if params.use_cache and prefix_cache is not None \
            and prefix_cache.max_entries > 0 else None
        lm = model.model.language_model
        self.embed = model.model.get_input_embeddings()
        hidden_size = int(config.text_config.hidden_size)
        new = int(params.max_new_tokens or adapter.facts.default_max_new_tokens) + 1  # positions after the prompt
        self.positive = make_stream(adapter, "positive", lm, hidden_size, self.device, model.dtype, params.use_cache,
                                    new_positions=new)
        self.negative = _NegativeStream(make_stream(adapter, "negative", lm, hidden_size, self.device, model.dtype,
                                                    params.use_cache, new_positions=new))
        self.decoder_cache = _RowStreamingCache()
        self.semantic_cache = _RowStreamingCache()
        self.rows: list[_Row] = []
        self.hidden = torch.zeros((0, hidden_size), dtype=model.dtype, device=self.device)  # last positive hidden
        # What the negative stream reads when a row makes a frame: the positive stream's input of the row's last
        # step (upstream passes the same embeddings to both), and before its first step a lone <audio_bos>.
        self.step_inputs = torch.zeros((0, 1, hidden_size), dtype=model.dtype, device=self.device)
        self.allowed = torch.tensor([config.audio_token_id, config.audio_bos_token_id, config.audio_eos_token_id,
                                     config.eos_token_id], device=self.device)
        self.noise_scheduler = copy.deepcopy(adapter._noise_scheduler)
        self.hop = int(config.audio_config.hop_length)

    @property
    def keys(self) -> list:
        return [r.key for r in self.rows]

    def kv_positions(self) -> int:
        """Cache positions the batch holds now, both streams, all rows (padding included)."""
        return self.num_rows * (self.positive.num_cached_positions() + self.negative.stream.num_cached_positions())

    # -- prefill --------------------------------------------------------------------------------------------------
    def prefill(self, rows) -> None:
        """Prefill ``rows`` ((key, ``AdapterRow``)) into the batch (see ``DecodeBatch.prefill``); a row's prompt is
        ``VibeVoiceAdapter.preprocess``'s. With a prefix cache (and the KV cache on), a row whose voice was seen
        before starts from a copy of that voice's prefilled prefix (system prompt + reference section) and only the
        rest of its prompt is prefilled; a new voice's prefix is prefilled once and stored. Raises what
        ``preprocess`` raises, or ``torch.OutOfMemoryError``; nothing joins then."""
        import time

        import torch

        t0 = time.perf_counter()
        keys = [k for k, _ in rows]
        if len(set(keys)) != len(keys) or set(keys) & set(self.keys):
            raise ValueError("prefill got a key already in the batch")
        adapter_rows = [r for _, r in rows]
        with torch.inference_mode():
            if self.prefix_cache is None or all(row.is_dialogue for row in adapter_rows):
                # dialogue rows (several voices in one prompt) share no voice prefix
                inputs = self.adapter.preprocess(adapter_rows, self.params)
                self._join(keys, adapter_rows, inputs)
            else:
                sub, hidden = self._prefill_with_prefixes(adapter_rows)
                self._merge(keys, adapter_rows, sub, hidden)
        self.prefill_s += time.perf_counter() - t0

    def _join(self, keys, adapter_rows, inputs: VibeVoiceInputs) -> None:
        """Run the new rows' prompts in a stream of their own, then merge it into the running batch."""
        lm = self.adapter.model.model.language_model
        sub = DecoderStream(lm, self.positive.hidden_size, self.device, self.positive.dtype, self.params.use_cache)
        hidden = sub.forward(inputs.inputs_embeds, inputs.attention_mask)  # (m, hidden)
        self._merge(keys, adapter_rows, sub, hidden)

    def _prefill_with_prefixes(self, adapter_rows):
        """A stream of the new rows prefilled through the prefix cache: each row's voice prefix comes from the cache
        (or is prefilled once per new voice and stored), then the rest of its prompt runs on top. Returns (stream,
        last hidden ``(m, hidden)``). Per row the stream holds [padding | prefix | padding | rest]; position ids
        follow the mask, so the holes change nothing. A row of a known voice needs neither its reference encoded
        nor its audio processed: only its text section is tokenised."""
        import torch

        adapter = self.adapter
        lm = adapter.model.model.language_model
        row_clips = adapter._check_rows(adapter_rows)
        row_prefix, rests = [], []
        found: dict = {}  # prefix key -> per-layer (keys, values), each (1, kv_heads, P, head_dim)
        to_prefill: dict = {}  # prefix key -> prefix embeddings (P, hidden) of a voice not in the cache
        for row, clips in zip(adapter_rows, row_clips):
            # a single-voice row shares its voice's prefix; a dialogue row (several voices) shares nothing
            ref = clips[0] if clips and not row.is_dialogue else None
            key = None if ref is None else ("vibevoice voice prefix", voice_digest(ref))
            if key is not None and key not in found and key not in to_prefill:
                cached = self.prefix_cache.get(key)
                if cached is not None:
                    found[key] = cached
            if key is not None and (key in found or key in to_prefill):
                rests.append(self.embed(adapter._text_ids(row.text).to(self.device)))
                row_prefix.append(key)
                continue
            tokens = adapter._row_tokens(row, clips)
            full = adapter._row_embeds(tokens, clips)
            ids = tokens["input_ids"][0]
            length = adapter._prefix_length(ref, ids) if ref is not None else 0
            if length and not torch.equal(ids[length:], adapter._text_ids(row.text)):
                length = 0  # the tokenizer merges across the boundary: nothing to share
            if length:
                to_prefill[key] = full[:length]
                full = full[length:]
            rests.append(full)
            row_prefix.append(key if length else None)
        if to_prefill:  # one forward for every new voice of this prefill
            todo = list(to_prefill)
            widths = [to_prefill[k].shape[0] for k in todo]
            width = max(widths)
            stream = DecoderStream(lm, self.positive.hidden_size, self.device, self.positive.dtype, True)
            stream.forward(torch.stack([pad_left(to_prefill[k], width - w, 0) for k, w in zip(todo, widths)]),
                           torch.stack([self._ones(w, width) for w in widths]))
            for j, (key, w) in enumerate(zip(todo, widths)):
                layers = [(layer.keys[j:j + 1, :, width - w:].clone(), layer.values[j:j + 1, :, width - w:].clone())
                          for layer in stream.cache.layers]
                found[key] = layers
                self.prefix_cache.put(key, layers, sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                                                      for k, v in layers))
        sub = DecoderStream(lm, self.positive.hidden_size, self.device, self.positive.dtype, True)
        num_new = len(adapter_rows)
        widths = [0 if key is None else found[key][0][0].shape[2] for key in row_prefix]
        prefix_width = max(widths)
        if prefix_width:  # the rows' prefix caches, left-padded to a common width (zeros where a row has none)
            template = found[next(k for k in row_prefix if k is not None)]
            for index, layer in enumerate(sub.cache.layers):
                k0, v0 = template[index]
                keys = [k0.new_zeros((1, k0.shape[1], prefix_width, k0.shape[3])) if key is None
                        else pad_left(found[key][index][0], prefix_width - w, 2)
                        for key, w in zip(row_prefix, widths)]
                values = [v0.new_zeros((1, v0.shape[1], prefix_width, v0.shape[3])) if key is None
                          else pad_left(found[key][index][1], prefix_width - w, 2)
                          for key, w in zip(row_prefix, widths)]
                layer.update(torch.cat(keys), torch.cat(values))
        sub.attention_mask = torch.stack([self._ones(w, prefix_width) for w in widths]) if prefix_width else \
            sub.attention_mask.new_zeros((num_new, 0))
        sub.history = sub.history.new_zeros((num_new, 0, sub.hidden_size))
        rest_width = max(r.shape[0] for r in rests)
        hidden = sub.forward(torch.stack([pad_left(r, rest_width - r.shape[0], 0) for r in rests]),
                             torch.stack([self._ones(r.shape[0], rest_width) for r in rests]))
        return sub, hidden

    def _ones(self, num_ones: int, width: int):
        """Mask row ``(width,)`` int64: ``width - num_ones`` zeros (left padding), then ``num_ones`` ones."""
        import torch

        return pad_left(torch.ones(num_ones, dtype=torch.long, device=self.device), width - num_ones, 0)

    def _merge(self, keys, adapter_rows, sub: DecoderStream, hidden) -> None:
        """Merge a stream of newly prefilled rows (and their last hidden states ``(m, hidden)``) into the running
        batch. Everything is prepared first and then committed with assignments only, so a failure on the way
        leaves the batch as it was."""
        import torch

        num_new = len(keys)
        # each row's own cap: a checkpoint max_length counts its prompt (the positive stream's real positions)
        caps = [self.adapter.row_max_new_tokens(self.params, int(n), row=i)
                for i, n in enumerate(sub.attention_mask.sum(dim=1).tolist())]
        bos = self.embed(torch.full((num_new, 1), self.config.audio_bos_token_id, device=self.device))
        positive = self.positive.prepare_merge(sub)
        negative = self.negative.stream.prepare_add_empty_rows(num_new)
        drop = torch.cat([self.negative.drop_history, torch.ones(num_new, dtype=torch.bool, device=self.device)])
        decoder = self.decoder_cache.prepare_add_rows(num_new)
        semantic = self.semantic_cache.prepare_add_rows(num_new)
        all_hidden = torch.cat([self.hidden, hidden.to(self.hidden.dtype)])
        step_inputs = torch.cat([self.step_inputs, bos.to(self.step_inputs.dtype)])
        new_rows = [_Row(key=k, row=r, generator=torch.Generator(device=self.device).manual_seed(int(r.seed)),
                         max_new_tokens=cap) for k, r, cap in zip(keys, adapter_rows, caps)]
        self.positive.commit(positive)
        self.negative.stream.commit(negative)
        self.negative.drop_history = drop
        total = len(self.rows) + num_new
        self.decoder_cache.set_layers(decoder, total)
        self.semantic_cache.set_layers(semantic, total)
        self.hidden, self.step_inputs = all_hidden, step_inputs
        self.rows += new_rows

    # -- decode ---------------------------------------------------------------------------------------------------
    def decode_step(self) -> list[RowStep]:
        import torch

        with torch.inference_mode():
            return self._decode_step()

    def _decode_step(self) -> list[RowStep]:
        import torch

        adapter, config, model = self.adapter, self.config, self.adapter.model
        num_rows = len(self.rows)
        live = self._count_step([r.stop_reason is not None for r in self.rows])
        if not live:
            return []
        live_index = torch.tensor(live, device=self.device)
        chosen = adapter._select_tokens(self.hidden[live_index], self.allowed, [self.rows[i] for i in live])
        tokens = torch.full((num_rows,), config.eos_token_id, dtype=torch.long, device=self.device)
        tokens[live_index] = chosen.to(self.device)
        is_live = torch.zeros(num_rows, dtype=torch.bool, device=self.device)
        is_live[live_index] = True
        making = is_live & (tokens == config.audio_token_id)
        ends = is_live & (tokens == config.eos_token_id)
        capped = torch.tensor([r.stop_reason is None and r.num_steps + 1 >= r.max_new_tokens
                               for r in self.rows], device=self.device)
        continuing = is_live & ~ends & ~capped
        drop_history = self.negative.reset(self.negative.drop_history, is_live & (tokens == config.audio_bos_token_id))
        next_embeds = self.embed(tokens)[:, None, :]
        making_rows = making.nonzero().flatten()
        generators = [self.rows[i].generator for i in making_rows.tolist()]
        generator_states = [g.get_state() for g in generators]
        negative_mark, positive_mark = self.negative.stream.checkpoint(), self.positive.checkpoint()
        frames: dict[int, object] = {}
        pending = []
        new_hidden = None
        try:
            if making_rows.numel():
                negative_hidden, drop_history = self.negative.forward(self.step_inputs, making, drop_history)
                latent = adapter._sample_latents(self.hidden[making_rows], negative_hidden[making_rows],
                                                 self.params.cfg_scale, generators, self.noise_scheduler)
                scaled = latent / model.model.latent_scaling_factor - model.model.latent_bias_factor
                decoded, decoder_pending = self.decoder_cache.run(model.model.audio_tower.decode, scaled[:, None, :],
                                                                  making_rows)
                audio = decoded.audio
                encoded, semantic_pending = self.semantic_cache.run(model.model.semantic_tokenizer_encoder, audio,
                                                                    making_rows)
                pending = [(self.decoder_cache, decoder_pending), (self.semantic_cache, semantic_pending)]
                frame_embeds = (model.model.multi_modal_projector(latent[:, None, :])
                                + model.model.semantic_connector(encoded.latents))  # (n, 1, hidden)
                next_embeds[making_rows] = frame_embeds.to(next_embeds.dtype)
                chunks = audio[:, 0, :self.hop].float().cpu().numpy()
                frames = {i: chunks[j] for j, i in enumerate(making_rows.tolist())}
            if bool(continuing.any()):
                new_hidden = self.positive.forward(next_embeds, continuing[:, None])
        except BaseException:
            self.negative.stream.rollback(negative_mark)
            self.positive.rollback(positive_mark)
            for g, state in zip(generators, generator_states):
                g.set_state(state)
            raise
        # commit: assignments and small in-place writes only
        self.negative.drop_history = drop_history
        for cache, state in pending:
            cache.commit(state)
        if new_hidden is not None:
            self.hidden[continuing] = new_hidden[continuing].to(self.hidden.dtype)
            self.step_inputs[continuing] = next_embeds[continuing]
        token_list = tokens.tolist()
        ends_list, capped_list = ends.tolist(), capped.tolist()
        out = []
        for i in live:
            row = self.rows[i]
            row.token_ids.append(token_list[i])
            row.num_steps += 1
            if ends_list[i]:
                row.stop_reason = StopReason.END_OF_SPEECH
            elif capped_list[i]:
                row.stop_reason = StopReason.MAX_NEW_TOKENS
            audio = frames.get(i)
            out.append(RowStep(key=row.key, audio=audio if audio is not None else np.zeros(0, dtype=np.float32),
                               stop_reason=row.stop_reason))
        return out

    # -- release --------------------------------------------------------------------------------------------------
    def release(self, keys) -> None:
        import torch

        gone = set(keys)
        keep = [i for i, r in enumerate(self.rows) if r.key not in gone]
        if len(keep) == len(self.rows):
            return
        with torch.inference_mode():
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.positive.keep_rows(index)
            self.negative.stream.keep_rows(index)
            self.negative.drop_history = self.negative.drop_history[index]
            self.decoder_cache.keep(index)
            self.semantic_cache.keep(index)
            self.hidden = self.hidden[index]
            self.step_inputs = self.step_inputs[index]
        self.rows = [self.rows[i] for i in keep]


class VibeVoiceAdapter(TTSAdapter):
    """Adapter for VibeVoice checkpoints (``model_type == "vibevoice"``, e.g. ``vibevoice/VibeVoice-1.5B-hf``).

    Reference text is not used (VibeVoice clones from the reference audio alone). Rows without reference audio get
    the prompt without its "Voice input" section. Dialogues of up to 4 speakers run as dialogue rows
    (``ModelFacts.max_dialogue_speakers``): each row's prompt holds every speaker's voice, numbered as in the whole
    script, and a run of consecutive turns, as VibeVoice's processor builds a script's prompt.
    """

    family = "vibevoice"
    display_name = "VibeVoice"
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "CFG on the diffusion head only, as Microsoft's original code: transformers' generate also applies CFG to"
        " the LM logits (UnbatchedClassifierFreeGuidanceLogitsProcessor)",
        "a per-segment cap of 600 frames (80 s) keeps KV-cache estimates and batching sane: the converted "
        "config's max_new_tokens 40500 covers a 90-minute podcast",
    )
    supports_decode_steps = True
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
                raise InputError(Notice("vv_speakers", max_speakers=MAX_SPEAKERS, num_speakers=len(row.voices)))
            voiced = [(k, v.reference_audio) for k, v in enumerate(row.voices) if v.reference_audio is not None]
            turns = [(t.speaker, t.text.strip()) for t in row.turns]
            return self._build_prompt(turns, [(k, 1) for k, _ in voiced]), [a for _, a in voiced]
        prompt = self._prompt(row.text.strip(), None if row.reference_audio is None else 1)
        return prompt, [] if row.reference_audio is None else [row.reference_audio]

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> VibeVoiceInputs:
        """Tokenise the rows (left-padded) and put each row's reference frames into its prompt embeddings.

        Each reference clip (float32 ``(num_samples,)`` at ``facts.sampling_rate``) is encoded on its own, with the
        codec's sigma-VAE noise drawn from a generator seeded from the clip's own samples (``voice_seed``): one voice
        always gets the same conditioning, so rows of that voice can share their prompt prefix
        (``VibeVoiceDecodeBatch`` reuses its prefill); the row's seed drives the diffusion noise. A dialogue row
        (``row.turns``) is VibeVoice's multi-speaker prompt: every voice in the voice section, its turns as
        ``Speaker k:`` lines (``_row_prompt``).

        Raises:
            InputError: no rows, a row's text is empty, a dialogue row with more than 4 speakers.
            ReferenceAudioError: a reference is not a finite 1-D array with at least one sample.
        """
        import torch

        row_clips = self._check_rows(rows)
        pad_id = int(self.processor.tokenizer.pad_token_id)
        ids, embeds = [], []
        with torch.inference_mode():
            for row, clips in zip(rows, row_clips):
                tokens = self._row_tokens(row, clips)
                ids.append(tokens["input_ids"][0].to(self.device))
                embeds.append(self._row_embeds(tokens, clips))
            width = max(t.numel() for t in ids)
            input_ids = torch.stack([torch.cat([t.new_full((width - t.numel(),), pad_id), t]) for t in ids])
            attention_mask = torch.stack([torch.cat([t.new_zeros(width - t.numel()), torch.ones_like(t)])
                                          for t in ids])
            inputs_embeds = self.model.model.get_input_embeddings()(input_ids)  # padding: the pad token's embedding
            for i, e in enumerate(embeds):
                inputs_embeds[i, width - e.shape[0]:] = e
        return VibeVoiceInputs(inputs_embeds=inputs_embeds, attention_mask=attention_mask, input_ids=input_ids,
                               seeds=[int(row.seed) for row in rows], rows=list(rows))

    def _check_rows(self, rows: list[AdapterRow]) -> list[list[np.ndarray]]:
        """Each row's reference clips in prompt order (``_row_prompt``), as float32 ``(num_samples,)``, after checking
        the rows.

        Raises:
            InputError: no rows, a row's text is empty, a dialogue row with more than 4 speakers.
            ReferenceAudioError: a reference is not a finite 1-D array with at least one sample.
        """
        if not rows:
            raise InputError("preprocess got no rows; pass at least one AdapterRow")
        row_clips = []
        for i, row in enumerate(rows):
            if not row.text or not row.text.strip() or any(not t.text.strip() for t in row.turns):
                raise InputError(f"row {i}: text is empty; give the segment some text to speak")
            _, clips = self._row_prompt(row)
            checked = []
            for clip in clips:
                ref = np.asarray(clip, dtype=np.float32)
                if ref.ndim != 1 or ref.size == 0 or not np.isfinite(ref).all():
                    raise ReferenceAudioError(
                        f"row {i}: reference audio must be a finite mono array (num_samples,) with samples; got shape "
                        f"{ref.shape}. Clean it with `python -m tts_app reference FILE` first.")
                checked.append(ref)
            row_clips.append(checked)
        return row_clips

    def _row_tokens(self, row: AdapterRow, clips: list[np.ndarray]) -> dict:
        """The processor's output for one row's prompt (``_row_prompt``: ``input_ids`` ``(1, L)`` with one
        ``<audio>`` per reference frame, and the clips' ``input_values`` / ``padding_mask``, one per clip)."""
        prompt, _ = self._row_prompt(row)
        kwargs = {"return_tensors": "pt"}
        if clips:
            kwargs.update(audio=list(clips), sampling_rate=self.facts.sampling_rate)
        return self.processor(text=[prompt], **kwargs)

    def _row_embeds(self, tokens: dict, clips: list[np.ndarray]):
        """Prompt embeddings ``(L, hidden)`` of one row (``_row_tokens``), its clips' frames in place (prompt
        order), each clip encoded with noise seeded by ``voice_seed``."""
        import torch

        lm = self.model.model
        input_ids = tokens["input_ids"][0].to(self.device)
        embeds = lm.get_input_embeddings()(input_ids)
        if not clips:
            return embeds
        multiple = self.processor.feature_extractor.pad_to_multiple_of
        row_frames = []
        for j, clip in enumerate(clips):
            num_samples = int(tokens["padding_mask"][j].sum())
            padded = math.ceil(num_samples / multiple) * multiple
            values = tokens["input_values"][j:j + 1, :, :padded].to(self.device, lm.dtype)
            generator = torch.Generator(device=self.device).manual_seed(voice_seed(clip))
            row_frames.append(self._encode_reference(values, num_samples, generator))
        frames = torch.cat(row_frames, dim=0)  # (num_frames of all the row's clips, hidden)
        embeds[input_ids == self.model.config.audio_token_id] = frames.to(embeds.dtype)
        return embeds

    def _text_ids(self, text: str):
        """Token ids ``(R,)`` of a row's text section (the end of its prompt, after the voice), on the CPU."""
        section = (TEXT_HEADER + TEXT_LINE.format(speaker=0, text=text.strip())
                   + OUTPUT_HEADER.format(audio_bos=self.processor.audio_bos_token))
        return self.processor(text=[section], return_tensors="pt")["input_ids"][0]

    def _prefix_length(self, ref: np.ndarray, input_ids) -> int:
        """Positions of a row's prompt that depend on its voice only (system prompt + the reference section) when
        their tokens are exactly the start of the row's ``input_ids`` ``(L,)``; else 0 (nothing to share)."""
        p = self.processor
        prefix = SYSTEM_PROMPT + VOICE_HEADER + VOICE_LINE.format(speaker=0, audio_bos=p.audio_bos_token,
                                                                  audio=p.audio_token, audio_eos=p.audio_eos_token)
        ids = self.processor(text=[prefix], audio=[ref], sampling_rate=self.facts.sampling_rate,
                             return_tensors="pt")["input_ids"][0]
        n = int(ids.numel())
        if n >= int(input_ids.numel()) or not bool((input_ids[:n].cpu() == ids).all()):
            return 0
        return n

    def _encode_reference(self, values, num_samples: int, generator):
        """Prompt embeddings ``(num_frames, hidden)`` of one reference clip: transformers'
        ``VibeVoiceModel.get_audio_features(values, mask, sample=True)`` (5.24.0), with the sigma-VAE noise of
        ``VibeVoiceAcousticTokenizerModel.encode`` (scale ``vae_std * randn(batch)`` times ``randn_like(latents)``)
        drawn from ``generator`` instead of the process-wide RNG; ``generator=None`` = no noise (``sample=False``).

        Upstream draws that noise from the global torch RNG, which every thread of the process shares: a
        transcription in another thread (transformers' ASR pipeline draws its DataLoader's seed from it) between a
        ``manual_seed`` and the draw gave the same request other audio. The same seed gives the same numbers as
        upstream after ``torch.manual_seed(seed)`` (the same generator algorithm, draws in the same order).

        Args:
            values: float ``(1, 1, padded_samples)`` on the device, the feature extractor's ``input_values`` cut to
                the clip's length rounded up to the codec hop.
            num_samples: the clip's own length (its ``padding_mask`` sum); frames = ceil(num_samples / hop).
            generator: the clip's ``torch.Generator`` (seeded with ``voice_seed``), or None.
        """
        import torch

        lm = self.model.model
        with torch.no_grad():
            latents = lm.audio_tower.encode(values, sample=False).latents  # (1, frames, latent_size)
            if generator is not None:
                draw = {"generator": generator, "device": latents.device, "dtype": latents.dtype}
                noise_std = lm.audio_tower.config.vae_std * torch.randn(latents.shape[0], **draw)
                # empty_like keeps the latents' strides, as randn_like does: the same numbers land on the same frames
                latents = latents + noise_std[:, None, None] * torch.empty_like(latents).normal_(generator=generator)
        features = (latents + lm.latent_bias_factor.to(latents.device)) * lm.latent_scaling_factor.to(latents.device)
        num_frames = math.ceil(num_samples / self.model.config.audio_config.hop_length)
        return lm.multi_modal_projector(features)[0, :num_frames]

    def _select_tokens(self, hidden, allowed, rows):
        """Next token per row ``(n,)`` int64: the argmax of the LM head restricted to ``allowed``, always (as the
        original model and transformers do; sampling the stop decision would end speech early). ``hidden``:
        ``(n, hidden_size)`` last hidden states of the live rows ``rows`` (``_Row``: its ``row``, ``num_steps``)."""
        import torch

        logits = self.model.lm_head(hidden).float()  # (n, vocab)
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

    def start_decode(self, params: SynthesisParams, prefix_cache: PrefixCache | None = None
                     ) -> VibeVoiceDecodeBatch:
        """An empty running batch (step interface, ``VibeVoiceDecodeBatch``) for rows with these knobs; the engine's
        continuous batching prefills rows into it, steps it and releases rows. ``prefix_cache``: where rows of one
        reference voice share that voice's prefilled prompt prefix (with the KV cache on)."""
        return VibeVoiceDecodeBatch(self, self.resolve(params), prefix_cache)

    def generate(self, inputs: VibeVoiceInputs, params: SynthesisParams) -> VibeVoiceOutputs:
        """Decode until every row says ``<eos>`` or ``max_new_tokens`` tokens are made.

        Each step the LM picks, by argmax over {``<audio>``, ``<audio_bos>``, ``<audio_eos>``, ``<eos>``} (as
        transformers' ``VibeVoiceTokenConstraintProcessor``), what the row does: ``<audio>`` makes one frame,
        ``<audio_eos>`` closes the speech span and ``<audio_bos>`` opens a new one (its CFG negative stream starts
        afresh), ``<eos>`` ends the row. ``greedy``, ``temperature``, ``top_k`` and ``top_p`` do not apply; the
        diffusion noise comes from the row's seed. Honours ``cfg_scale`` (guidance of the diffusion head; default
        from the checkpoint's generation config, else 1.3), ``max_new_tokens`` and ``use_cache`` (same tokens on or
        off). Runs the step interface's ``VibeVoiceDecodeBatch`` with every row from the start and no row released
        early (finished rows stay in the forward calls, masked, until the last ends). May raise
        ``torch.OutOfMemoryError``.
        """
        import torch

        batch = VibeVoiceDecodeBatch(self, self.resolve(params))
        num_rows = inputs.inputs_embeds.shape[0]
        rows = inputs.rows or [AdapterRow(text="", reference_audio=None, reference_text=None, seed=seed)
                               for seed in inputs.seeds]
        audio = [[] for _ in range(num_rows)]
        with torch.inference_mode():
            batch._join(list(range(num_rows)), rows, inputs)
            while any(r.stop_reason is None for r in batch.rows):
                for step in batch._decode_step():
                    if step.audio.size:
                        audio[step.key].append(step.audio)
        return VibeVoiceOutputs(token_ids=[torch.tensor(r.token_ids, dtype=torch.long) for r in batch.rows],
                                audio_chunks=audio, stop_reasons=[r.stop_reason for r in batch.rows])

    def stop_reasons(self, outputs: VibeVoiceOutputs, inputs: VibeVoiceInputs) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row still making frames at the cap, else ``END_OF_SPEECH``."""
        return list(outputs.stop_reasons)

    def postprocess(self, outputs: VibeVoiceOutputs, inputs: VibeVoiceInputs) -> list[np.ndarray]:
        """One float32 waveform ``(num_frames * 3200,)`` per row at ``facts.sampling_rate``, only that row's frames
        (empty when the row ended before making a frame)."""
        return [np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)
                for chunks in outputs.audio_chunks]
