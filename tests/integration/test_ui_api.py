"""The web app's API through gradio_client, against a launched app with a tiny VibeVoice checkpoint."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from tests.ui_app import start_app, stop_app

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def ui_out(tmp_path_factory):
    """The app's --output-dir."""
    return tmp_path_factory.mktemp("ui-out")


@pytest.fixture(scope="module")
def app_url(tiny_checkpoint, ui_out):
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--max-batch-size", "4", "--output-dir", str(ui_out))
    yield url
    stop_app(proc)


def test_single_synthesis_returns_decodable_audio_and_subtitles(app_url, data_dir):
    client = gradio_client.Client(app_url, verbose=False)
    audio, srt, metadata, rows, used_seed = client.predict(
        reference_audio=gradio_client.handle_file(str(data_dir / "zh_female_1.wav")), text="你好。今天天气很好。",
        seed=7, greedy=True, max_new_tokens=24, api_name="/synthesize")
    data, sr = sf.read(audio)
    assert sr > 0 and len(data) > 0
    assert used_seed == 7
    assert "-->" in open(srt, encoding="utf-8").read()
    assert len(rows["data"]) >= 1
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["generation"]["max_new_tokens"] == 24 and sidecar["generation_sources"]["max_new_tokens"] == "request"
    # VibeVoice always takes the argmax for its tokens: a greedy request is accepted, and the sidecar says why it
    # has no such setting
    assert sidecar["generation"]["greedy"] is None and "argmax" in sidecar["generation_sources"]["greedy"]


def test_synthesize_needs_only_reference_audio_and_text_and_returns_the_wav_itself(app_url, data_dir,
                                                                                   tiny_checkpoint, ui_out):
    import hashlib

    from tests.sidecar_check import check_sidecar

    client = gradio_client.Client(app_url, verbose=False)
    audio, srt, metadata, rows, used_seed = client.predict(
        gradio_client.handle_file(str(data_dir / "en_female_1.wav")), "Hello there.", api_name="/synthesize")
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    # The player gets the very file that was written (16-bit PCM, not re-encoded or peak-normalised by gradio).
    assert hashlib.sha256(open(audio, "rb").read()).hexdigest() == sidecar["audio"]["sha256"]
    assert sf.info(audio).subtype == "PCM_16"
    # Everything not given ran with the model's defaults, and the sidecar says so.
    assert sidecar["requested"]["max_new_tokens"] is None
    assert sidecar["generation_sources"]["max_new_tokens"] != "request"
    assert sidecar["reference"]["name"] == "en_female_1.wav" and sidecar["text"]["input"] == "Hello there."
    # the server keeps the WAV and its complete sidecar side by side in --output-dir, in this browser's own folder
    audio_path = next((ui_out / "single").rglob(sidecar["audio"]["file"]))  # single/<browser>/<session>/
    check_sidecar(audio_path, entry_point="web", text="Hello there.",
                  reference=data_dir / "en_female_1.wav", model_id=str(tiny_checkpoint("vibevoice")))
    port = app_url.rstrip("/").rsplit(":", 1)[1]
    log = (tiny_checkpoint("vibevoice").parent / f"app-{port}.log").read_text()
    assert "to 16-bit int format" not in log  # gradio converts (and warns about) float arrays, never our WAV


