"""GLM-TTS's own JSONL (``uttid``, ``prompt_text``, ``prompt_speech``, ``syn_text``) runs unchanged through
``batch`` and the Batch tab, for any family (here the model-free fake adapter): outputs named by ``uttid``,
``prompt_text`` the reference transcript, ``prompt_speech`` the reference audio, ``syn_text`` the text.

``tests/data/glmtts/example_{zh,en}.jsonl`` are written exactly in the shape of upstream's
``examples/example_zh.jsonl`` / ``example_en.jsonl`` (github.com/zai-org/GLM-TTS): same keys in the same order,
string uttids "0", "1", ..., and the reference audio named as upstream names it, relative to the folder *above* the
JSONL (``examples/prompt/<clip>.wav``; upstream runs from its checkout's root). The clips are our own test clips,
copied into that layout by the tests (nothing is duplicated under tests/data).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.errors import JobLineError
from tts_app.jobs.schema import iter_job, make_sources, JobConfig, JobLine, InvalidLine
from tts_app.runtime import Runtime

GLMTTS_DATA = Path(__file__).resolve().parents[1] / "data" / "glmtts"


def _upstream_checkout(tmp_path: Path, data_dir: Path, name: str, extra_lines: list[str] = ()) -> Path:
    """``tmp_path/examples/<name>.jsonl`` + ``tmp_path/examples/prompt/<clip>.wav``: upstream's layout."""
    examples = tmp_path / "examples"
    (examples / "prompt").mkdir(parents=True)
    for clip in ("zh_female_1.wav", "en_female_1.wav"):
        shutil.copy(data_dir / clip, examples / "prompt" / clip)
    path = examples / f"{name}.jsonl"
    path.write_text((GLMTTS_DATA / f"{name}.jsonl").read_text(encoding="utf-8") + "".join(
        line + "\n" for line in extra_lines), encoding="utf-8")
    return path


def _records(out_dir: Path) -> dict[int, dict]:
    return {r["line"]: r for r in (json.loads(x) for x in (out_dir / "results.jsonl").read_text(
        encoding="utf-8").splitlines() if x.strip())}


BAD_LINES = [  # appended after upstream's lines: each fails alone, the others still run
    json.dumps({"uttid": "3", "prompt_text": "x", "prompt_speech": "examples/prompt/zh_female_1.wav"}),
    json.dumps({"uttid": "4", "prompt_text": "x", "prompt_audio": "examples/prompt/zh_female_1.wav",
                "syn_text": "混用两种格式。"}),
]


def test_upstream_jsonl_runs_unchanged_through_the_batch_command(tmp_path, data_dir, monkeypatch, capsys):
    from tts_app.cli.batch import main

    runtimes = []

    def fake_load(*args, **kwargs):
        runtimes.append(Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1)))
        return runtimes[-1]

    monkeypatch.setattr(Runtime, "load", staticmethod(fake_load))
    path = _upstream_checkout(tmp_path, data_dir, "example_zh", BAD_LINES)
    out = tmp_path / "outputs"
    status = main([str(path), "--out-dir", str(out)])
    err = capsys.readouterr().err
    assert status == 1 and runtimes  # the bad lines fail, the job ran
    records = _records(out)
    upstream = [json.loads(x) for x in (GLMTTS_DATA / "example_zh.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(records) == [1, 2, 3, 4, 5]
    for n, row in enumerate(upstream, start=1):
        assert records[n]["status"] == "ok", records[n]
        assert records[n]["audio_path"] == f"{row['uttid']}.wav"  # named by uttid
        meta = json.loads((out / f"{row['uttid']}.json").read_text(encoding="utf-8"))
        assert meta["text"]["input"] == row["syn_text"]  # syn_text is what is spoken
        assert meta["reference"]["text"] == row["prompt_text"]  # prompt_text is the reference transcript
        assert meta["reference"]["sha256"] == hashlib.sha256(  # prompt_speech is the reference audio
            (data_dir / "zh_female_1.wav").read_bytes()).hexdigest()
    assert records[4]["status"] == "failed" and "missing field 'syn_text'" in records[4]["error"]
    assert records[5]["status"] == "failed" and "mixes GLM-TTS's field names (uttid, syn_text)" in records[5]["error"]
    assert "prompt_audio" in records[5]["error"] and records[5]["error_i18n"]["code"] == "job_mixed_formats"
    assert sorted(p.name for p in out.glob("*.wav")) == ["0.wav", "1.wav", "2.wav"]
    # the path written from the folder above is found next to the JSONL, and the user is told so
    assert "was read as 'prompt/zh_female_1.wav' in the job file's folder" in err
    for runtime in runtimes:
        runtime.close()


def test_upstream_jsonl_runs_unchanged_through_the_batch_tab(tmp_path, data_dir):
    """The Batch tab's handler with the user's two uploads: upstream's JSONL, and a ZIP of the prompt folder (its
    members ``prompt/en_female_1.wav``, not ``examples/prompt/...``)."""
    from tts_app.config import ModelConfig
    from tts_app.ui import batch
    from tts_app.ui.context import AppContext, AppSettings

    uploads = tmp_path / "uploads"
    uploads.mkdir()
    jsonl = uploads / "example_en.jsonl"
    shutil.copy(GLMTTS_DATA / "example_en.jsonl", jsonl)
    with jsonl.open("a", encoding="utf-8") as fh:  # a bad line: nothing else is lost
        fh.write(json.dumps({"uttid": "1", "prompt_text": "x", "prompt_speech": "examples/prompt/en_female_1.wav",
                             "syn_text": "Same uttid twice."}) + "\n")
    with zipfile.ZipFile(uploads / "prompts.zip", "w") as zf:
        zf.write(data_dir / "en_female_1.wav", "prompt/en_female_1.wav")
    runtime = Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1))
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(),
                                 output_root=tmp_path / "out"), runtime=runtime)
    try:
        ctx.start_jobs()
        summary, _, found_zip = batch.run_job_blocking(ctx, str(jsonl), str(uploads / "prompts.zip"))
        assert summary.startswith("ok 2 · failed 1"), summary
        out = ctx.jobs.store.out_dir(summary.rsplit("(", 1)[1].rstrip(")"))
        with zipfile.ZipFile(found_zip) as zf:
            assert {"0.wav", "1.wav"} <= set(zf.namelist())
        records = _records(out)
        assert "lines 2 and 3" in records[3]["error"]
        meta = json.loads((out / "0.json").read_text(encoding="utf-8"))
        assert meta["text"]["input"] == "I didn't catch your name."
        assert meta["reference"]["text"].startswith("The morning train was late again")
    finally:
        ctx.close()


