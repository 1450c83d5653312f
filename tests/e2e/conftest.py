"""Shared by the browser modules: one Chromium and one app on the tiny VibeVoice (English page) for the session.
Launching either costs seconds to tens of seconds on 2 shared cores; each module opens its own pages on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui_app import launch_chromium, playwright_or_skip, start_app, stop_app


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium (``tests.ui_app.launch_chromium``; autoplay allowed for the live-audio player)."""
    sync_api = playwright_or_skip()
    with sync_api.sync_playwright() as pw:
        browser = launch_chromium(pw, "--autoplay-policy=no-user-gesture-required")
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def app_out_dir(tmp_path_factory) -> Path:
    """The shared app's --output-dir."""
    return tmp_path_factory.mktemp("e2e-out")


@pytest.fixture(scope="session")
def app_url(tiny_checkpoint, app_out_dir):
    """URL of ``app.py --model <tiny VibeVoice>`` (no other flags: no --lang, so each page is in its browser's
    language; ``page`` is an en-US one), started once for the session."""
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(app_out_dir))
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
