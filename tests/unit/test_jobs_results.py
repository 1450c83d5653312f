"""results.jsonl: one record per line, in line order, also when lines finish out of order, when the job is
cancelled part way, and after a kill (the journal)."""

from __future__ import annotations

import json
import random
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.jobs.results import ResultsWriter, line_record, make_results_zip, read_results
from tts_app.jobs.runner import run_job
from tts_app.output_layout import JOURNAL_NAME, RESULTS_NAME
from tts_app.runtime import Runtime


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_records_put_in_any_order_are_written_in_line_order(tmp_path):
    writer = ResultsWriter(tmp_path)
    lines = [1, 2, 4, 7, 8, 9]  # blank lines 3, 5, 6 have no record
    for n in lines:
        writer.expect(n)
    order = lines[:]
    random.Random(3).shuffle(order)
    for step, n in enumerate(order, start=1):
        writer.put(line_record(n, f"n{n}", "ok", audio_path=f"n{n}.wav"))
        written = [r["line"] for r in _lines(tmp_path / RESULTS_NAME)]
        assert written == lines[: len(written)]  # always an in-order prefix
        assert len(read_results(tmp_path)) == step  # nothing lost: the journal holds the rest
    writer.close()
    assert [r["line"] for r in _lines(tmp_path / RESULTS_NAME)] == lines
    assert not (tmp_path / JOURNAL_NAME).exists()
    with pytest.raises(ValueError, match="status"):
        line_record(1, "a", "skipped")
    with pytest.raises(ValueError, match="plain file name"):
        line_record(1, "a", "ok", audio_path="/tmp/a.wav")


def test_a_line_gets_exactly_one_record(tmp_path):
    writer = ResultsWriter(tmp_path)
    writer.expect(1)
    writer.put(line_record(1, "a", "failed", error="bad"))
    with pytest.raises(ValueError, match="second record"):
        writer.put(line_record(1, "a", "ok"))
    with pytest.raises(ValueError, match="not expected"):
        writer.put(line_record(2, "b", "ok"))
    writer.close()


def test_a_kill_leaves_a_prefix_plus_a_journal_that_read_results_merges(tmp_path):
    writer = ResultsWriter(tmp_path)
    for n in (1, 2, 3):
        writer.expect(n)
    writer.put(line_record(3, "c", "ok", audio_path="c.wav"))
    writer.put(line_record(1, "a", "ok", audio_path="a.wav"))
    # killed here: line 2 never finished; line 3 is only in the journal
    assert [r["line"] for r in _lines(tmp_path / RESULTS_NAME)] == [1]
    assert sorted(read_results(tmp_path)) == [1, 3]


@pytest.fixture()
def job(tmp_path, data_dir):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "voice.wav")
    path = tmp_path / "job.jsonl"
    rows = [json.dumps({"input_text": f"Line number {i}.", "prompt_audio": "voice.wav"}) for i in range(1, 51)]
    rows.insert(20, "")  # a blank line: no record, and line numbers stay those of the file
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_cancel_at_line_10_of_50_records_all_50_lines_in_order(job, tmp_path):
    runtime = Runtime.from_adapter(FakeAdapter(delay_s=0.01), "fake", EngineConfig(max_batch_size=2, wait_window_ms=2))
    cancel = threading.Event()

    def progress(done, total, info):
        if done >= 10:
            cancel.set()

    try:
        summary = run_job(job, tmp_path / "out", runtime, cancel_event=cancel, progress=progress)
    finally:
        runtime.close()
    records = _lines(tmp_path / "out" / RESULTS_NAME)
    expected_lines = [n for n in range(1, 52) if n != 21]
    assert [r["line"] for r in records] == expected_lines  # 50 records, one per line, in line order
    statuses = [r["status"] for r in records]
    assert set(statuses) == {"ok", "cancelled"} and statuses.count("ok") >= 10
    assert summary.num_ok + summary.num_cancelled == 50 == summary.num_lines
    assert any(r["error"] == "cancelled before it ran" for r in records)
    assert all((tmp_path / "out" / r["audio_path"]).is_file() for r in records if r["status"] == "ok")
    with zipfile.ZipFile(make_results_zip(tmp_path / "out")) as zf:
        zipped = [json.loads(x) for x in zf.read(RESULTS_NAME).decode("utf-8").splitlines()]
    assert zipped == records
    assert all(r["audio_path"] is None or "/" not in r["audio_path"] for r in zipped)
