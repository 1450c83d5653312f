"""Higgs Audio v2 (Boson AI) through transformers' ``HiggsAudioV2ForConditionalGeneration`` + ``HiggsAudioV2Processor``.

The model is a Llama-style decoder with a DualFFN (separate MLPs for text and audio positions) that predicts
``num_codebooks`` codec tokens per decode step in a *delay pattern* (codebook ``k`` runs ``k`` steps behind codebook
0). The codec ("audio tokenizer", model_type ``higgs_audio_v2_tokenizer``) is a DAC acoustic encoder/decoder plus a
HuBERT semantic encoder with residual vector quantisation; it runs at 24 kHz and 25 frames per second for the real
checkpoint.

Voice cloning follows the transformers docs (model_doc/higgs_audio_v2.md, "Zero-shot voice cloning"): the reference
transcript is a user turn, the reference audio the assistant's answer, then the text to speak as a new user turn,
rendered by the processor's chat template and tokenised (audio encoded by the codec) in one
``processor.apply_chat_template`` call. A reference without transcript goes into the scene description instead, as
the docs' "multi-speaker voice cloning" example lays it out: ``SPEAKER0:`` then the clip in the scene, and the text
to speak tagged ``[SPEAKER0] ...`` so the model knows which voice speaks it.

Checkpoint: the transformers-format conversion ``eustlb/higgs-audio-v2-generation-3B-base`` (the one the transformers
docs and docstrings use). The official ``bosonai/higgs-audio-v2-generation-3B-base`` is the original boson_multimodal
format and does not load in transformers (``tts_app.adapters`` says so and names the conversion).

Segment context (a request's ``segment_context``; ``AdapterRow.context``) follows Boson AI's own long-form
generation (higgs-audio ``examples/generation.py``, ``HiggsAudioModelClient.generate``): after the reference turns,
each earlier segment is a user turn with its text and an assistant turn with the audio tokens generated for it
(the delay pattern reverted, stream BOS/EOS dropped and ids clipped to the codebook, as ``generation.py`` keeps
them), not a re-encoding of the decoded audio; those tokens are framed as every prompt audio is (stream BOS/EOS
added, delay pattern applied: ``HiggsAudioV2Processor``, and Boson's collator). Upstream keeps every earlier chunk
unless given ``--generation_chunk_buffer_size``; the engine keeps the most recent ones that fit the input limit.

Quirks handled here (all verified by tests/integration/test_adapter_higgs.py):

* ``use_cache=False``: transformers' ``prepare_inputs_for_generation`` switches to "decode mode" (last audio frame
  only, no ``input_ids``) whenever every earlier audio frame is masked. Without a cache that drops the whole prefix
  when the prompt holds no reference audio, so the adapter restores the full inputs in that case.
* Padding: rows are left-padded whatever the checkpoint's tokenizer config says (``padding_side`` is forced at load
  and passed on every processor call). With ``padding_side: right`` the generation prompt of a shorter row would end
  in padding, and a batched row would no longer equal the same row alone.
* Sampling: transformers draws with ``torch.multinomial`` from the global RNG, so a row's audio would depend on its
  batch-mates. The adapter picks tokens in a logits processor (``_TokenSelector``) with one ``torch.Generator`` per
  row (seeded with ``AdapterRow.seed``) and hands transformers a one-hot score row, which its greedy path then picks.
* Repetition-aware sampling (``ras_win_len``, ``ras_win_max_num_repeat`` of the generation config; transformers
  ``HiggsAudioV2GenerationMixin._sample``): after the token choice, greedy or sampled, a codebook token already
  chosen ``ras_win_max_num_repeat`` times in the row's last ``ras_win_len`` audio frames (stream BOS/EOS not counted)
  is redrawn from the softmax of the raw logits. Upstream does it even when greedy, with the global RNG, over a
  window that includes a batched row's padding frames; ``_TokenSelector`` does the same per row, over the row's own
  frames, with the row's generator, so at batch 1 it draws exactly what upstream draws.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tts_app.adapters.base import AdapterRow, GenerationDefaults, ModelFacts, RowContext, TTSAdapter, count_parameters
from tts_app.speaking_rate import max_chars_for_speech_s
from tts_app.errors import InputError
from tts_app.frontend.messages import Notice, register
from tts_app.request import StopReason, SynthesisParams

# Higgs Audio's refusal of a text its chat template strips to nothing, in English and Chinese
# (``tts_app.frontend.messages``).
HIGGS_EN = {
    "higgs_text_empty": "row {row}: text is empty (or only special tokens); give the segment text to speak",
}
HIGGS_ZH = {
    "higgs_text_empty": "第 {row} 行：文本为空（或只有特殊标记）；请给这一段写上要朗读的文字",
}
register(__name__, HIGGS_EN, HIGGS_ZH)

# Prompt wording from the transformers docs' voice-cloning example (model_doc/higgs_audio_v2.md).
# The transformers-format Higgs Audio v2 checkpoint (transformers docs and docstrings).
TRANSFORMERS_REPO = "eustlb/higgs-audio-v2-generation-3B-base"
SYSTEM_PROMPT = "Generate audio following instruction."
SCENE_PROMPT = "Audio is recorded from a quiet room."
SPEAKER_LABEL = "SPEAKER0"  # the docs' speaker label for a voice given by a clip alone ("SPEAKER0:" / "[SPEAKER0] ")

# Special tokens of the Higgs Audio v2 text tokenizer (Llama-3 header tokens + Higgs audio tokens). The names are the
# ones HiggsAudioV2Processor defaults to (audio_token, audio_bos_token, audio_eos_token, audio_delay_token).
BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|eot_id|>"
PAD_TOKEN = "<|end_of_text|>"
UNK_TOKEN = "<unk>"
AUDIO_TOKEN = "<|AUDIO_OUT|>"
AUDIO_BOS_TOKEN = "<|audio_out_bos|>"
AUDIO_EOS_TOKEN = "<|audio_eos|>"
AUDIO_DELAY_TOKEN = "<|reserved_special_token_6|>"
SPECIAL_TOKENS = [UNK_TOKEN, PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, "<|start_header_id|>", "<|end_header_id|>",
                  "<|scene_desc_start|>", "<|scene_desc_end|>", AUDIO_BOS_TOKEN, AUDIO_TOKEN, AUDIO_EOS_TOKEN,
                  AUDIO_DELAY_TOKEN]

# Chat template of the tiny checkpoint: same token layout as the Higgs Audio v2 template (Llama-3 headers, scene
# description block, assistant turns holding one audio, generation prompt ending in the audio-out BOS token).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(rest=messages) %}"
    "<|start_header_id|>system<|end_header_id|>\n\n"
    "{% if messages[0]['role'] == 'system' %}"
    "{% for item in messages[0]['content'] %}{{ item['text'] | trim }}{% endfor %}"
    "{% set ns.rest = messages[1:] %}{% endif %}"
    "{% if ns.rest and ns.rest[0]['role'] == 'scene' %}"
    "\n\n<|scene_desc_start|>\n"
    "{% for item in ns.rest[0]['content'] %}"
    "{% if item['type'] == 'text' %}{% if not loop.first %}\n{% endif %}{{ item['text'] | trim }}"
    "{% else %} <|audio_out_bos|><|AUDIO_OUT|><|audio_eos|>{% endif %}"
    "{% endfor %}"
    "\n<|scene_desc_end|>"
    "{% set ns.rest = ns.rest[1:] %}{% endif %}"
    "<|eot_id|>"
    "{% for message in ns.rest %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['role'] == 'assistant' %}<|audio_out_bos|><|AUDIO_OUT|><|audio_eos|>"
    "{% else %}{% for item in message['content'] %}{{ item['text'] | trim }}{% endfor %}{% endif %}"
    "<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n<|audio_out_bos|>{% endif %}"
)

# Tiny architecture: every sub-model of the real one (Llama DualFFN decoder, DAC acoustic codec, HuBERT semantic
# encoder, RVQ) with dims small enough that a few seconds of audio generate in about a second on one CPU thread.
TINY_SAMPLING_RATE = 24000
TINY_DOWNSAMPLING_RATIOS = [8, 5, 4, 2, 3]  # hop 960 samples -> 25 frames/s at 24 kHz, as the real codec
TINY_CODEC_CODEBOOK_SIZE = 64
TINY_NUM_CODEBOOKS = 4
TINY_TARGET_BANDWIDTH_KBPS = 0.6  # num_quantizers = 1000 * 0.6 // (25 Hz * log2(64) bits) = 4

# Defaults for what a checkpoint's generation config leaves unset. The transformers docs (model_doc/higgs_audio_v2.md,
# every example) decode with do_sample=False; when sampling is chosen, Boson AI's own examples (higgs-audio README,
# examples/generation.py) use temperature 0.3, top_p 0.95, top_k 50 and max_new_tokens 1024; repetition-aware
# sampling 7 / 2 is what transformers' conversion script (convert_higgs_audio_v2_to_hf.py) writes into the
# converted checkpoint's generation config.
_TRANSFORMERS_DOCS = "transformers Higgs Audio v2 docs (model_doc/higgs_audio_v2.md): do_sample=False"
_BOSON_EXAMPLE = "Boson AI higgs-audio README example"
_CONVERSION = "transformers convert_higgs_audio_v2_to_hf.py"
DEFAULT_TEMPERATURE = 0.3
DEFAULT_TOP_P = 0.95
DEFAULT_TOP_K = 50
DEFAULT_MAX_NEW_TOKENS = 1024  # decode steps; about 41 s of audio at 25 frames/s, ample for one segment
DEFAULT_RAS_WIN_LEN = 7
DEFAULT_RAS_WIN_MAX_NUM_REPEAT = 2
MAX_SEGMENT_CHARS = 200
# Languages tts_app's front end tells apart that the model card demonstrates (bosonai/higgs-audio-v2-generation-3B-base:
# English and Chinese among its multilingual examples).
LANGUAGES = ("en", "zh")
# Texts used to measure tokens per character from the loaded tokenizer (the larger of the two is kept, so the
# estimate is an upper bound for English and Chinese).
_MEASURE_TEXT_EN = "The quick brown fox jumps over the lazy dog, then runs home before the rain."
_MEASURE_TEXT_ZH = "今天天气很好，我们一起去公园散步，然后回家吃饭。"


class _RawLogits:
    """First logits processor of a Higgs generate call: keeps the step's raw logits (``(batch_size, num_codebooks *
    codebook_size)`` float32, before the delay pattern and any warper) for the repetition-aware redraw."""

    def __init__(self):
        self.scores = None

    def __call__(self, input_ids, scores):
        self.scores = scores
        return scores


class _TokenSelector:
    """Last logits processor of a Higgs generate call: picks each row's codebook tokens and returns one-hot scores
    (0 at the pick, -inf elsewhere), so transformers' greedy path takes exactly them.

    Pick: argmax when ``sampler`` is None, else ``RowSampler.sample`` (per-row generators). Then, when
    ``ras_win_len`` and ``ras_win_max_num_repeat`` are set, repetition-aware sampling as transformers'
    ``HiggsAudioV2GenerationMixin._sample`` applies it (greedy or not): a codebook whose pick occurs at least
    ``ras_win_max_num_repeat`` times in the row's last ``ras_win_len`` frames (stream BOS/EOS entries not counted) is
    redrawn from ``softmax(raw logits)`` with ``torch.multinomial(..., replacement=True)``, using the row's generator.

    Args:
        raw: the ``_RawLogits`` of the same call.
        sampler: a ``RowSampler`` (one generator per row; ``rows_per_seed = num_codebooks``) or None for greedy.
        generators: one ``torch.Generator`` per row for the redraws (the sampler's, so one stream per row).
        histories: per row, its audio frames so far ``(num_frames, num_codebooks)`` int64 (the reference frames,
            without batch padding); the selector appends every pick.
        ras_win_len, ras_win_max_num_repeat: the generation config's values, None = off.
        stream_bos_id, stream_eos_id: audio stream BOS / EOS ids, not counted as repetitions.
    """

    def __init__(self, raw: _RawLogits, sampler, generators, histories, num_codebooks: int,
                 ras_win_len: int | None, ras_win_max_num_repeat: int | None, stream_bos_id: int, stream_eos_id: int):
        self.raw = raw
        self.sampler = sampler
        self.generators = generators
        self.histories = histories
        self.num_codebooks = num_codebooks
        self.ras = (ras_win_len, ras_win_max_num_repeat) if ras_win_len and ras_win_max_num_repeat else None
        self.stream_bos_id = stream_bos_id
        self.stream_eos_id = stream_eos_id
        self.num_redraws = 0  # codebook tokens redrawn so far (for tests and logs)

    def __call__(self, input_ids, scores):
        import torch

        batch_size = scores.shape[0] // self.num_codebooks
        picks = scores.argmax(dim=-1) if self.sampler is None else self.sampler.sample(scores)
        picks = picks.view(batch_size, self.num_codebooks)
        if self.ras is not None:
            win_len, max_repeat = self.ras
            raw = self.raw.scores.view(batch_size, self.num_codebooks, -1)
            for i in range(batch_size):
                window = self.histories[i][-win_len:]  # (<= win_len, num_codebooks)
                counted = (window != self.stream_bos_id) & (window != self.stream_eos_id)
                repeats = ((window == picks[i]) & counted).sum(dim=0)  # (num_codebooks,)
                redraw = repeats >= max_repeat
                if bool(redraw.any()):
                    probs = raw[i][redraw].softmax(dim=-1)
                    picks[i, redraw] = torch.multinomial(probs, 1, replacement=True,
                                                         generator=self.generators[i]).view(-1)
                    self.num_redraws += int(redraw.sum())
        for i in range(batch_size):
            self.histories[i] = torch.cat([self.histories[i], picks[i:i + 1]])
        out = torch.full_like(scores, -float("inf"))
        out[torch.arange(scores.shape[0], device=scores.device), picks.view(-1)] = 0.0
        return out


class HiggsAudioAdapter(TTSAdapter):
    """Adapter of the Higgs Audio v2 family (``model_type="higgs_audio_v2"``).

    Inputs to ``generate`` are the processor's ``BatchFeature`` (``input_ids``/``attention_mask`` ``(batch_size,
    seq_len)`` left-padded, ``audio_input_ids`` ``(batch_size, num_ref_frames, num_codebooks)`` right-padded with
    ``audio_input_ids_mask``) plus the rows' seeds. ``generate`` returns the codec token frames ``(batch_size,
    num_ref_frames + num_steps, num_codebooks)`` int64.
    """

    family = "higgs"
    display_name = "Higgs Audio v2"
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "sampling and repetition-aware redraws use per-row seeded generators (transformers' generate uses the "
        "global RNG) so a row never depends on its batch-mates",
    )
    # Boson AI's release is in its own boson_multimodal format (model_type "higgs_audio"); transformers loads the
    # conversion its docs use (convert_higgs_audio_v2_to_hf.py).
    original_format_repos = {"bosonai/higgs-audio-v2-generation-3B-base": TRANSFORMERS_REPO}

    @classmethod
    def original_format_hint(cls, config) -> str | None:
        """``model_type == "higgs_audio"``: the boson_multimodal format, not transformers' ``higgs_audio_v2``."""
        return TRANSFORMERS_REPO if config.get("model_type") == "higgs_audio" else None

    def __init__(self, model, processor, *, device: str, dtype: str, name_or_path: str):
        self.name_or_path = name_or_path
        self._install_no_cache_fix(model)
        super().__init__(model, processor, device, dtype)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32"
                        ) -> "HiggsAudioAdapter":
        """Load ``HiggsAudioV2ForConditionalGeneration.from_pretrained(id_or_path)`` and
        ``AutoProcessor.from_pretrained(id_or_path)`` (which loads the codec named in the processor config), through
        ``TTSAdapter._load_pretrained``.

        Args:
            id_or_path: hub id of a transformers-format checkpoint (the transformers docs use
                ``eustlb/higgs-audio-v2-generation-3B-base``) or a local checkpoint folder.
            device: torch device string ("cpu", "cuda", "cuda:1").
            dtype: "float32" | "bfloat16" | "float16" for the language model; the codec stays float32.

        Raises:
            ModelLoadError: unsupported dtype, or the checkpoint/processor/codec cannot be loaded or moved to
                ``device``.
        """
        from transformers import HiggsAudioV2ForConditionalGeneration

        model, processor = cls._load_pretrained(HiggsAudioV2ForConditionalGeneration, id_or_path, device, dtype)
        # Left padding whatever tokenizer_config.json says (see the module docstring); _process passes it too.
        processor.tokenizer.padding_side = "left"
        return cls(model, processor, device=device, dtype=dtype, name_or_path=str(id_or_path))

    @staticmethod
    def _install_no_cache_fix(model) -> None:
        """Wrap ``model.prepare_inputs_for_generation`` so ``use_cache=False`` always sees the whole prefix.

        transformers 5.24 passes only the last audio frame (and drops ``input_ids``) when every earlier frame of
        ``audio_input_ids_mask`` is False; with a cache that is the decode step, without one it throws the prompt
        away (it happens when the prompt has no reference audio). Found by the cache-on == cache-off test.
        """
        original = model.prepare_inputs_for_generation

        def prepare_inputs_for_generation(input_ids, audio_input_ids=None, audio_input_ids_mask=None, **kwargs):
            model_inputs = original(input_ids, audio_input_ids=audio_input_ids,
                                    audio_input_ids_mask=audio_input_ids_mask, **kwargs)
            if not kwargs.get("use_cache", True) and "input_ids" not in model_inputs:
                model_inputs["input_ids"] = input_ids
                model_inputs["audio_input_ids"] = audio_input_ids
                model_inputs["audio_input_ids_mask"] = audio_input_ids_mask
            return model_inputs

        model.prepare_inputs_for_generation = prepare_inputs_for_generation

    # ------------------------------------------------------------------ facts

    @property
    def sampling_rate(self) -> int:
        return int(self.processor.audio_tokenizer.config.sample_rate)

    def _prompt_length(self, text: str, reference_audio: np.ndarray | None = None,
                       reference_text: str | None = None) -> int:
        inputs = self.processor.apply_chat_template(
            [self._conversation(AdapterRow(text=text, reference_audio=reference_audio,
                                           reference_text=reference_text))],
            add_generation_prompt=True, tokenize=True, return_dict=True, sanitize_control_tokens=True,
            processor_kwargs=self._processor_kwargs())
        return int(inputs["input_ids"].shape[1])

    def _processor_kwargs(self) -> dict[str, Any]:
        return {"sampling_rate": self.sampling_rate, "return_tensors": "pt", "padding_side": "left"}

    def _measure_facts(self) -> ModelFacts:
        """Facts from the loaded config, plus token/position rates measured with the loaded processor.

        ``text_positions_per_char``: tokens per character of a fixed English and a fixed Chinese sentence (larger of
        the two). ``reference_positions_per_second``: slope of prompt length over reference duration (1 s vs 3 s
        clips through the processor, i.e. codec frames per second). Adapter attributes: ``prompt_overhead_positions``
        (chat template around an empty text, no reference) and ``reference_overhead_positions`` (what a reference
        adds besides its frames: stream BOS/EOS frames, delay tail, the transcript turn's header tokens).
        """
        cfg = self.model.config
        codec_cfg = self.processor.audio_tokenizer.config
        sr = self.sampling_rate
        empty = self._prompt_length("")
        per_char = max((self._prompt_length(t) - empty) / len(t) for t in (_MEASURE_TEXT_EN, _MEASURE_TEXT_ZH))
        rng = np.random.default_rng(0)
        clips = {seconds: (0.05 * rng.standard_normal(seconds * sr)).astype(np.float32) for seconds in (1, 3)}
        # Slope over two clip lengths = positions per second; the fixed part is the larger of the two layouts
        # (transcript turn + assistant audio, or clip in the scene description), so the estimate is an upper bound.
        ref_per_s = (self._prompt_length("", clips[3], "a") - self._prompt_length("", clips[1], "a")) / 2.0
        overhead = max(self._prompt_length("", clips[1], "a") - per_char, self._prompt_length("", clips[1], None))
        self.prompt_overhead_positions = empty
        self.reference_overhead_positions = overhead - empty - ref_per_s
        defaults = GenerationDefaults.from_generation_config(
            self.model.generation_config,
            family_defaults={
                "greedy": (True, _TRANSFORMERS_DOCS),
                "temperature": (DEFAULT_TEMPERATURE, _BOSON_EXAMPLE),
                "top_p": (DEFAULT_TOP_P, _BOSON_EXAMPLE),
                "top_k": (DEFAULT_TOP_K, _BOSON_EXAMPLE),
                "max_new_tokens": (DEFAULT_MAX_NEW_TOKENS, _BOSON_EXAMPLE),
                "ras_win_len": (DEFAULT_RAS_WIN_LEN, _CONVERSION),
                "ras_win_max_num_repeat": (DEFAULT_RAS_WIN_MAX_NUM_REPEAT, _CONVERSION),
            },
            absent={"cfg_scale": "Higgs Audio v2 has no classifier-free guidance"})
        return self._model_facts(
            # the codec is the processor's, outside the model; it runs for every reference and every output
            num_parameters=count_parameters(self.model, self.processor.audio_tokenizer),
            sampling_rate=sr,
            num_layers=int(cfg.num_hidden_layers),
            num_kv_heads=int(cfg.num_key_value_heads),
            head_dim=int(cfg.head_dim),
            cfg_multiplier=1,
            frames_per_second=float(codec_cfg.frame_rate),
            text_positions_per_char=float(per_char),
            reference_positions_per_second=float(ref_per_s),
            max_segment_chars=min(MAX_SEGMENT_CHARS, max_chars_for_speech_s(
                defaults.max_new_tokens / float(codec_cfg.frame_rate), LANGUAGES)),
            generation_defaults=defaults,
            languages=LANGUAGES,
            supports_segment_context=True,
        )

    def max_input_positions(self) -> int:
        """The checkpoint's ``max_length`` when it sets one (``row_max_new_tokens`` refuses a prompt that reaches
        it), else the language model's ``max_position_embeddings``."""
        max_length = self.facts.generation_defaults.max_length
        return int(max_length if max_length is not None else self.model.config.max_position_embeddings)

    def context_positions(self, text_chars: int, audio_s: float) -> int:
        """Positions of one context segment: its user turn's text, its audio frames and what a reference adds
        besides its frames (``reference_overhead_positions``: turn headers, stream BOS/EOS, the delay tail)."""
        f = self.facts
        return int(math.ceil(text_chars * f.text_positions_per_char + audio_s * f.reference_positions_per_second
                             + self.reference_overhead_positions))

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """Sequence positions of one row at the end of decoding: chat-template overhead + text tokens + reference
        audio frames (with its BOS/EOS/delay frames) + one position per decode step. One KV stack (text and audio
        positions share the attention layers), so ``facts.kv_bytes_per_position`` applies as is."""
        f = self.facts
        reference = (self.reference_overhead_positions + reference_s * f.reference_positions_per_second
                     if reference_s > 0 else 0.0)
        return int(math.ceil(
            self.prompt_overhead_positions + (text_chars + reference_text_chars) * f.text_positions_per_char
            + reference
        )) + max_new_tokens + 1

    # ------------------------------------------------------------------ tiny checkpoint

    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a tiny random Higgs Audio v2 checkpoint into ``out_dir``.

        Layout: the language model (``config.json``, ``model.safetensors``, ``generation_config.json``), the
        processor (tokenizer files, ``chat_template.jinja``, ``processor_config.json``) and the codec in
        ``out_dir/audio_tokenizer/``. As with the real checkpoint, the processor config names the codec by path
        (``bosonai/higgs-audio-v2-tokenizer`` there; the absolute path of ``audio_tokenizer/`` here), so move the
        folder only by re-running this.

        Same ``seed`` -> identical weights. Returns ``out_dir``.
        """
        import torch
        from transformers import (DacConfig, DacFeatureExtractor, HiggsAudioV2Config,
                                  HiggsAudioV2ForConditionalGeneration, HiggsAudioV2Processor,
                                  HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel, HubertConfig)

        from tts_app.adapters.tiny_vocab import build_char_tokenizer

        out_dir = Path(out_dir).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        codec_dir = out_dir / "audio_tokenizer"

        tokenizer = build_char_tokenizer(SPECIAL_TOKENS, unk_token=UNK_TOKEN, pad_token=PAD_TOKEN,
                                         bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, padding_side="left")
        tokenizer.chat_template = None

        hop = int(np.prod(TINY_DOWNSAMPLING_RATIOS))
        acoustic = DacConfig(encoder_hidden_size=4, downsampling_ratios=TINY_DOWNSAMPLING_RATIOS,
                             decoder_hidden_size=32, upsampling_ratios=TINY_DOWNSAMPLING_RATIOS, hidden_size=16,
                             n_codebooks=TINY_NUM_CODEBOOKS, codebook_size=TINY_CODEC_CODEBOOK_SIZE,
                             codebook_dim=8, sampling_rate=TINY_SAMPLING_RATE)
        semantic = HubertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                conv_dim=(8,) * 7, num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                                mask_time_prob=0.0)
        codec_config = HiggsAudioV2TokenizerConfig(
            acoustic_model_config=acoustic.to_dict(), semantic_model_config=semantic.to_dict(),
            target_bandwidths=[TINY_TARGET_BANDWIDTH_KBPS], sample_rate=TINY_SAMPLING_RATE,
            codebook_size=TINY_CODEC_CODEBOOK_SIZE, codebook_dim=8, semantic_sample_rate=16000,
            downsample_factor=320)
        num_codebooks = codec_config.num_quantizers
        torch.manual_seed(seed)
        codec = HiggsAudioV2TokenizerModel(codec_config).eval()
        # transformers initialises the RVQ codebooks to zeros (they are trained buffers); random codebooks make
        # different reference clips give different codes, which the batching tests rely on.
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for quantizer in codec.quantizer.quantizers:
                quantizer.codebook.embed.copy_(torch.randn(quantizer.codebook.embed.shape, generator=gen))
        codec.save_pretrained(codec_dir)
        codec = HiggsAudioV2TokenizerModel.from_pretrained(codec_dir)  # name_or_path -> the saved folder

        feature_extractor = DacFeatureExtractor(feature_size=1, sampling_rate=TINY_SAMPLING_RATE, hop_length=hop,
                                                padding_value=0.0)
        processor = HiggsAudioV2Processor(
            feature_extractor, tokenizer, codec, chat_template=CHAT_TEMPLATE,
            audio_stream_bos_id=TINY_CODEC_CODEBOOK_SIZE, audio_stream_eos_id=TINY_CODEC_CODEBOOK_SIZE + 1)

        ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
        config = HiggsAudioV2Config(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
            pad_token_id=ids[PAD_TOKEN], bos_token_id=ids[BOS_TOKEN], eos_token_id=ids[EOS_TOKEN],
            num_codebooks=num_codebooks, codebook_size=TINY_CODEC_CODEBOOK_SIZE + 2,
            audio_token_id=ids[AUDIO_TOKEN], audio_bos_token_id=ids[AUDIO_BOS_TOKEN],
            audio_delay_token_id=ids[AUDIO_DELAY_TOKEN], audio_stream_bos_id=TINY_CODEC_CODEBOOK_SIZE,
            audio_stream_eos_id=TINY_CODEC_CODEBOOK_SIZE + 1, initializer_range=0.5)
        torch.manual_seed(seed)
        model = HiggsAudioV2ForConditionalGeneration(config).eval()
        # What transformers' conversion script writes into the real checkpoint's generation config (a config of
        # its own, not one derived from the model config, or loading would drop these keys).
        model.generation_config._from_model_config = False
        model.generation_config.ras_win_len = DEFAULT_RAS_WIN_LEN
        model.generation_config.ras_win_max_num_repeat = DEFAULT_RAS_WIN_MAX_NUM_REPEAT
        model.save_pretrained(out_dir)
        processor.save_pretrained(out_dir)
        return out_dir

    # ------------------------------------------------------------------ batch pipeline

    def _conversation(self, row: AdapterRow) -> list[dict]:
        """The chat of one row, laid out as in the transformers docs' voice-cloning examples."""
        def text(t: str) -> dict:
            return {"type": "text", "text": t}

        system = {"role": "system", "content": [text(SYSTEM_PROMPT)]}
        scene = {"role": "scene", "content": [text(SCENE_PROMPT)]}
        tagged = False
        turns = []
        if row.reference_audio is not None:
            audio = {"type": "audio", "audio": np.asarray(row.reference_audio, dtype=np.float32)}
            reference_text = self._strip_markup(row.reference_text or "")
            if not reference_text.strip():
                # The docs' multi-speaker voice cloning layout: the clip under a speaker label in the scene, the text
                # tagged with that speaker.
                scene["content"] += [text(f"{SPEAKER_LABEL}:"), audio]
                tagged = True
            else:
                turns = [{"role": "user", "content": [text(reference_text)]}, {"role": "assistant", "content": [audio]}]

        def user(t: str) -> dict:
            spoken = self._strip_markup(t)
            return {"role": "user", "content": [text(f"[{SPEAKER_LABEL}] {spoken.strip()}" if tagged else spoken)]}

        for earlier in row.context:  # segment context: Boson's long-form chat (module docstring)
            turns += [user(earlier.text), {"role": "assistant", "content": [{"type": "audio", "audio": earlier}]}]
        return [system, scene, *turns, user(row.text)]

    def _strip_markup(self, text: str) -> str:
        """Remove the tokenizer's special-token strings (e.g. ``<|AUDIO_OUT|>``, ``<|eot_id|>``) from user text:
        the processor counts audio placeholders in the rendered prompt, so one typed by a user would break the
        batch, and none of them is speakable."""
        markup = getattr(self, "_markup", None)
        if markup is None:
            tok = self.processor.tokenizer
            markup = sorted({*tok.all_special_tokens, *map(str, tok.added_tokens_decoder.values()),
                             self.processor.audio_token, self.processor.audio_bos_token,
                             self.processor.audio_eos_token, self.processor.audio_delay_token}, key=len, reverse=True)
            self._markup = markup = [m for m in markup if m]
        for token in markup:
            text = text.replace(token, "")
        return text

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> dict[str, Any]:
        """Rows -> processor inputs on the adapter's device (left-padded text, right-padded reference frames).

        Each row keeps its own reference audio (float32 ``(num_samples,)`` at ``facts.sampling_rate``) and
        transcript (a missing or blank transcript puts the clip in the scene description instead). Rows with and
        without reference audio can share a batch.

        Raises:
            InputError: empty batch, empty text, or a reference that is not a 1-D float array.
        """
        if not rows:
            raise InputError("the batch is empty; pass at least one row")
        for i, row in enumerate(rows):
            if not row.text or not self._strip_markup(row.text).strip():
                raise InputError(Notice("higgs_text_empty", row=i))
            if row.reference_audio is not None and np.asarray(row.reference_audio).ndim != 1:
                raise InputError(f"row {i}: reference audio must be mono (num_samples,), got shape "
                                 f"{np.asarray(row.reference_audio).shape}")
        with_ref = [r.reference_audio is not None for r in rows]
        if any(r.context for r in rows):  # segment context: audio given as tokens, each row on its own
            batch = self._merge([self._process_with_tokens(self._conversation(r)) for r in rows])
        elif all(with_ref) or not any(with_ref):
            batch = self._process([self._conversation(r) for r in rows])
        else:
            batch = self._merge([self._process([self._conversation(r)]) for r in rows])
        # each row's own frame cap: a checkpoint max_length counts the row's own (unpadded) prompt
        caps = [self.row_max_new_tokens(params, int(n), row=i)
                for i, n in enumerate(batch["attention_mask"].sum(dim=-1).tolist())]
        return {"batch": batch, "seeds": [r.seed for r in rows], "row_max_new_tokens": caps}

    def _process(self, conversations: list[list[dict]]):
        batch = self.processor.apply_chat_template(
            conversations, add_generation_prompt=True, tokenize=True, return_dict=True, sanitize_control_tokens=True,
            processor_kwargs=self._processor_kwargs())
        return batch.to(self.device)

    def _process_with_tokens(self, conversation: list[dict]):
        """One row's processor inputs when some of its audio is given as generated tokens (a ``RowContext`` in
        place of a clip): what ``HiggsAudioV2Processor`` makes of the conversation (its chat template, then each
        audio's frames with stream BOS/EOS and the delay pattern, its placeholder expanded to as many audio
        positions), with a context segment's tokens standing for what the codec would have made of a clip. A clip
        (the reference) is encoded by the processor itself."""
        import torch

        processor = self.processor
        audios = [item["audio"] for message in conversation for item in message["content"]
                  if item.get("type") == "audio"]
        # no sanitize_control_tokens here (it needs tokenize=True): the texts are already stripped of every
        # special-token string (``_strip_markup``), which is all it would guard against
        text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        frames = []  # per audio, in prompt order: (num_positions, num_codebooks) int64, delay pattern applied
        for audio in audios:
            if isinstance(audio, RowContext):
                codes = torch.as_tensor(np.asarray(audio.tokens), dtype=torch.long, device=self.device)
                codes = codes.transpose(0, 1)[None]  # (1, num_codebooks, num_frames)
                bos = codes.new_full((*codes.shape[:2], 1), processor.audio_stream_bos_id)
                eos = codes.new_full((*codes.shape[:2], 1), processor.audio_stream_eos_id)
                frames.append(processor.build_delay_pattern(torch.cat([bos, codes, eos], dim=2))[0].transpose(0, 1))
            else:
                encoded = processor(text=[processor.audio_token], audio=[audio], **self._processor_kwargs())
                frames.append(encoded["audio_input_ids"][0].to(self.device))
        pieces = text.split(processor.audio_token)
        text = pieces[0] + "".join(processor.get_audio_tokens(f.shape[0]) + rest for f, rest in zip(frames, pieces[1:]))
        batch = processor.tokenizer([text], add_special_tokens=False, padding=True, padding_side="left",
                                    return_tensors="pt").to(self.device)
        out = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if frames:
            ids = torch.cat(frames)[None]
            out["audio_input_ids"] = ids
            out["audio_input_ids_mask"] = torch.ones(ids.shape[:2], dtype=torch.bool, device=self.device)
        return out

    def _merge(self, singles: list) -> dict:
        """Join one-row processor outputs into one batch the way the processor pads: text left-padded with the pad
        token, reference frames right-padded with the stream-EOS id and masked out. Needed for batches that mix rows
        with and without reference audio, which ``HiggsAudioV2Processor`` cannot build in one call."""
        import torch

        pad_id = self.processor.tokenizer.pad_token_id
        num_codebooks = self.model.config.num_codebooks
        seq_len = max(s["input_ids"].shape[1] for s in singles)
        num_frames = max(s["audio_input_ids"].shape[1] if "audio_input_ids" in s else 0 for s in singles)
        input_ids, attention_mask, audio_ids, audio_mask = [], [], [], []
        for s in singles:
            pad = seq_len - s["input_ids"].shape[1]
            input_ids.append(torch.nn.functional.pad(s["input_ids"], (pad, 0), value=pad_id))
            attention_mask.append(torch.nn.functional.pad(s["attention_mask"], (pad, 0), value=0))
            ids = s.get("audio_input_ids")
            if ids is None:
                ids = torch.empty((1, 0, num_codebooks), dtype=torch.long, device=self.device)
                mask = torch.empty((1, 0), dtype=torch.bool, device=self.device)
            else:
                mask = s["audio_input_ids_mask"]
            frames_pad = num_frames - ids.shape[1]
            audio_ids.append(torch.nn.functional.pad(ids, (0, 0, 0, frames_pad),
                                                     value=self.processor.audio_stream_eos_id))
            audio_mask.append(torch.nn.functional.pad(mask, (0, frames_pad), value=False))
        return {"input_ids": torch.cat(input_ids), "attention_mask": torch.cat(attention_mask),
                "audio_input_ids": torch.cat(audio_ids), "audio_input_ids_mask": torch.cat(audio_mask)}

    @contextmanager
    def _token_selection(self, raw: _RawLogits, selector: _TokenSelector):
        """Put ``raw`` first and ``selector`` last in the logits processors of one ``generate`` call.

        transformers' Higgs mixin builds its own list (delay pattern first, then score-only warpers) and admits only
        score-only processor types, so the instance's ``_get_logits_processor`` is wrapped for the call. Not
        re-entrant: one ``generate`` at a time per adapter (the engine runs batches from a single worker).
        """
        original = self.model._get_logits_processor

        def with_selection(*args, **kwargs):
            processors = original(*args, **kwargs)
            processors.insert(0, raw)
            processors.append(selector)
            return processors

        self.model._get_logits_processor = with_selection
        try:
            yield
        finally:
            del self.model._get_logits_processor  # back to the class method

    def _reference_histories(self, batch) -> list:
        """Per row, its reference audio frames ``(num_frames, num_codebooks)`` without the batch's right padding (the
        frames repetition-aware sampling looks back over at the first step)."""
        import torch

        num_codebooks = self.model.config.num_codebooks
        if "audio_input_ids" not in batch:
            empty = torch.empty((0, num_codebooks), dtype=torch.long, device=batch["input_ids"].device)
            return [empty for _ in range(batch["input_ids"].shape[0])]
        return [ids[mask] for ids, mask in zip(batch["audio_input_ids"], batch["audio_input_ids_mask"])]

    def generate(self, inputs: dict[str, Any], params: SynthesisParams):
        """Decode codec frames for the batch.

        Knobs not given come from the checkpoint (``facts.generation_defaults``). Greedy: argmax; otherwise
        temperature / top-k / top-p sampling; both followed by repetition-aware sampling when the generation config
        sets it (see the module docstring). Every draw of a row comes from a generator seeded with its seed, so a
        row is the same batched or alone, with the KV cache on or off.

        Returns:
            int64 tensor ``(batch_size, num_ref_frames + num_steps, num_codebooks)``: reference frames followed by
            the generated frames (first one all stream-BOS, delay pattern applied).
        Raises:
            torch.OutOfMemoryError: from the forward passes (the engine shrinks the batch).
        """
        import torch

        from tts_app.adapters.sampling import RowSampler

        params = self.resolve(params)
        defaults = self.facts.generation_defaults
        num_codebooks = self.model.config.num_codebooks
        # Token choice and repetition-aware sampling happen in _TokenSelector (per-row generators); transformers'
        # own path is left greedy with nothing to warp or redraw. These go as generate() kwargs: a None inside a
        # passed GenerationConfig means "not set" and is refilled from the checkpoint's config
        # (GenerationMixin._prepare_generation_config), which would leave upstream's global-RNG redraw on.
        # The batch runs to its largest row cap; a row's frames past its own cap are dropped (``_row_frames``): rows
        # are independent (per-row draws and redraw histories), so that is the row run to its own cap.
        kwargs: dict[str, Any] = dict(do_sample=False, temperature=None, top_k=None, top_p=None,
                                      max_new_tokens=max(inputs["row_max_new_tokens"]), use_cache=params.use_cache)
        for key in ("ras_win_len", "ras_win_max_num_repeat"):
            if getattr(self.model.generation_config, key, None) is not None:
                kwargs[key] = None
        # Scores reach the selector as (batch_size * num_codebooks, codebook_size), after the delay pattern.
        rows = RowSampler(inputs["seeds"], temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                          rows_per_seed=num_codebooks)
        batch = inputs["batch"]
        raw = _RawLogits()
        selector = _TokenSelector(raw, None if params.greedy else rows, rows.generators(batch["input_ids"].device),
                                  self._reference_histories(batch), num_codebooks, defaults.ras_win_len,
                                  defaults.ras_win_max_num_repeat, self.processor.audio_stream_bos_id,
                                  self.processor.audio_stream_eos_id)
        self._last_selector = selector  # the last call's redraw count, for tests
        with torch.inference_mode(), self._token_selection(raw, selector):
            return self.model.generate(**batch, **kwargs)

    def stop_reasons(self, outputs, inputs: dict[str, Any]) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row without an all-stream-EOS frame among its generated frames (still speaking,
        or still flushing its delayed codebooks, at the cap), else ``END_OF_SPEECH``."""
        eos = self.processor.audio_stream_eos_id
        return [StopReason.END_OF_SPEECH if bool((row == eos).all(-1).any()) else StopReason.MAX_NEW_TOKENS
                for row in self._row_frames(outputs, inputs)]

    def _row_frames(self, outputs, inputs: dict[str, Any]) -> list:
        """Per row its generated frames ``(num_steps, num_codebooks)`` up to its own cap (``preprocess``'s
        ``row_max_new_tokens``; the first frame is the all-stream-BOS one, which counts as a step, as in
        transformers' ``generate``)."""
        batch = inputs["batch"]
        num_ref_frames = batch["audio_input_ids"].shape[1] if "audio_input_ids" in batch else 0
        generated = outputs[:, num_ref_frames:]  # (batch_size, num_steps, num_codebooks)
        caps = inputs.get("row_max_new_tokens") or [generated.shape[1]] * generated.shape[0]
        return [row[:cap] for row, cap in zip(generated, caps)]

    def postprocess(self, outputs, inputs: dict[str, Any]) -> list[np.ndarray]:
        """Codec frames -> one float32 waveform ``(num_samples,)`` per row at ``facts.sampling_rate``.

        Each row's frames run from its generated stream-BOS frame to its first all-stream-EOS frame (exclusive);
        the delay pattern is reverted with the processor's ``revert_delay_pattern`` and the codec decodes them. A
        row that produced fewer frames than the delay pattern needs gives an empty array.
        """
        import torch

        waves = []
        codec = self.processor.audio_tokenizer
        for row in self._row_frames(outputs, inputs):
            codes = self._row_codes(row)
            if codes is None:
                waves.append(np.zeros(0, dtype=np.float32))
                continue
            with torch.inference_mode():
                audio = codec.decode(codes.transpose(0, 1).unsqueeze(0).to(codec.device)).audio_values
            waves.append(audio.reshape(-1).float().cpu().numpy().astype(np.float32))
        return waves

    def _row_codes(self, row):
        """A row's generated codec codes ``(num_frames, num_codebooks)`` int64: its frames from the stream-BOS frame
        (exclusive) to its first all-stream-EOS frame (exclusive), the delay pattern reverted, ids clipped to the
        codebook; None when it made fewer frames than the delay pattern needs."""
        eos = self.processor.audio_stream_eos_id
        ended = (row == eos).all(-1).nonzero()
        end = int(ended[0, 0]) if len(ended) else row.shape[0]
        frames = row[1:end]  # skip the all-BOS frame
        if frames.shape[0] < self.model.config.num_codebooks:
            return None
        return self.processor.revert_delay_pattern(frames).clip(0, self.processor.audio_stream_bos_id - 1)

    def segment_contexts(self, outputs, inputs: dict[str, Any]) -> list:
        """Per row its generated codes (``_row_codes``, as numpy int64 ``(num_frames, num_codebooks)``), what
        Boson AI's long-form generation carries into the next chunk's prompt; None for a row without audio."""
        contexts = []
        for row in self._row_frames(outputs, inputs):
            codes = self._row_codes(row)
            contexts.append(None if codes is None else codes.cpu().numpy().astype(np.int64))
        return contexts
