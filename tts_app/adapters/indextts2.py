"""IndexTTS 2 (bilibili, ``IndexTeam/IndexTTS-2``) through the model modules of its own package,
``indextts2-inference`` (module ``indextts``; install: ``python3 -m pip install --no-deps -r
requirements-indextts2.txt``).

How IndexTTS 2 speaks (arXiv 2506.21619; the package's ``indextts/infer_v2.py``, ``IndexTTS2.infer_generator``):

1. Conditioning, once per reference clip: w2v-BERT 2.0 features (hidden layer 17, normalised with the checkpoint's
   ``wav2vec2bert_stats.pt``) of the 16 kHz clip; the GPT's conformer + perceiver turn them into 32 speaker latents;
   the MaskGCT semantic codec quantises them and the s2mel length regulator turns that into the reference
   condition; CAM++ gives a 192-d style vector; the 22.05 kHz clip's 80-band mel is the flow-matching prompt.
2. Emotion: an emotion vector ``emovec`` (GPT width) from the emotion clip's w2v-BERT features (by default the voice
   reference itself), blended by ``emo_alpha``; or from an 8-value emotion vector (rows of ``feat2.pt`` picked by
   the CAM++ style's nearest row of ``feat1.pt``); the Qwen emotion model (``qwen0.6bemo4-merge/``) can write that
   vector from text.
3. GPT (``UnifiedVoice``: a GPT-2 stack without position embeddings of its own) reads ``[32 speaker latents +
   emovec][2 speed embeddings][<start_text> text <stop_text>][<start_mel>]`` and decodes semantic codes (50 per second
   of speech) until ``stop_mel_token``. This is the stage this adapter batches.
4. A second, full GPT forward over the generated codes gives their latents; s2mel (length regulator + a DiT
   flow-matching decoder, 25 Euler steps, CFG 0.7) turns codes + latents + the reference condition into an 80-band
   mel at 22.05 kHz (1.72 mel frames per code); BigVGAN v2 turns the mel into audio.

Everything above is the package's code (``UnifiedVoice``, ``MyModel`` s2mel, ``RepCodec``, ``CAMPPlus``, ``BigVGAN``,
its ``TextTokenizer``, ``QwenEmotion``) and transformers' ``Wav2Vec2BertModel``; this file only loads them, batches the
GPT decode and keeps per-row randomness per row.

Differences from the package's own ``infer``, on purpose:

* Rows: ``infer`` runs one segment at a time (``autoregressive_batch_size = 1``). Here the GPT decodes a whole batch
  in one forward per step: rows are left-padded (the ``[cond][text]`` prefix, as the package's own
  ``prepare_gpt_inputs`` does for a batch) with an attention mask, each row stops at its own stop token, and the
  mel-position embedding of a row's k-th code is the row's own count. The second stage (s2mel flow matching +
  BigVGAN) runs batched across the rows that end together (``stage2_audio``), equal to each row alone with the
  package's code: the package's ``solve_euler`` takes one reference (prompt) length per batch, so the Euler loop is
  this file's own (``_solve_euler_rows``, the same steps per row, each row's own noise from its own seed), and the
  package's modules would read a shorter row's padding (the DiT WaveNet's reflect-padded convolutions, every BigVGAN
  convolution and anti-aliasing resampler), so ``_RowLengths`` sets each row's padded frames to what that module's
  own padding gives the row alone. The code latents and the length regulator stay per row. Its share of the time:
  ``bench/indextts2_stages.py``; batched vs row by row: ``bench/indextts2_stage2.py``.
* Step interface (``IndexTTS2DecodeBatch``, ``supports_decode_steps``): the engine batches IndexTTS 2 continuously:
  rows join the running GPT batch (their prefix prefilled apart, then copied into free slots of the KV pool,
  ``tts_app/adapters/kv_pool.py``) and leave it at any decode step (each step's codes chosen for all rows at once,
  one host sync: ``IndexTTS2DecodeBatch._pick_codes``); the s2mel + vocoder of the rows a step ends run
  (batched) in that step. It is the family's one decode
  loop: ``generate`` prefills its whole batch into one and steps it until every row ends (``make_audio=False``;
  ``postprocess`` then makes the audio), so the two paths cannot drift apart.
* Decoding: as ``infer`` by default, beam sampling with ``num_beams=3`` and ``length_penalty=0``
  (``SynthesisParams.num_beams`` / ``length_penalty``, defaults from ``infer_generator``'s fallbacks): ``_BeamSearch``
  follows transformers' ``_beam_search`` step for step, and each request's beams are rows of the running GPT batch
  (reordered after each step by slot index into the KV pool; a beam continued twice is copied once). The draws come from one ``torch.Generator`` per request
  seeded with ``AdapterRow.seed`` (tts_app/adapters/sampling.py; upstream draws from the global RNG, which the
  upstream-equality test seeds the same way), so a request's audio does not depend on its batch-mates. With
  ``num_beams=1`` each row samples alone (``RowSampler``). Greedy (``params.greedy``) with one beam is the argmax after
  the repetition penalty, which is what ``infer(top_k=1, num_beams=1)`` does; greedy with beams is beam search. On
  the tiny checkpoint (random weights) the 3 beams often end at once (the stop code is likelier than any path of
  codes, and ``length_penalty=0`` favours short beams): the package then fails in s2mel on the empty code sequence;
  here the request reports that the model produced no audio.
* Mel positions: the k-th generated code is fed with mel-position embedding ``k`` (``<start_mel>`` is 0), as in
  training (``UnifiedVoice.forward``). This is what the package does under transformers 5.x: its
  ``GPT2InferenceModel.prepare_inputs_for_generation`` speaks the old ``past_key_values`` interface, gets no cache
  back from ``generate`` and re-reads the whole sequence every step (no KV cache at all, O(n^2) per segment), which
  takes the positions from ``arange``; it gets no attention mask either (harmless at batch 1). (Its cached branch,
  used with older transformers, would add ``k + 1``.) Here the KV cache is on by default; on and off give the same
  codes.
* Repetition penalty: the package applies transformers' ``RepetitionPenaltyLogitsProcessor`` to its placeholder
  ``input_ids`` (all ``1`` plus ``<start_mel>``) and the generated codes, i.e. codes 1 and ``start_mel_token`` are
  penalised from the first step; reproduced here.
* Undecodable codes: the GPT's vocabulary (``number_mel_codes``) is the codec's codebook plus ``start_mel_token`` and
  ``stop_mel_token``. Upstream masks nothing: neither ``infer`` (its ``generate`` call passes no ``suppress_tokens``
  / ``bad_words_ids``) nor transformers' generation forbids ``start_mel_token``; a trained checkpoint practically
  never samples it, and when it does the codec's embedding lookup (``vq2emb``) raises ``IndexError``, which ``infer``
  catches and answers with ``None`` (no audio, no message). Random weights (the tiny checkpoint) sample it often.
  Here such codes are never picked (``undecodable_codes``): greedy takes the argmax over the other codes; sampling
  zeroes their probability after temperature / top-k / top-p (``RowSampler.sample(exclude=...)``), which leaves
  every draw the package would make unchanged except a draw of an undecodable code (so the upstream-equality tests
  hold wherever the package gives audio at all).
* Text: the package normalises text with NeMo text processing; in tts_app the front end (wetext) normalises it, and
  this adapter applies the package's punctuation map (``TextNormalizer.char_rep_map``) and its tokenizer
  (``tokenize_by_CJK_char`` + the checkpoint's sentencepiece ``bpe.model``). A pinyin override ``{zhong4}`` from the
  front end is written as the package writes pinyin (``TextNormalizer.correct_pinyin``, upper case: ``ZHONG4``),
  which is a token of its vocabulary.
* Emotion vector: scaled by ``emo_alpha`` and mixed as ``infer`` does; a vector the user gives is first passed
  through the package's ``IndexTTS2.normalize_emo_vec`` (per-emotion bias, sum capped at 0.8), as the official web UI
  does with its sliders (a vector the emotion model reads from text is used as it is, as ``infer`` does).
* The Qwen emotion model may generate up to 32768 tokens in ``QwenEmotion.inference``; its ``generate`` is capped at
  ``EMOTION_TEXT_MAX_NEW_TOKENS`` here so a misbehaving model cannot hold the worker (the real model answers with a
  short JSON object).
* The flow-matching noise comes from a CPU generator seeded with the row's seed (the package draws it from the global
  RNG); a row alone runs the package's ``solve_euler``, rows together ``_solve_euler_rows`` (above). Its number of
  Euler steps is a setting, ``SynthesisParams.num_diffusion_steps`` (default the package's 25; fast preset 12, as
  vLLM-Omni runs it), recorded in the sidecar like every knob.
* Precision: the GPT (and its KV cache) runs in the adapter's dtype (fp16/bf16 on CUDA); w2v-BERT, codec, CAM++,
  s2mel and BigVGAN stay float32, as in the package (its s2mel autocast is off).

Auxiliary models (downloaded by the package itself at load, from the hub): ``facebook/w2v-bert-2.0``,
``amphion/MaskGCT`` (``semantic_codec/model.safetensors``), ``funasr/campplus`` (``campplus_cn_common.bin``) and the
vocoder named in ``config.yaml`` (``nvidia/bigvgan_v2_22khz_80band_256x``). Each is looked up, in order, in a sub-folder
of the checkpoint named after the repository (``w2v-bert-2.0/``, ``MaskGCT/``, ``campplus/``,
``bigvgan_v2_22khz_80band_256x/``), then in a hub cache inside the checkpoint (``hf_cache/``, the layout
``huggingface-cli download REPO --cache-dir DIR/hf_cache`` writes, or the flat one the official index-tts repository
writes there: ``hf_cache/w2v-bert-2.0/``, ``semantic_codec_model.safetensors``, ``campplus_cn_common.bin``,
``bigvgan/``), then in the user's hub cache, with the package's
own calls (``hf_hub_download`` / ``from_pretrained``) - so a checkpoint folder carrying its auxiliaries runs with no
network at all.

Length limits: an IndexTTS-2 checkpoint has no generation config and the package reads none; ``infer``'s
``max_mel_tokens`` counts new codes (transformers' ``max_new_tokens``: ``SynthesisParams.max_new_tokens`` here), and
text and codes have position embeddings of their own (``gpt.max_text_tokens``, ``gpt.max_mel_tokens``), so a row's
cap never depends on its prompt length: there is no total ``max_length`` to enforce per row, as Dia, CSM, VibeVoice
and Higgs do (``TTSAdapter.row_max_new_tokens``). Both capacities are checked (``preprocess``,
``_check_max_new_tokens``).

KV cache accounting (``ModelFacts``): the GPT-2 stack's ``layers x heads x (model_dim / heads)`` per position; a row
holds ``34`` conditioning positions + its text tokens + 2 + 1 (``<start_mel>``) + its codes, whatever the reference
length (the perceiver always gives 32 latents), so ``reference_positions_per_second`` is 0.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import logging
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tts_app.adapters.base import (DTYPE_BYTES, AdapterRow, DecodeBatch, GenerationDefaults, ModelFacts, PrefixCache,
                                   RowEmotion, RowStep, TTSAdapter, count_parameters)
from tts_app.adapters.decode_stream import DecoderStream
from tts_app.adapters.kv_pool import decode_settings, make_stream
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError
from tts_app.frontend.messages import Notice, register
from tts_app.request import EMOTION_NAMES, StopReason, SynthesisParams

# IndexTTS 2's refusals of a request, in English and Chinese (``tts_app.frontend.messages``).
INDEXTTS2_EN = {
    "ix2_no_emotion_model": "this IndexTTS 2 checkpoint has no emotion model (qwen0.6bemo4-merge/), so it cannot "
                            "read the emotion from text; give an emotion vector or an emotion reference clip",
    "ix2_nothing_readable": "row {row}: {text!r} has nothing the model can read",
    "ix2_too_many_tokens": "row {row}: {num_tokens} text tokens; the model reads at most {max_tokens} per segment; "
                           "split the text (max_segment_chars)",
    "ix2_max_new_tokens": "max_new_tokens={max_new_tokens} exceeds the {capacity} codes this checkpoint can "
                          "generate (gpt.max_mel_tokens); lower it",
    "ix2_reference_audio": "reference audio",
    "ix2_emotion_reference_audio": "emotion reference audio",
    "ix2_needs_audio": "row {row}: IndexTTS 2 clones a voice and needs {what}; give a reference clip",
    "ix2_audio_shape": "row {row}: {what} has shape {shape}; a non-empty mono array (num_samples,) at {rate_hz} Hz "
                       "is needed",
    "ix2_audio_not_finite": "row {row}: {what} contains NaN/inf samples; clean it first",
}
INDEXTTS2_ZH = {
    "ix2_no_emotion_model": "这个 IndexTTS 2 检查点没有情感模型（qwen0.6bemo4-merge/），无法从文本读取情感；"
                            "请给出情感向量或情感参考音频",
    "ix2_nothing_readable": "第 {row} 行：{text!r} 中没有模型能读的内容",
    "ix2_too_many_tokens": "第 {row} 行：文本有 {num_tokens} 个词元；模型每段最多读 {max_tokens} 个；"
                           "请拆分文本（max_segment_chars）",
    "ix2_max_new_tokens": "max_new_tokens={max_new_tokens} 超过了这个检查点能生成的 {capacity} 个编码"
                          "（gpt.max_mel_tokens）；请调小它",
    "ix2_reference_audio": "参考音频",
    "ix2_emotion_reference_audio": "情感参考音频",
    "ix2_needs_audio": "第 {row} 行：IndexTTS 2 克隆声音需要{what}；请给出参考音频",
    "ix2_audio_shape": "第 {row} 行：{what}的形状是 {shape}；需要采样率 {rate_hz} Hz 的非空单声道数组 (num_samples,)",
    "ix2_audio_not_finite": "第 {row} 行：{what}含有 NaN/inf 样本；请先清理",
}
register(__name__, INDEXTTS2_EN, INDEXTTS2_ZH)

logger = logging.getLogger(__name__)

HUB_ID = "IndexTeam/IndexTTS-2"
INSTALL_HINT = "python3 -m pip install --no-deps -r requirements-indextts2.txt"

# The checkpoint's config.yaml (IndexTeam/IndexTTS-2, version 2.0), written out so the full-size architecture can be
# built with random weights (bench/gpu_check.py) and the tiny checkpoint keeps its layout. Quoted from public copies
# of the file (e.g. ComfyUI-IndexTTS2's checkpoints/config.yaml, which differs only in a local vocoder name).
INDEXTTS2_CONFIG: dict = {
    "dataset": {"bpe_model": "bpe.model", "sample_rate": 24000, "squeeze": False,
                "mel": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "win_length": 1024, "n_mels": 100,
                        "mel_fmin": 0, "normalize": False}},
    "gpt": {"model_dim": 1280, "max_mel_tokens": 1815, "max_text_tokens": 600, "heads": 20,
            "use_mel_codes_as_input": True, "mel_length_compression": 1024, "layers": 24,
            "number_text_tokens": 12000, "number_mel_codes": 8194, "start_mel_token": 8192, "stop_mel_token": 8193,
            "start_text_token": 0, "stop_text_token": 1, "train_solo_embeddings": False,
            "condition_type": "conformer_perceiver",
            "condition_module": {"output_size": 512, "linear_units": 2048, "attention_heads": 8, "num_blocks": 6,
                                 "input_layer": "conv2d2", "perceiver_mult": 2},
            "emo_condition_module": {"output_size": 512, "linear_units": 1024, "attention_heads": 4,
                                     "num_blocks": 4, "input_layer": "conv2d2", "perceiver_mult": 2}},
    "semantic_codec": {"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 384,
                       "vocos_intermediate_dim": 2048, "vocos_num_layers": 12},
    "s2mel": {"preprocess_params": {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024,
                                                                   "hop_length": 256, "n_mels": 80, "fmin": 0,
                                                                   "fmax": "None"}},
              "dit_type": "DiT", "reg_loss_type": "l1", "style_encoder": {"dim": 192},
              "length_regulator": {"channels": 512, "is_discrete": False, "in_channels": 1024,
                                   "content_codebook_size": 2048, "sampling_ratios": [1, 1, 1, 1],
                                   "vector_quantize": False, "n_codebooks": 1, "quantizer_dropout": 0.0,
                                   "f0_condition": False, "n_f0_bins": 512},
              "DiT": {"hidden_dim": 512, "num_heads": 8, "depth": 13, "class_dropout_prob": 0.1,
                      "block_size": 8192, "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet",
                      "target": "mel", "content_dim": 512, "content_codebook_size": 1024, "content_type": "discrete",
                      "f0_condition": False, "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False,
                      "long_skip_connection": True, "zero_prompt_speech_token": False, "time_as_token": False,
                      "style_as_token": False, "uvit_skip_connection": True, "add_resblock_in_transformer": False},
              "wavenet": {"hidden_dim": 512, "num_layers": 8, "kernel_size": 5, "dilation_rate": 1,
                          "p_dropout": 0.2, "style_condition": True}},
    "gpt_checkpoint": "gpt.pth", "w2v_stat": "wav2vec2bert_stats.pt", "s2mel_checkpoint": "s2mel.pth",
    "emo_matrix": "feat2.pt", "spk_matrix": "feat1.pt", "emo_num": [3, 17, 2, 8, 4, 5, 10, 24],
    "qwen_emo_path": "qwen0.6bemo4-merge/",
    "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"},
    "version": 2.0,
}

# BigVGAN v2 22 kHz / 80 bands / 256x (nvidia/bigvgan_v2_22khz_80band_256x config.json, as described by its model
# card and public ports: conv_pre 80 -> 1536, upsampling 4,4,2,2,2,2 with kernels 8,8,4,4,4,4, AMP blocks with
# kernels 3,7,11 x dilations 1,3,5, SnakeBeta, no tanh / no bias at the end).
BIGVGAN_22KHZ_CONFIG: dict = {
    "resblock": "1", "num_mels": 80, "upsample_rates": [4, 4, 2, 2, 2, 2],
    "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4], "upsample_initial_channel": 1536,
    "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "activation": "snakebeta", "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False,
    "sampling_rate": 22050, "n_fft": 1024, "hop_size": 256, "win_size": 1024, "fmin": 0, "fmax": None,
}

# The auxiliary hub models the package downloads itself: name -> (repository, file inside it or None for a
# transformers / hub-mixin model folder). The vocoder's repository comes from config.yaml (vocoder.name).
W2V_BERT_REPO = "facebook/w2v-bert-2.0"
SEMANTIC_CODEC_REPO, SEMANTIC_CODEC_FILE = "amphion/MaskGCT", "semantic_codec/model.safetensors"
CAMPPLUS_REPO, CAMPPLUS_FILE = "funasr/campplus", "campplus_cn_common.bin"
HUB_CACHE_SUBFOLDER = "hf_cache"
# The flat layout the official index-tts repository's ``ensure_models_available`` (indextts/utils/model_download.py)
# writes inside ``hf_cache/``: a folder for w2v-BERT and the vocoder, the two single files renamed.
OFFICIAL_FLAT_W2V_BERT = "w2v-bert-2.0"
OFFICIAL_FLAT_SEMANTIC_CODEC = "semantic_codec_model.safetensors"
OFFICIAL_FLAT_CAMPPLUS = "campplus_cn_common.bin"
OFFICIAL_FLAT_VOCODER = "bigvgan"

# Constants of the package's inference (indextts2-inference 2.1.1, indextts/infer_v2.py), where they are literals.
W2V_BERT_LAYER = 17  # get_emb: hidden_states[17]
MAX_REFERENCE_S = 15.0  # _load_and_cut_audio(..., 15)
W2V_BERT_SAMPLING_RATE = 16000  # w2v-BERT features and CAM++ fbank run on 16 kHz audio
MEL_FRAMES_PER_CODE = 1.72  # target_lengths = (code_lens * 1.72).long()
S2MEL_DIFFUSION_STEPS = 25  # infer_generator: diffusion_steps = 25 (the default of num_diffusion_steps)
S2MEL_CFG_RATE = 0.7
# The fast preset of the flow matching's step count: vLLM-Omni's IndexTTS 2 stage config runs 12 Euler steps instead of
# the package's 25 (about half the s2mel time; a different, slightly coarser mel). Offered, never applied silently
# (``SynthesisParams.num_diffusion_steps``).
S2MEL_FAST_DIFFUSION_STEPS = 12
# Bounds of one batched second-stage group (``IndexTTS2Adapter.stage2_audio``): no memory estimate covers this stage,
# so a fixed cap: 8 rows, and rows x padded frames (reference + generated mel frames, 86 per second) at most 8 x 2000
# (8 rows of ~23 s with their reference). Its largest tensor is the DiT's attention, (2 x rows, heads, frames,
# frames) where SDPA materialises it (2 x 8 x 8 x 2000^2 x 4 B = 2 GB at the cap); an out-of-memory error splits the
# group (halves, then rows alone), so the cap bounds the common case, not correctness.
STAGE2_MAX_BATCH_ROWS = 8
STAGE2_MAX_BATCH_FRAMES = 8 * 2000
LENGTH_REGULATOR_QUANTIZERS = 3  # n_quantizers=3
# Sampling defaults of infer_generator (generation_kwargs.pop(...) fallbacks; it always samples, do_sample=True). The
# checkpoint has no generation config; its config.yaml gpt.max_mel_tokens (1815 for the real one) is the model's
# position capacity and caps max_mel_tokens.
_UPSTREAM = "indextts2-inference 2.1.1 IndexTTS2.infer default (infer_generator's generation_kwargs fallback)"
UPSTREAM_NUM_BEAMS = 3
UPSTREAM_LENGTH_PENALTY = 0.0
UPSTREAM_TEMPERATURE = 0.8
UPSTREAM_TOP_P = 0.8
UPSTREAM_TOP_K = 30
UPSTREAM_REPETITION_PENALTY = 10.0
UPSTREAM_MAX_MEL_TOKENS = 1500
# Upper bound of the Qwen emotion model's answer (see the module docstring); the real answer is ~60-80 tokens.
EMOTION_TEXT_MAX_NEW_TOKENS = 256

# Conditioning positions of the GPT prefix: 32 perceiver latents (UnifiedVoice condition_num_latent) + 2 speed
# embeddings; then <start_text> ... <stop_text>, then <start_mel>.
NUM_SPEECH_LATENTS = 32
NUM_CONDITIONING_POSITIONS = NUM_SPEECH_LATENTS + 2
NUM_TEXT_FRAME_TOKENS = 2  # <start_text>, <stop_text>
# Segments as upstream cuts them (``segment_measure``): sentences, cut also at commas and dashes, packed up to
# infer()'s max_text_tokens_per_segment=120 text tokens (IndexTTS2.infer default), counted with the checkpoint's own
# tokenizer (``count_text_tokens``).
MAX_TEXT_TOKENS_PER_SEGMENT = 120
# A character ceiling above what 120 tokens hold (Chinese ~1 token per character, English ~3-5 characters per BPE
# token), so the token limit decides, as upstream (which has no character limit). 120 tokens are ~30 s of speech,
# well within the 1500-code (60 s) decode cap.
MAX_SEGMENT_CHARS = 600
LANGUAGES = ("zh", "en")  # IndexTeam/IndexTTS-2 model card: Chinese and English

# Distinct references (and emotion clips) whose conditioning is kept (on the model's device): a 15 s clip keeps
# ~6 MB (w2v-BERT features 750 x 1024 x 4 B twice, reference mel and condition), so 32 entries stay under ~200 MB.
CONDITIONING_CACHE_SIZE = 32
EMOTION_TEXT_CACHE_SIZE = 256

# Sample texts for measuring text tokens per character of the checkpoint's tokenizer (the largest ratio is used, so
# the KV estimate errs high): English, Chinese prose, and short punctuation-dense Chinese.
_MEASURE_TEXTS = ("The quick brown fox jumps over the lazy dog, then naps in the sun for an hour.",
                  "今天天气很好，我们一起去公园散步，然后在湖边喝茶。", "好的，走吧！是你吗？对。")
_PINYIN_TOKEN_RE = re.compile(r"\{([a-z]+[1-5])\}")

# Tiny checkpoint: the real layout and architecture with tiny widths where config.yaml allows it. Widths the package
# hard-codes stay real: GPT model_dim 1280 (s2mel's gpt_layer is Linear(1280, 256)), w2v-BERT hidden size 1024 with
# at least 17 layers (get_emb reads hidden_states[17]; the GPT's conditioning encoders take 1024-d input), CAM++'s
# default widths (CAMPPlus(feat_dim=80, embedding_size=192)).
TINY_CONFIG_OVERRIDES: dict = {
    "gpt": {"layers": 1, "max_mel_tokens": 120, "number_mel_codes": 66, "start_mel_token": 64, "stop_mel_token": 65,
            "condition_module": {"output_size": 32, "linear_units": 32, "attention_heads": 2, "num_blocks": 1},
            "emo_condition_module": {"output_size": 32, "linear_units": 32, "attention_heads": 2, "num_blocks": 1}},
    "semantic_codec": {"codebook_size": 64, "vocos_dim": 16, "vocos_intermediate_dim": 32, "vocos_num_layers": 1},
    "s2mel": {"length_regulator": {"channels": 32},
              "DiT": {"hidden_dim": 32, "num_heads": 2, "depth": 2, "content_dim": 32},
              "wavenet": {"hidden_dim": 32, "num_layers": 2}},
}
TINY_BIGVGAN_CONFIG: dict = {**BIGVGAN_22KHZ_CONFIG, "upsample_rates": [4, 4, 4, 4],
                             "upsample_kernel_sizes": [8, 8, 8, 8], "upsample_initial_channel": 32,
                             "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3]]}
# Logit bias of the tiny GPT's stop code (it replaces the random one): random weights otherwise never pick it (the repetition penalty walks through
# every other code first); with it, rows end after a context-dependent number of codes, as a trained model does.
TINY_STOP_BIAS = 0.7


def _deep_update(base: dict, updates: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in updates.items():
        out[key] = (_deep_update(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict)
                    else copy.deepcopy(value))
    return out


def _import_package():
    """Import the package's modules, or raise ModelLoadError naming the install line."""
    try:
        import indextts.infer_v2  # noqa: F401  (imports every module the adapter uses)
    except ImportError as exc:
        raise ModelLoadError(f"IndexTTS 2 needs its package, indextts2-inference ({exc}); install it with "
                             f"`{INSTALL_HINT}`") from exc


