"""CSM adapter on a tiny random checkpoint of the real architecture (Llama backbone + depth decoder + Mimi codec,
built in code, saved with save_pretrained and loaded through the same from_pretrained(path) calls as a hub id)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.adapter_helpers import (load_reference, rows_with_references, run_batch, run_make_tiny_model,  # noqa: E402
                                   spy_from_pretrained)
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402

FRAMES = 12  # decode steps (codec frames, ~1 s of audio) per test: small for CPU time
GREEDY = SynthesisParams(greedy=True, max_new_tokens=FRAMES)


@pytest.fixture(scope="module")
def tiny_csm(tiny_checkpoint) -> Path:
    return tiny_checkpoint("csm")


@pytest.fixture(scope="module")
def adapter(tiny_csm):
    from tts_app.adapters.csm import CsmAdapter

    return CsmAdapter.from_pretrained(tiny_csm)


@pytest.fixture(scope="module")
def reference(adapter):
    """``reference(name, seconds=None)`` -> (float32 waveform at facts.sampling_rate, transcript)."""
    return lambda name, seconds=None: load_reference(name, adapter.facts.sampling_rate, seconds)


@pytest.fixture(scope="module")
def three_rows(adapter):
    """Different text lengths and a different reference clip (and clip length) per row."""
    clips = [("en_female_1.wav", 1.23), ("en_male_1.wav", 2.07), ("zh_female_1.wav", 1.61)]  # not whole frames
    texts = ["Hi.", "A much longer sentence, so this row has the most text of all three.", "中等长度的句子。"]
    return rows_with_references(adapter.facts.sampling_rate, clips, texts, first_seed=1)


def run(adapter, rows, params, mutate=None):
    _, outputs, audio = run_batch(adapter, rows, params, mutate)
    return outputs.codes, audio


def rows_equal(batch_codes, batch_audio, single_runs) -> list[bool]:
    """Per row: same codec frames and (to a tight tolerance) the same audio as the row run alone."""
    equal = []
    for i, (codes, audio) in enumerate(single_runs):
        n = codes.shape[1]
        same_codes = torch.equal(batch_codes[i, :n], codes[0])
        same_audio = batch_audio[i].shape == audio[0].shape and np.allclose(batch_audio[i], audio[0], atol=1e-4)
        equal.append(same_codes and same_audio)
    return equal


def test_make_tiny_model_cli_writes_a_loadable_seeded_checkpoint(tmp_path, tiny_csm):
    out = tmp_path / "tiny-csm"
    proc = run_make_tiny_model("csm", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").is_file() and (out / "processor_config.json").is_file()

    from tts_app.adapters import load_adapter
    from tts_app.adapters.csm import CsmAdapter

    loaded = load_adapter(out, device="cpu", dtype="float32")
    assert isinstance(loaded, CsmAdapter)
    assert loaded.facts.family == "csm" and loaded.facts.sampling_rate == 24000
    # Same (default) seed as the fixture's checkpoint -> byte-identical weights; another seed -> different ones.
    assert (out / "model.safetensors").read_bytes() == (tiny_csm / "model.safetensors").read_bytes()
    other = CsmAdapter.make_tiny_checkpoint(tmp_path / "seed1", seed=1)
    assert (other / "model.safetensors").read_bytes() != (tiny_csm / "model.safetensors").read_bytes()


def test_loading_goes_through_the_hub_from_pretrained_calls(monkeypatch, tiny_csm):
    import transformers

    from tts_app.adapters.csm import CsmAdapter

    seen = spy_from_pretrained(monkeypatch, transformers.CsmForConditionalGeneration, transformers.AutoProcessor)
    CsmAdapter.from_pretrained(tiny_csm, dtype="bfloat16")
    assert ("CsmForConditionalGeneration", str(tiny_csm)) in seen
    assert ("AutoProcessor", str(tiny_csm)) in seen


def test_load_failures_are_model_load_errors(tmp_path, tiny_csm):
    from tts_app.adapters.csm import CsmAdapter

    with pytest.raises(ModelLoadError, match="--model"):
        CsmAdapter.from_pretrained("no-such-org/no-such-csm-model")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="cannot load"):
        CsmAdapter.from_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="float64"):
        CsmAdapter.from_pretrained(tiny_csm, dtype="float64")


def test_facts_come_from_the_checkpoint(adapter, three_rows):
    facts = adapter.facts
    config = adapter.model.config
    assert (facts.num_layers, facts.num_kv_heads, facts.head_dim) == (2, 2, 8)
    assert facts.frames_per_second == 12.5 and facts.reference_positions_per_second == 12.5
    assert facts.text_positions_per_char == 1.0  # char-level tokenizer
    assert facts.num_parameters == sum(p.numel() for p in adapter.model.parameters())
    assert facts.default_max_new_tokens == adapter.model.generation_config.max_new_tokens
    assert not facts.has_cfg and facts.cfg_multiplier == 1
    assert config.num_codebooks == 4
    # The estimate covers the real prompt length + generated frames (plus the depth decoder's per-frame cache).
    for row in three_rows:
        inputs = adapter.preprocess([row], GREEDY)
        real = int(inputs.attention_mask.sum()) + FRAMES
        estimate = adapter.estimate_positions(len(row.text), len(row.reference_audio) / facts.sampling_rate,
                                              len(row.reference_text), FRAMES)
        assert real <= estimate <= real + adapter._depth_positions + 2


def test_synthesis_with_a_real_speech_reference(adapter, reference):
    wave, transcript = reference("en_female_1.wav", 3.0)
    row = AdapterRow(text="Hello there, how are you today?", reference_audio=wave, reference_text=transcript, seed=3)
    [audio] = adapter.synthesize([row], SynthesisParams(seed=3, max_new_tokens=FRAMES))
    samples_per_frame = adapter.facts.sampling_rate / adapter.facts.frames_per_second
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0 < audio.size <= FRAMES * samples_per_frame
    assert np.isfinite(audio).all() and np.abs(audio).max() > 0


def test_greedy_batch_equals_rows_one_by_one(adapter, three_rows):
    single = [run(adapter, [row], GREEDY) for row in three_rows]
    codes, audio = run(adapter, three_rows, GREEDY)
    assert codes.shape == (3, FRAMES, 4)
    assert rows_equal(codes, audio, single) == [True, True, True]
    # The rows really differ (different text and voice), so the comparison above is not trivially true.
    assert not torch.equal(codes[0], codes[1]) and not torch.equal(codes[1], codes[2])


def test_without_the_left_padding_mask_rows_would_leak(adapter, three_rows):
    """The batch test can fail: attending to the left padding changes the shorter rows' output."""
    single = [run(adapter, [row], GREEDY) for row in three_rows]

    def drop_mask(inputs):
        inputs.attention_mask = torch.ones_like(inputs.attention_mask)

    codes, audio = run(adapter, three_rows, GREEDY, mutate=drop_mask)
    equal = rows_equal(codes, audio, single)
    longest = int(np.argmax([int(m.sum()) for m in adapter.preprocess(three_rows, GREEDY).attention_mask]))
    assert equal[longest]  # the longest row has no padding
    assert not all(equal)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_kv_cache_off_gives_the_same_tokens_and_audio(adapter, three_rows, batch_size):
    rows = three_rows[:batch_size]
    codes_on, audio_on = run(adapter, rows, GREEDY)
    codes_off, audio_off = run(adapter, rows, SynthesisParams(greedy=True, max_new_tokens=FRAMES, use_cache=False))
    assert torch.equal(codes_on, codes_off)
    for on, off in zip(audio_on, audio_off):
        assert on.shape == off.shape and np.allclose(on, off, atol=1e-4)


