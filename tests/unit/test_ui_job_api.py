"""The Batch tab's API for scripts (issue 23, Why 5): ``/submit_job`` returns the job id and the job's state (never
the page's stored browser state), ``/cancel_job`` and ``/resume_job`` take a job id, and ``/job_status`` refuses
anything but a job id in words, with no traceback in the server log. A resumed
job counts the lines it kept as ok."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import fake_app_context  # noqa: E402
from tts_app.server.sessions import new_browser_token  # noqa: E402
from tts_app.ui import batch  # noqa: E402


@pytest.fixture()
def ctx(tmp_path):
    ctx = fake_app_context(tmp_path / "out", start_jobs=True)
    yield ctx
    ctx.close()


def _client(lang: str = "en"):
    """A script's requests: its own cookie (as ``gradio_client.Client`` keeps one), a language."""
    return SimpleNamespace(headers={"cookie": f"tts_app_browser={new_browser_token()}", "accept-language": lang},
                           session_hash="script")


def test_submit_returns_the_job_id_and_state_and_the_id_follows_the_job(ctx, tmp_path, data_dir):
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text(json.dumps({"input_text": "Hello there."}) + "\n", encoding="utf-8")
    me = _client()
    returned = batch.submit_job_api(ctx, str(jsonl), default_voice=str(data_dir / "en_female_1.wav"), request=me)
    job_id, job = returned
    assert isinstance(job_id, str) and job["job_id"] == job_id and "owner" not in job
    assert batch.job_status(ctx, job_id, request=me)["job_id"] == job_id  # the first value is what job_status takes
    ctx.jobs.wait(job_id, timeout_s=60)
    assert batch.job_status(ctx, job_id, request=me)["num_ok"] == 1
    for call in (batch.cancel_job_api, batch.resume_job_api):  # another script (cookie) reaches nothing of it
        with pytest.raises(gr.Error, match="belongs to another browser"):
            call(ctx, job_id, request=_client())
    assert batch.resume_job_api(ctx, job_id, request=me)["job_id"] == job_id
    ctx.jobs.wait(job_id, timeout_s=60)
    assert batch.cancel_job_api(ctx, job_id, request=me)["status"] == "done"  # a finished job stays as it was


@pytest.mark.parametrize("lang, words", [("en", "is not a job id"), ("zh", "不是任务 ID")])
@pytest.mark.parametrize("bad", [{"job_id": ""}, ("20250101-120000-1a2b3c4d", {}), "", "../../etc/passwd", 7])
def test_job_status_refuses_anything_but_a_job_id_in_words(ctx, caplog, lang, words, bad):
    with caplog.at_level(logging.INFO), pytest.raises(gr.Error) as caught:
        batch.job_status(ctx, bad, request=_client(lang))
    assert words in caught.value.message and "20250101-120000-1a2b3c4d" in caught.value.message
    assert caught.value.print_exception is False and not [r for r in caplog.records if r.exc_info]


def test_the_job_endpoints_take_and_return_what_a_script_can_use(ctx):
    from tts_app.ui.layout import build_demo

    demo, _ = build_demo(ctx)
    endpoints = demo.get_api_info()["named_endpoints"]
    returns = {name: [r["label"] for r in endpoints[name]["returns"]] for name in
               ("/submit_job", "/cancel_job", "/resume_job", "/job_status")}
    assert returns == {"/submit_job": ["job_id", "job"], "/cancel_job": ["job"], "/resume_job": ["job"],
                       "/job_status": ["job"]}
    for name in ("/cancel_job", "/resume_job", "/job_status"):
        assert [p["parameter_name"] for p in endpoints[name]["parameters"]] == ["job_id"], name
    assert endpoints["/submit_job"]["parameters"][0]["parameter_name"] == "jsonl_file"
    # the page's own events (which carry the browser's stored state) are not offered to scripts
    assert not [name for name in endpoints if "browser" in json.dumps(endpoints[name]["returns"])]


@pytest.mark.parametrize("lang, ok, kept", [("en", "ok 15 ·", "9 of them kept"), ("zh", "成功 15 ·", "其中 9 行沿用")])
def test_a_resumed_job_counts_the_lines_it_kept_as_ok(lang, ok, kept):
    from tts_app.jobs.store import JobState

    state = JobState(job_id="20250101-120000-1a2b3c4d", status="done", num_lines=15, num_done=15, num_ok=6,
                     num_skipped=9)
    box = batch.progress_html(state, lang)
    assert ok in box and kept in box and "ok 6" not in box and "成功 6" not in box
