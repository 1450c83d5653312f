"""The engine on real tiny checkpoints: KV estimate vs the model config, OOM survival, batched == one by one."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tts_app.adapters import load_adapter
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

# family -> (config.json section holding the decoder whose KV cache persists over the whole row, or None for the
# top level; forward rows per user row). CSM's depth decoder restarts its cache every frame, so only the backbone
# counts; VibeVoice and Dia run classifier-free guidance as a second row.
KV_STACK = {
    "vibevoice": ("text_config", 2),
    "csm": (None, 1),
    "higgs": (None, 1),
    "dia": ("decoder_config", 2),
}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# families used for audio comparisons: their tiny checkpoints speak (non-empty audio) under greedy decoding;
# VibeVoice is the default model, CSM a second architecture (Mimi codec, depth decoder)
AUDIO_FAMILIES = ["vibevoice", "csm"]
LONG_TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
             "How vexingly quick daft zebras jump. Sphinx of black quartz, judge my vow. 你好，世界。")


def _reference(sampling_rate: int, seconds: float = 1.5) -> ReferenceAudio:
    t = np.arange(int(sampling_rate * seconds)) / sampling_rate
    samples = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)
    return ReferenceAudio(samples=samples, sampling_rate=sampling_rate, key="tone")


@pytest.fixture(scope="module", params=AUDIO_FAMILIES)
def audio_adapter(request, tiny_checkpoint):
    return load_adapter(tiny_checkpoint(request.param), device="cpu", dtype="float32")


@pytest.mark.parametrize("family", sorted(KV_STACK))
def test_kv_estimate_equals_the_analytic_cache_size_of_the_tiny_config(tiny_checkpoint, family):
    folder = tiny_checkpoint(family)
    config = json.loads((folder / "config.json").read_text())
    section, cfg_rows = KV_STACK[family]
    stack = config[section] if section else config
    head_dim = stack.get("head_dim") or stack["hidden_size"] // stack["num_attention_heads"]
    per_position = 2 * stack["num_hidden_layers"] * stack["num_key_value_heads"] * head_dim * DTYPE_BYTES["float32"]

    adapter = load_adapter(folder, device="cpu", dtype="float32")
    engine = Engine(adapter, EngineConfig(activation_bytes_per_row=0))
    for positions in (1, 77, 1000):
        assert engine.estimator.kv_bytes(positions) == per_position * positions * cfg_rows
    # the whole-row estimate uses the adapter's position count for the row
    # one segment whatever the family's default segment length (tiny Dia's 1 s cap makes it ~10 characters)
    request = SynthesisRequest(text="Hello there.", reference_audio=_reference(adapter.facts.sampling_rate),
                               params=SynthesisParams(max_new_tokens=40, max_segment_chars=200))
    positions = adapter.estimate_positions(len("Hello there."), 1.5, 0, 40)
    assert engine.estimate_request_bytes(request) == per_position * positions * cfg_rows


def _run(adapter, config: EngineConfig, texts: list[str]) -> tuple[list, Engine]:
    ref = _reference(adapter.facts.sampling_rate)
    params = SynthesisParams(seed=3, greedy=True, max_new_tokens=4, max_segment_chars=40)
    engine = Engine(adapter, config)
    handles = [engine.submit(SynthesisRequest(text=t, reference_audio=ref, params=params)) for t in texts]
    engine.start()
    return [h.result(timeout=300) for h in handles], engine


def test_oom_survival_on_a_real_tiny_model(audio_adapter):
    texts = [f"Line {w}: the engine keeps going." for w in ("one", "two", "three", "four", "five", "six")]
    want, base = _run(audio_adapter, EngineConfig(max_batch_size=4, wait_window_ms=0), texts)
    base.shutdown()
    got, engine = _run(audio_adapter, EngineConfig(max_batch_size=4, simulate_oom_above_batch=2,
                                                   grow_after_successes=1, wait_window_ms=0), texts)
    assert all(r.status is RequestStatus.DONE for r in got)
    assert all(len(w.audio) > 0 for w in want)
    for g, w in zip(got, want):
        assert len(g.audio) == len(w.audio)
        np.testing.assert_allclose(g.audio, w.audio, atol=1e-4)
    history = engine.batch_cap.history
    assert history[:2] == [4, 2] and 3 in history[2:], history
    assert engine.stats().num_oom >= 2
    ref = _reference(audio_adapter.facts.sampling_rate)
    late = engine.submit(SynthesisRequest(text="One more after the storm.", reference_audio=ref,
                                          params=SynthesisParams(greedy=True, max_new_tokens=4)))
    assert late.result(timeout=300).ok
    engine.shutdown()


def test_long_text_batched_equals_one_by_one(audio_adapter):
    (four,), e4 = _run(audio_adapter, EngineConfig(max_batch_size=4, wait_window_ms=0), [LONG_TEXT])
    (one,), e1 = _run(audio_adapter, EngineConfig(max_batch_size=1, wait_window_ms=0), [LONG_TEXT])
    e4.shutdown()
    e1.shutdown()
    assert four.ok and one.ok and len(four.segments) >= 4
    assert max(s.batch_size for s in four.segments) > 1
    assert max(s.batch_size for s in one.segments) == 1
    assert len(four.audio) == len(one.audio) > 0
    np.testing.assert_allclose(four.audio, one.audio, atol=1e-4)
    assert [s.start_s for s in four.segments] == [s.start_s for s in one.segments]


def test_kv_estimate_equals_the_cache_vibevoice_really_allocates(tiny_checkpoint):
    """Beyond the config arithmetic: prefill VibeVoice's language model and weigh the KV cache it keeps."""
    import torch

    adapter = load_adapter(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")
    engine = Engine(adapter, EngineConfig(activation_bytes_per_row=0))
    language_model = adapter.model.model.language_model
    positions = 37
    with torch.inference_mode():
        out = language_model(inputs_embeds=torch.zeros(1, positions, language_model.config.hidden_size),
                             use_cache=True)
    cache = out.past_key_values
    measured = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    # one forward row; the engine's figure covers both CFG rows of a user row
    assert engine.estimator.kv_bytes(positions) == measured * adapter.facts.cfg_multiplier


@pytest.mark.parametrize("family", ["dia", "csm"])
def test_chinese_text_on_an_english_only_model_gets_a_language_warning(tiny_checkpoint, family):
    adapter = load_adapter(tiny_checkpoint(family), device="cpu", dtype="float32")
    assert adapter.facts.languages == ("en",)
    with Engine(adapter, EngineConfig(wait_window_ms=0)) as engine:
        result = engine.submit(SynthesisRequest(text="你好，世界。", params=SynthesisParams(
            greedy=True, max_new_tokens=20))).result(timeout=300)
    assert result.ok  # it still runs: the user is told what to expect, not refused
    language = [w for w in result.warnings if "Chinese (zh)" in w]
    assert language == [f"the text is in Chinese (zh), but {adapter.display_name} was trained on English (en) only: "
                        "expect mispronounced or garbled speech there. Use a model trained on Chinese, or write that "
                        "text in English."]


def test_chinese_text_on_vibevoice_gets_no_language_warning(tiny_checkpoint):
    adapter = load_adapter(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")
    with Engine(adapter, EngineConfig(wait_window_ms=0)) as engine:
        result = engine.submit(SynthesisRequest(text="你好，世界。", params=SynthesisParams(
            max_new_tokens=4))).result(timeout=300)
    assert result.ok and not any("trained on" in w for w in result.warnings)


def test_a_segment_cut_at_max_new_tokens_is_reported(tiny_checkpoint):
    adapter = load_adapter(tiny_checkpoint("csm"), device="cpu", dtype="float32")
    with Engine(adapter, EngineConfig(wait_window_ms=0)) as engine:
        result = engine.submit(SynthesisRequest(text="Hello there.", reference_audio=_reference(24000),
                                                params=SynthesisParams(greedy=True, max_new_tokens=3))
                               ).result(timeout=300)
    assert result.ok and result.segments[0].hit_max_new_tokens
    cap = [w for w in result.warnings if "cap" in w]
    assert cap == ["segment 1 ('Hello there.') hit the 0.2 s cap (max_new_tokens=3) and was cut off; shorten it "
                   "(max_segment_chars) or raise max_new_tokens"]


def test_an_adapters_refusal_reads_wholly_in_chinese(tiny_checkpoint):
    """Dia refuses cfg_scale < 1 in its preprocess; a Chinese page shows that cause in Chinese, not English inside a
    Chinese frame (the English wording stays as it was)."""
    adapter = load_adapter(tiny_checkpoint("dia"), device="cpu", dtype="float32")
    with Engine(adapter, EngineConfig(wait_window_ms=0)) as engine:
        result = engine.submit(SynthesisRequest(text="Hello there.", params=SynthesisParams(
            cfg_scale=0.5, max_new_tokens=20))).result(timeout=300)
    assert result.status == RequestStatus.FAILED and result.finish.is_users_mistake
    assert result.finish.render("en").endswith("cfg_scale=0.5 must be >= 1 for Dia (1 turns guidance off, 3 is "
                                               "the default)")
    chinese = result.finish.render("zh")
    assert "0.5" in chinese and set(re.findall(r"[A-Za-z]+", chinese)) <= {"Dia", "cfg", "scale"}, chinese
