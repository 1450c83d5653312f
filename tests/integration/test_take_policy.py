"""The take policy (``SynthesisParams.take_check``) with real scores (Whisper base through faster-whisper,
Resemblyzer; tests/quality_models.py): a segment below the thresholds is generated again with a new seed (the
engine's retake mechanism, seed + k * 1,000,003) up to ``take_max_rerolls`` times and the best take kept; every take
and its scores are in the result, the sidecar and results.jsonl; a job on a tiny model (noise) finishes with every
line re-rolled and marked as needing listening."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

import tests.fakes as fakes
from tests.fakes import FakeAdapter, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.core import RETAKE_SEED_STRIDE
from tts_app.metrics import TAKES_REROLLED
from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

SPEECH = "en_female_2.wav"


@pytest.fixture(scope="module")
def speech(data_dir, audio_manifest):
    """(samples at 16 kHz, transcript) of a real clip: what the fake model says for its "good" seeds."""
    import torch
    import torchaudio.functional as F

    samples, sr = sf.read(data_dir / SPEECH, dtype="float32")
    samples = F.resample(torch.from_numpy(samples), sr, 16000).numpy()
    transcript = next(f["transcript"] for f in audio_manifest["files"] if f["name"] == SPEECH)
    return samples, transcript


def test_rerolling_picks_the_seed_that_speaks(speech, quality_scorer, monkeypatch):
    samples, transcript = speech
    speaking_seed = 7 + RETAKE_SEED_STRIDE  # the second take speaks; the first and third are noise
    noise = fakes.fake_audio

    def audio(text, seed, *args, **kwargs):
        return samples.copy() if seed == speaking_seed else noise(text, seed, *args, **kwargs)[:16000]

    monkeypatch.setattr(fakes, "fake_audio", audio)
    reference = ReferenceAudio(samples=samples, sampling_rate=16000, key="speaker")
    rerolled_before = TAKES_REROLLED._value.get()
    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=200)), EngineConfig(wait_window_ms=0),
                    take_scorer=quality_scorer).start()
    try:
        result = engine.submit(SynthesisRequest(text=transcript, reference_audio=reference, params=SynthesisParams(
            seed=7, take_check="reroll"))).result(timeout=300)
    finally:
        engine.shutdown()
    assert result.ok and len(result.segments) == 1
    segment = result.segments[0]
    np.testing.assert_array_equal(result.audio, samples)  # the speaking take is the one kept
    assert segment.seed == speaking_seed and segment.rerolled == 1  # a take that passes ends the re-rolls
    assert [t["seed"] for t in segment.takes] == [7, speaking_seed]
    assert [t["kept"] for t in segment.takes] == [False, True]
    assert "intelligibility" in segment.takes[0]["problems"]
    assert segment.scores["problems"] == [] and segment.scores["error_rate"] <= 0.25
    assert segment.scores["similarity"] > 0.9 and not segment.needs_listening
    assert TAKES_REROLLED._value.get() - rerolled_before == 1


def test_a_job_on_a_tiny_model_rerolls_every_line_and_records_it(tiny_adapter, quality_scorer, tmp_path, data_dir):
    """A tiny random model speaks noise: under "reroll" (the job's default, 1 re-roll to keep the test short) every
    line is generated twice, each take below the intelligibility threshold; the job finishes with every line's audio
    and records every take; a line's own threshold (JSONL ``take_min_similarity``) reaches its takes."""
    from tts_app.jobs.runner import run_job
    from tts_app.runtime import Runtime

    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(data_dir / "en_female_1.wav", job / "anna.wav")
    lines = [{"input_text": "Good morning.", "prompt_audio": "anna.wav", "seed": 3},
             {"input_text": "Thank you.", "prompt_audio": "anna.wav", "seed": 5, "take_min_similarity": 0.0}]
    (job / "job.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    runtime = Runtime.from_adapter(tiny_adapter("csm"), "tiny-csm", EngineConfig(wait_window_ms=0),
                                   take_scorer=quality_scorer)
    try:
        summary = run_job(job / "job.jsonl", tmp_path / "out", runtime=runtime,
                          params=SynthesisParams(take_check="reroll", take_max_rerolls=1,
                                                        max_new_tokens=12))
    finally:
        runtime.close()
    assert summary.num_ok == 2 and summary.num_failed == 0
    records = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    for record in records:
        assert record["status"] == "ok" and record["needs_listening"]
        assert record["rerolled"] == 1 and len(record["takes"][0]) == 2
        assert all(t["problems"] and t["scores"]["transcript"] is not None for t in record["takes"][0])
        assert record["scores"][0]["problems"]
        sidecar = json.loads((tmp_path / "out" / record["metadata_path"]).read_text())
        assert sidecar["segments"][0]["takes"] == record["takes"][0]
        assert any("below the quality thresholds" in w for w in record["warnings"])
        assert sf.info(tmp_path / "out" / record["audio_path"]).frames > 0
    assert all("speaker" not in t["problems"] for t in records[1]["takes"][0])  # its threshold is 0
