"""IndexTTS 2 adapter on a tiny random checkpoint in the real IndexTTS-2 layout (config.yaml, gpt.pth, s2mel.pth,
bpe.model, ..., auxiliary models in a hub cache), loaded with the package's own loaders (indextts2-inference) and
compared with the package's own ``IndexTTS2.infer``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tests.adapter_helpers import (load_reference, run_batch, run_make_tiny_model,  # noqa: E402
                                  skip_without)

skip_without("indextts")

from tts_app.adapters.base import AdapterRow, RowEmotion  # noqa: E402
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError  # noqa: E402
from tts_app.finish import Finish  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402

CODES = 40  # decode-step cap per test: the tiny model's rows stop by themselves after ~10-35 codes
GREEDY = SynthesisParams(greedy=True, num_beams=1, max_new_tokens=CODES)  # argmax: infer(top_k=1, num_beams=1)
SAMPLES_PER_CODE = int(256 * 1.72)  # hop 256 x 1.72 mel frames per code, rounded down per row (a few samples)


@pytest.fixture(scope="module")
def tiny_idx(tiny_checkpoint) -> Path:
    return tiny_checkpoint("indextts2")


@pytest.fixture(scope="module")
def adapter(tiny_adapter):
    return tiny_adapter("indextts2")


@pytest.fixture(scope="module")
def clip(adapter):
    """``clip(name, seconds)`` -> float32 waveform at the adapter's 22.05 kHz."""
    return lambda name, seconds: load_reference(name, adapter.facts.sampling_rate, seconds)[0]


@pytest.fixture(scope="module")
def three_rows(clip):
    """Different texts (lengths, languages) and a different reference clip (and length) per row."""
    return [AdapterRow("你好，世界。今天天气很好。", clip("zh_female_1.wav", 1.3), None, seed=1),
            AdapterRow("Hello there, how are you?", clip("en_male_1.wav", 1.1), None, seed=2),
            AdapterRow("短句。", clip("en_female_1.wav", 0.9), None, seed=3)]


def run(adapter, rows, params, mutate=None):
    _, outputs, audio = run_batch(adapter, rows, params, mutate)
    return outputs, audio


def rows_equal(batch, batch_audio, singles) -> list[bool]:
    """Per row: same codes and (to a tight tolerance) the same audio as the row run alone."""
    equal = []
    for i, (out, audio) in enumerate(singles):
        n = out.codes.shape[1]
        same_codes = torch.equal(batch.codes[i, :n], out.codes[0]) and batch.code_lengths[i] == out.code_lengths[0]
        same_audio = batch_audio[i].shape == audio[0].shape and np.allclose(batch_audio[i], audio[0], atol=1e-4)
        equal.append(same_codes and same_audio)
    return equal


def _tree_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------ checkpoint, loading


def test_make_tiny_model_cli_writes_the_real_layout_byte_for_byte(tmp_path, tiny_idx):
    out = tmp_path / "tiny-indextts2"
    proc = run_make_tiny_model("indextts2", out)
    assert proc.returncode == 0, proc.stderr
    for name in ("config.yaml", "gpt.pth", "s2mel.pth", "bpe.model", "wav2vec2bert_stats.pt", "feat1.pt", "feat2.pt",
                 "qwen0.6bemo4-merge/config.json", "qwen0.6bemo4-merge/tokenizer.json"):
        assert (out / name).is_file(), name
    for repo in ("facebook--w2v-bert-2.0", "amphion--MaskGCT", "funasr--campplus",
                 "nvidia--bigvgan_v2_22khz_80band_256x"):
        assert (out / "hf_cache" / f"models--{repo}" / "refs" / "main").is_file(), repo
    # same (default) seed as the session's checkpoint -> the same files
    assert _tree_hashes(out) == _tree_hashes(tiny_idx)


def test_tiny_config_has_the_keys_of_the_real_config_yaml(tiny_idx):
    from omegaconf import OmegaConf

    from tts_app.adapters.indextts2 import INDEXTTS2_CONFIG

    def keys(d, prefix=""):
        return {prefix + k for k in d} | {x for k, v in d.items() if isinstance(v, dict) for x in keys(v, prefix + k + ".")}

    tiny = OmegaConf.to_container(OmegaConf.load(tiny_idx / "config.yaml"))
    assert keys(tiny) == keys(INDEXTTS2_CONFIG)
    assert tiny["gpt"]["model_dim"] == INDEXTTS2_CONFIG["gpt"]["model_dim"] == 1280  # hard-coded by s2mel's gpt_layer


