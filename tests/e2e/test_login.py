"""The log-in of the one access policy in a real browser (issue 25, Build 4): with ``--auth`` and ``--api-key`` the
page shows gradio's log-in form (its scripts and styles public), a user:password log-in or any user with the API key
as password opens the page, and a wrong one does not."""

from __future__ import annotations

import pytest

from tests.ui_app import playwright_or_skip, start_app, stop_app

pytestmark = pytest.mark.e2e
playwright_or_skip()

KEY = "sk-e2e-login"


@pytest.fixture(scope="module")
def locked_url(tiny_checkpoint, tmp_path_factory):
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(tmp_path_factory.mktemp("login-out")),
                          "--auth", "mei:s3cret", "--api-key", KEY, lang="en")
    yield url
    stop_app(proc)


@pytest.mark.parametrize("user, password, opens", [("mei", "wrong", False), ("mei", "s3cret", True),
                                                   ("anyone", KEY, True)])
def test_the_login_form_opens_the_page_with_either_credential(browser, locked_url, user, password, opens):
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(locked_url)
        page.locator("input[type=password]").wait_for(timeout=60_000)  # the form itself loaded, unauthenticated
        page.locator("input[type=text]").first.fill(user)
        page.locator("input[type=password]").fill(password)
        page.locator("button", has_text="Login").click()
        if opens:
            page.wait_for_selector("#generate", timeout=60_000)
        else:
            page.get_by_text("Incorrect Credentials").wait_for(timeout=30_000)
            assert page.locator("#generate").count() == 0
    finally:
        context.close()
