"""JSONL jobs on a local Ray cluster (CPU, 2 workers of 0.5 CPU, tiny VibeVoice): the same ``results.jsonl``, WAVs
and sidecars as the single-process run, every line exactly once when a worker is killed mid-job, and resume after
the driver is SIGKILLed, with another worker count.

The module starts two workers once and every test uses them (starting Ray workers costs far more than the jobs);
the worker-kill tests come last because they stop them.

One cluster per module (loopback only, no dashboard, 200 MB object store, its own session folder); it is shut down
at the end and any of its processes still alive are stopped by pid.

The engines run with ``max_batch_size=1``, so every segment runs in a batch of the same shape in every run and
the audio must be byte-identical. With larger batches a line's batch-mates depend on the worker count, and batched
matmuls round in another order (the adapters' documented batch-vs-alone tolerance, ``AUDIO_ATOL`` in
test_adapter_vibevoice.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from tests.ui_app import start_python_forked
from tts_app.config import ClusterConfig, EngineArgs, EngineConfig, ModelConfig
from tts_app.jobs.runner import run_job
from tts_app.output_layout import RESULTS_NAME
from tts_app.request import SynthesisParams

pytestmark = pytest.mark.slow

PARAMS = SynthesisParams(seed=5, max_new_tokens=12)
WORKER_CPUS = 0.5
#: sidecar fields that differ between any two runs (time, random ids, timings) or name the engine's batch
VOLATILE_SIDECAR = ("created_utc", "request_id")
VOLATILE_SEGMENT = ("generate_s", "batch_size")


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster on this machine for the module: its GCS address."""
    from tts_app.jobs.cluster import job_runtime_env, require_ray

    ray = require_ray(loopback=True) if _ray_installed() else pytest.skip("Ray is not installed "
                                                                          "(pip install -r requirements-ray.txt)")
    temp_dir = tempfile.mkdtemp(prefix="ray_", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
             _temp_dir=temp_dir, runtime_env=job_runtime_env(), logging_level="WARNING")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        _stop_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _ray_installed() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _stop_leftovers(temp_dir: str, wait_s: float = 15.0) -> None:
    """Processes of this module's cluster still running after shutdown (their command line names its session
    folder): wait for them, then terminate them by pid."""
    import psutil

    def leftovers():
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(temp_dir in part for part in proc.info["cmdline"] or ()):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    deadline = time.monotonic() + wait_s
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.5)
    for proc in leftovers():
        proc.terminate()
    psutil.wait_procs(leftovers(), timeout=5)


@pytest.fixture(scope="module")
def tiny_model(tiny_checkpoint) -> Path:
    return tiny_checkpoint("vibevoice")


def engine_args(model: Path, max_batch_size: int) -> EngineArgs:
    """The tiny model on CPU; ``wait_window_ms`` gathers lines arriving together into one batch."""
    return EngineArgs(ModelConfig(str(model), device="cpu", dtype="float32"),
                      EngineConfig(max_batch_size=max_batch_size, wait_window_ms=20.0))


@pytest.fixture(scope="module")
def pool(ray_cluster, tiny_model):
    """Two Ray workers, each with the tiny model and an engine of max batch size 1."""
    from tts_app.jobs.cluster import WorkerPool

    pool = WorkerPool.start(engine_args(tiny_model, 1), config=ClusterConfig(
        address=ray_cluster, num_workers=2, cpus_per_worker=WORKER_CPUS))
    yield pool
    pool.close()


def story(n: int) -> list[dict]:
    words = "one two three four five six seven eight nine ten eleven twelve".split()
    return [{"input_text": f"This is sentence {words[i]} of the story.", "prompt_audio": ["voices/anna.wav",
                                                                                          "voices/mei.wav"][i % 2]}
            for i in range(n)]


