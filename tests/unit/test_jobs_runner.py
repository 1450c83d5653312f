"""JSONL job runner through the Python API: real Engine + FakeAdapter (no model), real reference cleanup."""

from __future__ import annotations

import json
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.fakes import FakeAdapter
from tts_app.audio.post import encode_wav
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.runtime import Runtime
from tts_app.errors import InputError
from tts_app.jobs.runner import make_results_zip, read_results, run_job
from tts_app.output_layout import RESULTS_NAME
from tts_app.jobs.schema import JobConfig
from tts_app.request import Priority, SynthesisParams, SynthesisRequest


@pytest.fixture()
def job_dir(tmp_path, data_dir) -> Path:
    d = tmp_path / "job"
    (d / "voices").mkdir(parents=True)
    shutil.copy(data_dir / "en_female_1.wav", d / "voices" / "anna.wav")
    shutil.copy(data_dir / "zh_male_1.wav", d / "voices" / "wei.wav")
    shutil.copy(data_dir / "corrupt_random_data.wav", d / "voices" / "broken.wav")
    return d


@pytest.fixture()
def make_runtime():
    """Factory: a ``Runtime`` (engine + reference preparer) around a ``FakeAdapter``."""
    runtimes = []

    def build(**config) -> Runtime:
        adapter = config.pop("adapter", None) or FakeAdapter()
        runtime = Runtime.from_adapter(adapter, "fake-model", EngineConfig(**{"wait_window_ms": 5.0, **config}))
        runtimes.append(runtime)
        return runtime

    yield build
    for runtime in runtimes:
        runtime.close()


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def records(out_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (out_dir / RESULTS_NAME).read_text(encoding="utf-8").splitlines()]


def decoded(path: Path) -> np.ndarray:
    data, _ = sf.read(path, dtype="int16")
    return data


MIXED = [
    {"input_text": "Good morning. This is the first line.", "prompt_audio": "voices/anna.wav", "output_name": "a"},
    '{"input_text": "bad json", "prompt_audio": ',
    {"prompt_audio": "voices/anna.wav", "output_name": "no_text"},
    {"input_text": "Where is my voice?", "prompt_audio": "voices/ghost.wav"},
    {"input_text": "Sneaky.", "prompt_audio": "voices/anna.wav", "output_name": "../../outside"},
    {"syn_text": "今天天气很好。我们去公园。", "prompt_speech": "voices/wei.wav", "uttid": "b", "seed": 3},
    {"input_text": "Same name again.", "prompt_audio": "voices/wei.wav", "output_name": "A"},
    {"input_text": "This voice file is garbage.", "prompt_audio": "voices/broken.wav", "output_name": "c"},
    {"input_text": "Last good line, default name.", "prompt_audio": "voices/wei.wav"},
]


def test_mixed_job_good_lines_get_audio_bad_lines_get_named_failures(job_dir, make_runtime):
    path = write_jsonl(job_dir / "job.jsonl", MIXED)
    runtime = make_runtime()
    engine = runtime.engine
    out = job_dir / "out"
    seen: list[tuple[int, int, dict]] = []
    summary = run_job(path, out, runtime, progress=lambda d, t, info: seen.append((d, t, info)))

    assert (summary.num_lines, summary.num_ok, summary.num_failed) == (9, 3, 6)
    assert not summary.all_ok
    by_line = {r["line"]: r for r in records(out)}
    assert sorted(by_line) == list(range(1, 10))  # one record per line
    assert {n for n, r in by_line.items() if r["status"] == "ok"} == {1, 6, 9}
    assert "bad JSON" in by_line[2]["error"]
    assert "input_text" in by_line[3]["error"]
    assert "ghost.wav" in by_line[4]["error"]
    assert "contains a path" in by_line[5]["error"]
    assert "lines 1 and 7" in by_line[7]["error"]
    assert "broken.wav" in by_line[8]["error"]  # reference cleanup refused it; the job went on
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".wav") == ["00009_Last_good_line.wav", "a.wav", "b.wav"]
    assert not (job_dir.parent / "outside.wav").exists() and not list(job_dir.rglob("outside*"))

    # each file holds exactly the audio the engine makes for that line (nothing swapped between lines)
    from tts_app.audio.reference import prepare_reference

    for line_no, name in [(1, "a"), (6, "b"), (9, "00009_Last_good_line")]:
        row = MIXED[line_no - 1]
        ref, _ = prepare_reference(job_dir / (row.get("prompt_audio") or row["prompt_speech"]),
                                   target_sampling_rate=engine.sampling_rate)
        text = row.get("input_text") or row["syn_text"]
        direct = engine.submit(SynthesisRequest(text=text, reference_audio=ref, priority=Priority.JOB,
                                                params=SynthesisParams(seed=row.get("seed", 0)))).result()
        expected = decoded(_wav_bytes_file(out / "expected.tmpwav", encode_wav(direct.audio, direct.sampling_rate)))
        assert np.array_equal(decoded(out / f"{name}.wav"), expected), name
        assert by_line[line_no]["audio_path"] == f"{name}.wav"
        assert by_line[line_no]["duration_s"] == pytest.approx(direct.duration_s, abs=1e-3)
        assert by_line[line_no]["num_segments"] == len(direct.segments)

    assert [d for d, _, _ in seen] == list(range(1, 10)) and {t for _, t, _ in seen} == {9}


