"""VibeVoice adapter on a tiny random checkpoint of the real architecture (built in code, loaded from disk through
the same ``from_pretrained(path)`` calls as a hub id)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.adapter_helpers import load_reference, run_batch, run_make_tiny_model, spy_from_pretrained
from tts_app.adapters.base import AdapterRow
from tts_app.adapters.vibevoice import voice_seed
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError
from tts_app.request import StopReason, SynthesisParams

# Rows of different text lengths, each with its own reference speaker.
TEXTS = ["Hello there.", "A somewhat longer sentence to speak here.", "你好世界"]
CLIPS = ["en_female_1.wav", "en_male_1.wav", "zh_female_1.wav"]
MAX_NEW_TOKENS = 16  # every row of the tiny seed-0 model ends by itself before this
AUDIO_ATOL = 1e-4  # float32 reassociation between batch shapes; the waveforms peak around 0.3


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint):
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    return VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rows(adapter):
    sr = adapter.facts.sampling_rate
    return [AdapterRow(text=t, reference_audio=load_reference(c, sr)[0], reference_text=None, seed=10 + i)
            for i, (t, c) in enumerate(zip(TEXTS, CLIPS))]


def run(adapter, rows, params):
    _, outputs, audio = run_batch(adapter, rows, params)
    return outputs.token_ids, audio


@pytest.fixture(scope="module")
def greedy_runs(adapter, rows):
    """tokens/audio for: batch of 3 and one by one, each with the KV cache on and off."""
    results = {}
    for use_cache in (True, False):
        params = SynthesisParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS, use_cache=use_cache)
        results[("batch", use_cache)] = run(adapter, rows, params)
        singles = [run(adapter, [row], params) for row in rows]
        results[("single", use_cache)] = ([s[0][0] for s in singles], [s[1][0] for s in singles])
    return results


def assert_same(reference, other, what):
    ref_tokens, ref_audio = reference
    tokens, audio = other
    for i in range(len(ref_tokens)):
        assert torch.equal(ref_tokens[i], tokens[i]), f"{what}: row {i} tokens {tokens[i]} != {ref_tokens[i]}"
        assert audio[i].shape == ref_audio[i].shape, f"{what}: row {i} length {audio[i].shape} != {ref_audio[i].shape}"
        np.testing.assert_allclose(audio[i], ref_audio[i], rtol=0, atol=AUDIO_ATOL, err_msg=f"{what}: row {i}")


def test_cli_writes_a_checkpoint_that_load_adapter_loads(tmp_path):
    from tts_app.adapters import load_adapter
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    out = tmp_path / "tiny-vv"
    proc = run_make_tiny_model("vibevoice", out)
    assert proc.returncode == 0, proc.stderr
    adapter = load_adapter(out, device="cpu", dtype="float32")
    assert isinstance(adapter, VibeVoiceAdapter)
    assert adapter.facts.family == "vibevoice" and adapter.facts.num_parameters < 5_000_000


def test_same_seed_gives_identical_weights(tmp_path, tiny_checkpoint):
    from safetensors.torch import load_file

    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    again = VibeVoiceAdapter.make_tiny_checkpoint(tmp_path / "again", seed=0)
    first = load_file(tiny_checkpoint("vibevoice") / "model.safetensors")
    second = load_file(again / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_synthesis_of_a_real_reference_gives_finite_audio(adapter, rows):
    params = SynthesisParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS)
    (audio,) = adapter.synthesize(rows[:1], params)
    assert adapter.facts.sampling_rate == adapter.processor.feature_extractor.sampling_rate == 24000
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size > 0 and np.isfinite(audio).all()
    assert np.abs(audio).max() > 1e-3  # audible, not a block of zeros
    assert audio.size % 3200 == 0  # whole codec frames, no padding audio


def test_greedy_rows_end_at_their_own_step(adapter, greedy_runs):
    tokens, audio = greedy_runs[("batch", True)]
    audio_token = adapter.model.config.audio_token_id
    lengths = [len(a) for a in audio]
    stopped = [int(t[-1]) != audio_token for t in tokens]
    assert any(stopped) and len(set(lengths)) > 1, f"rows should stop at different steps; got {lengths}"
    for t, a in zip(tokens, audio):
        assert len(a) == int((t == audio_token).sum()) * 3200  # one frame per <audio> token, nothing else


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_batch_equals_one_by_one(greedy_runs, use_cache):
    assert_same(greedy_runs[("single", use_cache)], greedy_runs[("batch", use_cache)],
                f"batch of 3 vs one by one (use_cache={use_cache})")


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_greedy_cache_on_equals_cache_off(greedy_runs, mode):
    assert_same(greedy_runs[(mode, True)], greedy_runs[(mode, False)], f"cache on vs off ({mode})")


def test_sampled_row_does_not_depend_on_its_batch_mates(adapter, rows):
    params = SynthesisParams(greedy=False, temperature=1.5, top_k=3, top_p=0.95, max_new_tokens=8)
    no_reference = AdapterRow(text="No voice given.", reference_audio=None, reference_text=None, seed=3)
    batch = run(adapter, [rows[1], no_reference, rows[2]], params)
    alone = [run(adapter, [row], params) for row in (rows[1], no_reference, rows[2])]
    assert_same(([a[0][0] for a in alone], [a[1][0] for a in alone]), batch, "sampled batch vs one by one")


def test_different_seeds_give_different_audio(adapter, rows):
    params = SynthesisParams(greedy=True, max_new_tokens=4)
    first = adapter.synthesize([rows[0]], params)[0]
    other = adapter.synthesize([AdapterRow(rows[0].text, rows[0].reference_audio, None, seed=999)], params)[0]
    assert first.size and other.size and not np.allclose(first[:min(first.size, other.size)],
                                                         other[:min(first.size, other.size)])


def test_loading_goes_through_the_hub_from_pretrained_calls(tiny_checkpoint, monkeypatch):
    import transformers

    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    seen = spy_from_pretrained(monkeypatch, transformers.VibeVoiceForConditionalGeneration,
                               transformers.AutoProcessor)
    folder = tiny_checkpoint("vibevoice")
    VibeVoiceAdapter.from_pretrained(folder)
    assert ("VibeVoiceForConditionalGeneration", str(folder)) in seen
    assert ("AutoProcessor", str(folder)) in seen


def test_load_errors_are_model_load_errors(tmp_path, tiny_checkpoint):
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    with pytest.raises(ModelLoadError, match="cannot load VibeVoice checkpoint"):
        VibeVoiceAdapter.from_pretrained(tmp_path)  # empty folder
    with pytest.raises(ModelLoadError, match="dtype"):
        VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"), dtype="int8")


def test_bad_rows_raise_the_projects_errors(adapter, rows):
    params = SynthesisParams(greedy=True, max_new_tokens=2)
    with pytest.raises(InputError, match="row 0: text is empty"):
        adapter.preprocess([AdapterRow(text="  ", reference_audio=None, reference_text=None)], params)
    bad = rows[0].reference_audio.copy()
    bad[10] = np.nan
    with pytest.raises(ReferenceAudioError, match="row 1"):
        adapter.preprocess([rows[0], AdapterRow(text="hi", reference_audio=bad, reference_text=None)], params)


def test_facts_match_the_loaded_config(adapter):
    f = adapter.facts
    text_config = adapter.model.config.text_config
    assert (f.num_layers, f.num_kv_heads, f.head_dim) == (2, 2, 8) == (
        text_config.num_hidden_layers, text_config.num_key_value_heads, text_config.head_dim)
    assert f.frames_per_second == 7.5 and f.reference_positions_per_second == 7.5
    assert f.text_positions_per_char == 1.0  # one token per character in the tiny tokenizer
    assert f.cfg_multiplier == 2 and f.has_cfg and f.dtype_bytes == 4
    assert f.num_parameters == sum(p.numel() for p in adapter.model.parameters())


def test_kv_estimate_covers_the_caches_generate_builds(adapter, rows, monkeypatch):
    """The estimate against the eager path's caches (the KV pool, the default, holds a fixed reservation sized from
    the memory budget, tested in test_kv_pool)."""
    from tts_app.adapters import vibevoice
    from tts_app.adapters.kv_pool import DecodeSettings

    monkeypatch.setattr(adapter, "decode_settings", DecodeSettings(pooled=False), raising=False)

    peak = {"positions": 0, "steps": 0}
    original = vibevoice.VibeVoiceDecodeBatch._decode_step

    def spy(batch):
        out = original(batch)
        # the prompt stream + the CFG negative stream, as held after the step
        held = batch.positive.cache.get_seq_length() + batch.negative.stream.cache.get_seq_length()
        peak["positions"] = max(peak["positions"], held)
        peak["steps"] += 1
        return out

    monkeypatch.setattr(vibevoice.VibeVoiceDecodeBatch, "_decode_step", spy)
    row = rows[0]  # speaks longer than 4 frames, so it runs to the cap
    tokens, _ = run(adapter, [row], SynthesisParams(greedy=True, max_new_tokens=4))
    assert len(tokens[0]) == 4 and peak["steps"] == 4
    measured_bytes = peak["positions"] * adapter.facts.kv_bytes_per_position
    positions = adapter.estimate_positions(len(row.text), len(row.reference_audio) / adapter.facts.sampling_rate,
                                           0, max_new_tokens=4)
    estimate_bytes = adapter.facts.kv_bytes_per_position * positions * adapter.facts.cfg_multiplier
    # The last step's frame is never fed back (2 positions) and the split over 2 streams rounds up (1 position); the
    # fixed part is sized for the largest voice section (4 speakers, a dialogue row), 3 voice lines more than here.
    tokenizer = adapter.processor.tokenizer
    one_voice = len(tokenizer(adapter._prompt("", num_frames=0), add_special_tokens=False)["input_ids"])
    spare_voice_lines = adapter._prompt_overhead - one_voice
    assert 0 < spare_voice_lines <= 3 * len(tokenizer(" Speaker 1:\n", add_special_tokens=False)["input_ids"]) + 6
    slack = 3 + spare_voice_lines
    assert measured_bytes <= estimate_bytes <= measured_bytes + slack * adapter.facts.kv_bytes_per_position


def _upstream(adapter, row, patch, *, max_new_tokens, cfg_scale, logits_processor=None, seed=0):
    """transformers' own ``VibeVoiceForConditionalGeneration.generate`` on ``row`` (batch 1, KV cache on), without the
    generic LM-logit CFG processor (``UnbatchedClassifierFreeGuidanceLogitsProcessor``, which the original model does
    not have), global RNG seeded with ``seed``. Returns (new tokens, audio float32)."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

    model = adapter.model
    inputs = adapter.processor(text=[adapter._prompt(row.text, 1)], audio=[row.reference_audio], sampling_rate=24000,
                               padding=True, return_tensors="pt")
    original = model._get_logits_processor

    def without_lm_cfg(*args, **kwargs):
        return LogitsProcessorList([p for p in original(*args, **kwargs)
                                    if not isinstance(p, UnbatchedClassifierFreeGuidanceLogitsProcessor)])

    patch.setattr(model, "_get_logits_processor", without_lm_cfg)
    torch.manual_seed(seed)
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, guidance_scale=cfg_scale,
                         num_diffusion_steps=adapter._num_diffusion_steps, return_dict_in_generate=True,
                         logits_processor=LogitsProcessorList(logits_processor or []))
    return out.sequences[0, inputs["input_ids"].shape[1]:], out.audio[0].squeeze().numpy()


