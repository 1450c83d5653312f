"""IndexTTS 2 through the engine and ``python -m tts_app synth`` on the tiny checkpoint: batching, KV cache and
out-of-memory retries never change the audio; emotion settings reach the model."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tests.adapter_helpers import skip_without  # noqa: E402

skip_without("indextts")

from tts_app.cli.synth import main  # noqa: E402

TEXT = "今天天气很好，我们一起去公园散步。然后在湖边喝茶，看看风景。晚上回家做饭。明天还要上班呢。"


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("indextts2")


@pytest.fixture()
def one_load(monkeypatch, model, tiny_adapter):
    """The CLI's own ``load_adapter(model, device="cpu", dtype="float32")`` call answered with the session's loaded
    tiny adapter, so the comparison runs cost no model load. Returns the list of the calls' arguments."""
    import tts_app.adapters as adapters

    calls = []

    def load_once(id_or_path, **kwargs):
        calls.append((str(id_or_path), kwargs))
        assert str(id_or_path) == str(model) and kwargs["device"] == "cpu" and kwargs["dtype"] in ("auto", "float32")
        return tiny_adapter("indextts2")

    monkeypatch.setattr(adapters, "load_adapter", load_once)
    return calls


def _synth(model, ref, out, *extra) -> int:
    return main(["--model", str(model), "--ref", str(ref), "--text", TEXT, "--out", str(out), "--greedy",
                 "--num-beams", "1", "--max-new-tokens", "24", "--max-segment-chars", "20", "--device", "cpu", *extra])


def test_synth_batch_4_equals_batch_1_equals_oom_retries_equals_no_kv_cache(one_load, model, data_dir, tmp_path,
                                                                            capsys):
    ref = data_dir / "zh_female_1.wav"
    assert _synth(model, ref, tmp_path / "b4.wav", "--batch-size", "4") == 0
    summary = capsys.readouterr().out
    # sentences packed up to 20 characters: 3 segments (16 | 12 + 6 | 7 characters), all in one batch
    assert "largest 3" in summary and "at 22050 Hz" in summary
    assert _synth(model, ref, tmp_path / "b1.wav", "--batch-size", "1") == 0
    assert "largest 1" in capsys.readouterr().out
    assert _synth(model, ref, tmp_path / "oom.wav", "--batch-size", "4", "--simulate-oom-above-batch", "2") == 0
    assert "out-of-memory retries" in capsys.readouterr().out
    assert _synth(model, ref, tmp_path / "nocache.wav", "--batch-size", "4", "--no-kv-cache") == 0
    b4, sr = sf.read(tmp_path / "b4.wav", dtype="float32")
    assert sr == 22050 and len(b4) > sr // 2  # three segments of speech-length audio and the pauses between
    for name in ("b1", "oom", "nocache"):
        other, _ = sf.read(tmp_path / f"{name}.wav", dtype="float32")
        assert len(other) == len(b4), name
        np.testing.assert_allclose(other, b4, atol=2 / 32768, err_msg=name)  # 16-bit PCM rounding
    assert len(one_load) == 4  # every run went through the CLI's loading call


def test_emotion_settings_reach_the_model_through_the_engine(tiny_adapter, data_dir):
    from tts_app.audio.reference import prepare_reference
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import EmotionControl, SynthesisParams, SynthesisRequest

    adapter = tiny_adapter("indextts2")
    ref, _ = prepare_reference(data_dir / "zh_female_1.wav", target_sampling_rate=adapter.facts.sampling_rate)
    emo, _ = prepare_reference(data_dir / "en_male_1.wav", target_sampling_rate=adapter.facts.sampling_rate)
    params = SynthesisParams(seed=2, greedy=True, num_beams=1, max_new_tokens=24)
    requests = [SynthesisRequest(text="今天天气很好。", reference_audio=ref, params=params),
                SynthesisRequest(text="今天天气很好。", reference_audio=ref, params=params,
                                 emotion=EmotionControl(vector=(0, 0, 0.9, 0, 0, 0, 0, 0))),
                SynthesisRequest(text="今天天气很好。", reference_audio=ref, params=params,
                                 emotion=EmotionControl(reference_audio=emo, weight=0.7))]
    with Engine(adapter, EngineConfig(max_batch_size=4, wait_window_ms=50)) as engine:
        handles = [engine.submit(r) for r in requests]
        plain, sad, copied = [h.result(timeout=600) for h in handles]
    assert plain.ok and sad.ok and copied.ok
    assert max(s.batch_size for s in sad.segments) > 1  # rows with different emotions share a batch
    assert not np.array_equal(plain.audio, sad.audio) and not np.array_equal(plain.audio, copied.audio)


