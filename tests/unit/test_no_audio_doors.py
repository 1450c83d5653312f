"""A request the model ends at once in every segment (no audio at all; IndexTTS 2's beams often do this on random
weights, as the package's own ``infer`` does) reads the same at every door: the page's error, ``synth``'s error and
exit status 1 with no file written, a JSONL line failed with the same words, in the user's language."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import FakeAdapter, fake_app_context  # noqa: E402
from tts_app.config import EngineConfig  # noqa: E402
from tts_app.runtime import Runtime  # noqa: E402

TEXT = "Hello there, how are you?"
SEED = 12
ZH = f"模型没有为这段文本生成音频（种子 {SEED}）：它立即结束了。请换一个种子"
EN = f"The model produced no audio for this text (seed {SEED}): it ended speech at once. Try another seed"


class Mute(FakeAdapter):
    """Every row ends at once: no samples."""

    def postprocess(self, outputs, inputs):
        return [np.zeros(0, np.float32) for _ in outputs["rows"]]


def test_the_page_refuses_it_naming_the_seed(tmp_path, data_dir):
    from tts_app.ui import handlers

    ctx = fake_app_context(tmp_path / "out", Mute())
    try:
        for lang, want in (("zh-CN", ZH), ("en", EN)):
            with pytest.raises(gr.Error) as caught:
                handlers.synthesize(ctx, str(data_dir / "en_female_1.wav"), TEXT, "Some words.", seed=SEED,
                                    request=SimpleNamespace(headers={"accept-language": lang}, session_hash="t"),
                                    progress=lambda *a, **k: None)
            assert caught.value.message == want
    finally:
        ctx.close()


def test_synth_says_the_same_and_writes_nothing(monkeypatch, tmp_path, data_dir, capsys):
    from tts_app.cli.synth import main

    monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, *a, **k: Runtime.from_adapter(
        Mute(), "mute", EngineConfig(wait_window_ms=0))))
    out = tmp_path / "out.wav"
    for lang, want in (("zh", ZH), ("en", EN)):
        status = main(["--ref", str(data_dir / "en_female_1.wav"), "--text", TEXT, "--out", str(out), "--seed",
                       str(SEED), "--lang", lang])
        err = capsys.readouterr().err
        assert status == 1 and err.strip().endswith(want), err
    assert list(tmp_path.iterdir()) == []  # no 0-sample WAV, no sidecar


def test_synth_with_a_target_duration_says_no_audio_not_a_duration_problem(monkeypatch, tmp_path, data_dir, capsys):
    """A --duration (or speed, loudness) on a request the model spoke nothing for is not the user's mistake: the
    same no-audio words and exit 1 (was: 'there is no audio to fit into the target duration', exit 2)."""
    from tts_app.cli.synth import main

    monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, *a, **k: Runtime.from_adapter(
        Mute(), "mute", EngineConfig(wait_window_ms=0))))
    status = main(["--ref", str(data_dir / "en_female_1.wav"), "--text", TEXT, "--out", str(tmp_path / "o.wav"),
                   "--seed", str(SEED), "--duration-s", "2", "--loudness", "-16"])
    err = capsys.readouterr().err
    assert status == 1 and err.strip().endswith(EN), err


def test_a_job_line_fails_with_the_same_words(tmp_path, data_dir):
    from tts_app.frontend.messages import localize_record
    from tts_app.jobs.runner import run_job
    from tts_app.output_layout import RESULTS_NAME

    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": TEXT, "prompt_audio": str(data_dir / "en_female_1.wav"),
                               "seed": SEED}) + "\n", encoding="utf-8")
    runtime = Runtime.from_adapter(Mute(), "mute", EngineConfig(wait_window_ms=0))
    try:
        summary = run_job(job, tmp_path / "out", runtime, config=_config(data_dir))
    finally:
        runtime.close()
    (record,) = [json.loads(line) for line in (tmp_path / "out" / RESULTS_NAME).read_text().splitlines()]
    assert record["status"] == "failed" and record["error"] == EN and summary.failed
    assert localize_record(record, "error", "zh") == ZH


def _config(data_dir):
    from tts_app.jobs.schema import JobConfig

    return JobConfig(extra_allowed_roots=(str(data_dir),))


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_endpoint_refuses_it_with_the_same_words(tmp_path, stream):
    """/v1/audio/speech: 422 ``no_audio`` with the same text (was: HTTP 500 and a traceback from the MP3 encoder
    given 0 samples, or an empty body)."""
    from fastapi.testclient import TestClient

    from tts_app.config import ServerConfig
    from tts_app.server.app import build_app
    from tts_app.voices import VoiceLibrary

    runtime = Runtime.from_adapter(Mute(), "mute", EngineConfig(wait_window_ms=0))
    host = SimpleNamespace(runtime=runtime, voices=VoiceLibrary(tmp_path / "voices"), output_root=tmp_path / "o",
                           load_error=None, extra={})
    try:
        app, _ = build_app(host, ServerConfig(rate_limit_per_min=0))
        body = {"model": "tts-1", "input": TEXT, "voice": "en-female", "seed": SEED, "stream": stream}
        response = TestClient(app).post("/v1/audio/speech", json=body)
    finally:
        runtime.close()
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == EN and response.json()["error"]["code"] == "no_audio"
    assert response.json()["error"]["param"] == "seed"  # what to change, not the text