def _ours_with_upstream_noise(adapter, rows, params, patch, seed=0):
    """Our generate with every per-row noise draw routed to the global RNG in the shape upstream draws it
    (``randn(2 * rows, latent)``, first half used; exact at batch 1), global RNG seeded with ``seed``."""
    randn = torch.randn

    def upstream_shaped_randn(*size, generator=None, **kwargs):
        return randn(2, *size, **kwargs)[0] if generator is not None else randn(*size, **kwargs)

    inputs = adapter.preprocess(rows, params)
    patch.setattr(torch, "randn", upstream_shaped_randn)
    torch.manual_seed(seed)
    outputs = adapter.generate(inputs, params)
    patch.setattr(torch, "randn", randn)
    return outputs, adapter.postprocess(outputs, inputs)


@pytest.fixture
def noiseless_reference(adapter, monkeypatch):
    """The reference encoded without sigma-VAE noise on both sides (upstream draws it from the global RNG, before
    its diffusion noise; ours from the clip's generator)."""
    model = adapter.model
    original = model.model.get_audio_features
    monkeypatch.setattr(model.model, "get_audio_features",
                        lambda values, mask, sample=True: original(values, mask, sample=False))
    ours = adapter._encode_reference
    monkeypatch.setattr(adapter, "_encode_reference",
                        lambda values, num_samples, generator: ours(values, num_samples, None))