def test_synth_emotion_flags_reach_the_model_and_the_sidecar(one_load, model, data_dir, tmp_path):
    import json

    ref = data_dir / "zh_female_1.wav"
    base = ["--model", str(model), "--ref", str(ref), "--text", "今天天气很好。", "--greedy", "--num-beams", "1",
            "--max-new-tokens", "24", "--device", "cpu"]
    assert main([*base, "--out", str(tmp_path / "plain.wav")]) == 0
    assert main([*base, "--out", str(tmp_path / "sad.wav"), "--emo-vector", "0,0,0.9,0,0,0,0,0",
                 "--emo-weight", "0.8"]) == 0
    assert main([*base, "--out", str(tmp_path / "clip.wav"), "--emo-ref", str(data_dir / "en_male_1.wav")]) == 0
    plain, sad, clip = (sf.read(tmp_path / f"{n}.wav", dtype="float32")[0] for n in ("plain", "sad", "clip"))
    assert not np.array_equal(plain, sad) and not np.array_equal(plain, clip)
    sidecar = json.loads((tmp_path / "sad.json").read_text(encoding="utf-8"))
    assert sidecar["emotion"] == {"source": "vector", "weight": 0.8, "vector": [0, 0, 0.9, 0, 0, 0, 0, 0]}
    assert json.loads((tmp_path / "plain.json").read_text(encoding="utf-8"))["emotion"] is None


def test_emotion_flags_on_a_model_without_emotion_exit_2_saying_so(tiny_checkpoint, data_dir, tmp_path, capsys):
    code = main(["--model", str(tiny_checkpoint("csm")), "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hi.",
                 "--out", str(tmp_path / "x.wav"), "--emo-vector", "0.5,0,0,0,0,0,0,0", "--max-new-tokens", "4",
                 "--device", "cpu"])
    err = capsys.readouterr().err
    # a setting the model cannot honour is the user's (REFUSED): exit 2, as the help says
    assert code == 2 and "emotion control" in err and "CSM" in err and not (tmp_path / "x.wav").exists()
    assert main(["--model", str(tiny_checkpoint("csm")), "--text", "Hi.", "--out", str(tmp_path / "x.wav"),
                 "--emo-weight", "0.5"]) == 2  # a weight without a source: usage error before any model load
    assert "needs a source" in capsys.readouterr().err


