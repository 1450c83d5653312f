"""Launch the real app (tiny checkpoint) in-process or as a subprocess, for the UI tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Debian's chromium (playwright cannot download its own browser here)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: headless on a machine without a GPU, network or user profile (no sandbox: tests run as root)
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")


def playwright_or_skip():
    """``playwright.sync_api``; skips the calling test module when playwright or Debian's chromium is missing
    (``scripts/test.sh`` installs both)."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (scripts/test.sh installs it)", allow_module_level=True)
    return sync_api


def launch_chromium(playwright, *extra_args: str):
    """Headless Debian chromium through a started ``sync_playwright()``, with ``CHROMIUM_ARGS`` and
    ``extra_args``; close it with ``browser.close()``."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*CHROMIUM_ARGS, *extra_args])


def screenshot_dir() -> Path:
    """Where browser tests save their screenshots: ``$TTS_APP_SCREENSHOT_DIR`` if set, else a folder in the system's
    temporary directory (tests never write into the checkout)."""
    import tempfile

    folder = Path(os.environ.get("TTS_APP_SCREENSHOT_DIR") or Path(tempfile.gettempdir()) / "tts_app-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(model_dir: Path, *extra: str, lang: str | None = None, timeout_s: float = 180.0,
              port: int | None = None, host: str | None = "127.0.0.1", env: dict[str, str] | None = None,
              ready_path: str = ""):
    """Start ``python app.py --model DIR`` on a loopback port (free one unless given); returns (process, url) once
    ``url + ready_path`` answers 200 (the web page: the model has loaded and the UI is mounted).

    Args:
        port: ``--port`` (None: a free one).
        host: ``--host`` (None: not given, the app picks it from ``env``'s GRADIO_SERVER_NAME).
        env: extra environment variables.

    Without ``--output-dir`` in ``extra`` the app keeps its outputs in a temporary folder next to the model's (never
    the user's home)."""
    port = free_port() if port is None else port
    if "--output-dir" not in extra:
        extra = (*extra, "--output-dir", str(model_dir.parent / f"outputs-{port}"))
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1", **(env or {}))
    cmd = [sys.executable, str(ROOT / "app.py"), "--model", str(model_dir), "--device", "cpu", "--port", str(port),
           *(["--host", host] if host is not None else []), *extra]
    if lang:
        cmd += ["--lang", lang]
    log = open(model_dir.parent / f"app-{port}.log", "a")  # a restart on the same port appends
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    address = host if host is not None else env.get("GRADIO_SERVER_NAME", "127.0.0.1")
    url = f"http://{address}:{port}/"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited early: {Path(log.name).read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url + ready_path, timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"app did not start in {timeout_s} s: {Path(log.name).read_text()[-3000:]}")


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