def test_the_reference_encoding_is_upstreams_and_ignores_other_draws_on_the_global_rng(adapter, rows):
    """A row's prompt embeddings are upstream's ``get_audio_features(sample=True)`` after ``manual_seed`` with the
    clip's ``voice_seed``, and stay the same when something else draws from the process-wide torch RNG while the
    codec runs (another thread: the ASR pipeline of the next line's transcript drew its DataLoader seed there, and a
    job's audio differed)."""
    row = rows[0]
    params = SynthesisParams()
    alone = adapter.preprocess([row], params)
    lm = adapter.model.model

    def draw_mid_encode(module, args):
        torch.rand(7)

    hook = lm.audio_tower.encoder.register_forward_pre_hook(draw_mid_encode)
    try:
        disturbed = adapter.preprocess([row], params)
    finally:
        hook.remove()
    assert torch.equal(disturbed.inputs_embeds, alone.inputs_embeds)

    feats = adapter.processor.feature_extractor([row.reference_audio], sampling_rate=adapter.facts.sampling_rate,
                                                return_tensors="pt")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(voice_seed(row.reference_audio))
        frames = lm.get_audio_features(feats["input_values"], feats["padding_mask"], sample=True).pooler_output
    placeholder = alone.input_ids[0] == adapter.model.config.audio_token_id
    assert torch.equal(alone.inputs_embeds[0, placeholder], frames)