MIXED = story(5)
MIXED[1:1] = [
    '{"input_text": "cut short", "prompt_audio": ',                               # bad JSON
    {"input_text": "Nobody is here.", "prompt_audio": "voices/ghost.wav"},        # missing file
    {"input_text": "This voice is noise.", "prompt_audio": "voices/broken.wav"},  # fails on the worker
    {"input_text": "Too hot.", "prompt_audio": "voices/anna.wav", "temperature": -1},
    {"input_text": "Spoken in the default voice.", "output_name": "default_voice"},
]
MIXED.append({"input_text": "Happy words.", "prompt_audio": "voices/anna.wav",  # its emotion clip goes to the
              "emo_audio_prompt": "voices/mei.wav"})                           # worker; refused by VibeVoice
MIXED.append({"input_text": "A bundled voice speaks.", "voice": "en-female", "output_name": "bundled"})  # the
NUM_OK, NUM_FAILED = 7, 5                                                  # voice library, rebuilt on the worker


@pytest.fixture(scope="module")
def job(tmp_path_factory, data_dir) -> Path:
    """The mixed job file (good lines, four kinds of bad line, one in the default voice) and its voices."""
    d = tmp_path_factory.mktemp("ray_job")
    (d / "voices").mkdir()
    shutil.copy(data_dir / "en_female_2.wav", d / "voices" / "anna.wav")
    shutil.copy(data_dir / "zh_female_1.wav", d / "voices" / "mei.wav")
    shutil.copy(data_dir / "corrupt_random_data.wav", d / "voices" / "broken.wav")
    return write_jsonl(d / "tasks.jsonl", MIXED)


@pytest.fixture(scope="module")
def single_process(job, tiny_model) -> Path:
    """The job's output folder from the single-process run (engine of max batch size 1)."""
    from tts_app.runtime import Runtime

    args = engine_args(tiny_model, 1)
    runtime = Runtime.load(args.model, args.engine)
    try:
        summary = run_job(job, job.parent / "single", runtime, params=PARAMS, default_voice=default_voice(job))
    finally:
        runtime.close()
    assert (summary.num_ok, summary.num_failed) == (NUM_OK, NUM_FAILED)
    return job.parent / "single"


def default_voice(job: Path) -> Path:
    return job.parent / "voices" / "mei.wav"


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def records(out_dir: Path, *, keep_request_ids: bool = False) -> list[dict]:
    """results.jsonl without the wall times and request ids (they differ run to run)."""
    out = []
    for text in (out_dir / RESULTS_NAME).read_text(encoding="utf-8").splitlines():
        record = json.loads(text)
        record.pop("elapsed_s")
        if not keep_request_ids:
            record.pop("request_id")
        out.append(record)
    return out


def sidecar(path: Path) -> dict:
    meta = json.loads(path.read_text(encoding="utf-8"))
    for name in VOLATILE_SIDECAR:
        meta.pop(name)
    for segment in meta["segments"]:
        for name in VOLATILE_SEGMENT:
            segment.pop(name)
    return meta


def assert_same_outputs(expected_dir: Path, actual_dir: Path) -> None:
    """Same records (line order, statuses, messages, names, durations), byte-identical WAVs, same sidecars; an ok
    record names the request that ran it on its worker, as its sidecar does."""
    expected, actual = records(expected_dir), records(actual_dir)
    assert actual == expected
    for record in records(actual_dir, keep_request_ids=True):
        if record["status"] == "ok":
            meta = json.loads((actual_dir / record["metadata_path"]).read_text(encoding="utf-8"))
            assert record["request_id"] and record["request_id"] == meta["request_id"]
    for record in expected:
        if record["status"] != "ok":
            continue
        assert (actual_dir / record["audio_path"]).read_bytes() == (expected_dir / record["audio_path"]).read_bytes()
        assert sidecar(actual_dir / record["metadata_path"]) == sidecar(expected_dir / record["metadata_path"])


