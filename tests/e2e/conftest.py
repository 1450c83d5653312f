"""Shared by the browser modules: one Chromium and one app on the tiny VibeVoice (English page) for the session.
Launching either costs seconds to tens of seconds on 2 shared cores; each module opens its own pages on them.

Every app these modules launch runs as on a fresh machine (``fresh_machine_env``): its PATH holds Python's own folder
only, so no ``ffmpeg`` / ``ffprobe`` (or anything else a developer installed by hand) can make a browser test pass
that a user's first start would fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.ui_app import FRESH_MACHINE_PATH, launch_chromium, playwright_or_skip, start_app, stop_app


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium (``tests.ui_app.launch_chromium``; autoplay allowed for the live-audio player)."""
    sync_api = playwright_or_skip()
    with sync_api.sync_playwright() as pw:
        browser = launch_chromium(pw, "--autoplay-policy=no-user-gesture-required")
        yield browser
        browser.close()


#: Programs a fresh machine does not have and the app must not need.
ABSENT_PROGRAMS = ("ffmpeg", "ffprobe")


@pytest.fixture(scope="session")
def fresh_machine_env() -> dict[str, str]:
    """Environment overrides for ``start_app``: ``PATH`` = the folder of the Python running the tests, nothing else
    (``tests.ui_app.FRESH_MACHINE_PATH``: the app is started by that interpreter's absolute path, so it needs no
    other; the forkserver imported with it, so the app is forked, as if started fresh). Fails the session's browser
    tests when that folder itself holds ``ffmpeg`` or ``ffprobe`` (a conda environment may): then they could not
    show that the app works without them."""
    path = FRESH_MACHINE_PATH
    found = {name: shutil.which(name, path=path) for name in ABSENT_PROGRAMS}
    if any(found.values()):
        pytest.fail(f"cannot build a fresh machine's PATH: Python's own folder holds {found}; run the browser tests "
                    f"with a Python whose folder has no ffmpeg/ffprobe")
    return {"PATH": path}


def app_log(model_dir: Path, url: str) -> Path:
    """The log file ``tests.ui_app.start_app`` writes for the app at ``url`` of ``model_dir``."""
    return model_dir.parent / f"app-{url.rstrip('/').rsplit(':', 1)[1]}.log"


@pytest.fixture(scope="session")
def app_out_dir(tmp_path_factory) -> Path:
    """The shared app's --output-dir."""
    return tmp_path_factory.mktemp("e2e-out")


@pytest.fixture(scope="session")
def app_url(tiny_checkpoint, app_out_dir, fresh_machine_env):
    """URL of ``app.py --model <tiny VibeVoice>`` (no other flags: no --lang, so each page is in its browser's
    language; ``page`` is an en-US one), started once for the session with a fresh machine's PATH
    (``fresh_machine_env``)."""
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(app_out_dir), env=fresh_machine_env)
    yield url
    stop_app(proc)


@pytest.fixture(scope="module")
def page(app_url, browser):
    """An en-US page of the session's app in the session's Chromium, one per module (its tests run in order on
    it)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1600}, locale="en-US")
    page.goto(app_url)
    page.wait_for_selector("#generate", timeout=60_000)
    yield page
    page.close()
