"""The Batch tab's Validate (issue 23, Why 5): the field help names every field a job line may have, in both
languages, and Validate flags the lines the loaded model would refuse when they run (emotion fields on a model
without emotion control: the same words the run records), and warns about a dialogue with more speakers than the
model's dialogue prompt takes. On the fake model."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import FakeAdapter, fake_app_context, fake_facts  # noqa: E402
from tts_app.jobs.schema import KNOWN_FIELDS  # noqa: E402
from tts_app.ui import batch  # noqa: E402
from tts_app.ui.texts import EN, ZH  # noqa: E402


@pytest.mark.parametrize("table", [EN, ZH], ids=["en", "zh"])
def test_the_field_help_names_every_field_a_line_may_have(table):
    named = set(re.findall(r"`([a-z_]+)`", table["jsonl_help"]))
    assert KNOWN_FIELDS <= named, sorted(KNOWN_FIELDS - named)


def _ctx(tmp_path, facts):
    return fake_app_context(tmp_path / "out", FakeAdapter(facts), start_jobs=True)


def test_validate_flags_the_lines_the_model_would_refuse(tmp_path, data_dir):
    ctx = _ctx(tmp_path, fake_facts(max_dialogue_speakers=2))  # no emotion control; a 2-speaker dialogue prompt
    try:
        lines = [{"input_text": "Plain line."},
                 {"input_text": "Happy line.", "emo_vector": [0.8, 0, 0, 0, 0, 0, 0, 0]},
                 {"script": "Speaker 1: One.\nSpeaker 2: Two.\nSpeaker 3: Three.",
                  "speakers": {"1": "en-male", "2": "en-female", "3": "zh-male"}}]
        jsonl = tmp_path / "job.jsonl"
        jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        voice = str(data_dir / "en_female_1.wav")
        page = SimpleNamespace(headers={"accept-language": "en"}, session_hash="tab1")
        table, summary = batch.validate_job(ctx, str(jsonl), default_voice=voice, request=page)
        rows = table.values.tolist()
        errors = {line: message for line, status, message in rows if status == "error"}
        warnings = {line: message for line, status, message in rows if status == "warning"}
        assert list(errors) == [2] and "emotion control" in errors[2] and "remove the emotion settings" in errors[2]
        assert 3 in warnings and "at most 2 speakers" in warnings[3]
        assert "2 valid, 1 invalid" in summary
        # the line Validate flags is the one the run fails, with the same words
        state = ctx.jobs.submit(jsonl, default_voice=voice)
        ctx.jobs.wait(state.job_id, timeout_s=60)
        records = {r["line"]: r for r in ctx.jobs.results(state.job_id)}
        assert records[2]["status"] == "failed" and errors[2] in records[2]["error"]
        assert records[1]["status"] == records[3]["status"] == "ok"
    finally:
        ctx.close()
