"""Launch the real app (tiny checkpoint) for the UI tests, and the browser helpers.

``start_app`` runs ``app.py`` in its own process: forked from a forkserver that imported the app once per test session
(``tests/app_imports.py``; a fresh interpreter spends most of a start importing torch, transformers and gradio), or
as a fresh ``python app.py`` when the test's environment must be seen at import. ``run_python_forked`` and
``start_python_forked`` do the same for a ``python`` command whose run, not its start, is under test."""

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


def upload_files(page, files: dict, timeout_ms: int = 60_000) -> None:
    """Choose files in gradio File boxes (``{"#jsonl": path, "#audio-zip": path}``: box selector -> file) and wait
    until each box lists its file by name, as a user waits before pressing Run: the upload has finished and the
    page holds the file."""
    for box, path in files.items():
        page.locator(f"{box} input[type=file]").set_input_files(str(path))
    for box, path in files.items():
        page.locator(f'{box} td.filename[aria-label="{Path(path).name}"]').wait_for(timeout=timeout_ms)


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


#: ``PATH`` of a fresh machine: the folder of the Python running the tests, nothing else (apps are started by that
#: interpreter's absolute path, so they need no other). The forkserver imports ``APP_IMPORTS`` with this ``PATH``, so an
#: app forked with it has never seen another one: as a fresh ``python app.py`` started with it (the browser tests'
#: ``fresh_machine_env``), without paying the imports again.
FRESH_MACHINE_PATH = os.path.dirname(sys.executable)

#: Preloaded by the forkserver ``start_app`` forks its apps from: what ``app.py`` imports before it serves (~85 % of a
#: start; see the module). Imported when the tests run from the checkout's root, as ``scripts/test.sh`` does (else
#: each app imports it itself: slower, the same app).
APP_IMPORTS = ("tests.app_imports",)


def _read_at_start_up() -> frozenset[str]:
    """Environment variables the app reads when it starts (``tts_app.cli.args``, ``tts_app.ui.launch``), not while
    modules are imported: an app given only these is still forked. Any other variable starts a fresh
    ``python app.py``, except ``PATH`` = ``FRESH_MACHINE_PATH``, the one the forkserver imported with (see
    ``_forks_as_started``)."""
    from tts_app.cli.args import API_KEY_ENV, HOST_ENV, PORT_ENV, UI_AUTH_ENV
    from tts_app.ui.launch import ARGS_ENV

    # GRADIO_TEMP_DIR: gradio's server reads its upload folder when it starts (``gradio.utils.get_upload_folder``, in
    # ``App.__init__`` and ``Blocks.__init__``); only its video / MCP helpers, which the app does not use, read it
    # at import
    return frozenset({API_KEY_ENV, HOST_ENV, PORT_ENV, UI_AUTH_ENV, ARGS_ENV, "GRADIO_TEMP_DIR"})


def _forks_as_started(env: dict[str, str]) -> bool:
    """Whether an app given the extra environment ``env`` is the same forked as started fresh: every variable is
    read at start-up only, or is the ``PATH`` the forkserver imported with (``FRESH_MACHINE_PATH``; another ``PATH``
    could change what was found on it at import)."""
    others = set(env) - _read_at_start_up()
    return not others or (others == {"PATH"} and env["PATH"] == FRESH_MACHINE_PATH)


def _forkserver():
    """The ``forkserver`` multiprocessing context, preloading ``APP_IMPORTS`` (set before its server starts)."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(APP_IMPORTS))
    return context


_forkserver_started = False


def warm_up_app_imports() -> None:
    """Start the forkserver now, so it imports ``APP_IMPORTS`` on the second core while other tests run (the first
    ``start_app`` would otherwise wait for it). It runs with ``PATH`` = ``FRESH_MACHINE_PATH`` (each forked process
    then sets its own environment, ``PATH`` included). Its own output (import warnings) goes to
    ``tts_app-forkserver.log`` in the system's temporary folder, not into the test report."""
    import tempfile
    from multiprocessing import forkserver

    global _forkserver_started
    if _forkserver_started:
        return
    _forkserver_started = True
    _forkserver()
    log_path = Path(tempfile.gettempdir()) / "tts_app-forkserver.log"
    saved = [os.dup(1), os.dup(2)]
    saved_path = os.environ.get("PATH")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.environ["PATH"] = FRESH_MACHINE_PATH
        forkserver.ensure_running()  # the server inherits fds 1 and 2 and the environment as they are now
    finally:
        if saved_path is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = saved_path
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)