def test_greedy_matches_transformers_generate(adapter, three_rows):
    """Our decode loop (cache on) gives the library's own ``model.generate`` tokens, batched and left-padded."""
    codes, _ = run(adapter, three_rows, GREEDY)
    inputs = adapter.preprocess(three_rows, GREEDY)
    config = adapter.model.config
    non_codec = list(range(config.codec_config.codebook_size, config.vocab_size))  # suppressed by the adapter too
    reference = adapter.model.generate(
        input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, input_values=inputs.input_values,
        input_values_cutoffs=inputs.input_values_cutoffs, max_new_tokens=FRAMES, do_sample=False,
        depth_decoder_do_sample=False, suppress_tokens=non_codec, depth_decoder_suppress_tokens=non_codec)
    assert torch.equal(codes, reference)


def test_sampling_is_seeded_per_row(adapter, three_rows):
    params = SynthesisParams(max_new_tokens=FRAMES, temperature=1.0, top_k=20)
    batch_codes, _ = run(adapter, three_rows, params)
    alone_codes, _ = run(adapter, [three_rows[1]], params)
    assert torch.equal(batch_codes[1], alone_codes[0])  # a row's draws do not depend on its batch-mates
    reseeded = AdapterRow(**{**three_rows[1].__dict__, "seed": 99})
    other_codes, _ = run(adapter, [reseeded], params)
    assert not torch.equal(other_codes[0], alone_codes[0])
    no_cache_codes, _ = run(adapter, three_rows, SynthesisParams(max_new_tokens=FRAMES, temperature=1.0, top_k=20,
                                                                 use_cache=False))
    assert torch.equal(no_cache_codes, batch_codes)


def test_each_row_is_cut_at_its_own_end_of_audio(adapter, three_rows):
    inputs = adapter.preprocess(three_rows, GREEDY)
    outputs = adapter.generate(inputs, GREEDY)
    full = adapter.postprocess(outputs, inputs)
    outputs.codes[1, 5:] = adapter.model.config.codebook_pad_token_id
    outputs.codes[1, 5] = adapter.model.config.codebook_eos_token_id  # row 1 ends after 5 frames
    cut = adapter.postprocess(outputs, inputs)
    samples_per_frame = int(adapter.facts.sampling_rate / adapter.facts.frames_per_second)
    assert cut[1].size == 5 * samples_per_frame
    assert full[1].size == FRAMES * samples_per_frame
    for i in (0, 2):
        assert np.array_equal(cut[i], full[i])


