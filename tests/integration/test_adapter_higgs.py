"""Higgs Audio v2 adapter on a tiny random checkpoint of the real architecture (built by ``make_tiny_checkpoint``).

Greedy decoding must give the same codec frames batched or one by one, with the KV cache on or off; sampling must
depend only on the row's own seed; loading must go through the same ``from_pretrained(path)`` calls as a hub id.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.adapter_helpers import load_reference, run_batch, run_make_tiny_model, spy_from_pretrained  # noqa: E402
from tts_app.adapters import load_adapter  # noqa: E402
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.adapters.higgs import HiggsAudioAdapter  # noqa: E402
from tts_app.errors import InputError, ModelLoadError  # noqa: E402
from tts_app.request import StopReason, SynthesisParams  # noqa: E402

MAX_NEW_TOKENS = 32


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint) -> Path:
    return tiny_checkpoint("higgs")


@pytest.fixture(scope="module")
def adapter(checkpoint) -> HiggsAudioAdapter:
    return HiggsAudioAdapter.from_pretrained(checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def references(adapter):
    """name -> (waveform at facts.sampling_rate, transcript) for three real speech clips."""
    return {name: load_reference(name, adapter.facts.sampling_rate)
            for name in ("en_female_1.wav", "en_male_1.wav", "zh_female_1.wav")}


@pytest.fixture(scope="module")
def rows(references):
    """Three rows with different text lengths and a different reference clip each."""
    (w0, t0), (w1, t1), (w2, t2) = (references[n] for n in ("en_female_1.wav", "en_male_1.wav", "zh_female_1.wav"))
    return [
        AdapterRow("Hello there, this sentence is a little longer than the others.", w0, t0, seed=11),
        AdapterRow("Short one.", w1, t1, seed=12),
        AdapterRow("今天天气很好，我们去公园散步吧。", w2, t2, seed=13),
    ]


def _run(adapter, rows, params):
    """preprocess -> generate; returns (generated frames per row trimmed to the row's end, waveforms)."""
    inputs, outputs, waves = run_batch(adapter, rows, params)
    num_ref_frames = inputs["batch"]["audio_input_ids"].shape[1] if "audio_input_ids" in inputs["batch"] else 0
    eos = adapter.processor.audio_stream_eos_id
    frames = []
    for row in outputs[:, num_ref_frames:]:
        ended = (row == eos).all(-1).nonzero()
        frames.append(row[: int(ended[0, 0]) + 1] if len(ended) else row)
    return frames, waves


def _assert_same(a, b):
    frames_a, waves_a = a
    frames_b, waves_b = b
    assert len(frames_a) == len(frames_b)
    for i, (fa, fb) in enumerate(zip(frames_a, frames_b)):
        assert torch.equal(fa, fb), f"row {i}: codec frames differ"
        assert waves_a[i].shape == waves_b[i].shape, f"row {i}: audio length differs"
        np.testing.assert_allclose(waves_a[i], waves_b[i], atol=1e-5, rtol=0, err_msg=f"row {i}")


def _one_by_one(adapter, rows, params):
    results = [_run(adapter, [row], params) for row in rows]
    return [r[0][0] for r in results], [r[1][0] for r in results]


GREEDY = SynthesisParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS)
GREEDY_NO_CACHE = SynthesisParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS, use_cache=False)


