"""Job lines on a Ray cluster: one worker = one Ray actor holding one loaded model and its own ``Engine`` (so each
worker still batches, sizes batches from its device's memory and survives OOM); the driver keeps everything else.

    pool = WorkerPool.start(engine_args, ReferenceConfig(), ClusterConfig(address="local", num_workers=2))
    summary = run_job("tasks.jsonl", "out/", None, executor=RayExecutor(pool))  # the usual runner and writer
    pool.stats()                  # per worker: node, pid, device, engine stats, memory
    pool.close()                  # workers stopped; a cluster started here is shut down

Division of work:

- **Driver** (``tts_app.jobs.runner``, unchanged): validates the job file once, resumes, writes ``results.jsonl``
  in line order and each ok line's WAV + sidecar atomically, as for a single-process run. ``RayExecutor`` only
  changes where a line is synthesised.
- **Worker** (``LineWorker``, a threaded Ray actor): prepares the line's reference with its own
  ``ReferencePreparer`` (at its model's rate, cached), submits the request to its engine, and sends back a
  ``LineOutcome`` (the audio and the sidecar built from its runtime). Lines in flight on one worker share its
  engine's batches, so it is kept ``LocalExecutor.IN_FLIGHT_PER_BATCH_ROW`` x max batch size lines busy. Control
  calls (stats, cancel) run in their own concurrency group, so they never wait behind lines.
- **References**: "send" (default) ships each reference file's bytes once through Ray's object store (an LRU of
  the last ``REFERENCE_REFS_KEPT`` files); "shared" sends the path, for clusters whose machines mount the same
  folders. Either way the worker cleans the clip exactly as ``LocalExecutor`` would (same name, same hash).
- **Failures**: a worker that dies (process killed, node lost) fails its calls with a Ray actor error; each of its
  lines goes back to the queue and is sent to another worker, at most ``ClusterConfig.max_line_retries`` times, then
  it is recorded failed. The dead worker gets no more lines until a probe call answers (Ray restarts an actor up to
  ``max_worker_restarts`` times, reloading the model); a probe that fails or outlasts ``worker_start_timeout_s``
  marks it dead. When no worker is left, the lines not done are recorded failed at once, so a job never hangs;
  ``--resume`` runs them later (with any worker count: resume is the driver's business).

Greedy lines give the same audio whatever the worker count: each line's segments are seeded per row and an
engine's output does not depend on its batch-mates (``tts_app.engine``'s tested contract), so only which worker
ran a line changes, not what it produced (on identical hardware and software; different GPU models may differ in
the last bits).

Pattern: Ray's actor-pool pattern (``ray.util.ActorPool``: stateful actors fed from a queue) with the failure
handling it lacks; Ray Data's ``map_batches`` with a callable class per GPU was not used because the driver must
write each line's files and record in line order as they finish, and retry a dead worker's lines itself.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tts_app.config import ClusterConfig, EngineConfig, ModelConfig, ReferenceConfig
from tts_app.errors import ClusterError, ReferenceAudioError, TTSAppError
from tts_app.jobs.messages import Notice
from tts_app.jobs.executor import (AsrSetting, JobContext, LineOutcome, LocalExecutor, ReferenceInput,
                                   outcome_from_exception, outcome_from_result, prepare_default_voice, prepare_line)

if TYPE_CHECKING:
    from tts_app.audio.transcribe import Transcriber
    from tts_app.cli.args import EngineArgs
    from tts_app.engine import EngineStats
    from tts_app.jobs.schema import JobLine
    from tts_app.monitor import MemoryReading

logger = logging.getLogger(__name__)

#: what to install when Ray is missing (pinned there, included by requirements-dev.txt)
RAY_REQUIREMENTS = "requirements-ray.txt"
#: the actor's concurrency group for stats / cancel / probes (lines run in the default group)
CONTROL_GROUP = "control"
#: reference files whose bytes the driver keeps in the object store at once (a job's voices are usually few)
REFERENCE_REFS_KEPT = 64
#: Ray's own switch that makes a single-machine cluster use and bind the loopback address (it must be set before
#: ``import ray``; ``ray._private.ray_constants.ENABLE_RAY_CLUSTER``)
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: seconds between probes of a worker Ray is restarting
PROBE_INTERVAL_S = 1.0
#: environment variables passed on to workers when the driver has them (offline mode, thread counts)
_PASSED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")


def require_ray(*, loopback: bool = False):
    """The ``ray`` module, or a ``ClusterError`` saying how to install it.

    Args:
        loopback: the cluster is (or will be started) on this machine at the loopback address: make Ray use that
            address for this node too (only effective before Ray's first import in this process).

    Raises:
        ClusterError: Ray is not installed.
    """
    import sys

    if loopback and "ray" not in sys.modules:
        os.environ.setdefault(_LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise ClusterError(Notice("job_ray_missing", requirements=str(RAY_REQUIREMENTS))) from None
    return ray


def _ray_errors():
    """(worker-failure exception types, task-error type) of the installed Ray."""
    from ray import exceptions

    return exceptions.RayError, exceptions.RayTaskError


def job_runtime_env() -> dict[str, Any]:
    """Ray's job-level ``runtime_env`` for this app: the driver's ``tts_app`` package is shipped to every node
    (``py_modules``), so workers on other machines run the same code as the driver without installing it (its
    dependencies must be installed there: ``requirements.txt`` + ``requirements-ray.txt``). A process that calls
    ``ray.init`` itself (a test, an embedding app) passes this to it."""
    import tts_app

    return {"py_modules": [str(Path(tts_app.__file__).parent)]}


def connect(config: ClusterConfig, *, num_cpus_needed: float = 0.0) -> bool:
    """Join the cluster ``config.address`` names, or start one on this machine (see ``ClusterConfig.address``),
    with ``job_runtime_env()``.

    Args:
        num_cpus_needed: CPUs the workers will reserve; a cluster started here offers at least that many.

    Returns:
        True when this call started a cluster (``WorkerPool.close`` then shuts it down), False when it joined one
        (or Ray was already initialised in this process).

    Raises:
        ClusterError: Ray is missing, or the cluster cannot be reached.
    """
    address = config.address if config.address is not None else os.environ.get("RAY_ADDRESS")
    local = address in (None, "local")
    host = (address or "").removeprefix("ray://").rsplit(":", 1)[0]
    ray = require_ray(loopback=local or host in ("127.0.0.1", "localhost"))
    if ray.is_initialized():
        return False
    if local:
        num_cpus = max(os.cpu_count() or 1, math.ceil(num_cpus_needed))
        try:
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
                     object_store_memory=config.object_store_memory_bytes, _temp_dir=config.temp_dir,
                     runtime_env=job_runtime_env())
        except Exception as exc:  # noqa: BLE001 - Ray raises several types when its processes cannot start
            raise ClusterError(Notice("job_ray_start_failed", error=str(exc))) from None
        return True
    try:
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=job_runtime_env())
    except ConnectionError as exc:
        hint = Notice("job_ray_hint_auto") if address == "auto" else Notice("job_ray_hint_address", address=address)
        raise ClusterError(Notice("job_ray_unreachable", address=address, error=str(exc), hint=hint)) from None
    except Exception as exc:  # noqa: BLE001 - e.g. a version mismatch between this Ray and the cluster's
        raise ClusterError(Notice("job_ray_join_failed", address=address, error=str(exc))) from None
    return False


# --------------------------------------------------------------------------------------------------- worker side


@dataclass(frozen=True)
class WorkerInfo:
    """Where a worker runs and what it loaded (sent once, when it is ready).

    Attributes:
        index: 0-based worker number in the pool.
        node_ip: the node it runs on; pid: its process id.
        device: the engine's device ("cpu", "cuda" = the first GPU Ray gave it).
        gpu_ids: GPUs Ray assigned to it (``ray.get_gpu_ids()``).
        family, sampling_rate (Hz), max_batch_size: of its model and engine.
        load_error: why the model did not load (then the other fields are empty).
    """

    index: int
    node_ip: str
    pid: int
    device: str = ""
    gpu_ids: tuple = ()
    family: str = ""
    sampling_rate: int = 0
    max_batch_size: int = 0
    load_error: str | None = None


@dataclass(frozen=True)
class WorkerStats:
    """A worker now, for the Memory tab and logs.

    Attributes:
        info: ``WorkerInfo``.
        state: "up", "restarting" (it died and Ray is restarting it, or it is being probed) or "dead".
        lines_done: lines it finished for this pool (any outcome).
        lines_in_flight: lines sent to it and not yet back, all jobs together.
        engine: its ``EngineStats`` (None when it did not answer).
        memory: its device's ``MemoryReading`` (the worker process's RSS on CPU).
        error: why it is not up.
    """

    info: WorkerInfo
    state: str
    lines_done: int = 0
    lines_in_flight: int = 0
    engine: EngineStats | None = None
    memory: MemoryReading | None = None
    error: str | None = None


def _job_context(job: tuple) -> tuple[JobContext, ReferenceInput]:
    """(job context with its voice library, default voice input) from what ``RayExecutor.open`` put in the object
    store: (context without voices, default voice input, (voices root, bundled folder) or None). Saved voices and
    dialogue speakers' files are read by path on the worker (this machine, or folders every machine mounts)."""
    context, default_input, voice_dirs = job
    if voice_dirs is not None:
        from tts_app.voices import VoiceLibrary

        context = dataclasses.replace(context, voices=VoiceLibrary(*voice_dirs))
    return context, default_input


