"""Only the caller's own uploads are file inputs (issue 25, Build 1): every file-taking endpoint of the gradio app
refuses a server path, another browser's upload, a URL and a path that climbs out of an upload, in the caller's
language, and takes the caller's own upload; on the composed server in-process (``tests/composed_app.py``)."""

from __future__ import annotations

import json

import pytest

from tests.composed_app import Browser, composed_app_at, file_data

REFUSED_EN = "only a file you uploaded on this page"
REFUSED_ZH = "只能使用你在本页面上传的文件"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with composed_app_at(tmp_path_factory.mktemp("file-inputs")) as composed:
        yield composed


def _file_inputs(server) -> list[tuple[str, int, list]]:
    """(api name, index of a file parameter, data with None elsewhere) for every file parameter of every endpoint
    the app lists."""
    info = server.client.get("/gradio_api/info").json()["named_endpoints"]
    found = []
    for name, endpoint in info.items():
        params = endpoint["parameters"]
        for i, param in enumerate(params):
            if param["component"] in ("Audio", "File", "Image", "Video"):
                found.append((name.lstrip("/"), i, [None] * len(params)))
    return found


def _job_ids(server) -> list[str]:
    return sorted(state.job_id for state in server.ctx.jobs.store.list(limit=1000))


def test_every_file_input_takes_only_the_callers_own_upload(server, tmp_path, data_dir):
    me, other = Browser(server.client), Browser(server.client)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"input_text": "another browser's words"}) + "\n", encoding="utf-8")
    theirs = other.upload(data_dir / "en_female_1.wav")
    mine = me.upload(data_dir / "zh_female_1.wav")
    inputs = _file_inputs(server)
    assert {name for name, _, _ in inputs} >= {"validate_job", "submit_job", "run_job", "reference_report",
                                               "synthesize", "synthesize_stream", "synthesize_dialogue",
                                               "transcribe", "save_voice"}
    jobs_before = _job_ids(server)
    for name, index, data in inputs:
        for bad in (file_data(secret), file_data(secret, meta=False), file_data(data_dir / "en_female_1.wav"),
                    file_data(theirs), file_data("https://example.com/a.wav"), file_data(f"{mine}/../../x.wav")):
            data[index] = bad
            response = me.call(name, data)
            assert response.status_code == 403, (name, bad, response.text)
            assert REFUSED_EN in response.json()["detail"]
        assert _job_ids(server) == jobs_before  # nothing was copied into a job
        data[index] = file_data(mine)
        response = me.call(name, data)
        assert response.status_code == 200, (name, response.text)
        outcome = me.result(name, response.json()["event_id"])
        assert "uploaded" not in outcome and "Cannot move" not in outcome, (name, outcome)


def test_a_refusal_is_in_the_callers_language_and_the_owner_gets_the_work_done(server, data_dir):
    other = Browser(server.client)
    theirs = other.upload(data_dir / "en_female_1.wav")
    me = Browser(server.client, **{"accept-language": "zh-CN,zh;q=0.9"})
    refused = me.call("reference_report", [file_data(theirs), "", "auto"])
    assert refused.status_code == 403 and REFUSED_ZH in refused.json()["detail"]
    response = other.call("reference_report", [file_data(theirs), "", "auto"])
    outcome = other.result("reference_report", response.json()["event_id"])
    assert "event: complete" in outcome and f"/single/{other.owner}/references/" in outcome  # its cleaned clip


def test_the_pages_own_queue_route_is_guarded_too(server, tmp_path):
    secret = tmp_path / "planted.jsonl"
    secret.write_text(json.dumps({"input_text": "a planted secret"}) + "\n", encoding="utf-8")
    me = Browser(server.client)
    fn_index = next(dep["id"] for dep in server.client.get("/config", headers=me.headers).json()["dependencies"]
                    if dep.get("api_name") == "submit_job")
    jobs_before = _job_ids(server)
    response = server.client.post("/gradio_api/queue/join", headers=me.headers, json={
        "data": [file_data(secret)] + [None] * 9, "fn_index": fn_index, "session_hash": "abc123"})
    assert response.status_code == 403 and REFUSED_EN in response.json()["detail"]
    assert _job_ids(server) == jobs_before


def test_a_call_too_large_to_check_is_refused_before_gradio_reads_it(server):
    me = Browser(server.client, **{"accept-language": "zh-CN"})
    response = me.call("preview", ["字" * (2 * 1024**2)])  # 6 MB of JSON: a text far beyond every limit
    assert response.status_code == 413 and "请求超过 4194304 字节" in response.json()["detail"]
