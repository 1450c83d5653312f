"""Dia (Nari Labs) adapter: byte-level text encoder + audio decoder over 9 DAC codebooks with a delay pattern,
DAC codec at 44.1 kHz, classifier-free guidance (CFG) that doubles the forward batch.

Everything Dia-specific lives here. Model and processor are transformers' own ``DiaForConditionalGeneration`` and
``DiaProcessor`` (transformers/models/dia/). Layout of one row, as Dia expects it:

* encoder (text): ``"[S1] <reference text> <text>"`` as UTF-8 bytes, RIGHT-padded (Dia's encoder always uses
  positions 0..L-1 and masks the padding, so right padding keeps a row independent of its batch-mates). The prompt
  follows Dia's published guidelines (nari-labs/dia README): it begins with ``[S1]`` and speaker tags alternate,
  never the same tag twice in a row, so the reference transcript and the text to say in its voice are one ``[S1]``
  turn (``dialogue``), not ``[S1] ... [S1] ...``;
* decoder (audio): ``BOS + DAC codes of the reference audio`` (the audio prompt) with the delay pattern applied,
  LEFT-padded with BOS and a zero attention mask, so every row's prompt ends at the same index and generation
  starts in lock-step. Decoder position ids are passed explicitly (``cumsum(mask) - 1``) so a padded row sees the
  same RoPE positions as when it runs alone.

Greedy decoding is transformers' ``generate(do_sample=False)`` with the checkpoint's ``top_k``: Dia's CFG processor
(``DiaClassifierFreeGuidanceLogitsProcessor``) keeps only the top-k tokens of the guided scores even when greedy, and
upstream reads that k from the generation config (45 for Dia), so dropping it would change greedy output.

Sampling: Dia's ``generate()`` drops user ``logits_processor`` lists and draws with the global torch RNG, so a row's
draws would depend on its batch-mates. We decode with ``do_sample=False`` and complete Dia's processor list into the
one transformers builds for sampling (temperature before Dia's EOS channel filter, top-k and top-p after it, the EOS
delay pattern last), then add ``SampledTokenProcessor`` (tts_app/adapters/sampling.py): each row draws
``multinomial(probs of its num_channels codebooks, 1)`` from a generator seeded with the row's seed, the call
transformers' ``_sample`` makes on the global RNG for that row alone. So a row seeded with ``s`` gives the tokens of
``torch.manual_seed(s); model.generate(...)`` for it alone, batched or not (tests/integration/
test_end_to_end_upstream.py).
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tts_app.adapters.base import (DTYPE_BYTES, AdapterRow, GenerationDefaults, ModelFacts, TTSAdapter,
                                   cap_total_positions)
from tts_app.speaking_rate import max_chars_for_speech_s
from tts_app.errors import ConfigError, InputError, ModelLoadError
from tts_app.frontend.messages import Notice, register
from tts_app.request import StopReason, SynthesisParams

# The refusal every door shows when a clone has no transcript, in English and Chinese (``tts_app.frontend.messages``).
DIA_EN = {
    "dia_needs_transcript": "Dia clones a voice only with the reference audio's transcript{whose}: pass --ref-text "
                            "(the UI's 'Reference text' box, or prompt_text in a JSONL line; --transcribe fills it), "
                            "or leave out the reference audio",
    "dia_of_speaker": " of {speaker}",
    "dia_text_bytes": "row {row}: text plus reference text is {num_bytes} bytes; Dia reads at most {max_bytes}; "
                      "shorten the segment",
    "dia_reference_positions": "row {row}: the reference audio takes {prompt_positions} of the checkpoint's "
                               "{max_length} decoder positions (max_length), leaving none for new audio; use a "
                               "shorter reference clip",
    "dia_decoder_positions": "row {row}: reference audio + max_new_tokens need {num_positions} decoder positions; Dia "
                             "has {max_positions}; use a shorter reference or lower max_new_tokens",
    "dia_speakers": "Dia's dialogue prompt takes {max_speakers} speakers ([S1], [S2]); this one has {num_speakers}",
    "dia_voice_every": "Dia's two-speaker prompt needs a voice for every speaker or for none; {missing} has none",
    "dia_cfg_scale": "cfg_scale={cfg_scale} must be >= 1 for Dia (1 turns guidance off, 3 is the default)",
}
DIA_ZH = {
    "dia_needs_transcript": "Dia 只有在提供参考音频的文字稿时才能克隆声音{whose}：请传入 --ref-text（界面上的“参考文本”框，"
                            "或 JSONL 行中的 prompt_text；--transcribe 可自动填写），或不使用参考音频",
    "dia_of_speaker": "（{speaker}）",
    "dia_text_bytes": "第 {row} 行：文本加参考文本共 {num_bytes} 字节；Dia 最多读取 {max_bytes} 字节；请缩短这一段",
    "dia_reference_positions": "第 {row} 行：参考音频占用了检查点 {max_length} 个解码器位置（max_length）中的 "
                               "{prompt_positions} 个，没有留给新音频的位置；请用更短的参考音频",
    "dia_decoder_positions": "第 {row} 行：参考音频加 max_new_tokens 需要 {num_positions} 个解码器位置；Dia 只有 "
                             "{max_positions} 个；请用更短的参考音频或调小 max_new_tokens",
    "dia_speakers": "Dia 的对话提示最多 {max_speakers} 个说话人（[S1]、[S2]）；这段对话有 {num_speakers} 个",
    "dia_voice_every": "Dia 的双人提示要么每个说话人都有声音，要么都没有；{missing} 没有声音",
    "dia_cfg_scale": "Dia 的 cfg_scale={cfg_scale} 必须 >= 1（1 表示关闭引导，默认为 3）",
}
register(__name__, DIA_EN, DIA_ZH)

# Speaker tag Dia's transcripts start with (nari-labs/dia README: "[S1] ... [S2] ...").
SPEAKER_TAGS = ("[S1]", "[S2]")
# Non-verbal tags Dia was trained with (nari-labs/dia README, "Features": the list of supported non-verbal tags). The
# front end passes these (and the speaker tags) through to Dia and strips any other bracketed tag
# (``ModelFacts.control_tags``).
NONVERBAL_TAGS = ("(laughs)", "(clears throat)", "(sighs)", "(gasps)", "(coughs)", "(singing)", "(sings)",
                  "(mumbles)", "(beep)", "(groans)", "(sniffs)", "(claps)", "(screams)", "(inhales)", "(exhales)",
                  "(applause)", "(burps)", "(humming)", "(sneezes)", "(chuckle)", "(whistles)")

# Sampling defaults from the transformers Dia model doc example (docs/source/en/model_doc/dia.md:
# guidance_scale=3.0, temperature=1.8, top_p=0.90, top_k=45); a checkpoint's generation_config overrides them.
DEFAULT_CFG_SCALE = 3.0
DEFAULT_TEMPERATURE = 1.8
DEFAULT_TOP_P = 0.90
DEFAULT_TOP_K = 45
_DOC_EXAMPLE = "transformers Dia docs example (docs/source/en/model_doc/dia.md)"
# Dia is trained on English only (nari-labs/dia README: "Dia currently only supports English generation").
LANGUAGES = ("en",)

# Dia produces 5-20 s of audio per call well (nari-labs/dia README, "Features"/"Generation guidelines"); at
# ~15 characters/s of English speech 200 characters is ~13 s.
MAX_SEGMENT_CHARS = 200
# Decode-step cap when the checkpoint's generation_config gives none: 20 s of audio at the codec frame rate.
DEFAULT_MAX_AUDIO_S = 20.0

# Samples used to measure the tokenizer's positions per character (ASCII is 1 byte, common hanzi 3 bytes).
_ENGLISH_SAMPLE = "The quick brown fox jumps over the lazy dog, twice."
_CHINESE_SAMPLE = "今天天气很好，我们一起去公园散步吧。"


# One text per processor call: no padding (and no "max_length is ignored" warning); we collate the batch ourselves.
_NO_TEXT_PADDING = {"padding": False}


_TAG_RE = re.compile(r"(\[S[12]\])")


def dialogue(*texts: str) -> str:
    """Join transcript pieces into one Dia prompt that follows its published prompt guidelines (nari-labs/dia README,
    "Generation Guidelines": always begin with ``[S1]``, always alternate ``[S1]`` and ``[S2]``, never the same tag
    twice in a row).

    A piece without a leading speaker tag is spoken by ``[S1]`` (the reference voice); a tag equal to the one before
    it is dropped, so the reference transcript and the text spoken in its voice form one ``[S1]`` turn
    (``"[S1] reference text. text to speak."``) instead of ``"[S1] ... [S1] ..."``, and a two-speaker transcript
    ending in ``[S2]`` is followed by ``[S1] text``, as in Dia's voice-cloning example.
    """
    turns: list[list[str]] = []  # [tag, text] per turn, tags alternating
    for piece in texts:
        parts = _TAG_RE.split(piece.strip())
        # parts: [text before the first tag, tag, text, tag, text, ...]
        pieces = [(None, parts[0])] + [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]
        for tag, words in pieces:
            words = words.strip()
            if tag is None and not words:
                continue
            if tag is None:
                tag = SPEAKER_TAGS[0]
            if turns and turns[-1][0] == tag:
                if words:
                    turns[-1][1] = f"{turns[-1][1]} {words}".strip()
            else:
                turns.append([tag, words])
    return " ".join(f"{tag} {words}".strip() for tag, words in turns)


class _RowCapProcessor:
    """A logits processor ending each row at its own decode-step cap: at step ``cap - max_delay - 1`` of a row it
    forces EOS in codebook 0, exactly what transformers' ``DiaEOSDelayPatternLogitsProcessor`` does for the whole
    batch at the batch's cap (that processor, which runs next, then flushes the delayed codebooks). Scores arrive as
    ``(batch_size * num_channels, vocab_size)``; the current length ``input_ids.shape[1]`` counts the padded prompt
    (``prompt_len``) plus the steps made."""

    def __init__(self, prompt_len: int, caps: list[int], max_delay: int, eos_token_id: int, num_channels: int):
        self.prompt_len = prompt_len
        self.force_at = [cap - max_delay - 1 for cap in caps]
        self.eos_token_id = eos_token_id
        self.num_channels = num_channels

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_len
        rows = [i for i, at in enumerate(self.force_at) if at == step]
        if rows:
            scores = scores.view(-1, self.num_channels, scores.shape[-1])  # (batch, channels, vocab)
            scores[rows, 0, :] = -float("inf")
            scores[rows, 0, self.eos_token_id] = 0.0
            scores = scores.view(-1, scores.shape[-1])
        return scores


@dataclass
class DiaInputs:
    """Model inputs of one batch (tensors on the adapter's device).

    Attributes:
        input_ids: ``(batch_size, text_len)`` int64 UTF-8 byte ids, right-padded with 0.
        attention_mask: ``(batch_size, text_len)`` int64, 1 on real text.
        decoder_input_ids: ``(batch_size, prompt_len + max_delay, num_channels)`` int64, delayed audio prompt,
            left-padded with BOS.
        decoder_attention_mask: ``(batch_size, prompt_len + max_delay)`` int64, 0 on the left padding.
        decoder_position_ids: ``(batch_size, prompt_len + max_delay)`` int64, ``cumsum(mask) - 1`` clamped at 0.
        audio_prompt_len: ``prompt_len`` (same for every row thanks to the left padding): index of the first
            generated frame after reverting the delay.
        seeds: one seed per row.
        max_new_tokens: the decode-step cap of this batch, the largest of ``row_max_new_tokens``.
        row_max_new_tokens: each row's own cap (``TTSAdapter.row_max_new_tokens``: the request's, bounded by the
            checkpoint's ``max_length`` less the row's own prompt), to tell a row cut at its cap from one that ended.
    """

    input_ids: Any
    attention_mask: Any
    decoder_input_ids: Any
    decoder_attention_mask: Any
    decoder_position_ids: Any
    audio_prompt_len: int
    seeds: list[int]
    max_new_tokens: int
    row_max_new_tokens: list[int]


class DiaAdapter(TTSAdapter):
    """Adapter for Dia checkpoints (``model_type == "dia"``, e.g. ``nari-labs/Dia-1.6B-0626``).

    Reference audio is the audio prompt (its DAC codes start the decoder) and its transcript is prepended to the text,
    as Dia's voice cloning expects; reference audio without a transcript is refused (``InputError``).
    """

    family = "dia"
    display_name = "Dia"
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "max_length is the total decoder length (prompt + frames; transformers' conversion writes only it): each "
        "row gets max_length less its own prompt steps",
        "temperatures below 1 are honoured (transformers' Dia generate clamps them to 1)",
        "each row draws from its own generator seeded with its seed (transformers' generate draws from the global "
        "RNG): the draws of torch.manual_seed(seed) and generate for that row alone, whatever its batch-mates",
    )

    def __init__(self, model, processor, device: str, dtype: str):
        self.config = model.config
        self.delay_pattern = list(self.config.delay_pattern)
        self.max_delay = max(self.delay_pattern)
        self.num_channels = self.config.decoder_config.num_channels
        super().__init__(model, processor, device, dtype)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32") -> "DiaAdapter":
        """Load ``DiaForConditionalGeneration`` and ``AutoProcessor`` (``DiaProcessor`` + DAC codec) from a hub id or
        a local folder with the same ``from_pretrained(id_or_path)`` calls (``TTSAdapter._load_pretrained``).

        Args:
            id_or_path: hub id (e.g. "nari-labs/Dia-1.6B-0626") or a folder written by ``make_tiny_checkpoint``.
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32", "bfloat16" or "float16" for the Dia model; the DAC codec stays float32.

        Raises:
            ModelLoadError: unknown dtype, or the model/processor cannot be loaded, or the processor is not Dia's.
        """
        from transformers import DiaForConditionalGeneration

        model, processor = cls._load_pretrained(DiaForConditionalGeneration, id_or_path, device, dtype)
        if type(processor).__name__ != "DiaProcessor":
            raise ModelLoadError(f"{str(id_or_path)!r}: expected a DiaProcessor, found {type(processor).__name__}")
        return cls(model, processor, device=device, dtype=dtype)

    def _measure_facts(self) -> ModelFacts:
        """Facts from the loaded config, plus positions per char / per reference second measured with the processor.

        KV cache layout (transformers ``EncoderDecoderCache``): a self-attention stack that grows by one position per
        decoder step, and a cross-attention stack fixed at the encoder (text) length. ``num_layers``/``num_kv_heads``/
        ``head_dim`` describe the self-attention stack; ``estimate_positions`` converts the cross-attention part into
        equivalent self-attention positions so that ``kv_bytes_per_position x positions x cfg_multiplier`` is the
        analytic size of both stacks for one row.
        """
        dec = self.config.decoder_config
        codec = self.processor.audio_tokenizer.config
        sampling_rate = int(self.processor.feature_extractor.sampling_rate)
        frames_per_second = codec.sampling_rate / math.prod(codec.downsampling_ratios)
        tokenizer = self.processor.tokenizer
        # Upper bound over English (1 byte/char) and Chinese (3 bytes/char), so memory estimates never fall short.
        text_positions_per_char = max(
            len(tokenizer(sample, add_special_tokens=False)["input_ids"]) / len(sample)
            for sample in (_ENGLISH_SAMPLE, _CHINESE_SAMPLE)
        )
        # Audio prompt length for 1 s and 4 s of silence: the difference is the positions per reference second.
        lengths = []
        for seconds in (1, 4):
            silence = np.zeros(seconds * sampling_rate, dtype=np.float32)
            out = self.processor(text=["[S1] a"], audio=[silence], sampling_rate=sampling_rate,
                                 text_kwargs=_NO_TEXT_PADDING, return_tensors="pt")
            lengths.append(out["decoder_attention_mask"].shape[1])
        reference_positions_per_second = (lengths[1] - lengths[0]) / 3.0

        gen = self.model.generation_config
        fallback_steps = min(int(DEFAULT_MAX_AUDIO_S * frames_per_second) + self.max_delay,
                             dec.max_position_embeddings // 2)
        defaults = GenerationDefaults.from_generation_config(gen, family_defaults={
            "greedy": (False, f"{_DOC_EXAMPLE}: do_sample=True"),
            "temperature": (DEFAULT_TEMPERATURE, _DOC_EXAMPLE),
            "top_p": (DEFAULT_TOP_P, _DOC_EXAMPLE),
            "top_k": (DEFAULT_TOP_K, _DOC_EXAMPLE),
            "cfg_scale": (DEFAULT_CFG_SCALE, _DOC_EXAMPLE),
            "max_new_tokens": (fallback_steps, f"tts_app default: {DEFAULT_MAX_AUDIO_S:g} s of audio plus the "
                                               f"{self.max_delay}-step delay flush"),
        })
        max_audio_s = (defaults.max_new_tokens - self.max_delay - 1) / frames_per_second
        self.cross_kv_bytes_per_position = (2 * dec.num_hidden_layers * dec.cross_num_key_value_heads
                                            * dec.cross_head_dim * DTYPE_BYTES[self.dtype])
        return self._model_facts(
            sampling_rate=sampling_rate,
            num_layers=dec.num_hidden_layers,
            num_kv_heads=dec.num_key_value_heads,
            head_dim=dec.head_dim,
            cfg_multiplier=2,
            frames_per_second=float(frames_per_second),
            text_positions_per_char=float(text_positions_per_char),
            reference_positions_per_second=reference_positions_per_second,
            max_segment_chars=min(MAX_SEGMENT_CHARS, max_chars_for_speech_s(max(0.0, max_audio_s), LANGUAGES)),
            generation_defaults=defaults,
            languages=LANGUAGES,
            needs_reference_text=True,  # Dia clones a voice only with the reference audio's transcript
            control_tags=SPEAKER_TAGS + NONVERBAL_TAGS,
            max_dialogue_speakers=len(SPEAKER_TAGS),
        )

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """Equivalent self-attention positions of one row at the end of decoding.

        decoder positions = BOS + reference frames (``reference_s x reference_positions_per_second``, rounded up) +
        ``max_new_tokens`` (generate returns ``audio_prompt_len + max_new_tokens`` steps), at most the checkpoint's
        ``max_length`` plus the delay flush; encoder positions =
        (text + reference text + two "[S1] " tags) x ``text_positions_per_char``. The cross-attention cache holds
        encoder positions at ``cross_kv_bytes_per_position`` bytes each, so they are scaled by
        ``cross_kv_bytes_per_position / facts.kv_bytes_per_position``.
        """
        f = self.facts
        prompt = 1 + math.ceil(reference_s * f.reference_positions_per_second)
        max_length = f.generation_defaults.max_length
        decoder_positions = cap_total_positions(prompt, max_new_tokens,
                                                None if max_length is None else max_length + self.max_delay)
        encoder_positions = math.ceil((text_chars + reference_text_chars + 10) * f.text_positions_per_char)
        cross_as_self = math.ceil(encoder_positions * self.cross_kv_bytes_per_position / f.kv_bytes_per_position)
        return decoder_positions + cross_as_self

    # --------------------------------------------------------------- tiny model
    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a tiny random Dia checkpoint (real architecture, tiny dims) into ``out_dir``.

        Layout: ``config.json`` + ``model.safetensors`` + ``generation_config.json`` (DiaForConditionalGeneration),
        ``processor_config.json`` + ``tokenizer_config.json`` (DiaProcessor: DiaFeatureExtractor at 44.1 kHz,
        DiaTokenizer = Dia's own byte-level tokenizer, built in code) and ``dac/`` (a tiny DacModel codec with the real
        9 codebooks x 1024 codes and hop 512). As with the hub checkpoint, ``processor_config.json`` names the codec by
        path; here that is the absolute path of ``out_dir/dac``, so move the folder by regenerating it.

        The tokenizer is Dia's real one rather than ``tiny_vocab.build_char_tokenizer``: it is byte-level (UTF-8 bytes
        plus ``[S1]``/``[S2]``), needs no vocabulary file, already covers ASCII and all Chinese, and so gives the real
        checkpoint's positions per character.

        Same seed -> identical weights. Returns ``out_dir``.
        """
        import torch
        from transformers import (DacConfig, DacModel, DiaConfig, DiaDecoderConfig, DiaEncoderConfig,
                                  DiaFeatureExtractor, DiaForConditionalGeneration, DiaProcessor, DiaTokenizer)

        out_dir = Path(out_dir).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(seed)
        encoder_config = DiaEncoderConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
            intermediate_size=64, vocab_size=256,
        )
        # Real vocabulary (1024 codes + EOS 1024, PAD 1025, BOS 1026) and 9 channels, tiny width; GQA as the real one.
        decoder_config = DiaDecoderConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, cross_num_attention_heads=2, cross_head_dim=16, cross_num_key_value_heads=2,
            cross_hidden_size=32, vocab_size=1028, num_channels=9,
        )
        config = DiaConfig(encoder_config=encoder_config, decoder_config=decoder_config)
        model = DiaForConditionalGeneration(config)
        # Short default decode so trying the app on a tiny model takes seconds (~1 s of audio).
        model.generation_config.max_new_tokens = 100
        model.generation_config.guidance_scale = DEFAULT_CFG_SCALE
        model.generation_config.temperature = DEFAULT_TEMPERATURE
        model.generation_config.top_p = DEFAULT_TOP_P
        model.generation_config.top_k = DEFAULT_TOP_K
        model.generation_config.do_sample = True
        model.save_pretrained(out_dir)

        codec = DacModel(DacConfig(encoder_hidden_size=4, decoder_hidden_size=32, n_codebooks=9, codebook_size=1024,
                                   codebook_dim=8, downsampling_ratios=[2, 4, 8, 8], sampling_rate=44100))
        codec.save_pretrained(out_dir / "dac")
        codec = DacModel.from_pretrained(out_dir / "dac")  # name_or_path -> the saved folder
        processor = DiaProcessor(DiaFeatureExtractor(sampling_rate=44100, hop_length=512), DiaTokenizer(), codec)
        processor.save_pretrained(out_dir)
        return out_dir

    # ------------------------------------------------------------ the pipeline
    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> DiaInputs:
        """Rows -> ``DiaInputs`` (see there for shapes). Each row is run through ``DiaProcessor`` alone (its own
        reference audio -> DAC codes -> delay pattern), then the batch is collated: text right-padded, audio prompt
        left-padded with BOS (identical to what DiaProcessor does for a batch, which also pads with BOS on the left).

        Raises:
            InputError: empty batch or text, reference audio without its transcript, wrong reference array, a
                row longer than the model's positions, max_new_tokens too small to yield a frame, cfg_scale < 1.
        """
        import torch

        if not rows:
            raise InputError("the batch is empty; give at least one row")
        self._sampling_knobs(params)  # validates cfg_scale before any work
        bos = self.config.decoder_config.bos_token_id
        requested = self.max_new_tokens(params)
        if requested <= self.max_delay + 1:
            raise InputError(
                f"max_new_tokens={requested} is too small for Dia: the last {self.max_delay + 1} decode steps "
                f"flush the delayed codebooks; use at least {self.max_delay + 2} "
                f"(about {self.facts.frames_per_second:.0f} more per second of audio)")
        sampling_rate = self.facts.sampling_rate
        per_row, caps = [], []
        for i, row in enumerate(rows):
            if not row.text.strip():
                raise InputError(f"row {i}: text is empty; give the text to speak")
            text, audio = self._row_prompt(i, row)
            # DiaProcessor silently truncates the text to the tokenizer's max_length, so check before it runs.
            text_len = len(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])
            if text_len > self.config.encoder_config.max_position_embeddings:
                raise InputError(Notice("dia_text_bytes", row=i, num_bytes=text_len,
                                        max_bytes=self.config.encoder_config.max_position_embeddings))
            if audio is not None:
                out = self.processor(text=[text], audio=[audio], sampling_rate=sampling_rate,
                                     text_kwargs=_NO_TEXT_PADDING, return_tensors="pt")
            else:
                out = self.processor(text=[text], text_kwargs=_NO_TEXT_PADDING, return_tensors="pt")
            # The prompt as transformers' Dia generate counts it: BOS + reference frames, without the delay padding.
            # A checkpoint max_length (the conversion script's 3072, "Decoder max length") bounds prompt + audio
            # frames; generate runs max(delay_pattern) flush steps past it (generation_dia.py adds them).
            prompt_len = out["decoder_attention_mask"].shape[1] - self.max_delay
            cap = self.row_max_new_tokens(params, prompt_len, row=i, extra_steps=self.max_delay)
            if cap <= self.max_delay + 1:
                raise InputError(Notice("dia_reference_positions", row=i, prompt_positions=prompt_len,
                                        max_length=self.facts.generation_defaults.max_length))
            frames_len = prompt_len + cap - self.max_delay  # positions holding audio frames (flush steps excluded)
            if frames_len > self.config.decoder_config.max_position_embeddings:
                raise InputError(Notice("dia_decoder_positions", row=i, num_positions=frames_len,
                                        max_positions=self.config.decoder_config.max_position_embeddings))
            per_row.append(out)
            caps.append(cap)

        batch_size = len(rows)
        text_len = max(o["input_ids"].shape[1] for o in per_row)
        decoder_len = max(o["decoder_attention_mask"].shape[1] for o in per_row)
        pad_id = self.processor.tokenizer.pad_token_id
        input_ids = torch.full((batch_size, text_len), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((batch_size, text_len), dtype=torch.long)
        decoder_input_ids = torch.full((batch_size, decoder_len, self.num_channels), bos, dtype=torch.long)
        decoder_attention_mask = torch.zeros((batch_size, decoder_len), dtype=torch.long)
        for b, out in enumerate(per_row):
            n = out["input_ids"].shape[1]
            input_ids[b, :n] = out["input_ids"][0]  # right padding (encoder positions start at 0)
            attention_mask[b, :n] = out["attention_mask"][0]
            m = out["decoder_attention_mask"].shape[1]
            decoder_input_ids[b, decoder_len - m:] = out["decoder_input_ids"][0]  # left padding with BOS
            decoder_attention_mask[b, decoder_len - m:] = out["decoder_attention_mask"][0]
        decoder_position_ids = (decoder_attention_mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.device
        return DiaInputs(
            input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev),
            decoder_input_ids=decoder_input_ids.to(dev), decoder_attention_mask=decoder_attention_mask.to(dev),
            decoder_position_ids=decoder_position_ids.to(dev),
            audio_prompt_len=decoder_len - self.max_delay, seeds=[row.seed for row in rows],
            max_new_tokens=max(caps), row_max_new_tokens=caps,
        )

    @staticmethod
    def _check_reference(i: int, audio, transcript: str | None, speaker: str | None = None) -> np.ndarray:
        """A reference clip as float32 ``(num_samples,)``, and its transcript present.

        Raises:
            InputError: not a non-empty float32 mono array; ``ConfigError`` (field "reference_text", a zh/en
                ``Notice``): no transcript (Dia clones only with it).
        """
        audio = np.asarray(audio)
        if audio.ndim != 1 or audio.size == 0 or audio.dtype != np.float32:
            raise InputError(f"row {i}: reference audio must be a non-empty float32 mono array "
                             f"(num_samples,), got dtype {audio.dtype} shape {audio.shape}")
        if not transcript or not transcript.strip():
            # No row prefix: the row index means nothing to the user, and the message is the same for all.
            whose = Notice("dia_of_speaker", speaker=speaker) if speaker else ""
            raise ConfigError("reference_text", Notice("dia_needs_transcript", whose=whose))
        return audio

    def _row_prompt(self, i: int, row: AdapterRow) -> tuple[str, np.ndarray | None]:
        """(encoder text, audio prompt or None) of one row.

        An ordinary row: ``[S1] <reference text> <text>`` with its reference clip. A dialogue row
        (``row.turns``, at most 2 voices): Dia's two-speaker prompt, as in its voice cloning (nari-labs/dia README and
        voice-cloning example: the tagged transcript of an audio prompt holding both voices, then the script to say):
        ``[S1] <speaker 1's transcript> [S2] <speaker 2's transcript>`` followed by the turns tagged ``[S1]``/``[S2]``,
        with the two reference clips one after the other as the audio prompt. Either every voice has a clip or none does (then
        the turns alone, in voices Dia picks).

        Raises:
            InputError: a bad clip, a clip without transcript, more than 2 voices, or only some voices with a clip.
        """
        if not row.is_dialogue:
            if row.reference_audio is None:
                return dialogue(row.text), None
            audio = self._check_reference(i, row.reference_audio, row.reference_text)
            return dialogue(row.reference_text, row.text), audio
        if len(row.voices) > len(SPEAKER_TAGS):
            raise InputError(Notice("dia_speakers", max_speakers=len(SPEAKER_TAGS), num_speakers=len(row.voices)))
        script = [f"{SPEAKER_TAGS[t.speaker]} {t.text.strip()}" for t in row.turns]
        voiced = [v.reference_audio is not None for v in row.voices]
        if not any(voiced):
            return dialogue(*script), None
        if not all(voiced):
            missing = ", ".join(SPEAKER_TAGS[k] for k, has in enumerate(voiced) if not has)
            raise InputError(Notice("dia_voice_every", missing=missing))
        clips = [self._check_reference(i, v.reference_audio, v.reference_text, SPEAKER_TAGS[k])
                 for k, v in enumerate(row.voices)]
        transcripts = [f"{SPEAKER_TAGS[k]} {v.reference_text.strip()}" for k, v in enumerate(row.voices)]
        return dialogue(*transcripts, *script), np.concatenate(clips)

    def _sampling_knobs(self, params: SynthesisParams) -> SynthesisParams:
        """``params`` with every knob not given set to the checkpoint default (``facts.generation_defaults``: the
        checkpoint's generation_config, else the transformers Dia doc example). Temperatures below 1 are honoured
        (transformers' own Dia sampling path clamps them to 1).

        Raises:
            InputError: cfg_scale below 1.
        """
        resolved = self.resolve(params)
        if resolved.cfg_scale < 1:
            raise InputError(Notice("dia_cfg_scale", cfg_scale=resolved.cfg_scale))
        return resolved

    @contextmanager
    def _processors(self, *, guidance_top_k: int | None, before_channel_filter: list = (),
                    after_channel_filter: list = (), before_delay_pattern: list = (), last: list = ()):
        """Complete Dia's processor list for one ``generate(do_sample=False)`` call, and give Dia's CFG processor
        its top-k (as ``generate(top_k=...)`` would).

        Dia's ``_get_logits_processor`` (transformers generation_dia.py) builds its own list and ignores the
        ``logits_processor`` argument of ``generate()``, so the instance method is wrapped for the call. Greedy, the
        list is ``[CFG, EOS channel filter, EOS delay pattern]``; with sampling transformers builds ``[CFG,
        temperature, EOS channel filter, top-k, top-p, EOS delay pattern]`` (the temperature warper is Dia's own,
        ahead of the channel filter; the other warpers are generation/utils.py's, appended after it) and draws
        after the last one. The lists given here are inserted at those places: ``before_channel_filter``,
        ``after_channel_filter``, ``before_delay_pattern``, and ``last`` after everything. Not re-entrant: one
        ``generate`` at a time per adapter (the engine runs batches from a single worker).

        Raises:
            RuntimeError: the installed transformers builds Dia's list in another order.
        """
        from transformers.generation.logits_process import (DiaClassifierFreeGuidanceLogitsProcessor,
                                                            DiaEOSChannelFilterLogitsProcessor,
                                                            DiaEOSDelayPatternLogitsProcessor)

        original = self.model._get_logits_processor

        def completed(*args, **kwargs):
            processors = original(*args, **kwargs)
            filters = [i for i, p in enumerate(processors) if isinstance(p, DiaEOSChannelFilterLogitsProcessor)]
            if not isinstance(processors[-1], DiaEOSDelayPatternLogitsProcessor) or len(filters) != 1:
                raise RuntimeError("unexpected Dia logits processor order; check the transformers version")
            for p in processors:
                if isinstance(p, DiaClassifierFreeGuidanceLogitsProcessor):
                    p.guidance_top_k = guidance_top_k
            at = filters[0]
            processors[at + 1:at + 1] = list(after_channel_filter)
            processors[at:at] = list(before_channel_filter)
            processors[-1:-1] = list(before_delay_pattern)
            processors.extend(last)
            return processors

        self.model._get_logits_processor = completed
        try:
            yield
        finally:
            del self.model._get_logits_processor  # back to the class method

    def generate(self, inputs: DiaInputs, params: SynthesisParams):
        """Run Dia's decode loop. Returns ``(batch_size, audio_prompt_len + num_steps, num_channels)`` int64 codes
        with the delay pattern (prompt included), as ``DiaForConditionalGeneration.generate`` returns them.

        ``max_new_tokens`` counts decode steps; the last ``max(delay_pattern) + 1`` of them (16 for Dia) flush the
        delayed codebooks after EOS, so a row yields at most ``max_new_tokens - 16`` audio frames.

        ``params.greedy`` -> argmax; otherwise per-row seeded sampling (see module doc). ``cfg_scale`` 1 turns CFG
        off (no batch doubling). May raise ``torch.OutOfMemoryError``.
        """
        import torch

        from tts_app.adapters.sampling import RowSampler, SampledTokenProcessor, logits_warpers

        knobs = self._sampling_knobs(params)
        kwargs = dict(
            input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
            decoder_input_ids=inputs.decoder_input_ids, decoder_attention_mask=inputs.decoder_attention_mask,
            decoder_position_ids=inputs.decoder_position_ids,
            max_new_tokens=inputs.max_new_tokens, use_cache=params.use_cache, do_sample=False,
            guidance_scale=knobs.cfg_scale, temperature=None, top_p=None, top_k=None,
        )
        # Rows whose own cap is below the batch's (a longer prompt under the checkpoint's max_length) end there,
        # as they would alone.
        caps = []
        if min(inputs.row_max_new_tokens) < inputs.max_new_tokens:
            caps = [_RowCapProcessor(inputs.audio_prompt_len, inputs.row_max_new_tokens, self.max_delay,
                                     self.config.decoder_config.eos_token_id, self.num_channels)]
        with torch.inference_mode():
            if knobs.greedy:
                # do_sample=False adds no top-k warper, but Dia's CFG processor still reads top_k (its guidance
                # top-k filter), exactly as ``generate(do_sample=False)`` with the checkpoint's config does. Left
                # out when it is the checkpoint's own value (transformers then warns that top_k is unused).
                del kwargs["top_k"]
                if knobs.top_k != self.model.generation_config.top_k:
                    kwargs["top_k"] = knobs.top_k
                if not caps:
                    return self.model.generate(**kwargs)
                with self._processors(guidance_top_k=knobs.top_k, before_delay_pattern=caps):
                    return self.model.generate(**kwargs)
            # transformers' sampling list, warper for warper (temperature only when not 1, as transformers adds
            # it), then one draw per row: scores (batch_size * num_channels, vocab_size), row-major by batch row,
            # so each row draws ``multinomial(probs (num_channels, vocab_size), 1)`` from its own generator, the
            # call ``_sample`` makes on the global RNG for a batch of one.
            temperature = None if knobs.temperature == 1.0 else knobs.temperature
            draw = SampledTokenProcessor(RowSampler(inputs.seeds, rows_per_seed=self.num_channels))
            with self._processors(guidance_top_k=knobs.top_k,
                                  before_channel_filter=logits_warpers(temperature=temperature),
                                  after_channel_filter=logits_warpers(top_k=knobs.top_k, top_p=knobs.top_p),
                                  before_delay_pattern=caps, last=[draw]):
                return self.model.generate(**kwargs)

    def _end_steps(self, outputs):
        """Per row, the index in ``outputs`` (``(batch, steps, channels)``) of its end-of-audio step in codebook 0
        (the step before its PAD run; the last step when there is none), as ``DiaProcessor.batch_decode`` finds it."""
        pad = self.config.decoder_config.pad_token_id
        return outputs.shape[1] - (outputs[:, :, 0] == pad).sum(dim=-1) - 1

    def stop_reasons(self, outputs, inputs: DiaInputs) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row whose end of audio was forced at the cap, else ``END_OF_SPEECH``.

        transformers' ``DiaEOSDelayPatternLogitsProcessor`` forces EOS in codebook 0 when the cap leaves just the
        ``max(delay_pattern) + 1`` steps that flush the delayed codebooks, i.e. at output step
        ``audio_prompt_len + max_new_tokens - max_delay - 1``; a row whose EOS sits there was cut, an earlier EOS is
        the model's own. Each row has its own cap (``DiaInputs.row_max_new_tokens``)."""
        eos = self.config.decoder_config.eos_token_id
        reasons = []
        for row, end, cap in zip(outputs, self._end_steps(outputs).tolist(), inputs.row_max_new_tokens):
            forced_at = inputs.audio_prompt_len + cap - self.max_delay - 1
            ended = int(row[end, 0]) == eos and end < forced_at
            reasons.append(StopReason.END_OF_SPEECH if ended else StopReason.MAX_NEW_TOKENS)
        return reasons

    def postprocess(self, outputs, inputs: DiaInputs) -> list[np.ndarray]:
        """Codes -> one float32 waveform ``(num_samples,)`` per row at ``facts.sampling_rate``: the delay is reverted,
        the audio prompt cut off and each row cut at its own EOS (``DiaProcessor.batch_decode``), then the DAC codec
        decodes it. A row that produced no frame gives an empty array."""
        # Same end index as DiaProcessor.batch_decode: the step of the row's EOS in codebook 0 (PAD follows it).
        end = self._end_steps(outputs)
        has_audio = [i for i in range(outputs.shape[0]) if int(end[i]) > inputs.audio_prompt_len]
        result = [np.zeros(0, dtype=np.float32) for _ in range(outputs.shape[0])]
        if has_audio:  # the codec cannot decode zero frames
            audios = self.processor.batch_decode(outputs[has_audio], audio_prompt_len=inputs.audio_prompt_len)
            for i, audio in zip(has_audio, audios):
                result[i] = audio.detach().float().cpu().numpy().reshape(-1).astype(np.float32)
        return result
