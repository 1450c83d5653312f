"""What the Batch tab draws (progress box, results table with players and a status filter) and how the UI groups
notices, without a browser."""

from __future__ import annotations

import json
import shutil
import zipfile
from types import SimpleNamespace

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig, UploadConfig
from tts_app.jobs.manager import JobManager
from tts_app.jobs.store import JobState, JobStore
from tts_app.runtime import Runtime
from tts_app.ui import batch, handlers


def test_the_progress_box_says_lines_done_eta_and_batch_size():
    state = JobState(job_id="20250101-120000-1a2b3c4d", status="running", num_lines=50, num_done=12, num_ok=11,
                     num_failed=1, eta_s=95.0, batch_size=4)
    text = batch.progress_html(state, "en")
    assert 'data-status="running"' in text and 'data-done="12"' in text and 'style="width: 24.0%"' in text
    for part in ("running", "lines 12/50", "ok 11 · failed 1 · cancelled 0", "about 1:35 left", "batch of 4",
                 "20250101-120000-1a2b3c4d"):
        assert part in text, part
    done = batch.progress_html(JobState(job_id=state.job_id, status="interrupted", num_lines=50, num_done=20,
                                        error="<b>disk</b> full"), "zh")
    assert "已中断" in done and "left" not in done and "&lt;b&gt;disk&lt;/b&gt;" in done  # escaped, localised
    # A server stopped mid-job records its unfinished lines "cancelled": the box must not look finished.
    stopped = batch.progress_html(JobState(job_id=state.job_id, status="interrupted", num_lines=24, num_done=24,
                                           num_ok=5, num_cancelled=19), "en")
    assert "lines 5/24" in stopped and 'data-done="5"' in stopped and "cancelled 19" in stopped
    assert 'style="width: 20.8%"' in stopped
    assert "upload a task file" in batch.progress_html(None, "en")


@pytest.fixture()
def finished_job(tmp_path, data_dir):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "v.wav")
    with zipfile.ZipFile(tmp_path / "v.zip", "w") as zf:
        zf.write(tmp_path / "v.wav", "v.wav")
    rows = [{"input_text": "Hello there.", "prompt_audio": "v.wav", "output_name": "a"},
            {"input_text": "Missing.", "prompt_audio": "gone<img src=x onerror=alert(1)>.wav", "output_name": "b"},
            {"input_text": "Third.", "prompt_audio": "v.wav", "output_name": "c"}]
    (tmp_path / "job.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1))
    manager = JobManager(JobStore(tmp_path / "out"), runtime)
    state = manager.submit(tmp_path / "job.jsonl", audio_zip=tmp_path / "v.zip")
    manager.wait(state.job_id, timeout_s=60)
    yield SimpleNamespace(jobs=manager, engine=runtime.engine, upload_config=UploadConfig()), state.job_id
    runtime.close()


def test_the_results_table_has_a_player_per_ok_line_and_filters_by_status(finished_job):
    ctx, job_id = finished_job
    table = batch.results_html(ctx, job_id, "all", "en")
    assert table.count("<tr>") == 4 and table.count("<audio ") == 2  # header + 3 lines; players for the 2 ok
    assert "<img" not in table and "&lt;img src=x" in table  # a user's string is shown, never run
    assert 'preload="none"' in table  # 1000 lines do not load 1000 files
    failed = batch.results_html(ctx, job_id, "failed", "en")
    assert failed.count("<tr>") == 2 and "not found" in failed and "<audio " not in failed
    assert "No lines" in batch.results_html(ctx, job_id, "cancelled", "en")


def test_many_notices_make_one_grouped_warning(monkeypatch):
    shown = []
    monkeypatch.setattr(handlers.gr, "Warning", lambda message: shown.append(message))
    notes = [f"segment {i} hit the cap" for i in range(13)] + ["segment 0 hit the cap"]
    handlers.warn_grouped(notes, "en")
    assert len(shown) == 1
    assert shown[0].count("•") == handlers.MAX_NOTICES_SHOWN and "(and 10 more)" in shown[0]
    handlers.warn_grouped([], "en")
    assert len(shown) == 1


def test_an_upload_over_its_kinds_limit_is_refused_and_removed(tmp_path):
    from tts_app.errors import InputError
    from tts_app.ui.uploads import check_upload

    big = tmp_path / "voice.wav"
    big.write_bytes(b"\0" * 2_000_000)
    with pytest.raises(InputError, match=r"voice\.wav is 2\.0 MB; up to 1\.0 MB"):
        check_upload(big, 1_000_000, "{name} is {size}; up to {limit}")
    assert not big.exists()
    small = tmp_path / "ok.wav"
    small.write_bytes(b"\0" * 10)
    check_upload(small, 1_000_000, "{name}")
    assert small.exists()


def test_the_no_model_messages_name_the_installed_hub_clients_commands():
    from tts_app.adapters.loading import gated_message, not_found_message, offline_message

    messages = [offline_message("a/b"), gated_message("a/b"), not_found_message("a/b")]
    assert "hf download ID" in messages[0] and "hf auth login" in messages[1] + messages[2]
    assert not any("huggingface-cli" in m for m in messages)  # huggingface_hub 1.x has no such command


def test_a_finished_browser_session_takes_its_single_outputs_along_and_leaves_jobs(tmp_path):
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.ui.context import AppContext, AppSettings

    from tts_app.server.sessions import COOKIE_NAME, new_browser_token, owner_key

    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(), output_root=tmp_path))
    token = new_browser_token()
    cookie = {"cookie": f"{COOKIE_NAME}={token}"}
    mine, my_other_tab = ctx.session_dir("abc123", cookie), ctx.session_dir("abc999", cookie)
    theirs = ctx.session_dir("def456", {"cookie": f"{COOKIE_NAME}={new_browser_token()}"})
    # a session's folder lies in its browser's folder (the one the server serves to that browser only)
    assert mine.parent == my_other_tab.parent == tmp_path / "single" / owner_key(token) != theirs.parent
    for folder in (mine, my_other_tab, theirs, tmp_path / "jobs" / "20250101-120000-1a2b3c4d"):
        folder.mkdir(parents=True)
        (folder / "x.wav").write_bytes(b"RIFF")
    # a session id never names another folder
    assert ctx.session_dir("../../etc", cookie) == tmp_path / "single" / owner_key(token) / "etc"
    ctx.end_session("abc123", cookie)
    assert not mine.exists() and my_other_tab.exists() and theirs.exists() and (tmp_path / "jobs").exists()