def _silence_flow_matching_progress() -> None:
    """The package's Euler solver wraps its 25 steps in a tqdm bar (flow_matching.py ``for step in tqdm(...)``); one
    bar per row floods a server log. Replace it by a disabled bar (same iteration)."""
    import indextts.s2mel.modules.flow_matching as flow_matching
    from tqdm import tqdm

    if not isinstance(flow_matching.tqdm, functools.partial):
        flow_matching.tqdm = functools.partial(tqdm, disable=True)


def _gpt_to_dtype(gpt, dtype: str) -> None:
    """Cast the GPT (``UnifiedVoice``) to ``dtype``. Its GPT-2 stack has no position embeddings: the package replaces
    ``wpe`` by ``null_position_embeddings``, float32 zeros, which would turn half-precision hidden states into
    float32 (the package relies on autocast, which the CPU does not apply to layer norms); the zeros follow the
    GPT's dtype here."""
    import torch

    torch_dtype = getattr(torch, dtype)
    gpt.to(torch_dtype)
    dim = int(gpt.model_dim)

    def null_position_embeddings(position_ids):
        return torch.zeros((position_ids.shape[0], position_ids.shape[1], dim), dtype=torch_dtype,
                           device=position_ids.device)

    gpt.gpt.wpe = null_position_embeddings


def _audio_key(audio: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest() + f":{audio.size}"


class _LRU:
    """A small least-recently-used cache (thread-safe get/put)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


# ---------------------------------------------------------------------------------------------------- checkpoint


def _checkpoint_folder(id_or_path: str | Path) -> Path:
    """A local IndexTTS-2 folder for ``id_or_path``: the folder itself, or the hub snapshot of a hub id (the
    package's own ``snapshot_download``; offline, the cached snapshot).

    Raises:
        ModelLoadError: a folder without config.yaml, or a hub id that is not cached while the hub is unreachable.
    """
    from tts_app.adapters.loading import hub_error_message, offline_message

    path = Path(id_or_path).expanduser()
    if path.exists():
        if not (path / "config.yaml").is_file():
            raise ModelLoadError(f"{str(id_or_path)!r} has no config.yaml; it is not an IndexTTS-2 checkpoint folder")
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(id_or_path)))
    except Exception as exc:  # hub errors: offline miss, gated or unknown repo, network
        raise ModelLoadError(hub_error_message(str(id_or_path), exc) or offline_message(str(id_or_path))) from exc


@dataclass(frozen=True)
class _Auxiliary:
    """Where the auxiliary models are read from (see the module docstring).

    Attributes:
        folder: the checkpoint folder (its sub-folders are tried first).
        cache_dir: the checkpoint's own hub cache (``hf_cache/``), or None for the user's hub cache.
        local_files_only: True with the checkpoint's own hub cache: what it carries is all there is, so the hub is
            not asked (no retries against an unreachable hub); the user's cache is used as the package uses it.
    """

    folder: Path
    cache_dir: str | None
    local_files_only: bool


def _auxiliary(checkpoint: Path) -> _Auxiliary:
    hub_cache = checkpoint / HUB_CACHE_SUBFOLDER
    if hub_cache.is_dir():
        return _Auxiliary(checkpoint, str(hub_cache), True)
    return _Auxiliary(checkpoint, None, False)


def _resolve_model_dir(aux: _Auxiliary, repo_id: str, probe: str, flat_name: str) -> str:
    """A folder (or hub id) to ``from_pretrained`` the auxiliary model ``repo_id`` from: the checkpoint's sub-folder
    named like the repository, or the official repository's flat ``hf_cache/<flat_name>/``, if it holds ``probe``;
    else ``repo_id`` itself (hub cache)."""
    for local in (aux.folder / repo_id.split("/")[-1], aux.folder / HUB_CACHE_SUBFOLDER / flat_name):
        if (local / probe).is_file():
            return str(local)
    return repo_id


def _resolve_file(aux: _Auxiliary, repo_id: str, filename: str, flat_name: str) -> str:
    """Path of ``filename`` of the auxiliary repository ``repo_id``: the checkpoint's sub-folder, the official
    repository's flat ``hf_cache/<flat_name>``, else ``hf_hub_download`` (the package's call) into the checkpoint's hub
    cache or the user's."""
    for local in (aux.folder / repo_id.split("/")[-1] / filename, aux.folder / HUB_CACHE_SUBFOLDER / flat_name):
        if local.is_file():
            return str(local)
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id, filename=filename, cache_dir=aux.cache_dir,
                           local_files_only=aux.local_files_only)


def _check_checkpoint_files(folder: Path, cfg) -> None:
    """Refuse, before any weights are read, a checkpoint folder that lacks a file its config.yaml names (the files
    of ``IndexTeam/IndexTTS-2`` itself: ``gpt_checkpoint``, ``s2mel_checkpoint``, ``w2v_stat``, ``emo_matrix``,
    ``spk_matrix``, ``dataset.bpe_model``; the emotion model ``qwen_emo_path`` is optional: only emotion from text
    needs it). The auxiliary models of other repositories are looked up later (``_auxiliary``).

    Raises:
        ModelLoadError: naming every missing file and the command that downloads the whole repository.
    """
    names = [str(cfg.get(key)) for key in ("gpt_checkpoint", "s2mel_checkpoint", "w2v_stat", "emo_matrix",
                                           "spk_matrix") if cfg.get(key) is not None]
    names.append(str(cfg.dataset["bpe_model"]))
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"IndexTTS-2 folder {str(folder)!r} lacks {', '.join(missing)} (named in its config.yaml); download the "
            f"whole repository: `hf download {HUB_ID} --local-dir {folder}`")


