"""Voice library: save / list / rename / delete on disk, reuse of the cleaned clip, JSONL ``voice`` lines, errors that
name the voice. Real reference cleanup, real engine around the fake adapter (no model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.fakes import FakeAdapter
from tts_app.audio.preparer import ReferencePreparer
from tts_app.config import EngineConfig
from tts_app.errors import ReferenceAudioError
from tts_app.jobs.runner import read_results, run_job, validate_job
from tts_app.jobs.schema import JobConfig
from tts_app.request import SynthesisParams, SynthesisRequest
from tts_app.runtime import Runtime
from tts_app.voices import VoiceError, VoiceLibrary, VoiceNotFoundError


@pytest.fixture()
def runtime():
    rt = Runtime.from_adapter(FakeAdapter(), "fake-model", EngineConfig(wait_window_ms=0.0))
    yield rt
    rt.close()


def synthesize(runtime: Runtime, reference, text: str = "Hello there, this is a test."):
    request = SynthesisRequest(text=text, reference_audio=reference.audio, params=SynthesisParams(seed=3))
    result = runtime.engine.submit(request).result(timeout=60)
    assert result.ok, result.error
    return result.audio


def test_saved_voice_survives_a_restart_and_sounds_like_its_uploaded_file(tmp_path, data_dir, runtime):
    upload = data_dir / "en_female_1.wav"
    transcript = "The morning train was late again."
    from_upload = runtime.references.prepare(upload, reference_text=transcript)
    library = VoiceLibrary(tmp_path / "voices")
    saved = library.save("Anna", upload, runtime.references, reference_text=transcript)
    assert saved.source_sha256 == from_upload.sha256

    # "restart": a new library object on the same folder and a new preparer with an empty cache
    fresh = ReferencePreparer(runtime.engine.sampling_rate)
    reopened = VoiceLibrary(tmp_path / "voices")
    assert "Anna" in reopened.names()
    prepared = reopened.prepare("anna", fresh)  # names are case-insensitive
    assert len(fresh.cache) == 0  # the stored cleaned clip was used: nothing was cleaned again
    assert prepared.voice == "Anna" and prepared.sha256 == from_upload.sha256
    np.testing.assert_array_equal(prepared.audio.samples, from_upload.audio.samples)
    assert prepared.audio.key == from_upload.audio.key
    assert reopened.get("ANNA").reference_text == "The morning train was late again."
    np.testing.assert_array_equal(synthesize(runtime, prepared), synthesize(runtime, from_upload))


def test_another_model_rate_cleans_the_source_again_and_keeps_both(tmp_path, data_dir):
    library = VoiceLibrary(tmp_path / "voices", bundled_dir=None)
    at_24k = ReferencePreparer(24000)
    library.save("wei", data_dir / "zh_male_1.wav", at_24k)
    at_44k = ReferencePreparer(44100)
    prepared = library.prepare("wei", at_44k)
    assert prepared.audio.sampling_rate == 44100
    direct = at_44k.prepare(data_dir / "zh_male_1.wav")
    np.testing.assert_array_equal(prepared.audio.samples, direct.audio.samples)
    cleaned = sorted(p.name for p in (library.get("wei").folder / "cleaned").glob("*.wav"))
    assert [name.split("_")[0] for name in cleaned] == ["24000", "44100"]


def test_rename_delete_and_name_rules(tmp_path, data_dir):
    library = VoiceLibrary(tmp_path / "voices", bundled_dir=None)
    preparer = ReferencePreparer(24000)
    library.save("mei", data_dir / "zh_female_1.wav", preparer)
    library.save("bob", data_dir / "en_male_1.wav", preparer)
    with pytest.raises(VoiceError, match="'mei' is already taken"):
        library.save("MEI", data_dir / "en_male_1.wav", preparer)
    with pytest.raises(VoiceError, match="already taken"):
        library.rename("bob", "Mei")
    renamed = library.rename("mei", "梅 (narrator)")
    assert library.names() == ["bob", "梅 (narrator)"] and renamed.voice_id == library.get("梅 (narrator)").voice_id
    library.delete("bob")
    assert library.names() == ["梅 (narrator)"]
    assert not any(p.name.startswith(".") for p in (tmp_path / "voices").iterdir())  # no staging leftovers
    with pytest.raises(VoiceNotFoundError, match=r"no voice named 'bob' \(voices: '梅 \(narrator\)'\)"):
        library.get("bob")
    for bad, why in (("", "empty"), ("a/b", "slash"), ("x" * 65, "at most 64")):
        with pytest.raises(VoiceError, match=why):
            library.save(bad, data_dir / "en_male_1.wav", preparer)


def test_an_unusable_clip_is_refused_and_nothing_is_written(tmp_path, data_dir):
    library = VoiceLibrary(tmp_path / "voices", bundled_dir=None)
    with pytest.raises(ReferenceAudioError):
        library.save("silence", data_dir / "silence_digital_5s.wav", ReferencePreparer(24000))
    assert library.names() == []
    assert not (tmp_path / "voices").exists() or not any((tmp_path / "voices").iterdir())


def test_overwrite_replaces_a_saved_voice_but_never_a_bundled_one(tmp_path, data_dir):
    library = VoiceLibrary(tmp_path / "voices")
    preparer = ReferencePreparer(24000)
    bundled = library.get("en-female")
    assert bundled.bundled and bundled.reference_text
    with pytest.raises(VoiceError, match="bundled example voice"):
        library.save("en-female", data_dir / "en_male_1.wav", preparer, overwrite=True)
    with pytest.raises(VoiceError, match="bundled"):
        library.delete("en-female")
    first = library.save("x", data_dir / "en_male_1.wav", preparer)
    second = library.save("x", data_dir / "zh_male_1.wav", preparer, overwrite=True)
    assert second.voice_id != first.voice_id and not first.folder.exists()
    assert [v.name for v in library.list() if not v.bundled] == ["x"]


def test_bundled_voices_are_usable_without_a_voices_folder():
    library = VoiceLibrary(None)
    assert {"en-female", "en-male", "zh-female", "zh-male"} <= set(library.names())
    prepared = library.prepare("zh-female", ReferencePreparer(24000))
    assert prepared.audio.duration_s > 2.0 and prepared.voice == "zh-female"
    with pytest.raises(VoiceError, match="--voices-dir"):
        library.save("new", b"RIFF", ReferencePreparer(24000))


def test_jsonl_line_with_a_voice_runs_and_its_sidecar_names_the_voice(tmp_path, data_dir, runtime):
    voices = tmp_path / "voices"
    VoiceLibrary(voices).save("anna", data_dir / "en_female_1.wav", runtime.references, reference_text="Hi there.")
    shutil.copy(data_dir / "en_male_1.wav", tmp_path / "bob.wav")
    jsonl = tmp_path / "job.jsonl"
    lines = [{"input_text": "First line in a saved voice.", "voice": "Anna", "output_name": "a"},
             {"input_text": "A bundled voice.", "voice": "zh-male", "output_name": "b"},
             {"input_text": "No such voice.", "voice": "ghost", "output_name": "c"},
             {"input_text": "Both given.", "voice": "anna", "prompt_audio": "bob.wav", "output_name": "d"}]
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    config = JobConfig(voices_dir=str(voices))
    report = validate_job(jsonl, config=config)
    assert [(r.line, r.status) for r in report.rows] == [(3, "error"), (4, "error")]
    assert "voice 'ghost' is not in the voice library" in report.rows[0].message
    assert "'anna'" in report.rows[0].message and "both 'voice' and 'prompt_audio'" in report.rows[1].message

    summary = run_job(jsonl, tmp_path / "out", runtime, config=config)
    assert (summary.num_ok, summary.num_failed) == (2, 2)
    sidecar = json.loads((tmp_path / "out" / "a.json").read_text(encoding="utf-8"))
    assert sidecar["reference"]["voice"] == "anna" and sidecar["reference"]["text"] == "Hi there."
    upload = runtime.references.prepare(data_dir / "en_female_1.wav")
    assert sidecar["reference"]["sha256"] == upload.sha256
    records = read_results(tmp_path / "out")
    assert records[1]["status"] == "ok" and records[2]["status"] == "ok"


def test_jsonl_dialogue_line_with_script_and_speakers(tmp_path, data_dir, runtime):
    import zipfile

    from tts_app.jobs.runner import make_results_zip

    shutil.copy(data_dir / "en_male_1.wav", tmp_path / "bob.wav")
    jsonl = tmp_path / "job.jsonl"
    lines = [{"script": "Speaker 1: Hello Bob.\n[S2] Hi Anna, good to see you.", "speakers": {"1": "en-female",
                                                                                             "2": "bob.wav"},
              "output_name": "talk"},
             {"script": [{"speaker": "Anna", "text": "Chapter free talk."}], "speakers": {"Anna": "ghost.wav"}},
             {"script": "Speaker 1: hi", "speakers": {"1": "en-male"}, "input_text": "also text"},
             {"script": "Speaker 1: Part one.\n", "speakers": {"2": "en-male"}}]
    jsonl.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    report = validate_job(jsonl)
    messages = {r.line: r.message for r in report.rows if r.line}  # line 0: advice for the whole file
    assert set(messages) == {2, 3, 4}
    assert "'ghost.wav' not found" in messages[2] and "both 'script' and 'input_text'" in messages[3]
    assert "Speaker 1 (speaker 1) has no voice" in messages[4]
    summary = run_job(jsonl, tmp_path / "out", runtime)
    assert summary.num_ok == 1
    sidecar = json.loads((tmp_path / "out" / "talk.json").read_text(encoding="utf-8"))
    assert [s["reference"]["name"] for s in sidecar["speakers"]] == ["en-female", "bob.wav"]
    assert [s["speaker"] for s in sidecar["segments"]] == ["Speaker 1", "Speaker 2"]
    with zipfile.ZipFile(make_results_zip(tmp_path / "out")) as zf:
        assert {"talk.wav", "talk.json", "results.jsonl"} <= set(zf.namelist())


def test_jsonl_chapters_go_into_the_zip(tmp_path, data_dir, runtime):
    import zipfile

    from tts_app.jobs.runner import make_results_zip

    jsonl = tmp_path / "job.jsonl"
    line = {"input_text": "# 第一章\n我们出发了。\n# 第二章\n我们到了。", "voice": "zh-female", "output_name": "book"}
    jsonl.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    assert run_job(jsonl, tmp_path / "out", runtime).num_ok == 1
    with zipfile.ZipFile(make_results_zip(tmp_path / "out")) as zf:
        assert {"book.wav", "book.ch01_第一章.wav", "book.ch02_第二章.wav"} <= set(zf.namelist())


def test_a_voice_keeps_the_reference_cleanup_it_was_saved_with(tmp_path, data_dir, runtime):
    """Issue 24: the cleanup chosen when a voice is saved is stored with it and used wherever the voice is used;
    a request that names its own cleanup gets that one."""
    upload = data_dir / "en_female_1.wav"
    refs = runtime.references
    full, auto = refs.prepare(upload, cleanup="full"), refs.prepare(upload)
    assert not np.array_equal(full.audio.samples, auto.audio.samples)  # the choice is audible
    VoiceLibrary(tmp_path / "voices").save("anna", upload, refs, cleanup="full")
    library = VoiceLibrary(tmp_path / "voices")  # a restart
    assert library.get("anna").reference_cleanup == "full" and library.get("anna").to_dict()["reference_cleanup"] == "full"
    stored = library.prepare("anna", refs)
    assert np.array_equal(stored.audio.samples, full.audio.samples) and stored.report.cleanup == "full"
    fresh = ReferencePreparer(refs.sampling_rate, refs.config)  # no cache: cleaned again from the source
    assert np.array_equal(library.prepare("anna", fresh).audio.samples, full.audio.samples)
    asked = library.prepare("anna", refs, cleanup="auto")
    assert np.array_equal(asked.audio.samples, auto.audio.samples) and asked.report.cleanup == "auto"
    assert np.array_equal(library.prepare("anna", refs).audio.samples, full.audio.samples)  # both stay stored


def test_jsonl_voices_speakers_and_the_default_voice_use_the_chosen_cleanup(tmp_path, data_dir, runtime):
    """A line's saved voice is cleaned as it was saved unless the line names a cleanup; a dialogue speaker's file
    and the job's default voice take the line's / job's ``reference_cleanup``."""
    voices = tmp_path / "voices"
    VoiceLibrary(voices).save("anna", data_dir / "en_female_1.wav", runtime.references, cleanup="off")
    shutil.copy(data_dir / "en_male_1.wav", tmp_path / "bob.wav")
    lines = [{"input_text": "A saved voice.", "voice": "anna", "output_name": "as_saved"},
             {"input_text": "A saved voice.", "voice": "anna", "reference_cleanup": "full", "output_name": "asked"},
             {"input_text": "The default voice.", "output_name": "default"},
             {"script": "Speaker 1: Hello Bob.\n[S2] Hi Anna.", "speakers": {"1": "anna", "2": "bob.wav"},
              "reference_cleanup": "full", "output_name": "talk"}]
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    summary = run_job(jsonl, tmp_path / "out", runtime, config=JobConfig(voices_dir=str(voices)),
                      params=SynthesisParams(reference_cleanup="full"), default_voice=data_dir / "en_male_1.wav")
    assert summary.num_ok == 4

    def sidecar(name: str) -> dict:
        return json.loads((tmp_path / "out" / f"{name}.json").read_text(encoding="utf-8"))

    # the job's default "full" reaches files (the default voice), not a saved voice's own choice
    assert sidecar("as_saved")["reference"]["cleanup"] == "off"
    assert sidecar("as_saved")["generation"]["reference_cleanup"] == "off"  # the sidecar's settings say what ran
    assert sidecar("asked")["reference"]["cleanup"] == "full"
    assert sidecar("default")["reference"]["cleanup"] == "full"
    assert [s["reference"]["cleanup"] for s in sidecar("talk")["speakers"]] == ["full", "full"]