def _run_app(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Body of a forked app: ``python app.py ARGV`` in the checkout's root with environment ``env``, stdout and
    stderr appended to ``log_path`` (what ``start_app`` gives a subprocess)."""
    import runpy

    os.environ.clear()
    os.environ.update(env)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    os.chdir(ROOT)
    sys.argv = [str(ROOT / "app.py"), *argv]
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")


def _run_python(args: list[str], env: dict[str, str], stdout_path: str, stderr_path: str) -> None:
    """Body of a forked ``python ARGS`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``): run in the checkout's root
    with environment ``env``, stdout and stderr written to the two files."""
    import runpy

    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        file_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file_fd, fd)
        os.close(file_fd)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    os.chdir(ROOT)
    extra_path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra_path if p not in sys.path]  # as python reads $PYTHONPATH at start-up
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path.insert(0, str(Path(args[0]).resolve().parent))  # as python puts a script's folder first
        runpy.run_path(args[0], run_name="__main__")


def start_python_forked(*args: str, stdout_path: Path, stderr_path: Path,
                        env: dict[str, str] | None = None) -> "ForkedApp":
    """Start ``python ARGS`` (``"-m", MODULE, ...`` or ``SCRIPT, ...``) in a process forked from the apps'
    forkserver (``APP_IMPORTS`` already imported), run from the checkout's root with its stdout and stderr written
    to the two files; returns it as a ``ForkedApp`` (``poll``, ``send_signal``, ``wait``, ``returncode``: the exit
    status, negative signal number when killed). For a command whose run, not its start, is under test: the output
    lacks what a fresh interpreter prints while importing (warnings), and it exits without the interpreter's
    finalisation. ``env``: variables added to this process's environment."""
    child_env = dict(os.environ, **(env or {}))
    warm_up_app_imports()
    process = _forkserver().Process(target=_run_python, args=(list(args), child_env, str(stdout_path),
                                                              str(stderr_path)),
                                    name=f"python {' '.join(args)}", daemon=True)
    process.start()
    return ForkedApp(process)


def run_python_forked(*args: str, env: dict[str, str] | None = None,
                      timeout_s: float = 600.0) -> subprocess.CompletedProcess:
    """``start_python_forked`` run to its end, like ``subprocess.run(..., capture_output=True, text=True)`` run
    from the checkout's root: the exit status (negative signal number when killed), stdout and stderr.

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` (it is killed).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tts_app-run-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = start_python_forked(*args, stdout_path=out, stderr_path=err, env=env)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        return subprocess.CompletedProcess(list(args), process.returncode,
                                           out.read_text(errors="replace") if out.exists() else "",
                                           err.read_text(errors="replace") if err.exists() else "")


class ForkedApp:
    """An app forked by ``start_app`` (or a command by ``start_python_forked``): the part of ``subprocess.Popen``
    the tests use (``pid``, ``poll``, ``terminate`` = SIGTERM, ``kill``, ``send_signal``, ``wait``, ``returncode``:
    negative signal number when killed)."""

    def __init__(self, process):
        self.process = process
        self.pid = process.pid
        self.args = process.name

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.process.exitcode


def start_app(model_dir: Path, *extra: str, lang: str | None = None, timeout_s: float = 300.0,
              port: int | None = None, host: str | None = "127.0.0.1", env: dict[str, str] | None = None,
              ready_path: str = ""):
    """Start ``python app.py --model DIR`` on a loopback port (free one unless given); returns (process, url) once
    ``url + ready_path`` answers 200 (the web page: the model has loaded and the UI is mounted).

    The app is forked from a forkserver that has imported ``APP_IMPORTS`` (a ``ForkedApp``), or, when ``env`` holds
    a variable outside ``_read_at_start_up()`` (other than ``PATH`` = ``FRESH_MACHINE_PATH``), run as a fresh
    ``python app.py`` (a ``subprocess.Popen``): some variables are read when a module is imported, which a forked
    app has done before it sees them.

    Args:
        port: ``--port`` (None: a free one).
        host: ``--host`` (None: not given, the app picks it from ``env``'s GRADIO_SERVER_NAME).
        env: extra environment variables.

    Without ``--output-dir`` in ``extra`` the app keeps its outputs in a temporary folder next to the model's (never
    the user's home). Its stdout and stderr go to ``model_dir.parent / f"app-{port}.log"``."""
    port = free_port() if port is None else port
    if "--output-dir" not in extra:
        extra = (*extra, "--output-dir", str(model_dir.parent / f"outputs-{port}"))
    app_env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
                   PYTHONUNBUFFERED="1", **(env or {}))
    argv = ["--model", str(model_dir), "--device", "cpu", "--port", str(port),
            *(["--host", host] if host is not None else []), *extra]
    if lang:
        argv += ["--lang", lang]
    log_path = model_dir.parent / f"app-{port}.log"  # a restart on the same port appends
    if not _forks_as_started(env or {}):
        log = open(log_path, "a")
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), *argv], cwd=ROOT, env=app_env, stdout=log,
                                stderr=subprocess.STDOUT)
        log.close()  # the child has its own copy
    else:
        warm_up_app_imports()
        process = _forkserver().Process(target=_run_app, args=(argv, app_env, str(log_path)),
                                        name=f"app.py {' '.join(argv)}", daemon=True)
        process.start()
        proc = ForkedApp(process)
    address = host if host is not None else app_env.get("GRADIO_SERVER_NAME", "127.0.0.1")
    url = f"http://{address}:{port}/"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited early (status {proc.poll()}): {_tail(log_path)}")
        try:
            urllib.request.urlopen(url + ready_path, timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"app did not start in {timeout_s} s: {_tail(log_path)}")


def _tail(log_path: Path, num_chars: int = 3000) -> str:
    return log_path.read_text(errors="replace")[-num_chars:] if log_path.exists() else "(no log written)"


def stop_app(proc: "subprocess.Popen | ForkedApp") -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
