"""Frozen configuration dataclasses, one per subsystem. Defaults live here, once.

CLI overrides use ``None`` for "not given" (never ``x or default``, which eats a legitimate 0 or False).
Per-call knobs live in ``tts_app.request.SynthesisParams``, not here.

Each dataclass checks its own values in ``__post_init__`` and raises ``ConfigError`` naming the field, the value and
the allowed range, so every entry point (``app.py``, ``synth``, ``batch``, library callers) refuses a bad value the
same way; ``tts_app.cli.args`` turns that into a one-line usage error naming the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tts_app.errors import ConfigError, InputError

DEFAULT_MODEL_ID = "vibevoice/VibeVoice-1.5B-hf"
#: ``ModelConfig.device`` values besides "cuda:N"
DEVICES = ("auto", "cpu", "cuda")
#: ``ModelConfig.dtype`` values
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: ``EngineConfig.compile`` values: "auto" = a graph-captured decode step on CUDA, eager on CPU; "on"; "off".
COMPILE_MODES = ("auto", "on", "off")
_CUDA_INDEX = re.compile(r"^cuda:\d+$")

#: Segments are never capped below this many characters (shorter caps would split inside words and phrases);
#: the floor of ``SynthesisParams.max_segment_chars`` and of the front end's ``max_segment_chars``.
MIN_MAX_SEGMENT_CHARS = 8
#: Accepted reference sampling rates in Hz: 8 kHz is telephone speech, the lowest rate any of our models or codecs
#: uses as input; 192 kHz is the highest common audio-interface rate (soundfile/libsndfile write it fine).
MIN_SAMPLING_RATE, MAX_SAMPLING_RATE = 8000, 192000
#: Segment length cap when the model gives none (``ModelFacts.max_segment_chars`` usually does).
DEFAULT_MAX_SEGMENT_CHARS = 200
#: Tempo factors a request may ask for (``SynthesisParams.speed``, or implied by ``duration_s``): beyond 2x faster
#: or slower, time-stretched speech stops sounding natural (the range most TTS tools offer, e.g. edge-tts, Piper).
MIN_SPEED, MAX_SPEED = 0.5, 2.0
#: Loudness targets accepted (``SynthesisParams.loudness_lufs``), in LUFS: -40 is far below any delivery spec,
#: -5 is louder than the loudest streaming masters. Common targets: -23 (EBU R128 broadcast), -16 (podcasts).
MIN_LOUDNESS_LUFS, MAX_LOUDNESS_LUFS = -40.0, -5.0
#: Silence after a chapter (a ``#`` heading line, or a section after two blank lines), in ms.
DEFAULT_CHAPTER_PAUSE_MS = 1500


def check_device(device: str) -> str:
    """``device`` if it is "auto", "cpu", "cuda" or "cuda:N"; else ``ConfigError`` listing the choices."""
    if device in DEVICES or (isinstance(device, str) and _CUDA_INDEX.match(device)):
        return device
    raise ConfigError("device", f"device {device!r} is not one of {', '.join(DEVICES)} or cuda:N (e.g. cuda:1)")


def check_dtype(dtype: str) -> str:
    """``dtype`` if it is one of ``DTYPES``; else ``ConfigError`` listing them."""
    if dtype in DTYPES:
        return dtype
    raise ConfigError("dtype", f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")


def _check(field: str, ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(field, message)


def public_model_id(model_id: str) -> str:
    """A model id as users may see it (the web page, its ``/config``, the API): the hub id, or for a local checkpoint
    its folder's name only (a server path would tell every visitor the server's folder layout)."""
    from pathlib import Path

    return Path(model_id).name if Path(model_id).expanduser().exists() else model_id


@dataclass(frozen=True)
class ModelConfig:
    """Which model to load and where.

    Attributes:
        model_id: hub id or local folder (e.g. one written by ``python -m tts_app make-tiny-model``).
        device: "auto" (cuda when available, else cpu), "cpu" or "cuda".
        dtype: "float32", "bfloat16" or "float16"; "auto" = bfloat16 on cuda, float32 on cpu.
    """

    model_id: str = DEFAULT_MODEL_ID
    device: str = "auto"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        _check("model_id", isinstance(self.model_id, str) and bool(self.model_id.strip()),
               f"model {self.model_id!r} is empty; give a hub id (default {DEFAULT_MODEL_ID}) or a checkpoint folder")
        check_device(self.device)
        check_dtype(self.dtype)


# The speech recogniser that scores takes (``EngineConfig.quality_asr``, ``--quality-asr``; ``tts_app.quality.asr``):
# Whisper large-v3-turbo through the transformers pipeline, the checkpoint the app already loads for reference
# transcripts (``tts_app.audio.transcribe.DEFAULT_ASR_MODEL``), so one load can serve both.
DEFAULT_QUALITY_ASR = "transformers:openai/whisper-large-v3-turbo"


@dataclass(frozen=True)
class EngineConfig:
    """Batching, memory and out-of-memory behaviour of the engine.

    Attributes:
        max_batch_size: most rows (segments) in one forward call; >= 1.
        memory_budget_bytes: explicit budget for KV cache + activations (the only budget on CPU); None = derived from
            free device memory on CUDA.
        memory_utilization: share of free device memory the engine may plan to use, in (0, 1].
        safety_margin_bytes: subtracted from the derived budget (fragmentation, other allocations).
        activation_bytes_per_row: measured per-row activation overhead added to each row's KV estimate; None = the
            adapter's estimate.
        wait_window_ms: how long the worker waits for more requests before launching a partial batch, in ms.
        grow_after_successes: consecutive successful batches before a shrunken batch cap grows back by one step.
        simulate_oom_above_batch: testing aid; raise a real ``torch.OutOfMemoryError`` in generate for batches larger
            than this. None = off.
        simulate_oom_probability: testing aid; probability in [0, 1] of a simulated OOM per generate call (batches of
            more than one row only, so every item can still finish).
        empty_cache_when_idle_s: call ``torch.cuda.empty_cache()`` after this many idle seconds.
        simulate_step_delay_ms: testing aid; sleep this long before each decode step of a step-wise (continuous)
            batch, to watch streaming on a fast machine. 0 = off.
        prefix_cache_entries: prefilled prompt prefixes (one per reference voice) kept for reuse by later rows of the
            same voice (adapters with a step interface); 0 = off. Their bytes count in the memory budget, bounded to
            an eighth of it.
        quality_asr: the speech recogniser that scores takes under a take policy (``SynthesisParams.take_check``;
            ``tts_app.quality.asr.asr_backend``): ``transformers:ID_OR_DIR`` or ``faster-whisper:ID_OR_DIR``; loaded
            on the model's device on the first request that asks for take checking.
        compile: one of ``COMPILE_MODES``: whether the pooled decode step of the step-wise families runs through
            ``torch.compile`` (CUDA: ``mode="reduce-overhead"``, CUDA graphs per batch-size bucket; CPU: inductor),
            ``resolve_compile`` says what "auto" means on a device.
    """

    max_batch_size: int = 8
    memory_budget_bytes: int | None = None
    memory_utilization: float = 0.9
    safety_margin_bytes: int = 512 * 1024**2
    activation_bytes_per_row: int | None = None
    wait_window_ms: float = 30.0
    grow_after_successes: int = 4
    simulate_oom_above_batch: int | None = None
    simulate_oom_probability: float = 0.0
    empty_cache_when_idle_s: float = 5.0
    prefix_cache_entries: int = 16
    simulate_step_delay_ms: float = 0.0
    quality_asr: str = DEFAULT_QUALITY_ASR
    compile: str = "auto"

    def __post_init__(self) -> None:
        _check("quality_asr", isinstance(self.quality_asr, str) and bool(self.quality_asr.strip()),
               f"quality ASR {self.quality_asr!r} is empty; give BACKEND:ID_OR_DIR (default {DEFAULT_QUALITY_ASR})")
        _check("max_batch_size", self.max_batch_size >= 1, f"max batch size {self.max_batch_size} must be >= 1")
        _check("memory_budget_bytes", self.memory_budget_bytes is None or self.memory_budget_bytes > 0,
               f"memory budget {self.memory_budget_bytes} bytes must be positive; write e.g. 2GiB or 512MB")
        _check("memory_utilization", 0 < self.memory_utilization <= 1,
               f"memory utilization {self.memory_utilization} must be in (0, 1]")
        _check("safety_margin_bytes", self.safety_margin_bytes >= 0,
               f"safety margin {self.safety_margin_bytes} bytes must be >= 0")
        _check("activation_bytes_per_row", self.activation_bytes_per_row is None or self.activation_bytes_per_row >= 0,
               f"activation bytes per row {self.activation_bytes_per_row} must be >= 0")
        _check("wait_window_ms", self.wait_window_ms >= 0, f"wait window {self.wait_window_ms} ms must be >= 0")
        _check("grow_after_successes", self.grow_after_successes >= 1,
               f"grow_after_successes={self.grow_after_successes} must be >= 1")
        _check("simulate_oom_above_batch", self.simulate_oom_above_batch is None or self.simulate_oom_above_batch >= 1,
               f"simulate_oom_above_batch={self.simulate_oom_above_batch} must be >= 1")
        _check("simulate_oom_probability", 0 <= self.simulate_oom_probability <= 1,
               f"simulate_oom_probability={self.simulate_oom_probability} must be in [0, 1]")
        _check("empty_cache_when_idle_s", self.empty_cache_when_idle_s >= 0,
               f"empty_cache_when_idle_s={self.empty_cache_when_idle_s} must be >= 0")
        _check("simulate_step_delay_ms", self.simulate_step_delay_ms >= 0,
               f"simulate_step_delay_ms={self.simulate_step_delay_ms} must be >= 0")
        _check("prefix_cache_entries", self.prefix_cache_entries >= 0,
               f"prefix_cache_entries={self.prefix_cache_entries} must be >= 0 (0 = off)")
        _check("compile", self.compile in COMPILE_MODES,
               f"compile={self.compile!r} must be one of {', '.join(COMPILE_MODES)}")

    def resolve_compile(self, device: str) -> bool:
        """Whether the decode step is compiled on ``device``: "on" / "off" as given; "auto" = on for CUDA only
        (CPU compile time is not repaid by CPU decode steps)."""
        if self.compile == "auto":
            return str(device).startswith("cuda")
        return self.compile == "on"


@dataclass(frozen=True)
class EngineArgs:
    """A model and its engine settings: what the engine/model flags of every command resolve to
    (``tts_app.cli.args.engine_args_from``) and what ``tts_app.runtime.Runtime.load`` and the Ray pool start from.

    Attributes:
        model: which checkpoint, on which device, in which dtype.
        engine: batching, memory budget and OOM testing aids.
    """

    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()


def check_device_available(model: ModelConfig) -> None:
    """Refuse a CUDA device on a machine without one before any model work (imports torch only then).

    Raises:
        InputError: ``--device cuda[:N]`` but torch sees no (such) CUDA device.
    """
    if not model.device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise InputError(f"--device {model.device} was given but no CUDA device is available; use --device cpu or "
                         "auto")
    index = int(model.device.split(":")[1]) if ":" in model.device else 0
    if index >= torch.cuda.device_count():
        raise InputError(f"--device {model.device}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                         f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")


#: ``ReferenceConfig.cleanup`` values: "auto" = check and report as "full" does, but change only what the model's
#: upstream tool would (decode, mono, resample to the model's rate: the clip the upstream examples hand their
#: processor; IndexTTS 2's own 15 s cut happens in its adapter, as in its package); "full" = VAD trim to the speech
#: plus margins, 50 Hz high-pass and hum notches, long pauses shortened, crop to ``max_speech_s``, speech loudness to
#: ``target_loudness_dbfs``; "off" = decode, mono and resample only, no checks beyond a decodable, finite clip.
REFERENCE_CLEANUPS = ("auto", "full", "off")
#: The one default of ``reference_cleanup`` (UI, CLI, JSONL, API all read it from here).
DEFAULT_REFERENCE_CLEANUP = "auto"


@dataclass(frozen=True)
class ReferenceConfig:
    """Reference-audio cleanup settings.

    Attributes:
        cleanup: what is done to a reference clip, one of ``REFERENCE_CLEANUPS`` (see there); a request may choose
            another (``reference_cleanup``).
        max_decode_s: longest audio decoded from a file; longer files are read only up to this point (with a warning).
        max_speech_s: crop the cleaned reference to at most this much speech, at a VAD boundary.
        min_speech_s: less speech than this is an error.
        vad_threshold: Silero VAD speech probability threshold.
        vad_pad_ms: margin of context kept before the first and after the last speech (after extending the VAD's
            edges over soft onsets such as /s/ and soft endings), bounded by the file, in ms. Cloning needs the
            whole first phoneme and a little of the room before it.
        max_internal_pause_ms: internal pauses longer than this are shortened to it, in ms.
        highpass_cutoff_hz: high-pass filter cutoff (removes hum and rumble).
        target_loudness_dbfs: RMS level of the speech after normalisation, in dBFS.
        peak_ceiling_dbfs: peak level never exceeded after normalisation, in dBFS.
        cache_entries: processed references kept in memory, keyed by content hash.
        max_nonfinite_share: NaN/Inf samples are zeroed with a warning up to this share of all samples; a larger
            share is an error (the file is broken, not just dented).
        max_clipping_share: warn "clipped" when more than this share of samples sits at full scale.
        min_snr_db: warn "noisy background" when the estimated SNR (speech vs non-speech power) is below this, in dB.
        min_speech_level_dbfs: warn "low level" when the speech RMS of the input is below this, in dBFS.
        default_sampling_rate: Hz of the cleaned clip when no model says which rate it needs (the ``reference``
            command without ``--sampling-rate``, the web app's quality report with no model loaded); 24 kHz is the
            rate of VibeVoice, CSM and Higgs Audio v2.
        min_bandwidth_hz: warn "band-limited" when the speech reaches no higher than this, in Hz (telephone audio
            stops at 3.4 kHz; every model here generates at 16 kHz or more and copies a muffled reference).
    """

    cleanup: str = DEFAULT_REFERENCE_CLEANUP
    max_decode_s: float = 300.0
    max_speech_s: float = 15.0
    min_speech_s: float = 1.0
    vad_threshold: float = 0.5
    vad_pad_ms: int = 150
    max_internal_pause_ms: int = 600
    highpass_cutoff_hz: float = 50.0
    target_loudness_dbfs: float = -20.0
    peak_ceiling_dbfs: float = -1.0
    cache_entries: int = 64
    max_nonfinite_share: float = 0.01
    max_clipping_share: float = 0.001
    min_snr_db: float = 25.0
    min_speech_level_dbfs: float = -40.0
    default_sampling_rate: int = 24000
    min_bandwidth_hz: float = 5500.0

    def __post_init__(self) -> None:
        problems = [
            ("cleanup", self.cleanup in REFERENCE_CLEANUPS,
             f"reference cleanup {self.cleanup!r} is not one of {', '.join(REFERENCE_CLEANUPS)}"),
            ("max_decode_s", self.max_decode_s > 0, f"max_decode_s={self.max_decode_s} must be > 0"),
            ("max_speech_s", self.max_speech_s > 0, f"max_speech_s={self.max_speech_s} must be > 0"),
            ("min_speech_s", 0 <= self.min_speech_s <= self.max_speech_s,
             f"min_speech_s={self.min_speech_s} must be in [0, max_speech_s={self.max_speech_s}]"),
            ("vad_threshold", 0 < self.vad_threshold < 1, f"vad_threshold={self.vad_threshold} must be in (0, 1)"),
            ("vad_pad_ms", self.vad_pad_ms >= 0, f"vad_pad_ms={self.vad_pad_ms} must be >= 0"),
            ("max_internal_pause_ms", self.max_internal_pause_ms >= 0,
             f"max_internal_pause_ms={self.max_internal_pause_ms} must be >= 0"),
            ("peak_ceiling_dbfs", self.peak_ceiling_dbfs <= 0,
             f"peak_ceiling_dbfs={self.peak_ceiling_dbfs} must be <= 0"),
            ("target_loudness_dbfs", self.target_loudness_dbfs <= 0,
             f"target_loudness_dbfs={self.target_loudness_dbfs} must be <= 0"),
            ("cache_entries", self.cache_entries >= 1, f"cache_entries={self.cache_entries} must be >= 1"),
            ("max_nonfinite_share", 0 <= self.max_nonfinite_share <= 1,
             f"max_nonfinite_share={self.max_nonfinite_share} must be in [0, 1]"),
            ("max_clipping_share", 0 <= self.max_clipping_share <= 1,
             f"max_clipping_share={self.max_clipping_share} must be in [0, 1]"),
            ("min_bandwidth_hz", self.min_bandwidth_hz >= 0, f"min_bandwidth_hz={self.min_bandwidth_hz} must be >= 0"),
            ("default_sampling_rate", MIN_SAMPLING_RATE <= self.default_sampling_rate <= MAX_SAMPLING_RATE,
             f"default_sampling_rate={self.default_sampling_rate} Hz must be in "
             f"{MIN_SAMPLING_RATE}..{MAX_SAMPLING_RATE}"),
        ]
        for field, ok, message in problems:
            _check(field, ok, f"reference config: {message}")


#: ``ClusterConfig.reference_transport`` values: "send" ships each reference file's bytes to the workers through
#: Ray's object store (works on any cluster); "shared" sends its path (every machine mounts the same folders)
REFERENCE_TRANSPORTS = ("send", "shared")


@dataclass(frozen=True)
class ClusterConfig:
    """Running job lines on a Ray cluster (``tts_app.jobs.cluster``): one worker = one Ray actor holding one loaded
    model and its engine.

    Attributes:
        address: which cluster. None = an existing one if Ray finds it (``RAY_ADDRESS``, or ``ray start`` on this
            machine), else a new one on this machine for this run; "auto" = an existing one (error if none);
            "local" = always a new one on this machine, bound to the loopback address, stopped at the end;
            "HOST:PORT" = the head node's GCS address (``ray start --head`` prints it); "ray://HOST:PORT" = Ray
            Client.
        num_workers: workers to start; None = one per GPU of the cluster (its GPUs // ``gpus_per_worker``), or 1
            when the workers use no GPU.
        gpus_per_worker: GPUs each worker reserves (fractions pack several workers on one GPU; the engine uses the
            first GPU it is given); None = 1 when the cluster has GPUs and the model's device is not "cpu", else 0.
        cpus_per_worker: CPUs each worker reserves (Ray's logical CPUs; also its torch threads, at least 1).
        max_line_retries: how many times a line whose worker died is sent to another worker before it is recorded
            failed (a line that kills every worker it meets must not take the whole cluster down).
        max_worker_restarts: how many times Ray restarts a worker actor that died (it reloads the model); its lines
            go to the other workers meanwhile.
        worker_start_timeout_s: how long workers may take to be placed and load the model (a hub download counts),
            in s; past it the start fails naming the workers still pending.
        reference_transport: one of ``REFERENCE_TRANSPORTS``.
        object_store_memory_bytes: Ray object store size of a cluster started here ("local", or None when none is
            found); None = Ray's default (30 % of RAM). Ignored when joining a running cluster.
        temp_dir: Ray's session folder for a cluster started here; None = Ray's default (``/tmp/ray``).
    """

    address: str | None = None
    num_workers: int | None = None
    gpus_per_worker: float | None = None
    cpus_per_worker: float = 1.0
    max_line_retries: int = 2
    max_worker_restarts: int = 1
    worker_start_timeout_s: float = 1800.0
    reference_transport: str = "send"
    object_store_memory_bytes: int | None = None
    temp_dir: str | None = None

    def __post_init__(self) -> None:
        _check("address", self.address is None or bool(str(self.address).strip()),
               "Ray address is empty; give HOST:PORT, auto or local")
        _check("num_workers", self.num_workers is None or self.num_workers >= 1,
               f"num_workers={self.num_workers} must be >= 1")
        _check("gpus_per_worker", self.gpus_per_worker is None or self.gpus_per_worker >= 0,
               f"gpus_per_worker={self.gpus_per_worker} must be >= 0")
        _check("cpus_per_worker", self.cpus_per_worker > 0, f"cpus_per_worker={self.cpus_per_worker} must be > 0")
        _check("max_line_retries", self.max_line_retries >= 0, f"max_line_retries={self.max_line_retries} must be >= 0")
        _check("max_worker_restarts", self.max_worker_restarts >= 0,
               f"max_worker_restarts={self.max_worker_restarts} must be >= 0")
        _check("worker_start_timeout_s", self.worker_start_timeout_s > 0,
               f"worker_start_timeout_s={self.worker_start_timeout_s} must be > 0")
        _check("reference_transport", self.reference_transport in REFERENCE_TRANSPORTS,
               f"reference transport {self.reference_transport!r} is not one of {', '.join(REFERENCE_TRANSPORTS)}")
        _check("object_store_memory_bytes", self.object_store_memory_bytes is None or
               self.object_store_memory_bytes > 0,
               f"object store memory {self.object_store_memory_bytes} bytes must be positive; write e.g. 2GiB")


@dataclass(frozen=True)
class UploadConfig:
    """What browsers may upload to the web app, and how long uploads and finished jobs are kept.

    Attributes:
        max_upload_bytes: largest reference audio, job file or default voice, in bytes (100 MB: a 5-minute 48 kHz
            stereo 16-bit WAV is 58 MB; references are read only up to ``ReferenceConfig.max_decode_s`` anyway).
        max_zip_upload_bytes: largest ZIP of reference audio for a job, in bytes (1 GB); what it unpacks to is
            limited separately (``JobConfig.max_zip_bytes``).
        cache_max_age_s: gradio's copies of uploads older than this are deleted (checked every
            ``cache_check_every_s``), in s.
        cache_check_every_s: how often that clean-up runs, in s.
        keep_jobs_s: job folders that ended more than this long ago are removed when the app starts, in s.
        keep_failed_inputs_s: the uploaded inputs (``input/``: job file, audio ZIP, default voice) of a job that
            failed as a whole (unreadable file, bad ZIP, disk full) are removed this long after it ended, in s (2
            days: long enough to read the error and resume; the folder and its records stay ``keep_jobs_s``).
        max_owner_bytes: most disk one owner (a browser, or an API key) may hold in job folders and uploads
            together, in bytes (10 GB: twenty long jobs of a few hundred lines at 24 kHz); a job or an upload that
            would pass it is refused in words, naming the use and the limit.
    """

    max_upload_bytes: int = 100 * 1000**2
    max_zip_upload_bytes: int = 1000**3
    cache_max_age_s: int = 6 * 3600
    cache_check_every_s: int = 3600
    keep_jobs_s: float = 14 * 86400.0
    keep_failed_inputs_s: float = 2 * 86400.0
    max_owner_bytes: int = 10 * 1000**3

    def __post_init__(self) -> None:
        for name in ("max_upload_bytes", "max_zip_upload_bytes", "cache_max_age_s", "cache_check_every_s",
                     "keep_jobs_s", "keep_failed_inputs_s", "max_owner_bytes"):
            _check(name, getattr(self, name) > 0, f"{name}={getattr(self, name)} must be > 0")


@dataclass(frozen=True)
class FrontendConfig:
    """Text front-end settings.

    Attributes:
        default_pause_ms: silence between segments when the text gives none, in ms.
        min_segment_chars: segments shorter than this are merged into a neighbour.
        scene_break_pause_ms: silence for a scene-break line of the text (``***``, ``---``, ``* * *``), in ms: a
            longer pause than between sentences (5x the default gap).
    """

    default_pause_ms: int = 200
    min_segment_chars: int = 4
    scene_break_pause_ms: int = 1000

    def __post_init__(self) -> None:
        _check("default_pause_ms", self.default_pause_ms >= 0, f"default pause {self.default_pause_ms} ms must be >= 0")
        _check("min_segment_chars", self.min_segment_chars >= 0,
               f"min_segment_chars={self.min_segment_chars} must be >= 0")
        _check("scene_break_pause_ms", self.scene_break_pause_ms >= 0,
               f"scene break pause {self.scene_break_pause_ms} ms must be >= 0")


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask for: the same bounds at every door (the page, its gradio API, a JSONL line,
    ``/v1``), checked before any work starts (``SynthesisParams``, ``SynthesisRequest``, the engine's front-end
    step, the JSONL reader). ``REQUEST_LIMITS`` is the one instance; README "Limits" lists them.

    Attributes:
        max_text_chars: longest text (or dialogue script) of one request, in characters (Python ``len``). 20,000
            is about 20 minutes of speech (a long chapter; longer works go line by line in a JSONL job); 1 MB of
            text once grew the server to 16.7 GB before any audio. The API's ``--max-input-chars`` may only lower it
            (OpenAI's own limit is 4,096, https://platform.openai.com/docs/api-reference/audio/createSpeech).
        max_pause_ms: longest pause one setting or ``[pause:...]`` marker asks for, in ms (10 s: far beyond any
            prosodic pause).
        max_silence_s: most silence all of a request's pauses add up to, in s.
        max_duration_s: longest target duration (``duration_s``, the sum of ``segment_durations_s``), in s.
        max_audio_s: most audio one request may generate, speech and pauses together, in s (``check_audio_s``: the
            engine stops a request past it; 2 hours, a 20,000-character text spoken slowly with every pause is
            under half of it, while a model that never stops at 16,384 steps per segment would make days).
        max_new_tokens: most decode steps a request may allow per segment (16,384: over 10 minutes of audio at the
            families' 7.5-25 frames per second, 3 minutes at Dia's 86).
        max_seed: largest seed (seeds are 0..max_seed; segment ``i`` uses ``seed + i``, which torch's generators
            take: ``torch.Generator.manual_seed`` accepts up to 2**64 - 1).
        max_json_depth: deepest nesting of objects and lists in one JSONL line.
        max_json_number_chars: longest number written in one JSONL line, in characters.
    """

    max_text_chars: int = 20_000
    max_pause_ms: int = 10_000
    max_silence_s: float = 3600.0
    max_duration_s: float = 3600.0
    max_audio_s: float = 7200.0
    max_new_tokens: int = 16_384
    max_seed: int = 2**32 - 1
    max_json_depth: int = 16
    max_json_number_chars: int = 64


#: The limits every door applies (``RequestLimits``).
REQUEST_LIMITS = RequestLimits()


@dataclass(frozen=True)
class ServerConfig:
    """The web server's HTTP API and access control (``python app.py``; ``tts_app.server``).

    Attributes:
        api_keys: keys the HTTP API accepts (``Authorization: Bearer KEY``); empty = the API is open (the server
            binds to the loopback address unless told otherwise). Hidden from ``repr``.
        ui_auth: (user, password) pairs for the web page (gradio's login form); empty = no login. Hidden from
            ``repr``.
        rate_limit_per_min: requests per minute one client (its API key, else its address) may make to the HTTP API,
            averaged (a token bucket refilled at this rate); 0 = no limit.
        rate_limit_burst: requests a client may make at once before the rate applies (the bucket's size), >= 1.
        max_queue_depth: the speech API answers 429 while the engine already holds this many unfinished requests
            (UI, jobs and API together), >= 1.
        max_input_chars: longest speech ``input`` in characters (longer gets 413), 1..``REQUEST_LIMITS.max_text_chars``
            (the limit of every door; this may only lower it for the API).
        max_voice_upload_bytes: largest reference audio ``POST /v1/audio/voices`` takes (larger gets 413), > 0.
        cors_origins: browser origins allowed to call the HTTP API from another site (CORS); empty = none (no CORS
            headers), ``("*",)`` = any.
        forwarded_allow_ips: addresses of reverse proxies whose ``X-Forwarded-For`` / ``X-Forwarded-Proto`` name the
            client (uvicorn's ``forwarded_allow_ips``; ``("*",)`` = any); empty = the headers are ignored and a
            client is the peer address (the rate limit cannot be dodged by sending them).
    """

    api_keys: tuple[str, ...] = field(default=(), repr=False)
    ui_auth: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    rate_limit_per_min: float = 120.0
    rate_limit_burst: int = 20
    max_queue_depth: int = 64
    max_input_chars: int = REQUEST_LIMITS.max_text_chars
    max_voice_upload_bytes: int = 50 * 1000**2
    cors_origins: tuple[str, ...] = ()
    forwarded_allow_ips: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check("api_keys", all(isinstance(k, str) and k.strip() == k and k for k in self.api_keys),
               "an API key must be a non-empty string without surrounding spaces")
        _check("ui_auth", all(len(pair) == 2 and pair[0] and pair[1] for pair in self.ui_auth),
               "each login must be a user name and a password, written user:password")
        _check("rate_limit_per_min", self.rate_limit_per_min >= 0,
               f"rate limit {self.rate_limit_per_min} requests per minute must be >= 0 (0 = no limit)")
        _check("rate_limit_burst", self.rate_limit_burst >= 1, f"rate limit burst {self.rate_limit_burst} must be >= 1")
        _check("max_queue_depth", self.max_queue_depth >= 1, f"max queue depth {self.max_queue_depth} must be >= 1")
        _check("max_input_chars", 1 <= self.max_input_chars <= REQUEST_LIMITS.max_text_chars,
               f"max input chars {self.max_input_chars} must be 1..{REQUEST_LIMITS.max_text_chars}")
        _check("max_voice_upload_bytes", self.max_voice_upload_bytes > 0,
               f"max voice upload {self.max_voice_upload_bytes} bytes must be positive")