def _auxiliary_error(name: str, repo_id: str, checkpoint: Path, exc: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"IndexTTS 2 needs the auxiliary model {repo_id} ({name}), which is not in {checkpoint} nor in the hub cache "
        f"and the hub cannot be reached ({type(exc).__name__}: {exc}). On a connected machine run `huggingface-cli "
        f"download {repo_id} --cache-dir {checkpoint / HUB_CACHE_SUBFOLDER}` (or put it in "
        f"{checkpoint / repo_id.split('/')[-1]}/); `python -m tts_app make-tiny-model --family indextts2 --out DIR` "
        "writes a tiny random checkpoint with all of them.")


# ---------------------------------------------------------------------------------------------------- model container


def _module_class():
    import torch

    class IndexTTS2Model(torch.nn.Module):
        """The loaded sub-models of one IndexTTS-2 checkpoint (one ``nn.Module`` so ``.to``/``.parameters`` cover
        them all). Attributes: ``gpt`` (``UnifiedVoice``), ``semantic_model`` (``Wav2Vec2BertModel``),
        ``semantic_codec`` (``RepCodec``), ``s2mel`` (``MyModel``), ``campplus`` (``CAMPPlus``), ``vocoder``
        (``BigVGAN``); buffers ``semantic_mean`` / ``semantic_std`` (1024,), ``emo_matrix`` (sum(emo_num), model_dim)
        and ``spk_matrix`` (sum(emo_num), 192)."""

        def __init__(self, gpt, semantic_model, semantic_codec, s2mel, campplus, vocoder, semantic_mean,
                     semantic_std, emo_matrix, spk_matrix):
            super().__init__()
            self.gpt = gpt
            self.semantic_model = semantic_model
            self.semantic_codec = semantic_codec
            self.s2mel = s2mel
            self.campplus = campplus
            self.vocoder = vocoder
            self.register_buffer("semantic_mean", semantic_mean)
            self.register_buffer("semantic_std", semantic_std)
            self.register_buffer("emo_matrix", emo_matrix)
            self.register_buffer("spk_matrix", spk_matrix)

    return IndexTTS2Model


@dataclass
class IndexTTS2Processor:
    """Text and audio front of one checkpoint.

    Attributes:
        config: the checkpoint's config.yaml (OmegaConf).
        tokenizer: the package's ``TextTokenizer`` on ``bpe.model`` (no NeMo normaliser: tts_app's front end
            normalises).
        normalizer: the package's ``TextNormalizer`` (not loaded; only its punctuation maps and pinyin rules are used).
        feature_extractor: ``SeamlessM4TFeatureExtractor`` of w2v-BERT 2.0.
        mel_args: keyword arguments of the package's ``mel_spectrogram`` (as ``IndexTTS2._load_emotion_matrices``).
        emo_num: rows of ``feat1.pt`` / ``feat2.pt`` per emotion (8 groups).
        qwen_emotion_dir: the checkpoint's Qwen emotion model folder, or None when it has none.
    """

    config: Any
    tokenizer: Any
    normalizer: Any
    feature_extractor: Any
    mel_args: dict
    emo_num: list[int]
    qwen_emotion_dir: Path | None


@dataclass
class SpeakerConditioning:
    """What one reference clip contributes, computed once (``IndexTTS2._get_speaker_conditioning``).

    Attributes:
        spk_cond_emb: ``(1, frames, 1024)`` normalised w2v-BERT features of the 16 kHz clip (50 frames/s).
        speech_latent: ``(1, 32, model_dim)`` the GPT's speaker latents (``get_conditioning``), GPT dtype.
        style: ``(1, 192)`` CAM++ style vector.
        prompt_condition: ``(1, mel_frames, channels)`` s2mel reference condition.
        ref_mel: ``(1, 80, mel_frames)`` log-mel of the 22.05 kHz clip.
        emo_cond_emb: ``(1, frames', 1024)`` w2v-BERT features of the clip read as an emotion clip (the package
            loads it again at 16 kHz with librosa for that).
    """

    spk_cond_emb: Any
    speech_latent: Any
    style: Any
    prompt_condition: Any
    ref_mel: Any
    emo_cond_emb: Any


@dataclass
class IndexTTS2Inputs:
    """Model inputs of one batch (output of ``IndexTTS2Adapter.preprocess``).

    Attributes:
        prefix_embeds: ``(batch_size, prefix_len, model_dim)`` GPT dtype: per row ``[pad][34 conditioning][text]``,
            left-padded with zeros.
        prefix_mask: ``(batch_size, prefix_len)`` int64, 0 on the left padding.
        text_tokens: per row, ``(1, num_text_tokens)`` int32 text token ids (without start/stop).
        conditioning: per row, its reference's ``SpeakerConditioning``.
        emovecs: per row, ``(1, model_dim)`` the emotion vector added to the speaker latents.
        emo_cond_embs: per row, the emotion clip's w2v-BERT features used for ``emovecs``.
        seeds: per row seed.
    """

    prefix_embeds: Any
    prefix_mask: Any
    text_tokens: list
    conditioning: list[SpeakerConditioning]
    emovecs: list
    emo_cond_embs: list
    seeds: list[int]


@dataclass
class IndexTTS2Outputs:
    """Generated semantic codes (output of ``IndexTTS2Adapter.generate``).

    Attributes:
        codes: ``(batch_size, num_steps)`` int64; after a row's stop code (``stop_mel_token``) the row holds stop codes.
        code_lengths: per row, codes before its first stop code.
        hit_max_new_tokens: per row, True when it never produced a stop code (cut at ``max_new_tokens``).
        num_diffusion_steps: the flow matching's Euler steps ``postprocess`` runs (the request's resolved
            ``SynthesisParams.num_diffusion_steps``).
    """

    codes: Any
    code_lengths: list[int]
    hit_max_new_tokens: list[bool]
    num_diffusion_steps: int = S2MEL_DIFFUSION_STEPS


class _CodeSelector:
    """Next-code choice for a batch: the checkpoint's repetition penalty (transformers
    ``RepetitionPenaltyLogitsProcessor``), then argmax (greedy) or ``RowSampler`` (temperature, top-k, top-p; one
    generator per row), never a code the semantic codec cannot decode (``undecodable``, see
    ``IndexTTS2Adapter.undecodable_codes``). ``params`` are resolved (``TTSAdapter.resolve``): every knob has its
    value."""

    def __init__(self, params: SynthesisParams, seeds: list[int], repetition_penalty: float, undecodable):
        from transformers import RepetitionPenaltyLogitsProcessor

        from tts_app.adapters.sampling import RowSampler

        self.greedy = bool(params.greedy)
        self.undecodable = undecodable
        self.penalty = RepetitionPenaltyLogitsProcessor(repetition_penalty) if repetition_penalty != 1.0 else None
        self.sampler = None
        if not self.greedy:
            self.sampler = RowSampler(seeds, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                                      generator_device="cpu")

    def pick(self, history, logits):
        """history ``(batch, steps)`` int64, logits ``(batch, vocab)`` float32 -> codes ``(batch,)`` int64."""
        import torch

        if self.penalty is not None:
            logits = self.penalty(history, logits)
        if self.greedy:
            return torch.argmax(logits.masked_fill(self.undecodable.to(logits.device), -float("inf")), dim=-1)
        return self.sampler.sample(logits, history, exclude=self.undecodable)


# Scores transformers' beam search gives a beam it must never keep (GenerationMixin._beam_search: -1.0e9).
_BEAM_NEVER = -1.0e9


@dataclass
class _BeamState:
    """One request's beam search between two decode steps (``_BeamSearch``; tensors on the CPU, float32 scores).

    Attributes:
        running: ``(num_beams, num_steps)`` int64 codes of the running beams.
        running_scores: ``(num_beams,)`` their summed processed log-probabilities.
        finished: ``num_beams`` code lists of the best finished beams (stop code included), best first.
        finished_scores: ``(num_beams,)`` their scores (``_BEAM_NEVER`` for an empty slot).
        is_finished: ``(num_beams,)`` bool, the slot holds a finished beam.
        improvable: False once no running beam can beat the worst finished one (transformers' early-stop
            heuristic with ``early_stopping=False``).
        done: the search is over.
    """

    running: Any
    running_scores: Any
    finished: list
    finished_scores: Any
    is_finished: Any
    improvable: bool = True
    done: bool = False

    @property
    def num_steps(self) -> int:
        return int(self.running.shape[1])


class _BeamSearch:
    """Beam search / beam sampling of one request, step by step, as transformers' ``GenerationMixin._beam_search``
    runs it for the package's ``infer`` (``num_beams`` beams, ``do_sample=True``, ``length_penalty``,
    ``early_stopping=False``, one stop code): per step the beams' logits go through ``log_softmax``, the repetition
    penalty (over each beam's own ids: the placeholder ``1`` and ``<start_mel>`` then its codes), temperature, top-k
    and top-p (each keeping at least 2 codes, transformers' rule for beams); the running scores are added; ``2 x
    num_beams`` candidates are drawn without replacement from the softmax over all beams' codes (``torch.multinomial``
    with the request's own generator; greedy: the top ones), sorted by score; candidates among the first
    ``num_beams`` that end with the stop code (or reach ``max_new_tokens``) are kept as finished beams (score divided
    by ``length ** length_penalty``), the best ``num_beams`` others run on. The search ends when every candidate
    ends, or when no running beam can beat the worst finished one. The answer is the best finished beam.

    Codes the codec cannot decode get no probability (``undecodable``, after the warpers, see the module docstring).

    ``step`` is pure (returns a new state), so a decode step that fails later can be retried from the old one.
    """

    def __init__(self, params: SynthesisParams, seed: int, repetition_penalty: float, undecodable, start_code: int,
                 stop_code: int, max_new_tokens: int):
        import torch
        from transformers import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                  TopKLogitsWarper, TopPLogitsWarper)

        self.num_beams = int(params.num_beams)
        self.length_penalty = float(params.length_penalty)
        self.sample = not params.greedy
        self.stop_code, self.start_code = int(stop_code), int(start_code)
        self.max_new_tokens = int(max_new_tokens)
        self.undecodable = undecodable.cpu()
        self.generator = torch.Generator().manual_seed(int(seed)) if self.sample else None
        processors = LogitsProcessorList()
        if repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(repetition_penalty))
        if self.sample:  # transformers' _get_logits_processor for beams: min_tokens_to_keep = 1 + one stop code
            if params.temperature is not None and params.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(float(params.temperature)))
            if params.top_k:
                processors.append(TopKLogitsWarper(int(params.top_k), min_tokens_to_keep=2))
            if params.top_p is not None and params.top_p < 1.0:
                processors.append(TopPLogitsWarper(float(params.top_p), min_tokens_to_keep=2))
        self.processors = processors

    def initial_state(self) -> _BeamState:
        import torch

        beams = self.num_beams
        scores = torch.zeros(beams, dtype=torch.float32)
        scores[1:] = _BEAM_NEVER  # only the first beam's codes count at the first step (the beams are equal)
        return _BeamState(running=torch.zeros((beams, 0), dtype=torch.long), running_scores=scores,
                          finished=[[] for _ in range(beams)],
                          finished_scores=torch.full((beams,), _BEAM_NEVER, dtype=torch.float32),
                          is_finished=torch.zeros(beams, dtype=torch.bool))

    def step(self, state: _BeamState, logits):
        """One decode step. ``logits``: ``(num_beams, vocab)`` float32, row ``j`` = running beam ``j``'s next-code
        logits. Returns ``(new_state, source, codes)``: running beam ``j`` of the new state continues old beam
        ``source[j]`` with code ``codes[j]`` (``(num_beams,)`` int64 each, CPU); feed those unless ``done``."""
        import torch
        import torch.nn.functional as F

        beams, t = self.num_beams, state.num_steps
        logits = logits.float().cpu()
        vocab = logits.shape[-1]
        placeholder = torch.tensor([[1, self.start_code]], dtype=torch.long).repeat(beams, 1)
        ids = torch.cat([placeholder, state.running], dim=1)
        log_probs = self.processors(ids, F.log_softmax(logits, dim=-1))
        scores = (log_probs + state.running_scores[:, None]).reshape(1, -1)  # (1, beams x vocab)
        banned = self.undecodable.repeat(beams)[None]
        allowed = scores.masked_fill(banned, -float("inf"))
        num_candidates = 2 * beams
        if self.sample:
            probs = F.softmax(scores, dim=-1).masked_fill(banned, 0.0)
            index = torch.multinomial(probs, num_samples=num_candidates, generator=self.generator)
            cand_scores = torch.gather(allowed, 1, index)
            cand_scores, order = cand_scores.sort(dim=-1, descending=True)
            index = index.gather(-1, order)
        else:
            cand_scores, index = torch.topk(allowed, k=num_candidates)
        cand_beams, cand_codes = index[0] // vocab, index[0] % vocab
        candidates = torch.cat([state.running[cand_beams], cand_codes[:, None]], dim=1)
        ends = (cand_codes == self.stop_code) | (t + 1 >= self.max_new_tokens)  # EosTokenCriteria, MaxLengthCriteria
        # the best non-ending candidates run on
        running_scores_all = cand_scores[0] + ends.to(torch.float32) * _BEAM_NEVER
        keep = torch.topk(running_scores_all, k=beams)[1]
        # ending candidates among the first num_beams join the finished ones, scored with the length penalty
        top = torch.zeros(num_candidates, dtype=torch.bool)
        top[:beams] = True
        just_finished = ends & top
        finished_scores = cand_scores[0] / ((t + 1) ** self.length_penalty)
        finished_scores = finished_scores + float(not state.improvable) * _BEAM_NEVER
        finished_scores = finished_scores + (~just_finished).to(torch.float32) * _BEAM_NEVER
        merged_scores = torch.cat([state.finished_scores, finished_scores])
        merged = state.finished + [candidates[i].tolist() for i in range(num_candidates)]
        merged_is_finished = torch.cat([state.is_finished, just_finished])
        best = torch.topk(merged_scores, k=beams)[1]
        new = _BeamState(running=candidates[keep], running_scores=running_scores_all[keep],
                         finished=[merged[i] for i in best.tolist()], finished_scores=merged_scores[best],
                         is_finished=merged_is_finished[best], improvable=state.improvable)
        best_possible = new.running_scores[0] / ((t + 1) ** self.length_penalty)
        worst_finished = torch.where(new.is_finished, new.finished_scores.min(), torch.tensor(_BEAM_NEVER))
        new.improvable = bool(state.improvable and bool((best_possible > worst_finished).any()))
        new.done = not (new.improvable and not bool(ends.all()))
        return new, cand_beams[keep], cand_codes[keep]

    def result(self, state: _BeamState) -> tuple[list[int], bool]:
        """(the best finished beam's codes without its stop code, whether it was cut at ``max_new_tokens``)."""
        codes = list(state.finished[0])
        if self.stop_code in codes:
            return codes[:codes.index(self.stop_code)], False
        return codes, True


@dataclass
class _StepRow:
    """One row (one segment) of a running IndexTTS 2 batch (``IndexTTS2DecodeBatch``).

    Attributes:
        key: the engine's key for it.
        inputs: the ``IndexTTS2Inputs`` of the prefill it joined with; ``index``: its row there (for
            ``code_latents`` and ``s2mel`` once its codes are done).
        selector: without beams, its own ``_CodeSelector`` (repetition penalty over its own history, its own
            generator); None with beams.
        history: without beams, ``(1, 2 + num_codes)`` int64 ids its repetition penalty sees.
        beam, beam_state: with beams, its ``_BeamSearch`` (its own generator) and where the search stands; its beams
            are ``num_beams`` consecutive rows of the stream.
        codes: the codes it has generated (its stop code excluded; with beams, filled when the search ends).
        stop_reason: None while it decodes.
    """

    key: object
    inputs: IndexTTS2Inputs
    index: int
    selector: _CodeSelector | None = None
    history: Any = None
    beam: _BeamSearch | None = None
    beam_state: _BeamState | None = None
    codes: list = field(default_factory=list)
    stop_reason: StopReason | None = None

    @property
    def seed(self) -> int:
        return self.inputs.seeds[self.index]


