"""The real UI in headless Chromium (Debian's /usr/bin/chromium driven by Playwright).

Screenshots of the three tabs are saved to ``tests.ui_app.screenshot_dir()`` (a temporary folder unless
$TTS_APP_SCREENSHOT_DIR says where)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.ui_app import playwright_or_skip, screenshot_dir, start_app, stop_app, upload_files

pytestmark = pytest.mark.e2e
sync_api = playwright_or_skip()

SHOTS = screenshot_dir()


@pytest.fixture(scope="module")
def out_dir(app_out_dir) -> Path:
    """The shared app's --output-dir (tests/e2e/conftest.py: ``app_url``, ``browser``)."""
    return app_out_dir


def test_single_synthesis_in_the_browser(page, data_dir):
    page.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "zh_female_1.wav"))
    page.wait_for_function("() => document.querySelector('#ref-report')?.innerText.includes('speech kept')",
                           timeout=60_000)
    page.locator("#text textarea").fill("重(chong2)新开始，银行很近。")
    # The preview marks the override.
    page.wait_for_function(
        "() => document.querySelector('#preview') && document.querySelector('#preview').innerText.includes('chong2')",
        timeout=30_000)
    assert "override" in page.locator("#preview").inner_text().lower()  # the span's category, in the page's language
    page.locator("#generate").click()
    page.wait_for_selector("#out-audio audio[src]", state="attached", timeout=120_000)
    # gradio's waveform player keeps its <audio> in a shadow root and loads lazily; playwright's locator pierces the
    # shadow DOM, and we ask the element for its metadata as a play click would.
    duration = page.locator("#out-audio audio[src]").first.evaluate("""async (a) => {
        a.preload = 'metadata'; a.load();
        if (!(a.duration > 0)) await new Promise(r => { a.onloadedmetadata = r; setTimeout(r, 10000); });
        return a.duration; }""")
    assert duration > 0
    page.screenshot(path=str(SHOTS / "single.png"), full_page=True)


def test_generate_with_no_text_is_a_pop_up_and_the_output_keeps_no_error_badge(page):
    """After a result (the test above), Generate with the text cleared: our message in a pop-up; the Output player
    shows no red "Error" badge next to the previous result's files (the refusal comes from a step without outputs)."""
    had_audio = page.locator("#out-audio audio[src]").count() > 0
    page.locator("#text textarea").fill("")
    page.locator("#generate").click()
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"toast-text\"]')]"
                           ".some(t => t.innerText.includes('Type some text to speak.'))", timeout=30_000)
    page.wait_for_function("() => !document.querySelector('#generate')?.disabled", timeout=30_000)
    badge = page.locator("#out-audio .error, #out-audio [data-testid='status-tracker'] .error")
    assert badge.count() == 0, page.locator("#out-audio").inner_text()
    assert "Error" not in page.locator("#out-audio").inner_text()
    assert (page.locator("#out-audio audio[src]").count() > 0) == had_audio  # the previous result stays
    page.locator('[data-testid="toast-close"]').first.click()


def test_settings_start_at_the_model_defaults_and_reset_to_them(page):
    page.get_by_role("tab", name="Single synthesis").click()
    page.locator("#settings button").first.click()
    cfg = page.locator("#cfg-scale input[type=number]")
    cfg.wait_for(timeout=30_000)
    assert float(cfg.input_value()) == 1.3  # the tiny VibeVoice checkpoint's guidance_scale
    assert page.locator("#model-languages").inner_text().strip().endswith("en, zh")
    assert "i18n" not in page.locator("#model-status").inner_text()
    # VibeVoice takes the argmax for its tokens: no sampling knobs to show
    for knob in ("#temperature", "#top-p", "#top-k", "#greedy"):
        assert page.locator(knob).count() == 0 or not page.locator(knob).first.is_visible(), knob
    cfg.fill("2.5")
    cfg.press("Enter")
    sync_api.expect(cfg).to_have_value("2.5")
    page.locator("#reset-defaults").click()
    page.wait_for_function("() => document.querySelector('#cfg-scale input[type=number]').value === '1.3'",
                           timeout=10_000)
    page.screenshot(path=str(SHOTS / "settings.png"), full_page=True)


def test_batch_tab_runs_three_lines(page, data_dir, tmp_path):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "voice.wav")
    lines = [{"input_text": t, "prompt_audio": "voice.wav", "output_name": f"line{i}"}
             for i, t in enumerate(["Hello there.", "第二行。", "Third one."], start=1)]
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines), encoding="utf-8")
    page.get_by_role("tab", name="Batch (JSONL)").click()
    import zipfile

    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(tmp_path / "voice.wav", "voice.wav")
    upload_files(page, {"#jsonl": jsonl, "#audio-zip": tmp_path / "voices.zip"})
    page.locator("#run-job").click()
    page.wait_for_function(
        "() => (document.querySelector('#job-results')?.innerText.match(/\\bok\\b/g) || []).length >= 3",
        timeout=180_000)
    text = page.locator("#job-results").inner_text()
    assert all(f"line{i}" in text for i in (1, 2, 3))
    page.screenshot(path=str(SHOTS / "batch.png"), full_page=True)


