"""Prometheus metrics of the app (``GET /metrics`` on the web server; ``tts_app.server``). No gradio, no torch.

Two kinds, following the Prometheus guidance on instrumentation (https://prometheus.io/docs/practices/naming/ and
/instrumenting/writing_clientlibs/): events are counted or timed where they happen (module-level ``Counter`` /
``Histogram`` objects, the ``prometheus_client`` idiom); state that already lives somewhere (the engine's queue and
batch cap, device memory, the loaded model) is read when Prometheus scrapes, by ``ServerCollector``, so there is one
source of truth and nothing to keep in sync. Names carry their unit (``_seconds``, ``_bytes``) and counters end in
``_total``; every name starts with ``tts_``.

Events (this module):
    tts_request_duration_seconds{endpoint, outcome}    HTTP API and web requests, until the last byte
    tts_time_to_first_audio_seconds{entry_point}       request received -> first audio sent
    tts_real_time_factor{entry_point}                  wall seconds per second of audio (below 1 = faster than real time)
                                                       entry_point: "api" (HTTP API), "web" (the page's Single and
                                                       Dialogue tabs), "job" (each ok JSONL job line)
    tts_reference_failures_total{reason}               reference clips refused, by ``Notice.code``
    tts_asr_transcriptions_total{outcome}              automatic reference transcripts
    tts_jobs_total{status} / tts_job_lines_total{status}   JSONL jobs finished / job lines finished
    tts_http_rejections_total{reason}                  API requests refused before any work (auth, rate, queue)
    tts_takes_scored_total{outcome}                    segment takes scored by the take policy: pass, below
                                                       (a threshold missed), unscored (no scoring model)
    tts_takes_rerolled_total                           takes generated again with a new seed (below threshold)
    tts_take_score_seconds                             seconds scoring one take took (histogram)
    tts_requests_finished_total{reason}                engine requests finished, by ``tts_app.finish.FinishReason``
                                                       (done, refused, too_large, out_of_memory, cancelled, ...)
    tts_batch_size_rows                                rows of each batch the engine ran, or of each decode step
                                                       when it batches continuously (histogram)
    tts_queue_wait_seconds{priority}                   a request's submit -> its first row running (the wait
                                                       behind other requests' rows)
    tts_stream_underrun_seconds                        each silence a streaming client heard because the next
                                                       chunk came after the audio sent so far had played
                                                       (``_count`` = underruns)

State (``ServerCollector``, read per scrape):
    tts_model_loaded, tts_model_load_seconds, tts_queue_depth_segments, tts_requests_active, tts_batch_cap_rows,
    tts_max_batch_size_rows, tts_last_batch_size_rows, tts_batches_total, tts_segments_total, tts_requests_total{outcome}, tts_oom_total,
    tts_memory_budget_bytes, tts_kv_cache_row_estimate_bytes, tts_device_memory_used_bytes,
    tts_device_memory_total_bytes, tts_torch_memory_allocated_bytes
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: Latency buckets in seconds: a short API call (tens of ms) up to a long-form request of several minutes.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Real-time-factor buckets: 0.05 (20x faster than real time) .. 10 (10x slower: CPU, tiny batches).
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
#: Rows-per-batch buckets (powers of two up to 64: ``EngineConfig.max_batch_size`` is usually 8-32).
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)

REQUEST_DURATION = Histogram(
    "tts_request_duration_seconds", "Time from a request's arrival to its last response byte, by endpoint and outcome",
    ["endpoint", "outcome"], buckets=LATENCY_BUCKETS_S)
TIME_TO_FIRST_AUDIO = Histogram(
    "tts_time_to_first_audio_seconds", "Time from a synthesis request's arrival to its first audio sent",
    ["entry_point"], buckets=LATENCY_BUCKETS_S)
REAL_TIME_FACTOR = Histogram(
    "tts_real_time_factor", "Wall-clock seconds spent per second of audio produced (RTF; < 1 is faster than real "
    "time)", ["entry_point"], buckets=RTF_BUCKETS)
REFERENCE_FAILURES = Counter(
    "tts_reference_failures", "Reference clips refused by the cleanup, by reason (the refusal's code)", ["reason"])
ASR_TRANSCRIPTIONS = Counter(
    "tts_asr_transcriptions", "Automatic reference transcripts made, by outcome", ["outcome"])
JOBS = Counter("tts_jobs", "JSONL jobs that ended, by final status", ["status"])
JOB_LINES = Counter("tts_job_lines", "JSONL job lines that ended, by status", ["status"])
HTTP_REJECTIONS = Counter(
    "tts_http_rejections", "HTTP API requests refused before any work, by reason", ["reason"])
TAKES_SCORED = Counter(
    "tts_takes_scored", "Segment takes the take policy scored, by outcome (pass, below: under a threshold, "
    "unscored: the scoring models could not run)", ["outcome"])
TAKES_REROLLED = Counter(
    "tts_takes_rerolled", "Segment takes the take policy generated again with a new seed (below a threshold)")
TAKE_SCORE_SECONDS = Histogram(
    "tts_take_score_seconds", "Seconds the take checker spent scoring one take (ASR, speaker embedding, signal "
    "checks), off the engine's worker thread")
REQUESTS_FINISHED = Counter(
    "tts_requests_finished", "Engine requests finished, by finish reason (done, refused, too_large, out_of_memory, "
    "cancelled, unavailable, error)", ["reason"])
#: Underrun buckets in seconds: a dropped frame (10 ms) .. a stall a proxy's 60 s timeout cuts.
UNDERRUN_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
QUEUE_WAIT = Histogram(
    "tts_queue_wait_seconds", "Time from a request's submit to its first segment running (waiting behind other "
    "requests' rows), by priority", ["priority"], buckets=LATENCY_BUCKETS_S)
STREAM_UNDERRUN = Histogram(
    "tts_stream_underrun_seconds", "Silence a streaming client heard each time the next chunk came after the audio "
    "sent so far had played (real-time playback from the first chunk)", buckets=UNDERRUN_BUCKETS_S)
BATCH_SIZE = Histogram("tts_batch_size_rows", "Rows of each batch the engine ran successfully (continuous "
                       "batching: live rows of each decode step)",
                       buckets=BATCH_SIZE_BUCKETS)


def observe_synthesis(entry_point: str, *, wall_s: float, audio_s: float, first_audio_s: float | None) -> None:
    """Record one finished synthesis: its real-time factor (``wall_s / audio_s``; skipped for empty audio) and the
    time to its first audio (``first_audio_s``, None = not known)."""
    if audio_s > 0:
        REAL_TIME_FACTOR.labels(entry_point=entry_point).observe(wall_s / audio_s)
    if first_audio_s is not None:
        TIME_TO_FIRST_AUDIO.labels(entry_point=entry_point).observe(first_audio_s)


def count_finish(future) -> None:
    """Done-callback of an engine request's future: count its ``SynthesisResult.finish.reason``."""
    if future.cancelled() or future.exception() is not None:
        return
    REQUESTS_FINISHED.labels(reason=future.result().finish.reason.value).inc()


