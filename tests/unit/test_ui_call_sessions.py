"""No memory growth over the page's API calls (issue 25, Build 6): gradio keeps a session (a copy of every
component's config, ~250 KB for this page) for each ``/gradio_api/call`` request, which names no session of its own,
until 10,000 exist; the server drops it once the call's event stream has ended (``tts_app.ui.launch
.CallSessionReaper``). RSS over 500 calls is measured by ``bench/jobs_soak.py``'s red-team phase."""

from __future__ import annotations

import pytest

from tests.composed_app import Browser, composed_app_at, file_data

NUM_CALLS = 12


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with composed_app_at(tmp_path_factory.mktemp("call-sessions")) as composed:
        yield composed


def _gradio_app(server):
    """gradio's ``App``: inside the parent app attached to the server's ``LateMount`` at ``/``."""
    parent = next(route.app for route in server.app.routes if getattr(route, "path", None) == "").app
    return next(route.app for route in parent.routes if hasattr(getattr(route, "app", None), "state_holder"))


def _data(browser, api_name: str, given: dict) -> list:
    params = browser.client.get("/gradio_api/info").json()["named_endpoints"][f"/{api_name}"]["parameters"]
    return [given.get(p["parameter_name"], p.get("parameter_default")) for p in params]


def test_api_calls_leave_no_session_behind(server, data_dir):
    gradio_app = _gradio_app(server)
    browser = Browser(server.client)
    reference = file_data(browser.upload(data_dir / "en_female_1.wav"))
    sessions_before = len(gradio_app.state_holder.session_data)
    for seed in range(NUM_CALLS):
        event = browser.call("synthesize", _data(browser, "synthesize", {"reference_audio": reference,
                                                                           "text": "Hello there.", "seed": seed}))
        assert "event: complete" in browser.result("synthesize", event.json()["event_id"])
    assert len(gradio_app.state_holder.session_data) - sessions_before < NUM_CALLS // 2
    queue = gradio_app.get_blocks()._queue
    assert len(queue.pending_messages_per_session) < NUM_CALLS // 2