def hold_first_batch_until(engine: Engine, gate: threading.Event, num_submitted: int) -> None:
    """The FakeAdapter's first batch waits at ``gate`` until ``num_submitted`` lines were submitted, so the queue
    fills up as it does with a real (slow) model, whatever the load on the test machine."""
    real_submit = engine.submit
    count = {"n": 0}

    def submit(request, on_progress=None):
        handle = real_submit(request, on_progress)
        count["n"] += 1
        if count["n"] >= num_submitted:
            gate.set()
        return handle

    engine.submit = submit


def _wav_bytes_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_segments_of_different_lines_share_batches_and_in_flight_is_bounded(job_dir, make_runtime):
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
             "quebec romeo sierra tango uniform victor whiskey yankee").split()
    rows = [{"input_text": f"Line {w} starts. The {w} line ends here.", "prompt_audio": "voices/anna.wav"}
            for w in words]
    path = write_jsonl(job_dir / "job.jsonl", rows)
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate)
    runtime = make_runtime(adapter=adapter, max_batch_size=4)
    engine = runtime.engine
    hold_first_batch_until(engine, gate, 5)
    outstanding = {"now": 0, "max": 0}
    lock = threading.Lock()
    real_submit = engine.submit

    def counting_submit(request, on_progress=None):
        handle = real_submit(request, on_progress)
        with lock:
            outstanding["now"] += 1
            outstanding["max"] = max(outstanding["max"], outstanding["now"])

        def done(_):
            with lock:
                outstanding["now"] -= 1
        handle.future.add_done_callback(done)
        return handle

    engine.submit = counting_submit
    summary = run_job(path, job_dir / "out", runtime, config=JobConfig(max_in_flight_lines=5))
    assert summary.num_ok == 24
    assert 1 < outstanding["max"] <= 5
    mixed = [b for b in adapter.batches if len({w for t in b for w in words if w in t}) > 1]
    assert mixed, adapter.batches  # batches held segments of several lines


def test_200_lines_survive_simulated_oom(job_dir, make_runtime):
    voices = ["voices/anna.wav", "voices/wei.wav"]
    rows = [{"input_text": f"Sentence {i} of the book.", "prompt_audio": voices[i % 2], "output_name": f"p{i}"}
            for i in range(200)]
    path = write_jsonl(job_dir / "job.jsonl", rows)
    gate = threading.Event()
    adapter = FakeAdapter(gate=gate, delay_s=0.005)  # a model that takes time, so lines queue up into big batches
    runtime = make_runtime(adapter=adapter, max_batch_size=8, simulate_oom_above_batch=2)
    engine = runtime.engine
    hold_first_batch_until(engine, gate, 32)
    summary = run_job(path, job_dir / "out", runtime)
    assert (summary.num_ok, summary.num_failed) == (200, 0)
    assert engine.stats().num_oom > 0  # the engine really hit (simulated) OOM and recovered
    assert max(len(b) for b in adapter.batches) <= 2
    assert len(list((job_dir / "out").glob("p*.wav"))) == 200


