"""The first minute on a fresh machine, in headless Chromium: the session's app runs with a PATH that holds Python's
own folder only (``fresh_machine_env``: no ``ffmpeg``, no ``ffprobe``, nothing installed by hand), as after the
README's first command. A reference upload gets its report, Generate plays while it generates and its result
downloads as a WAV that decodes, and a JSONL job with an uploaded default voice runs. This is how CI catches the next
install step the README forgot."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tests.e2e.conftest import ABSENT_PROGRAMS, app_log
from tests.ui_app import playwright_or_skip, screenshot_dir

pytestmark = pytest.mark.e2e
playwright_or_skip()

SHOTS = screenshot_dir()


def test_a_fresh_machine_generates_plays_downloads_checks_a_reference_and_runs_a_job(
        page, app_url, tiny_checkpoint, fresh_machine_env, data_dir, tmp_path):
    # The app itself says what it found: nothing (the PATH it got is the fixture's, checked there too).
    started = app_log(tiny_checkpoint("vibevoice"), app_url).read_text(encoding="utf-8")
    assert ", ".join(f"{name} not found" for name in ABSENT_PROGRAMS) + " on PATH - not needed" in started

    page.get_by_role("tab", name="Single synthesis").click()
    page.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "en_female_1.wav"))
    page.wait_for_function("() => document.querySelector('#ref-report')?.innerText.includes('speech kept')",
                           timeout=60_000)
    assert page.locator("#ref-clean audio").count() > 0  # the cleaned clip is shown (no ffprobe to probe it)

    page.locator("#text textarea").fill("Hello there. This is the first minute on a new machine.")
    page.locator("#generate").click()
    # The live player plays (its AAC stream made without the ffmpeg program), or a pop-up says why not (gradio's
    # own player: "Streaming audio output requires ffmpeg ...").
    page.wait_for_function("() => document.querySelector('#live-audio audio')?.currentTime > 0"
                           " || document.querySelector('[data-testid=\"toast-text\"]')", timeout=120_000)
    assert page.locator('[data-testid="toast-text"]').all_inner_texts() == []
    # The result arrives and downloads.
    page.wait_for_selector("#out-audio audio[src]", state="attached", timeout=120_000)
    with page.expect_download() as download:
        page.locator("#out-audio [data-testid=download-link]").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    audio, rate = sf.read(saved)
    assert saved.suffix == ".wav" and rate == 24_000 and audio.size > rate // 10 and np.abs(audio).max() > 0
    page.screenshot(path=str(SHOTS / "fresh_machine_single.png"), full_page=True)

    # A JSONL job whose lines use the uploaded default voice (an audio upload in the Batch tab).
    jsonl = tmp_path / "fresh.jsonl"
    jsonl.write_text("\n".join(json.dumps({"input_text": t, "output_name": f"fresh{i}", "max_new_tokens": 24})
                               for i, t in enumerate(["First line.", "Second line."], start=1)), encoding="utf-8")
    page.get_by_role("tab", name="Batch (JSONL)").click()
    page.locator("#jsonl input[type=file]").set_input_files(str(jsonl))
    page.locator("#default-voice input[type=file]").set_input_files(str(data_dir / "en_female_1.wav"))
    page.wait_for_selector("#default-voice audio", state="attached", timeout=30_000)
    page.locator("#validate").click()  # both uploads arrived: every line is valid
    page.wait_for_function("() => document.querySelector('#validation-summary')?.innerText.includes('all valid')",
                           timeout=60_000)
    page.locator("#run-job").click()
    page.wait_for_function(
        "() => (document.querySelector('#job-results')?.innerText.match(/\\bok\\b/g) || []).length >= 2",
        timeout=180_000)
    assert all(name in page.locator("#job-results").inner_text() for name in ("fresh1", "fresh2"))
    page.screenshot(path=str(SHOTS / "fresh_machine_batch.png"), full_page=True)