def test_make_tiny_model_cli_writes_a_folder_the_registry_loads(tmp_path):
    out = tmp_path / "tiny-higgs"
    proc = run_make_tiny_model("higgs", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    loaded = load_adapter(out, device="cpu", dtype="float32")
    assert isinstance(loaded, HiggsAudioAdapter)
    assert loaded.facts.family == "higgs" and loaded.facts.sampling_rate == 24000


def test_loading_uses_the_same_from_pretrained_calls_as_a_hub_id(checkpoint, monkeypatch):
    import transformers

    seen = spy_from_pretrained(monkeypatch, transformers.HiggsAudioV2ForConditionalGeneration,
                               transformers.AutoProcessor)
    loaded = HiggsAudioAdapter.from_pretrained(checkpoint, device="cpu", dtype="bfloat16")
    assert ("HiggsAudioV2ForConditionalGeneration", str(checkpoint)) in seen
    assert ("AutoProcessor", str(checkpoint)) in seen
    # the requested dtype is honoured and still synthesises
    assert loaded.model.dtype == torch.bfloat16 and loaded.facts.dtype_bytes == 2
    wave = loaded.synthesize([AdapterRow("Hello.", None, None)], SynthesisParams(greedy=True, max_new_tokens=12))[0]
    assert wave.dtype == np.float32 and wave.size > 0 and np.isfinite(wave).all()


def test_same_seed_gives_identical_weights(checkpoint, tmp_path):
    from safetensors.torch import load_file

    again = HiggsAudioAdapter.make_tiny_checkpoint(tmp_path / "again", seed=0)
    other = HiggsAudioAdapter.make_tiny_checkpoint(tmp_path / "other", seed=1)
    for sub in ("model.safetensors", "audio_tokenizer/model.safetensors"):
        first, second, third = (load_file(d / sub) for d in (checkpoint, again, other))
        assert first.keys() == second.keys()
        assert all(torch.equal(first[k], second[k]) for k in first)
        assert any(not torch.equal(first[k], third[k]) for k in first)


def test_bad_checkpoint_and_dtype_raise_model_load_error(tmp_path, checkpoint):
    with pytest.raises(ModelLoadError, match="higgs|Higgs"):
        HiggsAudioAdapter.from_pretrained(tmp_path)  # empty folder
    with pytest.raises(ModelLoadError, match="float64"):
        HiggsAudioAdapter.from_pretrained(checkpoint, dtype="float64")


def test_facts_come_from_the_loaded_config(adapter):
    cfg = adapter.model.config
    f = adapter.facts
    assert (f.num_layers, f.num_kv_heads, f.head_dim) == (cfg.num_hidden_layers, cfg.num_key_value_heads,
                                                          cfg.head_dim)
    assert f.dtype_bytes == 4 and f.cfg_multiplier == 1 and not f.has_cfg and not f.supports_pinyin
    assert f.frames_per_second == 25.0
    assert f.reference_positions_per_second == pytest.approx(25.0, abs=0.5)
    assert f.num_parameters > 0


def test_position_estimate_covers_the_real_prompt(adapter, rows):
    """The engine sizes the KV cache from ``estimate_positions``; it must not undercount a real row."""
    no_transcript = AdapterRow("Reference without transcript.", rows[0].reference_audio, None)
    no_reference = AdapterRow("No reference at all.", None, None)
    for row in [*rows, no_transcript, no_reference]:
        inputs = adapter.preprocess([row], GREEDY)
        actual = int(inputs["batch"]["input_ids"].shape[1]) + MAX_NEW_TOKENS
        reference_s = 0.0 if row.reference_audio is None else len(row.reference_audio) / adapter.facts.sampling_rate
        estimate = adapter.estimate_positions(len(row.text), reference_s, len(row.reference_text or ""),
                                              MAX_NEW_TOKENS)
        assert actual <= estimate <= actual * 1.1 + 8, row.text


def test_kv_bytes_per_position_matches_the_real_cache(adapter, rows):
    """``facts.kv_bytes_per_position x positions`` is the size of the KV cache transformers actually allocates."""
    batch = adapter.preprocess(rows[:2], GREEDY)["batch"]
    with torch.inference_mode():
        cache = adapter.model(**batch, use_cache=True).cache
    actual_bytes = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert actual_bytes == adapter.facts.kv_bytes_per_position * batch["input_ids"].numel()


def test_special_token_strings_in_user_text_do_not_break_the_batch(adapter, rows):
    typed = AdapterRow("Say <|AUDIO_OUT|> and <|eot_id|> please.", rows[0].reference_audio, rows[0].reference_text)
    wave = adapter.synthesize([typed], GREEDY)[0]
    assert wave.size > 0 and np.isfinite(wave).all()


def test_synthesis_with_a_real_reference_gives_finite_float32_audio(adapter, rows):
    waves = adapter.synthesize(rows[:1], SynthesisParams(seed=3, max_new_tokens=MAX_NEW_TOKENS))
    assert len(waves) == 1
    wave = waves[0]
    assert wave.dtype == np.float32 and wave.ndim == 1 and wave.size > 0
    assert np.isfinite(wave).all()
    # one codec frame per decode step at most: never longer than max_new_tokens frames of audio
    hop = adapter.facts.sampling_rate / adapter.facts.frames_per_second
    assert wave.size <= MAX_NEW_TOKENS * hop


def test_greedy_batch_equals_one_by_one(adapter, rows):
    batched = _run(adapter, rows, GREEDY)
    _assert_same(batched, _one_by_one(adapter, rows, GREEDY))
    # rows end at their own end-of-audio: the tiny model stops them at different lengths
    assert len({w.size for w in batched[1]}) > 1


@pytest.mark.parametrize("batch_size", [1, 3])
def test_greedy_cache_on_equals_cache_off(adapter, rows, batch_size):
    _assert_same(_run(adapter, rows[:batch_size], GREEDY), _run(adapter, rows[:batch_size], GREEDY_NO_CACHE))


def test_rows_without_reference_audio_cache_off_and_mixed_batch(adapter, rows):
    """No reference (smart voice) and reference without transcript: cache on == off, and a batch mixing them
    with a cloned row equals the rows one by one."""
    mixed = [AdapterRow("No reference here.", None, None, seed=1), rows[1],
             AdapterRow("Reference without transcript.", rows[2].reference_audio, None, seed=3)]
    _assert_same(_run(adapter, mixed[:1], GREEDY), _run(adapter, mixed[:1], GREEDY_NO_CACHE))
    _assert_same(_run(adapter, mixed, GREEDY), _one_by_one(adapter, mixed, GREEDY))


def test_sampling_depends_only_on_the_row_seed(adapter, rows):
    params = SynthesisParams(greedy=False, temperature=1.0, top_k=20, top_p=0.95, max_new_tokens=16)
    batched_frames, _ = _run(adapter, rows, params)
    alone_frames, _ = _run(adapter, [rows[1]], params)
    assert torch.equal(batched_frames[1], alone_frames[0])
    reseeded = AdapterRow(rows[1].text, rows[1].reference_audio, rows[1].reference_text, seed=999)
    other_frames, _ = _run(adapter, [reseeded], params)
    assert not torch.equal(other_frames[0], alone_frames[0])


def test_bad_rows_raise_input_error(adapter, rows):
    with pytest.raises(InputError, match="empty"):
        adapter.preprocess([], GREEDY)
    with pytest.raises(InputError, match="row 0: text is empty"):
        adapter.preprocess([AdapterRow("  ", None, None)], GREEDY)
    with pytest.raises(InputError, match="row 1: text is empty") as only_markup:
        adapter.preprocess([rows[0], AdapterRow("<|AUDIO_OUT|>", None, None)], GREEDY)
    # a user can type only special tokens: a Chinese page reads that cause in Chinese
    assert "第 1 行：文本为空（或只有特殊标记）" in only_markup.value.args[0].render("zh")
    stereo = np.zeros((2, 24000), dtype=np.float32)
    with pytest.raises(InputError, match="mono"):
        adapter.preprocess([AdapterRow("Hi there.", stereo, "x")], GREEDY)


def _upstream(adapter, rows, patch, seed: int, **generate_kwargs):
    """transformers' own ``generate`` on the adapter's batch (its processor output), with the checkpoint's
    generation config (repetition-aware sampling 7 / 2 included), global RNG seeded with ``seed``; returns the audio
    frames ``(batch, frames, codebooks)``."""
    inputs = adapter.preprocess(rows, GREEDY)["batch"]
    torch.manual_seed(seed)
    with torch.inference_mode():
        return adapter.model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, **generate_kwargs)