def test_cancel_then_resume_finishes_every_line_once(job_dir, make_runtime):
    rows = [{"input_text": f"Chapter line {i}.", "prompt_audio": "voices/anna.wav"} for i in range(30)]
    path = write_jsonl(job_dir / "job.jsonl", rows)
    out = job_dir / "out"
    cancel = threading.Event()

    def stop_early(done, total, info):
        if done >= 5:
            cancel.set()

    runtime = make_runtime(adapter=FakeAdapter(delay_s=0.02), max_batch_size=2)
    engine = runtime.engine
    first = run_job(path, out, runtime, progress=stop_early, cancel_event=cancel)
    assert first.num_cancelled > 0 and first.num_ok >= 5 and not first.all_ok
    ok_before = {r["line"] for r in records(out) if r["status"] == "ok"}

    # lines without output_name are named by number and first words
    assert (out / "00001_Chapter_line_0.wav").is_file()
    wav = {r["line"]: out / r["audio_path"] for r in records(out) if r["status"] == "ok"}

    # damage two finished files (garbage; cut in half): resume must redo them, keep the others
    victim, cut = sorted(ok_before)[:2]
    wav[victim].write_bytes(b"RIFF")
    whole = wav[cut].read_bytes()
    wav[cut].write_bytes(whole[: len(whole) // 2])
    (out / ".00003.wav.abc123.tmp").write_bytes(b"half written")  # as a kill mid-write leaves
    mtimes = {n: wav[n].stat().st_mtime_ns for n in ok_before if n not in (victim, cut)}

    second = run_job(path, out, runtime, resume=True)
    assert second.all_ok and second.num_skipped == len(ok_before) - 2 and second.num_ok == 30 - second.num_skipped
    final = sorted(records(out), key=lambda r: r["line"])
    assert [r["line"] for r in final] == list(range(1, 31))  # every line exactly once
    assert all(r["status"] == "ok" for r in final)
    assert all(decoded(out / r["audio_path"]).size > 0 for r in final)
    assert {n: wav[n].stat().st_mtime_ns for n in mtimes} == mtimes  # skipped lines untouched
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # a finished job stays finished on resume, even once its reference audio is gone (e.g. a cleaned upload)
    (job_dir / "voices" / "anna.wav").unlink()
    third = run_job(path, out, runtime, resume=True)
    assert (third.num_skipped, third.num_ok, third.num_failed) == (30, 0, 0)
    assert sorted(records(out), key=lambda r: r["line"]) == final


def test_without_resume_results_start_over(job_dir, make_runtime):
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "One.", "prompt_audio": "voices/anna.wav"}])
    runtime = make_runtime()
    engine = runtime.engine
    run_job(path, job_dir / "out", runtime)
    summary = run_job(path, job_dir / "out", runtime)
    assert summary.num_ok == 1 and summary.num_skipped == 0
    assert len(records(job_dir / "out")) == 1


def test_results_zip_holds_results_and_ok_audio_only(job_dir, make_runtime):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "Kept.", "prompt_audio": "voices/anna.wav", "output_name": "kept"},
        {"input_text": "Broken voice.", "prompt_audio": "voices/broken.wav", "output_name": "lost"},
    ])
    out = job_dir / "out"
    (out).mkdir()
    (out / "stale.wav").write_bytes(b"old")
    run_job(path, out, make_runtime())
    zip_path = make_results_zip(out)
    assert zip_path.parent == out
    with zipfile.ZipFile(zip_path) as zf:
        assert sorted(zf.namelist()) == ["kept.json", "kept.wav", RESULTS_NAME]  # audio + its sidecar
        assert len(zf.read(RESULTS_NAME).decode().splitlines()) == 2
    with pytest.raises(InputError, match="results.jsonl"):
        make_results_zip(job_dir / "voices")


def test_default_voice_and_audio_zip(job_dir, make_runtime, tmp_path):
    archive = tmp_path / "voices.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(job_dir / "voices" / "wei.wav", "spk/wei.wav")
    path = write_jsonl(tmp_path / "upload.jsonl", [
        {"input_text": "From the zip.", "prompt_audio": "spk/wei.wav"},
        {"input_text": "From the default voice.", "cfg_scale": 2.0},
    ])
    out = job_dir / "out"
    summary = run_job(path, out, make_runtime(), audio_dir=archive, default_voice=job_dir / "voices" / "anna.wav")
    assert summary.all_ok and summary.num_ok == 2
    assert not (out / ".reference_audio").exists()  # unpacked inside the output folder, removed after the job
    assert not any(p.name.endswith(".wav") for p in tmp_path.iterdir() if p.is_file())
    by_line = {r["line"]: r for r in records(out)}
    (warning,) = by_line[2]["warnings"]
    assert warning.startswith("cfg_scale ignored: the fake model has no such setting")


def test_unreadable_inputs_raise_input_error(job_dir, make_runtime):
    runtime = make_runtime()
    engine = runtime.engine
    empty = job_dir / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no lines"):
        run_job(empty, job_dir / "out", runtime)
    with pytest.raises(InputError, match="cannot read"):
        run_job(job_dir / "missing.jsonl", job_dir / "out", runtime)
    assert read_results(job_dir / "nowhere") == {}


