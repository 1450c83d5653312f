"""Upload limits: a file over the largest limit is refused while it streams in (HTTP 413) and leaves nothing in
the upload folder; a file over its kind's own limit gets a readable message naming it and the limit."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.ui_app import start_app, stop_app

gradio_client = pytest.importorskip("gradio_client")


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def app(tiny_checkpoint, tmp_path_factory):
    # gradio's upload folder, GRADIO_TEMP_DIR, is read when its server starts (``gradio.utils.get_upload_folder``):
    # the app is forked with it (tests.ui_app.start_app)
    uploads = tmp_path_factory.mktemp("gradio-uploads")
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(tmp_path_factory.mktemp("limits-out")),
                          "--max-upload-size", "300KB", "--max-zip-size", "2MB",
                          env={"GRADIO_TEMP_DIR": str(uploads)})
    yield url, uploads
    stop_app(proc)


def _post_file(url: str, size_bytes: int) -> int:
    boundary = uuid.uuid4().hex
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.zip\"\r\n"
            "Content-Type: application/zip\r\n\r\n").encode()
    body = head + os.urandom(size_bytes) + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url + "gradio_api/upload", data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError) as error:  # the server answered 413 and closed mid-upload
        if isinstance(getattr(error, "reason", error), ConnectionError) or isinstance(error, ConnectionError):
            return 413
        raise


def test_an_upload_over_the_largest_limit_is_refused_at_once_and_not_kept(app):
    url, uploads = app
    # The page refuses a too-large file before sending it (gradio's upload boxes read this limit) ...
    config = json.loads(urllib.request.urlopen(url + "config", timeout=10).read().decode("utf-8"))
    assert config["max_file_size"] == 2_000_000
    # ... and the server stops reading one sent anyway, keeping none of it.
    before = _folder_bytes(uploads)
    assert _post_file(url, 8 * 1000**2) == 413
    assert _folder_bytes(uploads) - before < 100_000  # the 8 MB did not land in the temp folder
    assert _post_file(url, 50_000) == 200  # a small one is fine
    assert _folder_bytes(uploads) - before >= 50_000  # and lands in this folder: the app's upload folder


def test_a_job_file_over_its_own_limit_gets_a_readable_message(app, tmp_path):
    url, _ = app
    big = tmp_path / "huge.jsonl"
    line = json.dumps({"input_text": "x" * 200, "prompt_audio": "a.wav"}) + "\n"
    big.write_text(line * (400_000 // len(line)), encoding="utf-8")  # ~0.4 MB: over 300 KB, under the 2 MB ZIP limit
    # refused at the upload, while it streams in (its kind's limit: tts_app/server/uploads.py), in words
    import httpx

    response = httpx.post(url + "gradio_api/upload", files={"files": ("huge.jsonl", big.read_bytes())}, timeout=60)
    assert response.status_code == 413
    assert "huge.jsonl is larger than 300 KB, the most accepted for a reference audio, job file or voice" in \
        response.json()["detail"]
    client = gradio_client.Client(url, verbose=False)
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "a.wav"}) + "\n", encoding="utf-8")
    table, summary = client.predict(gradio_client.handle_file(str(small)), api_name="/validate_job")
    assert "1 lines" in summary