def _ours_with_global_draws(adapter, rows, params, patch, seed: int):
    """Our generate with the per-row generators' draws taken from the global RNG instead (same calls, same shapes:
    exactly upstream's draws at batch 1), global RNG seeded with ``seed``."""
    multinomial = torch.multinomial

    def global_multinomial(probs, num_samples, replacement=False, *, generator=None, **kwargs):
        return multinomial(probs, num_samples, replacement=replacement, **kwargs)

    inputs = adapter.preprocess(rows, params)
    patch.setattr(torch, "multinomial", global_multinomial)
    torch.manual_seed(seed)
    return adapter.generate(inputs, params)


def test_greedy_with_repetition_aware_sampling_matches_transformers(adapter, rows, monkeypatch):
    """The checkpoint's ras_win_len / ras_win_max_num_repeat apply even when greedy, as upstream: with the same
    random draws our frames equal transformers' generate(do_sample=False), and the redraws really happened."""
    defaults = adapter.facts.generation_defaults
    assert (defaults.ras_win_len, defaults.ras_win_max_num_repeat) == (7, 2)
    assert defaults.sources["ras_win_len"] == "checkpoint generation_config (ras_win_len=7)"
    with monkeypatch.context() as patch:
        upstream = _upstream(adapter, rows[:1], patch, seed=0, do_sample=False)
    with monkeypatch.context() as patch:
        ours = _ours_with_global_draws(adapter, rows[:1], GREEDY, patch, seed=0)
    assert adapter._last_selector.num_redraws > 0
    assert torch.equal(ours, upstream)
    # without repetition-aware sampling the frames differ: the comparison covers it
    with monkeypatch.context() as patch:
        plain = _upstream(adapter, rows[:1], patch, seed=0, do_sample=False, ras_win_len=None)
    assert not torch.equal(plain, upstream)