def count_reference_failure(reason: str | None) -> None:
    """One reference clip refused; ``reason`` is the refusal's ``Notice.code`` (None: "unreadable")."""
    REFERENCE_FAILURES.labels(reason=reason or "unreadable").inc()


class ServerCollector(Collector):
    """Reads the engine, the device and the loaded model when Prometheus scrapes.

    Args:
        runtime: returns the current ``tts_app.runtime.Runtime``, or None while no model is loaded.
        read_memory: ``tts_app.monitor.read_memory`` (device -> ``MemoryReading``); injectable for tests.
    """

    def __init__(self, runtime: Callable[[], object | None], read_memory: Callable | None = None):
        self._runtime = runtime
        if read_memory is None:
            from tts_app.monitor import read_memory
        self._read_memory = read_memory

    def describe(self):  # no samples at registration time (the model may not be loaded yet)
        return []

    def collect(self):
        runtime = self._runtime()
        yield GaugeMetricFamily("tts_model_loaded", "1 when a model is loaded and serving, else 0",
                                value=0.0 if runtime is None else 1.0)
        if runtime is None:
            return
        if runtime.load_s is not None:
            yield GaugeMetricFamily("tts_model_load_seconds", "Seconds the loaded model took to load",
                                    value=runtime.load_s)
        stats = runtime.engine.stats()
        gauges = [
            ("tts_queue_depth_segments", "Segments waiting for a batch", stats.queue_depth),
            ("tts_requests_active", "Requests submitted to the engine and not finished", stats.num_requests_active),
            ("tts_batch_cap_rows", "Current cap on rows per batch (halved after out-of-memory, grows back)",
             stats.batch_cap),
            ("tts_max_batch_size_rows", "Operator's ceiling on rows per batch", stats.max_batch_size),
            ("tts_last_batch_size_rows", "Rows of the most recent batch", stats.last_batch_size),
            ("tts_kv_cache_row_estimate_bytes", "Estimated KV cache + activation bytes of one default row",
             stats.default_row_bytes),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=float(value))
        if stats.memory_budget_bytes is not None:
            yield GaugeMetricFamily("tts_memory_budget_bytes", "Memory budget for one batch's KV cache + "
                                    "activations", value=float(stats.memory_budget_bytes))
        yield CounterMetricFamily("tts_batches", "Batches run successfully", value=float(stats.num_batches))
        yield CounterMetricFamily("tts_segments", "Segments synthesised", value=float(stats.num_segments_done))
        yield CounterMetricFamily("tts_oom", "Out-of-memory errors caught (the batch was halved and retried, or a "
                                  "lone row failed)", value=float(stats.num_oom))
        requests = CounterMetricFamily("tts_requests", "Requests the engine finished, by outcome", labels=["outcome"])
        requests.add_metric(["done"], float(stats.num_requests_done))
        requests.add_metric(["failed"], float(stats.num_requests_failed))
        requests.add_metric(["cancelled"], float(stats.num_requests_cancelled))
        yield requests
        reading = self._read_memory(stats.device)
        yield GaugeMetricFamily("tts_device_memory_used_bytes", "Device memory in use (CUDA: whole device; CPU: "
                                "system RAM)", value=float(reading.used_bytes))
        yield GaugeMetricFamily("tts_device_memory_total_bytes", "Device memory in total (CUDA: the device; CPU: "
                                "system RAM)", value=float(reading.total_bytes))
        yield GaugeMetricFamily("tts_torch_memory_allocated_bytes", "Bytes held by torch's allocator (CPU: this "
                                "process's resident set)", value=float(reading.torch_allocated_bytes))


def make_registry(runtime: Callable[[], object | None]) -> CollectorRegistry:
    """A registry with this module's event metrics plus a ``ServerCollector`` over ``runtime`` (one per server).

    The event metrics are module-level (one set per process, shared by every server in it); they are registered in
    the default registry too, so ``prometheus_client.generate_latest()`` shows them as well."""
    registry = CollectorRegistry()
    for metric in (REQUEST_DURATION, TIME_TO_FIRST_AUDIO, REAL_TIME_FACTOR, REFERENCE_FAILURES, ASR_TRANSCRIPTIONS,
                   JOBS, JOB_LINES, HTTP_REJECTIONS, REQUESTS_FINISHED, BATCH_SIZE, QUEUE_WAIT, STREAM_UNDERRUN):
        registry.register(metric)
    registry.register(ServerCollector(runtime))
    return registry
