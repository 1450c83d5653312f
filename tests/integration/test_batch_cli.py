"""``python -m tts_app batch`` end to end on a tiny random VibeVoice checkpoint (real adapter, engine, references)."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest
import soundfile as sf

from tts_app.jobs.cli import main

TINY_FLAGS = ["--max-new-tokens", "12", "--device", "cpu", "--dtype", "float32"]


@pytest.fixture(scope="module")
def tiny_model(tiny_checkpoint) -> Path:
    return tiny_checkpoint("vibevoice")


@pytest.fixture()
def job_dir(tmp_path, data_dir) -> Path:
    d = tmp_path / "job"
    (d / "voices").mkdir(parents=True)
    shutil.copy(data_dir / "en_female_2.wav", d / "voices" / "anna.wav")
    shutil.copy(data_dir / "zh_female_1.wav", d / "voices" / "mei.wav")
    return d


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def records(out_dir: Path) -> list[dict]:
    path = out_dir / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.endswith("}")]


def _start_batch(path: Path, out: Path, model: Path, job_dir: Path):
    """``python -m tts_app batch PATH`` (batch size 1) started in its own process, forked from the tests' forkserver
    (``tests.ui_app.start_python_forked``: what is under test is the run, not the imports); stdout and stderr go to
    ``job_dir / "stdout"`` and ``job_dir / "stderr"``."""
    from tests.ui_app import start_python_forked

    return start_python_forked("-m", "tts_app", "batch", str(path), "--out-dir", str(out), "--model", str(model),
                               *TINY_FLAGS, "--batch-size", "1", stdout_path=job_dir / "stdout",
                               stderr_path=job_dir / "stderr", env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})


def test_mixed_file_exit_1_good_lines_have_audio_bad_lines_named(job_dir, tiny_model, capsys):
    path = write_jsonl(job_dir / "tasks.jsonl", [
        {"input_text": "Good morning to you.", "prompt_audio": "voices/anna.wav", "output_name": "hello"},
        '{"input_text": "oops" "prompt_audio": "voices/anna.wav"}',
        {"prompt_audio": "voices/anna.wav"},
        {"input_text": "Nobody home.", "prompt_audio": "voices/nobody.wav"},
        {"input_text": "Escape!", "prompt_audio": "voices/anna.wav", "output_name": "../escaped"},
        {"input_text": "Twice.", "prompt_audio": "voices/mei.wav", "output_name": "hello"},
        {"syn_text": "你好，欢迎收听。", "prompt_speech": "voices/mei.wav", "uttid": "zh"},
    ])
    out = job_dir / "out"
    status = main([str(path), "--out-dir", str(out), "--model", str(tiny_model), *TINY_FLAGS])
    err = capsys.readouterr().err
    assert status == 1
    by_line = {r["line"]: r for r in records(out)}
    assert sorted(by_line) == list(range(1, 8))
    assert {n for n, r in by_line.items() if r["status"] == "ok"} == {1, 7}
    for n, needle in [(2, "bad JSON"), (3, "input_text"), (4, "nobody.wav"), (5, "contains a path"),
                      (6, "lines 1 and 6")]:
        assert by_line[n]["status"] == "failed" and needle in by_line[n]["error"], by_line[n]
        assert f"line {n}: " in err  # listed on stderr too
    for name in ("hello", "zh"):
        data, sr = sf.read(out / f"{name}.wav")
        assert len(data) > 0 and sr == 24000
    assert not list(job_dir.glob("escaped*")) and not list(out.glob("*escaped*"))
    # each ok line has a complete sidecar next to its audio, named in its results record
    from tests.sidecar_check import check_sidecar

    for n, name, text, voice in [(1, "hello", "Good morning to you.", "anna.wav"), (7, "zh", "你好，欢迎收听。",
                                                                                    "mei.wav")]:
        meta = check_sidecar(out / f"{name}.wav", entry_point="job", text=text, reference=job_dir / "voices" / voice,
                             model_id=str(tiny_model))
        assert by_line[n]["metadata_path"] == f"{name}.json"
        assert meta["job"] == {"file": "tasks.jsonl", "line": n, "output_name": name}
        assert meta["generation"]["max_new_tokens"] == 12


def test_usage_errors_exit_2(job_dir, tiny_model, capsys):
    assert main(["--out-dir", str(job_dir / "o")]) == 2  # missing TASKS.jsonl
    assert main([str(job_dir / "absent.jsonl"), "--out-dir", str(job_dir / "o")]) == 2
    path = write_jsonl(job_dir / "t.jsonl", [{"input_text": "Hi.", "prompt_audio": "voices/anna.wav"}])
    assert main([str(path), "--out-dir", str(job_dir / "o"), "--model", str(job_dir / "voices")]) == 2
    assert "config.json" in capsys.readouterr().err  # the model-load message reaches the user
    assert main([str(path), "--out-dir", str(job_dir / "o"), "--memory-budget", "lots"]) == 2
    capsys.readouterr()
    assert main([str(path), "--out-dir", str(job_dir / "o"), "--device", "gpu0"]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "gpu0" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_small_job_survives_simulated_oom_on_the_tiny_model(job_dir, tiny_model):
    rows = [{"input_text": f"Short line {w}.", "prompt_audio": "voices/anna.wav"}
            for w in ("one", "two", "three", "four", "five", "six")]
    path = write_jsonl(job_dir / "tasks.jsonl", rows)
    out = job_dir / "out"
    status = main([str(path), "--out-dir", str(out), "--model", str(tiny_model), *TINY_FLAGS,
                   "--batch-size", "8", "--simulate-oom-above-batch", "2"])
    assert status == 0
    final = records(out)
    assert len(final) == 6 and all(r["status"] == "ok" for r in final)
    assert all(sf.info(out / r["audio_path"]).frames > 0 for r in final)


@pytest.mark.slow
def test_sigkill_midway_then_resume_finishes_every_line_once(job_dir, tiny_model):
    voices = ["voices/anna.wav", "voices/mei.wav"]
    rows = [{"input_text": f"This is sentence number {w} of the story.", "prompt_audio": voices[i % 2]}
            for i, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split())]
    path = write_jsonl(job_dir / "tasks.jsonl", rows)
    out = job_dir / "out"
    proc = _start_batch(path, out, tiny_model, job_dir)
    try:
        deadline = time.monotonic() + 240
        while not any(r["status"] == "ok" for r in records(out)):
            assert proc.poll() is None, "the job ended before it could be killed"
            assert time.monotonic() < deadline, "no results line appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    before = [r for r in records(out) if r["status"] == "ok"]
    assert 1 <= len(before) < len(rows)  # killed midway

    assert main([str(path), "--out-dir", str(out), "--model", str(tiny_model), *TINY_FLAGS, "--resume"]) == 0
    final = records(out)
    assert sorted(r["line"] for r in final) == list(range(1, len(rows) + 1))  # every line exactly once
    assert all(r["status"] == "ok" for r in final)
    assert all(r in final for r in before)  # lines finished before the kill were skipped, not redone
    for r in final:
        data, _ = sf.read(out / r["audio_path"])
        assert len(data) > 0
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [r["audio_path"] for r in final] + [r["metadata_path"] for r in final] + ["results.jsonl"])


@pytest.mark.slow
def test_ctrl_c_cancels_records_every_line_and_exits_130_then_resume_finishes(job_dir, tiny_model):
    rows = [{"input_text": f"This is sentence number {i} of the story.", "prompt_audio": "voices/anna.wav"}
            for i in range(1, 13)]
    path = write_jsonl(job_dir / "tasks.jsonl", rows)
    out = job_dir / "out"
    proc = _start_batch(path, out, tiny_model, job_dir)
    try:
        deadline = time.monotonic() + 240
        while not any(r["status"] == "ok" for r in records(out)):
            assert proc.poll() is None, "the job ended before it could be interrupted"
            assert time.monotonic() < deadline, "no results line appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (job_dir / "stderr").read_text(errors="replace")
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "cancelling" in err
    final = records(out)
    assert [r["line"] for r in final] == list(range(1, 13))  # every line has its record, in line order
    assert {r["status"] for r in final} == {"ok", "cancelled"}
    assert main([str(path), "--out-dir", str(out), "--model", str(tiny_model), *TINY_FLAGS, "--resume"]) == 0
    assert all(r["status"] == "ok" for r in records(out))


def test_lines_without_a_transcript_get_one_from_the_asr_model(job_dir, tiny_model, tiny_whisper, capsys):
    path = write_jsonl(job_dir / "tasks.jsonl", [
        {"input_text": "今天天气很好。", "prompt_audio": "voices/mei.wav", "output_name": "auto"},
        {"input_text": "Hello there.", "prompt_audio": "voices/anna.wav", "prompt_text": "My own words.",
         "output_name": "own"},
    ])
    out = job_dir / "out"
    status = main([str(path), "--out-dir", str(out), "--model", str(tiny_model), *TINY_FLAGS,
                   "--asr-model", str(tiny_whisper)])
    assert status == 0, capsys.readouterr().err
    auto = json.loads((out / "auto.json").read_text(encoding="utf-8"))
    own = json.loads((out / "own.json").read_text(encoding="utf-8"))
    assert auto["reference"]["text"] and set(auto["reference"]["text"]) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert any("transcribed automatically" in w for w in auto["warnings"])
    assert own["reference"]["text"] == "My own words."  # a given transcript is kept
    assert not any("transcribed" in w for w in own["warnings"])
