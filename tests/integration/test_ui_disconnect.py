"""A page request whose client goes away is cancelled (issue 25, Build 6), as the HTTP API's are: the engine request
ends "cancelled" and its rows are freed long before the generation would have ended. The tiny VibeVoice model on
the composed server behind a real socket, in this process (``tests/composed_app.served_app``)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.composed_app import file_data, served_app
from tts_app.server.sessions import COOKIE_NAME, new_browser_token
from tts_app.config import EngineConfig, ModelConfig, ReferenceConfig

#: each decode step waits this long, so a generation of MAX_NEW_TOKENS steps takes minutes unless cancelled
STEP_DELAY_MS = 50
MAX_NEW_TOKENS = 2400  # the page's largest


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    from tts_app.runtime import Runtime

    root = tmp_path_factory.mktemp("disconnect")
    runtime = Runtime.load(ModelConfig(model_id=str(tiny_checkpoint("vibevoice")), device="cpu", dtype="float32"),
                           EngineConfig(wait_window_ms=1, simulate_step_delay_ms=STEP_DELAY_MS),
                           ReferenceConfig(cleanup="off"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(root / "gradio"))
        with served_app(root / "out", runtime=runtime) as served:
            yield served


def _call_data(client: httpx.Client, api_name: str, given: dict) -> list:
    """The full input list of a gradio endpoint: ``given`` by parameter name, every other at its default."""
    params = client.get("/gradio_api/info").json()["named_endpoints"][f"/{api_name}"]["parameters"]
    return [given[p["parameter_name"]] if p["parameter_name"] in given else p.get("parameter_default")
            for p in params]


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("api_name", ["synthesize", "synthesize_stream"])
def test_a_page_request_is_cancelled_when_its_client_disconnects(server, data_dir, api_name):
    engine = server.ctx.runtime.engine
    before = engine.stats()
    cookies = {COOKIE_NAME: new_browser_token()}
    with httpx.Client(base_url=server.url, cookies=cookies, timeout=30) as client:
        with open(data_dir / "en_female_1.wav", "rb") as f:
            uploaded = client.post("/gradio_api/upload", files={"files": ("ref.wav", f)}).json()[0]
        data = _call_data(client, api_name, {"reference_audio": file_data(uploaded), "text": "Hello there.",
                                             "max_new_tokens": MAX_NEW_TOKENS, "seed": 1})
        event_id = client.post(f"/gradio_api/call/{api_name}", json={"data": data}).json()["event_id"]
        with client.stream("GET", f"/gradio_api/call/{api_name}/{event_id}") as events:
            # the request is decoding: at least one step ran
            assert _wait(lambda: engine.stats().num_requests_active == 1
                         and engine.stats().num_row_steps > before.num_row_steps, 60)
            events.close()  # the client leaves mid-generation
    left_s = time.monotonic()
    assert _wait(lambda: engine.stats().num_requests_active == 0, 30), "the request still runs after its client left"
    after = engine.stats()
    assert after.num_requests_cancelled == before.num_requests_cancelled + 1
    assert after.num_requests_done == before.num_requests_done  # it did not run to its end
    assert time.monotonic() - left_s < MAX_NEW_TOKENS * STEP_DELAY_MS / 1000 / 4