def test_every_api_value_has_a_name(app_url):
    client = gradio_client.Client(app_url, verbose=False)
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/synthesize", "/preview", "/reference_report", "/validate_job", "/run_job", "/cancel_job",
            "/memory"} <= set(endpoints)
    for name, info in endpoints.items():
        labels = [r["label"] for r in info["returns"]] + [p["parameter_name"] for p in info["parameters"]]
        assert all(isinstance(x, str) and x and not x.startswith(("value_", "parameter_")) for x in labels), \
            (name, labels)
    assert [r["label"] for r in endpoints["/synthesize"]["returns"]] == ["audio", "subtitles", "metadata",
                                                                         "segments", "used_seed"]
    required = {name: [p["parameter_name"] for p in info["parameters"] if not p["parameter_has_default"]]
                for name, info in endpoints.items()}
    assert required["/synthesize"] == ["reference_audio", "text"]
    assert required["/validate_job"] == required["/run_job"] == ["jsonl_file"]


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
        gradio_client.handle_file(str(jsonl)), gradio_client.handle_file(str(tmp_path / "voices.zip")),
        greedy=True, api_name="/run_job")
    statuses = {row[1]: row[2] for row in results["data"]}
    assert statuses == {"a": "ok", "b": "ok", "c": "failed"}
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        sidecar = json.loads(zf.read("a.json"))
    assert {"results.jsonl", "a.wav", "a.json", "b.wav", "b.json"} <= set(names)
    assert sidecar["job"]["line"] == 1 and sidecar["entry_point"] == "job" and sidecar["audio"]["file"] == "a.wav"


def test_job_endpoints_need_only_the_jsonl_file(app_url, tmp_path):
    jsonl = tmp_path / "solo.jsonl"
    jsonl.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "nowhere.wav"}) + "\n", encoding="utf-8")
    client = gradio_client.Client(app_url, verbose=False)
    table, summary = client.predict(gradio_client.handle_file(str(jsonl)), api_name="/validate_job")
    rows = {row[0]: row for row in table["data"]}
    assert "nowhere.wav" in rows[1][2]
    assert "add the ZIP" in rows["job file"][2]  # no ZIP was given: the job-file row says to add it
    summary, results, zip_path = client.predict(gradio_client.handle_file(str(jsonl)), api_name="/run_job")
    assert [row[2] for row in results["data"]] == ["failed"] and zip_path.endswith(".zip")


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
        cleaned, report = client.predict(gradio_client.handle_file(str(data_dir / "en_male_1.wav")),
                                         api_name="/reference_report")
        assert "speech kept" in report
        with pytest.raises(Exception, match="is not a job id"):  # the job API answers in words without a model
            client.predict("nope", api_name="/cancel_job")
        with pytest.raises(Exception, match="make-tiny-model|model"):
            client.predict(gradio_client.handle_file(str(data_dir / "en_male_1.wav")), "hello",
                           api_name="/synthesize")
    finally:
        stop_app(proc)
    # The page says how to download a model with the hub client installed (hf, not huggingface-cli), and offers
    # no Generate / Run button that could only fail.
    assert "huggingface-cli" not in config  # (the offline hint says `hf download ID`: test_adapters_registry)
    components = {c.get("props", {}).get("elem_id"): c.get("props", {}) for c in json.loads(config)["components"]}
    assert components["generate"]["interactive"] is False and components["run-job"]["interactive"] is False
    # SIGTERM keeps the job folders (they resume after a restart) and removes the sessions' single outputs.
    root = re.search(r"Generated files and jobs go to (\S+)", log.read_text()).group(1)
    assert Path(root).is_dir() and not (Path(root) / "single").exists()


