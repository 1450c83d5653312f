"""Runtime (engine + the one reference preparer) and the metadata sidecar written next to every output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tests.fakes import FakeAdapter
from tests.sidecar_check import check_sidecar
from tts_app.config import EngineConfig
from tts_app.request import SynthesisParams, SynthesisRequest
from tts_app.runtime import Runtime, checkpoint_sha256


@pytest.fixture()
def runtime():
    rt = Runtime.from_adapter(FakeAdapter(), "fake-model", EngineConfig(wait_window_ms=0.0))
    yield rt
    rt.close()


def test_one_reference_preparer_at_the_models_rate_shared_by_every_caller(runtime, data_dir, tmp_path):
    from tts_app.jobs.runner import run_job

    voice = tmp_path / "voice.wav"
    voice.write_bytes((data_dir / "en_female_1.wav").read_bytes())
    prepared = runtime.references.prepare(voice)  # as the UI does on upload
    assert prepared.audio.sampling_rate == runtime.engine.sampling_rate == 16000
    job = tmp_path / "job.jsonl"
    job.write_text("".join(json.dumps({"input_text": f"Line {i}.", "prompt_audio": "voice.wav"}) + "\n"
                           for i in range(3)), encoding="utf-8")
    assert run_job(job, tmp_path / "out", runtime).all_ok
    cache = runtime.references.cache
    assert (cache.misses, cache.hits) == (1, 3)  # cleaned once for the upload and all three job lines


def test_a_job_lines_reference_cleanup_reaches_the_preparer(runtime, data_dir, tmp_path):
    """A JSONL line's reference_cleanup picks how its reference is prepared: "full" trims the clip, the default
    ("auto") sends it whole; the preparer caches each separately."""
    from tts_app.jobs.runner import run_job

    (tmp_path / "voice.wav").write_bytes((data_dir / "en_female_1.wav").read_bytes())
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": "One.", "prompt_audio": "voice.wav", "output_name": "auto"}) + "\n"
                   + json.dumps({"input_text": "One.", "prompt_audio": "voice.wav", "output_name": "full",
                                 "reference_cleanup": "full"}) + "\n", encoding="utf-8")
    assert run_job(job, tmp_path / "out", runtime).all_ok
    auto = json.loads((tmp_path / "out" / "auto.json").read_text(encoding="utf-8"))["reference"]
    full = json.loads((tmp_path / "out" / "full.json").read_text(encoding="utf-8"))["reference"]
    assert (auto["cleanup"], full["cleanup"]) == ("auto", "full")
    assert full["cleaned_duration_s"] < auto["cleaned_duration_s"]
    assert runtime.references.cache.misses == 2


def test_sidecar_is_complete_and_written_after_the_audio(runtime, data_dir, tmp_path):
    from tts_app.outputs import output_metadata, save_outputs

    ref_path = data_dir / "en_female_1.wav"
    reference = runtime.references.prepare(ref_path, reference_text="A transcript.")
    text = "第1句话。Second sentence here!"
    request = SynthesisRequest(text=text, reference_audio=reference.audio, reference_text="A transcript.",
                               params=SynthesisParams(seed=11, max_segment_chars=8, temperature=0.7))
    result = runtime.engine.submit(request).result()
    assert result.ok and len(result.segments) >= 2
    meta = output_metadata(runtime, request, result, entry_point="synth", reference=reference,
                           warnings=["caller's own notice"])
    files = save_outputs(tmp_path / "o.wav", result, meta, subtitles_path=tmp_path / "o.srt")
    got = check_sidecar(files.audio, entry_point="synth", text=text, reference=ref_path, model_id="fake-model")
    assert got["text"]["normalized"] == result.normalized_text and "一" in got["text"]["normalized"]
    assert got["generation"]["temperature"] == 0.7 and got["generation_sources"]["temperature"] == "request"
    assert got["generation_sources"]["top_p"] != "request" and got["requested"]["top_p"] is None
    assert got["reference"]["text"] == "A transcript." and "caller's own notice" in got["warnings"]
    assert [s["seed"] for s in got["segments"]] == [11 + i for i in range(len(result.segments))]
    data, rate = sf.read(files.audio, dtype="float32")
    assert rate == 16000 and data.shape == result.audio.shape
    np.testing.assert_allclose(data, result.audio, atol=1 / 32768)  # the result itself, as 16-bit PCM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json", "o.srt", "o.wav"]  # no temporary files left


def test_checkpoint_hash_follows_the_content_of_the_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 10)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x").write_text("ignored")
    first = checkpoint_sha256(tmp_path)
    (tmp_path / ".cache" / "x").write_text("changed, still ignored")
    assert checkpoint_sha256(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"\1" * 10)
    assert checkpoint_sha256(tmp_path) != first


def test_a_cached_hub_model_is_identified_by_its_commit_and_blob_hashes(tmp_path):
    """The hub cache layout (huggingface_hub docs, "Manage the cache"): snapshots/<commit>/<file> links to
    blobs/<hash>; refs/main names the commit."""
    import hashlib
    import os

    from tts_app.runtime import hub_revision

    repo = tmp_path / "models--org--tts-model"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in (("config.json", b"{}"), ("model.safetensors", b"\0" * 64)):
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        os.symlink(repo / "blobs" / blob, snapshot / name)
    assert hub_revision("org/tts-model", cache_dir=tmp_path) == (commit, snapshot)
    assert hub_revision("org/not-cached", cache_dir=tmp_path) == (None, None)
    assert hub_revision(str(tmp_path)) == (None, None)  # a local folder has no hub revision
    # a snapshot is identified by its files' blob hashes: another commit with other weights differs, one with the
    # same files does not
    other = repo / "snapshots" / ("f" * 40)
    other.mkdir()
    for link in snapshot.iterdir():
        os.symlink(link.resolve(), other / link.name)
    assert checkpoint_sha256(other) == checkpoint_sha256(snapshot)
    new_weights = hashlib.sha256(b"\1" * 64).hexdigest()
    (repo / "blobs" / new_weights).write_bytes(b"\1" * 64)
    (other / "model.safetensors").unlink()
    os.symlink(repo / "blobs" / new_weights, other / "model.safetensors")
    assert checkpoint_sha256(other) != checkpoint_sha256(snapshot)


def test_segment_context_turned_off_is_not_called_not_given():
    """A JSONL line's ``"segment_context": false`` over a job's ``true`` (or the box left unticked) ran without it:
    the sidecar says it was off, not that nobody gave it."""
    from tests.fakes import fake_facts
    from tts_app.outputs import generation_settings

    facts = fake_facts(supports_segment_context=True)
    settings, sources = generation_settings(facts, SynthesisParams(segment_context=False), None)
    assert settings["segment_context"] is False and sources["segment_context"].startswith("off")
    settings, sources = generation_settings(facts, SynthesisParams(segment_context=True), None)
    assert settings["segment_context"] is True and sources["segment_context"] == "request"
