"""Durable jobs: ids and folders, background runs that outlive their caller, cancel, a server stop and a crash
that leave jobs "interrupted", and resume after a restart (a new JobManager on the same folder)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.errors import InputError
from tts_app.jobs.manager import JobManager
from tts_app.jobs.results import audio_decodes
from tts_app.jobs.store import JobStore, check_job_id
from tts_app.runtime import Runtime


@pytest.fixture()
def inputs(tmp_path, data_dir):
    src = tmp_path / "upload"
    src.mkdir()
    shutil.copy(data_dir / "en_female_1.wav", src / "voice.wav")
    import zipfile

    with zipfile.ZipFile(src / "voices.zip", "w") as zf:
        zf.write(src / "voice.wav", "voice.wav")
    rows = [{"input_text": f"Line {i} of the job.", "prompt_audio": "voice.wav", "output_name": f"line{i:02d}"}
            for i in range(1, 25)]
    rows[4] = {"input_text": "Missing voice.", "prompt_audio": "nobody.wav", "output_name": "line05"}
    (src / "tasks.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return src


@pytest.fixture()
def engine():
    """A runtime around a FakeAdapter whose generate waits at ``.gate`` (set: runs freely)."""
    gate = threading.Event()
    gate.set()
    runtime = Runtime.from_adapter(FakeAdapter(delay_s=0.02, gate=gate), "fake",
                                   EngineConfig(max_batch_size=2, wait_window_ms=2))
    runtime.gate = gate
    yield runtime
    gate.set()
    runtime.close()


def _wait_for(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _check_records(manager, job_id, num_lines=24):
    records = manager.results(job_id)
    assert [r["line"] for r in records] == list(range(1, num_lines + 1))  # one per line, in line order
    out = manager.store.out_dir(job_id)
    assert all(audio_decodes(out / r["audio_path"]) for r in records if r["status"] == "ok")
    return records


def test_a_job_gets_an_id_and_a_folder_and_runs_without_its_caller(tmp_path, inputs, engine):
    manager = JobManager(JobStore(tmp_path / "outputs"), engine)
    state = manager.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip", settings={"seed": 3},
                           owner="browser-1", names={"input": "my job.jsonl"})
    assert check_job_id(state.job_id) == state.job_id
    folder = tmp_path / "outputs" / "jobs" / state.job_id
    assert (folder / "job.json").is_file() and (folder / "input" / "audio.zip").is_file()
    # The uploads may vanish (a browser's temp files); the job has its own copies.
    shutil.rmtree(inputs)
    final = manager.wait(state.job_id, timeout_s=120)
    assert final.status == "done" and (final.num_ok, final.num_failed, final.num_lines) == (23, 1, 24)
    assert final.input_name == "my job.jsonl" and final.owner == "browser-1"
    records = _check_records(manager, state.job_id)
    assert records[4]["status"] == "failed" and "nobody.wav" in records[4]["error"]
    assert [s.job_id for s in manager.list(owner="browser-1")] == [state.job_id]
    assert manager.list(owner="someone-else") == []
    assert manager.results_zip(state.job_id).is_file()


def test_progress_is_visible_while_it_runs_and_cancel_records_every_line(tmp_path, inputs, engine):
    manager = JobManager(JobStore(tmp_path / "outputs"), engine)
    state = manager.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip")
    _wait_for(lambda: manager.get(state.job_id).num_done >= 4)
    running = manager.get(state.job_id)
    assert running.status == "running" and running.num_lines == 24 and 0 < running.num_done < 24
    assert running.eta_s is not None and running.eta_s > 0 and running.batch_size in (1, 2)
    on_disk = json.loads((manager.store.folder(state.job_id) / "job.json").read_text())
    assert on_disk["status"] == "running"  # a reader that is not this process sees it too
    assert manager.cancel(state.job_id)
    final = manager.wait(state.job_id, timeout_s=60)
    assert final.status == "cancelled" and final.num_cancelled > 0
    records = _check_records(manager, state.job_id)
    assert {r["status"] for r in records} >= {"ok", "cancelled"}
    assert not manager.cancel(state.job_id)  # nothing left to cancel


def test_a_server_stop_interrupts_and_a_restart_resumes_keeping_finished_lines(tmp_path, inputs, engine):
    store_root = tmp_path / "outputs"
    first = JobManager(JobStore(store_root), engine)
    state = first.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip")
    _wait_for(lambda: first.get(state.job_id).num_ok >= 3)
    first.shutdown()
    stopped = first.get(state.job_id)
    assert stopped.status == "interrupted"
    ok_before = {r["line"]: (first.store.out_dir(state.job_id) / r["audio_path"]).stat().st_mtime_ns
                 for r in first.results(state.job_id) if r["status"] == "ok"}
    with pytest.raises(InputError, match="stopping"):
        first.submit(tmp_path / "x.jsonl")

    second = JobManager(JobStore(store_root), engine)  # the restarted server
    assert second.get(state.job_id).status == "interrupted"
    second.resume(state.job_id)
    final = second.wait(state.job_id, timeout_s=120)
    assert final.status == "done" and final.num_skipped == len(ok_before) and final.num_ok == 23 - len(ok_before)
    _check_records(second, state.job_id)
    out = second.store.out_dir(state.job_id)
    assert {n: (out / f"line{n:02d}.wav").stat().st_mtime_ns for n in ok_before} == ok_before  # not redone


def test_a_crashed_servers_running_job_comes_back_interrupted(tmp_path, inputs, engine):
    store = JobStore(tmp_path / "outputs")
    state = store.create(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip")
    state.status, state.server_id = "running", "dead-server"  # as a killed process leaves it
    store.save(state)
    manager = JobManager(JobStore(tmp_path / "outputs"), engine)
    assert manager.get(state.job_id).status == "interrupted"
    manager.resume(state.job_id)
    assert manager.wait(state.job_id, timeout_s=120).status == "done"
    _check_records(manager, state.job_id)


def test_jobs_beyond_the_running_limit_wait_queued_and_a_queued_cancel_still_records_every_line(
        tmp_path, inputs, engine):
    manager = JobManager(JobStore(tmp_path / "outputs"), engine, max_running_jobs=1)
    engine.gate.clear()  # hold the engine inside its first batch
    first = manager.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip")
    second = manager.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip")
    _wait_for(lambda: manager.get(first.job_id).status == "running")
    time.sleep(0.5)
    assert manager.get(second.job_id).status == "queued"
    manager.cancel(second.job_id)
    assert manager.wait(second.job_id, timeout_s=60).status == "cancelled"
    assert {r["status"] for r in _check_records(manager, second.job_id)} == {"cancelled", "failed"}
    engine.gate.set()
    assert manager.wait(first.job_id, timeout_s=120).status == "done"


def test_job_ids_are_checked_and_never_name_another_folder(tmp_path, engine):
    manager = JobManager(JobStore(tmp_path / "outputs"), engine)
    for bad in ["../../etc", "", "20250101-120000-zzzzzzzz", "20250101-120000-1a2b3c4d/.."]:
        with pytest.raises(InputError, match="not a job id"):
            manager.get(bad)
    assert manager.get("20250101-120000-1a2b3c4d") is None
    with pytest.raises(InputError, match="no model"):
        JobManager(JobStore(tmp_path / "outputs"), None).submit(tmp_path / "x.jsonl")


def test_a_jobs_settings_never_change_the_servers_batch_ceiling(tmp_path, inputs, engine):
    """The batch-size ceiling is the operator's (--max-batch-size): a job asking for another one (an old job.json,
    an API caller) must not throttle every other user's requests."""
    manager = JobManager(JobStore(tmp_path / "outputs"), engine)
    state = manager.submit(inputs / "tasks.jsonl", audio_zip=inputs / "voices.zip",
                           settings={"seed": 0, "max_batch_size": 1})
    final = manager.wait(state.job_id, timeout_s=120)
    assert final.status == "done"
    assert engine.engine.stats().max_batch_size == 2 and engine.engine.batch_cap.max_batch_size == 2


