"""Same speech as upstream, end to end (issue 24): for each transformers family, with default settings, a
two-sentence text and a reference clip of tests/data, the engine's in-process synthesis (the reference prepared by
the runtime's preparer with its default cleanup, the request segmented by the front end, batched and decoded by the
engine) gives the audio of the upstream tool's own call: transformers' processor + ``generate`` on the whole text, as
the model docs show, on the same tiny checkpoint. Tokens equal, audio within float tolerance.

"Default settings" are the checkpoint's own generation config on both sides. Each test copies the tiny checkpoint and
writes into its ``generation_config.json`` what a converted checkpoint has (cited per family), with a short
``max_new_tokens`` for CPU time (still long enough that the segment limit derived from it holds the whole text), so
both sides read the same defaults from the same file. Our random draws come from a generator per row seeded with
the request's seed (so a row never depends on its batch-mates); upstream draws from the global RNG, seeded with
``torch.manual_seed`` and the same seed. Dia and CSM draw what upstream draws, in its order and shapes, on the
product's own path; where a family's draws do not have upstream's shapes yet (Higgs, VibeVoice), they are routed to
the global RNG for the comparison. Documented departures (VibeVoice's CFG on the diffusion head only, CSM's
suppressed non-codec ids) are applied to the upstream call and named there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.adapter_helpers import load_reference  # noqa: E402

TEXT = "Hello there. This is a short test."
AUDIO_ATOL = 1e-5


def _checkpoint(tiny_checkpoint, tmp_path, family: str, **generation_config) -> Path:
    """A copy of the tiny checkpoint with ``generation_config`` written into its generation_config.json."""
    out = tmp_path / family
    shutil.copytree(tiny_checkpoint(family), out)
    path = out / "generation_config.json"
    config = json.loads(path.read_text())
    config.update(generation_config)
    path.write_text(json.dumps(config))
    return out


def _synthesize(adapter, clip: str, text: str = TEXT, *, before=None, seed: int | None = None):
    """Our synthesis of ``text`` in the voice of ``clip``, in-process, every setting at its default (but ``seed``,
    when given): the runtime's reference preparer (default cleanup), a request with default ``SynthesisParams``, the
    engine. ``before()`` runs just before the request is submitted (seeding the global RNG for routed draws).
    Returns (result, prepared clip)."""
    from tts_app.config import EngineConfig
    from tts_app.request import SynthesisParams, SynthesisRequest
    from tts_app.runtime import Runtime

    transcript = load_reference(clip, adapter.facts.sampling_rate)[1]
    runtime = Runtime.from_adapter(adapter, "tiny", EngineConfig(wait_window_ms=0))
    try:
        prepared = runtime.references.prepare(Path(__file__).parents[1] / "data" / clip, reference_text=transcript)
        if before is not None:
            before()
        params = SynthesisParams() if seed is None else SynthesisParams(seed=seed)
        result = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=prepared.audio,
                                                        reference_text=prepared.text, params=params)
                                       ).result(timeout=900)
    finally:
        runtime.close()
    assert result.ok, result.error
    assert [s.text for s in result.segments] == [text]  # one generation for the whole text, as upstream
    # Drawn with the request's seed (not a later take's: that would be another seed upstream too).
    assert [(s.seed, s.retaken_seeds) for s in result.segments] == [(params.seed, ())]
    return result, prepared


def _record_generate(adapter, monkeypatch) -> list:
    """Spy on ``adapter.generate``: the returned list collects its outputs (the tokens of each batch), unchanged."""
    outputs = []
    generate = adapter.generate

    def recorded(inputs, params):
        outputs.append(generate(inputs, params))
        return outputs[-1]

    monkeypatch.setattr(adapter, "generate", recorded)
    return outputs


def _upstream_reference(adapter, clip: str) -> tuple[np.ndarray, str]:
    """The clip as the upstream examples hand it to the processor (read, mono, resampled to the model's rate), and
    its transcript; our default cleanup ("auto") gives the model exactly this."""
    return load_reference(clip, adapter.facts.sampling_rate)


# ---------------------------------------------------------------------------------------------------------- Dia


def test_dia_synthesis_equals_dia_processor_and_generate(tiny_checkpoint, tmp_path, monkeypatch):
    """Dia at its checkpoint's defaults, which sample: transformers' Dia conversion's generation config
    (dia/convert_dia_to_hf.py ``get_generation_config``: ``_from_model_config`` False, do_sample True, top_k 45,
    top_p 0.95, temperature 1.2, guidance_scale 3.0; its ``max_length`` 3072 is replaced by 300 new steps for CPU
    time). Upstream: ``torch.manual_seed(seed)``, DiaProcessor on "[S1] <reference transcript> <text>" with the clip
    as audio prompt, generate, batch_decode (the model doc's voice cloning). Our row draws from its own generator
    seeded with the request's seed, the same multinomial calls as upstream's on the global RNG."""
    from tts_app.adapters.dia import DiaAdapter, dialogue

    seed = 5
    model = _checkpoint(tiny_checkpoint, tmp_path, "dia", _from_model_config=False, do_sample=True,
                        guidance_scale=3.0, top_k=45, top_p=0.95, temperature=1.2, max_new_tokens=300)
    adapter = DiaAdapter.from_pretrained(model)
    ours = _record_generate(adapter, monkeypatch)
    result, prepared = _synthesize(adapter, "en_female_2.wav", seed=seed)

    wave, transcript = _upstream_reference(adapter, "en_female_2.wav")
    np.testing.assert_allclose(prepared.audio.samples, wave, atol=1e-6)
    processor = adapter.processor
    inputs = processor(text=[dialogue(transcript, TEXT)], audio=[wave], sampling_rate=adapter.facts.sampling_rate,
                       padding=True, return_tensors="pt")
    torch.manual_seed(seed)
    with torch.inference_mode():
        codes = adapter.model.generate(**inputs)
    # Tokens equal (the tiny codec's audio hardly depends on them: another seed moves <1% of the samples).
    assert len(ours) == 1 and torch.equal(ours[0], codes)
    prompt_len = inputs["decoder_attention_mask"].shape[1] - adapter.max_delay
    upstream = processor.batch_decode(codes, audio_prompt_len=prompt_len)[0].float().numpy().reshape(-1)
    assert result.audio.shape == upstream.shape and upstream.size > 0
    np.testing.assert_allclose(result.audio, upstream, rtol=0, atol=AUDIO_ATOL)


# ---------------------------------------------------------------------------------------------------------- CSM


def test_csm_synthesis_equals_csm_chat_template_and_generate(tiny_checkpoint, tmp_path, monkeypatch):
    """CSM at its checkpoint's defaults, which sample at both levels: the conversion's generation config
    (csm/convert_csm.py ``write_model``: ``_from_model_config`` False, do_sample True, top_k 50, temperature 0.9,
    depth_decoder_do_sample True, depth_decoder_top_k 50, depth_decoder_temperature 0.9; its max_new_tokens 125 is 45
    frames here for CPU time). Upstream: ``torch.manual_seed(seed)``, the model doc's voice cloning chat (the
    reference turn with its transcript and clip, then the text, speaker 0), ``apply_chat_template``,
    ``generate(output_audio=True)``: per frame one backbone draw, then the depth decoder's draws. Our row draws the
    same from its own generator seeded with the request's seed. Our decode loop suppresses the codec's non-audio ids
    a random model picks (module docstring of adapters/csm.py): the same suppression is passed upstream."""
    from tts_app.adapters.csm import CsmAdapter

    seed = 3
    model = _checkpoint(tiny_checkpoint, tmp_path, "csm", _from_model_config=False, do_sample=True, top_k=50,
                        temperature=0.9, depth_decoder_do_sample=True, depth_decoder_top_k=50,
                        depth_decoder_temperature=0.9, max_new_tokens=45)
    adapter = CsmAdapter.from_pretrained(model)
    ours = _record_generate(adapter, monkeypatch)
    result, prepared = _synthesize(adapter, "en_male_1.wav", seed=seed)
    # The depth decoder's knobs reach upstream's depth decoder (transformers reads the depth_decoder_* keys only
    # from a generation config not derived from the model config, as the conversion writes it).
    assert adapter.model.depth_decoder.generation_config.do_sample is True

    wave, transcript = _upstream_reference(adapter, "en_male_1.wav")
    np.testing.assert_allclose(prepared.audio.samples, wave, atol=1e-6)
    # The doc's chat [{"role": "0", content: [reference transcript, clip]}, {"role": "0", content: [text]}] as
    # sesame/csm-1b's chat template renders it (the tiny processor ships no template): each turn
    # "<bos>[0]<text><eos>", the clip's turn followed by "<|AUDIO|><|audio_eos|>".
    processor = adapter.processor
    bos, eos = processor.tokenizer.bos_token, processor.tokenizer.eos_token
    prompt = (f"{bos}[0]{transcript}{eos}{processor.audio_token}{processor.audio_eos_token}"
              f"{bos}[0]{TEXT}{eos}")
    inputs = processor(text=[prompt], audio=[wave], sampling_rate=adapter.facts.sampling_rate, return_tensors="pt")
    config = adapter.model.config
    non_codec = list(range(config.codec_config.codebook_size, config.vocab_size))
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = adapter.model.generate(**inputs, output_audio=True, suppress_tokens=non_codec,
                                     depth_decoder_suppress_tokens=non_codec, return_dict_in_generate=True)
    assert len(ours) == 1 and torch.equal(ours[0].codes, out.sequences)  # tokens equal
    upstream = out.audio[0].float().numpy().reshape(-1)
    assert result.audio.shape == upstream.shape and upstream.size > 0
    np.testing.assert_allclose(result.audio, upstream, rtol=0, atol=AUDIO_ATOL)


# ---------------------------------------------------------------------------------------------------------- Higgs


def test_higgs_synthesis_equals_higgs_chat_template_and_generate(tiny_checkpoint, tmp_path, monkeypatch):
    """Higgs Audio v2: the conversion's generation config (higgs_audio_v2/convert_higgs_audio_v2_to_hf.py:
    ras_win_len 7, ras_win_max_num_repeat 2, no sampling knobs: transformers' greedy default), 270 frames. Upstream:
    the model doc's voice cloning chat (system, scene, the reference transcript, the clip as the assistant's turn,
    the text), ``apply_chat_template``, ``generate``. Repetition-aware sampling redraws even when greedy: our
    per-row draws go to the global RNG, seeded alike on both sides."""
    from tts_app.adapters.higgs import SCENE_PROMPT, SYSTEM_PROMPT, HiggsAudioAdapter

    model = _checkpoint(tiny_checkpoint, tmp_path, "higgs", ras_win_len=7, ras_win_max_num_repeat=2,
                        max_new_tokens=270)
    adapter = HiggsAudioAdapter.from_pretrained(model)
    multinomial = torch.multinomial

    def global_multinomial(probs, num_samples, replacement=False, *, generator=None, **kwargs):
        return multinomial(probs, num_samples, replacement=replacement, **kwargs)

    monkeypatch.setattr(torch, "multinomial", global_multinomial)
    result, prepared = _synthesize(adapter, "en_female_1.wav", before=lambda: torch.manual_seed(0))

    wave, transcript = _upstream_reference(adapter, "en_female_1.wav")
    np.testing.assert_allclose(prepared.audio.samples, wave, atol=1e-6)

    def text(value: str) -> dict:
        return {"type": "text", "text": value}

    conversation = [{"role": "system", "content": [text(SYSTEM_PROMPT)]},
                    {"role": "scene", "content": [text(SCENE_PROMPT)]},
                    {"role": "user", "content": [text(transcript)]},
                    {"role": "assistant", "content": [{"type": "audio", "audio": wave}]},
                    {"role": "user", "content": [text(TEXT)]}]
    processor = adapter.processor
    inputs = processor.apply_chat_template([conversation], add_generation_prompt=True, tokenize=True,
                                           return_dict=True, sampling_rate=adapter.facts.sampling_rate,
                                           return_tensors="pt")
    torch.manual_seed(0)
    with torch.inference_mode():
        frames = adapter.model.generate(**inputs)
    upstream = processor.batch_decode(frames)[0]
    upstream = np.asarray(upstream.float() if hasattr(upstream, "float") else upstream).reshape(-1)
    assert result.audio.shape == upstream.shape and upstream.size > 0
    np.testing.assert_allclose(result.audio, upstream, rtol=0, atol=AUDIO_ATOL)


# ---------------------------------------------------------------------------------------------------------- VibeVoice


def test_vibevoice_synthesis_equals_vibevoice_processor_and_generate(tiny_checkpoint, tmp_path, monkeypatch):
    """VibeVoice: the conversion's generation config (vibevoice/convert_vibevoice_to_hf.py: do_sample False,
    guidance_scale 1.3, DPM-Solver noise scheduler), 85 frames. Upstream: VibeVoiceProcessor on the script
    "Speaker 0: <text>" with the clip as speaker 0's voice, ``generate``. Departure, documented in the README: we
    follow Microsoft's original code, CFG on the diffusion head only, so transformers' extra LM-logit CFG processor
    is left out of the upstream call. The reference is encoded without its sigma-VAE noise on both sides, and our
    per-row diffusion noise is drawn from the global RNG in upstream's shapes (exact at batch 1)."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    model = _checkpoint(tiny_checkpoint, tmp_path, "vibevoice", do_sample=False, guidance_scale=1.3,
                        max_new_tokens=85)
    adapter = VibeVoiceAdapter.from_pretrained(model)
    lm = adapter.model.model
    original_features = lm.get_audio_features
    monkeypatch.setattr(lm, "get_audio_features",
                        lambda values, mask, sample=True: original_features(values, mask, sample=False))
    encode = adapter._encode_reference
    monkeypatch.setattr(adapter, "_encode_reference", lambda values, num_samples, generator: encode(values,
                                                                                                   num_samples, None))
    randn = torch.randn

    def upstream_shaped_randn(*size, generator=None, **kwargs):
        return randn(2, *size, **kwargs)[0] if generator is not None else randn(*size, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "randn", upstream_shaped_randn)
        result, prepared = _synthesize(adapter, "en_female_1.wav", before=lambda: torch.manual_seed(0))

    wave, _ = _upstream_reference(adapter, "en_female_1.wav")
    np.testing.assert_allclose(prepared.audio.samples, wave, atol=1e-6)
    inputs = adapter.processor(text=[adapter._prompt(TEXT, 1)], audio=[wave], sampling_rate=24000, padding=True,
                               return_tensors="pt")
    original = adapter.model._get_logits_processor
    monkeypatch.setattr(adapter.model, "_get_logits_processor", lambda *a, **k: LogitsProcessorList(
        [p for p in original(*a, **k) if not isinstance(p, UnbatchedClassifierFreeGuidanceLogitsProcessor)]))
    torch.manual_seed(0)
    out = adapter.model.generate(**inputs, num_diffusion_steps=adapter._num_diffusion_steps,
                                 return_dict_in_generate=True)
    upstream = out.audio[0].squeeze().numpy()
    assert result.audio.shape == upstream.shape and upstream.size > 0
    np.testing.assert_allclose(result.audio, upstream, rtol=0, atol=AUDIO_ATOL)


