"""A tiny random GLM-TTS checkpoint in upstream's exact folder layout (``make-tiny-model --family glmtts``):

    DIR/ckpt/llm/                       config.json + model.safetensors + generation_config.json (LlamaForCausalLM)
    DIR/ckpt/vq32k-phoneme-tokenizer/   tokenizer.model (tiktoken ranks) + tokenizer_config.json
    DIR/ckpt/speech_tokenizer/          config.json + model.safetensors + preprocessor_config.json (Whisper-VQ)
    DIR/ckpt/flow/, DIR/ckpt/hift/, DIR/ckpt/vocos2d/   the flow model and vocoders (``flow.py`` / ``vocoder.py``)
    DIR/frontend/campplus.onnx          a CAM++ stand-in with the real input / output (fbank (1, T, 80) -> (1, 192))

The text tokenizer is byte-level BPE: the 256 bytes, merges learned in code from a few zh/en sentences, then the
added tokens of GLM-4 (``<|endoftext|>`` ...), ``<|begin_of_audio|>`` / ``<|end_of_audio|>``, the phoneme tokens of
the phoneme-in input (``<|ZH|>``, ``<|ONG4|>``, ...) and the 32768 speech tokens ``<|audio_0|>`` ...
``<|audio_32767|>`` (upstream looks up ``<|audio_32767|>``), so the LM's vocabulary is ~33.6k. The LM's output rows
are scaled so that random weights still speak mostly speech tokens: the speech-token rows give logits of standard
deviation ~3, EOS (``<|user|>``) ~12 (a row ends a few steps after its minimum length), the text rows 0 (practically
never drawn). Same ``seed`` -> identical files.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import numpy as np

#: GLM-4's added tokens in their order (GLM-4 ``tokenizer_config.json``), then the audio markers of GLM-4-Voice.
GLM4_SPECIAL_TOKENS = ("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                       "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
                       "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>")
NUM_AUDIO_TOKENS = 32768
_CORPUS = ("今天天气很好，我们一起去公园散步。你好，世界。这是一个测试。重要的事情说三遍。",
           "Hello there, how are you today? The quick brown fox jumps over the lazy dog. This is a test.")
NUM_MERGES = 120

TINY_LLM = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                rope_theta=10000.0)
TINY_SPEECH_TOKENIZER = dict(d_model=16, encoder_attention_heads=2, encoder_ffn_dim=32, encoder_layers=2,
                             decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=32, num_mel_bins=128,
                             max_source_positions=1500, quantize_position=2, quantize_vocab_size=NUM_AUDIO_TOKENS,
                             pooling_kernel_size=2, pooling_type="avg", pooling_position=2,
                             encoder_causal_convolution=True, quantize_causal_block_size=200,
                             quantize_encoder_only=False)
SPEAKER_DIM = 192


def _learn_merges(corpus: tuple[str, ...], num_merges: int) -> list[bytes]:
    """Byte-pair merges learned greedily from ``corpus`` (most frequent adjacent pair first, ties by bytes)."""
    words = [[bytes([b]) for b in text.encode("utf-8")] for text in corpus]
    merges = []
    for _ in range(num_merges):
        pairs = Counter((a, b) for word in words for a, b in zip(word, word[1:]))
        if not pairs:
            break
        (a, b), count = max(pairs.items(), key=lambda item: (item[1], item[0]))
        if count < 2:
            break
        merges.append(a + b)
        for w, word in enumerate(words):
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            words[w] = out
    return merges


def phoneme_tokens() -> list[str]:
    """Every phoneme token upstream's phoneme-in input can hold (``<|ZH|>``, ``<|ONG4|>``, ...): the phonemes of every
    reading in pypinyin's dictionary, as ``tts_app.frontend.phoneme_in`` spells them, sorted."""
    import re

    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.pinyin_dict import pinyin_dict

    from tts_app.frontend.phoneme_in import _reading_phonemes

    readings = {to_tone3(r, neutral_tone_with_five=True) for value in pinyin_dict.values() for r in value.split(",")}
    found = set()
    for reading in readings:
        found.update(re.findall(r"<\|[A-Z]+[1-5]?\|>", _reading_phonemes(reading) or ""))
    return sorted(found)