def test_matches_transformers_generate_at_cfg_1_3_over_30_frames(adapter, rows, monkeypatch, noiseless_reference):
    """Batch 1, KV cache on, guidance 1.3 (the checkpoint default), transformers' LM-logit CFG processor removed:
    the same tokens (argmax every step, up to its <eos>) and the same audio over 30+ frames. With this noise (global
    seed 1) the tiny model says <audio_eos> after 10 frames and goes on speaking, as upstream does."""
    row = rows[1]
    config = adapter.model.config
    params = SynthesisParams(max_new_tokens=60, cfg_scale=1.3)
    with monkeypatch.context() as patch:
        upstream_tokens, upstream_audio = _upstream(adapter, row, patch, max_new_tokens=60, cfg_scale=1.3, seed=1)
    with monkeypatch.context() as patch:
        ours, audio = _ours_with_upstream_noise(adapter, [row], params, patch, seed=1)
    tokens = ours.token_ids[0]
    num_frames = int((tokens == config.audio_token_id).sum())
    assert num_frames >= 30, f"only {num_frames} frames: the comparison should cover 30+"
    assert int(tokens[-1]) == config.eos_token_id  # it ended by itself
    first_span_end = tokens.tolist().index(config.audio_eos_token_id)
    assert first_span_end < len(tokens) - 2  # speech went on after the first <audio_eos>
    assert torch.equal(ours.token_ids[0], upstream_tokens)
    assert audio[0].shape == upstream_audio.shape
    np.testing.assert_allclose(audio[0], upstream_audio, rtol=0, atol=AUDIO_ATOL)


# <audio> x5, <audio_eos>, <audio_bos>, <audio> x6, <eos>: a second speech span in one row.
SPAN_SCRIPT = "aaaaaEBaaaaaa."


