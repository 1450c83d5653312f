"""Frozen configuration dataclasses, one per subsystem. Defaults live here, once.

CLI overrides use ``None`` for "not given" (never ``x or default``, which eats a legitimate 0 or False).
Per-call knobs live in ``tts_app.request.SynthesisParams``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL_ID = "vibevoice/VibeVoice-1.5B-hf"


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


@dataclass(frozen=True)
class ReferenceConfig:
    """Reference-audio cleanup settings.

    Attributes:
        max_decode_s: longest audio decoded from a file; longer files are read only up to this point (with a warning).
        max_speech_s: crop the cleaned reference to at most this much speech, at a VAD boundary.
        min_speech_s: less speech than this is an error.
        vad_threshold: Silero VAD speech probability threshold.
        vad_pad_ms: padding kept around detected speech so no phoneme is cut, in ms.
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
    """

    max_decode_s: float = 300.0
    max_speech_s: float = 15.0
    min_speech_s: float = 1.0
    vad_threshold: float = 0.5
    vad_pad_ms: int = 100
    max_internal_pause_ms: int = 600
    highpass_cutoff_hz: float = 50.0
    target_loudness_dbfs: float = -20.0
    peak_ceiling_dbfs: float = -1.0
    cache_entries: int = 64
    max_nonfinite_share: float = 0.01
    max_clipping_share: float = 0.001
    min_snr_db: float = 25.0
    min_speech_level_dbfs: float = -40.0


@dataclass(frozen=True)
class FrontendConfig:
    """Text front-end settings.

    Attributes:
        default_pause_ms: silence between segments when the text gives none, in ms.
        min_segment_chars: segments shorter than this are merged into a neighbour.
    """

    default_pause_ms: int = 200
    min_segment_chars: int = 4
