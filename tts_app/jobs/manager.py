"""The web server's jobs: each runs in its own thread on the shared engine, so a browser that closes, reloads or
loses its connection loses nothing; its state is kept in the job's folder (``store.py``), so a server restart
loses nothing either (its jobs come back "interrupted", ready to resume). No gradio.

    manager = JobManager(JobStore(output_root), runtime)
    state = manager.submit("tasks.jsonl", audio_zip="voices.zip", settings={"seed": 0}, owner=browser_id)
    manager.get(state.job_id)        # status, lines done / total, ETA, current batch size
    manager.cancel(state.job_id)     # lines not finished are recorded "cancelled"
    manager.resume(state.job_id)     # runs what is not done yet (ok lines are kept)

    JobManager(store, runtime, pool=WorkerPool.start(...))  # jobs' lines on Ray workers (tts_app.jobs.cluster)
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tts_app import metrics
from tts_app.errors import InputError, TTSAppError
from tts_app.frontend.messages import message_of, to_json
from tts_app.jobs.results import make_results_zip, read_results
from tts_app.jobs.runner import run_job
from tts_app.jobs.schema import JobConfig
from tts_app.jobs.store import JobState, JobStore
from tts_app.request import SynthesisParams

if TYPE_CHECKING:
    from tts_app.audio.transcribe import Transcriber
    from tts_app.jobs.cluster import WorkerPool
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

# How often a running job's progress is written to job.json (a reader after a crash sees at most this old a
# state; results.jsonl itself is written per line).
SAVE_EVERY_S = 0.5
# Jobs that run at once; more wait "queued". Their lines share the engine's batches, so two jobs already keep it
# busy; more would only split its batches between more waiting callers.
MAX_RUNNING_JOBS = 2


@dataclass
class _LiveJob:
    state: JobState
    cancel: threading.Event
    thread: threading.Thread | None = None
    run_started_s: float = 0.0
    processed: int = 0  # lines this run finished (not counting lines kept from an earlier run)
    last_save_s: float = 0.0


class JobManager:
    """Background jobs on one engine (or on the engines of Ray workers), durable in a ``JobStore``.

    Args:
        store: where job folders live.
        runtime: the loaded model's ``tts_app.runtime.Runtime`` (engine + reference preparer), or None when no
            model is loaded (``submit`` then refuses, unless ``pool`` is given).
        pool: Ray workers (``tts_app.jobs.cluster.WorkerPool``) that run every job's lines instead of ``runtime``;
            validation, resume and the job's files stay on this machine. None = ``runtime``.
        job_config: runner settings.
        max_running_jobs: jobs run at once; the others wait "queued".
        server_id: this server's id in ``job.json`` (default: random); jobs another id left active are marked
            "interrupted" at once.
        transcriber: automatic reference transcripts for the jobs' lines (``run_job``'s ``transcriber``; with ``pool``
            each worker builds its own from its setting).
    """

    def __init__(self, store: JobStore, runtime: Runtime | None, *, job_config: JobConfig = JobConfig(),
                 max_running_jobs: int = MAX_RUNNING_JOBS, server_id: str | None = None,
                 transcriber: Transcriber | None = None, pool: WorkerPool | None = None):
        self.store = store
        self.runtime = runtime
        self.transcriber = transcriber
        self.pool = pool
        self.job_config = job_config
        self.server_id = server_id or secrets.token_hex(6)
        self._slots = threading.Semaphore(max_running_jobs)
        self._lock = threading.Lock()
        self._live: dict[str, _LiveJob] = {}
        self._stopping = False
        for state in store.recover(self.server_id):
            logger.info("job %s was left %s by a stopped server; it can be resumed", state.job_id, "unfinished")

    # -- queries -------------------------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobState | None:
        """The job's state now (a copy), or None when there is no such job.

        Raises:
            InputError: ``job_id`` is not a job id.
        """
        self.store.folder(job_id)  # validates the id
        with self._lock:
            live = self._live.get(job_id)
            if live is not None:
                return dataclasses.replace(live.state, settings=dict(live.state.settings),
                                           warnings=list(live.state.warnings))
        return self.store.load(job_id)

    def list(self, *, owner: str | None = None, limit: int = 20) -> list[JobState]:
        """Jobs newest first (``owner``'s only when given), running ones with their live progress."""
        out = []
        for state in self.store.list(owner=owner, limit=limit):
            out.append(self.get(state.job_id) or state)
        return out

    def results(self, job_id: str) -> list[dict]:
        """The job's ``results.jsonl`` records so far, in line order."""
        return [record for _, record in sorted(read_results(self.store.out_dir(job_id)).items())]

    def results_zip(self, job_id: str) -> Path | None:
        """A ZIP of the job's results so far (None before its first record)."""
        out_dir = self.store.out_dir(job_id)
        if not read_results(out_dir):
            return None
        return make_results_zip(out_dir)

    def wait(self, job_id: str, timeout_s: float | None = None) -> JobState | None:
        """Block until the job is no longer queued or running (or ``timeout_s`` passes); returns its state."""
        with self._lock:
            live = self._live.get(job_id)
        if live is not None and live.thread is not None:
            live.thread.join(timeout_s)
        return self.get(job_id)

    # -- actions -------------------------------------------------------------------------------------------------
    def submit(self, job_file: str | Path, *, audio_zip: str | Path | None = None,
               default_voice: str | Path | None = None, settings: dict[str, Any] | None = None,
               owner: str | None = None, names: dict[str, str | None] | None = None) -> JobState:
        """Create a job from uploaded files and start it (it waits "queued" while ``max_running_jobs`` run).

        Raises:
            InputError: no model is loaded, the server is stopping, or the job file is missing.
        """
        self._check_can_run()
        state = self.store.create(job_file, audio_zip=audio_zip, default_voice=default_voice, settings=settings,
                                  owner=owner, names=names)
        return self._start(state, resume=False)

    def resume(self, job_id: str) -> JobState:
        """Run a job again, keeping the lines it finished (a job running now is left alone).

        Raises:
            InputError: malformed id, no such job, no model loaded, or the server is stopping.
        """
        self._check_can_run()
        with self._lock:
            live = self._live.get(job_id)
        if live is not None:
            return self.get(job_id)
        state = self.store.load(job_id)
        if state is None:
            raise InputError(f"there is no job {job_id}; it may have been removed")
        if state.status == "damaged":
            raise InputError(f"job {job_id} cannot be resumed: {state.error}; run its job file again as a new job")
        state.error = None
        return self._start(state, resume=True)

    def cancel(self, job_id: str) -> bool:
        """Stop a queued or running job: lines not finished are recorded "cancelled". False when it is not
        running."""
        with self._lock:
            live = self._live.get(job_id)
        if live is None:
            return False
        live.cancel.set()
        return True

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop every job (they end "interrupted" and can be resumed after a restart) and wait for them."""
        with self._lock:
            self._stopping = True
            lives = list(self._live.values())
        for live in lives:
            live.cancel.set()
        deadline = time.monotonic() + timeout_s
        for live in lives:
            if live.thread is not None:
                live.thread.join(max(0.0, deadline - time.monotonic()))

    # -- running -------------------------------------------------------------------------------------------------
    def _check_can_run(self) -> None:
        if self.runtime is None and self.pool is None:
            raise InputError("no model is loaded, so no job can run; start the app with --model pointing at a "
                             "checkpoint")
        if self._stopping:
            raise InputError("the server is stopping; try again once it is back")

    def _start(self, state: JobState, *, resume: bool) -> JobState:
        state.status = "queued"
        state.server_id = self.server_id
        state.eta_s = None
        self.store.save(state)
        live = _LiveJob(state=state, cancel=threading.Event())
        live.thread = threading.Thread(target=self._run, args=(live, resume), name=f"job-{state.job_id}",
                                       daemon=True)
        with self._lock:
            self._live[state.job_id] = live
        live.thread.start()
        return self.get(state.job_id)

    def _run(self, live: _LiveJob, resume: bool) -> None:
        got_slot = False
        while not live.cancel.is_set():  # "queued" until a slot frees
            if self._slots.acquire(timeout=0.2):
                got_slot = True
                break
        try:
            # Cancelled while queued: run_job still records every line "cancelled" (and runs none).
            self._execute(live, resume)
        finally:
            if got_slot:
                self._slots.release()
            with self._lock:
                self._live.pop(live.state.job_id, None)

    def _execute(self, live: _LiveJob, resume: bool) -> None:
        state = live.state
        with self._lock:
            state.status = "running"
            state.started_s = time.time()
            state.finished_s = None
            state.num_done = state.num_ok = state.num_failed = state.num_cancelled = state.num_skipped = 0
        self.store.save(state)
        live.run_started_s = time.monotonic()
        settings = state.settings
        try:
            # greedy None (not given) = the checkpoint's own choice, as everywhere else
            cleanup = settings.get("reference_cleanup")
            params = SynthesisParams(seed=int(settings.get("seed") or 0), greedy=settings.get("greedy"),
                                     use_cache=bool(settings.get("use_cache", True)),
                                     num_beams=settings.get("num_beams"), length_penalty=settings.get("length_penalty"),
                                     segment_context=bool(settings.get("segment_context")),
                                     prompt_cache=settings.get("prompt_cache"),  # None = the model's default
                                     **({"reference_cleanup": cleanup} if cleanup else {}),
                                     **({"take_check": settings["take_check"]} if settings.get("take_check") else {}))
            executor = None
            if self.pool is not None:
                from tts_app.jobs.cluster import RayExecutor

                executor = RayExecutor(self.pool)
            summary = run_job(self.store.job_file(state.job_id), self.store.out_dir(state.job_id),
                              self.runtime if executor is None else None, executor=executor,
                              audio_dir=self.store.audio_zip(state.job_id),
                              default_voice=self.store.default_voice(state.job_id), resume=resume,
                              progress=lambda done, total, info: self._progress(live, done, total, info),
                              cancel_event=live.cancel, params=params,
                              # the job's own output format (the Batch tab's choice), kept for a resume
                              config=dataclasses.replace(self.job_config, audio_format=settings["audio_format"])
                              if settings.get("audio_format") else self.job_config,
                              transcriber=self.transcriber)
        except TTSAppError as exc:
            status, error = "failed", message_of(exc)
        except Exception as exc:  # a bug: logged with its traceback once, the server and other jobs go on
            logger.exception("job %s failed", state.job_id)
            status, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        else:
            error = None
            if summary.num_cancelled:
                status = "interrupted" if self._stopping else "cancelled"
            else:
                status = "done"
            with self._lock:
                state.warnings = list(summary.warnings)
                state.warnings_i18n = [to_json(w) for w in summary.warnings]
                state.num_lines, state.num_ok, state.num_failed = summary.num_lines, summary.num_ok, summary.num_failed
                state.num_cancelled, state.num_skipped = summary.num_cancelled, summary.num_skipped
                state.num_done = summary.num_lines
        with self._lock:
            state.status, state.error, state.error_i18n = status, error, to_json(error)
            state.finished_s = time.time()
            state.eta_s = None
        self.store.save(state)
        metrics.JOBS.labels(status=status).inc()

    def _progress(self, live: _LiveJob, done: int, total: int, info: dict) -> None:
        state = live.state
        now = time.monotonic()
        status = info.get("status")
        metrics.JOB_LINES.labels(status=status if status in ("ok", "failed", "cancelled") else "skipped").inc()
        with self._lock:
            state.num_lines, state.num_done = total, done
            if status == "ok":
                state.num_ok += 1
            elif status == "failed":
                state.num_failed += 1
            elif status == "cancelled":
                state.num_cancelled += 1
            else:
                state.num_skipped += 1
            if status != "skipped":
                live.processed += 1
            elapsed = now - live.run_started_s
            remaining = max(0, total - done)
            state.eta_s = None if live.processed == 0 else remaining * elapsed / live.processed
            stats = self.runtime.engine.stats() if self.runtime is not None and self.pool is None else None
            state.batch_size = (stats.last_batch_size if stats is not None else None) or state.batch_size
            due = now - live.last_save_s >= SAVE_EVERY_S
            if due:
                live.last_save_s = now
        if due:
            self.store.save(state)
