"""``python -m tts_app batch`` exits with the status its help promises (0 all ok, 1 some lines failed, 2 usage or
set-up), for every family, over repeated runs, and never aborts at exit.

The abort this guards against ("terminate called without an active exception", status 134) came from the engine's
worker thread still running while the interpreter finalised; it happened in about one run in three. So besides the
exit status, each run checks the cause directly: no engine worker thread is alive when ``main`` returns. Every
family runs in one process (``RUNNER``), one family after another, so each family's engine must be gone before the
next starts, and the interpreter finalises once after all of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ["vibevoice", "csm", "dia", "higgs"]

# For each (family, model) pair: runs ``batch`` three times in this one process (ok job, job with a bad line, ok job
# again), printing each status and the engine threads still alive after it, then exits with the last status. One
# process for every family: a fresh interpreter's imports cost more than the twelve runs (2 shared cores).
RUNNER = textwrap.dedent("""
    import sys, threading
    from tts_app.__main__ import main
    ok_job, mixed_job, out, *pairs = sys.argv[1:]
    status = 0
    for family, model in zip(pairs[::2], pairs[1::2]):
        flags = ["--model", model, "--device", "cpu", "--dtype", "float32", "--max-new-tokens", "20"]
        for n, job in enumerate([ok_job, mixed_job, ok_job]):
            status = main(["batch", job, "--out-dir", f"{out}/{family}/{n}", *flags])
            alive = [t.name for t in threading.enumerate() if t.name == "tts-engine-worker" and t.is_alive()]
            print(f"RUN {family} {n} status={status} alive={alive}", flush=True)
    sys.exit(status)
""")


@pytest.mark.slow
def test_batch_exit_status_over_repeated_runs_of_every_family(tiny_checkpoint, data_dir, tmp_path):
    shutil.copy(data_dir / "en_female_2.wav", tmp_path / "voice.wav")
    text = "Please call Stella."
    line = {"input_text": "Good morning.", "prompt_audio": "voice.wav", "prompt_text": text}
    ok_job = tmp_path / "ok.jsonl"
    ok_job.write_text(json.dumps(line) + "\n", encoding="utf-8")
    mixed_job = tmp_path / "mixed.jsonl"
    mixed_job.write_text(json.dumps(line) + "\n" + json.dumps({"input_text": "No voice.", "prompt_audio": "nope.wav"})
                         + "\n", encoding="utf-8")
    pairs = [str(x) for family in FAMILIES for x in (family, tiny_checkpoint(family))]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(ok_job), str(mixed_job), str(tmp_path / "out"), *pairs],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    runs = [line for line in proc.stdout.splitlines() if line.startswith("RUN ")]
    assert runs == [f"RUN {family} {n} status={status} alive=[]" for family in FAMILIES
                    for n, status in enumerate([0, 1, 0])], proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminate called" not in proc.stderr


def test_batch_usage_and_setup_errors_exit_2(tmp_path, data_dir):
    from tts_app.cli.batch import main

    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": "Hi.", "prompt_audio": "voice.wav"}) + "\n", encoding="utf-8")
    shutil.copy(data_dir / "en_female_2.wav", tmp_path / "voice.wav")
    assert main([str(job)]) == 2  # --out-dir missing
    assert main([str(job), "--out-dir", str(tmp_path / "o"), "--model", str(tmp_path / "no-model")]) == 2
    assert main([str(tmp_path / "missing.jsonl"), "--out-dir", str(tmp_path / "o")]) == 2