class IndexTTS2DecodeBatch(DecodeBatch):
    """A running IndexTTS 2 batch (step interface, ``DecodeBatch``): the GPT stream of semantic codes for rows that
    join and leave at any decode step (continuous batching). The same computation as ``IndexTTS2Adapter.generate``
    per row: the prefix + ``<start_mel>`` prefilled with the row's left padding masked, one code per live row per
    step (the checkpoint's repetition penalty over the row's own history, then argmax or the row's own sampler; with
    ``num_beams`` > 1 the row's ``_BeamSearch`` over its beams, which are ``num_beams`` consecutive stream rows,
    reordered after each step to the beams they continue), the k-th code fed at mel position k; rows join with the
    shorter side left-padded (the GPT-2 stack has no position embeddings of its own, so padding changes nothing but
    the mask).

    A row's audio comes in the step that ends it (its stop code, or ``max_new_tokens`` codes; with beams, the end of
    its search): its codes through ``code_latents`` -> ``s2mel`` -> ``vocode``, exactly ``postprocess``'s per-row
    path. Streaming therefore gives IndexTTS 2 audio per segment, not per code.

    A step changes nothing until its last computation succeeded: on an exception (``torch.OutOfMemoryError``) the
    stream is rolled back and the rows' sampling generators restored, so the engine can retry with fewer rows.

    This is IndexTTS 2's one decode loop: ``IndexTTS2Adapter.generate`` runs its batch through it too
    (``make_audio=False``: rows end with their codes, ``postprocess`` makes the audio).
    """

    def __init__(self, adapter: "IndexTTS2Adapter", params: SynthesisParams, make_audio: bool = True):
        import torch

        super().__init__(params)
        self.adapter = adapter
        gpt = adapter.model.gpt
        self.gpt = gpt
        self.device = torch.device(adapter.device)
        self.max_new_tokens = adapter.max_new_tokens(params)
        self.make_audio = make_audio
        self.num_beams = int(params.num_beams or 1)
        dim = int(adapter.processor.config.gpt.model_dim)
        self.pooled = decode_settings(adapter).pooled
        self.stream = make_stream(adapter, "gpt", gpt.gpt, dim, self.device, next(gpt.parameters()).dtype,
                                  params.use_cache, new_positions=self.max_new_tokens + 1,
                                  rows_per_row=self.num_beams)
        self.rows: list[_StepRow] = []
        # (num_rows x num_beams, number_mel_codes): each stream row's next-code logits
        self.next_logits = torch.zeros((0, int(gpt.number_mel_codes)), dtype=torch.float32, device=self.device)

    @property
    def keys(self) -> list:
        return [r.key for r in self.rows]

    def _logits(self, hidden):
        """Last hidden states ``(rows, dim)`` -> float32 code logits ``(rows, number_mel_codes)`` (``final_norm`` +
        ``mel_head``, the package's ``lm_head``; called under the adapter's ``_gpt_autocast``)."""
        return self.gpt.mel_head(self.gpt.final_norm(hidden)).float()

    def _block(self, i: int) -> slice:
        """Stream rows of batch row ``i`` (its beams)."""
        return slice(i * self.num_beams, (i + 1) * self.num_beams)

    def prefill(self, rows) -> None:
        """Prefill ``rows`` ((key, ``AdapterRow``)) into the batch (see ``DecodeBatch.prefill``): their prompts are
        ``IndexTTS2Adapter.preprocess``'s (each repeated ``num_beams`` times), run in a stream of their own and
        merged into the running one. Raises what ``preprocess`` raises, or ``torch.OutOfMemoryError``; nothing joins
        then."""
        import time

        t0 = time.perf_counter()
        keys = [k for k, _ in rows]
        if len(set(keys)) != len(keys) or set(keys) & set(self.keys):
            raise ValueError("prefill got a key already in the batch")
        import torch

        with torch.no_grad():
            inputs = self.adapter.preprocess([r for _, r in rows], self.params)
        self.join(keys, inputs)
        self.prefill_s += time.perf_counter() - t0

    def join(self, keys: list, inputs: IndexTTS2Inputs) -> None:
        """Prefill the rows of preprocessed ``inputs`` (``IndexTTS2Adapter.preprocess``; row ``i`` under
        ``keys[i]``, each key new to the batch) into the running batch. Raises ``torch.OutOfMemoryError``; nothing
        joins then."""
        import torch

        adapter, gpt, beams = self.adapter, self.gpt, self.num_beams
        with torch.no_grad():
            num_new = len(keys) * beams
            start = torch.full((num_new,), gpt.start_mel_token, dtype=torch.long, device=self.device)
            zero = torch.zeros(num_new, dtype=torch.long, device=self.device)
            prefix_embeds = inputs.prefix_embeds.repeat_interleave(beams, dim=0)
            prefix_mask = inputs.prefix_mask.repeat_interleave(beams, dim=0)
            embeds = torch.cat([prefix_embeds, adapter._mel_embeddings(start, zero)], dim=1)
            mask = torch.cat([prefix_mask, torch.ones(num_new, 1, dtype=torch.long, device=self.device)], dim=1)
            sub = DecoderStream(gpt.gpt, self.stream.hidden_size, self.device, self.stream.dtype, self.params.use_cache)
            with adapter._gpt_autocast():
                logits = self._logits(sub.forward(embeds, mask))
            merged = self.stream.prepare_merge(sub)
            next_logits = torch.cat([self.next_logits, logits])
            new_rows = []
            for i, k in enumerate(keys):
                if beams > 1:
                    beam = adapter._beam_search(self.params, inputs.seeds[i], self.max_new_tokens)
                    new_rows.append(_StepRow(key=k, inputs=inputs, index=i, beam=beam,
                                             beam_state=beam.initial_state()))
                else:
                    # The package's repetition penalty sees its placeholder ids (all 1) and <start_mel> (module
                    # docstring).
                    new_rows.append(_StepRow(
                        key=k, inputs=inputs, index=i,
                        selector=_CodeSelector(self.params, [inputs.seeds[i]], adapter.repetition_penalty,
                                               adapter.undecodable_codes),
                        history=torch.tensor([[1, gpt.start_mel_token]], dtype=torch.long, device=self.device)))
        self.stream.commit(merged)
        self.next_logits = next_logits
        self.rows += new_rows

    def _generators(self, live: list[int]) -> list:
        out = []
        for i in live:
            row = self.rows[i]
            if row.beam is not None:
                if row.beam.generator is not None:
                    out.append(row.beam.generator)
            elif row.selector.sampler is not None:
                out += row.selector.sampler.generators("cpu")
        return out

    def decode_step(self) -> list[RowStep]:
        """One code per live row (see the class docstring); a row that ends gets its whole audio in this step's
        ``RowStep``. Raises ``torch.OutOfMemoryError``; the batch is then as before."""
        import torch

        live = self._count_step([r.stop_reason is not None for r in self.rows])
        if not live:
            return []
        stop = int(self.gpt.stop_mel_token)
        generators = self._generators(live)
        generator_states = [g.get_state() for g in generators]
        mark = self.stream.checkpoint()
        try:
            with torch.no_grad():
                if self.num_beams > 1:
                    step = self._beam_step(live, stop)
                else:
                    step = self._sample_step(live, stop)
        except BaseException:
            self.stream.rollback(mark)
            for g, state in zip(generators, generator_states):
                g.set_state(state)
            raise
        return step()

    def _feed(self, codes, positions, feed):
        """Forward codes ``(stream_rows,)`` at mel positions ``(stream_rows,)`` for the stream rows where ``feed``
        ``(stream_rows, 1)`` is 1; returns their next logits."""
        new = self.adapter._mel_embeddings(codes, positions)
        with self.adapter._gpt_autocast():
            return self._logits(self.stream.forward(new, feed))

    def _pick_codes(self, live: list[int]):
        """Each live row's next code, all rows at once (``(len(live),)`` int64, no host sync): the checkpoint's
        repetition penalty over each row's own history (histories padded with their placeholder id ``1``, which
        every history holds, so the penalised set is the row's own), then the argmax over decodable codes
        (greedy) or the warpers and one draw per row from its own generator (``exponential_race``: draw for draw
        what ``_CodeSelector.pick``'s ``torch.multinomial`` draws, rows with only undecodable mass taking their
        best decodable code as ``RowSampler.sample`` does)."""
        import torch

        from tts_app.adapters.step_sampling import exponential_race

        rows = [self.rows[i] for i in live]
        selector = rows[0].selector
        index = torch.tensor(live, dtype=torch.long, device=self.device)
        logits = self.next_logits[index]  # (n, vocab) float32
        width = max(int(r.history.shape[1]) for r in rows)
        history = torch.cat([torch.nn.functional.pad(r.history, (width - r.history.shape[1], 0), value=1)
                             for r in rows])  # (n, width)
        if selector.penalty is not None:
            logits = selector.penalty(history, logits)
        undecodable = selector.undecodable.to(logits.device)
        best = logits.masked_fill(undecodable, -float("inf")).argmax(dim=-1)
        if selector.greedy:
            return best
        generators = [g for r in rows for g in r.selector.sampler.generators("cpu")]
        probs = torch.softmax(selector.sampler.warp(history, logits).float(), dim=-1).masked_fill(undecodable, 0.0)
        where = generators[0].device
        drawn = exponential_race(probs.to(where), generators)[:, 0].to(logits.device)
        return torch.where(probs.sum(dim=-1) == 0, best, drawn)

    def _sample_step(self, live: list[int], stop: int):
        """Without beams: pick, compute the ending rows' audio and feed the others; returns the commit."""
        import torch

        num_rows = len(self.rows)
        if self.pooled:
            picked = dict(zip(live, self._pick_codes(live).tolist()))  # the step's one host sync (the stop check)
        else:  # the eager path: row by row, a host sync each
            picked = {i: int(self.rows[i].selector.pick(self.rows[i].history, self.next_logits[i:i + 1])[0])
                      for i in live}
        ends = {i for i in live if picked[i] == stop}
        capped = {i for i in live if i not in ends and len(self.rows[i].codes) + 1 >= self.max_new_tokens}
        finished = sorted(ends | capped)
        audio = dict(zip(finished, self._rows_audio(
            [(self.rows[i], self.rows[i].codes + ([picked[i]] if i not in ends else [])) for i in finished])))
        continuing = [i for i in live if i not in ends and i not in capped]
        new_logits = None
        if continuing:
            codes = torch.full((num_rows,), stop, dtype=torch.long, device=self.device)
            positions = torch.zeros(num_rows, dtype=torch.long, device=self.device)
            feed = torch.zeros((num_rows, 1), dtype=torch.long, device=self.device)
            for i in continuing:
                codes[i], positions[i], feed[i, 0] = picked[i], len(self.rows[i].codes) + 1, 1
            new_logits = self._feed(codes, positions, feed)

        def commit() -> list[RowStep]:  # assignments only
            if new_logits is not None:
                index = torch.tensor(continuing, dtype=torch.long, device=self.device)
                self.next_logits[index] = new_logits[index]
            out = []
            for i in live:
                row = self.rows[i]
                code = torch.tensor([[picked[i]]], dtype=torch.long, device=self.device)
                row.history = torch.cat([row.history, code], dim=1)
                if i in ends:
                    row.stop_reason = StopReason.END_OF_SPEECH
                else:
                    row.codes.append(picked[i])
                    if i in capped:
                        row.stop_reason = StopReason.MAX_NEW_TOKENS
                out.append(RowStep(key=row.key, audio=audio.get(i, np.zeros(0, dtype=np.float32)),
                                   stop_reason=row.stop_reason))
            return out

        return commit

    def _beam_step(self, live: list[int], stop: int):
        """With beams: advance each live row's search, compute the finished rows' audio, reorder the stream rows to
        the beams they continue and feed the running beams; returns the commit."""
        import torch

        num_stream_rows = len(self.rows) * self.num_beams
        order = torch.arange(num_stream_rows)
        codes = torch.full((num_stream_rows,), stop, dtype=torch.long)
        positions = torch.zeros(num_stream_rows, dtype=torch.long)
        feed = torch.zeros((num_stream_rows, 1), dtype=torch.long)
        states, results, continuing = {}, {}, []
        # pooled: one transfer per step (the searches run on the CPU); eager: one per row
        host_logits = self.next_logits.float().cpu() if self.pooled else self.next_logits
        for i in live:
            row, block = self.rows[i], self._block(i)
            states[i], source, picked = row.beam.step(row.beam_state, host_logits[block])
            if states[i].done:
                results[i] = row.beam.result(states[i])
            else:
                continuing.append(i)
                order[block] = block.start + source
                codes[block], positions[block], feed[block] = picked, states[i].num_steps, 1
        audio = dict(zip(results, self._rows_audio([(self.rows[i], results[i][0]) for i in results])))
        new_logits = None
        if continuing:
            self.stream.keep_rows(order.to(self.device))  # undone by rollback if the forward fails
            new_logits = self._feed(codes.to(self.device), positions.to(self.device), feed.to(self.device))

        def commit() -> list[RowStep]:  # assignments only
            if new_logits is not None:
                index = torch.cat([torch.arange(self._block(i).start, self._block(i).stop) for i in continuing])
                self.next_logits = self.next_logits[order.to(self.device)]
                self.next_logits[index.to(self.device)] = new_logits[index.to(self.device)]
            out = []
            for i in live:
                row = self.rows[i]
                row.beam_state = states[i]
                if i in results:
                    row.codes, hit = results[i]
                    row.stop_reason = StopReason.MAX_NEW_TOKENS if hit else StopReason.END_OF_SPEECH
                out.append(RowStep(key=row.key, audio=audio.get(i, np.zeros(0, dtype=np.float32)),
                                   stop_reason=row.stop_reason))
            return out

        return commit

    def _rows_audio(self, finished: list) -> list[np.ndarray]:
        """The waveforms of the rows this step ends, ``(row, codes)`` each: their second stage batched
        (``IndexTTS2Adapter.stage2_audio``, equal to each row alone: ``postprocess``'s per-row path), with the
        batch's ``num_diffusion_steps``; empty arrays without ``make_audio``."""
        if not self.make_audio or not finished:
            return [np.zeros(0, dtype=np.float32) for _ in finished]
        return self.adapter.stage2_audio([(row.inputs, row.index, codes) for row, codes in finished],
                                         self.params.num_diffusion_steps)

    def release(self, keys) -> None:
        import torch

        gone = set(keys)
        keep = [i for i, r in enumerate(self.rows) if r.key not in gone]
        if len(keep) == len(self.rows):
            return
        index = torch.tensor([j for i in keep for j in range(self._block(i).start, self._block(i).stop)],
                             dtype=torch.long, device=self.device)
        with torch.no_grad():
            self.stream.keep_rows(index)
            self.next_logits = self.next_logits[index]
        self.rows = [self.rows[i] for i in keep]


