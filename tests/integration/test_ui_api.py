"""The web app's API through gradio_client, against a launched app with a tiny VibeVoice checkpoint."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from tests.ui_app import start_app, stop_app

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def app_url(tiny_checkpoint, tmp_path_factory):
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--max-batch-size", "4",
                          "--output-dir", str(tmp_path_factory.mktemp("ui-out")))
    yield url
    stop_app(proc)


def test_single_synthesis_returns_decodable_audio_and_subtitles(app_url, data_dir):
    client = gradio_client.Client(app_url, verbose=False)
    audio, wav, srt, rows, used_seed = client.predict(
        gradio_client.handle_file(str(data_dir / "zh_female_1.wav")), "", "你好。今天天气很好。", 4, True, 24,
        True, 1.0, 1.0, 50, 1.3, 7, False, 0, 200, api_name="/synthesize")
    data, sr = sf.read(wav)
    assert sr > 0 and len(data) > 0
    assert used_seed == 7
    assert "-->" in open(srt, encoding="utf-8").read()
    assert len(rows["data"]) >= 1


def test_preview_marks_an_override(app_url):
    client = gradio_client.Client(app_url, verbose=False)
    spans, notes = client.predict("重(chong2)新开始", api_name="/preview")
    labels = [item["class_or_confidence"] for item in spans] if isinstance(spans, list) else \
        [item[1] for item in spans["data"]]
    assert any(label and "override" in label for label in labels)


def test_batch_job_returns_a_result_for_every_line(app_url, data_dir, tmp_path):
    lines = [{"input_text": "第一行。", "prompt_audio": "ref.wav", "output_name": "a"},
             {"input_text": "Second line.", "prompt_audio": "ref.wav", "output_name": "b"},
             {"input_text": "bad line has no audio", "prompt_audio": "missing.wav", "output_name": "c"}]
    import shutil
    import zipfile

    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "ref.wav")
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(tmp_path / "ref.wav", "ref.wav")
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n", encoding="utf-8")
    client = gradio_client.Client(app_url, verbose=False)
    summary, results, zip_path = client.predict(
        gradio_client.handle_file(str(jsonl)), gradio_client.handle_file(str(tmp_path / "voices.zip")), None, 4,
        True, True, 0, api_name="/run_job")
    statuses = {row[1]: row[2] for row in results["data"]}
    assert statuses == {"a": "ok", "b": "ok", "c": "failed"}
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
    assert "results.jsonl" in names and any(n.endswith("a.wav") for n in names)


def test_app_without_a_model_starts_explains_and_still_checks_references(tmp_path, data_dir):
    import re
    from pathlib import Path

    missing = tmp_path / "no-such-model"
    missing.mkdir()
    proc, url = start_app(missing)
    log = Path(missing.parent / f"app-{url.rsplit(':', 1)[1].strip('/')}.log")
    try:
        import urllib.request

        config = urllib.request.urlopen(url + "config", timeout=10).read().decode("utf-8")
        assert "make-tiny-model" in config  # the page's banner says how to get a model offline
        client = gradio_client.Client(url, verbose=False)
        cleaned, report = client.predict(gradio_client.handle_file(str(data_dir / "en_male_1.wav")), "",
                                         api_name="/reference_report")
        assert "speech kept" in report
        assert client.predict(api_name="/cancel_job") == "no job of yours is running"
        with pytest.raises(Exception, match="make-tiny-model|model"):
            client.predict(gradio_client.handle_file(str(data_dir / "en_male_1.wav")), "", "hello", 4, True, 24,
                           True, 1.0, 1.0, 50, 1.3, 7, False, 0, 200, api_name="/synthesize")
    finally:
        stop_app(proc)
    # SIGTERM removes the temporary output folder the app announced.
    temp_root = re.search(r"Generated files go to (\S+) \(temporary", log.read_text()).group(1)
    assert not Path(temp_root).exists()


def test_validation_says_when_every_line_is_valid_in_the_browsers_language(app_url, data_dir, tmp_path):
    import shutil

    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "ref.wav")
    jsonl = tmp_path / "ok.jsonl"
    jsonl.write_text(json.dumps({"input_text": "好。"}) + "\n", encoding="utf-8")  # uses the default voice
    for accept, expected in (("en-US,en;q=0.9", "all valid"), ("zh-CN,zh;q=0.9", "全部有效")):
        client = gradio_client.Client(app_url, verbose=False, headers={"Accept-Language": accept})
        table, summary = client.predict(gradio_client.handle_file(str(jsonl)), None,
                                        gradio_client.handle_file(str(tmp_path / "ref.wav")),
                                        api_name="/validate_job")
        assert expected in summary