def test_sampling_with_repetition_aware_sampling_matches_transformers(adapter, rows, monkeypatch):
    params = SynthesisParams(greedy=False, temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=MAX_NEW_TOKENS)
    sampling = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9)
    with monkeypatch.context() as patch:
        upstream = _upstream(adapter, rows[:1], patch, seed=0, **sampling)
    with monkeypatch.context() as patch:
        ours = _ours_with_global_draws(adapter, rows[:1], params, patch, seed=0)
    assert adapter._last_selector.num_redraws > 0
    assert torch.equal(ours, upstream)
    with monkeypatch.context() as patch:
        plain = _upstream(adapter, rows[:1], patch, seed=0, ras_win_len=None, **sampling)
    assert not torch.equal(plain, upstream)


def test_a_right_padding_tokenizer_config_still_gives_left_padded_batches(adapter, checkpoint, rows, tmp_path):
    """A checkpoint whose tokenizer_config.json says padding_side: right: rows are still left-padded, so a batched
    row equals the same row alone (and the left-padding checkpoint's output)."""
    right = tmp_path / "right-padding"
    shutil.copytree(checkpoint, right)
    config_file = right / "tokenizer_config.json"
    tokenizer_config = json.loads(config_file.read_text())
    tokenizer_config["padding_side"] = "right"
    config_file.write_text(json.dumps(tokenizer_config))
    loaded = HiggsAudioAdapter.from_pretrained(right, device="cpu", dtype="float32")
    batch = loaded.preprocess(rows, GREEDY)["batch"]
    assert (batch["attention_mask"][:, -1] == 1).all() and (batch["attention_mask"][:, 0] == 0).any()
    batched = _run(loaded, rows, GREEDY)
    _assert_same(batched, _one_by_one(loaded, rows, GREEDY))
    _assert_same(batched, _run(adapter, rows, GREEDY))


def test_reference_without_transcript_uses_the_docs_speaker_tag(adapter, rows):
    """As the docs' voice-cloning example: 'SPEAKER0:' and the clip in the scene, the text tagged '[SPEAKER0] '."""
    row = AdapterRow("Hello there.", rows[0].reference_audio, None)
    prompt = adapter.processor.tokenizer.decode(adapter.preprocess([row], GREEDY)["batch"]["input_ids"][0])
    assert "SPEAKER0: <|audio_out_bos|>" in prompt
    assert "<|end_header_id|><unk><unk>[SPEAKER0] Hello there.<|eot_id|>" in prompt  # tiny tokenizer: newline -> <unk>
    transcribed = adapter.processor.tokenizer.decode(adapter.preprocess(rows[:1], GREEDY)["batch"]["input_ids"][0])
    assert "SPEAKER0" not in transcribed  # with a transcript: the zero-shot cloning layout, no tag


