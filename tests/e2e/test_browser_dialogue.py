"""Dialogue mode and the voice dropdown in headless Chromium (Debian's chromium via Playwright)."""

from __future__ import annotations

import json

import pytest

from tests.ui_app import playwright_or_skip, screenshot_dir

pytestmark = pytest.mark.e2e
playwright_or_skip()

SHOTS = screenshot_dir()


@pytest.fixture(scope="module")
def page(app_url, browser):
    """A page of the session's app and Chromium (tests/e2e/conftest.py)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1600})
    page.goto(app_url)
    page.wait_for_selector("#generate", timeout=60_000)
    yield page
    page.close()


def _pick(page, dropdown_id: str, option: str) -> None:
    page.locator(f"#{dropdown_id} input").click()
    page.get_by_role("option", name=option, exact=False).first.click()


def test_voice_dropdown_selects_a_bundled_voice_and_generates(page):
    _pick(page, "voice", "zh-female")
    # the voice's own transcript fills the reference-text box
    page.wait_for_function("() => document.querySelector('#ref-text textarea')?.value.includes('银行')",
                           timeout=60_000)
    assert "zh-female" in page.locator("#ref-report").inner_text()
    page.locator("#text textarea").fill("你好。")
    page.locator("#generate").click()
    page.wait_for_selector("#out-audio audio[src]", state="attached", timeout=120_000)
    page.screenshot(path=str(SHOTS / "voice_dropdown.png"), full_page=True)


def test_dialogue_mode_names_each_speaker_in_the_segment_table(page):
    page.get_by_role("tab", name="Dialogue").click()
    page.locator("#script textarea").fill("Speaker 1: Hello there.\nSpeaker 2: 你好。\nSpeaker 1: Bye now.")
    _pick(page, "speaker-voice-1", "en-female")
    _pick(page, "speaker-voice-2", "zh-male")
    page.locator("#generate-dialogue").click()
    page.wait_for_selector("#dialogue-audio audio[src]", state="attached", timeout=180_000)
    page.wait_for_function("() => document.querySelector('#dialogue-timings')?.innerText.includes('Speaker 2')",
                           timeout=30_000)
    table = page.locator("#dialogue-timings").inner_text()
    # VibeVoice speaks the three turns from one prompt: the segment's text names each turn's speaker
    for turn in ("Speaker 1: Hello there.", "Speaker 2: 你好。", "Speaker 1: Bye now."):
        assert turn in table, table
    page.screenshot(path=str(SHOTS / "dialogue.png"), full_page=True)
