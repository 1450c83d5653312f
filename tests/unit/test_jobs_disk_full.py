"""Disk full mid-job (issue 25, Why 7): a line whose audio cannot be written is that line's failed record (in zh/en)
and the job goes on; when a record itself cannot be written the job stops, says how many lines are recorded, and a
resume records every line exactly once. ENOSPC is simulated (no small tmpfs can be mounted here)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.errors import TTSAppError
from tts_app.frontend.messages import localize, localize_record
from tts_app.jobs.results import RESULTS_NAME, ResultsWriter
from tts_app.jobs.runner import run_job
from tts_app.runtime import Runtime

NUM_LINES = 4


@pytest.fixture()
def job(tmp_path, data_dir) -> Path:
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "anna.wav")
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"input_text": f"Line {i}.", "prompt_audio": "anna.wav",
                                        "output_name": f"line{i}"}) + "\n" for i in range(1, NUM_LINES + 1)),
                    encoding="utf-8")
    return path


@pytest.fixture()
def runtime():
    runtime = Runtime.from_adapter(FakeAdapter(), "fake-model", EngineConfig(wait_window_ms=5.0))
    yield runtime
    runtime.close()


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / RESULTS_NAME).read_text(encoding="utf-8").splitlines()]


def _no_space(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_line_whose_audio_cannot_be_written_is_a_failed_record_and_the_job_goes_on(job, runtime, monkeypatch):
    import tts_app.outputs

    real = tts_app.outputs.save_outputs
    calls = []

    def second_fails(path, *args, **kwargs):
        calls.append(path)
        return _no_space() if len(calls) == 2 else real(path, *args, **kwargs)

    monkeypatch.setattr(tts_app.outputs, "save_outputs", second_fails)
    out = job.parent / "out"
    summary = run_job(job, out, runtime)
    records = _records(out)
    assert [r["line"] for r in records] == list(range(1, NUM_LINES + 1))  # every line, once
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 1 and summary.num_failed == 1 and summary.num_ok == NUM_LINES - 1
    assert "could not be written" in failed[0]["error"] and "No space left on device" in failed[0]["error"]
    assert "请释放磁盘空间" in localize_record(failed[0], "error", "zh")


def test_when_a_record_cannot_be_written_the_job_stops_resumably_and_says_so(job, runtime, monkeypatch):
    real_put = ResultsWriter.put
    puts = []

    def third_put_fails(self, record):
        puts.append(record["line"])
        return _no_space() if len(puts) == 3 else real_put(self, record)

    monkeypatch.setattr(ResultsWriter, "put", third_put_fails)
    out = job.parent / "out"
    with pytest.raises(TTSAppError) as stopped:
        run_job(job, out, runtime)
    text = localize(stopped.value.args[0], "en")
    assert "the job stopped: its results could not be written (No space left on device)" in text
    assert "resume the job" in text and "任务已停止" in localize(stopped.value.args[0], "zh")
    monkeypatch.setattr(ResultsWriter, "put", real_put)  # space freed
    summary = run_job(job, out, runtime, resume=True)
    records = _records(out)
    assert [r["line"] for r in records] == list(range(1, NUM_LINES + 1))
    assert all(r["status"] == "ok" for r in records)
    assert summary.num_skipped >= 1 and summary.num_skipped + summary.num_ok == NUM_LINES
