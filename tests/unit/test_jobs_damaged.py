"""Start-up never fails on a job's files (issue 25, Build 3): a ``job.json`` that is empty, truncated, not an object
or holds a value of the wrong type is logged, the job listed as "damaged" (to its owner when the file still names
one) with its outputs kept, never resumed or rewritten, and removed like any ended job once old."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from tts_app.config import EngineConfig, ModelConfig
from tts_app.errors import InputError
from tts_app.jobs.store import JobStore
from tts_app.output_layout import STATE_NAME

CORRUPTIONS = {
    "a JSON list": lambda state: "[]",
    "a date as text": lambda state: json.dumps({**state, "finished_s": "yesterday"}),
    "a count as text": lambda state: json.dumps({**state, "num_done": "3"}),
    "empty": lambda state: "",
    "truncated": lambda state: json.dumps(state)[:40],
    "not UTF-8": lambda state: "\udcff",
    "another job's id": lambda state: json.dumps({**state, "job_id": "20200101-000000-00000000"}),
}


def _damaged_job(tmp_path, how: str, owner: str = "owner-1") -> tuple[JobStore, str]:
    (tmp_path / "tasks.jsonl").write_text('{"input_text": "Hi."}\n', encoding="utf-8")
    store = JobStore(tmp_path / "out")
    state = store.create(tmp_path / "tasks.jsonl", owner=owner)
    state.status, state.finished_s = "done", time.time()
    store.save(state)
    (store.out_dir(state.job_id) / "0001.wav").write_bytes(b"RIFF")
    text = CORRUPTIONS[how](state.to_dict())
    (store.folder(state.job_id) / STATE_NAME).write_bytes(text.encode("utf-8", "surrogateescape"))
    return store, state.job_id


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_the_server_starts_and_lists_the_job_as_damaged_with_its_outputs(tmp_path, how, caplog):
    from tests.fakes import FakeAdapter
    from tts_app.runtime import Runtime
    from tts_app.ui.context import AppContext, AppSettings

    store, job_id = _damaged_job(tmp_path, how)
    engine = EngineConfig(wait_window_ms=0)
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=engine, output_root=tmp_path / "out"),
                     runtime=Runtime.from_adapter(FakeAdapter(), "fake", engine))
    with caplog.at_level(logging.WARNING, logger="tts_app.jobs.store"):
        ctx.start_jobs()  # what the server runs at start-up: prune, then recover
    try:
        (state,) = store.list()
        assert state.job_id == job_id and state.status == "damaged"
        assert f"{STATE_NAME} cannot be read" in state.error and "outputs are kept" in state.error
        assert (store.out_dir(job_id) / "0001.wav").exists()
        assert job_id in caplog.text and "damaged" in caplog.text
        with pytest.raises(InputError, match="cannot be resumed"):
            ctx.jobs.resume(job_id)
    finally:
        ctx.close()


def test_a_damaged_job_that_still_names_its_owner_is_listed_to_that_owner(tmp_path):
    store, job_id = _damaged_job(tmp_path, "a date as text", owner="mine")
    assert [s.job_id for s in store.list(owner="mine")] == [job_id]
    assert store.list(owner="theirs") == []
    (tmp_path / "b").mkdir()
    store, _ = _damaged_job(tmp_path / "b", "truncated", owner="mine")
    assert store.list(owner="mine") == []  # unreadable: nobody's, only the age-based clean-up sees it


@pytest.mark.parametrize("how", ["a date as text", "empty", "a JSON list"])
def test_an_old_damaged_job_is_removed_like_any_ended_job(tmp_path, how):
    store, job_id = _damaged_job(tmp_path, how)
    assert store.prune(max_age_s=3600) == 0  # just written: kept
    old_s = time.time() - 7200
    os.utime(store.folder(job_id) / STATE_NAME, (old_s, old_s))
    assert store.prune(max_age_s=3600) == 1
    assert not store.folder(job_id).exists()


def test_a_damaged_results_file_keeps_its_readable_records(tmp_path):
    from tts_app.jobs.results import read_results
    from tts_app.output_layout import RESULTS_NAME

    (tmp_path / RESULTS_NAME).write_text("\n".join([
        json.dumps({"line": 1, "status": "ok"}), '{"line": 2, "status": "ok", "x": ' + "9" * 5000 + "}",
        "[" * 100_000, '{"line": 3, "sta', json.dumps({"line": 4, "status": "failed"})]) + "\n", encoding="utf-8")
    assert sorted(read_results(tmp_path)) == [1, 4]