class LineWorker:
    """The Ray actor: one ``Runtime`` (model + engine + reference preparer) and the job lines in flight on it.

    Args:
        index: its number in the pool.
        model_config, engine_config, reference_config: what every worker loads (the driver's flags).
        torch_threads: intra-op threads for torch (its reserved CPUs, at least 1).

    Model-load errors do not kill the actor: ``info`` reports them, so the driver can show the message.
    """

    def __init__(self, index: int, model_config: ModelConfig, engine_config: EngineConfig,
                 reference_config: ReferenceConfig, torch_threads: int):
        import torch

        from tts_app.runtime import Runtime

        torch.set_num_threads(max(1, int(torch_threads)))
        self.index = index
        self._lock = threading.Lock()
        self._handles: dict[str, set] = collections.defaultdict(set)  # job id -> RequestHandles in flight
        self.load_error: str | None = None
        self.runtime = None
        self._transcribers: dict[AsrSetting, Transcriber | None] = {}  # this worker's own ASR models, per setting
        try:
            self.runtime = Runtime.load(model_config, engine_config, reference_config)
        except TTSAppError as exc:
            self.load_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which stops the start with it
            logger.exception("worker %d could not load the model", index)
            self.load_error = f"internal error while loading the model: {exc!r}"

    def info(self) -> WorkerInfo:
        import ray

        context = ray.get_runtime_context()
        base = dict(index=self.index, node_ip=ray.util.get_node_ip_address(), pid=os.getpid(),
                    gpu_ids=tuple(context.get_accelerator_ids().get("GPU", ())))
        if self.runtime is None:
            return WorkerInfo(**base, load_error=self.load_error)
        engine = self.runtime.engine
        return WorkerInfo(**base, device=engine.device, family=engine.facts.family,
                          sampling_rate=engine.sampling_rate, max_batch_size=engine.stats().max_batch_size)

    def transcriber(self, setting: AsrSetting) -> Transcriber | None:
        """This worker's ``Transcriber`` for a job's ASR setting, on its engine's device; built once per setting
        and loaded lazily on its first transcript (an ASR model that cannot load is a warning per line)."""
        with self._lock:
            if setting not in self._transcribers:
                self._transcribers[setting] = setting.build(self.runtime.engine.device)
            return self._transcribers[setting]

    def check_default_voice(self, job: tuple) -> str | None:
        """None when the job's default voice (if any) can be used here, else the refusal message."""
        context, default_input = _job_context(job)
        try:
            prepare_default_voice(self.runtime, context, default_input)
        except ReferenceAudioError as exc:
            return str(exc)
        return None

    def run_line(self, job_id: str, job: tuple, line: JobLine,
                 reference: ReferenceInput, emotion_clip: ReferenceInput = None) -> LineOutcome:
        """Synthesise one line on this worker's engine (blocks this actor thread until it ends; other lines run in
        the other threads and share the engine's batches). Never raises for a line's own failure."""
        context, default_input = _job_context(job)
        started = time.monotonic()
        try:
            default_reference = (prepare_default_voice(self.runtime, context, default_input)
                                 if line.prompt_audio is None else None)  # cached by the preparer after the first
            prepared = prepare_line(self.runtime, line, context, default_reference, reference, emotion_clip,
                                    transcriber=self.transcriber(context.asr))
            handle = self.runtime.engine.submit(prepared.request)
        except Exception as exc:  # noqa: BLE001 - sorted by outcome_from_exception, as on the local engine
            return outcome_from_exception(line, exc, time.monotonic() - started, warnings=line.warnings)
        with self._lock:
            self._handles[job_id].add(handle)
        try:
            result = handle.result()
        except BaseException as exc:  # noqa: BLE001
            return outcome_from_exception(line, exc, time.monotonic() - started, request_id=handle.request_id)
        finally:
            with self._lock:
                self._handles[job_id].discard(handle)
                if not self._handles[job_id]:
                    del self._handles[job_id]
        return outcome_from_result(self.runtime, context, line, prepared, result, time.monotonic() - started)

    def cancel_job(self, job_id: str) -> int:
        """Cancel this job's lines in flight here (each ``run_line`` then returns "cancelled"); returns how many."""
        with self._lock:
            handles = list(self._handles.get(job_id, ()))
        for handle in handles:
            handle.cancel()
        return len(handles)

    def stats(self) -> tuple[EngineStats | None, MemoryReading | None]:
        """(engine stats, memory of its device) now."""
        from tts_app.monitor import read_memory

        if self.runtime is None:
            return None, read_memory("cpu")
        stats = self.runtime.engine.stats()
        return stats, read_memory(stats.device)

    def shutdown(self) -> None:
        """Stop the engine (joins its thread) before the actor is killed."""
        if self.runtime is not None:
            self.runtime.close()


