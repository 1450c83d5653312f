"""Who may fetch what (issue 17, access control): the server's guard in front of gradio's file routes
(``tts_app.server.sessions.BrowserSessions``) and the Batch tab's job ownership, in-process; and the clean-up of
cleaned reference clips (issue 14). The launched app is tests/integration/test_openai_api.py and test_ui_api.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.testclient import TestClient

from tts_app.jobs.store import JobStore
from tts_app.server.sessions import (COOKIE_NAME, UPLOAD_OWNERS_NAME, BrowserSessions, key_owner, new_browser_token,
                                     owner_key)

KEY = "sk-access-test"


def _cookie(token: str) -> dict:
    return {"cookie": f"{COOKIE_NAME}={token}"}


@pytest.fixture()
def guarded(tmp_path):
    """A BrowserSessions in front of a stand-in for gradio: its upload route stores the posted file in
    ``uploads/<hash>/`` and answers the paths; its file route serves any path."""
    out, uploads = tmp_path / "out", tmp_path / "uploads"
    out.mkdir()

    async def gradio_stand_in(scope, receive, send):
        path = scope["path"]
        if path == "/gradio_api/upload":
            folder = uploads / "0123abcd"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "voice.wav").write_bytes(b"RIFF voice")
            response = JSONResponse([str(folder / "voice.wav")])
        else:
            response = PlainTextResponse("served")
        await response(scope, receive, send)

    client = TestClient(BrowserSessions(gradio_stand_in, out, api_keys=(KEY,)))
    return SimpleNamespace(client=client, out=out, uploads=uploads)


def _get(guarded, path: Path, headers=None, route="/gradio_api/file="):
    return guarded.client.get(f"{route}{path}", headers=headers or {}).status_code


def test_a_jobs_files_are_served_to_its_owner_only_browser_or_api_key(guarded, tmp_path):
    mine, theirs = new_browser_token(), new_browser_token()
    store = JobStore(guarded.out)
    (tmp_path / "tasks.jsonl").write_text('{"input_text": "Hi."}\n', encoding="utf-8")
    browser_job = store.create(tmp_path / "tasks.jsonl", owner=owner_key(mine))
    script_job = store.create(tmp_path / "tasks.jsonl", owner=key_owner(KEY))
    nobodys = store.create(tmp_path / "tasks.jsonl", owner=None)  # an older job without an owner
    for state in (browser_job, script_job, nobodys):
        (store.out_dir(state.job_id) / "results.zip").write_bytes(b"PK")
    zip_of = lambda state: store.out_dir(state.job_id) / "results.zip"  # noqa: E731
    assert _get(guarded, zip_of(browser_job), _cookie(mine)) == 200
    assert _get(guarded, zip_of(browser_job), _cookie(theirs)) == 403
    assert _get(guarded, zip_of(browser_job)) == 403  # no cookie: a fresh one, not the owner's
    # gradio's older route, and another spelling of the same path, are guarded too
    assert _get(guarded, zip_of(browser_job), _cookie(theirs), route="/gradio_api/file/") == 403
    sneaky = store.folder(browser_job.job_id) / "out" / ".." / "out" / "results.zip"
    assert _get(guarded, sneaky, _cookie(theirs)) == 403
    # an API client is its key: from any machine, with or without a cookie
    bearer = {"Authorization": f"Bearer {KEY}"}
    assert _get(guarded, zip_of(script_job), bearer) == 200
    assert _get(guarded, zip_of(script_job), {**bearer, **_cookie(theirs)}) == 200
    assert _get(guarded, zip_of(script_job), {"Authorization": "Bearer sk-wrong"}) == 403
    assert _get(guarded, zip_of(script_job), _cookie(mine)) == 403
    assert _get(guarded, zip_of(nobodys), _cookie(mine)) == 403


def test_an_upload_is_served_to_whoever_uploaded_it_only(guarded):
    mine, theirs, also = new_browser_token(), new_browser_token(), new_browser_token()
    response = guarded.client.post("/gradio_api/upload", headers=_cookie(mine), files={"files": b"RIFF voice"})
    assert response.status_code == 200
    (path,) = response.json()
    assert (Path(path).parent / UPLOAD_OWNERS_NAME).read_text().split() == [owner_key(mine)]  # kept on disk
    assert _get(guarded, path, _cookie(mine)) == 200
    assert _get(guarded, path, _cookie(theirs)) == 403
    assert _get(guarded, path) == 403
    # the same bytes uploaded by another browser (one cached copy): both may fetch it
    guarded.client.post("/gradio_api/upload", headers=_cookie(also), files={"files": b"RIFF voice"})
    assert _get(guarded, path, _cookie(also)) == 200 and _get(guarded, path, _cookie(theirs)) == 403


def test_browser_folders_and_the_old_shared_clip_folder(guarded):
    mine, theirs = new_browser_token(), new_browser_token()
    clip = guarded.out / "single" / owner_key(mine) / "references" / "abc.wav"
    clip.parent.mkdir(parents=True)
    clip.write_bytes(b"RIFF")
    assert _get(guarded, clip, _cookie(mine)) == 200 and _get(guarded, clip, _cookie(theirs)) == 403
    legacy = guarded.out / "references" / "abc.wav"
    legacy.parent.mkdir()
    legacy.write_bytes(b"RIFF")
    assert _get(guarded, legacy, _cookie(mine)) == 403


# ------------------------------------------------------------------------------------------ Batch tab ownership


@pytest.fixture()
def job_ctx(tmp_path):
    from tts_app.config import UploadConfig
    from tts_app.jobs.manager import JobManager

    store = JobStore(tmp_path / "out")
    (tmp_path / "tasks.jsonl").write_text('{"input_text": "Hi."}\n', encoding="utf-8")
    mine = _cookie(new_browser_token())
    state = store.create(tmp_path / "tasks.jsonl", owner=owner_key(mine["cookie"].split("=", 1)[1]))
    from tts_app.ui.context import AppContext

    ctx = SimpleNamespace(jobs=JobManager(store, None), engine=None, lang=None, upload_config=UploadConfig(),
                          owner=lambda headers: AppContext.owner(SimpleNamespace(api_keys=()), headers))
    return ctx, state.job_id, mine


def test_another_browser_cannot_query_open_cancel_or_resume_my_job(job_ctx):
    from tts_app.ui import batch

    ctx, job_id, mine = job_ctx
    me = SimpleNamespace(headers=mine)
    other = SimpleNamespace(headers={**_cookie(new_browser_token()), "accept-language": "zh-CN"})
    assert batch.job_status(ctx, job_id, request=me)["job_id"] == job_id
    for call in (lambda: batch.job_status(ctx, job_id, request=other),
                 lambda: batch.job_results(ctx, job_id, request=other),
                 lambda: batch.open_job(ctx, job_id, {}, request=other),
                 lambda: batch.resume_job(ctx, {"job_id": job_id}, request=other)):
        with pytest.raises(gr.Error, match="属于另一个浏览器"):
            call()
    # a page of another browser that stored this id shows nothing of it, and its cancel does nothing
    browser, shown_id, progress, *_ = batch.restore(ctx, {"job_id": job_id}, request=other)
    assert browser["job_id"] == "" and shown_id == "" and job_id not in progress
    assert batch.cancel_job(ctx, {"job_id": job_id}, request=other) == "你没有正在运行的任务"
    assert [c for _, c in batch._choices(ctx, ctx.owner(other.headers), "en")] == []
    assert [c for _, c in batch._choices(ctx, ctx.owner(mine), "en")] == [job_id]


# ------------------------------------------------------------------------------------ reference clip clean-up


def test_cleaned_clips_unused_for_the_upload_age_go_except_a_saved_voices(tmp_path, data_dir):
    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig, ModelConfig, UploadConfig
    from tts_app.runtime import Runtime
    from tts_app.ui.context import AppContext, AppSettings

    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=0))
    try:
        ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(), output_root=tmp_path,
                                     upload_config=UploadConfig(cache_max_age_s=3600)), runtime=runtime)
        voice = ctx.voices.save("mei", data_dir / "en_female_1.wav", runtime.references)
        me = _cookie(new_browser_token())
        kept_voice = ctx.reference_clip(ctx.voices.prepare(voice.name, runtime.references), me)
        old = ctx.reference_clip(runtime.references.prepare(data_dir / "zh_female_1.wav"), me)
        fresh = ctx.reference_clip(runtime.references.prepare(data_dir / "zh_male_1.wav"), me)
        legacy = tmp_path / "references" / "0123.wav"  # the shared folder of earlier versions
        legacy.parent.mkdir()
        legacy.write_bytes(b"RIFF")
        two_hours_ago = time.time() - 7200
        for path in (kept_voice, old, legacy):
            os.utime(path, (two_hours_ago, two_hours_ago))
        assert old.parent == tmp_path / "single" / owner_key(me["cookie"].split("=", 1)[1]) / "references"
        assert ctx.prune_reference_clips() == 2
        assert kept_voice.exists() and fresh.exists() and not old.exists() and not legacy.exists()
        # a clip shown again counts its age from then
        os.utime(fresh, (two_hours_ago, two_hours_ago))
        ctx.reference_clip(runtime.references.prepare(data_dir / "zh_male_1.wav"), me)
        assert ctx.prune_reference_clips() == 0 and fresh.exists()
    finally:
        runtime.close()


def test_a_cookie_python_cannot_parse_never_merges_browsers_into_one_owner(guarded):
    """Another app on the same host may set a JSON cookie (``SimpleCookie`` refuses the whole header then): each
    browser still keeps its own files."""
    mine, theirs = new_browser_token(), new_browser_token()
    foreign = 'prefs={"theme": "dark", "lang": "en"}'
    with_foreign = lambda token: {"cookie": f"{foreign}; {COOKIE_NAME}={token}; other=1"}  # noqa: E731
    response = guarded.client.post("/gradio_api/upload", headers=with_foreign(mine), files={"files": b"RIFF voice"})
    (path,) = response.json()
    assert (Path(path).parent / UPLOAD_OWNERS_NAME).read_text().split() == [owner_key(mine)]
    assert _get(guarded, path, with_foreign(mine)) == 200
    assert _get(guarded, path, with_foreign(theirs)) == 403
    assert _get(guarded, path, {"cookie": foreign}) == 403  # a browser with only the foreign cookie is nobody yet