def test_a_batch_tab_line_with_a_clip_and_no_transcript_gets_one_from_the_asr_model(tmp_path, data_dir,
                                                                                    tiny_whisper):
    """The web app's jobs transcribe a reference the same way ``batch --asr-model`` does (AppContext.start_jobs)."""
    from tts_app.config import ModelConfig
    from tts_app.ui.context import AppContext, AppSettings

    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(data_dir / "en_female_1.wav", "v.wav")
    rows = [{"input_text": "Hello there.", "prompt_audio": "v.wav", "output_name": "auto"},
            {"input_text": "Again.", "prompt_audio": "v.wav", "prompt_text": "My own words.", "output_name": "own"}]
    (tmp_path / "job.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1))
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(), output_root=tmp_path / "out",
                                 asr_model=str(tiny_whisper)), runtime=runtime)
    try:
        ctx.start_jobs()
        summary, _, _ = batch.run_job_blocking(ctx, str(tmp_path / "job.jsonl"), str(tmp_path / "voices.zip"))
        assert summary.startswith("ok 2 · failed 0")
        job_id = summary.rsplit("(", 1)[1].rstrip(")")
        out = ctx.jobs.store.out_dir(job_id)
        auto = json.loads((out / "auto.json").read_text(encoding="utf-8"))
        own = json.loads((out / "own.json").read_text(encoding="utf-8"))
    finally:
        ctx.close()
    assert auto["reference"]["text"] and set(auto["reference"]["text"]) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert any("transcribed automatically" in w for w in auto["warnings"])
    assert own["reference"]["text"] == "My own words." and not any("transcribed" in w for w in own["warnings"])


def test_the_batch_tabs_output_format_applies_to_lines_without_their_own(tmp_path, data_dir):
    from tts_app.audio.formats import decode_audio
    from tts_app.config import ModelConfig
    from tts_app.ui.context import AppContext, AppSettings

    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(data_dir / "en_female_1.wav", "v.wav")
    rows = [{"input_text": "Hello there.", "prompt_audio": "v.wav", "output_name": "job_format"},
            {"input_text": "Again.", "prompt_audio": "v.wav", "output_name": "own", "format": "opus"}]
    (tmp_path / "job.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1))
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(),
                                 output_root=tmp_path / "out"), runtime=runtime)
    try:
        ctx.start_jobs()
        summary, table, found_zip = batch.run_job_blocking(ctx, str(tmp_path / "job.jsonl"),
                                                           str(tmp_path / "voices.zip"), audio_format="flac")
        assert summary.startswith("ok 2 · failed 0")
        out = ctx.jobs.store.out_dir(summary.rsplit("(", 1)[1].rstrip(")"))
        with zipfile.ZipFile(found_zip) as zf:
            assert {"job_format.flac", "own.opus"} <= set(zf.namelist())
        for name in ("job_format.flac", "own.opus"):
            samples, rate = decode_audio(out / name)
            assert samples.size > 0
        for lang, expected in (("en", "Output format 'aac' is unknown; choose one of wav, flac, mp3, opus"),
                               ("zh", "未知的输出格式 'aac'；请选择 wav, flac, mp3, opus 之一")):
            request = SimpleNamespace(headers={"accept-language": lang})
            with pytest.raises(handlers.gr.Error, match=expected):
                batch.run_job_blocking(ctx, str(tmp_path / "job.jsonl"), str(tmp_path / "voices.zip"),
                                       audio_format="aac", request=request)
    finally:
        ctx.close()


