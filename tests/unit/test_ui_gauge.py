"""The Memory tab's chart speaks the page's language: axis titles, the legend's title and its "ok" entry (the
column names the plot is built on stay as they are; "OOM" is the term in both languages)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import fake_app_context  # noqa: E402
from tts_app.ui import handlers  # noqa: E402


@pytest.fixture()
def ctx(tmp_path):
    ctx = fake_app_context(tmp_path / "out")
    yield ctx
    ctx.close()


@pytest.mark.parametrize("accept, x_title, legend, ok", [("en-US,en;q=0.9", "seconds ago", "event", "ok"),
                                                         ("zh-CN,zh;q=0.9", "秒前", "事件", "正常")])
def test_the_memory_chart_is_titled_and_labelled_in_the_pages_language(ctx, accept, x_title, legend, ok):
    page = SimpleNamespace(headers={"accept-language": accept}, session_hash="s")
    _, plot = handlers.gauge(ctx, page)
    assert plot["x_title"] == x_title and plot["color_title"] == legend
    assert set(plot["value"]["event"]) <= {ok, "OOM"} and ok in set(plot["value"]["event"])


def _wait_for(predicate, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_three_open_memory_tabs_add_one_reading_per_sampling_period(ctx, monkeypatch):
    """Issue 26, Build 6: the pages only read the history; the app's one sampler writes it (before: every page's
    timer tick appended a reading, 3 viewers -> 3 readings a second)."""
    import tts_app.ui.context as context

    monkeypatch.setattr(context, "MEMORY_SAMPLE_PERIOD_S", 3600.0)  # one reading now, the next in an hour
    pages = [SimpleNamespace(headers={"accept-language": "en"}, session_hash=f"tab{i}") for i in range(3)]
    handlers.gauge(ctx, pages[0])
    _wait_for(lambda: len(ctx.history.rows()) == 1)  # the sampler's first reading
    for _tick in range(5):
        for page in pages:
            summary, plot = handlers.gauge(ctx, page)
            assert summary and len(plot["value"]) == 1
    assert len(ctx.history.rows()) == 1
    ctx.memory_sampler().sample_once()  # the next period's reading: every page now shows two
    assert all(len(handlers.gauge(ctx, page)[1]["value"]) == 2 for page in pages)


def test_the_sampler_reads_at_its_own_period_and_marks_the_engines_oom_events():
    from tts_app.monitor import MemoryHistory, MemorySampler, read_memory

    history = MemoryHistory()
    ooms = iter([0, 0, 2, 2, 2, 3] + [3] * 1000)
    sampler = MemorySampler(history, lambda: read_memory("cpu"), lambda: next(ooms), period_s=0.01).start()
    try:
        _wait_for(lambda: len(history.rows()) >= 6)
    finally:
        sampler.stop()
    rows = history.rows()
    assert len(history.oom_times()) == 3  # 0 -> 2 -> 3 OOM errors counted by the engine
    assert [r["event"] for r in rows[:6]] == ["ok", "ok", "OOM", "ok", "ok", "OOM"]
    count = len(history.rows())
    assert len(history.rows()) == count  # stopped: no more readings
