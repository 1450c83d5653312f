"""The Stop buttons of the Single and Dialogue tabs (issue 23, Why 5): Stop cancels only the request of its own page
session and tab, its segments leave the engine (no later batch runs them), the page says "stopped", and another
browser's request sharing the batch finishes with its audio. Through the tabs' own handlers on the fake model."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import FakeAdapter  # noqa: E402
from tts_app.config import EngineConfig, ModelConfig  # noqa: E402
from tts_app.runtime import Runtime  # noqa: E402
from tts_app.ui import handlers  # noqa: E402
from tts_app.ui.context import AppContext, AppSettings  # noqa: E402

# three segments each (max_segment_chars below): one runs in the held batch, two wait in the queue
ALPHA = "Alpha one is here now. Alpha two is here now. Alpha three is here now."
BRAVO = "Bravo one is here now. Bravo two is here now. Bravo three is here now."


@pytest.fixture()
def gated(tmp_path):
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    config = EngineConfig(max_batch_size=2, wait_window_ms=200)
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=config, output_root=tmp_path / "out"),
                     runtime=Runtime.from_adapter(adapter, "fake", config))
    yield ctx, adapter, gate
    gate.set()
    ctx.close()


def _page(session: str, lang: str = "en"):
    return SimpleNamespace(headers={"accept-language": lang}, session_hash=session)


def _in_thread(fn, *args, **kwargs) -> dict:
    """Run ``fn`` in a thread (a gradio worker); the dict gets its "result" or "error" once ``thread`` is joined."""
    out: dict = {}

    def run():
        try:
            out["result"] = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    return out


def _wait_until_running(*keys, timeout_s: float = 30.0) -> None:
    """Until every (session, tab) in ``keys`` has a running request (a handler thread registers it right after
    submitting, possibly after the worker already holds another page's batch)."""
    deadline = time.monotonic() + timeout_s
    while not all(handlers.RUNNING.is_running(*key) for key in keys):
        assert time.monotonic() < deadline, f"requests never started: {keys}"
        time.sleep(0.01)


def _single(ctx, data_dir, text, session, stream=False):
    call = handlers.synthesize_stream if stream else handlers.synthesize
    kwargs = dict(seed=1, max_segment_chars=24, request=_page(session), progress=lambda *a, **k: None)
    if stream:
        return lambda: list(call(ctx, str(data_dir / "en_female_1.wav"), text, "Some words.", **kwargs))
    return lambda: call(ctx, str(data_dir / "en_female_1.wav"), text, "Some words.", **kwargs)


@pytest.mark.parametrize("stream", [False, True], ids=["synthesize", "synthesize_stream"])
def test_stop_cancels_only_its_own_sessions_request_and_frees_its_segments(gated, data_dir, stream):
    ctx, adapter, gate = gated
    alpha = _in_thread(_single(ctx, data_dir, ALPHA, "tab-a", stream))
    bravo = _in_thread(_single(ctx, data_dir, BRAVO, "tab-b", stream))
    assert adapter.entered.wait(30)  # the worker holds a first batch
    _wait_until_running(("tab-a", "single"), ("tab-b", "single"))  # both pages' requests are submitted
    handlers.stop_generation(ctx, "dialogue", _page("tab-a"))  # the same page's other tab: nothing of it runs
    handlers.stop_generation(ctx, "single", _page("tab-c"))  # another page: nothing of it runs
    assert ctx.engine.stats().num_requests_cancelled == 0
    handlers.stop_generation(ctx, "single", _page("tab-a"))
    gate.set()
    for run in (alpha, bravo):
        run["thread"].join(60)
    assert isinstance(alpha.get("error"), gr.Error) and "Stopped" in alpha["error"].message, alpha
    assert "error" not in bravo, bravo
    final = bravo["result"][-1] if stream else bravo["result"]
    assert str(final[-5 if stream else 0]).endswith(".wav")  # the other browser got its audio
    stats = ctx.engine.stats()
    assert stats.num_requests_cancelled == 1 and stats.num_requests_done == 1
    # Alpha's segments ran in the held batch at most, never after the stop
    later = [text for batch in adapter.batches[1:] for text in batch]
    assert not any("Alpha" in t for t in later) and any("Bravo" in t for t in later), adapter.batches
    assert handlers.RUNNING.cancel("tab-b", "single") == 0  # nothing left behind for a finished request


def test_dialogue_stop_is_its_own_and_speaks_the_pages_language(gated, data_dir):
    ctx, adapter, gate = gated
    script = "Speaker 1: 第一句话在这里。第二句话在这里。\nSpeaker 2: 第三句话在这里。第四句话在这里。"
    clip = str(data_dir / "zh_female_1.wav")
    run = _in_thread(handlers.synthesize_dialogue, ctx, script, audio_1=clip, audio_2=clip, seed=2,
                     request=_page("tab-d", "zh-CN,zh;q=0.9"), progress=lambda *a, **k: None)
    assert adapter.entered.wait(30)
    _wait_until_running(("tab-d", "dialogue"))
    handlers.stop_generation(ctx, "single", _page("tab-d"))  # the Single tab's Stop leaves the dialogue alone
    assert ctx.engine.stats().num_requests_cancelled == 0
    handlers.stop_generation(ctx, "dialogue", _page("tab-d", "zh-CN"))
    gate.set()
    run["thread"].join(60)
    assert isinstance(run.get("error"), gr.Error) and "已停止" in run["error"].message, run
    assert ctx.engine.stats().num_requests_cancelled == 1
