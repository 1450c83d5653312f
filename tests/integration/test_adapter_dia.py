"""Dia adapter on a tiny random checkpoint of the real architecture (built in code, saved with save_pretrained and
loaded through the same from_pretrained(path) calls as a hub id)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.adapter_helpers import (load_reference, rows_with_references, run_batch, run_make_tiny_model,  # noqa: E402
                                   spy_from_pretrained)
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.errors import InputError, ModelLoadError  # noqa: E402
from tts_app.request import StopReason, SynthesisParams  # noqa: E402

# Decode steps per test: > 16 (Dia's max delay + 1) so every row yields audio frames, small for CPU time.
STEPS = 24
GREEDY = SynthesisParams(greedy=True, max_new_tokens=STEPS)


@pytest.fixture(scope="module")
def tiny_dia(tiny_checkpoint) -> Path:
    return tiny_checkpoint("dia")


@pytest.fixture(scope="module")
def adapter(tiny_dia):
    from tts_app.adapters.dia import DiaAdapter

    return DiaAdapter.from_pretrained(tiny_dia)


@pytest.fixture(scope="module")
def reference(adapter):
    """``reference(name, seconds=None)`` -> (float32 waveform at facts.sampling_rate, transcript)."""
    return lambda name, seconds=None: load_reference(name, adapter.facts.sampling_rate, seconds)


@pytest.fixture(scope="module")
def three_rows(adapter):
    """Different text lengths and a different reference clip (and length) per row."""
    clips = [("en_female_1.wav", 0.5), ("en_male_1.wav", 0.9), ("zh_female_1.wav", 0.7)]
    texts = ["Hi.", "A much longer sentence, so this row has the most text of all three.", "Medium length text."]
    return rows_with_references(adapter.facts.sampling_rate, clips, texts, first_seed=0)


def run(adapter, rows, params, mutate=None):
    _, outputs, audio = run_batch(adapter, rows, params, mutate)
    return outputs, audio


def assert_rows_equal(batch_tokens, batch_audio, single_runs):
    """Row i of a left-padded batch ends with the tokens of row i run alone; its audio is the same."""
    for i, (tokens, audio) in enumerate(single_runs):
        n = tokens.shape[1]
        assert torch.equal(batch_tokens[i, -n:], tokens[0]), f"row {i}: batched tokens differ from one-by-one"
        assert batch_audio[i].shape == audio[0].shape, f"row {i}: audio length differs"
        np.testing.assert_allclose(batch_audio[i], audio[0], atol=1e-5, err_msg=f"row {i}")


# ---------------------------------------------------------------------------------------------- loading


def test_cli_make_tiny_model_loads_through_registry(tmp_path):
    from tts_app.adapters import family_of, load_adapter
    from tts_app.adapters.dia import DiaAdapter

    out = tmp_path / "tiny-dia"
    done = run_make_tiny_model("dia", out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "model.safetensors").is_file() and (out / "processor_config.json").is_file()
    assert family_of(out) == "dia"
    loaded = load_adapter(out, device="cpu", dtype="float32")
    assert isinstance(loaded, DiaAdapter)
    assert loaded.facts.sampling_rate == 44100


def test_same_seed_gives_identical_weights(tiny_dia, tmp_path):
    from tts_app.adapters.dia import DiaAdapter

    again = DiaAdapter.make_tiny_checkpoint(tmp_path / "again", seed=0)
    other = DiaAdapter.make_tiny_checkpoint(tmp_path / "other", seed=1)
    same = (tiny_dia / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == same
    assert (other / "model.safetensors").read_bytes() != same


def test_loading_goes_through_transformers_from_pretrained_with_the_folder(tiny_dia, monkeypatch):
    import transformers

    from tts_app.adapters.dia import DiaAdapter

    seen = spy_from_pretrained(monkeypatch, transformers.DiaForConditionalGeneration, transformers.AutoProcessor)
    DiaAdapter.from_pretrained(tiny_dia)
    assert dict(seen) == {"DiaForConditionalGeneration": str(tiny_dia), "AutoProcessor": str(tiny_dia)}


def test_load_failures_raise_model_load_error(tmp_path, tiny_dia):
    from tts_app.adapters.dia import DiaAdapter

    with pytest.raises(ModelLoadError, match="cannot load Dia checkpoint"):
        DiaAdapter.from_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="dtype"):
        DiaAdapter.from_pretrained(tiny_dia, dtype="int8")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(tiny_dia, corrupt)
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match="cannot load Dia checkpoint"):
        DiaAdapter.from_pretrained(corrupt)


def test_facts_come_from_the_loaded_config(adapter, tiny_dia):
    from tts_app.adapters.dia import DiaAdapter

    dec = adapter.model.config.decoder_config
    f = adapter.facts
    assert (f.num_layers, f.num_kv_heads, f.head_dim) == (dec.num_hidden_layers, dec.num_key_value_heads,
                                                           dec.head_dim)
    assert f.sampling_rate == 44100 and f.cfg_multiplier == 2 and f.has_cfg and not f.supports_pinyin
    assert f.frames_per_second == pytest.approx(44100 / 512)
    assert f.reference_positions_per_second == pytest.approx(f.frames_per_second, abs=1.0)
    assert f.text_positions_per_char == 3.0  # UTF-8 bytes: common hanzi take 3
    assert f.num_parameters == sum(p.numel() for p in adapter.model.parameters())
    assert f.dtype_bytes == 4
    assert DiaAdapter.from_pretrained(tiny_dia, dtype="bfloat16").facts.dtype_bytes == 2


def test_kv_estimate_matches_the_real_cache(adapter, reference):
    """estimate = kv_bytes_per_position x estimate_positions x cfg_multiplier covers the self- and cross-attention
    caches generate() really holds, without gross over-estimation."""
    wave, _ = reference("zh_female_1.wav", 1.0)
    text, reference_text = "长队行长说还得再等十分钟", "银行门口排起了长队"
    row = AdapterRow(text=text, reference_audio=wave, reference_text=reference_text)
    inputs = adapter.preprocess([row], GREEDY)
    out = adapter.model.generate(
        input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
        decoder_input_ids=inputs.decoder_input_ids, decoder_attention_mask=inputs.decoder_attention_mask,
        max_new_tokens=STEPS, do_sample=False, guidance_scale=3.0, return_dict_in_generate=True)
    cache = out.past_key_values if getattr(out, "past_key_values", None) is not None else out.cache
    actual = sum(t.numel() * t.element_size()
                 for stack in (cache.self_attention_cache, cache.cross_attention_cache)
                 for layer in stack.layers for t in (layer.keys, layer.values))
    f = adapter.facts
    positions = adapter.estimate_positions(len(text), len(wave) / f.sampling_rate, len(reference_text), STEPS)
    estimate = f.kv_bytes_per_position * positions * f.cfg_multiplier
    assert actual <= estimate <= 1.25 * actual


# ------------------------------------------------------------------------------------------- synthesis


def test_synthesis_of_a_real_speech_reference(adapter, reference):
    wave, transcript = reference("en_female_1.wav")
    row = AdapterRow(text="Good evening, and welcome to the show.", reference_audio=wave, reference_text=transcript,
                     seed=7)
    audio = adapter.synthesize([row], SynthesisParams(max_new_tokens=STEPS))
    assert len(audio) == 1
    assert audio[0].dtype == np.float32 and audio[0].ndim == 1
    assert audio[0].size > 0 and np.isfinite(audio[0]).all()
    # each frame is one DAC hop (512 samples at 44.1 kHz); STEPS - 16 frames at most
    assert audio[0].size % 512 == 0 and audio[0].size <= (STEPS - 16) * 512


def test_greedy_batch_of_three_equals_one_by_one(adapter, three_rows):
    tokens, audio = run(adapter, three_rows, GREEDY)
    assert_rows_equal(tokens, audio, [run(adapter, [row], GREEDY) for row in three_rows])


def test_dropping_the_left_padding_mask_breaks_row_independence(adapter, three_rows):
    """The comparison above can fail: without the padding mask, padded rows attend to the BOS padding."""

    def unmask(inputs):
        inputs.decoder_attention_mask[:] = 1

    tokens, _ = run(adapter, three_rows, GREEDY, mutate=unmask)
    singles = [run(adapter, [row], GREEDY)[0] for row in three_rows]
    differs = [not torch.equal(tokens[i, -s.shape[1]:], s[0]) for i, s in enumerate(singles)]
    assert any(differs)


def test_mixed_batch_with_and_without_reference(adapter, three_rows):
    rows = [three_rows[0], AdapterRow(text="No reference for this row.", reference_audio=None, reference_text=None)]
    tokens, audio = run(adapter, rows, GREEDY)
    assert_rows_equal(tokens, audio, [run(adapter, [row], GREEDY) for row in rows])


@pytest.mark.parametrize("batch_size", [1, 3])
def test_cache_on_equals_cache_off(adapter, three_rows, batch_size):
    rows = three_rows[:batch_size]
    tokens_on, audio_on = run(adapter, rows, GREEDY)
    tokens_off, audio_off = run(adapter, rows, SynthesisParams(greedy=True, max_new_tokens=STEPS, use_cache=False))
    assert torch.equal(tokens_on, tokens_off)
    for a, b in zip(audio_on, audio_off):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_sampled_rows_depend_only_on_their_own_seed(adapter, three_rows):
    sampled = SynthesisParams(max_new_tokens=STEPS, temperature=1.3, top_p=0.95, top_k=50)
    tokens, audio = run(adapter, three_rows, sampled)
    assert_rows_equal(tokens, audio, [run(adapter, [row], sampled) for row in three_rows])
    greedy_tokens, _ = run(adapter, three_rows[:1], GREEDY)
    reseeded = AdapterRow(three_rows[0].text, three_rows[0].reference_audio, three_rows[0].reference_text, seed=99)
    other_seed, _ = run(adapter, [reseeded], sampled)
    n = other_seed.shape[1]
    assert not torch.equal(other_seed[0], tokens[0, -n:]), "a different seed must give different audio"
    assert not torch.equal(greedy_tokens[0], tokens[0, -n:]), "sampling must differ from greedy"


def test_each_row_is_trimmed_at_its_own_end_of_audio(adapter, three_rows):
    """A row that reaches EOS early (EOS in codebook 0, the delayed codebooks follow, then PAD, as Dia's generate
    writes it) comes back shorter; its batch-mate keeps its full length."""
    inputs = adapter.preprocess(three_rows, GREEDY)
    generated = adapter.generate(inputs, GREEDY)
    tokens = generated.clone()
    dec = adapter.model.config.decoder_config
    delays = adapter.model.config.delay_pattern
    for row, num_frames in ((0, 5), (2, 0)):  # row 0 stops after 5 frames, row 2 at once
        eos_step = inputs.audio_prompt_len + num_frames
        for channel, delay in enumerate(delays):
            tokens[row, eos_step + delay, channel] = dec.eos_token_id
            tokens[row, eos_step + delay + 1:, channel] = dec.pad_token_id
    audio = adapter.postprocess(tokens, inputs)
    full = adapter.postprocess(generated, inputs)
    hop = 512  # DAC samples per frame
    assert full[0].size > 5 * hop
    assert audio[0].size == 5 * hop
    assert audio[2].dtype == np.float32 and audio[2].size == 0
    np.testing.assert_array_equal(audio[1], full[1])
    # the rows that ended by themselves vs the one whose EOS the cap forced (the tiny model never stops alone)
    assert adapter.stop_reasons(generated, inputs) == [StopReason.MAX_NEW_TOKENS] * 3
    assert adapter.stop_reasons(tokens, inputs) == [StopReason.END_OF_SPEECH, StopReason.MAX_NEW_TOKENS,
                                                    StopReason.END_OF_SPEECH]


# --------------------------------------------------------------------------------------------- errors


def test_reference_audio_without_transcript_is_refused(adapter, three_rows):
    row = AdapterRow(text="Hello.", reference_audio=three_rows[0].reference_audio, reference_text=None)
    with pytest.raises(InputError, match="transcript") as caught:
        adapter.preprocess([row], GREEDY)
    message = str(caught.value)
    # names the fix in each front end, and no internal row index
    assert "--ref-text" in message and "Reference text" in message and "prompt_text" in message
    assert not message.startswith("row")


def test_bad_rows_raise_input_error(adapter):
    with pytest.raises(InputError, match="empty"):
        adapter.preprocess([AdapterRow(text="  ", reference_audio=None, reference_text=None)], GREEDY)
    with pytest.raises(InputError, match="float32"):
        adapter.preprocess([AdapterRow(text="Hi.", reference_audio=np.zeros((2, 100)), reference_text="x")], GREEDY)
    with pytest.raises(InputError, match="max_new_tokens=16"):
        adapter.preprocess([AdapterRow(text="Hi.", reference_audio=None, reference_text=None)],
                           SynthesisParams(max_new_tokens=16))
    with pytest.raises(InputError, match="cfg_scale"):
        adapter.preprocess([AdapterRow(text="Hi.", reference_audio=None, reference_text=None)],
                           SynthesisParams(cfg_scale=0.5, max_new_tokens=STEPS))
    too_long = "a" * (adapter.model.config.encoder_config.max_position_embeddings + 1)
    with pytest.raises(InputError, match="shorten"):
        adapter.preprocess([AdapterRow(text=too_long, reference_audio=None, reference_text=None)], GREEDY)


def test_dia_declares_its_tags_and_encodes_every_character(adapter):
    """Dia's byte-level tokenizer has no unknown token, so no character is unencodable; its speaker and non-verbal
    tags are declared for the front end."""
    assert adapter.unencodable_characters("好囧叒") == set()
    assert "(laughs)" in adapter.facts.control_tags and "[S1]" in adapter.facts.control_tags


# --------------------------------------------------------------------------------- upstream and prompt fidelity


@pytest.mark.parametrize("reference_text, text, prompt", [
    ("Hello from the reference.", "Now the new words.", "[S1] Hello from the reference. Now the new words."),
    ("[S1] Hello from the reference.", "[S1] Now the new words.", "[S1] Hello from the reference. Now the new words."),
    ("[S1] One voice. [S2] Another voice.", "Now the new words.",
     "[S1] One voice. [S2] Another voice. [S1] Now the new words."),
    (None, "[S1] Hi. [S1] Still me. [S2] You.", "[S1] Hi. Still me. [S2] You."),
])
def test_the_prompt_never_repeats_a_speaker_tag_back_to_back(adapter, reference, reference_text, text, prompt):
    """Dia's published guidelines: begin with [S1] and alternate speakers; the reference transcript and the text in
    its voice are one [S1] turn."""
    from tts_app.adapters.dia import dialogue

    pieces = (reference_text, text) if reference_text else (text,)
    assert dialogue(*pieces) == prompt
    wave = reference("en_female_1.wav", 0.5)[0] if reference_text else None
    inputs = adapter.preprocess([AdapterRow(text, wave, reference_text)], GREEDY)
    assert adapter.processor.tokenizer.decode(inputs.input_ids[0]) == prompt


def _dia_official(adapter, texts, clips, **generate_kwargs):
    """transformers' own path: DiaProcessor on the whole batch, then DiaForConditionalGeneration.generate with the
    checkpoint's generation config (guidance 3.0, top_k 45)."""
    kwargs = {"audio": clips, "sampling_rate": adapter.facts.sampling_rate} if clips else {}
    inputs = adapter.processor(text=texts, padding=True, return_tensors="pt", **kwargs)
    with torch.inference_mode():
        return adapter.model.generate(**inputs, max_new_tokens=STEPS, **generate_kwargs)