def test_loading_uses_the_hub_calls_of_the_package_on_the_checkpoints_hub_cache(monkeypatch, tiny_idx):
    import huggingface_hub
    import transformers
    from indextts.s2mel.modules.bigvgan import bigvgan

    from tests.adapter_helpers import spy_from_pretrained
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    seen = spy_from_pretrained(monkeypatch, transformers.Wav2Vec2BertModel, transformers.SeamlessM4TFeatureExtractor,
                               bigvgan.BigVGAN)
    downloads = []
    real_download = huggingface_hub.hf_hub_download

    def spy_download(repo_id, filename, **kwargs):
        downloads.append((repo_id, filename, kwargs.get("cache_dir")))
        return real_download(repo_id, filename=filename, **kwargs)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", spy_download)
    loaded = IndexTTS2Adapter.from_pretrained(tiny_idx, dtype="bfloat16")
    assert ("Wav2Vec2BertModel", "facebook/w2v-bert-2.0") in seen
    assert ("SeamlessM4TFeatureExtractor", "facebook/w2v-bert-2.0") in seen
    assert ("BigVGAN", "nvidia/bigvgan_v2_22khz_80band_256x") in seen
    hub_cache = str(tiny_idx / "hf_cache")
    assert ("amphion/MaskGCT", "semantic_codec/model.safetensors", hub_cache) in downloads
    assert ("funasr/campplus", "campplus_cn_common.bin", hub_cache) in downloads
    assert next(loaded.model.gpt.parameters()).dtype == torch.bfloat16 and loaded.facts.dtype_bytes == 2
    assert next(loaded.model.s2mel.parameters()).dtype == torch.float32  # s2mel stays float32, as upstream
    wave = load_reference("zh_female_1.wav", 22050, 1.0)[0]
    (audio,) = loaded.synthesize([AdapterRow("你好。", wave, None)], SynthesisParams(greedy=True, max_new_tokens=8))
    assert audio.size > 0 and np.isfinite(audio).all()  # a half-precision GPT runs (on the CPU too)


def test_auxiliaries_in_sub_folders_need_no_hub_cache(tmp_path, tiny_idx, adapter, three_rows):
    """The other offline layout: each auxiliary model in a sub-folder named like its repository."""
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    folder = tmp_path / "IndexTTS-2"
    folder.mkdir()
    for item in tiny_idx.iterdir():
        if item.name != "hf_cache":
            (folder / item.name).symlink_to(item)
    for snapshot in (tiny_idx / "hf_cache").glob("models--*/snapshots/*"):
        (folder / snapshot.parts[-3].split("--")[-1]).symlink_to(snapshot)
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "MaskGCT", "bigvgan_v2_22khz_80band_256x", "campplus", "qwen0.6bemo4-merge", "w2v-bert-2.0"]
    loaded = IndexTTS2Adapter.from_pretrained(folder)
    row = three_rows[2]
    (mine,), (theirs,) = loaded.synthesize([row], GREEDY), adapter.synthesize([row], GREEDY)
    assert mine.size > 0 and np.array_equal(mine, theirs)


def test_the_official_repositorys_flat_hf_cache_layout_loads(tmp_path, tiny_idx, adapter, three_rows):
    """The layout the official index-tts repository writes (``ensure_models_available``): ``hf_cache/w2v-bert-2.0/``,
    ``hf_cache/semantic_codec_model.safetensors``, ``hf_cache/campplus_cn_common.bin``, ``hf_cache/bigvgan/``."""
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    folder = tmp_path / "index-tts-checkpoints"
    (folder / "hf_cache").mkdir(parents=True)
    for item in tiny_idx.iterdir():
        if item.name != "hf_cache":
            (folder / item.name).symlink_to(item)
    snapshot = {p.parts[-3]: p for p in (tiny_idx / "hf_cache").glob("models--*/snapshots/*")}
    flat = folder / "hf_cache"
    (flat / "w2v-bert-2.0").symlink_to(snapshot["models--facebook--w2v-bert-2.0"])
    (flat / "bigvgan").symlink_to(snapshot["models--nvidia--bigvgan_v2_22khz_80band_256x"])
    (flat / "semantic_codec_model.safetensors").symlink_to(
        snapshot["models--amphion--MaskGCT"] / "semantic_codec" / "model.safetensors")
    (flat / "campplus_cn_common.bin").symlink_to(snapshot["models--funasr--campplus"] / "campplus_cn_common.bin")
    loaded = IndexTTS2Adapter.from_pretrained(folder)
    row = three_rows[2]
    (mine,), (theirs,) = loaded.synthesize([row], GREEDY), adapter.synthesize([row], GREEDY)
    assert mine.size > 0 and np.array_equal(mine, theirs)


def test_missing_auxiliary_model_names_the_download_command(tmp_path, tiny_idx):
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    folder = tmp_path / "no-aux"
    folder.mkdir()
    for item in tiny_idx.iterdir():
        if item.name != "hf_cache":
            (folder / item.name).symlink_to(item)
    with pytest.raises(ModelLoadError, match=r"facebook/w2v-bert-2.0.*huggingface-cli download facebook/w2v-bert-2.0"):
        IndexTTS2Adapter.from_pretrained(folder)


