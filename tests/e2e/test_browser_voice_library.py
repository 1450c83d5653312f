"""The voice library in headless Chromium (issue 23, Why 5): a refused "Save as voice" shows its reason in a toast and
leaves the Voice dropdown usable (no "Error" badge over it), and Delete asks first: "no" keeps the voice, "yes"
deletes it."""

from __future__ import annotations

import pytest

from tests.ui_app import playwright_or_skip

pytestmark = pytest.mark.e2e
playwright_or_skip()

NAME = "e2e voice"


def test_a_refused_save_leaves_the_dropdown_usable_and_delete_asks_first(page, data_dir):
    page.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "en_female_1.wav"))
    page.wait_for_function("() => document.querySelector('#ref-report')?.innerText.includes('speech kept')",
                           timeout=60_000)
    page.locator("#ref-text textarea, #ref-text input").first.fill("Some words of the reference.")
    page.locator("#voice-library").get_by_text("Voice library").click()  # open the accordion
    page.locator("#save-voice").click()  # no name: refused
    page.get_by_text("The voice name is empty").first.wait_for(timeout=60_000)  # the reason, in a toast
    badges = page.evaluate("""() => [...document.querySelectorAll('#voice [data-testid=status-tracker]')]
        .filter(e => getComputedStyle(e).display !== 'none' && e.innerText.trim()).map(e => e.innerText.trim())""")
    assert badges == [], badges  # nothing drawn over the dropdown
    page.locator("#voice input").click()  # it opens and lists the example voices
    assert page.locator("ul[role=listbox] li").count() >= 2
    page.keyboard.press("Escape")

    page.locator("#voice-name textarea, #voice-name input").first.fill(NAME)
    page.locator("#save-voice").click()
    page.wait_for_function(f"() => document.querySelector('#voice-status')?.innerText.includes('Saved voice {NAME}')",
                           timeout=60_000)
    asked: list[str] = []

    def answer(accept: bool):
        def on_dialog(dialog):
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()
        return on_dialog

    page.once("dialog", answer(False))
    page.locator("#delete-voice").click()  # the click returns once the page's question was answered
    assert asked and NAME in asked[0] and "cannot be undone" in asked[0], asked
    page.once("dialog", answer(True))
    page.locator("#delete-voice").click()
    # deleted by the second ("yes") click, so the first ("no") kept it: else this would say there is no such voice
    page.wait_for_function(f"() => document.querySelector('#voice-status')?.innerText.includes('Deleted voice "
                           f"{NAME}')", timeout=60_000)
    assert len(asked) == 2