# --------------------------------------------------------------------------------------------------- driver side


@dataclass
class _Slot:
    """The driver's view of one worker."""

    index: int
    handle: Any  # ray.actor.ActorHandle of LineWorker
    info: WorkerInfo
    state: str = "up"  # "up" | "restarting" | "dead"
    load: int = 0  # lines in flight on it, all jobs together
    lines_done: int = 0
    probe: Any = None  # ObjectRef of an ``info`` call while "restarting" (None: the next one is due at next_probe_s)
    probe_started_s: float = 0.0  # when it stopped (monotonic s)
    next_probe_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class PoolPlan:
    """How many workers with which resources (``plan_workers``)."""

    num_workers: int
    gpus_per_worker: float
    cpus_per_worker: float


def plan_workers(config: ClusterConfig, model: ModelConfig, cluster_cpus: float, cluster_gpus: float) -> PoolPlan:
    """Workers and their resources for a cluster with ``cluster_cpus`` CPUs and ``cluster_gpus`` GPUs (defaults in
    ``ClusterConfig``). Pure; checked before any actor starts, because Ray would wait forever for resources the
    cluster does not have.

    Raises:
        ClusterError: the plan does not fit the cluster, or ``--device`` contradicts it.
    """
    if model.device.startswith("cuda:"):
        raise ClusterError(Notice("job_ray_device_index", device=model.device))
    gpus = config.gpus_per_worker
    if gpus is None:
        gpus = 1.0 if cluster_gpus >= 1 and model.device != "cpu" else 0.0
    if model.device == "cuda" and gpus == 0:
        raise ClusterError(Notice("job_ray_cuda_no_gpus", cluster_gpus=cluster_gpus))
    if gpus > 0 and model.device == "cpu":
        raise ClusterError(Notice("job_ray_cpu_with_gpus", gpus=gpus))
    workers = config.num_workers
    if workers is None:
        workers = int(cluster_gpus // gpus) if gpus > 0 else 1
    if workers < 1:
        raise ClusterError(Notice("job_ray_no_gpu_worker", gpus=gpus, cluster_gpus=cluster_gpus))
    if workers * gpus > cluster_gpus + 1e-9:
        raise ClusterError(Notice("job_ray_too_few_gpus", workers=workers, gpus=gpus, needed=workers * gpus,
                                  cluster_gpus=cluster_gpus))
    if workers * config.cpus_per_worker > cluster_cpus + 1e-9:
        raise ClusterError(Notice("job_ray_too_few_cpus", workers=workers, cpus=config.cpus_per_worker,
                                  needed=workers * config.cpus_per_worker, cluster_cpus=cluster_cpus))
    return PoolPlan(num_workers=workers, gpus_per_worker=gpus, cpus_per_worker=config.cpus_per_worker)


class WorkerPool:
    """Ray workers that each hold the model, started once and shared by every job run on them (the web app's jobs
    run at the same time; their lines share each worker's batches). Thread-safe.

    Build with ``WorkerPool.start``; ``RayExecutor(pool)`` runs one job on it.
    """

    def __init__(self, slots: list[_Slot], config: ClusterConfig, *, lines_per_worker: int, started_cluster: bool):
        self.config = config
        self.lines_per_worker = lines_per_worker
        self.started_cluster = started_cluster
        self.events: collections.deque[str] = collections.deque(maxlen=50)  # worker deaths etc., newest last
        self._slots = slots
        self._lock = threading.Lock()
        self._closed = False
        self._last_stats: tuple[float, list[WorkerStats]] | None = None  # (monotonic time, stats)

    # -- start / stop --------------------------------------------------------------------------------------------
    @classmethod
    def start(cls, engine_args: EngineArgs, reference_config: ReferenceConfig = ReferenceConfig(),
              config: ClusterConfig = ClusterConfig(), *, on_status: Callable[[str], None] | None = None
              ) -> "WorkerPool":
        """Connect to (or start) the cluster, start the workers and wait until each has loaded the model.

        Args:
            engine_args: model and engine flags, the same every worker uses.
            reference_config: reference cleanup settings of the workers' preparers.
            config: which cluster, how many workers, their resources.
            on_status: called with progress lines ("connected to ...", "worker 1 ready ..."); None = silent.

        Raises:
            ClusterError: Ray missing, cluster unreachable or too small, a worker failed to load the model or did
                not get ready within ``config.worker_start_timeout_s`` (every worker started is stopped again).
        """
        say = on_status or (lambda line: None)
        started_cluster = connect(config, num_cpus_needed=(config.num_workers or 1) * config.cpus_per_worker)
        import ray

        try:
            resources = ray.cluster_resources()
            plan = plan_workers(config, engine_args.model, float(resources.get("CPU", 0)),
                                float(resources.get("GPU", 0)))
            say(Notice("job_ray_cluster", nodes=len(ray.nodes()), cpus=resources.get("CPU", 0),
                       gpus=resources.get("GPU", 0), workers=plan.num_workers, gpus_per_worker=plan.gpus_per_worker,
                       cpus_per_worker=plan.cpus_per_worker))
            lines_per_worker = LocalExecutor.IN_FLIGHT_PER_BATCH_ROW * engine_args.engine.max_batch_size
            actor_class = ray.remote(concurrency_groups={CONTROL_GROUP: 2})(LineWorker)
            env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
            env["OMP_NUM_THREADS"] = str(max(1, int(plan.cpus_per_worker)))
            runtime_env = {"env_vars": env}  # the code itself comes with the job's runtime_env (connect)
            handles = [actor_class.options(num_cpus=plan.cpus_per_worker, num_gpus=plan.gpus_per_worker,
                                           max_concurrency=lines_per_worker + 1,
                                           max_restarts=config.max_worker_restarts, max_task_retries=0,
                                           runtime_env=runtime_env).remote(
                           index, engine_args.model, engine_args.engine, reference_config,
                           max(1, int(plan.cpus_per_worker)))
                       for index in range(plan.num_workers)]
        except BaseException:
            if started_cluster:
                ray.shutdown()
            raise
        pool = cls([], config, lines_per_worker=lines_per_worker, started_cluster=started_cluster)
        try:
            pool._slots = pool._wait_ready(handles, say)
        except BaseException:
            pool._stop(handles)
            raise
        return pool

    def _wait_ready(self, handles: list, say: Callable[[str], None]) -> list[_Slot]:
        import ray

        ray_error, _ = _ray_errors()
        pending = {h.info.options(concurrency_group=CONTROL_GROUP).remote(): i for i, h in enumerate(handles)}
        infos: dict[int, WorkerInfo] = {}
        deadline = time.monotonic() + self.config.worker_start_timeout_s
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                waiting = sorted(pending.values())
                raise ClusterError(Notice("job_ray_not_ready", workers=", ".join(str(i + 1) for i in waiting),
                                          timeout_s=self.config.worker_start_timeout_s))
            index = pending.pop(ready[0])
            try:
                info = ray.get(ready[0])
            except ray_error as exc:
                raise ClusterError(Notice("job_ray_worker_start_failed", n=index + 1, error=_short(exc))) from None
            if info.load_error is not None:
                raise ClusterError(Notice("job_ray_worker_load_failed", n=index + 1, error=info.load_error))
            infos[index] = info
            gpu_ids = Notice("job_ray_gpu_ids", ids=",".join(map(str, info.gpu_ids))) if info.gpu_ids else ""
            say(Notice("job_ray_worker_ready", n=index + 1, family=info.family, device=info.device, gpu_ids=gpu_ids,
                       node=info.node_ip, pid=info.pid))
        return [_Slot(index=i, handle=h, info=infos[i]) for i, h in enumerate(handles)]

    def close(self) -> None:
        """Stop every worker (engines first, then the actors); shut the cluster down when this pool started it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handles = [s.handle for s in self._slots]
        self._stop(handles)

    def _stop(self, handles: list) -> None:
        import ray

        ray_error, _ = _ray_errors()
        try:
            ray.wait([h.shutdown.options(concurrency_group=CONTROL_GROUP).remote() for h in handles],
                     num_returns=len(handles), timeout=30)
        except ray_error:
            pass
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except ray_error:
                pass
        if self.started_cluster:
            ray.shutdown()

    # -- scheduling ----------------------------------------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        return len(self._slots)

    @property
    def handles(self) -> list:
        """The workers' Ray actor handles, in worker order (tools and tests: ``ray.kill(pool.handles[0])``)."""
        with self._lock:
            return [s.handle for s in self._slots]

    @property
    def capacity(self) -> int:
        """Lines worth having in flight on the workers that are up."""
        with self._lock:
            return self.lines_per_worker * sum(1 for s in self._slots if s.state == "up")

    def acquire(self) -> _Slot | None:
        """The least loaded worker that is up and has room for one more line (its load counted), or None."""
        with self._lock:
            up = [s for s in self._slots if s.state == "up" and s.load < self.lines_per_worker]
            if not up:
                return None
            slot = min(up, key=lambda s: (s.load, s.index))
            slot.load += 1
            return slot

    def release(self, slot: _Slot, *, done: bool) -> None:
        """A line left ``slot`` (``done``: it returned an outcome)."""
        with self._lock:
            slot.load = max(0, slot.load - 1)
            if done:
                slot.lines_done += 1

    def report_failure(self, slot: _Slot, exc: BaseException) -> None:
        """A call to ``slot`` failed with a Ray actor/worker error: no more lines until a probe answers."""
        with self._lock:
            if slot.state != "up":
                return
            slot.state = "restarting"
            slot.error = _short(exc)
            slot.probe = slot.handle.info.options(concurrency_group=CONTROL_GROUP).remote()
            slot.probe_started_s = time.monotonic()
            message = Notice("job_ray_worker_stopped", n=slot.index + 1, pid=slot.info.pid, node=slot.info.node_ip,
                             error=slot.error)
        self.events.append(message)
        logger.warning("%s", message)

    def refresh(self) -> None:
        """Settle probes of failed workers without waiting: back "up", or "dead" (died for good, failed to load
        the model, or not back within ``worker_start_timeout_s``). A probe that finds the actor still restarting
        (Ray's ``ActorUnavailableError``) is sent again a second later."""
        import ray
        from ray.exceptions import ActorUnavailableError

        ray_error, _ = _ray_errors()
        now = time.monotonic()
        with self._lock:
            for slot in self._slots:
                if slot.state == "restarting" and slot.probe is None and now >= slot.next_probe_s:
                    slot.probe = slot.handle.info.options(concurrency_group=CONTROL_GROUP).remote()
            probing = [s for s in self._slots if s.state == "restarting" and s.probe is not None]
        if not probing:
            return
        ready, _ = ray.wait([s.probe for s in probing], num_returns=len(probing), timeout=0)
        ready = set(ready)
        for slot in probing:
            verdict, error = None, None
            if slot.probe in ready:
                try:
                    info = ray.get(slot.probe)
                    verdict, error = ("up", None) if info.load_error is None else ("dead", info.load_error)
                except ActorUnavailableError:  # Ray is restarting it (reloading the model): ask again later
                    with self._lock:
                        slot.probe, slot.next_probe_s = None, time.monotonic() + PROBE_INTERVAL_S
                except ray_error as exc:
                    verdict, error = "dead", _short(exc)
            if verdict is None and time.monotonic() - slot.probe_started_s > self.config.worker_start_timeout_s:
                verdict, error = "dead", Notice("job_ray_not_back", timeout_s=self.config.worker_start_timeout_s)
            if verdict is None:
                continue
            with self._lock:
                slot.state, slot.probe = verdict, None
                slot.error = error if verdict == "dead" else None
            message = (Notice("job_ray_worker_back", n=slot.index + 1) if verdict == "up" else
                       Notice("job_ray_worker_gone", n=slot.index + 1, error=error))
            self.events.append(message)
            logger.warning("%s", message)

    def any_alive(self) -> bool:
        """Some worker is up or may come back."""
        with self._lock:
            return any(s.state != "dead" for s in self._slots)

    def alive_handles(self) -> list:
        with self._lock:
            return [s.handle for s in self._slots if s.state == "up"]

    def first_up(self) -> _Slot | None:
        with self._lock:
            return next((s for s in self._slots if s.state == "up"), None)

    # -- monitoring ----------------------------------------------------------------------------------------------
    def stats(self, timeout_s: float = 2.0, *, max_age_s: float = 0.0) -> list[WorkerStats]:
        """Every worker now: state, lines done, engine stats and memory (asked of the workers that are up, each
        answer waited for at most ``timeout_s``). ``max_age_s`` > 0: the last answer when it is at most that old
        (a page polling every second asks the workers once for all its viewers)."""
        import ray

        ray_error, _ = _ray_errors()
        with self._lock:
            cached = self._last_stats
        if max_age_s > 0 and cached is not None and time.monotonic() - cached[0] <= max_age_s:
            return cached[1]
        self.refresh()
        with self._lock:
            slots = list(self._slots)
        asked = {s.index: s.handle.stats.options(concurrency_group=CONTROL_GROUP).remote() for s in slots
                 if s.state == "up"}
        if asked:
            ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
        out = []
        for slot in slots:
            engine = memory = None
            error = slot.error
            ref = asked.get(slot.index)
            if ref is not None:
                try:
                    engine, memory = ray.get(ref, timeout=0)
                except ray.exceptions.GetTimeoutError:
                    error = Notice("job_ray_no_answer", timeout_s=timeout_s)
                except ray_error as exc:
                    error = _short(exc)
            out.append(WorkerStats(info=slot.info, state=slot.state, lines_done=slot.lines_done,
                                   lines_in_flight=slot.load, engine=engine,
                                   memory=memory, error=error))
        with self._lock:
            self._last_stats = (time.monotonic(), out)
        return out


def _short(exc: BaseException) -> str:
    """The first line of a Ray error (its full text carries tracebacks and actor ids)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass
class _Attempt:
    line: JobLine
    reference: Any  # ReferenceInput, or an ObjectRef of (bytes, name)
    emotion_clip: Any = None  # the same for the line's emotion clip
    tries: int = 0
    slot: _Slot | None = None


class RayExecutor:
    """One job's lines on a ``WorkerPool`` (``tts_app.jobs.executor.LineExecutor``; see the module docstring).

    Attributes:
        num_retried: lines sent to another worker after theirs died.
        job_id: random id naming this job's lines on the workers (cancel hits only them).
    """

    def __init__(self, pool: WorkerPool):
        self.pool = pool
        self.job_id = secrets.token_hex(6)
        self.num_retried = 0
        self._job_ref = None
        self._queue: collections.deque[_Attempt] = collections.deque()
        self._refs: dict[Any, _Attempt] = {}
        self._reference_refs: collections.OrderedDict[Path, Any] = collections.OrderedDict()

    @property
    def capacity(self) -> int:
        return max(1, self.pool.capacity)

    @property
    def num_in_flight(self) -> int:
        return len(self._queue) + len(self._refs)

    def open(self, context: JobContext) -> None:
        import ray

        default_input: ReferenceInput = None
        if context.default_voice is not None:  # inside the job tuple, so bytes themselves (a nested ref stays a ref)
            default_input = context.default_voice
            if self.pool.config.reference_transport == "send":
                try:
                    default_input = (context.default_voice.read_bytes(), context.default_voice.name)
                except OSError:
                    pass
        # a VoiceLibrary holds a lock: it travels as its folders and is rebuilt on the worker (``_job_context``)
        voices = context.voices
        voice_dirs = (voices.root, voices.bundled_dir) if voices is not None else None
        self._job_ref = ray.put((dataclasses.replace(context, voices=None), default_input, voice_dirs))
        if context.default_voice is None:
            return
        slot = self.pool.first_up()
        if slot is None:
            raise ClusterError(Notice("job_ray_no_worker_for_voice"))
        message = ray.get(slot.handle.check_default_voice.options(concurrency_group=CONTROL_GROUP).remote(
            self._job_ref))
        if message is not None:
            raise ReferenceAudioError(message)

    def _reference_input(self, path: Path) -> Any:
        """How a worker gets the file at ``path`` (``ClusterConfig.reference_transport``)."""
        import ray

        if self.pool.config.reference_transport == "shared":
            return path
        ref = self._reference_refs.get(path)
        if ref is not None:
            self._reference_refs.move_to_end(path)
            return ref
        try:
            data = path.read_bytes()
        except OSError:  # vanished since validation: the worker's preparer names it as the local run would
            return path
        ref = ray.put((data, path.name))
        self._reference_refs[path] = ref
        while len(self._reference_refs) > REFERENCE_REFS_KEPT:
            self._reference_refs.popitem(last=False)  # the object is freed once no line in flight holds it
        return ref

    def submit(self, line: JobLine) -> LineOutcome | None:
        reference = self._reference_input(line.prompt_audio) if line.prompt_audio is not None else None
        emotion_clip = None
        if line.emotion is not None and line.emotion.audio is not None:
            emotion_clip = self._reference_input(line.emotion.audio)
        self._queue.append(_Attempt(line, reference, emotion_clip))
        self._dispatch()
        return None

    def _dispatch(self) -> None:
        while self._queue:
            slot = self.pool.acquire()
            if slot is None:
                return
            attempt = self._queue.popleft()
            attempt.slot = slot
            ref = slot.handle.run_line.remote(self.job_id, self._job_ref, attempt.line, attempt.reference,
                                              attempt.emotion_clip)
            self._refs[ref] = attempt

    def _no_worker_outcomes(self) -> list[LineOutcome]:
        """Every queued line failed at once when no worker is left (the job must end, not wait)."""
        if not self._queue or self.pool.any_alive():
            return []
        outcomes = [LineOutcome(a.line.line_number, a.line.output_name, "failed",
                                error=Notice("job_ray_no_worker_left", count=self.pool.num_workers),
                                warnings=list(a.line.warnings),
                                finish_reason="unavailable")
                    for a in self._queue]
        self._queue.clear()
        return outcomes

    def _collect(self, refs: list, *, retry: bool) -> list[LineOutcome]:
        import ray

        ray_error, task_error = _ray_errors()
        outcomes = []
        for ref in refs:
            attempt = self._refs.pop(ref)
            try:
                outcome = ray.get(ref)
            except task_error as exc:  # run_line catches a line's own errors: this is a bug, logged once
                self.pool.release(attempt.slot, done=True)
                logger.error("job line %d raised on worker %d: %s", attempt.line.line_number,
                             attempt.slot.index + 1, exc)
                outcome = LineOutcome(attempt.line.line_number, attempt.line.output_name, "failed",
                                      error=Notice("job_ray_internal_error", error=_short(exc)))
            except ray_error as exc:  # the worker died (or its node): the line goes to another worker
                self.pool.release(attempt.slot, done=False)
                self.pool.report_failure(attempt.slot, exc)
                if retry and attempt.tries < self.pool.config.max_line_retries:
                    attempt.tries += 1
                    self.num_retried += 1
                    self._queue.appendleft(attempt)
                    continue
                outcome = LineOutcome(
                    attempt.line.line_number, attempt.line.output_name, "failed" if retry else "cancelled",
                    error=(Notice("job_ray_line_worker_stopped", count=attempt.tries + 1, error=_short(exc))
                           if retry else Notice("job_cancelled")), warnings=list(attempt.line.warnings),
                    finish_reason="unavailable" if retry else "cancelled")
            else:
                self.pool.release(attempt.slot, done=True)
            outcomes.append(outcome)
        return outcomes

    def poll(self, timeout_s: float) -> list[LineOutcome]:
        import ray

        self.pool.refresh()
        self._dispatch()
        outcomes = self._no_worker_outcomes()
        if not self._refs:
            if self._queue and timeout_s > 0:  # waiting for a worker to come back
                time.sleep(min(timeout_s, 0.05))
            return outcomes
        ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=timeout_s)
        if ready:
            ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        outcomes += self._collect(ready, retry=True)
        self._dispatch()
        return outcomes + self._no_worker_outcomes()

    def _cancel_on_workers(self) -> None:
        for handle in self.pool.alive_handles():
            handle.cancel_job.options(concurrency_group=CONTROL_GROUP).remote(self.job_id)

    def cancel(self, grace_s: float) -> list[LineOutcome]:
        import ray

        outcomes = [LineOutcome(a.line.line_number, a.line.output_name, "cancelled", error=Notice("job_cancelled"))
                    for a in self._queue]
        self._queue.clear()
        self._cancel_on_workers()
        deadline = time.monotonic() + grace_s
        while self._refs and time.monotonic() < deadline:
            ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs),
                                timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            outcomes += self._collect(ready, retry=False)
        for attempt in self._refs.values():
            self.pool.release(attempt.slot, done=False)
            outcomes.append(LineOutcome(attempt.line.line_number, attempt.line.output_name, "cancelled",
                                        error=Notice("job_cancelled")))
        self._refs.clear()
        return outcomes

    def abort(self) -> None:
        self._cancel_on_workers()
        for attempt in self._refs.values():
            self.pool.release(attempt.slot, done=False)
        self._refs.clear()
        self._queue.clear()