# ---------------------------------------------------------------------------------------------------------- IndexTTS 2

# Two sentences within infer()'s 120 text tokens: one segment on both sides. Two sentences over it (the tiny
# tokenizer reads English letter by letter: 54 + 84 tokens): two segments, joined with 200 ms of silence on both sides;
# with commas, infer() cuts the second segment's start at a comma inside the second sentence, and so do we.
INDEXTTS2_TEXTS = {
    "one segment": ("Hello there. How are you today?", 1, (1, 2)),
    "two segments": ("The weather is lovely today so let us walk in the park. We can sit by the lake and watch the "
                     "ducks swim around and then go home for dinner.", 2, (0, 1)),
    "two segments, cut at a comma": ("The weather is lovely today, so let us walk in the park. We can sit by the "
                                     "lake, watch the ducks swim around and then go home for dinner.", 2, (2,)),
}


@pytest.mark.slow
def test_indextts2_synthesis_equals_the_packages_own_infer(tiny_checkpoint, tiny_adapter, tmp_path):
    """IndexTTS 2: the package's ``IndexTTS2.infer(ref, text)`` with its defaults (beam sampling, 3 beams, length
    penalty 0, temperature / top-p / top-k 0.8 / 0.8 / 30, repetition penalty 10, 120 text tokens per segment, 200 ms
    between segments, max_mel_tokens 1500) vs our default synthesis of the same text and clip: the same number of
    segments and the same audio, silences included, for a one-segment and a two-segment text (two seeds each) and a
    two-segment text whose cut falls at a comma.
    ``infer`` takes no seed: its draws are pinned per segment the way ours are seeded, segment ``k`` with
    ``seed + k`` (tests/indextts2_upstream.py; the departure is named in the README). The tiny rows end by themselves
    (stop-code bias) well before either side's cap (our 120 = the tiny config.yaml's gpt.max_mel_tokens)."""
    import soundfile as sf

    from tests.adapter_helpers import skip_without
    from tests.indextts2_upstream import run_infer
    from tts_app.config import EngineConfig
    from tts_app.request import SynthesisParams, SynthesisRequest
    from tts_app.runtime import Runtime

    skip_without("indextts")
    adapter = tiny_adapter("indextts2")
    voice = load_reference("zh_female_1.wav", adapter.facts.sampling_rate, 1.6)[0]
    sf.write(tmp_path / "voice.wav", voice, adapter.facts.sampling_rate, subtype="FLOAT")
    cases = [(text, segments, seed) for text, segments, seeds in INDEXTTS2_TEXTS.values() for seed in seeds]
    upstream = run_infer(tmp_path, tiny_checkpoint("indextts2"),
                         [{"reference": str(tmp_path / "voice.wav"), "text": text, "seed": seed, "generation": {}}
                          for text, _, seed in cases])
    runtime = Runtime.from_adapter(adapter, "tiny", EngineConfig(wait_window_ms=0))
    try:
        prepared = runtime.references.prepare(tmp_path / "voice.wav")
        assert np.array_equal(prepared.audio.samples, voice)  # the default cleanup gives the model the clip as is
        results = [runtime.engine.submit(SynthesisRequest(text=text, reference_audio=prepared.audio,
                                                          params=SynthesisParams(seed=seed))).result(timeout=900)
                   for text, _, seed in cases]
    finally:
        runtime.close()
    for i, (result, (text, segments, seed)) in enumerate(zip(results, cases)):
        assert result.ok, result.error
        assert int(upstream[f"segments_{i}"]) == len(result.segments) == segments, (text, seed)
        assert [s.seed for s in result.segments] == [seed + k for k in range(segments)]
        want = upstream[f"audio_{i}"]
        assert result.audio.shape == want.shape and want.size > 0, (text, seed)
        np.testing.assert_allclose(result.audio, want, rtol=0, atol=1e-4, err_msg=f"{text!r} seed {seed}")