def test_a_job_with_a_take_check_shows_quality_and_filters_lines_that_need_listening(tmp_path, data_dir):
    """The Batch tab's take-check setting reaches every line; the quality column shows each line's verdict and the
    "needs listening" filter keeps the lines a take policy left below a threshold (here: a scorer that fails the
    line whose text says so)."""
    from tests.unit.test_engine_takes import FakeScorer
    from tts_app.quality.scorer import TakeScores

    class TextScorer(FakeScorer):
        def score(self, samples, sampling_rate, text, **kwargs):
            scores = super().score(samples, sampling_rate, text, **kwargs)
            return TakeScores(**{**scores.__dict__, "error_rate": 0.8 if "bad" in text else 0.05})

    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "v.wav")
    with zipfile.ZipFile(tmp_path / "v.zip", "w") as zf:
        zf.write(tmp_path / "v.wav", "v.wav")
    rows = [{"input_text": "A good line.", "prompt_audio": "v.wav", "output_name": "a"},
            {"input_text": "A bad line.", "prompt_audio": "v.wav", "output_name": "b"}]
    (tmp_path / "job.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1), take_scorer=TextScorer())
    try:
        manager = JobManager(JobStore(tmp_path / "out"), runtime)
        ctx = SimpleNamespace(jobs=manager, engine=runtime.engine, upload_config=UploadConfig())
        settings = batch._settings(ctx, None, True, None, 0, "wav", "en", take_check="reroll")
        state = manager.submit(tmp_path / "job.jsonl", audio_zip=tmp_path / "v.zip", settings=settings)
        manager.wait(state.job_id, timeout_s=60)
        table = batch.results_html(ctx, state.job_id, "all", "en")
        assert "WER 0.05 · voice 0.90 · 0 re-roll(s)" in table and "needs listening: intelligibility" in table
        listen = batch.results_html(ctx, state.job_id, "needs_listening", "zh")
        assert listen.count("<tr>") == 2 and "需要试听" in listen and ">b<" in listen
    finally:
        runtime.close()


def test_the_job_prompt_cache_box_reaches_every_line_and_a_lines_own_field_wins(tmp_path, data_dir):
    """GLM-TTS's prompt cache (not the KV cache) as a Batch-tab job setting: unticked, every line runs without it
    unless the line says ``"prompt_cache": true``; ticked (the model's default) it is stored as "the model's
    choice"; on a model without one it is never stored."""
    from dataclasses import replace

    from tests.fakes import FAKE_GENERATION_DEFAULTS, fake_facts

    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "v.wav")
    with zipfile.ZipFile(tmp_path / "v.zip", "w") as zf:
        zf.write(tmp_path / "v.wav", "v.wav")
    rows = [{"input_text": "A first line.", "prompt_audio": "v.wav", "output_name": "job"},
            {"input_text": "A second line.", "prompt_audio": "v.wav", "output_name": "own", "prompt_cache": True}]
    (tmp_path / "job.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    facts = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, prompt_cache=True))
    runtime = Runtime.from_adapter(FakeAdapter(facts), "fake", EngineConfig(wait_window_ms=1))
    try:
        manager = JobManager(JobStore(tmp_path / "out"), runtime)
        ctx = SimpleNamespace(jobs=manager, engine=runtime.engine, upload_config=UploadConfig())
        assert batch._settings(ctx, None, True, None, 0, prompt_cache=True)["prompt_cache"] is None  # the default
        settings = batch._settings(ctx, None, True, None, 0, "wav", "en", prompt_cache=False)
        assert settings["prompt_cache"] is False
        state = manager.submit(tmp_path / "job.jsonl", audio_zip=tmp_path / "v.zip", settings=settings)
        manager.wait(state.job_id, timeout_s=60)
        out = manager.store.out_dir(state.job_id)
        ran = {name: json.loads((out / f"{name}.json").read_text(encoding="utf-8"))["generation"]["prompt_cache"]
               for name in ("job", "own")}
        assert ran == {"job": False, "own": True}
    finally:
        runtime.close()
    without = SimpleNamespace(engine=SimpleNamespace(facts=fake_facts()))
    assert batch._settings(without, None, True, None, 0, prompt_cache=False)["prompt_cache"] is None
