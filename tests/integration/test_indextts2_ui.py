"""The web app on the tiny IndexTTS 2 checkpoint through gradio_client: single synthesis with emotion controls and a
JSONL job with emotion lines; other families refuse emotion settings (tests/integration/test_ui_api.py)."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from tests.adapter_helpers import skip_without  # noqa: E402

skip_without("indextts")
gradio_client = pytest.importorskip("gradio_client")

from tests.ui_app import start_app, stop_app  # noqa: E402


@pytest.fixture(scope="module")
def app_url(tiny_checkpoint, tmp_path_factory):
    proc, url = start_app(tiny_checkpoint("indextts2"), "--max-batch-size", "4", "--output-dir",
                          str(tmp_path_factory.mktemp("ui-out-indextts2")), timeout_s=600)
    yield url
    stop_app(proc)


def test_single_synthesis_with_emotion_sliders_and_an_emotion_clip(app_url, data_dir):
    client = gradio_client.Client(app_url, verbose=False)
    assert "emotion_mode" in client.view_api(print_info=False, return_format="str")
    voice = gradio_client.handle_file(str(data_dir / "zh_female_1.wav"))
    common = dict(reference_audio=voice, text="今天天气很好。", seed=3, greedy=True, max_new_tokens=24,
                  api_name="/synthesize")
    plain_audio, _, plain_meta, _, _ = client.predict(**common)
    sad_audio, _, sad_meta, _, _ = client.predict(**common, emotion_mode="vector", sad=0.9, emotion_weight=0.8)
    clip_audio, _, clip_meta, _, _ = client.predict(
        **common, emotion_mode="clip", emotion_audio=gradio_client.handle_file(str(data_dir / "en_male_1.wav")))
    plain, sad, clip = (sf.read(a, dtype="int16")[0] for a in (plain_audio, sad_audio, clip_audio))
    assert len(plain) > 0 and (len(sad) != len(plain) or (sad != plain).any())
    assert len(clip) != len(plain) or (clip != plain).any()
    emotion = json.loads(open(sad_meta, encoding="utf-8").read())["emotion"]
    assert emotion["source"] == "vector" and emotion["weight"] == 0.8 and emotion["vector"][2] == 0.9
    assert json.loads(open(clip_meta, encoding="utf-8").read())["emotion"]["source"] == "clip"
    assert json.loads(open(plain_meta, encoding="utf-8").read())["emotion"] is None
    with pytest.raises(Exception, match="needs an emotion clip"):
        client.predict(**common, emotion_mode="clip")


def test_batch_job_with_emotion_lines(app_url, data_dir, tmp_path):
    import shutil
    import zipfile

    shutil.copy(data_dir / "zh_female_1.wav", tmp_path / "voice.wav")
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as archive:
        archive.write(tmp_path / "voice.wav", "voice.wav")
    lines = [{"input_text": "今天天气很好。", "prompt_audio": "voice.wav", "output_name": "plain", "max_new_tokens": 16},
             {"input_text": "太好了！", "prompt_audio": "voice.wav", "emo_vector": {"happy": 0.8},
              "output_name": "happy", "max_new_tokens": 16}]
    (tmp_path / "job.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                                        encoding="utf-8")
    client = gradio_client.Client(app_url, verbose=False)
    _, results, zip_path = client.predict(gradio_client.handle_file(str(tmp_path / "job.jsonl")),
                                          gradio_client.handle_file(str(tmp_path / "voices.zip")), None, 4, True,
                                          True, 0, api_name="/run_job")
    assert [row[2] for row in results["data"]] == ["ok", "ok"], results
    with zipfile.ZipFile(zip_path) as archive:
        assert json.loads(archive.read("happy.json"))["emotion"]["vector"][0] == 0.8


def test_beam_settings_reach_the_model_through_the_page_api(app_url, data_dir):
    """Issue 24: IndexTTS 2's num_beams / length_penalty are page settings (named API inputs of /synthesize): a
    changed value runs and the sidecar says it came from the request; a bad one is refused naming the setting."""
    client = gradio_client.Client(app_url, verbose=False)
    api = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/synthesize"]
    assert {"num_beams", "length_penalty"} <= {p["parameter_name"] for p in api["parameters"]}
    common = dict(reference_audio=gradio_client.handle_file(str(data_dir / "zh_female_1.wav")), text="今天天气很好。",
                  seed=3, max_new_tokens=24, api_name="/synthesize")
    _, _, meta, _, _ = client.predict(**common, num_beams=2, length_penalty=1.0)
    sidecar = json.loads(open(meta, encoding="utf-8").read())
    assert (sidecar["generation"]["num_beams"], sidecar["generation"]["length_penalty"]) == (2, 1.0)
    assert sidecar["generation_sources"]["num_beams"] == "request"
    _, _, meta, _, _ = client.predict(**common)
    assert json.loads(open(meta, encoding="utf-8").read())["generation"]["num_beams"] == 3  # infer()'s default
    with pytest.raises(Exception, match="maximum value 8"):  # the slider's own range (MAX_NUM_BEAMS)
        client.predict(**common, num_beams=12)