def test_a_jsonl_job_with_emotion_lines_runs_on_indextts2(tiny_adapter, data_dir, tmp_path):
    import json
    import shutil

    from tts_app.config import EngineConfig
    from tts_app.jobs.runner import RESULTS_NAME, run_job
    from tts_app.request import SynthesisParams
    from tts_app.runtime import Runtime

    shutil.copy(data_dir / "zh_female_1.wav", tmp_path / "voice.wav")
    shutil.copy(data_dir / "en_male_1.wav", tmp_path / "angry.wav")
    lines = [{"input_text": "今天天气很好。", "prompt_audio": "voice.wav", "output_name": "plain"},
             {"input_text": "今天天气很好。", "prompt_audio": "voice.wav", "emo_vector": {"happy": 0.8},
              "output_name": "happy"},
             {"input_text": "今天天气很好。", "prompt_audio": "voice.wav", "emo_audio": "angry.wav", "emo_alpha": 0.6,
              "output_name": "copied"},
             {"input_text": "今天天气很好。", "prompt_audio": "voice.wav", "use_emo_text": True,
              "output_name": "read"}]
    (tmp_path / "job.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                                        encoding="utf-8")
    runtime = Runtime.from_adapter(tiny_adapter("indextts2"), "tiny-indextts2",
                                   EngineConfig(max_batch_size=4, wait_window_ms=20.0))
    try:
        summary = run_job(tmp_path / "job.jsonl", tmp_path / "out", runtime,
                          params=SynthesisParams(greedy=True, num_beams=1, max_new_tokens=24))
    finally:
        runtime.close()
    records = [json.loads(x) for x in (tmp_path / "out" / RESULTS_NAME).read_text(encoding="utf-8").splitlines()]
    assert summary.num_ok == 4, records
    audio = {n: sf.read(tmp_path / "out" / f"{n}.wav", dtype="float32")[0] for n in ("plain", "happy", "copied")}
    assert not np.array_equal(audio["plain"], audio["happy"]) and not np.array_equal(audio["plain"], audio["copied"])
    sidecar = json.loads((tmp_path / "out" / "read.json").read_text(encoding="utf-8"))
    assert sidecar["emotion"] == {"source": "text", "weight": 1.0, "text": None}


def test_segments_are_sentences_packed_up_to_120_text_tokens_of_its_own_tokenizer(tiny_adapter):
    """IndexTTS 2's segment unit as upstream's infer(): sentences packed while their text tokens (counted by the
    checkpoint's own tokenizer) stay within max_text_tokens_per_segment=120."""
    from tts_app.engine import Engine
    from tts_app.request import SynthesisRequest

    adapter = tiny_adapter("indextts2")
    assert adapter.facts.max_segment_tokens == 120
    sentences = ["今天天气很好，我们一起去公园散步吧。", "The weather is lovely today, so let us walk in the park.",
                 "银行门口排起了长队，行长说还得再等十分钟才能办理业务。"] * 6
    engine = Engine(adapter)
    try:
        two = engine._segments_of(SynthesisRequest(text=" ".join(sentences[:2]))).texts
        many = engine._segments_of(SynthesisRequest(text=" ".join(sentences))).texts
    finally:
        engine.shutdown()
    assert len(two) == 1  # two sentences well within 120 tokens: one GPT call, as upstream
    counts = [adapter.count_text_tokens(t) for t in many]
    assert len(many) > 1 and all(n <= 120 for n in counts)
    assert all(a + b > 120 for a, b in zip(counts, counts[1:]))  # as few as fit: no two neighbours would


def test_segments_are_cut_where_infer_cuts_them(tiny_adapter):
    """Issue 24: the segments of a text over 120 text tokens are those of the package's own
    ``TextTokenizer.split_segments`` (what ``infer()`` does): pieces end at sentence ends and at the punctuation its
    normaliser maps to "," or "-" (Chinese and English commas, 、, ；, ：, —), then are packed while within 120 tokens,
    so a boundary can fall at a comma inside a sentence."""
    from tts_app.engine import Engine
    from tts_app.request import SynthesisRequest

    adapter = tiny_adapter("indextts2")
    tokenizer = adapter.processor.tokenizer
    texts = ["The weather is lovely today, so let us walk in the park. We can sit by the lake, watch the ducks swim "
             "around and then go home for dinner.",
             "今天天气很好，我们一起去公园散步吧。银行门口排起了长队；行长说：还得再等十分钟——才能办理业务，"
             "大家只好在门外站着、聊天、看手机，一直等到中午。" * 2,
             "First we walk; then we talk: about the river, the hills and the town. " * 3]
    engine = Engine(adapter)
    try:
        for text in texts:
            ours = engine._segments_of(SynthesisRequest(text=text)).texts
            theirs = tokenizer.split_segments(tokenizer.tokenize(adapter.model_text(text)), 120)
            assert len(theirs) > 1, text  # over 120 tokens
            assert [tokenizer.tokenize(adapter.model_text(t)) for t in ours] == theirs, text
    finally:
        engine.shutdown()
