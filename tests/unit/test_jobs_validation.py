"""What JSONL validation catches before anything runs: control characters in paths, files that are not audio,
references too short to clone from, empty output names, letter-case mismatches, and a missing audio ZIP."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tts_app.jobs.runner import validate_job


@pytest.fixture()
def job_dir(tmp_path, data_dir) -> Path:
    (tmp_path / "refs").mkdir()
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "refs" / "a.wav")
    shutil.copy(data_dir / "en_male_1__too_short_0.4s.wav", tmp_path / "refs" / "short.wav")
    (tmp_path / "refs" / "notes.wav").write_text("not a recording\n" * 10, encoding="utf-8")
    shutil.copy(data_dir / "manifest.json", tmp_path / "refs" / "cover.mp3")  # JSON under an audio name
    return tmp_path


def _write(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n",
                    encoding="utf-8")
    return path


def _messages(report) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line, status, message in report.as_table():
        out.setdefault(line, []).append(f"{status}: {message}")
    return out


def test_a_windows_path_with_json_escapes_is_explained_with_forward_slashes(job_dir):
    path = job_dir / "job.jsonl"
    # Written by hand on Windows: \n and \t are valid JSON escapes (a newline, a tab), \v is not valid JSON.
    path.write_text('{"input_text": "Hi.", "prompt_audio": "refs\\new\\take.wav"}\n'
                    '{"input_text": "Hi.", "prompt_audio": "refs\\voice.wav"}\n', encoding="utf-8")
    rows = _messages(validate_job(path))
    assert "control characters (a newline, a tab)" in rows[1][0] and "forward slashes" in rows[1][0]
    assert "'refs/new/take.wav'" in rows[1][0]
    assert "Invalid \\escape" in rows[2][0] and "forward slash" in rows[2][0]


def test_files_that_are_not_audio_are_refused_at_validation(job_dir):
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "refs/notes.wav"},
                                          {"input_text": "Hi.", "prompt_audio": "refs/cover.mp3"},
                                          {"input_text": "Hi.", "prompt_audio": "refs/a.wav"}])
    report = validate_job(path)
    rows = _messages(report)
    assert "is not audio (the file is text)" in rows[1][0]
    assert "is not audio (the file is JSON text)" in rows[2][0]
    assert 3 not in rows and report.num_valid == 1


def test_a_reference_too_short_to_clone_from_is_refused_at_validation(job_dir):
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "refs/short.wav"}])
    rows = _messages(validate_job(path))
    assert "is only 0.40 s long; a reference needs at least 1 s of speech" in rows[1][0]


def test_an_empty_output_name_is_reported_not_silently_replaced(job_dir):
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "refs/a.wav", "output_name": " "}])
    report = validate_job(path)
    assert report.num_valid == 1
    assert _messages(report)[1] == ["warning: output_name is empty; the line number and first words are used "
                                    "instead, so the audio is '00001_Hi.wav'"]


def test_a_letter_case_mismatch_suggests_the_existing_name(job_dir):
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "REFS/A.WAV"}])
    assert "did you mean 'refs/a.wav'?" in _messages(validate_job(path))[1][0]
    with zipfile.ZipFile(job_dir / "voices.zip", "w") as zf:
        zf.write(job_dir / "refs" / "a.wav", "Voices/Anna.wav")
    path = _write(job_dir / "job2.jsonl", [{"input_text": "Hi.", "prompt_audio": "voices/anna.wav"}])
    assert "did you mean 'Voices/Anna.wav'?" in _messages(validate_job(path, audio_dir=job_dir / "voices.zip"))[1][0]


def test_zip_members_are_probed_too(job_dir):
    with zipfile.ZipFile(job_dir / "voices.zip", "w") as zf:
        zf.write(job_dir / "refs" / "a.wav", "a.wav")
        zf.write(job_dir / "refs" / "short.wav", "short.wav")
        zf.write(job_dir / "refs" / "notes.wav", "notes.wav", compress_type=zipfile.ZIP_DEFLATED)
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": name}
                                          for name in ("a.wav", "short.wav", "notes.wav")])
    rows = _messages(validate_job(path, audio_dir=job_dir / "voices.zip"))
    assert 1 not in rows and "0.40 s long" in rows[2][0] and "is not audio" in rows[3][0]


def test_without_the_zip_the_job_file_row_says_to_add_it(job_dir):
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": f"voices/{n}.wav"} for n in "xyz"])
    rows = _messages(validate_job(path))
    assert "3 line(s) name reference audio" in rows[0][0] and "add the ZIP" in rows[0][0]
    assert "no audio ZIP or folder was given" in rows[1][0]
    with zipfile.ZipFile(job_dir / "other.zip", "w") as zf:
        zf.write(job_dir / "refs" / "a.wav", "a.wav")
    rows = _messages(validate_job(path, audio_dir=job_dir / "other.zip"))
    assert 0 not in rows and "no audio ZIP" not in rows[1][0]  # a ZIP was given; the names are simply wrong


def test_with_a_zip_a_missing_file_names_the_places_looked_in_the_readers_language(job_dir):
    """A Chinese page's validation of a job with a ZIP lists where a missing file was looked for in Chinese: the
    job file's folder was an English string there (the run's own check said it in Chinese)."""
    with zipfile.ZipFile(job_dir / "voices.zip", "w") as zf:
        zf.write(job_dir / "refs" / "a.wav", "a.wav")
    path = _write(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "nope.wav"}])
    report = validate_job(path, audio_dir=job_dir / "voices.zip")
    zh = report.format_text("zh")
    assert "音频 ZIP 'voices.zip'、任务文件所在文件夹" in zh and "the job file's folder" not in zh
    assert "the job file's folder" in report.format_text("en")
