"""GLM-TTS on the tiny checkpoint (``make-tiny-model --family glmtts``): upstream's folder layout loads, the speech
tokenizer and the language model give exactly upstream's tokens, and batching, the KV cache, joining / leaving a
running batch and out-of-memory steps never change a row's tokens.

Goldens (tests/data/glmtts/) come from zai-org/GLM-TTS's own code (commit c5dc7ae) run on the tiny checkpoint of seed
0, in a scratch virtual environment outside this repository (system torch 2.14.1 + transformers 4.57.3 as upstream
pins), with a harness that:

* imports upstream's modules from a checkout (``utils/yaml_util.load_speech_tokenizer``,
  ``cosyvoice/cli/frontend.SpeechTokenizer``, ``llm/glmtts.GLMTTS``, ``glmtts_inference.get_special_token_ids`` and
  ``local_llm_forward``), with the modules those stages never call (peft, hyperpyyaml, WeTextProcessing, emoji,
  pronouncing, inflect) stubbed and ``.cuda()`` / ``device="cuda"`` mapped to the CPU (upstream hard-codes CUDA);
* ``upstream_speech_tokens.json``: ``SpeechTokenizer.extract_speech_token([(clip, 16000)])`` for the first 2.0 s of
  ``zh_female_1.wav`` and 3.0 s of ``en_male_1.wav`` (mono, resampled to 16 kHz with torchaudio, as below);
* ``upstream_lm_tokens.json``: ``GLMTTS(mode="PRETRAIN")`` with the tiny ``ckpt/llm`` loaded by
  ``LlamaForCausalLM.from_pretrained(dtype=float32)``, ``set_seed(seed)`` then ``local_llm_forward(...,
  sample_method="ras")`` for two texts x seeds 0 and 7, the prompt speech tokens being the clip's tokens above.
  Text ids come from tts_app's tokenizer (upstream loads its tokenizer with the hub repository's remote code, which
  the code repository does not hold); they are recorded with the goldens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("tiktoken")

from tests.adapter_helpers import load_reference  # noqa: E402
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.errors import InputError, ReferenceAudioError  # noqa: E402
from tts_app.request import StopReason, SynthesisParams  # noqa: E402

GOLDEN = "glmtts"
GREEDY = SynthesisParams(greedy=True, max_new_tokens=40)
SEEDED = SynthesisParams(max_new_tokens=40)  # upstream's defaults (ras sampling, top-p 0.8, top-k 25), capped
UPSTREAM = SynthesisParams()  # upstream's defaults, no cap but its own (20 x the text tokens)


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    return tiny_checkpoint("glmtts")


@pytest.fixture(scope="module")
def adapter(tiny_adapter):
    return tiny_adapter("glmtts")


@pytest.fixture(scope="module")
def rows(adapter):
    sr = adapter.facts.sampling_rate
    zh, _ = load_reference("zh_female_1.wav", sr, 2.0)
    en, _ = load_reference("en_male_1.wav", sr, 1.6)
    return [AdapterRow("你好，世界。今天天气很好。", zh, "参考音频的文字。", seed=1),
            AdapterRow("Hello there, how are you?", en, "This is the reference.", seed=2),
            AdapterRow("短句。", en, "This is the reference.", seed=3),
            AdapterRow("One more line in another voice, a little longer.", zh, "参考音频的文字。", seed=4)]


def _golden(data_dir, name):
    return json.loads((data_dir / GOLDEN / name).read_text(encoding="utf-8"))


def _clip_16k(data_dir, name, seconds):
    import soundfile as sf
    import torchaudio

    samples, rate = sf.read(data_dir / name, dtype="float32", always_2d=True)
    wave = torchaudio.functional.resample(torch.from_numpy(samples.mean(axis=1)), rate, 16000)
    return wave[: int(seconds * 16000)].numpy()


def _prompts(adapter, cases):
    from tts_app.adapters.glmtts.adapter import GLMTTSPrompt

    return [GLMTTSPrompt(c["text_ids"], c["prompt_text_ids"], c["prompt_speech_tokens"], seed=c["seed"])
            for c in cases]


def test_tiny_checkpoint_has_upstreams_layout_and_is_recognised(tiny):
    from tts_app.adapters import family_of

    for part in ("ckpt/llm/config.json", "ckpt/llm/model.safetensors", "ckpt/vq32k-phoneme-tokenizer/tokenizer.model",
                 "ckpt/vq32k-phoneme-tokenizer/tokenizer_config.json", "ckpt/speech_tokenizer/config.json",
                 "ckpt/speech_tokenizer/model.safetensors", "ckpt/speech_tokenizer/preprocessor_config.json",
                 "frontend/campplus.onnx"):
        assert (tiny / part).is_file(), part
    assert family_of(tiny) == "glmtts"
    assert family_of(tiny / "ckpt") == "glmtts"  # the hub snapshot's level


def test_special_tokens_and_speech_tokens_equal_upstream(adapter, data_dir):
    golden = _golden(data_dir, "upstream_speech_tokens.json")
    assert adapter.processor.special == golden["special"]
    for name, clip in golden["clips"].items():
        tokens = adapter.processor.speech_tokenizer.tokens(_clip_16k(data_dir, name, clip["seconds"]))
        assert tokens == clip["tokens"], name


def test_language_model_tokens_equal_upstream_alone_and_batched(adapter, data_dir):
    cases = _golden(data_dir, "upstream_lm_tokens.json")["cases"]
    for case in cases:
        assert adapter.processor.text_tokenizer.encode(case["text"]) == case["text_ids"]
        assert adapter.processor.text_tokenizer.encode(case["prompt_text"] + " ") == case["prompt_text_ids"]
    prompts = _prompts(adapter, cases)
    batched = adapter.speech_tokens(prompts, UPSTREAM).speech_tokens
    assert batched == [c["speech_tokens"] for c in cases]
    alone = adapter.speech_tokens(prompts[:1], UPSTREAM).speech_tokens[0]
    assert alone == cases[0]["speech_tokens"]


@pytest.mark.parametrize("params", [GREEDY, SEEDED, SynthesisParams(max_new_tokens=40, use_cache=False)],
                         ids=["greedy", "seeded", "no-kv-cache"])
def test_batch_of_4_equals_rows_one_by_one(adapter, rows, params):
    inputs = adapter.preprocess(rows, params)
    together = adapter.generate(inputs, params)
    for i, row in enumerate(rows):
        alone = adapter.generate(adapter.preprocess([row], params), params)
        assert alone.speech_tokens[0] == together.speech_tokens[i], i
    if not params.use_cache:
        assert together.speech_tokens == adapter.generate(inputs, SEEDED).speech_tokens


def test_end_token_is_masked_before_twice_the_text_and_rows_stop_at_20_times(adapter, rows):
    inputs = adapter.preprocess(rows, GREEDY)
    out = adapter.generate(inputs, SynthesisParams(greedy=True))
    for prompt, tokens, hit in zip(inputs.prompts, out.speech_tokens, out.hit_max_new_tokens):
        assert 2 * len(prompt.text_ids) <= len(tokens) <= 20 * len(prompt.text_ids)
        assert hit == (len(tokens) == 20 * len(prompt.text_ids))
    capped = adapter.generate(inputs, SynthesisParams(greedy=True, max_new_tokens=5))
    assert [len(t) for t in capped.speech_tokens] == [5] * len(rows)
    assert adapter.stop_reasons(capped, inputs) == [StopReason.MAX_NEW_TOKENS] * len(rows)
    assert [t[:5] for t in out.speech_tokens] == capped.speech_tokens


def _drive(batch, plan, release_at=None, oom_at=(), max_steps=600):
    """Step ``batch``; before step k prefill ``plan[k]`` and release ``release_at[k]``; the decode steps in ``oom_at``
    raise ``torch.OutOfMemoryError`` from inside the LM forward once (then are retried). Returns {key: tokens}."""
    done = {}
    ats = batch.adapter.processor.special["ats"]
    forward = batch.stream.forward
    for step in range(max_steps):
        for key in (release_at or {}).get(step, []):
            batch.release([key])
        if plan.get(step):
            batch.prefill(plan[step])
        if not batch.num_rows and step > max(plan):
            break
        if step in oom_at:
            def fail(*args, **kwargs):
                forward(*args, **kwargs)  # half-way: the cache has grown when the error comes
                raise torch.OutOfMemoryError("simulated")
            batch.stream.forward = fail
            with pytest.raises(torch.OutOfMemoryError):
                batch.decode_step()
            batch.stream.forward = forward
        for out in batch.decode_step():
            if out.stop_reason is not None:
                row = next(r for r in batch.rows if r.key == out.key)
                done[out.key] = row.speech_tokens(ats)
                batch.release([out.key])
    return done


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_continuous_batching_with_oom_steps_equals_one_by_one(adapter, rows, params):
    want = {i: adapter.generate(adapter.preprocess([row], params), params).speech_tokens[0]
            for i, row in enumerate(rows)}
    batch = adapter.start_decode(params)
    batch.make_audio = False
    keys = [("row", i) for i in range(len(rows))]
    got = _drive(batch, {0: [(keys[0], rows[0]), (keys[1], rows[1])], 3: [(keys[2], rows[2])],
                         9: [(keys[3], rows[3])]}, oom_at=(2, 10, 25))
    assert {k[1]: v for k, v in got.items()} == want


def test_ras_redraws_a_token_repeated_in_the_window():
    from tts_app.adapters.glmtts.adapter import RowSelector

    allowed = torch.ones(6, dtype=torch.bool)
    logits = torch.tensor([0.0, 3.0, 0.0, 0.0, 0.0, 0.0])  # token 1 holds 80.1 %: the top-p 0.8 nucleus alone
    fresh = RowSelector(SEEDED, 5, allowed)
    assert fresh.pick(logits.clone(), history=[0, 2, 3], mask_eos=False, eos=5) == 1
    draws = set()
    repeated = RowSelector(SEEDED, 5, allowed)
    for _ in range(200):  # 1 is in the window: every pick of 1 is redrawn from the whole softmax
        draws.add(repeated.pick(logits.clone(), history=[1], mask_eos=False, eos=5))
    assert draws - {1}  # the redraw sometimes lands elsewhere
    eos_first = RowSelector(GREEDY, 0, allowed)
    assert eos_first.pick(torch.tensor([0.0, 0, 0, 0, 0, 9]), [], mask_eos=True, eos=5) != 5


def test_bad_rows_raise_project_errors(adapter, rows):
    row = rows[0]
    with pytest.raises(InputError, match="reference text"):
        adapter.preprocess([AdapterRow(row.text, row.reference_audio, None)], GREEDY)
    with pytest.raises(ReferenceAudioError, match="reference clip"):
        adapter.preprocess([AdapterRow(row.text, None, "x")], GREEDY)
    with pytest.raises(ReferenceAudioError, match="NaN"):
        adapter.preprocess([AdapterRow(row.text, np.full(24000, np.nan, dtype=np.float32), "x")], GREEDY)
    with pytest.raises(InputError, match="readable"):
        adapter.preprocess([AdapterRow("  ", row.reference_audio, "x")], GREEDY)


def test_not_a_checkpoint_is_a_model_load_error(tmp_path):
    from tts_app.adapters.glmtts import GLMTTSAdapter
    from tts_app.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="not a GLM-TTS checkpoint"):
        GLMTTSAdapter.from_pretrained(tmp_path)


def test_a_pinyin_override_changes_exactly_the_phonemes_it_names(adapter, rows):
    tokenizer = adapter.processor.text_tokenizer
    plain, forced = "他很重要。", "他很{zhong4}要。"
    assert adapter.model_text(plain) == plain  # no override: upstream's default (no --use_phoneme) input
    assert adapter.model_text(forced) == "他很<|ZH|><|ONG4|>要。"
    ids_plain, ids_forced = tokenizer.encode(plain), tokenizer.encode(adapter.model_text(forced))
    zhong = tokenizer.encode("重")
    phonemes = [tokenizer.token_id("<|ZH|>"), tokenizer.token_id("<|ONG4|>")]
    at = next(i for i in range(len(ids_plain)) if ids_plain[i:i + len(zhong)] == zhong)
    assert ids_forced == ids_plain[:at] + phonemes + ids_plain[at + len(zhong):]
    prompt = adapter.prompt(0, AdapterRow(forced, rows[0].reference_audio, rows[0].reference_text))
    assert prompt.text_ids == ids_forced
    assert adapter.count_text_tokens(forced) == len(ids_forced)


# ---------------------------------------------------------------------------------------------------- the doors

SYNTH_TEXT = "今天天气很好，我们一起去公园散步。然后在湖边喝茶，看看风景。晚上回家做饭。"


@pytest.fixture()
def one_load(monkeypatch, tiny, tiny_adapter):
    """The CLIs' ``load_adapter`` answered with the session's loaded tiny adapter (no model load per run)."""
    import tts_app.adapters as adapters

    calls = []

    def load_once(id_or_path, **kwargs):
        calls.append(str(id_or_path))
        assert str(id_or_path) == str(tiny)
        return tiny_adapter("glmtts")

    monkeypatch.setattr(adapters, "load_adapter", load_once)
    return calls


def _synth(tiny, data_dir, out, *extra) -> int:
    from tts_app.cli.synth import main

    ref = data_dir / "zh_female_1.wav"
    transcript = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    ref_text = next(f["transcript"] for f in transcript["files"] if f["name"] == ref.name)
    return main(["--model", str(tiny), "--ref", str(ref), "--ref-text", ref_text, "--text", SYNTH_TEXT, "--out",
                 str(out), "--max-new-tokens", "20", "--max-segment-chars", "15", "--device", "cpu", *extra])


@pytest.mark.parametrize("mode", [["--greedy"], ["--seed", "11"]], ids=["greedy", "seeded"])
def test_synth_batch_4_equals_batch_1_equals_oom_retries_equals_no_kv_cache(one_load, tiny, data_dir, tmp_path,
                                                                            capsys, mode):
    import soundfile as sf

    assert _synth(tiny, data_dir, tmp_path / "b4.wav", "--max-batch-size", "4", *mode) == 0
    import re

    summary = capsys.readouterr().out
    num_segments, largest = map(int, re.search(r"at 24000 Hz, (\d+) segments .*largest (\d+)", summary).groups())
    assert num_segments >= 3 and largest >= 3, summary
    assert _synth(tiny, data_dir, tmp_path / "b1.wav", "--max-batch-size", "1", *mode) == 0
    assert "largest 1" in capsys.readouterr().out
    assert _synth(tiny, data_dir, tmp_path / "oom.wav", "--max-batch-size", "4", "--simulate-oom-above-batch", "2",
                  *mode) == 0
    assert "out-of-memory retries" in capsys.readouterr().out
    names = ["b1", "oom"]
    if "--greedy" in mode:  # (seeded rows with the KV cache off: test_batch_of_4_equals_rows_one_by_one)
        assert _synth(tiny, data_dir, tmp_path / "nokv.wav", "--max-batch-size", "4", "--no-kv-cache", *mode) == 0
        names.append("nokv")
    b4, sr = sf.read(tmp_path / "b4.wav", dtype="float32")
    assert sr == 24000 and len(b4) > sr  # three segments of speech-length audio and the pauses between
    for name in names:
        other, _ = sf.read(tmp_path / f"{name}.wav", dtype="float32")
        assert len(other) == len(b4), name
        np.testing.assert_allclose(other, b4, atol=2 / 32768, err_msg=name)  # 16-bit PCM rounding
    sidecar = json.loads((tmp_path / "b4.json").read_text(encoding="utf-8"))
    assert sidecar["model"]["family"] == "glmtts"
    assert sidecar["generation"]["prompt_cache"] is True and "--use_cache" in sidecar["generation_sources"][
        "prompt_cache"]  # upstream's default: on
    if "--greedy" in mode:  # the prompt cache off: the first segment is the same, later ones are not
        assert _synth(tiny, data_dir, tmp_path / "nopc.wav", "--max-batch-size", "4", "--no-prompt-cache",
                      *mode) == 0
        no_cache, _ = sf.read(tmp_path / "nopc.wav", dtype="float32")
        first = json.loads((tmp_path / "nopc.json").read_text(encoding="utf-8"))["generation"]
        assert first["prompt_cache"] is False
        assert not (len(no_cache) == len(b4) and np.allclose(no_cache, b4, atol=2 / 32768))


def test_upstreams_jsonl_runs_on_glmtts_through_the_batch_command(one_load, tiny, data_dir, tmp_path):
    import shutil

    import soundfile as sf

    from tts_app.cli.batch import main

    examples = tmp_path / "examples"
    (examples / "prompt").mkdir(parents=True)
    shutil.copy(data_dir / "zh_female_1.wav", examples / "prompt" / "zh_female_1.wav")
    job = examples / "example_zh.jsonl"
    shutil.copy(data_dir / GOLDEN / "example_zh.jsonl", job)
    out = tmp_path / "outputs"
    assert main([str(job), "--out-dir", str(out), "--model", str(tiny), "--device", "cpu", "--max-new-tokens",
                 "30"]) == 0
    for uttid in ("0", "1", "2"):
        wave, sr = sf.read(out / f"{uttid}.wav", dtype="float32")
        assert sr == 24000 and len(wave) > 0


@pytest.fixture(scope="module")
def served(tiny_adapter, tmp_path_factory):
    """The whole web server in-process (``tests.composed_app.served_app``) on the tiny GLM-TTS adapter."""
    from tests.composed_app import served_app
    from tts_app.config import EngineConfig
    from tts_app.runtime import Runtime

    runtime = Runtime.from_adapter(tiny_adapter("glmtts"), "glmtts-tiny", EngineConfig(wait_window_ms=1))
    with served_app(tmp_path_factory.mktemp("glmtts-served"), runtime=runtime) as app:
        yield app


def test_the_page_api_speaks_through_gradio_client(served, data_dir):
    import soundfile as sf

    gradio_client = pytest.importorskip("gradio_client")
    client = gradio_client.Client(served.url + "/", verbose=False)
    audio, *_ = client.predict(
        reference_audio=gradio_client.handle_file(str(data_dir / "zh_female_1.wav")), text="你好。今天天气很好。",
        reference_text="银行门口排起了长队，行长说还得再等十分钟才能办理业务。", seed=7, max_new_tokens=20,
        api_name="/synthesize")
    wave, sr = sf.read(audio, dtype="float32")
    assert sr == 24000 and len(wave) > 0


def test_openai_speech_endpoint_speaks_with_a_saved_voice(served):
    import io
    import urllib.request

    import soundfile as sf

    body = json.dumps({"model": "tts-1", "voice": "zh-female", "input": "你好。今天天气很好。",
                       "response_format": "wav"}).encode()
    request = urllib.request.Request(f"{served.url}/v1/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        wave, sr = sf.read(io.BytesIO(response.read()), dtype="float32")
    assert sr == 24000 and len(wave) > 0


# ---------------------------------------------------------------------------------------------------- prompt cache

def test_prompt_cache_prunes_the_oldest_segment_and_keeps_the_reference():
    from tts_app.adapters.glmtts.adapter import GLMTTSPrompt, PromptCache

    cache = PromptCache()
    ref_text, ref_speech = [1, 2], [7] * 100

    def segment(index):
        return GLMTTSPrompt([9] * 10, ref_text, ref_speech, request_id="r", segment_index=index, reference_key="v")

    assert cache.ready(segment(0)) and cache.cached_prompt(segment(0)) is None  # the reference alone
    assert not cache.ready(segment(1))
    cache.finish(segment(0), [100] * 300)
    assert cache.cached_prompt(segment(1)) == (ref_text + [9] * 10, ref_speech + [100] * 300)
    cache.finish(segment(1), [101] * 300)
    assert not cache.ready(segment(3))
    # 700 speech tokens + the estimate for 10 text tokens (700 / 22 x 10 = 318) > 750: segment 0 goes (for good);
    # then 400 + 333 <= 750
    assert cache.cached_prompt(segment(2)) == (ref_text + [9] * 10, ref_speech + [101] * 300)


@pytest.mark.parametrize("prompt_cache", [True, False], ids=["prompt-cache-on", "prompt-cache-off"])
def test_prompt_cache_puts_the_earlier_segments_into_the_next_prompt(adapter, rows, prompt_cache):
    """Segments 0-2 of one request in one running batch: with the prompt cache, segment k runs after k-1 and its LM
    prompt is [reference text + earlier texts][its text]<boa>[reference tokens + earlier tokens] (upstream's
    generate_long with use_cache); without it each segment's prompt is the reference alone."""
    from dataclasses import replace

    params = SynthesisParams(seed=5, max_new_tokens=30, prompt_cache=prompt_cache)
    texts = ["今天天气很好。", "我们一起去公园散步。", "晚上回家做饭。"]
    segs = [replace(rows[0], text=t, seed=5 + k, request_id="req-1", segment_index=k) for k, t in enumerate(texts)]
    batch = adapter.start_decode(params)
    batch.make_audio = False
    keys = [("seg", k) for k in range(3)]
    got = _drive(batch, {0: list(zip(keys, segs))}, oom_at=(4,))
    prompts = [adapter.prompt(k, row) for k, row in enumerate(segs)]
    want, history_text, history_speech = [], list(prompts[0].prompt_text_ids), list(prompts[0].prompt_speech_tokens)
    for k, prompt in enumerate(prompts):
        if prompt_cache and k:
            prompt = replace(prompt, cached_prompt=(list(history_text), list(history_speech)))
        tokens = adapter.speech_tokens([prompt], params).speech_tokens[0]
        want.append(tokens)
        history_text += prompt.text_ids
        history_speech += tokens
    assert [got[k] for k in keys] == want
    alone = [adapter.speech_tokens([p], params).speech_tokens[0] for p in prompts]
    assert (want[1:] != alone[1:]) == prompt_cache and want[0] == alone[0]