def _token_ids(adapter, script: str) -> list[int]:
    config = adapter.model.config
    ids = {"a": config.audio_token_id, "E": config.audio_eos_token_id, "B": config.audio_bos_token_id,
           ".": config.eos_token_id}
    return [ids[c] for c in script]


def _follow_scripts(adapter, patch, scripts: dict[str, str]):
    """Make our LM choose ``scripts[text][step]`` for the row whose text is ``text`` (then <eos>), whatever the
    batch and whenever the row joined it."""
    ids = {text: _token_ids(adapter, script) for text, script in scripts.items()}
    eos = adapter.model.config.eos_token_id

    def scripted(hidden, allowed, rows):
        return torch.tensor([ids[r.row.text][r.num_steps] if r.num_steps < len(ids[r.row.text]) else eos
                             for r in rows], dtype=torch.long)

    patch.setattr(adapter, "_select_tokens", scripted)


def test_a_second_speech_span_matches_transformers(adapter, rows, monkeypatch, noiseless_reference):
    """<audio_eos> does not end the row and <audio_bos> opens a new span whose CFG negative stream starts afresh,
    exactly as transformers' generate does (tokens forced to the same script on both sides)."""
    from transformers import LogitsProcessor

    script = _token_ids(adapter, SPAN_SCRIPT)
    row = rows[0]
    prompt_len = adapter.processor(text=[adapter._prompt(row.text, 1)], audio=[row.reference_audio],
                                   sampling_rate=24000, return_tensors="pt")["input_ids"].shape[1]

    class Script(LogitsProcessor):
        def __call__(self, input_ids, scores):
            forced = torch.full_like(scores, -float("inf"))
            forced[:, script[input_ids.shape[1] - prompt_len]] = 0.0
            return forced

    params = SynthesisParams(max_new_tokens=30, cfg_scale=1.3)
    with monkeypatch.context() as patch:
        upstream_tokens, upstream_audio = _upstream(adapter, row, patch, max_new_tokens=30, cfg_scale=1.3,
                                                    logits_processor=[Script()])
    assert upstream_tokens.tolist() == script
    with monkeypatch.context() as patch:
        _follow_scripts(adapter, patch, {row.text: SPAN_SCRIPT})
        ours, audio = _ours_with_upstream_noise(adapter, [row], params, patch)
    assert ours.token_ids[0].tolist() == script and ours.stop_reasons == [StopReason.END_OF_SPEECH]
    assert audio[0].size == 11 * 3200  # the frames of both spans
    np.testing.assert_allclose(audio[0], upstream_audio, rtol=0, atol=AUDIO_ATOL)
    # the negative stream's restart matters: without it the second span's frames differ
    from tts_app.adapters import vibevoice

    with monkeypatch.context() as patch:
        _follow_scripts(adapter, patch, {row.text: SPAN_SCRIPT})
        patch.setattr(vibevoice._NegativeStream, "reset", lambda self, drop_history, rows: drop_history)
        _, no_reset = _ours_with_upstream_noise(adapter, [row], params, patch)
    np.testing.assert_allclose(no_reset[0][:5 * 3200], upstream_audio[:5 * 3200], rtol=0, atol=AUDIO_ATOL)
    assert not np.allclose(no_reset[0][5 * 3200:], upstream_audio[5 * 3200:], atol=AUDIO_ATOL)


@pytest.mark.parametrize("use_cache", [True, False])
def test_rows_with_new_speech_spans_batched_equal_one_by_one(adapter, rows, monkeypatch, use_cache):
    """Rows opening new spans at different steps (and one that never does) batched = alone, cache on or off."""
    scripts = ["aaEBaaaaa.", SPAN_SCRIPT, "aaaaaaa."]
    params = SynthesisParams(max_new_tokens=20, use_cache=use_cache)
    by_text = {row.text: script for row, script in zip(rows, scripts)}
    with monkeypatch.context() as patch:
        _follow_scripts(adapter, patch, by_text)
        _, batch, batch_audio = run_batch(adapter, rows, params)
    for i, (row, script) in enumerate(zip(rows, scripts)):
        with monkeypatch.context() as patch:
            _follow_scripts(adapter, patch, by_text)
            _, alone, alone_audio = run_batch(adapter, [row], params)
        assert batch.token_ids[i].tolist() == alone.token_ids[0].tolist() == _token_ids(adapter, script)
        np.testing.assert_allclose(batch_audio[i], alone_audio[0], rtol=0, atol=AUDIO_ATOL, err_msg=f"row {i}")


