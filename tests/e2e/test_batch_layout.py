"""The Batch tab's results area in headless Chromium (issue 23, Build 4): with a 40-line job every row can be
scrolled to and nothing (the ZIP download box, the footer) is drawn over it, in a desktop window (1400×900) and on a
phone (390×844). Checked the way a user sees it: the last row is scrolled into view, and the element at its centre
(``document.elementFromPoint``) is inside that row; so is every other row. A screenshot of each viewport goes to the test's temporary
folder (and to ``tests.ui_app.screenshot_dir()``)."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest

from tests.ui_app import playwright_or_skip, screenshot_dir

pytestmark = pytest.mark.e2e
playwright_or_skip()

NUM_LINES = 40
VIEWPORTS = {"desktop": {"width": 1400, "height": 900}, "phone": {"width": 390, "height": 844}}


def _job_files(tmp_path, data_dir):
    """A 40-line JSONL job (short lines, a few decode steps each) and the ZIP of the voice it names."""
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "voice.wav")
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        zf.write(tmp_path / "voice.wav", "voices/anna.wav")
    lines = [{"input_text": f"Line {i}.", "prompt_audio": "voices/anna.wav", "output_name": f"line{i:02d}",
              "max_new_tokens": 4} for i in range(1, NUM_LINES + 1)]
    jsonl = tmp_path / "forty.jsonl"
    jsonl.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return jsonl, tmp_path / "voices.zip"


def _open_batch_tab(page, url):
    """Load the page and show the Batch tab; on a narrow screen gradio moves the tabs that do not fit into its "More
    tabs" menu, where a phone user taps it."""
    page.goto(url)
    page.wait_for_selector("#generate", timeout=90_000)
    tab = page.get_by_role("tab", name="Batch (JSONL)")
    if tab.count() == 0:
        page.get_by_role("button", name="More tabs").click()
        tab = page.locator(".overflow-dropdown button", has_text="Batch (JSONL)")
    tab.click()  # gradio draws a tab's content when it is first shown
    page.wait_for_selector("#job-progress [data-status], #job-progress p", timeout=60_000)


def _rows_seen(page) -> list[dict]:
    """Scroll each row of the results table into view in turn (as a user scrolling down to it would) and report what
    is at its centre: whether that element lies inside the row (what covers it if not) and the row's box."""
    return page.evaluate("""() => [...document.querySelectorAll('#job-results tbody tr')].map((row) => {
        row.scrollIntoView({block: 'center', inline: 'nearest'});
        const r = row.getBoundingClientRect();
        const x = r.left + r.width / 2, y = r.top + r.height / 2;
        const hit = document.elementFromPoint(x, y);
        return {line: row.cells[0].innerText, inside: !!hit && row.contains(hit),
                hit: hit ? `${hit.tagName.toLowerCase()}#${hit.id}.${hit.className}` : null,
                top: r.top, bottom: r.bottom, right: r.right, height: window.innerHeight};
    })""")


def test_every_row_of_a_40_line_job_can_be_scrolled_to_and_is_not_covered(app_url, browser, tmp_path, data_dir):
    jsonl, voices = _job_files(tmp_path, data_dir)
    # one browser (the job is its owner's), first as a desktop window; then the same page reloaded on a phone-sized
    # screen reopens the job (the page remembers it) and shows it there
    context = browser.new_context(viewport=VIEWPORTS["desktop"])
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        _open_batch_tab(page, app_url)
        page.locator("#jsonl input[type=file]").set_input_files(str(jsonl))
        page.locator("#audio-zip input[type=file]").set_input_files(str(voices))
        for elem_id, name in (("jsonl", jsonl.name), ("audio-zip", voices.name)):  # both uploads arrived
            page.wait_for_function(f"() => (document.querySelector('#{elem_id}')?.textContent || '')"
                                   f".replace(/\\s+/g, '').includes('{name}')")
        page.locator("#run-job").click()
        page.wait_for_function("() => document.querySelector('#job-progress [data-status]')?.dataset.status === "
                               "'done'", timeout=600_000)
        for name, viewport in VIEWPORTS.items():
            if name != "desktop":
                page.set_viewport_size(viewport)
                _open_batch_tab(page, app_url)
            page.wait_for_function(f"() => document.querySelectorAll('#job-results tbody tr').length === {NUM_LINES}")
            page.wait_for_selector("#results-zip a", timeout=60_000)  # the ZIP box is drawn, under the table
            rows = _rows_seen(page)
            page.screenshot(path=str(tmp_path / f"batch-{name}.png"))  # the last row, scrolled to
            shutil.copy(tmp_path / f"batch-{name}.png", screenshot_dir() / f"batch-40-lines-{name}.png")
            assert [r["line"] for r in rows] == [str(n) for n in range(1, NUM_LINES + 1)]
            # each row fits in the window once scrolled to, nothing is drawn over it, and it is no wider than the
            # screen (a phone scrolls down, not sideways, to reach a row's player)
            hidden = [r for r in rows if not (r["inside"] and 0 <= r["top"] and r["bottom"] <= r["height"]
                                              and r["right"] <= viewport["width"] + 0.5)]
            assert not hidden, (name, hidden)
            # the ZIP box below the table is reachable too, and not under the rows
            zip_box = page.evaluate("""() => { const z = document.querySelector('#results-zip');
                z.scrollIntoView({block: 'center'}); const r = z.getBoundingClientRect();
                const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
                return {inside: z.contains(hit), hit: hit && hit.outerHTML.slice(0, 120)}; }""")
            assert zip_box["inside"], (name, zip_box)
    finally:
        context.close()