def test_load_failures_are_model_load_errors(tmp_path, tiny_idx):
    from tts_app.adapters import family_of
    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    with pytest.raises(ModelLoadError, match="--model"):
        IndexTTS2Adapter.from_pretrained("IndexTeam/not-a-cached-indextts")
    with pytest.raises(ModelLoadError, match="no config.yaml"):
        IndexTTS2Adapter.from_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="float64"):
        IndexTTS2Adapter.from_pretrained(tiny_idx, dtype="float64")
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in tiny_idx.iterdir():  # every file there, but a corrupt gpt.pth
        if item.name != "gpt.pth":
            (broken / item.name).symlink_to(item)
    (broken / "gpt.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelLoadError, match="cannot load IndexTTS 2 checkpoint"):
        IndexTTS2Adapter.from_pretrained(broken)
    assert family_of(tiny_idx) == "indextts2"


def test_facts_come_from_config_yaml(adapter, three_rows):
    facts = adapter.facts
    gpt = adapter.processor.config.gpt
    assert (facts.num_layers, facts.num_kv_heads, facts.head_dim) == (gpt.layers, gpt.heads, 1280 // gpt.heads)
    assert facts.sampling_rate == 22050 and facts.frames_per_second == pytest.approx(22050 / 256 / 1.72)
    assert facts.default_max_new_tokens == min(1500, gpt.max_mel_tokens)  # upstream default, capped by the model
    defaults = facts.generation_defaults  # the package's own infer defaults (the checkpoint has no generation config)
    assert (defaults.greedy, defaults.temperature, defaults.top_p, defaults.top_k) == (False, 0.8, 0.8, 30)
    assert "max_mel_tokens=1500" in defaults.sources["max_new_tokens"] and defaults.cfg_scale is None
    assert adapter.repetition_penalty == 10.0 and facts.languages == ("zh", "en")
    assert facts.supports_pinyin and facts.supports_emotion and facts.supports_emotion_text
    assert not facts.needs_reference_text and not facts.has_cfg and facts.cfg_multiplier == 1
    assert facts.num_parameters == sum({id(p): p.numel() for p in adapter.model.parameters()}.values())


def test_kv_estimate_covers_the_cache_the_decode_loop_really_holds(adapter, three_rows, monkeypatch):
    """The per-row estimate against the eager path's DynamicCache (every row holds the longest row's positions);
    the KV pool (the default) holds a fixed reservation sized from the memory budget, tested in test_kv_pool."""
    from tts_app.adapters.kv_pool import DecodeSettings

    monkeypatch.setattr(adapter, "decode_settings", DecodeSettings(pooled=False), raising=False)
    inputs = adapter.preprocess(three_rows, GREEDY)
    batch = adapter.start_decode(GREEDY)  # the one decode loop (generate runs through it too)
    batch.prefill(list(enumerate(three_rows)))
    for _ in range(5):
        batch.decode_step()
    cache = batch.stream.cache
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    positions = batch.stream.num_columns  # every row holds the longest row's positions (left padding)
    assert held == adapter.facts.kv_bytes_per_position * positions * len(three_rows)
    beams = adapter.facts.generation_defaults.num_beams  # the estimate covers the default beams (3 rows)
    assert beams == 3
    for i, row in enumerate(three_rows):
        real = int(inputs.prefix_mask[i].sum()) + 1 + 5  # prefix + <start_mel> + 5 codes fed
        estimate = adapter.estimate_positions(len(row.text), len(row.reference_audio) / 22050, 0, 5)
        assert real * beams <= estimate <= 1.25 * real * beams, (real, estimate)  # covers it, no wild margin


# ------------------------------------------------------------------------------------------------ batching


def test_synthesis_with_a_real_speech_reference(adapter, clip):
    row = AdapterRow("今天天气很好，我们一起去公园散步。", clip("zh_male_1.wav", 1.5), None, seed=4)
    outputs, (audio,) = run(adapter, [row], SynthesisParams(seed=4, max_new_tokens=CODES))
    assert audio.dtype == np.float32 and audio.ndim == 1 and np.isfinite(audio).all() and np.abs(audio).max() > 0
    n = outputs.code_lengths[0]
    assert 0 < n <= CODES and abs(audio.size - n * 1.72 * 256) <= 256


def test_greedy_batch_equals_rows_one_by_one(adapter, three_rows):
    singles = [run(adapter, [row], GREEDY) for row in three_rows]
    batch, audio = run(adapter, three_rows, GREEDY)
    assert rows_equal(batch, audio, singles) == [True, True, True]
    # the rows really differ, and stop at different codes, so the comparison is not trivially true
    assert len(set(batch.code_lengths)) == 3 and not any(batch.hit_max_new_tokens)
    for i, n in enumerate(batch.code_lengths):
        assert abs(audio[i].size - n * 1.72 * 256) <= 256
        assert bool((batch.codes[i, n:] == adapter.model.gpt.stop_mel_token).all())


def test_without_the_left_padding_mask_rows_would_leak(adapter, three_rows):
    """The batch test can fail: attending to the left padding changes the shorter rows' codes."""
    singles = [run(adapter, [row], GREEDY) for row in three_rows]

    def drop_mask(inputs):
        inputs.prefix_mask = torch.ones_like(inputs.prefix_mask)

    batch, audio = run(adapter, three_rows, GREEDY, mutate=drop_mask)
    equal = rows_equal(batch, audio, singles)
    longest = int(np.argmax([int(m.sum()) for m in adapter.preprocess(three_rows, GREEDY).prefix_mask]))
    assert equal[longest]  # the longest row has no padding
    assert not all(equal)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_kv_cache_off_gives_the_same_codes_and_audio(adapter, three_rows, batch_size):
    rows = three_rows[:batch_size]
    on, audio_on = run(adapter, rows, GREEDY)
    off, audio_off = run(adapter, rows, SynthesisParams(greedy=True, num_beams=1, max_new_tokens=CODES,
                                                        use_cache=False))
    assert torch.equal(on.codes, off.codes)
    for a, b in zip(audio_on, audio_off):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-4)


def test_sampling_is_seeded_per_row(adapter, three_rows):
    params = SynthesisParams(max_new_tokens=CODES, temperature=1.0, top_k=20)
    batch, batch_audio = run(adapter, three_rows, params)
    alone, alone_audio = run(adapter, [three_rows[1]], params)
    n = alone.codes.shape[1]
    assert torch.equal(batch.codes[1, :n], alone.codes[0])  # a row's draws do not depend on its batch-mates
    assert np.allclose(batch_audio[1], alone_audio[0], atol=1e-4)  # flow-matching noise too
    reseeded = AdapterRow(**{**three_rows[1].__dict__, "seed": 99})
    other, _ = run(adapter, [reseeded], params)
    assert not torch.equal(other.codes[0, :5], alone.codes[0, :5])


def test_a_row_that_hits_the_cap_is_flagged_and_keeps_its_codes(adapter, three_rows):
    free, _ = run(adapter, three_rows, GREEDY)
    cap = max(1, min(free.code_lengths) // 2)
    capped, audio = run(adapter, three_rows, SynthesisParams(greedy=True, num_beams=1, max_new_tokens=cap))
    assert capped.code_lengths == [cap] * 3 and capped.hit_max_new_tokens == [True] * 3
    from tts_app.request import StopReason

    assert adapter.stop_reasons(capped, None) == [StopReason.MAX_NEW_TOKENS] * 3
    assert adapter.stop_reasons(free, None) == [StopReason.END_OF_SPEECH] * 3
    assert torch.equal(capped.codes, free.codes[:, :cap])  # the cap cuts; it does not change what came before
    assert all(abs(a.size - cap * 1.72 * 256) <= 256 for a in audio)


def test_bad_rows_raise_project_errors(adapter, clip):
    wave = clip("en_female_1.wav", 1.0)
    with pytest.raises(ReferenceAudioError, match="row 0: IndexTTS 2 clones a voice") as no_voice:
        adapter.preprocess([AdapterRow("Hello.", None, None)], GREEDY)
    # a Chinese page reads the cause in Chinese, not English inside a Chinese frame
    assert Finish.from_error(no_voice.value).render("zh").endswith("第 0 行：IndexTTS 2 克隆声音需要参考音频；请给出参考音频")
    with pytest.raises(InputError, match="row 0: text is empty"):
        adapter.preprocess([AdapterRow("  ", wave, None)], GREEDY)
    with pytest.raises(ReferenceAudioError, match="row 1"):
        adapter.preprocess([AdapterRow("ok", wave, None), AdapterRow("ok", np.stack([wave, wave]), None)], GREEDY)
    with pytest.raises(ReferenceAudioError, match="NaN"):
        adapter.preprocess([AdapterRow("ok", np.full(2205, np.nan, dtype=np.float32), None)], GREEDY)
    with pytest.raises(InputError, match="at most 600") as too_long:
        adapter.preprocess([AdapterRow("好" * 700, wave, None)], GREEDY)
    assert "模型每段最多读 600 个" in Finish.from_error(too_long.value).render("zh")
    inputs = adapter.preprocess([AdapterRow("ok", wave, None)], GREEDY)
    with pytest.raises(InputError, match="max_new_tokens=500 exceeds the 120 codes"):
        adapter.generate(inputs, SynthesisParams(greedy=True, num_beams=1, max_new_tokens=500))


def test_conditioning_is_computed_once_per_reference_clip(adapter, clip):
    wave = clip("zh_female_2.wav", 1.0)
    before = adapter.num_conditioning_computed
    rows = [AdapterRow("第一句。", wave, None), AdapterRow("第二句。", wave.copy(), None)]
    adapter.preprocess(rows, GREEDY)
    adapter.preprocess(rows[:1], GREEDY)
    assert adapter.num_conditioning_computed - before == 2  # one clip: speaker conditioning + its emotion features


# ------------------------------------------------------------------------------------------------ undecodable codes

NUM_SEEDS = 50


def _fifty_seeds(adapter, row, params):
    """The model inputs of ``row`` with seeds 0..49, as one batch (preprocessed once, the row repeated)."""
    from tts_app.adapters.indextts2 import IndexTTS2Inputs

    one = adapter.preprocess([row], params)
    return IndexTTS2Inputs(prefix_embeds=one.prefix_embeds.repeat(NUM_SEEDS, 1, 1),
                           prefix_mask=one.prefix_mask.repeat(NUM_SEEDS, 1), text_tokens=one.text_tokens * NUM_SEEDS,
                           conditioning=one.conditioning * NUM_SEEDS, emovecs=one.emovecs * NUM_SEEDS,
                           emo_cond_embs=one.emo_cond_embs * NUM_SEEDS, seeds=list(range(NUM_SEEDS)))


def _codes_of(adapter, inputs, params):
    """Each row's generated codes (stop code excluded), all rows decoded as one batch (no s2mel / vocoder)."""
    outputs = adapter.generate(inputs, params)
    return [outputs.codes[i, :n].tolist() for i, n in enumerate(outputs.code_lengths)]


def _step_codes_of(monkeypatch, adapter, inputs, params):
    """The same through the step interface (``IndexTTS2DecodeBatch``), each finished row's codes."""
    batch = adapter.start_decode(params)
    batch._row_audio = lambda row, codes: np.zeros(0, dtype=np.float32)  # the codes are what is checked here
    with monkeypatch.context() as patch:
        patch.setattr(adapter, "preprocess", lambda rows, params: inputs)
        batch.prefill([(i, None) for i in range(NUM_SEEDS)])
    done = {}
    while batch.num_rows:
        for out in batch.decode_step():
            if out.stop_reason is not None:
                done[out.key] = list(next(r for r in batch.rows if r.key == out.key).codes)
                batch.release([out.key])
    return [done[i] for i in range(NUM_SEEDS)]


@pytest.mark.parametrize("settings", ["defaults", "sampling", "emotion"])
def test_a_code_the_codec_cannot_decode_is_never_picked(monkeypatch, adapter, three_rows, settings):
    """Issue 23: a sampled ``start_mel_token`` (64 on the tiny checkpoint) reached the codec (``IndexError``). Over 50
    seeds, with the defaults (3 beams, sampled) and hotter sampling without beams in both decode paths, and with an
    emotion vector: every code is one the codec decodes; and without the mask hot sampling draws one (so the test can
    fail)."""
    # cheap per seed: the shortest prompt (the prefill of 50 rows, 150 with beams, is most of the cost) and 8 codes;
    # an undecodable draw is as likely at any step
    max_new = 8
    params = {"defaults": SynthesisParams(max_new_tokens=max_new),
              "sampling": SynthesisParams(max_new_tokens=max_new, num_beams=1, temperature=2.0, top_p=1.0, top_k=66),
              "emotion": SynthesisParams(max_new_tokens=max_new)}[settings]
    row = three_rows[2]
    if settings == "emotion":
        row = AdapterRow(**{**row.__dict__, "emotion": RowEmotion(vector=(0.7, 0, 0, 0, 0, 0, 0.2, 0))})
    inputs = _fifty_seeds(adapter, row, params)
    size = int(adapter.processor.config.semantic_codec.codebook_size)
    assert adapter.undecodable_codes.nonzero().flatten().tolist() == [adapter.model.gpt.start_mel_token] == [size]
    paths = [_codes_of(adapter, inputs, params)]
    if settings != "emotion":  # the emotion only changes the prefix: one decode path is enough for it
        paths.append(_step_codes_of(monkeypatch, adapter, inputs, params))
    for codes in paths:
        assert len(codes) == NUM_SEEDS and all(max(c, default=0) < size for c in codes)
    if settings == "sampling":
        monkeypatch.setattr(adapter, "_undecodable", torch.zeros_like(adapter.undecodable_codes))
        unmasked = _codes_of(adapter, inputs, params)
        assert any(max(c, default=0) >= size for c in unmasked)  # what the seeds draw without the mask


# ------------------------------------------------------------------------------------------------ text, pinyin


def test_pinyin_override_reaches_the_model_as_its_pinyin_token(adapter):
    from tts_app.frontend import prepare_text

    tokenizer = adapter.processor.tokenizer
    [segment] = prepare_text("重(zhòng)要。", supports_pinyin=adapter.facts.supports_pinyin).segments
    assert "{zhong4}" in segment.text
    pieces = tokenizer.convert_ids_to_tokens(adapter._text_ids(segment.text))
    assert "ZHONG4" in [p.lstrip("▁") for p in pieces]
    assert "重" not in "".join(pieces)  # the character itself is replaced, not read by the model's own guess
    assert "JV4" in [p.lstrip("▁") for p in tokenizer.convert_ids_to_tokens(adapter._text_ids("{ju4}子"))]
    assert tokenizer.unk_token_id not in adapter._text_ids("重要的事情说三遍！Hello, WORLD.")


# ------------------------------------------------------------------------------------------------ emotion


def test_emotion_vector_reaches_the_conditioning_and_the_codes(adapter, three_rows):
    row = three_rows[0]
    plain = adapter.preprocess([row], GREEDY)
    happy = AdapterRow(**{**row.__dict__, "emotion": RowEmotion(vector=(0.9, 0, 0, 0, 0, 0, 0, 0))})
    emotional = adapter.preprocess([happy], GREEDY)
    assert not torch.allclose(emotional.emovecs[0], plain.emovecs[0])
    # the emotion vector is part of the speaker latents the GPT reads
    assert not torch.allclose(emotional.prefix_embeds[:, :32], plain.prefix_embeds[:, :32])
    assert torch.equal(emotional.prefix_embeds[:, 34:], plain.prefix_embeds[:, 34:])  # the text part is not
    assert not torch.equal(adapter.generate(emotional, GREEDY).codes[0, :12], adapter.generate(plain, GREEDY).codes[0, :12])
    # weight 0 is no emotion at all
    none = AdapterRow(**{**row.__dict__, "emotion": RowEmotion(vector=(0.9, 0, 0, 0, 0, 0, 0, 0), weight=0.0)})
    assert torch.allclose(adapter.preprocess([none], GREEDY).emovecs[0], plain.emovecs[0])


def test_emotion_reference_clip_changes_the_conditioning_by_its_weight(adapter, three_rows, clip):
    row = three_rows[0]
    emo_clip = clip("en_male_1.wav", 1.0)
    plain = adapter.preprocess([row], GREEDY).emovecs[0]
    spk = adapter.speaker_conditioning(row.reference_audio).spk_cond_emb
    with torch.no_grad():  # the voice clip's own emotion vector (UnifiedVoice.get_emovec), where weight 0 would be
        voice = adapter.model.gpt.get_emovec(spk, torch.tensor([spk.shape[-1]]))
    half = adapter.preprocess([AdapterRow(**{**row.__dict__, "emotion": RowEmotion(
        reference_audio=emo_clip, weight=0.5)})], GREEDY).emovecs[0]
    full = adapter.preprocess([AdapterRow(**{**row.__dict__, "emotion": RowEmotion(
        reference_audio=emo_clip, weight=1.0)})], GREEDY).emovecs[0]
    assert not torch.allclose(half, plain) and not torch.allclose(full, half)
    # emo_alpha blends linearly from the voice clip's emotion to the emotion clip's (UnifiedVoice.merge_emovec)
    assert torch.allclose(half, (voice + full) / 2, atol=1e-5)


def test_emotion_from_text_asks_the_checkpoints_emotion_model(monkeypatch, adapter, three_rows):
    row = three_rows[0]
    # the tiny Qwen model answers (random text, so the package's parser falls back to "calm")
    vector = adapter._emotion_from_text("我今天非常高兴！")
    assert len(vector) == 8 and all(0.0 <= v <= 1.2 for v in vector)
    asked = []

    class FakeQwen:
        def inference(self, text):
            asked.append(text)
            return {"happy": 0.0, "angry": 0.0, "sad": 0.7, "afraid": 0.0, "disgusted": 0.0, "melancholic": 0.0,
                    "surprised": 0.0, "calm": 0.0}

    monkeypatch.setattr(adapter, "_load_qwen_emotion", lambda: FakeQwen())
    from_text = AdapterRow(**{**row.__dict__, "emotion": RowEmotion(text="气死我了！")})
    # "sad" 0.7 is a vector the web UI's normalisation (bias 1.0 for sad, sum <= 0.8) leaves as it is
    explicit = AdapterRow(**{**row.__dict__, "emotion": RowEmotion(vector=(0, 0, 0.7, 0, 0, 0, 0, 0))})
    got = adapter.preprocess([from_text], GREEDY).emovecs[0]
    assert asked == ["气死我了！"]
    assert torch.equal(got, adapter.preprocess([explicit], GREEDY).emovecs[0])


# ------------------------------------------------------------------------------------------------ upstream


def run_upstream(tmp_path, tiny_idx, spec: list[dict]):
    """The package's own ``IndexTTS2.infer`` on ``spec``'s cases (tests/indextts2_upstream.py, in a child process
    with the checkpoint's hub cache, offline) -> its npz (``codes_i``, ``audio_i``)."""
    from tests.indextts2_upstream import run_infer

    return run_infer(tmp_path, tiny_idx, spec)


# Seeds for which the package's default beam search gives codes on the tiny checkpoint with BEAM_TEXT and the
# voice below (for others its 3 beams end at once, and infer fails on the empty code sequence in s2mel's conv1d).
BEAM_SEEDS = (1, 3, 19)
BEAM_TEXT = "Hello there, how are you?"
EMOTION_VECTOR = (0.6, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0, 0.0)
TEXT_ZH, TEXT_EN = "你好，世界。今天天气很好。", "Hello there, how are you?"


@pytest.fixture(scope="module")
def upstream_voices(tmp_path_factory, clip):
    """(folder, clips): the voice, emotion and other-voice clips of the upstream tests, also written to
    ``folder/{name}.wav`` (float32 WAV) for the package's ``infer``."""
    import soundfile as sf

    folder = tmp_path_factory.mktemp("indextts2-upstream")
    clips = {"voice": clip("zh_female_1.wav", 1.6), "emotion": clip("en_male_1.wav", 1.2),
             "other_voice": clip("en_female_1.wav", 1.0)}
    for name, audio in clips.items():
        sf.write(folder / f"{name}.wav", audio, 22050, subtype="FLOAT")
    return folder, clips


def _greedy_cases(folder: Path, clips: dict) -> list[tuple[dict, RowEmotion | None]]:
    """(``infer`` keyword arguments, the same emotion for the adapter) per greedy case: plain, an emotion vector, an
    emotion reference clip, another voice."""
    from indextts.infer_v2 import IndexTTS2

    return [
        (dict(text=TEXT_ZH, seed=5), None),
        (dict(text=TEXT_ZH, seed=6, emo_vector=IndexTTS2.normalize_emo_vec(None, list(EMOTION_VECTOR)),
              emo_alpha=0.8), RowEmotion(vector=EMOTION_VECTOR, weight=0.8)),
        (dict(text=TEXT_EN, seed=7, emo_audio_prompt=str(folder / "emotion.wav"), emo_alpha=0.6),
         RowEmotion(reference_audio=clips["emotion"], weight=0.6)),
        (dict(text="短句。", seed=8, reference=str(folder / "other_voice.wav")), None),
    ]


@pytest.fixture(scope="module")
def upstream(tiny_idx, upstream_voices):
    """The package's own ``infer`` on the cases of both upstream tests below, in one child process (its imports
    and model load once): ``{"beam": [(codes, audio)] per BEAM_SEEDS, "greedy": [(codes, audio)] per greedy
    case}`` (``codes`` with the stop code, shape (1, n))."""
    folder, clips = upstream_voices
    beam = [{"reference": str(folder / "voice.wav"), "text": BEAM_TEXT, "seed": seed, "max_mel_tokens": CODES,
             "generation": {}} for seed in BEAM_SEEDS]
    greedy = [{"reference": str(folder / "voice.wav"), "max_mel_tokens": CODES, **case}
              for case, _ in _greedy_cases(folder, clips)]
    npz = run_upstream(folder, tiny_idx, beam + greedy)
    results = [(npz[f"codes_{i}"], npz[f"audio_{i}"]) for i in range(len(beam) + len(greedy))]
    return {"beam": results[:len(beam)], "greedy": results[len(beam):]}


@pytest.mark.slow
def test_default_settings_equal_the_packages_own_infer_with_its_beam_sampling(adapter, upstream_voices, upstream):
    """Issue 24: default settings (3 beams sampled, length_penalty 0, temperature/top-p/top-k 0.8/0.8/30, repetition
    penalty 10) == ``IndexTTS2.infer(ref, text)`` with its defaults and the same seed: same codes, same audio; alone
    and as one batch of three requests (each request's beams are rows of the batch)."""
    voice = upstream_voices[1]["voice"]
    rows = [AdapterRow(BEAM_TEXT, voice, None, seed=seed) for seed in BEAM_SEEDS]
    params = SynthesisParams(max_new_tokens=CODES)
    assert adapter.resolve(params).num_beams == 3 and adapter.resolve(params).length_penalty == 0.0
    batch, batch_audio = run(adapter, rows, params)
    for i, row in enumerate(rows):
        outputs, (audio,) = run(adapter, [row], params)
        want_codes, want_audio = upstream["beam"][i][0][0].tolist(), upstream["beam"][i][1]
        n = outputs.code_lengths[0]
        assert n > 0 and want_codes == outputs.codes[0, :n].tolist() + [adapter.model.gpt.stop_mel_token], f"seed {row.seed}"
        assert audio.shape == want_audio.shape and np.allclose(audio, want_audio, atol=1e-5), f"seed {row.seed}"
        assert batch.codes[i, :n].tolist() == outputs.codes[0, :n].tolist() and batch.code_lengths[i] == n
        assert np.allclose(batch_audio[i], want_audio, atol=1e-4), f"batched seed {row.seed}"
    # and through the engine (continuous batching: the step interface, the three requests' beams in one batch)
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import ReferenceAudio, SynthesisRequest

    # one segment (the tiny checkpoint's own segment length is a few characters: its max_new_tokens is 120)
    requests = [SynthesisRequest(text=BEAM_TEXT, reference_audio=ReferenceAudio(voice, 22050),
                                 params=SynthesisParams(seed=seed, max_new_tokens=CODES, max_segment_chars=60))
                for seed in BEAM_SEEDS]
    with Engine(adapter, EngineConfig(max_batch_size=3, wait_window_ms=100)) as engine:
        assert engine.continuous
        results = [h.result(timeout=600) for h in [engine.submit(r) for r in requests]]
    assert max(s.batch_size for r in results for s in r.segments) > 1
    for i, result in enumerate(results):
        assert result.ok and result.effective_params.num_beams == 3 and len(result.segments) == 1, result.error
        want_audio = upstream["beam"][i][1]
        assert result.audio.shape == want_audio.shape and np.allclose(result.audio, want_audio, atol=1e-4), i


@pytest.mark.slow
def test_greedy_output_equals_the_packages_own_infer(adapter, upstream_voices, upstream):
    """adapter batch of 1 == ``IndexTTS2.infer(top_k=1, num_beams=1)`` of indextts2-inference on the same tiny
    checkpoint, its hub cache pointed at the tiny auxiliaries offline (tests/indextts2_upstream.py): same codes,
    same audio; plain, with an emotion vector, with an emotion reference clip, and another voice. Then the four
    cases as one batch (different texts, voices, emotions; left padding, per-row stops) == the package, row by row."""
    folder, clips = upstream_voices
    cases = _greedy_cases(folder, clips)
    voices = [clips["other_voice"] if "reference" in case else clips["voice"] for case, _ in cases]
    rows = [AdapterRow(case["text"], voices[i], None, seed=case["seed"], emotion=emotion)
            for i, (case, emotion) in enumerate(cases)]
    for i, row in enumerate(rows):
        outputs, (audio,) = run(adapter, [row], GREEDY)
        want_codes, want_audio = upstream["greedy"][i]
        assert outputs.codes.numpy().tolist() == want_codes.tolist(), f"case {i}"
        assert audio.shape == want_audio.shape and np.allclose(audio, want_audio, atol=1e-5), f"case {i}"
    batch, batch_audio = run(adapter, rows, GREEDY)
    lengths = [codes.shape[1] for codes, _ in upstream["greedy"]]
    assert len(set(lengths)) > 1  # rows of different lengths: padding and per-row stops are exercised
    for i, n in enumerate(lengths):
        want_codes, want_audio = upstream["greedy"][i]
        assert batch.codes[i, :n].numpy().tolist() == want_codes[0].tolist(), f"batched case {i}"
        assert bool((batch.codes[i, n:] == adapter.model.gpt.stop_mel_token).all()), f"batched case {i}"
        assert batch_audio[i].shape == want_audio.shape, f"batched case {i}"
        assert np.allclose(batch_audio[i], want_audio, atol=1e-4), f"batched case {i}"


def test_english_contractions_are_expanded_as_the_package_does(adapter):
    """The package's normaliser rewrites "it's", "that's", "there's", "he's", ... to "... is" before NeMo (both
    languages); other apostrophes stay."""
    assert adapter.model_text("It's here, and that's where she's going.") == \
        adapter.model_text("It is here, and that is where she is going.")
    assert adapter._text_ids("There's time.") == adapter._text_ids("There is time.")
    assert adapter.model_text("I don't know what's in Tom's bag.") == "I don't know what is in Tom's bag."


def test_characters_outside_the_bpe_vocabulary_are_reported_to_the_front_end(adapter):
    # 囧 is not among the tiny vocabulary's GB2312 level-1 characters; 你, A and Chinese punctuation are
    assert adapter.unencodable_characters("你A，囧 ") == {"囧"}


def test_a_plain_hf_download_folder_loads_and_a_missing_file_is_named(tmp_path, tiny_idx, adapter, three_rows,
                                                                      monkeypatch):
    """Issue 24: the folder ``hf download IndexTeam/IndexTTS-2 --local-dir DIR`` writes (config.yaml, gpt.pth,
    s2mel.pth, bpe.model, wav2vec2bert_stats.pt, feat1.pt, feat2.pt, qwen0.6bemo4-merge/, README.md, .gitattributes
    and the download tool's own .cache/huggingface/) loads; the auxiliary models the package fetches at load
    (facebook/w2v-bert-2.0, amphion/MaskGCT, funasr/campplus, nvidia/bigvgan_v2_22khz_80band_256x) come from the
    user's hub cache. Without one of the repository's own files, the error names it and the download command."""
    import huggingface_hub

    from tts_app.adapters.indextts2 import IndexTTS2Adapter

    folder = tmp_path / "IndexTTS-2"
    folder.mkdir()
    for item in tiny_idx.iterdir():
        if item.name != "hf_cache":
            (folder / item.name).symlink_to(item)
    assert sorted(p.name for p in folder.iterdir()) == [
        "bpe.model", "config.yaml", "feat1.pt", "feat2.pt", "gpt.pth", "qwen0.6bemo4-merge", "s2mel.pth",
        "wav2vec2bert_stats.pt"]
    (folder / "README.md").write_text("---\nlicense: other\n---\n# IndexTTS-2\n")
    (folder / ".gitattributes").write_text("*.pth filter=lfs diff=lfs merge=lfs -text\n")
    (folder / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / ".gitignore").write_text("*\n")
    (folder / ".cache" / "huggingface" / "download" / "gpt.pth.metadata").write_text("0\nsha\n0\n")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tiny_idx / "hf_cache"))  # the user's cache
    loaded = IndexTTS2Adapter.from_pretrained(folder)
    row = three_rows[2]
    (mine,), (theirs,) = loaded.synthesize([row], GREEDY), adapter.synthesize([row], GREEDY)
    assert mine.size > 0 and np.array_equal(mine, theirs)
    (folder / "feat1.pt").unlink()
    (folder / "s2mel.pth").unlink()
    with pytest.raises(ModelLoadError, match=r"lacks s2mel\.pth, feat1\.pt .*hf download IndexTeam/IndexTTS-2"):
        IndexTTS2Adapter.from_pretrained(folder)
