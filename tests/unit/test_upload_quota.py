"""Quotas (issue 25, Build 5): an upload over its kind's limit is refused with 413 while its body streams in (the
server stops reading it and keeps none of it), and an owner's jobs and uploads are held to the per-owner disk quota;
on the composed server in-process (``tests/composed_app.py``), the bodies fed chunk by chunk as a socket would."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.composed_app import Browser, composed_app
from tts_app.config import ServerConfig, UploadConfig

CHUNK_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("upload-quota")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(root / "gradio"))
        limits = UploadConfig(max_upload_bytes=300_000, max_zip_upload_bytes=2_000_000, max_owner_bytes=3_000_000)
        with composed_app(root / "out", ServerConfig(max_voice_upload_bytes=100_000, rate_limit_per_min=0),
                          upload_config=limits) as composed:
            composed.uploads = root / "gradio"
            yield composed


def _multipart(field: str, filename: str, size_bytes: int, fields: dict[str, str] | None = None, fill: bytes = b"\x01"
               ) -> tuple[str, bytes]:
    boundary = uuid.uuid4().hex
    head = b"".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
                    for k, v in (fields or {}).items())
    head += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n").encode()
    return boundary, head + fill * size_bytes + f"\r\n--{boundary}--\r\n".encode()


def post_streamed(server, path: str, body: bytes, boundary: str, browser: Browser, *, lang: str = "en",
                  declare_length: bool = False) -> tuple[int, bytes, int]:
    """POST ``body`` to the composed app as a socket delivers it (CHUNK_BYTES at a time): (status, response body,
    bytes the server read before answering)."""
    chunks = [body[i:i + CHUNK_BYTES] for i in range(0, len(body), CHUNK_BYTES)]
    headers = [(b"host", b"testserver"), (b"content-type", f"multipart/form-data; boundary={boundary}".encode()),
               (b"accept-language", lang.encode()), *[(k.encode(), v.encode()) for k, v in browser.headers.items()]]
    if declare_length:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 50000), "server": ("testserver", 80), "state": {}}
    read = {"bytes": 0, "next": 0}
    answer = {"status": 0, "body": b""}

    async def receive():
        if read["next"] >= len(chunks):
            return {"type": "http.disconnect"}
        chunk = chunks[read["next"]]
        read["next"] += 1
        read["bytes"] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": read["next"] < len(chunks)}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    server.client.portal.call(server.app, scope, receive, send)
    return answer["status"], answer["body"], read["bytes"]


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


def test_a_page_upload_over_its_kinds_limit_is_refused_while_it_streams_and_not_kept(server):
    browser = Browser(server.client)
    before = _files(server.uploads)
    boundary, body = _multipart("files", "voice.wav", 2_000_000)  # reference audio: 300 KB at most
    status, answer, read_bytes = post_streamed(server, "/gradio_api/upload", body, boundary, browser)
    assert status == 413
    assert "voice.wav is larger than 300 KB" in answer.decode()
    assert read_bytes < 300_000 + 2 * CHUNK_BYTES  # it stopped reading at the limit, not after 2 MB
    assert _files(server.uploads) == before  # gradio's partial copy was deleted
    # the same size is fine as an audio ZIP (its own limit, 2 MB) ...
    boundary, body = _multipart("files", "voices.zip", 1_000_000)
    status, answer, read_bytes = post_streamed(server, "/gradio_api/upload", body, boundary, browser)
    assert status == 200 and read_bytes == len(body)
    # ... and the refusal is in the caller's language
    boundary, body = _multipart("files", "声音.wav", 400_000)
    status, answer, _ = post_streamed(server, "/gradio_api/upload", body, boundary, browser, lang="zh-CN")
    assert status == 413 and "声音.wav 超过 300 KB" in answer.decode()


def test_a_voice_upload_over_the_limit_is_refused_before_the_body_is_read(server):
    browser = Browser(server.client)
    boundary, body = _multipart("audio_sample", "big.wav", 3_000_000, {"name": "Big"})
    status, answer, read_bytes = post_streamed(server, "/v1/audio/voices", body, boundary, browser)
    assert status == 413 and read_bytes < 100_000 + 2 * CHUNK_BYTES
    error = __import__("json").loads(answer)["error"]
    assert error["param"] == "audio_sample" and "big.wav is larger than 100 KB" in error["message"]
    # a declared Content-Length over the limit: refused before a byte is read
    status, _, read_bytes = post_streamed(server, "/v1/audio/voices", body, boundary, browser, declare_length=True)
    assert status == 413 and read_bytes == 0


def test_the_refusals_have_both_languages_with_the_same_placeholders():
    import string

    from tts_app.server.uploads import MESSAGES

    fields = lambda text: {name for _, name, _, _ in string.Formatter().parse(text) if name}  # noqa: E731
    assert MESSAGES["en"].keys() == MESSAGES["zh"].keys()
    assert all(fields(MESSAGES["en"][key]) == fields(MESSAGES["zh"][key]) for key in MESSAGES["en"])


def test_an_owners_jobs_and_uploads_are_held_to_the_disk_quota(server, tmp_path):
    """3 MB per owner in this server: uploads and the copies a job keeps count; another owner is not affected."""
    from tests.composed_app import file_data

    mine, theirs = Browser(server.client), Browser(server.client)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"input_text": "Hi.", "prompt_audio": "a.wav"}\n', encoding="utf-8")
    job_file = mine.upload(tasks)
    boundary, body = _multipart("files", "voices.zip", 1_900_000, fill=b"\x02")
    status, answer, _ = post_streamed(server, "/gradio_api/upload", body, boundary, mine)
    assert status == 200
    zip_path = __import__("json").loads(answer)[0]
    # the job would copy the 1.9 MB ZIP into its folder: 3.8 MB is over the quota
    event = mine.call("submit_job", [file_data(job_file), file_data(zip_path), None, 1, True, False, 0, "wav", 1, 0.0, "auto", False, "off", True])
    assert event.status_code == 200
    result = mine.result("submit_job", event.json()["event_id"])
    assert "event: error" in result and "each user may keep" in result and "1.9 MB more does not fit" in result
    assert server.ctx.jobs.store.list(owner=mine.owner) == []
    boundary, body = _multipart("files", "more.zip", 900_000, fill=b"\x03")
    assert post_streamed(server, "/gradio_api/upload", body, boundary, mine)[0] == 200  # 2.8 MB now
    boundary, body = _multipart("files", "voice.wav", 290_000, fill=b"\x04")
    status, answer, read_bytes = post_streamed(server, "/gradio_api/upload", body, boundary, mine, lang="zh")
    assert status == 413 and "每位用户最多保留 3 MB" in answer.decode() and read_bytes < 290_000
    assert post_streamed(server, "/gradio_api/upload", body, boundary, theirs)[0] == 200


def test_a_failed_jobs_inputs_are_removed_sooner_than_its_folder(tmp_path):
    import json
    import time

    from tts_app.jobs.store import JobStore

    store = JobStore(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"input_text": "Hi."}\n', encoding="utf-8")
    failed, done = store.create(tmp_path / "tasks.jsonl"), store.create(tmp_path / "tasks.jsonl")
    three_days_ago = time.time() - 3 * 86400
    for state, status in ((failed, "failed"), (done, "done")):
        state.status, state.finished_s = status, three_days_ago
        store.save(state)
    limits = UploadConfig()
    assert store.prune(limits.keep_jobs_s, limits.keep_failed_inputs_s) == 0  # both younger than 14 days
    assert not store.job_file(failed.job_id).exists() and store.folder(failed.job_id).is_dir()
    assert store.load(failed.job_id).status == "failed"  # its record and error stay
    assert store.job_file(done.job_id).exists()  # a finished job keeps its inputs (it may be re-run)
    assert json.loads((store.folder(done.job_id) / "job.json").read_text())["status"] == "done"