def test_stop_reasons_tell_a_row_cut_at_the_cap_from_one_that_ended(adapter, rows):
    inputs, outputs, _ = run_batch(adapter, rows, GREEDY)
    frames, _ = _run(adapter, rows, GREEDY)
    eos = adapter.processor.audio_stream_eos_id
    expected = [StopReason.END_OF_SPEECH if (f == eos).all(-1).any() else StopReason.MAX_NEW_TOKENS for f in frames]
    assert adapter.stop_reasons(outputs, inputs) == expected
    _, short, _ = run_batch(adapter, rows, SynthesisParams(greedy=True, max_new_tokens=3))
    assert adapter.stop_reasons(short, adapter.preprocess(rows, GREEDY)) == [StopReason.MAX_NEW_TOKENS] * 3


def _to_end(adapter, frames):
    """A row's frames up to its first all-stream-EOS frame (inclusive; after it a batch holds padding)."""
    ended = (frames == adapter.processor.audio_stream_eos_id).all(-1).nonzero()
    return frames[: int(ended[0, 0]) + 1] if len(ended) else frames


def test_a_checkpoint_max_length_caps_each_rows_prompt_plus_frames(checkpoint, adapter, rows, tmp_path):
    """Issue 24: a generation config with ``max_length`` (a total length, as transformers reads it) and no
    ``max_new_tokens``: each row makes at most ``max_length`` less its own prompt frames, in a batch as alone, and
    says it was cut; its frames and audio are those of the row run to that many frames."""
    params = SynthesisParams()
    prompt_lens = [int(adapter.preprocess([row], params)["batch"]["attention_mask"].sum()) for row in rows]
    assert len(set(prompt_lens)) == len(rows)  # three different caps
    shutil.copytree(checkpoint, tmp_path / "higgs")
    path = tmp_path / "higgs" / "generation_config.json"
    config = json.loads(path.read_text())
    config.pop("max_new_tokens", None)
    config["max_length"] = max_length = max(prompt_lens) + 6
    path.write_text(json.dumps(config))
    capped = HiggsAudioAdapter.from_pretrained(tmp_path / "higgs")
    assert capped.facts.generation_defaults.max_length == max_length
    inputs, outputs, waves = run_batch(capped, rows, params)
    reasons = capped.stop_reasons(outputs, inputs)
    assert reasons[prompt_lens.index(max(prompt_lens))] is StopReason.MAX_NEW_TOKENS  # the longest prompt is cut
    for i, (row, prompt_len) in enumerate(zip(rows, prompt_lens)):
        cap = max_length - prompt_len
        assert inputs["row_max_new_tokens"][i] == cap
        alone_inputs, alone, alone_waves = run_batch(capped, [row], params)
        want_inputs, want, want_waves = run_batch(adapter, [row], SynthesisParams(max_new_tokens=cap))
        want_frames = _to_end(adapter, adapter._row_frames(want, want_inputs)[0])
        assert want_frames.shape[0] <= cap
        assert torch.equal(_to_end(capped, capped._row_frames(outputs, inputs)[i]), want_frames), f"row {i}"
        assert torch.equal(_to_end(capped, capped._row_frames(alone, alone_inputs)[0]), want_frames), f"row {i}"
        assert reasons[i] is capped.stop_reasons(alone, alone_inputs)[0] is adapter.stop_reasons(want, want_inputs)[0]
        np.testing.assert_allclose(waves[i], want_waves[0], atol=1e-5, rtol=0, err_msg=f"row {i}")
        np.testing.assert_allclose(alone_waves[0], want_waves[0], atol=1e-5, rtol=0, err_msg=f"row {i}")