def test_a_jobs_beam_settings_and_reference_cleanup_reach_its_lines(tmp_path, data_dir):
    """Issue 24: the Batch tab's job settings carry num_beams / length_penalty (a model with beams) and
    reference_cleanup; the job's lines run with them (a line's own fields still override)."""
    from dataclasses import replace

    from tests.fakes import FAKE_GENERATION_DEFAULTS, fake_app_context, fake_facts
    from tts_app.ui import batch

    seen: list = []

    class Beams(FakeAdapter):
        def preprocess(self, rows, params):
            seen.append((params.num_beams, params.length_penalty))
            return super().preprocess(rows, params)

    facts = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, num_beams=3, length_penalty=0.0))
    ctx = fake_app_context(tmp_path / "outputs", Beams(facts=facts))
    runtime = ctx.runtime
    try:
        settings = batch._settings(ctx, None, True, None, 0, "wav", "en", num_beams=2, length_penalty=1.0,
                                   reference_cleanup="full")
        assert (settings["num_beams"], settings["length_penalty"], settings["reference_cleanup"]) == (2, 1.0, "full")
        assert batch._settings(ctx, None, True, None, 0, "wav", "en", num_beams=3, length_penalty=0.0)["num_beams"] \
            is None  # the model's own: stored as not given
        with pytest.raises(Exception, match="num_beams=9 必须在 1..8 之间"):
            batch._settings(ctx, None, True, None, 0, "wav", "zh", num_beams=9)
        import zipfile

        with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
            zf.write(data_dir / "en_female_1.wav", "voice.wav")
        jsonl = tmp_path / "job.jsonl"
        jsonl.write_text(json.dumps({"input_text": "Hello there.", "prompt_audio": "voice.wav",
                                     "output_name": "a"}) + "\n"
                         + json.dumps({"input_text": "Hello again.", "prompt_audio": "voice.wav", "num_beams": 1,
                                       "reference_cleanup": "off", "output_name": "b"}) + "\n", encoding="utf-8")
        manager = JobManager(JobStore(tmp_path / "jobs"), runtime)
        final = manager.wait(manager.submit(jsonl, audio_zip=tmp_path / "voices.zip", settings=settings).job_id,
                             timeout_s=120)
        assert final.status == "done" and final.num_ok == 2, final
        out = manager.store.out_dir(final.job_id)
        sidecars = [json.loads((out / f"{n}.json").read_text(encoding="utf-8")) for n in "ab"]
    finally:
        ctx.close()
    assert sorted(seen) == [(1, 1.0), (2, 1.0)]
    assert [s["reference"]["cleanup"] for s in sidecars] == ["full", "off"]