def test_user_errors_are_one_message_and_no_traceback_in_the_log(app_url, tiny_checkpoint, data_dir):
    client = gradio_client.Client(app_url, verbose=False)
    with pytest.raises(Exception, match="Upload or record a reference audio clip first"):
        client.predict(None, "hello", api_name="/synthesize")
    with pytest.raises(Exception, match="Type some text"):
        client.predict(gradio_client.handle_file(str(data_dir / "en_male_1.wav")), "  ", api_name="/synthesize")
    with pytest.raises(Exception, match="no speech found"):
        client.predict(gradio_client.handle_file(str(data_dir / "silence_digital_5s.wav")), "hello",
                       api_name="/synthesize")
    port = app_url.rstrip("/").rsplit(":", 1)[1]
    log = (tiny_checkpoint("vibevoice").parent / f"app-{port}.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    # Progress and errors of Generate show in the output box only, not as a badge on each of its five outputs.
    import urllib.request

    config = json.loads(urllib.request.urlopen(app_url + "config", timeout=10).read().decode("utf-8"))
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    synthesize = next(d for d in config["dependencies"] if d.get("api_name") == "synthesize")
    assert [ids[i] for i in synthesize["show_progress_on"]] == ["out-audio"]


def test_messages_show_the_users_own_paths_as_written(app_url, tmp_path):
    jsonl = tmp_path / "paths.jsonl"
    jsonl.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "/var/tmp/voice.wav"}) + "\n"
                     + json.dumps({"input_text": "Hi.", "prompt_audio": "takes/voice.wav"}) + "\n", encoding="utf-8")
    client = gradio_client.Client(app_url, verbose=False)
    table, summary = client.predict(gradio_client.handle_file(str(jsonl)), api_name="/validate_job")
    rows = {row[0]: row[2] for row in table["data"]}
    assert "'/var/tmp/voice.wav'" in rows[1] and "<server temp>" not in rows[1]
    assert "'takes/voice.wav'" in rows[2] and "the job file's folder" in rows[2]
    assert str(tmp_path) not in json.dumps(table)  # no server path of the upload leaks into a message


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


def test_emotion_settings_are_refused_by_a_model_without_emotion_control(app_url, data_dir):
    client = gradio_client.Client(app_url, verbose=False)
    with pytest.raises(Exception, match="no emotion control"):
        client.predict(gradio_client.handle_file(str(data_dir / "en_female_1.wav")), "Hello there.",
                       emotion_mode="vector", happy=0.8, api_name="/synthesize")


def test_a_job_is_queried_by_id_while_and_after_it_runs_by_its_owner_only(app_url, data_dir, tmp_path, ui_out):
    import shutil
    import time
    import zipfile

    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "ref.wav")
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(tmp_path / "ref.wav", "ref.wav")
    jsonl = tmp_path / "queued.jsonl"
    jsonl.write_text("\n".join(json.dumps({"input_text": f"Line {i}.", "prompt_audio": "ref.wav",
                                           "max_new_tokens": 12}) for i in range(6)) + "\n", encoding="utf-8")
    client = gradio_client.Client(app_url, verbose=False)
    returned = client.predict(gradio_client.handle_file(str(jsonl)), gradio_client.handle_file(
        str(tmp_path / "voices.zip")), api_name="/submit_job")
    import re

    job_id = next(x for x in returned if isinstance(x, str) and re.match(r"^\d{8}-\d{6}-[0-9a-f]{8}$", x))
    deadline = time.monotonic() + 180
    # another client (another browser: its own cookie) is refused, however it learnt the id
    with pytest.raises(Exception, match="belongs to another browser"):
        gradio_client.Client(app_url, verbose=False).predict(job_id, api_name="/job_status")
    while True:  # the client that submitted it follows it by its id (a reloaded page keeps its cookie too)
        job = client.predict(job_id, api_name="/job_status")
        assert job["job_id"] == job_id and job["num_lines"] in (0, 6) and "owner" not in job
        if job["status"] == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (job["status"], job["num_ok"], job["num_done"]) == ("done", 6, 6)
    records, zip_path = client.predict(job_id, api_name="/job_results")
    assert [r["line"] for r in records] == list(range(1, 7)) and all(r["status"] == "ok" for r in records)
    with zipfile.ZipFile(zip_path) as zf:
        assert "results.jsonl" in zf.namelist()
    # the job's files are served from its folder, to its owner only
    import httpx

    url = f"{app_url}gradio_api/file={ui_out / 'jobs' / job_id / 'out' / records[0]['audio_path']}"
    assert httpx.get(url, cookies=client.cookies, timeout=120).status_code == 200
    assert httpx.get(url, timeout=120).status_code == 403
    with pytest.raises(Exception, match="belongs to another browser"):
        gradio_client.Client(app_url, verbose=False).predict(job_id, api_name="/job_results")
    with pytest.raises(Exception, match="not a job id"):
        client.predict("../../etc/passwd", api_name="/job_status")
