"""The Batch tab in headless Chromium: a creator can follow a job. Its progress box is on screen (non-zero size) and
changes while the job runs, Run is disabled meanwhile, the job survives a server restart (it comes back
"interrupted" and Resume finishes it) and a page reload, and the results table has a player per ok line.

The server is stopped as soon as the progress has moved, so the job is always interrupted with most of its lines
left (``NUM_LINES`` only needs to outlast that stop and the reload that follows the resume)."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest

from tests.ui_app import free_port, playwright_or_skip, start_app, stop_app, upload_files

pytestmark = pytest.mark.e2e
playwright_or_skip()

NUM_LINES = 24


def _progress(page) -> dict:
    """Status, lines done and on-screen size of the progress box."""
    return page.evaluate("""() => {
        const box = document.querySelector('#job-progress');
        const state = box && box.querySelector('[data-status]');
        const r = box ? box.getBoundingClientRect() : {width: 0, height: 0};
        return {status: state ? state.dataset.status : null, done: state ? Number(state.dataset.done) : -1,
                width: r.width, height: r.height, text: box ? box.innerText : ''};
    }""")


def _open_batch_tab(page, url):
    page.goto(url)
    page.wait_for_selector("#generate", timeout=90_000)
    page.get_by_role("tab", name="Batch (JSONL)").click()  # gradio draws a tab's content when it is first shown
    page.wait_for_selector("#job-progress [data-status], #job-progress p", timeout=60_000)


def _wait_status(page, statuses, timeout_ms=180_000):
    page.wait_for_function(
        "(wanted) => wanted.includes(document.querySelector('#job-progress [data-status]')?.dataset.status)",
        arg=list(statuses), timeout=timeout_ms)


def test_a_job_is_followed_across_a_reload_and_a_server_restart(tiny_checkpoint, browser, tmp_path, data_dir,
                                                                 fresh_machine_env):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "voice.wav")
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(tmp_path / "voice.wav", "voices/anna.wav")
    lines = [{"input_text": f"This is line number {i} of the chapter.", "prompt_audio": "voices/anna.wav",
              "output_name": f"line{i:02d}", "max_new_tokens": 24} for i in range(1, NUM_LINES + 1)]
    jsonl = tmp_path / "chapter.jsonl"
    jsonl.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    out = tmp_path / "outputs"
    port = free_port()
    model = tiny_checkpoint("vibevoice")
    flags = ("--output-dir", str(out), "--max-batch-size", "1")
    proc, url = start_app(model, *flags, lang="en", port=port, env=fresh_machine_env)
    context = browser.new_context(viewport={"width": 1280, "height": 1400})
    page = context.new_page()
    # Page loads and clicks wait longer than playwright's 30 s: on 2 shared cores a freshly restarted server
    # serving gradio's scripts to Chromium can take that long (these are waits, not timing assertions).
    page.set_default_navigation_timeout(180_000)
    page.set_default_timeout(120_000)
    try:
        _open_batch_tab(page, url)
        upload_files(page, {"#jsonl": jsonl, "#audio-zip": tmp_path / "voices.zip"})
        page.locator("#run-job").click()
        _wait_status(page, ["running"], 60_000)
        page.wait_for_function("() => Number(document.querySelector('#job-progress [data-status]')"
                               "?.dataset.done) >= 2", timeout=120_000)
        first = _progress(page)
        assert first["width"] > 100 and first["height"] > 10, first  # on screen, not a 0-pixel area
        assert f"lines {first['done']}/{NUM_LINES}" in first["text"] and "left" in first["text"]
        assert page.locator("#run-job").is_disabled()  # no second run of the same job by a second click
        page.wait_for_function(f"() => Number(document.querySelector('#job-progress [data-status]')"
                               f"?.dataset.done) > {first['done']}", timeout=60_000)
        assert _progress(page)["done"] > first["done"]  # it changes while the job runs
        job_id = page.locator("#job-id input, #job-id textarea").first.input_value()
        assert job_id and job_id in first["text"]

        # The server stops mid-job and comes back on the same folder: the job is there, interrupted.
        stop_app(proc)
        proc, url = start_app(model, *flags, lang="en", port=port, env=fresh_machine_env)
        _open_batch_tab(page, url)
        page.wait_for_function(f"() => document.querySelector('#job-progress')?.innerText.includes('{job_id}')",
                               timeout=60_000)
        restarted = _progress(page)
        assert restarted["status"] == "interrupted", restarted
        ok_before = page.locator("#job-results audio").count()  # the lines done before the stop, with players
        assert 1 <= ok_before < NUM_LINES  # its other lines are recorded cancelled, and not shown as done:
        assert f"lines {ok_before}/{NUM_LINES}" in restarted["text"] and restarted["done"] == ok_before, restarted
        page.locator("#resume-job").click()
        _wait_status(page, ["running", "done"], 60_000)

        # A reload (or a closed tab) loses nothing: the page reopens the job and follows it on.
        page.reload()
        _open_batch_tab(page, url)
        page.wait_for_function(f"() => document.querySelector('#job-progress')?.innerText.includes('{job_id}')",
                               timeout=60_000)
        after_reload = _progress(page)
        assert after_reload["status"] in ("running", "done") and after_reload["done"] >= ok_before
        _wait_status(page, ["done"], 240_000)
        done = _progress(page)
        assert done["done"] == NUM_LINES
        assert page.locator("#job-results audio").count() == NUM_LINES  # a player per ok line
        assert page.locator("#results-zip a, #results-zip [download]").count() >= 1
        page.screenshot(path=str(tmp_path / "batch-done.png"), full_page=True)
    finally:
        context.close()
        stop_app(proc)
    records = [json.loads(x) for x in next(out.glob("jobs/*/out/results.jsonl")).read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, NUM_LINES + 1))
    assert all(r["status"] == "ok" for r in records)