def test_good_and_bad_lines_give_the_single_process_results_and_audio(job, single_process, pool, tmp_path):
    from tts_app.jobs.cluster import RayExecutor

    summary = run_job(job, tmp_path / "ray", None, params=PARAMS, default_voice=default_voice(job),
                      executor=RayExecutor(pool))
    assert (summary.num_ok, summary.num_failed) == (NUM_OK, NUM_FAILED)
    assert_same_outputs(single_process, tmp_path / "ray")
    by_line = {r["line"]: r for r in records(tmp_path / "ray")}
    assert "broken.wav" in by_line[4]["error"]  # refused by the worker's reference preparer, as locally
    assert by_line[6]["output_name"] == "default_voice" and by_line[6]["status"] == "ok"
    assert "emotion control" in by_line[len(MIXED) - 1]["error"]  # as in the single process
    assert by_line[len(MIXED)]["status"] == "ok"  # the bundled voice
    assert all(s.lines_done > 0 for s in pool.stats())  # both workers ran lines (least-loaded dispatch)


def test_resume_after_driver_sigkill_with_another_worker_count(job, single_process, pool, ray_cluster, tiny_model,
                                                               tmp_path):
    from tts_app.jobs.cluster import RayExecutor

    out = tmp_path / "ray"
    flags = ["--model", str(tiny_model), "--device", "cpu", "--dtype", "float32", "--max-batch-size", "1",
             "--seed", str(PARAMS.seed), "--max-new-tokens", str(PARAMS.max_new_tokens),
             "--default-voice", str(default_voice(job))]
    # the driver in its own process, forked from the tests' forkserver (its run is under test, not its imports)
    stderr = tmp_path / "driver-stderr"
    driver = start_python_forked("-m", "tts_app", "batch", str(job), "--out-dir", str(out), *flags,
                                 "--ray", ray_cluster, "--num-workers", "1", "--cpus-per-worker", str(WORKER_CPUS),
                                 "--ray-references", "shared",  # workers read the files (same machine)
                                 stdout_path=tmp_path / "driver-stdout", stderr_path=stderr,
                                 env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None and len(_ok_lines(out)) < 2:
            time.sleep(0.1)
        assert driver.poll() is None, stderr.read_text(errors="replace")[-3000:]
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert 2 <= len(_ok_lines(out)) < NUM_OK  # killed mid-job, after some lines had audio

    # resume on the module's two workers (the killed run had one): only the lines not done run
    summary = run_job(job, out, None, params=PARAMS, default_voice=default_voice(job), resume=True,
                      executor=RayExecutor(pool))
    assert summary.num_skipped >= 2 and summary.num_skipped + summary.num_ok == NUM_OK
    assert_same_outputs(single_process, out)
    assert not (out / ".results.journal.jsonl").exists()


def _ok_lines(out: Path) -> list[int]:
    """Lines with an ok record so far (results.jsonl's in-order prefix plus the journal a killed run leaves)."""
    from tts_app.jobs.results import read_results

    return sorted(n for n, r in read_results(out).items() if r["status"] == "ok") if out.is_dir() else []


def test_the_web_apps_jobs_run_on_the_workers(job, single_process, pool, tmp_path):
    """``JobManager(pool=...)`` (``app.py --ray``): an uploaded job (file + audio ZIP + default voice) runs on the
    Ray workers and gives the single-process audio; its folder holds the records as for a local job."""
    import zipfile

    from tts_app.jobs.manager import JobManager
    from tts_app.jobs.store import JobStore

    rows = [r if isinstance(r, str) else {**r, "max_new_tokens": PARAMS.max_new_tokens} for r in MIXED]
    job_file = write_jsonl(tmp_path / "upload.jsonl", rows)
    with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:
        for wav in sorted((job.parent / "voices").iterdir()):
            zf.write(wav, f"voices/{wav.name}")
    manager = JobManager(JobStore(tmp_path / "server"), None, pool=pool)
    state = manager.submit(job_file, audio_zip=tmp_path / "voices.zip", default_voice=default_voice(job),
                           settings={"seed": PARAMS.seed})
    state = manager.wait(state.job_id, timeout_s=300)
    assert (state.status, state.num_ok, state.num_failed, state.num_done) == ("done", NUM_OK, NUM_FAILED, len(MIXED))
    ours = manager.results(state.job_id)
    expected = records(single_process)
    assert [(r["line"], r["status"], r["output_name"]) for r in ours] == \
        [(r["line"], r["status"], r["output_name"]) for r in expected]
    out = manager.store.out_dir(state.job_id)
    for record in expected:
        if record["status"] == "ok":
            assert (out / record["audio_path"]).read_bytes() == (single_process / record["audio_path"]).read_bytes()


def test_the_batch_tab_runs_its_job_on_the_workers(job, single_process, pool, tiny_model, tmp_path):
    """``app.py --ray``: the Batch tab's job (the app's job manager, ``ctx.start_jobs`` with ``ctx.pool``) runs on
    the workers (none of its lines on the app's own engine) and gives the single-process results."""
    import zipfile

    from tts_app.runtime import Runtime
    from tts_app.ui import batch
    from tts_app.ui.context import AppContext, AppSettings

    args = engine_args(tiny_model, 1)
    runtime = Runtime.load(args.model, args.engine)
    done_before = sum(s.lines_done for s in pool.stats())
    ctx = AppContext(AppSettings(model_config=args.model, engine_config=args.engine, lang="en",
                                 output_root=tmp_path / "app", voices_dir=tmp_path / "voices"),
                     runtime=runtime, pool=pool)
    try:
        ctx.start_jobs()
        rows = [r if isinstance(r, str) else {**r, "max_new_tokens": PARAMS.max_new_tokens} for r in MIXED]
        with zipfile.ZipFile(tmp_path / "voices.zip", "w") as zf:  # uploads: the job file and its voices' ZIP
            for wav in sorted((job.parent / "voices").iterdir()):
                zf.write(wav, f"voices/{wav.name}")
        text, table, zip_path = batch.run_job_blocking(ctx, str(write_jsonl(tmp_path / "tab.jsonl", rows)),
                                                       str(tmp_path / "voices.zip"),
                                                       default_voice=str(default_voice(job)), seed=PARAMS.seed)
        local_requests = runtime.engine.stats().num_requests_done
    finally:
        ctx.jobs.shutdown()
        runtime.close()
    assert f"ok {NUM_OK}" in text and Path(zip_path).is_file()
    assert [row[2] for row in table.values.tolist()] == [r["status"] for r in records(single_process)]
    assert local_requests == 0 and sum(s.lines_done for s in pool.stats()) - done_before == NUM_OK + 2


def test_the_memory_tab_lists_the_workers_with_their_memory(pool, tiny_model, tmp_path):
    """``app.py --ray``: the Memory tab names each worker, its state, node, lines and its device memory (zh too)."""
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.ui import handlers
    from tts_app.ui.context import AppContext, AppSettings

    for lang, row, up in (("en", "worker {}: up", "2 of 2 up"), ("zh", "工作进程 {}：在线", "2 个在线")):
        ctx = AppContext(AppSettings(model_config=ModelConfig(str(tiny_model)), engine_config=EngineConfig(),
                                     lang=lang, output_root=tmp_path / lang), pool=pool)
        text, _ = handlers.gauge(ctx)
        assert up in text
        for worker in pool.stats():
            line = next(line for line in text.splitlines() if row.format(worker.info.index + 1) in line)
            assert f"{worker.info.node_ip} · pid {worker.info.pid}" in line and "GiB" in line  # where, memory


def test_automatic_transcripts_and_the_output_format_are_the_single_processs(job, tiny_model, tiny_whisper,
                                                                             pool, tmp_path):
    """``batch --asr-model M --format flac --ray``: each worker transcribes the references without a transcript
    with its own ASR model (built from the job's setting), as the single process does; the files are FLAC."""
    from tts_app.audio.transcribe import transcriber_from
    from tts_app.jobs.cluster import RayExecutor
    from tts_app.jobs.schema import JobConfig
    from tts_app.runtime import Runtime

    path = write_jsonl(job.parent / "transcribed.jsonl", story(2) + [
        {"input_text": "Typed transcript.", "prompt_audio": "voices/anna.wav", "prompt_text": "Hello there."}])
    config = JobConfig(audio_format="flac")
    args = engine_args(tiny_model, 1)
    runtime = Runtime.load(args.model, args.engine)
    try:
        run_job(path, tmp_path / "single", runtime, params=PARAMS, config=config,
                transcriber=transcriber_from(str(tiny_whisper), "cpu"))
    finally:
        runtime.close()
    summary = run_job(path, tmp_path / "ray", None, params=PARAMS, config=config, executor=RayExecutor(pool),
                      transcriber=transcriber_from(str(tiny_whisper), "cpu"))
    assert summary.all_ok
    assert_same_outputs(tmp_path / "single", tmp_path / "ray")
    rows = records(tmp_path / "ray")
    assert [Path(r["audio_path"]).suffix for r in rows] == [".flac"] * 3
    for row in rows[:2]:  # transcribed on the worker: named in a warning and stored in the sidecar
        note = next(w for w in row["warnings"] if "transcribed automatically" in w)
        meta = json.loads((tmp_path / "ray" / row["metadata_path"]).read_text(encoding="utf-8"))
        assert meta["reference"]["text"] and meta["reference"]["text"] in note
    assert not any("transcribed automatically" in w for w in rows[2]["warnings"])  # its own transcript kept
    meta = json.loads((tmp_path / "ray" / rows[2]["metadata_path"]).read_text(encoding="utf-8"))
    assert meta["reference"]["text"] == "Hello there."


def test_killing_a_worker_mid_job_still_finishes_every_line_once(job, single_process, pool, tmp_path):
    """Next to last in the module: it crashes one of the module's workers (Ray restarts it)."""
    from tts_app.jobs.cluster import RayExecutor

    killed = []

    def kill_a_busy_worker(done, total, info):
        if info["status"] == "ok" and not killed:  # a worker process crashes while it holds lines
            busy = [s for s in pool.stats() if s.state == "up" and s.lines_in_flight > 0]
            if busy:
                os.kill(busy[0].info.pid, signal.SIGKILL)
                killed.append(busy[0].info.index)

    executor = RayExecutor(pool)
    summary = run_job(job, tmp_path / "ray", None, params=PARAMS, default_voice=default_voice(job),
                      executor=executor, progress=kill_a_busy_worker)
    assert killed and (summary.num_ok, summary.num_failed) == (NUM_OK, NUM_FAILED)
    assert executor.num_retried >= 1  # its lines went to the other worker
    assert any(f"worker {killed[0] + 1}" in event and "stopped" in event for event in pool.events)
    # one record per line in line order, the retried lines' audio and sidecars those of the single-process run
    assert_same_outputs(single_process, tmp_path / "ray")
    deadline = time.monotonic() + 180  # Ray restarts the crashed worker (it reloads the model): it is back up
    while time.monotonic() < deadline and pool.stats()[killed[0]].state == "restarting":
        time.sleep(0.5)
    assert [s.state for s in pool.stats()] == ["up", "up"]
    assert f"worker {killed[0] + 1} is back" in pool.events


def test_when_every_worker_is_gone_the_job_ends_at_once_with_every_line_recorded(job, pool, tmp_path):
    """Last in the module (it stops the module's workers): no hang; the valid lines are recorded failed with a
    message that says to resume, the invalid ones with their own errors."""
    import ray

    from tts_app.jobs.cluster import RayExecutor

    for handle in pool.handles:
        ray.kill(handle, no_restart=True)
    started = time.monotonic()
    summary = run_job(job, tmp_path / "ray", None, params=PARAMS, executor=RayExecutor(pool))
    assert time.monotonic() - started < 60
    final = records(tmp_path / "ray")
    assert [r["line"] for r in final] == list(range(1, len(MIXED) + 1)) and summary.num_ok == 0
    gone = [r for r in final if "no Ray worker is left" in (r["error"] or "")]
    assert gone and all("--resume" in r["error"] for r in gone)
    assert {s.state for s in pool.stats()} == {"dead"}
