"""``/metrics`` times every synthesis (issue 23, Why 5): the page's Single tab (streamed or not) and each ok JSONL job
line record their real-time factor and time to first audio, as API requests do; a stopped or failed one records
nothing. On the fake model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import fake_app_context  # noqa: E402
from tts_app import metrics  # noqa: E402
from tts_app.ui import handlers  # noqa: E402


def _count(histogram, entry_point: str) -> float:
    """Observations recorded so far under ``entry_point``."""
    for family in histogram.collect():
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels.get("entry_point") == entry_point:
                return sample.value
    return 0.0


def _counts(entry_point: str) -> tuple[float, float]:
    return _count(metrics.REAL_TIME_FACTOR, entry_point), _count(metrics.TIME_TO_FIRST_AUDIO, entry_point)


@pytest.fixture()
def ctx(tmp_path):
    ctx = fake_app_context(tmp_path / "out", start_jobs=True)
    yield ctx
    ctx.close()


def test_page_requests_and_job_lines_record_time_to_first_audio_and_real_time_factor(ctx, data_dir, tmp_path):
    page = SimpleNamespace(headers={"accept-language": "en"}, session_hash="tab1")
    clip = str(data_dir / "en_female_1.wav")
    before = _counts("web")
    handlers.synthesize(ctx, clip, "Hello there.", request=page, progress=lambda *a, **k: None)
    list(handlers.synthesize_stream(ctx, clip, "Hello again.", request=page, progress=lambda *a, **k: None))
    assert _counts("web") == (before[0] + 2, before[1] + 2)
    with pytest.raises(gr.Error):  # refused before it ran: nothing recorded
        handlers.synthesize(ctx, clip, "", request=page, progress=lambda *a, **k: None)
    assert _counts("web") == (before[0] + 2, before[1] + 2)

    before = _counts("job")
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text("".join(json.dumps({"input_text": f"Line {i}."}) + "\n" for i in range(3)), encoding="utf-8")
    state = ctx.jobs.submit(jsonl, default_voice=clip)
    assert ctx.jobs.wait(state.job_id, timeout_s=60).num_ok == 3
    assert _counts("job") == (before[0] + 3, before[1] + 3)