def test_stop_reasons_tell_a_row_cut_at_the_cap_from_one_that_ended(adapter, rows):
    params = SynthesisParams(max_new_tokens=20)
    _, outputs, audio = run_batch(adapter, rows, params)
    for tokens, reason in zip(outputs.token_ids, adapter.stop_reasons(outputs, None)):
        ended = int(tokens[-1]) == adapter.model.config.eos_token_id
        assert reason is (StopReason.END_OF_SPEECH if ended else StopReason.MAX_NEW_TOKENS)
    assert {StopReason.END_OF_SPEECH, StopReason.MAX_NEW_TOKENS} <= set(adapter.stop_reasons(outputs, None))


def test_sampling_knobs_do_not_change_the_tokens(adapter, rows):
    """The LM always takes the argmax (as the original and transformers): greedy or temperature/top-k change
    nothing; the seed changes only the diffusion noise."""
    greedy = run(adapter, rows[:1], SynthesisParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS))
    hot = run(adapter, rows[:1], SynthesisParams(greedy=False, temperature=1.9, top_k=2, top_p=0.5,
                                                  max_new_tokens=MAX_NEW_TOKENS))
    assert_same(greedy, hot, "greedy vs sampling knobs")
    facts = adapter.facts.generation_defaults
    assert (facts.greedy, facts.temperature, facts.top_p, facts.top_k) == (None, None, None, None)
    assert "argmax" in facts.sources["temperature"]


def test_a_checkpoint_max_length_caps_each_rows_prompt_plus_steps(tiny_checkpoint, rows, tmp_path):
    """Issue 24: a generation config with ``max_length`` (a total length, as transformers reads it) and no
    ``max_new_tokens``: each row decodes at most ``max_length`` less its own prompt, in a batch as alone: a row with
    a long prompt is cut (and says so) where one with a shorter prompt ends by itself; the steps a row makes are
    those it makes uncapped."""
    import json
    import shutil

    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    uncapped = VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"))
    params = SynthesisParams()
    two = [rows[0], rows[2]]
    prompt_lens = [int(uncapped.preprocess([row], params).attention_mask.sum()) for row in two]
    free = run(uncapped, two, SynthesisParams(max_new_tokens=MAX_NEW_TOKENS))[0]
    shutil.copytree(tiny_checkpoint("vibevoice"), tmp_path / "vv")
    path = tmp_path / "vv" / "generation_config.json"
    config = json.loads(path.read_text())
    config.pop("max_new_tokens", None)
    config["max_length"] = max_length = prompt_lens[0] + len(free[0]) // 2
    path.write_text(json.dumps(config))
    caps = [max_length - p for p in prompt_lens]
    assert caps[0] < len(free[0]) and caps[1] > len(free[1]), (prompt_lens, [len(t) for t in free])
    capped = VibeVoiceAdapter.from_pretrained(tmp_path / "vv")
    assert capped.facts.generation_defaults.max_length == max_length
    batch = capped.generate(capped.preprocess(two, params), params)
    alone = [capped.generate(capped.preprocess([row], params), params) for row in two]
    assert torch.equal(batch.token_ids[0], free[0][:caps[0]]) and torch.equal(alone[0].token_ids[0], free[0][:caps[0]])
    assert batch.stop_reasons[0] is alone[0].stop_reasons[0] is StopReason.MAX_NEW_TOKENS
    assert torch.equal(batch.token_ids[1], free[1]) and torch.equal(alone[1].token_ids[0], free[1])
    assert batch.stop_reasons[1] is alone[1].stop_reasons[0] is StopReason.END_OF_SPEECH