def write_text_tokenizer(folder: Path) -> int:
    """``tokenizer.model`` + ``tokenizer_config.json``; returns the vocabulary size."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens = [bytes([b]) for b in range(256)] + _learn_merges(_CORPUS, NUM_MERGES)
    (folder / "tokenizer.model").write_text(
        "".join(f"{base64.b64encode(t).decode()} {rank}\n" for rank, t in enumerate(tokens)), encoding="utf-8")
    added = list(GLM4_SPECIAL_TOKENS) + phoneme_tokens() + [f"<|audio_{i}|>" for i in range(NUM_AUDIO_TOKENS)]
    decoder = {str(len(tokens) + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True} for i, t in enumerate(added)}
    config = {"added_tokens_decoder": decoder, "additional_special_tokens": list(GLM4_SPECIAL_TOKENS),
              "auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLM4Tokenizer", None]},
              "clean_up_tokenization_spaces": False, "do_lower_case": False, "eos_token": "<|endoftext|>",
              "model_max_length": 128000, "pad_token": "<|endoftext|>", "padding_side": "left",
              "remove_space": False, "tokenizer_class": "ChatGLM4Tokenizer"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    return len(tokens) + len(added)


def write_llm(folder: Path, vocab_size: int, special: dict[str, int]) -> None:
    """``LlamaForCausalLM`` with ``TINY_LLM`` and the output rows scaled as the module docstring says."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, bos_token_id=special["pad"], eos_token_id=special["eoa"],
                         pad_token_id=special["pad"], **TINY_LLM)
    model = LlamaForCausalLM(config).eval()
    hidden = TINY_LLM["hidden_size"]
    with torch.no_grad():
        weight = torch.zeros(vocab_size, hidden)
        audio = slice(special["ats"], special["ats"] + NUM_AUDIO_TOKENS)
        weight[audio] = torch.randn(NUM_AUDIO_TOKENS, hidden) * (3.0 / hidden ** 0.5)
        weight[special["eoa"]] = torch.randn(hidden) * (12.0 / hidden ** 0.5)
        model.lm_head.weight.copy_(weight)
    model.generation_config = GenerationConfig(bos_token_id=special["pad"], eos_token_id=special["eoa"],
                                               pad_token_id=special["pad"])
    model.save_pretrained(folder)


def write_speech_tokenizer(folder: Path) -> None:
    """Whisper-VQ weights under upstream's names (``model.encoder.*``, incl. ``embed_positions2``), its config and the
    Whisper feature extractor's ``preprocessor_config.json``."""
    import math

    import torch
    from safetensors.torch import save_file
    from transformers import WhisperConfig, WhisperFeatureExtractor

    from tts_app.adapters.glmtts.speech_tokenizer import WhisperVQEncoder

    folder.mkdir(parents=True, exist_ok=True)
    config = WhisperConfig(**TINY_SPEECH_TOKENIZER)
    config.architectures = ["WhisperVQForConditionalGeneration"]
    config.save_pretrained(folder)
    config._attn_implementation = "eager"
    encoder = WhisperVQEncoder(config)
    for p in encoder.parameters():
        torch.nn.init.normal_(p, std=0.2)
    state = {f"model.encoder.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    positions2 = math.ceil(config.max_source_positions / config.pooling_kernel_size)
    state["model.encoder.embed_positions2.weight"] = encoder.embed_positions.weight[:positions2].clone()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folder)


def write_campplus(path: Path, seed: int) -> None:
    """An ONNX CAM++ stand-in: fbank ``(1, T, 80)`` -> mean over time -> linear -> tanh -> ``(1, 192)``, with the real
    model's input layout (onnx's helper API)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((80, SPEAKER_DIM)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["input", "axes"], ["mean"], keepdims=0),
             helper.make_node("MatMul", ["mean", "weight"], ["projected"]),
             helper.make_node("Tanh", ["projected"], ["output"])]
    graph = helper.make_graph(
        nodes, "campplus_tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "T", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, SPEAKER_DIM])],
        initializer=[numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
                     numpy_helper.from_array(weight, "weight")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="tts_app")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _write_token2wav(ckpt: Path, seed: int) -> None:
    """The flow model and vocoders (``tts_app.adapters.glmtts.tiny_stage2``: flow/, hift/hift.pt,
    vocos2d/generator_jit.ckpt)."""
    from tts_app.adapters.glmtts.tiny_stage2 import write_tiny_stage2

    write_tiny_stage2(ckpt, seed)


def write_tiny_checkpoint(out: Path, seed: int = 0) -> Path:
    """Write the whole tiny checkpoint into ``out`` (created). Returns ``out``."""
    import torch

    from tts_app.adapters.glmtts.adapter import SPECIAL_TOKENS
    from tts_app.adapters.glmtts.text_tokenizer import GLMTextTokenizer

    out = Path(out)
    ckpt = out / "ckpt"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        vocab_size = write_text_tokenizer(ckpt / "vq32k-phoneme-tokenizer")
        tokenizer = GLMTextTokenizer(ckpt / "vq32k-phoneme-tokenizer")
        special = {name: tokenizer.token_id(token) for name, token in SPECIAL_TOKENS.items()}
        write_llm(ckpt / "llm", vocab_size, special)
        write_speech_tokenizer(ckpt / "speech_tokenizer")
        write_campplus(out / "frontend" / "campplus.onnx", seed)
        _write_token2wav(ckpt, seed)
    return out