@pytest.mark.filterwarnings("ignore:`max_length` is ignored")  # DiaProcessor's own text defaults, upstream side
@pytest.mark.parametrize("batch_size", [1, 3])
def test_greedy_equals_transformers_generate_with_the_official_processor(adapter, reference, batch_size):
    """Greedy: our rows equal transformers' generate(do_sample=False) on DiaProcessor's batch, which keeps the
    CFG top-k filter of the generation config (45); without that filter the tokens differ. References of one length
    (different speakers, transcripts and texts), so the official batch needs no audio-prompt padding (whose
    positions upstream does not correct)."""
    from tts_app.adapters.dia import dialogue

    clips = [("en_female_1.wav", 0.6), ("en_male_1.wav", 0.6), ("zh_female_1.wav", 0.6)][:batch_size]
    texts = ["Hi.", "A much longer sentence, so this row has the most text of all three.", "Medium text."]
    rows = rows_with_references(adapter.facts.sampling_rate, clips, texts[:batch_size])
    assert adapter.model.generation_config.top_k == 45
    official = _dia_official(adapter, [dialogue(r.reference_text, r.text) for r in rows],
                             [r.reference_audio for r in rows], do_sample=False)
    ours, _ = run(adapter, rows, GREEDY)
    assert torch.equal(ours, official)
    without_top_k = _dia_official(adapter, [dialogue(r.reference_text, r.text) for r in rows],
                                  [r.reference_audio for r in rows], do_sample=False, top_k=None)
    assert not torch.equal(ours, without_top_k)


