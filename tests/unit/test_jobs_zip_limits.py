"""Audio ZIPs of a job (issue 25, Build 5): a member that unpacks to far more than its packed size (a ZIP bomb) is
refused in words before anything is unpacked, and a job unpacks only the members its lines name."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.errors import InputError
from tts_app.frontend.messages import localize
from tts_app.jobs.runner import run_job, validate_job
from tts_app.runtime import Runtime


def _job(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_zip_bomb_is_refused_in_words_before_anything_is_unpacked(tmp_path, data_dir):
    bomb = tmp_path / "voices.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(data_dir / "en_female_1.wav", "anna.wav")
        zf.writestr("padding.wav", b"\0" * 50 * 1000**2)  # 50 MB of zeros pack into ~50 KB
    assert bomb.stat().st_size < 500_000
    job = _job(tmp_path / "tasks.jsonl", [{"input_text": "Hi.", "prompt_audio": "anna.wav"}])
    with pytest.raises(InputError) as caught:
        validate_job(job, audio_dir=bomb)
    assert "'padding.wav' would unpack to" in localize(caught.value.args[0], "en")
    assert "ZIP 炸弹" in localize(caught.value.args[0], "zh")
    out = tmp_path / "out"
    runtime = Runtime.from_adapter(FakeAdapter(), "fake-model", EngineConfig(wait_window_ms=5.0))
    try:
        with pytest.raises(InputError, match="ZIP bomb"):
            run_job(job, out, runtime, audio_dir=bomb)
    finally:
        runtime.close()
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1000**2  # nothing unpacked


def test_a_job_unpacks_only_the_members_its_lines_name(tmp_path, data_dir):
    archive = tmp_path / "voices.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(data_dir / "en_female_1.wav", "spk/anna.wav")
        for i in range(5):  # voices this job does not use
            zf.write(data_dir / "zh_male_1.wav", f"unused/wei_{i}.wav")
        zf.writestr("spk/notes.wav", "these are notes, not a recording\n" * 8)
    job = _job(tmp_path / "tasks.jsonl", [{"input_text": "From the zip.", "prompt_audio": "spk/anna.wav"},
                                          {"input_text": "Again.", "prompt_audio": "spk/anna.wav"},
                                          {"input_text": "Notes.", "prompt_audio": "spk/notes.wav"}])
    out = tmp_path / "out"
    unpacked: list[set[str]] = []

    def look(done, total, info):  # while the job runs, its ZIP is unpacked in out/.reference_audio
        root = out / ".reference_audio"
        unpacked.append({p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()})

    runtime = Runtime.from_adapter(FakeAdapter(), "fake-model", EngineConfig(wait_window_ms=5.0))
    try:
        summary = run_job(job, out, runtime, audio_dir=archive, progress=look)
    finally:
        runtime.close()
    assert summary.num_ok == 2 and summary.num_failed == 1
    # a member a line names that is no audio fails with its own reason, as validation says, not "not found"
    (failed_line, error), = summary.failed
    assert failed_line == 3 and "is not audio" in localize(error, "en")
    assert unpacked and all(files == {"spk/anna.wav", "spk/notes.wav"} for files in unpacked)
    shutil.rmtree(out)