class IndexTTS2Adapter(TTSAdapter):
    """Adapter for IndexTTS-2 checkpoints (a folder with config.yaml + gpt.pth + s2mel.pth + bpe.model ..., or the
    hub id ``IndexTeam/IndexTTS-2``)."""

    family = "indextts2"
    display_name = "IndexTTS 2"
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "text is normalised by the front end (wetext) plus the package's punctuation map and English "
        "contractions, not by NeMo",
        "segments are cut as infer() cuts them (sentence ends and the punctuation its normaliser maps to a comma "
        "or dash, packed into 120 text tokens), but a piece's tokens are counted alone, not as a slice of the "
        "whole text's tokens: a BPE merge across a cut can move a boundary by a piece",
        "codes the codec cannot decode (start_mel_token) are never drawn: infer() can draw them and then returns "
        "no audio",
        "the GPT decodes rows in batches with a KV cache and each row's own mel positions (as in training); s2mel"
        " and the vocoder run batched across the rows that end together, each row equal to the package's code on "
        "it alone",
    )
    supports_decode_steps = True

    def __init__(self, model, processor: IndexTTS2Processor, device: str, dtype: str):
        self._conditioning_cache = _LRU(CONDITIONING_CACHE_SIZE)
        self._emotion_feature_cache = _LRU(CONDITIONING_CACHE_SIZE)
        self._emotion_text_cache = _LRU(EMOTION_TEXT_CACHE_SIZE)
        self._qwen_emotion = None
        self._qwen_lock = threading.Lock()
        self._undecodable = None
        self._stage2_batchable: bool | None = None  # _can_batch_stage2, decided once
        #: times the conditioning of a new reference clip / emotion clip was computed (not taken from the cache)
        self.num_conditioning_computed = 0
        super().__init__(model, processor, device, dtype)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu",
                        dtype: str = "float32") -> "IndexTTS2Adapter":
        """Load an IndexTTS-2 checkpoint with the package's own loaders (see the module docstring for where the
        auxiliary models come from).

        Args:
            id_or_path: a checkpoint folder or a hub id (``IndexTeam/IndexTTS-2``).
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32", "bfloat16" or "float16": the GPT's weights and KV cache; the other sub-models stay
                float32.

        Raises:
            ModelLoadError: the package is not installed; unknown dtype; not a checkpoint folder; a hub id or an
                auxiliary model that is not cached while the hub is unreachable; weights that do not load; a device
                the model cannot be moved to.
            torch.OutOfMemoryError: the weights do not fit.
        """
        import torch

        if dtype not in DTYPE_BYTES:
            raise ModelLoadError(f"dtype {dtype!r} is not supported for {cls.display_name}; "
                                 f"choose one of {sorted(DTYPE_BYTES)}")
        _import_package()
        _silence_flow_matching_progress()
        folder = _checkpoint_folder(id_or_path)
        try:
            model, processor = cls._load_modules(folder)
        except (ModelLoadError, torch.OutOfMemoryError):
            raise
        except Exception as exc:  # the package and torch raise many types for missing / corrupt / foreign files
            raise ModelLoadError(
                f"cannot load IndexTTS 2 checkpoint {str(id_or_path)!r}: {type(exc).__name__}: {exc}. Point --model "
                f"at an IndexTTS-2 folder or {HUB_ID}; `python -m tts_app make-tiny-model --family indextts2 --out "
                "DIR` writes a tiny random one.") from exc
        try:
            model = model.to(device).eval()
            _gpt_to_dtype(model.gpt, dtype)
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, AssertionError) as exc:
            raise ModelLoadError(f"cannot move {cls.display_name} to device {device!r}: {exc}") from exc
        return cls(model, processor, device=device, dtype=dtype)

    @staticmethod
    def _load_modules(folder: Path):
        """(IndexTTS2Model on the CPU, IndexTTS2Processor) from a checkpoint folder, with the package's loaders in
        the order ``IndexTTS2.__init__`` uses them."""
        import safetensors.torch
        import torch
        from indextts.gpt.model_v2 import UnifiedVoice
        from indextts.s2mel.modules.bigvgan import bigvgan
        from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
        from indextts.s2mel.modules.commons import MyModel, load_checkpoint2
        from indextts.utils.checkpoint import load_checkpoint
        from indextts.utils.maskgct_utils import build_semantic_codec
        from omegaconf import OmegaConf
        from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertModel

        cfg = OmegaConf.load(folder / "config.yaml")
        _check_checkpoint_files(folder, cfg)
        gpt = UnifiedVoice(**cfg.gpt)
        load_checkpoint(gpt, str(folder / cfg.gpt_checkpoint))
        gpt.eval()
        gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)

        aux = _auxiliary(folder)
        try:
            w2v_dir = _resolve_model_dir(aux, W2V_BERT_REPO, "config.json", OFFICIAL_FLAT_W2V_BERT)
            hub = dict(cache_dir=aux.cache_dir, local_files_only=aux.local_files_only)
            feature_extractor = SeamlessM4TFeatureExtractor.from_pretrained(w2v_dir, **hub)
            semantic_model = Wav2Vec2BertModel.from_pretrained(w2v_dir, **hub).eval()
        except OSError as exc:
            raise _auxiliary_error("w2v-BERT 2.0 features", W2V_BERT_REPO, folder, exc) from exc
        stats = torch.load(folder / cfg.w2v_stat, map_location="cpu")
        semantic_codec = build_semantic_codec(cfg.semantic_codec)
        try:
            codec_file = _resolve_file(aux, SEMANTIC_CODEC_REPO, SEMANTIC_CODEC_FILE, OFFICIAL_FLAT_SEMANTIC_CODEC)
        except Exception as exc:  # huggingface_hub offline / not-found errors
            raise _auxiliary_error("MaskGCT semantic codec", SEMANTIC_CODEC_REPO, folder, exc) from exc
        safetensors.torch.load_model(semantic_codec, codec_file)
        semantic_codec.eval()

        s2mel = MyModel(cfg.s2mel, use_gpt_latent=True)
        s2mel, _, _, _ = load_checkpoint2(s2mel, None, str(folder / cfg.s2mel_checkpoint), load_only_params=True,
                                          ignore_modules=[], is_distributed=False)
        s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
        s2mel.eval()
        try:
            campplus_file = _resolve_file(aux, CAMPPLUS_REPO, CAMPPLUS_FILE, OFFICIAL_FLAT_CAMPPLUS)
        except Exception as exc:
            raise _auxiliary_error("CAM++ speaker encoder", CAMPPLUS_REPO, folder, exc) from exc
        campplus = CAMPPlus(feat_dim=80, embedding_size=192)
        campplus.load_state_dict(torch.load(campplus_file, map_location="cpu"))
        campplus.eval()
        vocoder_repo = str(cfg.vocoder.name)
        try:
            vocoder = bigvgan.BigVGAN.from_pretrained(_resolve_model_dir(aux, vocoder_repo, "config.json",
                                                                         OFFICIAL_FLAT_VOCODER),
                                                      use_cuda_kernel=False, cache_dir=aux.cache_dir,
                                                      local_files_only=aux.local_files_only)
        except Exception as exc:
            raise _auxiliary_error("BigVGAN vocoder", vocoder_repo, folder, exc) from exc
        vocoder.remove_weight_norm()
        vocoder.eval()

        emo_matrix = torch.load(folder / cfg.emo_matrix, map_location="cpu")
        spk_matrix = torch.load(folder / cfg.spk_matrix, map_location="cpu")
        qwen_dir = folder / str(cfg.qwen_emo_path).strip()
        return _assemble(cfg, folder / cfg.dataset["bpe_model"], feature_extractor,
                         dict(gpt=gpt, semantic_model=semantic_model, semantic_codec=semantic_codec, s2mel=s2mel,
                              campplus=campplus, vocoder=vocoder, semantic_mean=stats["mean"],
                              semantic_std=torch.sqrt(stats["var"]), emo_matrix=emo_matrix, spk_matrix=spk_matrix),
                         qwen_dir if (qwen_dir / "config.json").is_file() else None)

    def _measure_facts(self) -> ModelFacts:
        """ModelFacts from config.yaml and the tokenizer (see the module docstring, "KV cache accounting")."""
        cfg = self.processor.config
        gpt = cfg.gpt
        sampling_rate = int(cfg.s2mel["preprocess_params"]["sr"])
        hop = int(cfg.s2mel["preprocess_params"]["spect_params"]["hop_length"])
        text_positions_per_char = max(len(self._text_ids(t)) / len(t) for t in _MEASURE_TEXTS)
        frames_per_second = sampling_rate / hop / MEL_FRAMES_PER_CODE
        capacity = int(gpt.max_mel_tokens)
        defaults = GenerationDefaults.from_generation_config(
            None,  # IndexTTS-2 checkpoints have no generation config: every knob is the package's default
            family_defaults={
                "greedy": (False, f"{_UPSTREAM}: do_sample=True (samples)"),
                "temperature": (UPSTREAM_TEMPERATURE, _UPSTREAM),
                "top_p": (UPSTREAM_TOP_P, _UPSTREAM),
                "top_k": (UPSTREAM_TOP_K, _UPSTREAM),
                "num_beams": (UPSTREAM_NUM_BEAMS, f"{_UPSTREAM}: num_beams=3, beam sampling (do_sample=True)"),
                "length_penalty": (UPSTREAM_LENGTH_PENALTY, _UPSTREAM),
                "num_diffusion_steps": (S2MEL_DIFFUSION_STEPS, f"{_UPSTREAM}: diffusion_steps=25 (s2mel flow "
                                        f"matching; fast preset: {S2MEL_FAST_DIFFUSION_STEPS}, as vLLM-Omni)"),
                "max_new_tokens": (min(UPSTREAM_MAX_MEL_TOKENS, capacity),
                                   f"{_UPSTREAM} max_mel_tokens={UPSTREAM_MAX_MEL_TOKENS}, capped by config.yaml "
                                   f"gpt.max_mel_tokens={capacity}"),
            },
            absent={"cfg_scale": "IndexTTS 2's GPT has no guidance (s2mel's CFG rate 0.7 is fixed by the package)"})
        return self._model_facts(
            num_parameters=count_parameters(self.model),
            sampling_rate=sampling_rate,
            num_layers=int(gpt.layers),
            num_kv_heads=int(gpt.heads),
            head_dim=int(gpt.model_dim) // int(gpt.heads),
            cfg_multiplier=1,
            frames_per_second=frames_per_second,
            text_positions_per_char=text_positions_per_char,
            reference_positions_per_second=0.0,
            max_segment_chars=MAX_SEGMENT_CHARS,
            max_segment_tokens=MAX_TEXT_TOKENS_PER_SEGMENT,
            generation_defaults=defaults,
            languages=LANGUAGES,
            supports_pinyin=True,
            needs_reference_text=False,
            supports_emotion=True,
            supports_emotion_text=self.processor.qwen_emotion_dir is not None,
        )

    @property
    def undecodable_codes(self):
        """``(number_mel_codes,)`` bool on the model's device: True for the GPT's codes the semantic codec cannot
        decode, i.e. ``start_mel_token`` and any other id at or above the codec's ``codebook_size``, except
        ``stop_mel_token`` (which ends a row and never reaches the codec). Decoding never picks them (see the module
        docstring, "Undecodable codes")."""
        import torch

        if self._undecodable is None:
            gpt = self.model.gpt
            codes = torch.arange(int(gpt.number_mel_codes), device=self.device)
            size = int(self.processor.config.semantic_codec.codebook_size)
            self._undecodable = (codes >= size) & (codes != int(gpt.stop_mel_token))
        return self._undecodable

    @property
    def repetition_penalty(self) -> float:
        """The repetition penalty decoding applies (``infer_generator``'s default 10.0; not a request knob)."""
        return UPSTREAM_REPETITION_PENALTY

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """GPT KV positions of one segment at the end of decoding: per beam row 34 conditioning + text tokens
        (``text_chars x text_positions_per_char``, rounded up) + <start_text>/<stop_text> + <start_mel> +
        ``max_new_tokens`` codes, times the checkpoint's default ``num_beams`` (each beam is a row with its own KV
        cache; the engine's estimate does not see a request's own ``num_beams``, so a request asking for more beams
        than the default is under-estimated by that ratio). The reference length and its transcript do not matter
        (the perceiver always gives 32 latents)."""
        text = int(math.ceil(text_chars * self.facts.text_positions_per_char))
        beams = self.facts.generation_defaults.num_beams or 1
        return (NUM_CONDITIONING_POSITIONS + text + NUM_TEXT_FRAME_TOKENS + 1 + max_new_tokens) * beams

    # ------------------------------------------------------------------ text

    def model_text(self, text: str) -> str:
        """The text as the package's tokenizer receives it after its normaliser: front-end pinyin tokens ``{zhong4}``
        written as the package writes pinyin (``ZHONG4``; ``ju4`` -> ``JV4``), the normaliser's English contraction
        rule (``TextNormalizer.ENGLISH_CONTRACTION_PATTERN``: "it's" -> "it is", ...), then its punctuation map
        (Chinese map when the text reads as Chinese, ``TextNormalizer.use_chinese``)."""
        normalizer = self.processor.normalizer

        def pinyin(match: re.Match) -> str:
            return f" {normalizer.correct_pinyin(match.group(1)).upper()} "

        text = _PINYIN_TOKEN_RE.sub(pinyin, text)
        # the package's first step in both languages, before NeMo: "it's" -> "it is", "that's" -> "that is", ...
        text = re.sub(normalizer.ENGLISH_CONTRACTION_PATTERN, r"\1 is", text, flags=re.IGNORECASE)
        rep_map = normalizer.zh_char_rep_map if normalizer.use_chinese(text) else normalizer.char_rep_map
        pattern = re.compile("|".join(re.escape(p) for p in rep_map))
        return pattern.sub(lambda m: rep_map[m.group()], text)

    def unencodable_characters(self, chars) -> set[str]:
        """The characters of ``chars`` the checkpoint's sentencepiece model maps to ``<unk>`` (or to nothing), each
        read as ``_text_ids`` reads text (the package's punctuation map, then its tokenizer); cached per
        character."""
        unk_id = self.processor.tokenizer.unk_token_id
        out = set()
        for char in set(chars):
            if char not in self._unencodable:
                ids = self._text_ids(char) if char.strip() else [None]
                self._unencodable[char] = not ids or unk_id in ids
            if self._unencodable[char]:
                out.add(char)
        return out

    def count_text_tokens(self, text: str) -> int:
        """Text tokens of ``text`` as the GPT reads them (``_text_ids``): the segment unit, as upstream's
        ``max_text_tokens_per_segment`` counts them."""
        return len(self._text_ids(text))

    def segment_measure(self):
        """Text tokens (``count_text_tokens``), and pieces cut where ``infer()`` cuts before it packs them into
        ``max_text_tokens_per_segment``: its ``TextTokenizer.split_segments`` ends a piece at "," and "-" (besides
        sentence ends) after ``TextNormalizer.char_rep_map``, so at every character that map turns into one of them
        ("，", "、", "；", "：", "—", "～", "·", ...)."""
        from tts_app.frontend.segment import SegmentMeasure

        rep_map = self.processor.normalizer.char_rep_map
        ends = {",", "-"} | {k for k, v in rep_map.items() if v in (",", "-") and len(k) == 1}
        return SegmentMeasure(self.count_text_tokens, piece_ends=frozenset(ends))

    def _text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` (``model_text`` then the package's ``TextTokenizer.encode``)."""
        return list(self.processor.tokenizer.encode(self.model_text(text)))

    # ------------------------------------------------------------------ conditioning

    def _w2v_features(self, audio_16k):
        """``(1, num_samples)`` float32 16 kHz -> ``(1, frames, 1024)`` normalised w2v-BERT features
        (``IndexTTS2.get_emb``)."""
        import torch

        inputs = self.processor.feature_extractor(audio_16k, sampling_rate=W2V_BERT_SAMPLING_RATE,
                                                  return_tensors="pt")
        with torch.no_grad():
            out = self.model.semantic_model(input_features=inputs["input_features"].to(self.device),
                                            attention_mask=inputs["attention_mask"].to(self.device),
                                            output_hidden_states=True)
        feat = out.hidden_states[W2V_BERT_LAYER]
        return (feat - self.model.semantic_mean) / self.model.semantic_std

    def _emotion_features(self, audio: np.ndarray):
        """w2v-BERT features of a clip read as an emotion clip: resampled to 16 kHz with librosa (the package's
        ``librosa.load(path, sr=16000)``), cut to 15 s. Cached by content."""
        import librosa
        import torch

        key = _audio_key(audio)
        cached = self._emotion_feature_cache.get(key)
        if cached is not None:
            return cached
        audio_16k = librosa.resample(np.asarray(audio, dtype=np.float32), orig_sr=self.facts.sampling_rate,
                                     target_sr=W2V_BERT_SAMPLING_RATE)
        audio_16k = torch.from_numpy(audio_16k[: int(MAX_REFERENCE_S * W2V_BERT_SAMPLING_RATE)])[None]
        features = self._w2v_features(audio_16k)
        self.num_conditioning_computed += 1
        self._emotion_feature_cache.put(key, features)
        return features

    def speaker_conditioning(self, audio: np.ndarray) -> SpeakerConditioning:
        """The conditioning of one reference clip (float32 ``(num_samples,)`` at ``facts.sampling_rate``), computed
        as ``IndexTTS2._get_speaker_conditioning`` does (clip cut to 15 s; torchaudio resampling to 16 kHz for
        w2v-BERT and CAM++) plus the GPT's speaker latents; cached by content (``CONDITIONING_CACHE_SIZE`` clips)."""
        import torch
        import torchaudio

        key = _audio_key(audio)
        cached = self._conditioning_cache.get(key)
        if cached is not None:
            return cached
        sr = self.facts.sampling_rate
        model = self.model
        wave = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None][:, : int(MAX_REFERENCE_S * sr)]
        audio_22k = torchaudio.transforms.Resample(sr, sr)(wave)
        audio_16k = torchaudio.transforms.Resample(sr, W2V_BERT_SAMPLING_RATE)(wave)
        with torch.no_grad():
            spk_cond_emb = self._w2v_features(audio_16k)
            _, s_ref = model.semantic_codec.quantize(spk_cond_emb)
            from indextts.s2mel.modules.audio import mel_spectrogram

            ref_mel = mel_spectrogram(audio_22k.to(spk_cond_emb.device).float(), **self.processor.mel_args)
            ref_target_lengths = torch.LongTensor([ref_mel.size(2)]).to(ref_mel.device)
            feat = torchaudio.compliance.kaldi.fbank(audio_16k.to(ref_mel.device), num_mel_bins=80, dither=0,
                                                     sample_frequency=W2V_BERT_SAMPLING_RATE)
            feat = feat - feat.mean(dim=0, keepdim=True)
            style = model.campplus(feat.unsqueeze(0))
            prompt_condition = model.s2mel.models["length_regulator"](
                s_ref, ylens=ref_target_lengths, n_quantizers=LENGTH_REGULATOR_QUANTIZERS, f0=None)[0]
            # The package passes cond_lengths = spk_cond_emb.shape[-1] (the feature width, >= frames: no mask).
            gpt_dtype = next(model.gpt.parameters()).dtype
            with self._gpt_autocast():
                speech_latent = model.gpt.get_conditioning(
                    spk_cond_emb.to(gpt_dtype).transpose(1, 2),
                    torch.tensor([spk_cond_emb.shape[-1]], device=spk_cond_emb.device))
        conditioning = SpeakerConditioning(spk_cond_emb=spk_cond_emb, speech_latent=speech_latent, style=style,
                                           prompt_condition=prompt_condition, ref_mel=ref_mel,
                                           emo_cond_emb=self._emotion_features(audio))
        self.num_conditioning_computed += 1
        self._conditioning_cache.put(key, conditioning)
        return conditioning

    def _emotion_from_text(self, text: str) -> tuple[float, ...]:
        """The Qwen emotion model's 8-value vector for ``text`` (the package's ``QwenEmotion``, loaded on first use,
        ``generate`` capped at ``EMOTION_TEXT_MAX_NEW_TOKENS``); cached by text.

        Raises:
            InputError: the checkpoint has no emotion model.
        """
        cached = self._emotion_text_cache.get(text)
        if cached is not None:
            return cached
        qwen = self._load_qwen_emotion()
        with self._qwen_lock:
            emotions = qwen.inference(text)
        vector = tuple(float(emotions[name]) for name in EMOTION_NAMES)
        self._emotion_text_cache.put(text, vector)
        return vector

    def _load_qwen_emotion(self):
        if self.processor.qwen_emotion_dir is None:
            raise InputError(Notice("ix2_no_emotion_model"))
        with self._qwen_lock:
            if self._qwen_emotion is None:
                from indextts.emotion import QwenEmotion

                qwen = QwenEmotion(str(self.processor.qwen_emotion_dir))
                generate = qwen.model.generate

                def capped_generate(*args, **kwargs):
                    kwargs["max_new_tokens"] = min(int(kwargs.get("max_new_tokens") or EMOTION_TEXT_MAX_NEW_TOKENS),
                                                   EMOTION_TEXT_MAX_NEW_TOKENS)
                    return generate(*args, **kwargs)

                qwen.model.generate = capped_generate
                self._qwen_emotion = qwen
            return self._qwen_emotion

    def emotion_vector(self, conditioning: SpeakerConditioning, emotion: RowEmotion | None):
        """The row's emovec ``(1, model_dim)`` and the emotion clip features it came from, as ``infer_generator``
        computes them (see the module docstring for the vector's normalisation).

        Raises:
            InputError: emotion from text on a checkpoint without an emotion model.
        """
        import torch
        from indextts.emotion import find_most_similar_cosine
        from indextts.infer_v2 import IndexTTS2

        gpt = self.model.gpt
        dtype = next(gpt.parameters()).dtype
        vector = None
        emo_cond_emb = conditioning.emo_cond_emb
        alpha = 1.0
        if emotion is not None:
            if emotion.text is not None:  # as infer(use_emo_text=True): the emotion model's values as they are
                vector = list(self._emotion_from_text(emotion.text))
            elif emotion.vector is not None:  # as the official web UI does with its sliders
                vector = IndexTTS2.normalize_emo_vec(None, list(emotion.vector), apply_bias=True)
            if vector is not None:
                scale = max(0.0, min(1.0, float(emotion.weight)))
                if scale != 1.0:  # the package's 4-decimal truncation
                    vector = [int(x * scale * 10000) / 10000 for x in vector]
            elif emotion.reference_audio is not None:
                emo_cond_emb = self._emotion_features(emotion.reference_audio)
                alpha = float(emotion.weight)
        spk = conditioning.spk_cond_emb.to(dtype)
        emo = emo_cond_emb.to(dtype)
        device = spk.device
        with torch.no_grad(), self._gpt_autocast():
            emovec = gpt.merge_emovec(spk, emo, torch.tensor([spk.shape[-1]], device=device),
                                      torch.tensor([emo.shape[-1]], device=device), alpha=alpha).to(dtype)
            if vector is not None:
                weight = torch.tensor(vector, device=device)
                emo_num = self.processor.emo_num
                index = [find_most_similar_cosine(conditioning.style, rows)
                         for rows in torch.split(self.model.spk_matrix, emo_num)]
                rows = torch.cat([m[i].unsqueeze(0) for i, m in zip(index, torch.split(self.model.emo_matrix,
                                                                                         emo_num))], 0)
                emovec_mat = torch.sum(weight.unsqueeze(1) * rows, 0).unsqueeze(0)
                emovec = (emovec_mat + (1 - torch.sum(weight)) * emovec).to(dtype)
        return emovec, emo_cond_emb

    # ------------------------------------------------------------------ tiny checkpoint

    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a complete tiny IndexTTS-2 folder with random weights, in the real layout: ``config.yaml`` (the real
        one with ``TINY_CONFIG_OVERRIDES``), ``gpt.pth``, ``s2mel.pth``, ``bpe.model`` (sentencepiece BPE trained in
        code on the GB2312 level-1 characters, with every Mandarin syllable+tone the package can write, e.g.
        ``ZHONG4``, as its own piece), ``wav2vec2bert_stats.pt``, ``feat1.pt``, ``feat2.pt``, a tiny Qwen3 emotion
        model in ``qwen0.6bemo4-merge/``, and the four auxiliary models in a hub cache (``hf_cache/``, the layout
        ``huggingface-cli download --cache-dir`` writes) so the package itself loads it offline with
        ``HF_HUB_CACHE=DIR/hf_cache``. Same ``seed`` -> identical files.

        Returns:
            ``out_dir`` as a Path (created).
        """
        import torch

        _import_package()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _write_tiny_checkpoint(out, seed)
        return out

    # ------------------------------------------------------------------ batch pipeline

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> IndexTTS2Inputs:
        """Rows -> left-padded GPT prefixes ``[34 conditioning][<start_text> text <stop_text>]`` on the device.

        Each row's reference clip is required (IndexTTS 2 clones a voice); its conditioning is computed once per
        distinct clip and reused. ``reference_text`` is not used (IndexTTS 2 does not read the transcript).

        Raises:
            InputError: empty batch; a row with empty text, with no text token, or with more text tokens than the
                model takes (``gpt.max_text_tokens``); emotion from text on a checkpoint without an emotion model.
            ReferenceAudioError: a row without reference audio, or one that is not a non-empty, finite, 1-D array.
        """
        import torch

        if not rows:
            raise InputError("preprocess got an empty batch; pass at least one row")
        gpt = self.model.gpt
        cfg = self.processor.config.gpt
        dtype = next(gpt.parameters()).dtype
        prefixes, text_tokens, conditioning, emovecs, emo_embs = [], [], [], [], []
        for i, row in enumerate(rows):
            if not row.text or not row.text.strip():
                raise InputError(f"row {i}: text is empty; give the text to speak")
            self._check_audio(i, row.reference_audio, Notice("ix2_reference_audio"))
            if row.emotion is not None and row.emotion.reference_audio is not None:
                self._check_audio(i, row.emotion.reference_audio, Notice("ix2_emotion_reference_audio"))
            ids = self._text_ids(row.text)
            if not ids:
                raise InputError(Notice("ix2_nothing_readable", row=i, text=row.text))
            if len(ids) > int(cfg.max_text_tokens):
                raise InputError(Notice("ix2_too_many_tokens", row=i, num_tokens=len(ids),
                                        max_tokens=int(cfg.max_text_tokens)))
            cond = self.speaker_conditioning(row.reference_audio)
            emovec, emo_emb = self.emotion_vector(cond, row.emotion)
            tokens = torch.tensor([ids], dtype=torch.int32, device=self.device)
            with torch.no_grad(), self._gpt_autocast():
                prefixes.append(self._prefix(cond.speech_latent, emovec, tokens).to(dtype))
            text_tokens.append(tokens)
            conditioning.append(cond)
            emovecs.append(emovec)
            emo_embs.append(emo_emb)
        longest = max(p.shape[0] for p in prefixes)
        embeds = torch.zeros(len(rows), longest, int(cfg.model_dim), dtype=dtype, device=self.device)
        mask = torch.zeros(len(rows), longest, dtype=torch.long, device=self.device)
        for i, prefix in enumerate(prefixes):  # left padding, as UnifiedVoice.prepare_gpt_inputs pads a batch
            embeds[i, longest - prefix.shape[0]:] = prefix
            mask[i, longest - prefix.shape[0]:] = 1
        return IndexTTS2Inputs(prefix_embeds=embeds, prefix_mask=mask, text_tokens=text_tokens,
                               conditioning=conditioning, emovecs=emovecs, emo_cond_embs=emo_embs,
                               seeds=[row.seed for row in rows])

    def _check_audio(self, index: int, audio, what: Notice) -> None:
        if audio is None:
            raise ReferenceAudioError(Notice("ix2_needs_audio", row=index, what=what))
        audio = np.asarray(audio)
        if audio.ndim != 1 or audio.size == 0:
            raise ReferenceAudioError(Notice("ix2_audio_shape", row=index, what=what, shape=tuple(audio.shape),
                                             rate_hz=self.facts.sampling_rate))
        if not np.isfinite(audio).all():
            raise ReferenceAudioError(Notice("ix2_audio_not_finite", row=index, what=what))

    def _prefix(self, speech_latent, emovec, text_tokens):
        """One row's GPT prefix ``(34 + num_text_tokens + 2, model_dim)``, as ``UnifiedVoice.inference_speech`` +
        ``prepare_gpt_inputs`` build it."""
        import torch
        import torch.nn.functional as F

        gpt = self.model.gpt
        device = text_tokens.device
        ones, zeros = torch.ones(1, dtype=torch.long, device=device), torch.zeros(1, dtype=torch.long, device=device)
        conds = torch.cat([speech_latent + emovec.unsqueeze(1), gpt.speed_emb(ones).unsqueeze(1),
                           gpt.speed_emb(zeros).unsqueeze(1)], 1)[0]  # (34, dim)
        text = F.pad(F.pad(text_tokens[0], (1, 0), value=gpt.start_text_token), (0, 1), value=gpt.stop_text_token)
        positions = torch.arange(0, text.size(-1), device=device)
        text_emb = gpt.text_embedding(text) + gpt.text_pos_embedding.emb(positions)
        return torch.cat([conds, text_emb])

    def start_decode(self, params: SynthesisParams, prefix_cache: PrefixCache | None = None
                     ) -> IndexTTS2DecodeBatch:
        """An empty running batch (step interface, ``IndexTTS2DecodeBatch``) for rows with these knobs; the engine's
        continuous batching prefills rows into it, steps it and releases rows. ``prefix_cache`` is not used (a
        voice's conditioning is already computed once per clip, ``speaker_conditioning``).

        Raises:
            InputError: ``max_new_tokens`` above the checkpoint's ``gpt.max_mel_tokens``.
        """
        self._check_max_new_tokens(params)
        return IndexTTS2DecodeBatch(self, self.resolve(params))

    def _check_max_new_tokens(self, params: SynthesisParams) -> int:
        max_new = self.max_new_tokens(params)
        capacity = int(self.processor.config.gpt.max_mel_tokens)
        if max_new > capacity:
            raise InputError(Notice("ix2_max_new_tokens", max_new_tokens=max_new, capacity=capacity))
        return max_new

    def generate(self, inputs: IndexTTS2Inputs, params: SynthesisParams) -> IndexTTS2Outputs:
        """Decode up to ``self.max_new_tokens(params)`` semantic codes per row with the one decode loop
        (``IndexTTS2DecodeBatch``: the whole batch prefilled together, one GPT forward per step; with ``num_beams``
        > 1 each row's beam search); a row stops at its own stop code, the loop when every row has.
        ``params.cfg_scale`` is ignored (no guidance in the GPT stage).

        Raises:
            InputError: ``max_new_tokens`` above the checkpoint's ``gpt.max_mel_tokens``.
            torch.OutOfMemoryError: the batch does not fit on the device.
        """
        import torch

        self._check_max_new_tokens(params)
        batch = IndexTTS2DecodeBatch(self, self.resolve(params), make_audio=False)
        num_rows = inputs.prefix_embeds.shape[0]
        batch.join(list(range(num_rows)), inputs)
        while any(row.stop_reason is None for row in batch.rows):
            batch.decode_step()
        stop = int(self.model.gpt.stop_mel_token)
        hit = [row.stop_reason is StopReason.MAX_NEW_TOKENS for row in batch.rows]
        # (batch, steps): each row's codes, then its stop code (a row cut at the cap has none), padded with stop codes
        width = max(1, max(len(row.codes) + (0 if h else 1) for row, h in zip(batch.rows, hit)))
        codes = torch.full((num_rows, width), stop, dtype=torch.long)
        for r, row in enumerate(batch.rows):
            codes[r, :len(row.codes)] = torch.tensor(row.codes, dtype=torch.long)
        return IndexTTS2Outputs(codes=codes.to(inputs.prefix_embeds.device),
                                code_lengths=[len(row.codes) for row in batch.rows], hit_max_new_tokens=hit,
                                num_diffusion_steps=batch.params.num_diffusion_steps)

    def _beam_search(self, params: SynthesisParams, seed: int, max_new_tokens: int) -> _BeamSearch:
        gpt = self.model.gpt
        return _BeamSearch(params, seed, self.repetition_penalty, self.undecodable_codes, gpt.start_mel_token,
                           gpt.stop_mel_token, max_new_tokens)

    def _mel_embeddings(self, codes, positions):
        """codes ``(batch,)`` int64 at mel positions ``(batch,)`` -> ``(batch, 1, model_dim)`` GPT input."""
        gpt = self.model.gpt
        return (gpt.mel_embedding(codes) + gpt.mel_pos_embedding.emb(positions)).unsqueeze(1)

    def _gpt_autocast(self):
        """Autocast in the GPT's dtype when it is not float32, as the package runs its half-precision GPT (its
        ``null_position_embeddings`` are float32 zeros, which would otherwise promote the hidden states)."""
        import torch

        dtype = getattr(torch, self.dtype)
        return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype,
                              enabled=dtype != torch.float32)

    def stop_reasons(self, outputs: IndexTTS2Outputs, inputs: IndexTTS2Inputs) -> list[StopReason]:
        """``MAX_NEW_TOKENS`` for a row that never produced its stop code, else ``END_OF_SPEECH``."""
        return [StopReason.MAX_NEW_TOKENS if hit else StopReason.END_OF_SPEECH for hit in outputs.hit_max_new_tokens]

    # ------------------------------------------------------------------ codes -> audio

    def postprocess(self, outputs: IndexTTS2Outputs, inputs: IndexTTS2Inputs) -> list[np.ndarray]:
        """Codes -> one float32 waveform ``(num_samples,)`` per row at ``facts.sampling_rate``: the rows' second stage
        batched (``stage2_audio``, each row equal to the package's code on it alone: ``code_latents`` -> ``s2mel``
        -> ``vocode``) with ``outputs.num_diffusion_steps``. A row that stopped at once gives an empty array."""
        rows = [(inputs, i, outputs.codes[i, :length].tolist()) for i, length in enumerate(outputs.code_lengths)]
        return self.stage2_audio(rows, outputs.num_diffusion_steps)

    def code_latents(self, inputs: IndexTTS2Inputs, row: int, codes):
        """The GPT latents of one row's codes ``(1, num_codes)``: the package's full ``UnifiedVoice.forward`` (no
        cache) over conditioning + text + codes, as ``infer_generator`` calls it. Returns ``(1, num_codes,
        model_dim)``."""
        import torch

        gpt = self.model.gpt
        cond = inputs.conditioning[row]
        text = inputs.text_tokens[row]
        device = codes.device
        dtype = next(gpt.parameters()).dtype
        with torch.no_grad(), self._gpt_autocast():
            return gpt(cond.speech_latent, text, torch.tensor([text.shape[-1]], device=device), codes,
                       torch.tensor([codes.shape[-1]], device=device), inputs.emo_cond_embs[row].to(dtype),
                       cond_mel_lengths=torch.tensor([cond.spk_cond_emb.shape[-1]], device=device),
                       emo_cond_mel_lengths=torch.tensor([inputs.emo_cond_embs[row].shape[-1]], device=device),
                       emo_vec=inputs.emovecs[row], use_speed=torch.zeros(1, dtype=torch.long, device=device))

    def s2mel_condition(self, conditioning: SpeakerConditioning, codes, latent):
        """The flow-matching condition of one row: semantic codes ``(1, n)`` + their GPT latents ``(1, n,
        model_dim)`` -> ``(1, reference_frames + frames, channels)`` float32 (the reference condition, then the
        length regulator's output for the codes, ``frames = int(n x 1.72)``), with the package's modules as
        ``infer_generator`` runs them.

        Raises:
            RuntimeError: a code the codec cannot decode (never: decoding masks them, ``undecodable_codes``).
        """
        import torch

        s2mel = self.model.s2mel.models
        device = codes.device
        codebook_size = int(self.processor.config.semantic_codec.codebook_size)
        if codes.numel() and int(codes.max()) >= codebook_size:
            raise RuntimeError(f"IndexTTS 2 produced semantic code {int(codes.max())}, which its codec "
                               f"({codebook_size} codes) cannot decode; undecodable_codes should have masked it")
        with torch.no_grad():
            latent = s2mel["gpt_layer"](latent.float())
            s_infer = self.model.semantic_codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2) + latent
            target_lengths = (torch.LongTensor([codes.shape[-1]]).to(device) * MEL_FRAMES_PER_CODE).long()
            cond = s2mel["length_regulator"](s_infer, ylens=target_lengths, n_quantizers=LENGTH_REGULATOR_QUANTIZERS,
                                             f0=None)[0]
            return torch.cat([conditioning.prompt_condition, cond], dim=1)

    @staticmethod
    def flow_matching_noise(seed: int, num_channels: int, num_frames: int):
        """The flow-matching start noise of one row: ``(1, num_channels, num_frames)`` float32 on the CPU from
        ``torch.Generator().manual_seed(seed)`` (the package's ``BASECFM.inference`` draws the same shape from the
        global RNG). Batched or alone, a row draws this same tensor."""
        import torch

        return torch.randn([1, num_channels, num_frames], generator=torch.Generator().manual_seed(int(seed)))

    def s2mel(self, conditioning: SpeakerConditioning, codes, latent, seed: int,
              num_diffusion_steps: int = S2MEL_DIFFUSION_STEPS):
        """Semantic codes ``(1, n)`` + their GPT latents ``(1, n, model_dim)`` -> mel ``(1, 80, frames)`` float32 of the
        generated speech (reference part cut off), with the package's modules and constants (``infer_generator``):
        ``s2mel_condition``, the noise ``(1, 80, reference_frames + frames)`` of ``flow_matching_noise(seed)``, then
        the package's ``solve_euler`` over ``num_diffusion_steps`` Euler steps (the package: 25) with CFG rate 0.7.
        One row alone; ``stage2_audio`` runs rows batched."""
        return self._solve_alone(conditioning, self.s2mel_condition(conditioning, codes, latent), seed,
                                 num_diffusion_steps)

    def _solve_alone(self, conditioning: SpeakerConditioning, cat_condition, seed: int, num_diffusion_steps: int):
        """``s2mel`` from the row's condition ``(1, frames_total, channels)`` on: the package's ``solve_euler``."""
        import torch

        device = cat_condition.device
        with torch.no_grad():
            cfm = self.model.s2mel.models["cfm"]
            noise = self.flow_matching_noise(seed, cfm.in_channels, cat_condition.size(1)).to(device)
            t_span = torch.linspace(0, 1, int(num_diffusion_steps) + 1, device=device)
            mel = cfm.solve_euler(noise, torch.LongTensor([cat_condition.size(1)]).to(device), conditioning.ref_mel,
                                  cat_condition, conditioning.style, None, t_span, S2MEL_CFG_RATE)
        return mel[:, :, conditioning.ref_mel.size(-1):]

    def vocode(self, mel) -> np.ndarray:
        """Mel ``(1, 80, frames)`` -> float32 waveform ``(frames x hop,)`` clamped to [-1, 1] (BigVGAN, as the
        package)."""
        import torch

        with torch.no_grad():
            wav = self.model.vocoder(mel.float()).squeeze()
        return torch.clamp(wav, -1.0, 1.0).float().cpu().numpy().reshape(-1)

    # ------------------------------------------------------------------ second stage, batched

    def stage2_audio(self, rows: list, num_diffusion_steps: int = S2MEL_DIFFUSION_STEPS) -> list[np.ndarray]:
        """The second stage of rows whose codes are done: code latents -> s2mel -> BigVGAN, one float32 waveform
        ``(num_samples,)`` per row, each equal (float tolerance) to that row alone (``code_latents`` -> ``s2mel``
        -> ``vocode``, the package's code).

        Args:
            rows: ``(inputs, index, codes)`` per row: its ``IndexTTS2Inputs``, its row there, its codes (a list of
                ints; empty gives an empty waveform).
            num_diffusion_steps: Euler steps of the flow matching (``SynthesisParams.num_diffusion_steps``).

        The code latents and the length regulator run row by row (one GPT forward each; the regulator's
        interpolation is per row); the flow matching (2 x ``num_diffusion_steps`` DiT forwards, the bulk) and the
        vocoder run on groups of rows padded to the group's longest (``_stage2_batch``): at most
        ``STAGE2_MAX_BATCH_ROWS`` rows and ``STAGE2_MAX_BATCH_FRAMES`` padded frames, rows of similar length
        together. A group that runs out of device memory is split in halves down to single rows, which run the
        package's own path; a single row that does not fit raises.

        Raises:
            torch.OutOfMemoryError: one row alone does not fit (the decode step is then rolled back).
        """
        import torch

        audio: list = [np.zeros(0, dtype=np.float32) for _ in rows]
        prepared = []  # (position in rows, conditioning, condition (1, frames_total, channels), seed)
        for position, (inputs, index, codes) in enumerate(rows):
            if not codes:
                continue
            code_tensor = torch.tensor([list(codes)], dtype=torch.long, device=torch.device(self.device))
            latent = self.code_latents(inputs, index, code_tensor)
            conditioning = inputs.conditioning[index]
            prepared.append((position, conditioning, self.s2mel_condition(conditioning, code_tensor, latent),
                             inputs.seeds[index]))
        prepared.sort(key=lambda item: -item[2].size(1))  # longest first: similar lengths share a group
        group: list = []
        for item in prepared:
            if group and (len(group) >= STAGE2_MAX_BATCH_ROWS
                          or (len(group) + 1) * group[0][2].size(1) > STAGE2_MAX_BATCH_FRAMES):
                self._stage2_group(group, num_diffusion_steps, audio)
                group = []
            group.append(item)
        if group:
            self._stage2_group(group, num_diffusion_steps, audio)
        return audio

    def _stage2_group(self, group: list, num_diffusion_steps: int, audio: list) -> None:
        """Run ``group`` (``stage2_audio``'s prepared rows) batched; out of memory: halves, then rows alone."""
        import torch

        if len(group) == 1 or not self._can_batch_stage2():
            for position, conditioning, condition, seed in group:
                audio[position] = self.vocode(self._solve_alone(conditioning, condition, seed, num_diffusion_steps))
            return
        try:
            for (position, *_), wave in zip(group, self._stage2_batch(group, num_diffusion_steps)):
                audio[position] = wave
            return
        except torch.OutOfMemoryError:
            pass  # leave the except block first, so its traceback (holding the batch's tensors) is freed
        logger.warning("IndexTTS 2 second stage: out of memory for %d rows together; splitting them", len(group))
        if torch.device(self.device).type == "cuda":
            torch.cuda.empty_cache()
        half = len(group) // 2
        self._stage2_group(group[:half], num_diffusion_steps, audio)
        self._stage2_group(group[half:], num_diffusion_steps, audio)

    def _can_batch_stage2(self) -> bool:
        """False where batching would not equal rows alone: the vocoder's fused CUDA activation (its resampling is
        not reachable by ``_RowLengths``), a module ``_RowLengths`` cannot make row-exact, or a flow matching that
        zeroes the prompt's content (``zero_prompt_speech_token``, off in IndexTTS-2's config)."""
        if self._stage2_batchable is None:
            vocoder_h = getattr(self.model.vocoder, "h", {}) or {}
            cfm = self.model.s2mel.models["cfm"]
            self._stage2_batchable = not vocoder_h.get("use_cuda_kernel", False) \
                and not getattr(cfm, "zero_prompt_speech_token", False) \
                and not _RowLengths.unsupported(cfm.estimator) and not _RowLengths.unsupported(self.model.vocoder) \
                and _RowLengths.reflect_margin(self.model.vocoder) == 0
        return self._stage2_batchable

    def _stage2_batch(self, group: list, num_diffusion_steps: int) -> list[np.ndarray]:
        """Flow matching + vocoder of several rows in one batch: each row's condition, reference mel and noise
        (``flow_matching_noise``, its own seed, its own length) padded to the longest row; each Euler step is one
        DiT forward for all rows and their CFG twins; per-row lengths mask the DiT's attention (its ``x_lens``) and
        reset whatever the padding would leak into a row's last frames (``_RowLengths``: the DiT's WaveNet convs,
        every BigVGAN conv and anti-aliasing resampler). Returns each row's waveform, clamped to [-1, 1]."""
        import torch

        cfm = self.model.s2mel.models["cfm"]
        device = group[0][2].device
        num_rows = len(group)
        total_lengths = [item[2].size(1) for item in group]
        prompt_lengths = [item[1].ref_mel.size(-1) for item in group]
        max_total = max(total_lengths) + _RowLengths.reflect_margin(cfm.estimator)  # every row padded (reflect)
        channels = cfm.in_channels
        with torch.no_grad():
            # (rows, frames_total, condition channels), (rows, 80, frames_total): zero-padded after each row's end
            mu = torch.zeros((num_rows, max_total, group[0][2].size(2)), dtype=torch.float32, device=device)
            noise = torch.zeros((num_rows, channels, max_total), dtype=torch.float32, device=device)
            prompt = torch.zeros_like(noise)
            for r, (_, conditioning, condition, seed) in enumerate(group):
                mu[r, :total_lengths[r]] = condition[0]
                noise[r, :, :total_lengths[r]] = self.flow_matching_noise(seed, channels, total_lengths[r])[0]
                prompt[r, :, :prompt_lengths[r]] = conditioning.ref_mel[0, :, :prompt_lengths[r]]
            style = torch.cat([item[1].style for item in group]).float()  # (rows, style dim)
            lengths = torch.tensor(total_lengths, dtype=torch.long, device=device)
            t_span = torch.linspace(0, 1, int(num_diffusion_steps) + 1, device=device)
            x = _solve_euler_rows(cfm.estimator, noise, prompt, torch.tensor(prompt_lengths, device=device), lengths,
                                  mu, style, t_span, S2MEL_CFG_RATE)
            frames = [t - p for t, p in zip(total_lengths, prompt_lengths)]
            mel = torch.zeros((num_rows, channels, max(frames)), dtype=torch.float32, device=device)
            for r in range(num_rows):
                mel[r, :, :frames[r]] = x[r, :, prompt_lengths[r]:total_lengths[r]]
            vocoder = self.model.vocoder
            with _RowLengths(vocoder, torch.tensor(frames, dtype=torch.long, device=device), max(frames)):
                wav = vocoder(mel)  # (rows, 1, max frames x hop)
            hop = wav.size(-1) // max(frames)
            return [torch.clamp(wav[r, 0, :frames[r] * hop], -1.0, 1.0).float().cpu().numpy()
                    for r in range(num_rows)]


# ---------------------------------------------------------------------------------------------- second stage helpers


class _RowLengths:
    """While active (``with``), the modules of ``model`` that mix neighbouring frames see each row of a padded batch
    as if it ran alone: before each such module, the frames after the row's end are set to what that module's own
    padding puts there when the row runs alone - zeros before a zero-padded convolution (and any transposed
    convolution: inputs past the end add nothing to the row's outputs), the row's last frame before a resampler that
    pads by replicating its edge (BigVGAN's anti-aliasing ``UpSample1d`` / ``LowPassFilter1d``), the mirror image
    before a reflect-padded convolution (the DiT WaveNet's encodec ``SConv1d``). Everything else in the DiT and
    BigVGAN is per frame, or masked by the DiT itself (its attention keys, from ``x_lens``).

    Args:
        model: the module tree to hook (the DiT estimator, or BigVGAN).
        lengths: ``(batch,)`` int64 frames of each row at the model's input resolution; with CFG the batch holds
            the rows twice, and so must ``lengths``.
        full_length: the padded input length; a hooked module's input length is ``full_length x scale`` (BigVGAN's
            upsampling keeps lengths exact multiples), so a row's length there is ``lengths x scale``.

    Raises:
        ValueError (on entering): a module that mixes frames in a way not covered here (``unsupported``).
    """

    def __init__(self, model, lengths, full_length: int):
        self.model = model
        self.lengths = lengths
        self.full_length = int(full_length)
        self.handles: list = []

    @staticmethod
    def fill_mode(module) -> str | None:
        """How the frames after a row's end must look to ``module``: "zero", "replicate", "reflect", None (it does
        not mix frames, or a wrapper above it handles its input), or "unsupported"."""
        import torch

        name = type(module).__name__
        if name == "SConv1d":  # pads itself (pad_mode), then runs an unpadded conv
            effective_kernel = (module.conv.conv.kernel_size[0] - 1) * module.conv.conv.dilation[0] + 1
            if effective_kernel == 1:
                return None
            return {"reflect": "reflect", "replicate": "replicate"}.get(module.pad_mode, "zero")
        if name in ("UpSample1d", "LowPassFilter1d"):
            if name == "LowPassFilter1d" and not module.padding:
                return "unsupported"
            return "replicate" if name == "UpSample1d" or module.padding_mode == "replicate" else "zero"
        if isinstance(module, torch.nn.ConvTranspose1d):
            return "zero" if module.kernel_size[0] > 1 else None
        if isinstance(module, torch.nn.Conv1d) and module.kernel_size[0] > 1:
            if module.padding in ("same",) or (isinstance(module.padding, tuple) and module.padding[0] > 0):
                return {"zeros": "zero", "reflect": "reflect", "replicate": "replicate"}.get(module.padding_mode,
                                                                                             "unsupported")
            return "unsupported"
        return None

    @classmethod
    def unsupported(cls, model) -> list[str]:
        """Names of ``model``'s modules that mix frames in a way ``_RowLengths`` cannot make row-exact."""
        skipped: set = set()
        out = []
        for name, module in model.named_modules():
            if any(name.startswith(prefix + ".") for prefix in skipped):
                continue
            mode = cls.fill_mode(module)
            if mode == "unsupported":
                out.append(name)
            elif type(module).__name__ == "SConv1d":
                skipped.add(name)
        return out

    @classmethod
    def reflect_margin(cls, model) -> int:
        """Frames of padding the batch needs after its longest row: a reflect-padded module mirrors the frames
        before the tensor's end, so a row ending less than its right padding before that end would see the wrong
        mirror; with this many padded frames after every row, each row's fill holds its whole mirror (counted at
        ``model``'s input resolution: valid for models without resampling, the DiT; BigVGAN has no reflect padding)."""
        margin = 0
        for module in model.modules():
            if cls.fill_mode(module) == "reflect":
                conv = module.conv.conv if type(module).__name__ == "SConv1d" else module
                effective_kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
                margin = max(margin, (effective_kernel - conv.stride[0]) // 2 + 1)
        return margin

    def _row_ends(self, x):
        """``(batch, 1)`` row ends at the resolution of ``x`` ``(batch, channels, frames)``."""
        frames = x.shape[-1]
        if frames % self.full_length:
            raise RuntimeError(f"a hooked module got {frames} frames, not a multiple of the padded {self.full_length}")
        return (self.lengths * (frames // self.full_length))[:, None]

    def _fill(self, x, mode: str):
        """``x`` ``(batch, channels, frames)`` with each row's frames after its end replaced (``fill_mode``)."""
        import torch

        positions = torch.arange(x.shape[-1], device=x.device)[None, :]  # (1, frames)
        ends = self._row_ends(x)  # (batch, 1)
        if mode == "zero":
            return torch.where((positions < ends)[:, None, :], x, torch.zeros((), dtype=x.dtype, device=x.device))
        if mode == "replicate":
            index = torch.minimum(positions, ends - 1)
        else:  # reflect about the last frame, as F.pad(mode="reflect") pads a row alone
            index = torch.where(positions < ends, positions, (2 * (ends - 1) - positions).clamp(min=0))
        return torch.gather(x, 2, index[:, None, :].expand(-1, x.shape[1], -1))

    def __enter__(self):
        bad = self.unsupported(self.model)
        if bad:
            raise ValueError(f"cannot batch rows of different lengths through {', '.join(bad)}")
        skipped: set = set()
        for name, module in self.model.named_modules():
            if any(name.startswith(prefix + ".") for prefix in skipped):
                continue
            mode = self.fill_mode(module)
            if type(module).__name__ == "SConv1d":
                skipped.add(name)
            if mode is None:
                continue
            self.handles.append(module.register_forward_pre_hook(
                lambda _module, args, mode=mode: (self._fill(args[0], mode), *args[1:])))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def _solve_euler_rows(estimator, noise, prompt, prompt_lengths, lengths, mu, style, t_span, cfg_rate: float):
    """The flow matching's fixed-step Euler solver over a padded batch of rows, each with its own reference (prompt)
    length and total length: the same computation as the package's ``BASECFM.solve_euler`` per row (which takes
    one prompt length for its batch): the prompt's frames of ``x`` held at 0, the reference mel as ``prompt_x``,
    each step one estimator forward over the rows and their unconditional twins (prompt, style and condition
    zeroed), velocity ``(1 + cfg_rate) v_cond - cfg_rate v_uncond``.

    Args:
        estimator: the package's DiT (``cfm.estimator``).
        noise: ``(rows, 80, frames)`` float32 start noise, zero after each row's end.
        prompt: ``(rows, 80, frames)`` reference mel in each row's first ``prompt_lengths`` frames, else 0.
        prompt_lengths, lengths: ``(rows,)`` int64 reference frames and total frames per row.
        mu: ``(rows, frames, channels)`` condition, zero after each row's end.
        style: ``(rows, style dim)`` CAM++ style vectors.
        t_span: ``(num_steps + 1,)`` times from 0 to 1.
        cfg_rate: classifier-free guidance rate (the package: 0.7).

    Returns ``(rows, 80, frames)``: each row's result in its first ``lengths`` frames (its prompt part 0).
    """
    import torch

    num_rows, _, frames = noise.shape
    in_prompt = (torch.arange(frames, device=noise.device)[None, :] < prompt_lengths[:, None])[:, None, :]
    x = noise.masked_fill(in_prompt, 0.0)
    guided = cfg_rate > 0
    if guided:
        prompt_in = torch.cat([prompt, torch.zeros_like(prompt)])
        style_in = torch.cat([style, torch.zeros_like(style)])
        mu_in = torch.cat([mu, torch.zeros_like(mu)])
        lengths_in = torch.cat([lengths, lengths])
    else:
        prompt_in, style_in, mu_in, lengths_in = prompt, style, mu, lengths
    t = t_span[0]
    with _RowLengths(estimator, lengths_in, frames):
        for step in range(1, len(t_span)):
            dt = t_span[step] - t_span[step - 1]
            x_in = torch.cat([x, x]) if guided else x
            velocity = estimator(x_in, prompt_in, lengths_in, t.reshape(1).expand(x_in.size(0)), style_in, mu_in)
            if guided:
                conditional, unconditional = velocity.chunk(2, dim=0)
                velocity = (1.0 + cfg_rate) * conditional - cfg_rate * unconditional
            x = (x + dt * velocity).masked_fill(in_prompt, 0.0)
            t = t + dt
    return x


# ---------------------------------------------------------------------------------------------------- tiny checkpoint


def _tiny_bpe_model(path: Path) -> int:
    """Train the tiny checkpoint's sentencepiece BPE model into ``path`` (see ``make_tiny_checkpoint``). Ids 0/1/2 are
    ``<s>``/``</s>``/``<unk>``, as the package's ``TextTokenizer`` assumes (``bos_token_id=0``, ``eos_token_id=1``;
    config.yaml ``start_text_token: 0``, ``stop_text_token: 1``). Returns the vocabulary size."""
    import sentencepiece as spm
    from indextts.utils.common import tokenize_by_CJK_char
    from indextts.utils.front import TextNormalizer

    from tts_app.adapters.tiny_vocab import common_characters
    from tts_app.frontend.g2p import valid_readings

    normalizer = TextNormalizer()
    pinyin = sorted({normalizer.correct_pinyin(r).upper() for r in valid_readings()})
    chars = [c for c in common_characters() if not c.isspace()]
    # Lines as the tokenizer sees text: CJK characters split by spaces, Latin letters upper case. The merges budget
    # (one per character) lets BPE learn a "▁X" piece per CJK character, as a BPE trained on such text has.
    lines = [tokenize_by_CJK_char("".join(chars[i:i + 40])) for i in range(0, len(chars), 40)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="bpe",
                                   vocab_size=2 * len(chars) + len(pinyin) + 64, character_coverage=1.0,
                                   user_defined_symbols=pinyin, bos_id=0, eos_id=1, unk_id=2, pad_id=-1,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2)
    path.write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path)).get_piece_size()


def _hub_snapshot(hub_cache: Path, repo_id: str) -> Path:
    """Create ``models--ORG--NAME/{refs/main, snapshots/COMMIT/}`` in a hub cache (the huggingface_hub cache layout)
    and return the snapshot folder. COMMIT is a fixed hash of the name (no real revision exists)."""
    commit = hashlib.sha1(f"tts_app tiny {repo_id}".encode()).hexdigest()
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def _assemble(cfg, bpe_path: Path, feature_extractor, modules: dict, qwen_emotion_dir: Path | None):
    """(IndexTTS2Model, IndexTTS2Processor) from loaded or freshly built sub-models (``modules``: gpt,
    semantic_model, semantic_codec, s2mel, campplus, vocoder, semantic_mean, semantic_std, emo_matrix,
    spk_matrix)."""
    from indextts.utils.front import TextNormalizer, TextTokenizer

    spect = cfg.s2mel["preprocess_params"]["spect_params"]
    mel_args = {  # as IndexTTS2._load_emotion_matrices
        "n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
        "num_mels": spect["n_mels"], "sampling_rate": cfg.s2mel["preprocess_params"]["sr"],
        "fmin": spect.get("fmin", 0), "fmax": None if spect.get("fmax", "None") == "None" else 8000,
        "center": False,
    }
    model = _module_class()(**modules)
    processor = IndexTTS2Processor(config=cfg, tokenizer=TextTokenizer(str(bpe_path), normalizer=None),
                                   normalizer=TextNormalizer(), feature_extractor=feature_extractor, mel_args=mel_args,
                                   emo_num=[int(n) for n in cfg.emo_num], qwen_emotion_dir=qwen_emotion_dir)
    return model, processor


def _random_modules(cfg, bigvgan_config: dict, w2v_config) -> dict:
    """Every sub-model of an IndexTTS-2 checkpoint with random weights (the package's own classes; the global RNG,
    on the current default device), in a fixed order. ``w2v_config``: a ``Wav2Vec2BertConfig``."""
    import torch
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.s2mel.modules.bigvgan import bigvgan
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel
    from indextts.utils.maskgct_utils import build_semantic_codec
    from transformers import Wav2Vec2BertModel

    modules = {"gpt": UnifiedVoice(**cfg.gpt), "s2mel": MyModel(cfg.s2mel, use_gpt_latent=True)}
    hidden = int(cfg.semantic_codec.hidden_size)
    modules["semantic_mean"], modules["semantic_var"] = torch.randn(hidden) * 0.1, torch.rand(hidden) + 0.5
    num_rows = sum(cfg.emo_num)
    modules["spk_matrix"] = torch.randn(num_rows, int(cfg.s2mel.style_encoder.dim))
    modules["emo_matrix"] = torch.randn(num_rows, int(cfg.gpt.model_dim)) * 0.1
    modules["semantic_model"] = Wav2Vec2BertModel(w2v_config).eval()
    modules["semantic_codec"] = build_semantic_codec(cfg.semantic_codec)
    modules["campplus"] = CAMPPlus(feat_dim=80, embedding_size=192)
    modules["vocoder"] = bigvgan.BigVGAN(bigvgan.AttrDict(bigvgan_config))
    return modules


def build_random_adapter(config: dict, bigvgan_config: dict, *, work_dir: str | Path, device: str = "cpu",
                         dtype: str = "float32", w2v_config=None, seed: int = 0) -> IndexTTS2Adapter:
    """An adapter on an IndexTTS-2 architecture with random weights, built in memory directly on ``device`` (for
    the GPU check of the full-size ``INDEXTTS2_CONFIG``; nothing is read or downloaded). The text tokenizer is the
    tiny checkpoint's sentencepiece model (trained in code into ``work_dir``), which leaves every weight shape as
    ``config`` says (its ``number_text_tokens`` must hold that vocabulary).

    Args:
        config: a config.yaml as a dict (``INDEXTTS2_CONFIG``).
        bigvgan_config: the vocoder's hyper-parameters (``BIGVGAN_22KHZ_CONFIG``).
        work_dir: folder for the tokenizer file.
        device, dtype: as ``from_pretrained``.
        w2v_config: ``Wav2Vec2BertConfig`` (default: transformers' defaults, which are w2v-BERT 2.0's).
        seed: seed of the random weights.

    Raises:
        ModelLoadError: the package is missing, or the tokenizer needs more text tokens than ``config`` has.
    """
    import torch
    from omegaconf import OmegaConf
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig

    _import_package()
    _silence_flow_matching_progress()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    cfg = OmegaConf.create(config)
    vocab = _tiny_bpe_model(work_dir / "bpe.model")
    if vocab > int(cfg.gpt.number_text_tokens):
        raise ModelLoadError(f"the tokenizer has {vocab} pieces but the config only {cfg.gpt.number_text_tokens}")
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        modules = _random_modules(cfg, bigvgan_config, w2v_config or Wav2Vec2BertConfig())
    gpt, s2mel, vocoder = modules["gpt"], modules["s2mel"], modules["vocoder"]
    gpt.eval().post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    s2mel.eval()
    vocoder.remove_weight_norm()
    vocoder.eval()
    modules["semantic_std"] = torch.sqrt(modules.pop("semantic_var"))
    model, processor = _assemble(cfg, work_dir / "bpe.model", SeamlessM4TFeatureExtractor(), modules, None)
    model = model.to(device).eval()
    _gpt_to_dtype(model.gpt, dtype)
    return IndexTTS2Adapter(model, processor, device=device, dtype=dtype)


def _write_tiny_checkpoint(out: Path, seed: int) -> None:
    """The body of ``IndexTTS2Adapter.make_tiny_checkpoint`` (global RNG already seeded)."""
    import safetensors.torch
    import torch
    from omegaconf import OmegaConf
    from transformers import Qwen3Config, Qwen3ForCausalLM, SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig

    from tts_app.adapters.tiny_vocab import build_char_tokenizer

    config = _deep_update(INDEXTTS2_CONFIG, TINY_CONFIG_OVERRIDES)
    config["gpt"]["number_text_tokens"] = _tiny_bpe_model(out / config["dataset"]["bpe_model"])
    cfg = OmegaConf.create(config)
    OmegaConf.save(cfg, out / "config.yaml")
    # w2v-BERT 2.0: the real hidden size and 17 layers (get_emb reads layer 17); everything else minimal.
    w2v_config = Wav2Vec2BertConfig(hidden_size=int(cfg.semantic_codec.hidden_size), num_hidden_layers=W2V_BERT_LAYER,
                                    num_attention_heads=1, intermediate_size=8, conv_depthwise_kernel_size=3,
                                    position_embeddings_type=None)
    modules = _random_modules(cfg, TINY_BIGVGAN_CONFIG, w2v_config)
    gpt = modules["gpt"]
    with torch.no_grad():
        gpt.mel_head.bias[cfg.gpt.stop_mel_token] = TINY_STOP_BIAS
    torch.save(gpt.state_dict(), out / cfg.gpt_checkpoint)
    torch.save({"net": {name: module.state_dict() for name, module in modules["s2mel"].models.items()}},
               out / cfg.s2mel_checkpoint)
    torch.save({"mean": modules["semantic_mean"], "var": modules["semantic_var"]}, out / cfg.w2v_stat)
    torch.save(modules["spk_matrix"], out / cfg.spk_matrix)
    torch.save(modules["emo_matrix"], out / cfg.emo_matrix)

    hub = out / HUB_CACHE_SUBFOLDER
    snapshot = _hub_snapshot(hub, W2V_BERT_REPO)
    modules["semantic_model"].save_pretrained(snapshot)
    SeamlessM4TFeatureExtractor().save_pretrained(snapshot)
    snapshot = _hub_snapshot(hub, SEMANTIC_CODEC_REPO)
    (snapshot / SEMANTIC_CODEC_FILE).parent.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_model(modules["semantic_codec"], str(snapshot / SEMANTIC_CODEC_FILE))
    torch.save(modules["campplus"].state_dict(), _hub_snapshot(hub, CAMPPLUS_REPO) / CAMPPLUS_FILE)
    modules["vocoder"].save_pretrained(_hub_snapshot(hub, str(cfg.vocoder.name)))

    # Qwen3 emotion model (the real one is Qwen3-0.6B fine-tuned): char tokenizer with the Qwen chat markers and a
    # chat template that honours enable_thinking=False as Qwen3's does.
    qwen_dir = out / str(cfg.qwen_emo_path).strip()
    tokenizer = build_char_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
                                     unk_token="<|endoftext|>", pad_token="<|endoftext|>", eos_token="<|im_end|>")
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not "
        "enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
    qwen = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=1024,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None))
    qwen.save_pretrained(qwen_dir)
    tokenizer.save_pretrained(qwen_dir)