def test_memory_gauge_updates(page):
    page.get_by_role("tab", name="Memory").click()
    page.wait_for_selector("#gauge p, #gauge li", timeout=30_000)
    first = page.locator("#gauge").inner_text()
    # the gauge's timer ticks every second: wait for the next reading shown
    page.wait_for_function("(first) => document.querySelector('#gauge').innerText !== first", arg=first,
                           timeout=30_000)
    second = page.locator("#gauge").inner_text()
    assert "GiB" in first and first != second
    page.screenshot(path=str(SHOTS / "memory.png"), full_page=True)


def test_speech_starts_playing_before_generation_ends(browser, tiny_checkpoint, tmp_path_factory, data_dir,
                                                     fresh_machine_env):
    """Continuous batching streams: the live player plays the first audio while the engine is still decoding (the
    final WAV is not there yet). Each decode step is slowed to 150 ms (a testing aid) so generation lasts seconds
    on any machine."""
    import time

    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(tmp_path_factory.mktemp("e2e-slow")),
                          "--simulate-step-delay-ms", "150", lang="en", env=fresh_machine_env)
    page = browser.new_page(viewport={"width": 1280, "height": 1600})
    try:
        page.goto(url)
        page.wait_for_selector("#generate", timeout=60_000)
        page.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "en_female_1.wav"))
        page.wait_for_function("() => document.querySelector('#ref-report')?.innerText.includes('speech kept')",
                               timeout=60_000)
        page.locator("#text textarea").fill("The first sentence comes out at once. A second one follows it. "
                                            "Then a third sentence ends the story.")
        page.locator("#generate").click()
        playing_before_end = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            finished = page.locator("#out-audio audio[src]").count() > 0
            live = page.locator("#live-audio audio")
            state = live.first.evaluate("a => [a.currentTime, a.paused]") if live.count() else [0, True]
            if not finished and state[0] > 0 and not state[1]:
                playing_before_end = state[0]
                break
            if finished:
                break
            time.sleep(0.1)
        page.screenshot(path=str(SHOTS / "streaming.png"), full_page=True)
        assert playing_before_end, "the live player did not play before the final audio arrived"
        page.wait_for_selector("#out-audio audio[src]", state="attached", timeout=180_000)
    finally:
        page.close()
        stop_app(proc)


def test_a_file_that_is_not_audio_is_refused_in_words_not_a_mime_list(page, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a recording\n", encoding="utf-8")
    page.reload()  # an empty reference box (the first test filled it)
    page.wait_for_selector("#generate", timeout=60_000)
    page.locator("#ref-audio input[type=file]").set_input_files(str(notes))
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"toast-text\"]')]"
                           ".some(t => t.innerText.includes('is not an audio file'))", timeout=30_000)
    texts = page.locator('[data-testid="toast-text"]').all_inner_texts()
    assert any("“notes.txt” is not an audio file: upload a recording" in t for t in texts), texts
    assert not any("audio/aac" in t for t in texts)


def _session_folders(out_dir: Path) -> set[Path]:
    """Every page session's folder of single results: ``single/<browser>/<session>/`` (not the clip folders, not the
    browser's history, ``tts_app.history.HISTORY_DIR``)."""
    from tts_app.history import HISTORY_DIR

    return {p for p in (out_dir / "single").glob("*/*") if p.is_dir() and p.name not in ("references", HISTORY_DIR)}


def _generate(tab, app_url: str, data_dir: Path) -> None:
    tab.goto(app_url)
    tab.wait_for_selector("#generate", timeout=60_000)
    tab.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "en_female_1.wav"))
    tab.wait_for_function("() => document.querySelector('#ref-report')?.innerText.includes('speech kept')",
                          timeout=60_000)
    tab.locator("#text textarea").fill("Hello there.")
    tab.locator("#generate").click()
    tab.wait_for_selector("#out-audio audio[src]", state="attached", timeout=120_000)


def test_closing_a_tab_removes_its_session_folder_and_nothing_else(browser, app_url, out_dir, data_dir):
    """Two tabs of one browser (one cookie, one browser folder, two page sessions) each make a result; closing one
    removes that tab's session folder only."""
    context = browser.new_context(viewport={"width": 1280, "height": 1200})
    try:
        closing, staying = context.new_page(), context.new_page()
        before = _session_folders(out_dir)
        _generate(closing, app_url, data_dir)
        (closed_folder,) = _session_folders(out_dir) - before
        _generate(staying, app_url, data_dir)
        (kept_folder,) = _session_folders(out_dir) - before - {closed_folder}
        assert closed_folder.parent == kept_folder.parent  # the same browser's folder
        assert any(closed_folder.glob("*.wav")) and any(closed_folder.glob("*.json"))
        closing.close()
        deadline = time.monotonic() + 90  # gradio notices the closed tab when its connection goes
        while closed_folder.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not closed_folder.exists(), "the closed tab's folder is still there"
        assert any(kept_folder.glob("*.wav"))  # the open tab's results stay
        assert any((kept_folder.parent / "references").glob("*.wav"))  # and the browser's cleaned clip
    finally:
        context.close()