def test_lines_to_run_counts_valid_lines_not_done_and_run_job_needs_no_engine_for_none(job_dir, make_runtime):
    from tts_app.jobs.runner import count_lines_to_run

    bad = write_jsonl(job_dir / "bad.jsonl", [{"text": "Hi.", "prompt_audio": "voices/anna.wav"},
                                               {"input_text": "Ghost.", "prompt_audio": "voices/ghost.wav"}])
    assert count_lines_to_run(bad, job_dir / "out0") == 0
    summary = run_job(bad, job_dir / "out0", None)  # every line invalid: no model needed
    assert (summary.num_failed, summary.num_ok) == (2, 0)
    assert [r["status"] for r in records(job_dir / "out0")] == ["failed", "failed"]
    assert "rename it to input_text" in records(job_dir / "out0")[0]["error"]

    good = write_jsonl(job_dir / "good.jsonl", [{"input_text": "One.", "prompt_audio": "voices/anna.wav"},
                                                 {"input_text": "Two.", "prompt_audio": "voices/anna.wav"}])
    out = job_dir / "out"
    assert count_lines_to_run(good, out, resume=True) == 2  # no results yet
    assert run_job(good, out, make_runtime()).all_ok
    assert count_lines_to_run(good, out) == 2  # without resume everything runs again
    assert count_lines_to_run(good, out, resume=True) == 0
    again = run_job(good, out, None, resume=True)  # all done: no model needed
    assert (again.num_skipped, again.num_ok) == (2, 0) and again.all_ok
    (out / "00002_Two.wav").write_bytes(b"RIFF")  # a damaged output must be redone
    assert count_lines_to_run(good, out, resume=True) == 1
    with pytest.raises(ValueError, match="runtime=None"):
        run_job(good, out, None, resume=True)


def test_results_record_of_a_renamed_output_names_both_names(job_dir, make_runtime):
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "voices/anna.wav",
                                                 "output_name": "a:b"}])
    assert run_job(path, job_dir / "out", make_runtime()).all_ok
    (record,) = records(job_dir / "out")
    assert record["audio_path"] == "a_b.wav" and (job_dir / "out" / "a_b.wav").is_file()
    assert any("'a:b'" in w and "'a_b'" in w for w in record["warnings"]), record["warnings"]


def test_emotion_lines_are_refused_by_a_model_without_emotion_and_the_job_goes_on(job_dir, make_runtime):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "Happy words.", "prompt_audio": "voices/anna.wav", "emo_vector": {"happy": 0.9},
         "output_name": "happy"},
        {"input_text": "Plain words.", "prompt_audio": "voices/anna.wav", "output_name": "plain"},
    ])
    summary = run_job(path, job_dir / "out", make_runtime())
    by_name = {r["output_name"]: r for r in records(job_dir / "out")}
    assert summary.num_ok == 1 and by_name["plain"]["status"] == "ok"
    assert by_name["happy"]["status"] == "failed" and "emotion control" in by_name["happy"]["error"]
    assert "remove the emotion settings" in by_name["happy"]["error"]