def _lines(tmp_path: Path, rows: list[dict]) -> list[JobLine | InvalidLine]:
    path = tmp_path / "job.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    with make_sources(path, None, JobConfig()) as sources:
        return list(iter_job(path, sources))


@pytest.mark.parametrize("row, en, zh", [
    ({"syn_text": "你好。", "input_text": "你好。", "prompt_speech": "v.wav"},
     "'syn_text' (GLM-TTS's name) and 'input_text' (ours) are the same field; keep one", "是同一个字段"),
    ({"uttid": "a", "prompt_text": "t", "prompt_audio": "v.wav", "input_text": "你好。"},
     "mixes GLM-TTS's field names (uttid) with ours (prompt_audio, input_text); write it in one format",
     "混用了 GLM-TTS 的字段名（uttid）和本程序的字段名（prompt_audio, input_text）"),
    ({"uttid": "a", "prompt_text": "t", "syn_text": "你好。"},
     "missing field 'prompt_speech' (the reference audio file; the line uses GLM-TTS's field names",
     "缺少字段 'prompt_speech'"),
    ({"output_name": "a", "prompt_audio": "v.wav"}, "missing field 'input_text' (the text to speak)",
     "缺少字段 'input_text'"),
])
def test_a_line_mixing_the_formats_or_missing_a_field_is_told_in_both_languages(tmp_path, data_dir, row, en, zh):
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "v.wav")
    (bad,) = _lines(tmp_path, [row])
    assert isinstance(bad, InvalidLine) and isinstance(bad.error, JobLineError)
    assert en in bad.message
    assert zh in bad.error.reason.render("zh")


def test_the_shorter_path_is_only_looked_for_inside_the_allowed_folders(tmp_path, data_dir):
    """Dropping leading folders never leaves the roots: ``../x/v.wav`` is not tried as ``v.wav``, and a file of the
    same name outside the job's folder is not found."""
    (tmp_path / "job").mkdir()
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "v.wav")  # outside the job folder
    path = tmp_path / "job" / "job.jsonl"
    path.write_text(json.dumps({"uttid": "a", "prompt_text": "t", "prompt_speech": "../v.wav",
                                "syn_text": "Hi."}) + "\n" + json.dumps(
        {"uttid": "b", "prompt_text": "t", "prompt_speech": "examples/prompt/v.wav", "syn_text": "Hi."}) + "\n",
                    encoding="utf-8")
    with make_sources(path, None, JobConfig()) as sources:
        first, second = iter_job(path, sources)
    assert isinstance(first, InvalidLine) and "leaves the allowed folders" in first.message
    assert isinstance(second, InvalidLine) and "not found" in second.message
