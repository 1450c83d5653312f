"""Start-up warm-up (tts_app/warmup.py): after it, a first request finds the heavy modules and the front end's
dictionaries loaded (it would otherwise load them itself, ~2 s holding Python's import lock), and the start-up log
says how long the warm-up took. A fresh interpreter, as at app start: this test process has most of them already."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyloudnorm", "scipy.signal", "av.filter", "jieba", "wetext", "soundfile")

SCRIPT = f"""
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
from tts_app.warmup import warm_up_in_background
heavy = {HEAVY!r}
print("before", [m for m in heavy if m in sys.modules])
warm_up_in_background(logging.getLogger("tts_app")).join()
print("after", [m for m in heavy if m not in sys.modules])
"""


def test_warm_up_loads_what_a_first_request_would_and_logs_its_time():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True)
    lines = out.stdout.splitlines()
    assert "before []" in lines, out.stdout  # a fresh process: nothing loaded yet
    assert "after []" in lines, out.stdout + out.stderr  # everything loaded by the warm-up
    logged = [line for line in lines if line.startswith("warm-up: ")]
    assert len(logged) == 1 and "off the request path" in logged[0], out.stdout
    for part in ("front end dictionaries", "effects (scipy, PyAV)", "encoders"):
        assert part in logged[0], logged[0]
