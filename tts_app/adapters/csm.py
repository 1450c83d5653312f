"""Sesame CSM (Conversational Speech Model) adapter on transformers' ``CsmForConditionalGeneration`` and
``CsmProcessor``.

CSM = a Llama backbone that reads text tokens and Mimi codec frames and predicts the first codebook of the next
frame, plus a small "depth decoder" that predicts the remaining ``num_codebooks - 1`` codebooks of that frame from the
backbone's last hidden state. The Mimi codec turns reference audio into frames (12.5 Hz for the real checkpoint) and
generated frames back into 24 kHz audio.

Prompt layout per row (the speaker-turn format of the csm-1b chat template; speaker id 0 for both turns, so the
reference turn sets the voice of the target turn)::

    <bos>[0]{reference text}<eos><|AUDIO|><|audio_eos|><bos>[0]{text}<eos>      (with reference audio)
    <bos>[0]{text}<eos>                                                          (without)

``<|AUDIO|>`` is expanded by the processor to one position per codec frame of the reference audio.

Segment context (a request's ``segment_context``; ``AdapterRow.context``): the earlier segments of the request come
as more turns of the same speaker between the reference turn and the target, each with its generated audio
(``<bos>[0]{earlier text}<eos><|AUDIO|><|audio_eos|>``), re-encoded by the codec as every context audio is: the
conversation context of Sesame's generator (``generate(text, speaker, context=[Segment(text, speaker, audio),
...])``, whose README feeds the segments it generated back as context), and of transformers' CSM chat template
(earlier turns with their audio).

Why a decode loop of our own (``generate``) instead of ``model.generate``: transformers' CSM generation is wrong with
``use_cache=False``. In ``CsmGenerationMixin._sample`` (transformers/models/csm/generation_csm.py) the first decode
step replaces the 2-D text prompt by the generated frames (``if input_ids.ndim == 2: input_ids = next_tokens[:, None,
:]``); the prompt then survives only inside the KV cache. With ``use_cache=False`` ``prepare_inputs_for_generation``
(``next_sequence_length=None``) re-feeds the whole ``input_ids``, i.e. only the generated frames: from the second frame
on the backbone no longer sees the text or the reference audio (wrong tokens at batch 1), while ``attention_mask`` kept
growing from the prompt length, so at batch > 1 the 4-D mask no longer matches the query length and SDPA fails with
"output with shape [B, H, q, 1] doesn't match the broadcast shape [B, H, q, L]". In addition the depth decoder's inner
``generate`` ignores the outer ``use_cache`` and its sampling draws come from the global RNG, shared by the batch.
Our loop (``generate`` -> ``_backbone_step`` + ``_depth_decode`` per frame) calls the library's own modules
(backbone, lm_head, depth decoder, codec) and logits warpers, keeps the prompt embeddings, and recomputes the whole
prefix every step when the cache is off; sampling draws come from one ``torch.Generator`` per row seeded with
``AdapterRow.seed``, in upstream's order and shapes: per frame one ``multinomial(probs (1, vocab), 1)`` for the
backbone's codebook 0, then one per depth-decoder codebook, the calls ``_sample`` and the depth decoder's ``generate``
make on the global RNG for a row alone. Output equals the library's ``model.generate`` (cache on, same non-codec ids
suppressed), greedy and, after ``torch.manual_seed(seed)``, sampled at the checkpoint's defaults; the integration
tests check both.

Defaults and cap: sampling knobs and ``max_new_tokens`` come from the checkpoint's generation config
(``ModelFacts.generation_defaults``; Sesame's generator.py values where it sets none: temperature 0.9, top-k 50),
and both decoder levels sample with the same knobs, as Sesame's generator does. The checkpoint caps a segment at
``max_new_tokens`` frames (125 = 10 s at 12.5 frames/s), so a long segment would be cut mid-sentence: the default
segment length is derived from that cap (``max_chars_for_speech_s``: ~105 English characters), and a row still
speaking at the cap reports ``StopReason.MAX_NEW_TOKENS``, which the engine turns into a warning naming the segment.
CSM is trained on English (model card), so Chinese text gets a warning.

KV cache accounting: the backbone cache grows by one position per prompt token and per generated frame; the depth
decoder's cache lives only within one frame (a fresh ``DynamicCache`` of at most ``num_codebooks`` positions per
frame). ``ModelFacts`` describes the backbone (layers, KV heads, head dim), and ``estimate_positions`` adds the depth
decoder's per-frame cache converted into backbone-position equivalents, so ``facts.kv_bytes_per_position x
estimate_positions(...) x cfg_multiplier`` is the analytic peak KV size of one row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tts_app.adapters.base import AdapterRow, GenerationDefaults, ModelFacts, TTSAdapter
from tts_app.speaking_rate import max_chars_for_speech_s
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.request import StopReason, SynthesisParams

SPEAKER_ID = 0
# Cap on generated audio when neither the request nor the checkpoint's generation_config gives one (seconds). Segments
# of MAX_SEGMENT_CHARS characters take ~10 s (English) to ~35 s (Chinese, 4-5 chars/s) of speech.
DEFAULT_MAX_AUDIO_S = 40.0
MAX_SEGMENT_CHARS = 150
# Sampling defaults of the Sesame reference generator (SesameAILabs/csm generator.py: temperature 0.9, top-k 50),
# used when neither the request nor the checkpoint's generation_config gives a value.
DEFAULT_TEMPERATURE = 0.9
DEFAULT_TOP_K = 50
_SESAME_GENERATOR = "Sesame reference generator (SesameAILabs/csm generator.py)"
# sesame/csm-1b model card: "trained primarily on English data; some capacity for non-English languages exists due to
# data contamination in the training data, but it likely won't do well".
LANGUAGES = ("en",)
# Sample sentences for measuring tokens per character of the loaded tokenizer (the larger ratio is used).
_MEASURE_TEXTS = ("The quick brown fox jumps over the lazy dog, then naps in the sun for an hour.",
                  "今天天气很好，我们一起去公园散步，然后在湖边喝茶。")
_MEASURE_REFERENCE_S = 10.0

# Weight init std of the tiny decoders. The library default (0.02) leaves attention scores near zero, i.e. uniform
# attention that ignores positions; 0.2 makes attention position-sensitive, so a wrong position id or mask changes
# the tiny model's tokens and the tests can see it.
INIT_STD = 0.2
TINY_SPECIAL_TOKENS = ["<unk>", "<pad>", "<|begin_of_text|>", "<|end_of_text|>", "<|AUDIO|>", "<|audio_eos|>"]


@dataclass
class CsmInputs:
    """Model inputs of one batch (output of ``CsmAdapter.preprocess``).

    Attributes:
        input_ids: ``(batch_size, prompt_len)`` int64 text token ids, left-padded; ``<|AUDIO|>`` repeated once per
            reference codec frame.
        attention_mask: ``(batch_size, prompt_len)`` int64, 0 on left padding.
        input_values: ``(batch_size, 1, max_samples)`` reference audio in the model dtype, followed by the row's
            segment-context audio (right-padded by the processor; each clip is cut out by ``input_values_cutoffs``
            before encoding), or None.
        input_values_cutoffs: ``(batch_size, max_clips)`` int64 end sample of each of a row's clips, -1 past its
            last (a row without any: all -1); or None.
        seeds: one seed per row.
    """

    input_ids: "torch.Tensor"
    attention_mask: "torch.Tensor"
    input_values: "torch.Tensor | None"
    input_values_cutoffs: "torch.Tensor | None"
    seeds: list[int]


@dataclass
class CsmOutputs:
    """Generated codec frames (output of ``CsmAdapter.generate``).

    Attributes:
        codes: ``(batch_size, num_frames, num_codebooks)`` int64. After a row's end-of-audio frame (all codebooks
            equal to ``config.codebook_eos_token_id``) the row holds that frame, then ``codebook_pad_token_id``.
        stop_reasons: per row, ``MAX_NEW_TOKENS`` when it had no end-of-audio frame at the cap.
        row_caps: per row, its own frame cap (``TTSAdapter.row_max_new_tokens``: the checkpoint's ``max_length``
            less its prompt, when that is below ``max_new_tokens``); frames past it are padding. Empty = none.
    """

    codes: "torch.Tensor"
    stop_reasons: list = field(default_factory=list)
    row_caps: list = field(default_factory=list)


class _Sampler:
    """Token selection for one batch: argmax when ``params.greedy``, else ``RowSampler`` (tts_app/adapters/
    sampling.py) with ``params``' temperature / top-k / top-p (``params`` resolved: checkpoint defaults filled in),
    drawing from the row's one generator (backbone token first, then the depth decoder's, frame by frame).

    Ids the codec cannot decode (``>= codec_config.codebook_size``; CSM's codebook vocabulary has 3 extra ids, e.g.
    2051 vs 2048, one of them the pad id) are suppressed first: a trained model never picks them, a random one does
    and the Mimi decoder would then fail with an index error."""

    def __init__(self, params: SynthesisParams, seeds: list[int], device, vocab_size: int,
                 codec_codebook_size: int):
        from transformers.generation.logits_process import SuppressTokensLogitsProcessor

        from tts_app.adapters.sampling import RowSampler

        self.greedy = params.greedy
        self.suppress = SuppressTokensLogitsProcessor(list(range(codec_codebook_size, vocab_size)), device=device)
        self.samplers = {}
        if not self.greedy:
            # One set of knobs (the request's, resolved against the checkpoint defaults) for both levels, as
            # Sesame's generator.py samples every codebook with one temperature and top-k.
            backbone = RowSampler(seeds, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
            self.samplers = {"backbone": backbone, "depth": backbone}

    def pick(self, logits, level: str):
        """logits ``(batch_size, vocab)`` float32 -> token ids ``(batch_size,)`` int64."""
        import torch

        logits = self.suppress(None, logits)
        if self.greedy:
            return torch.argmax(logits, dim=-1)
        return self.samplers[level].sample(logits)


class CsmAdapter(TTSAdapter):
    """Adapter for CSM checkpoints (``model_type == "csm"``, e.g. ``sesame/csm-1b``)."""

    family = "csm"
    display_name = "CSM"
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "a request's temperature and top-k reach both the backbone and the depth decoder, as Sesame's own "
        "generator samples every codebook alike (transformers' generate applies them to the backbone only)",
        "ids of the codec vocabulary that are not audio codes are suppressed (a trained model never picks them)",
    )

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32") -> "CsmAdapter":
        """Load ``CsmForConditionalGeneration.from_pretrained(id_or_path)`` and ``AutoProcessor.from_pretrained(
        id_or_path)`` (hub id or local folder, the same calls for both; ``TTSAdapter._load_pretrained``).

        Args:
            id_or_path: hub id (e.g. "sesame/csm-1b") or a folder written by ``save_pretrained``.
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32", "bfloat16" or "float16" (weights, activations and KV cache).

        Raises:
            ModelLoadError: unknown dtype, checkpoint not found / not cached offline, or weights that do not load.
        """
        from transformers import CsmForConditionalGeneration

        model, processor = cls._load_pretrained(CsmForConditionalGeneration, id_or_path, device, dtype)
        tokenizer = processor.tokenizer
        if tokenizer.pad_token is None:  # the prompt batch is left-padded; pad positions are masked out anyway
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        return cls(model, processor, device=device, dtype=dtype)

    def _measure_facts(self) -> ModelFacts:
        """ModelFacts from the loaded config, generation config and processor (see ``ModelFacts`` for meanings)."""
        config = self.model.config
        depth = config.depth_decoder_config
        codec = config.codec_config
        tokenizer = self.processor.tokenizer
        sampling_rate = int(self.processor.feature_extractor.sampling_rate)
        frames_per_second = float(codec.frame_rate)

        text_positions_per_char = max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) / len(t)
                                      for t in _MEASURE_TEXTS)
        silence = np.zeros(int(_MEASURE_REFERENCE_S * sampling_rate), dtype=np.float32)
        encoded = self.processor(text=[self.processor.audio_token], audio=[silence])
        reference_positions_per_second = float(encoded["input_ids"].shape[-1]) / _MEASURE_REFERENCE_S
        # Fixed positions per row: both turns' <bos>, "[0]", <eos> and <|audio_eos|> (prompt with empty texts).
        empty_prompt = self._prompt("", "", with_reference=True).replace(self.processor.audio_token, "")
        self._fixed_positions = len(tokenizer(empty_prompt, add_special_tokens=False)["input_ids"])
        # One context turn's framing: <bos>, "[0]", <eos>, <|audio_eos|> (its text and audio frames aside)
        turn = self._prompt("", None, with_reference=False, context_texts=("",))
        self._context_turn_positions = len(tokenizer(turn.replace(self.processor.audio_token, ""),
                                                     add_special_tokens=False)["input_ids"]) - len(
            tokenizer(self._prompt("", None, with_reference=False), add_special_tokens=False)["input_ids"])
        # Depth decoder: per frame at most num_codebooks cached positions (fresh cache each frame), expressed in
        # backbone-position equivalents. Both are 2 x layers x KV heads x head dim x dtype bytes per position.
        depth_elems = depth.num_hidden_layers * depth.num_key_value_heads * depth.head_dim * config.num_codebooks
        backbone_elems = config.num_hidden_layers * config.num_key_value_heads * config.head_dim
        self._depth_positions = math.ceil(depth_elems / backbone_elems)

        defaults = GenerationDefaults.from_generation_config(
            self.model.generation_config,
            family_defaults={
                "greedy": (False, f"{_SESAME_GENERATOR}: samples"),
                "temperature": (DEFAULT_TEMPERATURE, _SESAME_GENERATOR),
                "top_k": (DEFAULT_TOP_K, _SESAME_GENERATOR),
                "top_p": (1.0, "off (the Sesame generator has no top-p)"),
                "max_new_tokens": (int(round(DEFAULT_MAX_AUDIO_S * frames_per_second)),
                                   f"tts_app default: {DEFAULT_MAX_AUDIO_S:g} s of audio"),
            },
            absent={"cfg_scale": "CSM has no classifier-free guidance"})
        return self._model_facts(
            sampling_rate=sampling_rate,
            num_layers=config.num_hidden_layers,
            num_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            cfg_multiplier=1,
            frames_per_second=frames_per_second,
            text_positions_per_char=text_positions_per_char,
            reference_positions_per_second=reference_positions_per_second,
            max_segment_chars=min(MAX_SEGMENT_CHARS, max_chars_for_speech_s(
                defaults.max_new_tokens / frames_per_second, LANGUAGES)),
            generation_defaults=defaults,
            languages=LANGUAGES,
            supports_segment_context=True,
        )

    def max_input_positions(self) -> int:
        """The backbone's ``max_position_embeddings``: ``preprocess`` refuses a prompt that with its frame cap
        exceeds it (segment context is carried only within it)."""
        return int(self.model.config.max_position_embeddings)

    def context_positions(self, text_chars: int, audio_s: float) -> int:
        """Backbone positions of one context turn: its text tokens, its audio's codec frames and the turn's framing
        tokens (measured at load)."""
        f = self.facts
        return int(math.ceil(text_chars * f.text_positions_per_char + audio_s * f.reference_positions_per_second)
                   ) + self._context_turn_positions

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """Backbone KV positions of one row at the end of decoding, plus the depth decoder's per-frame cache.

        = reference frames (``reference_s x reference_positions_per_second``) + text tokens (``chars x
        text_positions_per_char``) + fixed framing tokens (measured) + ``max_new_tokens`` frames + the depth
        decoder's ``num_codebooks`` positions converted to backbone-position equivalents (ceil of depth elements /
        backbone elements per position). Multiply by ``facts.kv_bytes_per_position`` for bytes.
        """
        f = self.facts
        return int(math.ceil(reference_s * f.reference_positions_per_second
                             + (text_chars + reference_text_chars) * f.text_positions_per_char)
                   ) + self._fixed_positions + max_new_tokens + self._depth_positions

    # ------------------------------------------------------------------ tiny checkpoint

    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a tiny random CSM checkpoint (backbone, depth decoder, Mimi codec, char tokenizer, processor).

        The Mimi codec keeps the real conv layout (strides 4x5x6x8 then 2, 24 kHz, 12.5 frames/s), so the
        processor's default frame-count formula applies unchanged; every width, layer count and codebook count is
        tiny (4 codebooks of 64 entries). Same ``seed`` -> identical weights.

        Returns:
            ``out_dir`` as a Path (created), holding config.json, generation_config.json, model.safetensors,
            tokenizer.json, tokenizer_config.json, processor_config.json.
        """
        import torch
        from transformers import (CsmConfig, CsmForConditionalGeneration, CsmProcessor, EncodecFeatureExtractor,
                                  MimiConfig)

        from tts_app.adapters.tiny_vocab import build_char_tokenizer

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        tokenizer = build_char_tokenizer(TINY_SPECIAL_TOKENS, unk_token="<unk>", pad_token="<pad>",
                                         bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                         padding_side="left")
        token_id = tokenizer.convert_tokens_to_ids
        num_codebooks, codebook_size = 4, 64
        vocab_size = codebook_size + 3  # as csm-1b: 2048 codec entries + 3 (pad id = vocab_size - 1)
        codec = MimiConfig(sampling_rate=24000, hidden_size=16, num_filters=4, codebook_size=codebook_size,
                           codebook_dim=8, num_quantizers=num_codebooks, vector_quantization_hidden_dimension=8,
                           upsample_groups=16, num_hidden_layers=1, intermediate_size=32, num_attention_heads=2,
                           num_key_value_heads=2, head_dim=8)
        depth = dict(num_codebooks=num_codebooks, backbone_hidden_size=32, vocab_size=vocab_size, hidden_size=32,
                     intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=num_codebooks + 1, initializer_range=INIT_STD)
        config = CsmConfig(
            num_codebooks=num_codebooks, vocab_size=vocab_size, text_vocab_size=len(tokenizer), hidden_size=32,
            intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=2048, initializer_range=INIT_STD, pad_token_id=token_id("<pad>"),
            codebook_pad_token_id=vocab_size - 1,
            codebook_eos_token_id=0, bos_token_id=token_id("<|begin_of_text|>"),
            audio_token_id=token_id("<|AUDIO|>"), audio_eos_token_id=token_id("<|audio_eos|>"),
            depth_decoder_config=depth, codec_config=codec.to_dict(),
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = CsmForConditionalGeneration(config).eval()
            # Mimi's init leaves every codebook vector at zero (centroids normally come from training), which would
            # encode any reference to code 0 and decode any codes to the same audio; random centroids instead.
            for module in model.codec_model.modules():
                if hasattr(module, "embed_sum"):
                    module.embed_sum.normal_()
                    module._embed = None
        model.generation_config.max_new_tokens = 125  # 10 s at 12.5 frames/s: quick on CPU
        processor = CsmProcessor(EncodecFeatureExtractor(feature_size=1, sampling_rate=24000), tokenizer)
        model.save_pretrained(out_dir)
        processor.save_pretrained(out_dir)
        return out_dir

    # ------------------------------------------------------------------ batch pipeline

    def _prompt(self, text: str, reference_text: str | None, with_reference: bool,
                context_texts: tuple[str, ...] = ()) -> str:
        """The row's prompt: the reference turn (when ``with_reference``), one turn per segment-context text (each
        followed by its audio), then the target turn."""
        tok = self.processor.tokenizer

        def turn_with_audio(turn_text: str) -> str:
            return (f"{tok.bos_token}[{SPEAKER_ID}]{turn_text}{tok.eos_token}"
                    f"{self.processor.audio_token}{self.processor.audio_eos_token}")

        turns = ([turn_with_audio(reference_text or "")] if with_reference else []) + [
            turn_with_audio(t) for t in context_texts]
        return "".join(turns) + f"{tok.bos_token}[{SPEAKER_ID}]{text}{tok.eos_token}"

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> CsmInputs:
        """Rows -> left-padded prompt token ids + reference audio (``CsmProcessor``), on the adapter's device.

        Each row keeps its own reference clip (float32 ``(num_samples,)`` at ``facts.sampling_rate``); a row without
        one is prompted with its text only. A missing reference text is left empty (the voice is still taken from
        the audio, less faithfully).

        Raises:
            InputError: empty batch, a row with empty text, or a prompt that with ``max_new_tokens`` frames would
                exceed ``config.max_position_embeddings``.
            ReferenceAudioError: a reference clip that is not a non-empty, finite, 1-D array.
        """
        import torch

        if not rows:
            raise InputError("preprocess got an empty batch; pass at least one row")
        texts, audios = [], []
        for i, row in enumerate(rows):
            if not row.text or not row.text.strip():
                raise InputError(f"row {i}: text is empty; give the text to speak")
            audio = row.reference_audio
            if audio is not None:
                audio = np.asarray(audio, dtype=np.float32)
                if audio.ndim != 1 or audio.size == 0:
                    raise ReferenceAudioError(f"row {i}: reference audio has shape {audio.shape}; a non-empty mono "
                                              f"array (num_samples,) at {self.facts.sampling_rate} Hz is needed")
                if not np.isfinite(audio).all():
                    raise ReferenceAudioError(f"row {i}: reference audio contains NaN/inf samples; clean it first")
                audios.append(audio)
            # segment context: earlier segments' audio, in prompt order after the reference's
            audios += [np.asarray(c.audio, dtype=np.float32) for c in row.context]
            texts.append(self._prompt(row.text, row.reference_text, with_reference=audio is not None,
                                      context_texts=tuple(c.text for c in row.context)))
        encoded = self.processor(text=texts, audio=audios or None,
                                 sampling_rate=self.facts.sampling_rate, padding=True, padding_side="left")
        input_ids = encoded["input_ids"].to(self.device)
        attention_mask = encoded["attention_mask"].to(self.device)
        # Pad ids are masked out; give them a non-audio id so a tokenizer whose pad id is <|AUDIO|> cannot confuse
        # the audio-frame placement in ``_merge_input_ids_with_input_values``.
        input_ids = input_ids.masked_fill(attention_mask == 0, self.model.config.bos_token_id)
        max_positions = self.model.config.max_position_embeddings
        for i, prompt_len in enumerate(attention_mask.sum(dim=1).tolist()):
            cap = self.row_max_new_tokens(params, prompt_len, row=i)
            if prompt_len + cap > max_positions:
                raise InputError(
                    f"row {i}: prompt of {prompt_len} positions (reference audio + texts) plus max_new_tokens="
                    f"{cap} exceeds the model's {max_positions} positions; use a shorter "
                    "reference clip, shorter text segments or a smaller max_new_tokens")
        input_values = cutoffs = None
        if audios:
            input_values = encoded["input_values"].to(self.device, dtype=self.model.dtype)
            cutoffs = encoded["input_values_cutoffs"].to(self.device)
        return CsmInputs(input_ids=input_ids, attention_mask=attention_mask, input_values=input_values,
                         input_values_cutoffs=cutoffs, seeds=[row.seed for row in rows])

    def generate(self, inputs: CsmInputs, params: SynthesisParams) -> CsmOutputs:
        """Decode up to ``self.max_new_tokens(params)`` codec frames per row.

        Each frame: the backbone predicts codebook 0 (prefill over the prompt, then one position per frame with the
        KV cache, or the whole prefix again without it), the depth decoder predicts codebooks 1..N-1. A row stops at
        its end-of-audio frame (all codebooks == ``codebook_eos_token_id``); the loop ends when every row has.
        ``params.cfg_scale`` is ignored (CSM has no classifier-free guidance).

        Returns:
            CsmOutputs with codes ``(batch_size, num_frames, num_codebooks)`` int64.

        Raises:
            torch.OutOfMemoryError: the batch does not fit on the device.
        """
        import torch

        model = self.model
        config = model.config
        params = self.resolve(params)
        # Each row's own cap: max_new_tokens, bounded by a checkpoint max_length less the row's own prompt.
        caps = [self.row_max_new_tokens(params, int(n), row=i)
                for i, n in enumerate(inputs.attention_mask.sum(dim=1).tolist())]
        max_frames = max(caps)
        sampler = _Sampler(params, inputs.seeds, inputs.input_ids.device, config.vocab_size,
                           config.codec_config.codebook_size)
        with torch.no_grad():  # not inference_mode: Mimi caches its codebook tensor on first use
            # (batch, prompt_len, hidden): text embeddings with the codec-encoded reference frames placed at the
            # <|AUDIO|> positions (the library's own merge, which encodes each clip on its own).
            prompt_embeds = model._merge_input_ids_with_input_values(
                inputs.input_ids, inputs.input_values, inputs.input_values_cutoffs)["inputs_embeds"]
            batch_size = prompt_embeds.shape[0]
            frames: list[torch.Tensor] = []  # each (batch, num_codebooks)
            finished = torch.zeros(batch_size, dtype=torch.bool, device=prompt_embeds.device)
            capped = torch.zeros_like(finished)  # stopped at its own cap below the batch's
            row_caps = torch.tensor(caps, device=prompt_embeds.device)
            cache = None
            for step in range(max_frames):
                hidden, cache = self._backbone_step(prompt_embeds, inputs.attention_mask, frames, cache,
                                                    params.use_cache)
                first = sampler.pick(model.lm_head(hidden).float(), "backbone")  # (batch,)
                codes = self._depth_decode(hidden, first, sampler, params.use_cache)  # (batch, num_codebooks)
                codes = codes.masked_fill(finished[:, None], config.codebook_pad_token_id)
                finished = finished | (codes == config.codebook_eos_token_id).all(dim=-1)
                capped = capped | (~finished & (row_caps <= step + 1))
                finished = finished | capped
                frames.append(codes)
                if bool(finished.all()):
                    break
            return CsmOutputs(codes=torch.stack(frames, dim=1),
                              stop_reasons=[StopReason.END_OF_SPEECH if done and not cut else StopReason.MAX_NEW_TOKENS
                                            for done, cut in zip(finished.tolist(), capped.tolist())],
                              row_caps=caps)

    def stop_reasons(self, outputs: CsmOutputs, inputs: CsmInputs) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row without an end-of-audio frame at the cap, else ``END_OF_SPEECH``."""
        return list(outputs.stop_reasons)

    def _backbone_step(self, prompt_embeds, prompt_mask, frames, cache, use_cache):
        """One backbone forward; returns (last hidden state ``(batch, hidden)``, cache).

        Step 0 (prefill) or cache off: the whole prefix (prompt + all frames so far). Cache on, later steps: only
        the newest frame. Position ids count real tokens only (left padding gets none), as transformers'
        ``prepare_inputs_for_generation`` does.
        """
        import torch
        from transformers import DynamicCache

        backbone = self.model.backbone_model
        batch_size = prompt_embeds.shape[0]
        ones = torch.ones(batch_size, len(frames), dtype=prompt_mask.dtype, device=prompt_mask.device)
        mask = torch.cat([prompt_mask, ones], dim=1)  # (batch, prompt_len + num_frames)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        if use_cache and frames:
            out = backbone(input_ids=frames[-1][:, None, :], attention_mask=mask, position_ids=positions[:, -1:],
                           cache=cache, use_cache=True)
            return out.last_hidden_state[:, -1, :], out.cache
        embeds = prompt_embeds
        if frames:
            # (batch, num_frames, num_codebooks) -> summed codebook embeddings (batch, num_frames, hidden)
            embeds = torch.cat([prompt_embeds, backbone.embed_tokens(torch.stack(frames, dim=1))], dim=1)
        cache = DynamicCache(config=self.model.config) if use_cache else None
        out = backbone(inputs_embeds=embeds, attention_mask=mask, position_ids=positions, cache=cache,
                       use_cache=use_cache)
        return out.last_hidden_state[:, -1, :], (out.cache if use_cache else None)

    def _depth_decode(self, backbone_hidden, first_codes, sampler, use_cache):
        """Codebooks 1..N-1 of one frame with the depth decoder.

        Its input is [backbone hidden state (placeholder id 0, replaced by ``backbone_last_hidden_state``),
        codebook 0, codebook 1, ...]; a fresh cache per frame (cache on) or the whole prefix each step (off).
        Returns ``(batch, num_codebooks)`` int64.
        """
        import torch
        from transformers import DynamicCache

        depth = self.model.depth_decoder
        codes = [first_codes]
        cache = DynamicCache(config=depth.config) if use_cache else None
        placeholder = torch.zeros_like(first_codes)
        for _ in range(1, self.model.config.num_codebooks):
            # An explicit all-ones mask: without one the library's mask builder tries packed-sequence detection on
            # the depth decoder's 1-D position ids and fails.
            mask = torch.ones(first_codes.shape[0], len(codes) + 1, dtype=torch.long, device=first_codes.device)
            if use_cache and len(codes) > 1:
                out = depth(input_ids=codes[-1][:, None], attention_mask=mask, cache=cache, use_cache=True,
                            logits_to_keep=1)
            else:
                out = depth(input_ids=torch.stack([placeholder, *codes], dim=1), attention_mask=mask,
                            backbone_last_hidden_state=backbone_hidden, cache=cache, use_cache=use_cache,
                            logits_to_keep=1)
            codes.append(sampler.pick(out.logits[:, -1, :].float(), "depth"))
        return torch.stack(codes, dim=1)

    def postprocess(self, outputs: CsmOutputs, inputs: CsmInputs) -> list[np.ndarray]:
        """Codec frames -> one float32 waveform ``(num_samples,)`` per row at ``facts.sampling_rate``.

        Each row is cut before its first end-of-audio frame (all codebooks == ``codebook_eos_token_id``) and decoded
        on its own by the Mimi codec, so no padding frame becomes audio. A row that ends at once gives an empty array.
        """
        import torch

        config = self.model.config
        waveforms = []
        with torch.no_grad():  # not inference_mode: Mimi caches its codebook tensor on first use
            for i, row_codes in enumerate(outputs.codes):  # (num_frames, num_codebooks)
                ended = (row_codes == config.codebook_eos_token_id).all(dim=-1).nonzero()
                num_frames = int(ended[0, 0]) if ended.numel() else row_codes.shape[0]
                if outputs.row_caps:
                    num_frames = min(num_frames, outputs.row_caps[i])
                if num_frames == 0:
                    waveforms.append(np.zeros(0, dtype=np.float32))
                    continue
                # codec input (1, num_codebooks, num_frames) -> audio_values (1, 1, num_samples)
                audio = self.model.codec_model.decode(row_codes[:num_frames].T[None]).audio_values[0, 0]
                waveforms.append(audio.float().cpu().numpy())
        return waveforms