def test_emotion_lines_reach_a_model_with_emotion_and_their_sidecars_record_them(job_dir, make_runtime):
    from tests.fakes import fake_facts

    seen = []
    adapter = FakeAdapter(fake_facts(supports_emotion=True, supports_emotion_text=True),
                          raise_if=lambda rows: seen.extend((r.text, r.emotion) for r in rows))
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "Happy words.", "prompt_audio": "voices/anna.wav", "emo_vector": {"happy": 0.9},
         "emo_alpha": 0.5, "output_name": "happy"},
        {"input_text": "Copied words.", "prompt_audio": "voices/anna.wav", "emo_audio": "voices/wei.wav",
         "output_name": "copied"},
        {"input_text": "Read words.", "prompt_audio": "voices/anna.wav", "use_emo_text": True, "output_name": "read"},
    ])
    summary = run_job(path, job_dir / "out", make_runtime(adapter=adapter))
    assert summary.num_ok == 3
    emotions = dict(seen)
    assert emotions["Happy words."].vector[0] == 0.9 and emotions["Happy words."].weight == 0.5
    assert emotions["Copied words."].reference_audio is not None and emotions["Copied words."].reference_audio.size
    assert emotions["Read words."].text == "Read words."  # emotion read from the line's own text
    sidecar = json.loads((job_dir / "out" / "happy.json").read_text(encoding="utf-8"))
    assert sidecar["emotion"] == {"source": "vector", "weight": 0.5, "vector": [0.9] + [0.0] * 7}
    assert json.loads((job_dir / "out" / "copied.json").read_text(encoding="utf-8"))["emotion"]["source"] == "clip"


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_a_job_in_a_compact_format_writes_decodable_files_that_resume_keeps(job_dir, make_runtime, fmt):
    from tts_app.audio.formats import decode_audio

    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "今天天气很好。", "prompt_audio": "voices/anna.wav"},
                                                {"input_text": "Second line.", "prompt_audio": "voices/anna.wav"}])
    out = job_dir / "out"
    config = JobConfig(audio_format=fmt)
    assert run_job(path, out, make_runtime(), config=config).all_ok
    names = sorted(r["audio_path"] for r in records(out))
    assert names == [f"00001_今天天气很好.{fmt}", f"00002_Second_line.{fmt}"]
    for name in names:
        samples, rate = decode_audio(out / name)
        assert samples.size > 0 and rate > 0
    again = run_job(path, out, None, resume=True, config=config)  # finished compressed files count as done
    assert (again.num_skipped, again.num_ok) == (2, 0)
    with zipfile.ZipFile(make_results_zip(out)) as zf:
        assert set(names) <= set(zf.namelist())
    with pytest.raises(InputError, match="use one of wav, flac, mp3, opus"):
        JobConfig(audio_format="aac")


def test_every_record_names_its_request_and_a_failed_lines_traceback_is_logged_once_under_it(job_dir, make_runtime,
                                                                                             caplog):
    import logging

    def boom(rows):
        return ValueError("kaput") if any("boom" in r.text for r in rows) else None

    rows = [{"input_text": "First fine line.", "prompt_audio": "voices/anna.wav", "output_name": "a"},
            {"input_text": "This line goes boom.", "prompt_audio": "voices/anna.wav", "output_name": "b"},
            {"input_text": "Third fine line.", "prompt_audio": "voices/anna.wav", "output_name": "c"},
            {"input_text": "No voice.", "prompt_audio": "voices/ghost.wav", "output_name": "d"}]
    path = write_jsonl(job_dir / "job.jsonl", rows)
    runtime = make_runtime(adapter=FakeAdapter(raise_if=boom), max_batch_size=4, wait_window_ms=200.0)
    with caplog.at_level(logging.INFO, logger="tts_app"):
        run_job(path, job_dir / "out", runtime)
    by_name = {r["output_name"]: r for r in records(job_dir / "out")}
    assert [by_name[n]["status"] for n in "abcd"] == ["ok", "failed", "ok", "failed"]
    ids = [by_name[n]["request_id"] for n in "abc"]
    assert all(ids) and len(set(ids)) == 3
    assert by_name["d"]["request_id"] is None  # refused at validation: it never reached the engine
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and by_name["b"]["request_id"] in tracebacks[0].getMessage()
    sidecar = json.loads((job_dir / "out" / by_name["a"]["metadata_path"]).read_text(encoding="utf-8"))
    assert sidecar["request_id"] == by_name["a"]["request_id"]  # one id: record, sidecar, log


def test_a_lines_own_format_overrides_the_jobs_and_resume_keeps_it(job_dir, make_runtime):
    from tts_app.audio.formats import decode_audio

    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "Plain line.", "prompt_audio": "voices/anna.wav", "output_name": "plain"},
        {"input_text": "Compact line.", "prompt_audio": "voices/anna.wav", "output_name": "small", "format": "MP3"},
        {"input_text": "Lossless.", "prompt_audio": "voices/anna.wav", "output_name": "exact", "format": ".flac"},
    ])
    out = job_dir / "out"
    config = JobConfig(audio_format="opus")
    assert run_job(path, out, make_runtime(), config=config).all_ok
    assert [r["audio_path"] for r in records(out)] == ["plain.opus", "small.mp3", "exact.flac"]
    for name in ("plain.opus", "small.mp3", "exact.flac"):
        samples, rate = decode_audio(out / name)
        assert samples.size > 0 and rate > 0
    assert json.loads((out / "small.json").read_text(encoding="utf-8"))["audio"]["file"] == "small.mp3"
    again = run_job(path, out, None, resume=True, config=config)
    assert (again.num_skipped, again.num_ok) == (3, 0)
    with zipfile.ZipFile(make_results_zip(out)) as zf:
        assert {"plain.opus", "small.mp3", "exact.flac"} <= set(zf.namelist())