# ------------------------------------------------------------------ the checkpoint's max_length: a total length


def _with_generation_config(tiny_dia: Path, out: Path, **values) -> Path:
    """A copy of the tiny checkpoint whose generation_config.json has transformers' Dia conversion values
    (dia/convert_dia_to_hf.py get_generation_config: do_sample, top_k 45, top_p 0.95, temperature 1.2,
    guidance_scale 3.0, max_length 3072 "Decoder max length", no max_new_tokens) updated with ``values``."""
    import json

    shutil.copytree(tiny_dia, out)
    config = json.loads((out / "generation_config.json").read_text())
    config.pop("max_new_tokens", None)
    config.update(do_sample=True, top_k=45, top_p=0.95, temperature=1.2, guidance_scale=3.0, max_length=3072)
    config.update(values)
    (out / "generation_config.json").write_text(json.dumps(config))
    return out


def test_checkpoint_max_length_caps_prompt_plus_new_steps_as_transformers_does(tiny_dia, tmp_path):
    """A checkpoint with only max_length: each row's decoder (prompt + audio frames) stops at that total, the same
    tokens as transformers' generate(max_length=...) alone; in a batch, each row at its own total (its own prompt)."""
    from tts_app.adapters.dia import DiaAdapter, dialogue

    adapter = DiaAdapter.from_pretrained(_with_generation_config(tiny_dia, tmp_path / "dia", max_length=120))
    assert adapter.facts.generation_defaults.max_length == 120
    rows = rows_with_references(adapter.facts.sampling_rate, [("en_female_1.wav", 0.6), ("en_male_1.wav", 0.9)],
                                ["Hi there.", "A longer second row."])
    params = SynthesisParams(greedy=True)
    singles = [run(adapter, [row], params) for row in rows]
    for row, (tokens, _) in zip(rows, singles):
        inputs = adapter.processor(text=[dialogue(row.reference_text, row.text)], audio=[row.reference_audio],
                                   sampling_rate=adapter.facts.sampling_rate, return_tensors="pt")
        with torch.inference_mode():
            upstream = adapter.model.generate(**inputs, do_sample=False, max_length=120)
        assert torch.equal(tokens, upstream)
        assert tokens.shape[1] == 120 + adapter.max_delay  # total length, plus the delay flush transformers adds
    batch_tokens, batch_audio = run(adapter, rows, params)
    inputs = adapter.preprocess(rows, params)
    for i, (tokens, audio) in enumerate(singles):  # left-padded: row i's prompt ends where the batch's does
        start = inputs.audio_prompt_len - (adapter.preprocess([rows[i]], params).audio_prompt_len)
        assert torch.equal(batch_tokens[i, start:start + tokens.shape[1]], tokens[0]), f"row {i}"
        np.testing.assert_allclose(batch_audio[i], audio[0], atol=1e-5, err_msg=f"row {i}")
    assert adapter.stop_reasons(batch_tokens, inputs) == [StopReason.MAX_NEW_TOKENS] * 2


def test_synth_clones_a_6_s_reference_with_the_converted_dia_generation_config(tiny_dia, data_dir, tmp_path):
    """The generation config transformers' Dia conversion writes (max_length 3072, no max_new_tokens) with a 6 s
    reference: the 538-step prompt leaves 2534 steps (was refused: "need 3565 decoder positions; Dia has 3072")."""
    import soundfile as sf

    from tts_app.cli.synth import main

    model = _with_generation_config(tiny_dia, tmp_path / "dia")
    ref = data_dir / "en_female_1.wav"  # 6.3 s, 5.9 s of speech
    out = tmp_path / "out.wav"
    code = main(["--model", str(model), "--ref", str(ref), "--ref-text", load_reference(ref.name, 44100)[1],
                 "--text", "Hello there.", "--out", str(out), "--device", "cpu"])
    assert code == 0
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 44100 and audio.size > 0