def test_bad_rows_raise_project_errors(adapter, reference):
    wave, _ = reference("en_female_1.wav", 1.0)
    with pytest.raises(InputError, match="row 0: text is empty"):
        adapter.preprocess([AdapterRow(text="  ", reference_audio=wave, reference_text=None)], GREEDY)
    with pytest.raises(ReferenceAudioError, match="row 1"):
        adapter.preprocess([AdapterRow("ok", wave, None), AdapterRow("ok", np.stack([wave, wave]), None)], GREEDY)
    with pytest.raises(InputError, match="max_new_tokens=3000 exceeds the model's 2048 positions"):
        adapter.preprocess([AdapterRow("ok", wave, None)], SynthesisParams(max_new_tokens=3000))
    with pytest.raises(ReferenceAudioError, match="NaN"):
        adapter.preprocess([AdapterRow("ok", np.full(2400, np.nan, dtype=np.float32), None)], GREEDY)


def test_rows_without_reference_audio_mix_with_cloned_rows(adapter, three_rows):
    plain = AdapterRow(text="No reference for this row.", reference_audio=None, reference_text=None, seed=7)
    rows = [three_rows[0], plain]
    single = [run(adapter, [row], GREEDY) for row in rows]
    codes, audio = run(adapter, rows, GREEDY)
    assert rows_equal(codes, audio, single) == [True, True]


def test_unencodable_characters_are_those_the_tokenizer_maps_to_unk(adapter):
    """The tiny checkpoint's char tokenizer knows the GB2312 level-1 hanzi only: 囧 and 叒 become <unk>, 好 does not
    (the front end uses this to replace or drop such characters instead of sending <unk>)."""
    assert adapter.unencodable_characters("好囧叒a") == {"囧", "叒"}
    tok = adapter.processor.tokenizer
    assert tok.unk_token_id in tok("囧", add_special_tokens=False)["input_ids"]  # the same fact, straight from it


def test_a_checkpoint_max_length_caps_each_rows_prompt_plus_frames_as_transformers(tiny_csm, three_rows, tmp_path):
    """A generation config with max_length and no max_new_tokens: each row stops at max_length positions in all
    (its own prompt + frames), the same frames as transformers' generate(max_length=...) on that row alone, and a
    row's frames in a batch are those it makes alone."""
    import json
    import shutil

    from tts_app.adapters.csm import CsmAdapter
    from tts_app.request import StopReason

    shutil.copytree(tiny_csm, tmp_path / "csm")
    path = tmp_path / "csm" / "generation_config.json"
    config = json.loads(path.read_text())
    config.pop("max_new_tokens")
    prompt_lens = [CsmAdapter.preprocess(adapter_, [row], SynthesisParams(greedy=True)).attention_mask.shape[1]
                   for adapter_ in [CsmAdapter.from_pretrained(tiny_csm)] for row in three_rows]
    config["max_length"] = max(prompt_lens) + 6
    path.write_text(json.dumps(config))
    capped = CsmAdapter.from_pretrained(tmp_path / "csm")
    assert capped.facts.generation_defaults.max_length == max(prompt_lens) + 6
    greedy = SynthesisParams(greedy=True)
    model_config = capped.model.config
    non_codec = list(range(model_config.codec_config.codebook_size, model_config.vocab_size))
    alone = []
    for row, prompt_len in zip(three_rows, prompt_lens):
        inputs = capped.preprocess([row], greedy)
        outputs = capped.generate(inputs, greedy)
        upstream = capped.model.generate(
            input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, input_values=inputs.input_values,
            input_values_cutoffs=inputs.input_values_cutoffs, max_length=config["max_length"], do_sample=False,
            depth_decoder_do_sample=False, suppress_tokens=non_codec, depth_decoder_suppress_tokens=non_codec)
        assert torch.equal(outputs.codes, upstream)
        assert outputs.codes.shape[1] == config["max_length"] - prompt_len
        assert outputs.stop_reasons == [StopReason.MAX_NEW_TOKENS]
        alone.append((outputs, capped.postprocess(outputs, inputs)))
    inputs = capped.preprocess(three_rows, greedy)
    batch = capped.generate(inputs, greedy)
    audio = capped.postprocess(batch, inputs)
    for i, (outputs, wave) in enumerate(alone):
        n = outputs.codes.shape[1]
        assert torch.equal(batch.codes[i, :n], outputs.codes[0]), f"row {i}"
        assert audio[i].shape == wave[0].shape and np.allclose(audio[i], wave[0], atol=1e-4)
