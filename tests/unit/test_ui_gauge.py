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
