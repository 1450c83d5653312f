"""Dialogue mode, the voice dropdown and the Single tab's history in headless Chromium (Debian's chromium via
Playwright)."""

from __future__ import annotations

import json

import pytest

from tests.ui_app import playwright_or_skip, screenshot_dir

pytestmark = pytest.mark.e2e
playwright_or_skip()

SHOTS = screenshot_dir()


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


def _entries(output_dir: Path) -> list[dict]:
    """History entries on disk (tts_app.history layout: single/<browser>/_history/<entry>/), oldest first."""
    return sorted((json.loads(p.read_text(encoding="utf-8"))
                   for p in (output_dir / "single").glob("*/_history/*/entry.json")), key=lambda e: e["entry_id"])


def test_history_lists_generations_survives_a_reload_and_re_runs_them(page, app_out_dir):
    page.locator("button[role=tab]").first.click()  # back to the Single tab
    page.locator("#text textarea").fill("历史记录测试。")
    page.locator("#settings button").first.click()  # open the Settings
    page.locator("#seed input").fill("5")
    page.locator("#generate").click()
    page.wait_for_function("() => document.querySelector('#history-text-0')?.innerText.includes('历史记录测试')",
                           timeout=180_000)
    first = page.locator("#history-text-0").inner_text()
    assert "zh-female" in first and "seed 5" in first  # voice and settings listed with the text
    page.wait_for_selector("#history-audio-0 audio[src]", state="attached", timeout=30_000)

    page.reload()
    page.wait_for_function("() => document.querySelector('#history-text-0')?.innerText.includes('历史记录测试')",
                           timeout=60_000)
    # the player has the stored audio after the reload too, served to this browser
    page.wait_for_selector("#history-audio-0 audio[src]", state="attached", timeout=30_000)
    newest = [e for e in _entries(app_out_dir) if e["text"] == "历史记录测试。"][-1]
    src = f"{page.url.rstrip('/')}/gradio_api/file={_folder(app_out_dir, newest) / newest['files']['audio']}"
    assert page.request.get(src).status == 200
    page.locator("#text textarea").fill("something else")
    page.locator("#settings button").first.click()
    page.locator("#seed input").fill("99")
    page.locator("#history-rerun-0").click()
    # Re-run puts the entry's inputs back and generates again: a second entry, listed first
    page.wait_for_function("() => document.querySelector('#text textarea')?.value === '历史记录测试。'",
                           timeout=60_000)
    assert page.locator("#seed input").input_value() == "5"
    page.wait_for_function("() => document.querySelector('#history-text-1')?.innerText.includes('历史记录测试')",
                           timeout=180_000)  # the re-run is listed first, the original second
    page.screenshot(path=str(SHOTS / "history.png"), full_page=True)
    entries = [e for e in _entries(app_out_dir) if e["text"] == "历史记录测试。"]
    assert len(entries) == 2 and entries[0]["settings"] == entries[1]["settings"]
    sidecars = [json.loads(_folder(app_out_dir, e).joinpath(e["files"]["metadata"]).read_text(encoding="utf-8"))
                for e in entries]
    assert sidecars[0]["audio"]["sha256"] == sidecars[1]["audio"]["sha256"]  # same settings, same audio

    # another browser (its own cookie) has its own, empty history and cannot fetch this one's audio
    other = page.context.browser.new_page()
    try:
        other.goto(page.url)
        other.wait_for_selector("#history-empty", timeout=60_000)
        assert other.locator("#history-text-0").count() == 0
        assert other.request.get(src).status == 403
    finally:
        other.close()


def _folder(output_dir: Path, entry: dict) -> Path:
    """The folder of a history entry."""
    return next((output_dir / "single").glob(f"*/_history/{entry['entry_id']}"))
