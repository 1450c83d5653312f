"""Whole-request audio effects after the segments are joined: tempo change (speed factor or target duration) and
loudness normalisation. Arrays in, arrays out (float32 mono ``(num_samples,)``); no file I/O.

- Tempo: FFmpeg's ``atempo`` filter through PyAV (a WSOLA time-scale modification: the speech gets faster or slower
  while its pitch stays; https://ffmpeg.org/ffmpeg-filters.html#atempo). One ``atempo`` accepts 0.5-100; our range
  is ``MIN_SPEED``-``MAX_SPEED`` (beyond 2x either way speech stops sounding natural, which is why most TTS tools
  cap there). A target duration is met exactly: after the stretch the audio is padded with silence or cut by the
  few milliseconds WSOLA's frame grid leaves (measured: ~5 ms on 5 s).
- Loudness: ITU-R BS.1770-4 integrated loudness (K-weighting, 400 ms blocks, absolute -70 LUFS and relative -10 LU
  gates) measured with pyloudnorm; one gain brings the request to the target, and FFmpeg's look-ahead limiter
  (``alimiter``) keeps the peaks under ``peak_ceiling_dbfs`` when that gain would push them past it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tts_app.config import MAX_LOUDNESS_LUFS, MAX_SPEED, MIN_LOUDNESS_LUFS, MIN_SPEED
from tts_app.errors import ConfigError, InputError
from tts_app.frontend.messages import Notice, register

#: pyloudnorm's (BS.1770) gating block is 400 ms: shorter audio has no integrated loudness.
MIN_LOUDNESS_AUDIO_S = 0.4

# The refusals of this module in English and Chinese (``tts_app.frontend.messages``): a request's target duration
# is only checked once its speech exists, so these reach the user after generation and must read in their language.
EFFECTS_EN: dict[str, str] = {
    "tempo_speed_range": "{what} {speed} is outside {low}-{high} (x the model's own pace); beyond that speech stops "
                         "sounding natural",
    "tempo_both": "give either a speed factor or a target duration, not both",
    "tempo_no_audio": "there is no audio to fit into the target duration",
    "tempo_duration_range": "the speech is {before_s:.2f} s; fitting it into {duration_s:.2f} s needs speed "
                            "{factor:.2f}, outside {low}-{high}: give a target between {shortest_s:.2f} s and "
                            "{longest_s:.2f} s, or change the text",
    "loudness_target_range": "loudness target {target} LUFS is outside {low}..{high}",
    "tempo_line": "line {line} ({text!r}): {problem}",
}
EFFECTS_ZH: dict[str, str] = {
    "tempo_speed_range": "{what} {speed} 超出 {low}-{high}（相对模型原速的倍数）；超出后语音不再自然",
    "tempo_both": "速度倍数和目标时长只能给一个",
    "tempo_no_audio": "没有可放进目标时长的音频",
    "tempo_duration_range": "语音长 {before_s:.2f} 秒；要放进 {duration_s:.2f} 秒需要速度 {factor:.2f}，超出 "
                            "{low}-{high}：请给出 {shortest_s:.2f} 秒到 {longest_s:.2f} 秒之间的目标时长，或修改文本",
    "loudness_target_range": "响度目标 {target} LUFS 超出 {low}..{high}",
    "tempo_line": "第 {line} 行（{text!r}）：{problem}",
}
register(__name__, EFFECTS_EN, EFFECTS_ZH)


def check_speed(speed: float, what: str = "speed") -> float:
    """``speed`` if it lies in [MIN_SPEED, MAX_SPEED].

    Raises:
        InputError: outside the range (the message gives it).
    """
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise ConfigError(what, Notice("tempo_speed_range", what=what, speed=speed, low=MIN_SPEED, high=MAX_SPEED))
    return float(speed)


def time_stretch(audio: np.ndarray, sampling_rate: int, speed: float) -> np.ndarray:
    """``audio`` played ``speed`` times as fast, pitch kept (FFmpeg ``atempo``, WSOLA).

    Args:
        audio: float32 ``(num_samples,)``.
        sampling_rate: Hz.
        speed: > 1 faster (shorter), < 1 slower; in [MIN_SPEED, MAX_SPEED].

    Returns:
        float32 ``(about num_samples / speed,)``.

    Raises:
        InputError: ``speed`` outside the range.
    """
    import av
    import av.filter

    speed = check_speed(speed)
    audio = np.ascontiguousarray(np.asarray(audio, dtype=np.float32).reshape(-1))
    if audio.size == 0 or speed == 1.0:
        return audio.copy()
    graph = av.filter.Graph()
    source = graph.add_abuffer(format="flt", sample_rate=int(sampling_rate), layout="mono")
    tempo = graph.add("atempo", f"{speed:.6f}")
    sink = graph.add("abuffersink")
    source.link_to(tempo)
    tempo.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(audio[None, :], format="flt", layout="mono")
    frame.sample_rate = int(sampling_rate)
    frame.pts = 0
    graph.push(frame)
    graph.push(None)  # end of stream: atempo flushes what it holds
    parts = []
    while True:
        try:
            out = graph.pull()
        except (av.error.EOFError, av.error.BlockingIOError):
            break
        parts.append(out.to_ndarray().reshape(-1))
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, dtype=np.float32)


def fit_length(audio: np.ndarray, num_samples: int) -> np.ndarray:
    """``audio`` cut or padded with silence at the end to exactly ``num_samples``."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if audio.size >= num_samples:
        return audio[:num_samples].copy()
    return np.concatenate([audio, np.zeros(num_samples - audio.size, dtype=np.float32)])


@dataclass(frozen=True)
class TempoResult:
    """What ``apply_tempo`` did. ``speed``: the factor applied (1.0 = none); ``source``: "speed" (asked for),
    "duration_s" (computed from the target) or "none"; ``duration_before_s`` / ``duration_after_s``."""

    audio: np.ndarray
    speed: float
    source: str
    duration_before_s: float
    duration_after_s: float


def apply_tempo(audio: np.ndarray, sampling_rate: int, *, speed: float | None = None,
                duration_s: float | None = None) -> TempoResult:
    """Speed factor or target duration (not both) applied to a whole request's audio.

    Args:
        audio: float32 ``(num_samples,)``.
        sampling_rate: Hz.
        speed: tempo factor in [MIN_SPEED, MAX_SPEED], or None.
        duration_s: target length in seconds (> 0), or None; the factor it needs must lie in the speed range.

    Raises:
        ConfigError: (an ``InputError``; ``field`` "duration_s" or "speed") both given, a factor outside the range
            (the message, a ``Notice``, says which duration would fit), or no audio to fit.
    """
    before_s = audio.size / float(sampling_rate)
    if speed is not None and duration_s is not None:
        raise ConfigError("duration_s", Notice("tempo_both"))
    if duration_s is not None:
        if before_s <= 0:
            raise ConfigError("duration_s", Notice("tempo_no_audio"))
        factor = before_s / float(duration_s)
        if not MIN_SPEED <= factor <= MAX_SPEED:
            raise ConfigError("duration_s", Notice(
                "tempo_duration_range", before_s=before_s, duration_s=float(duration_s), factor=factor, low=MIN_SPEED,
                high=MAX_SPEED, shortest_s=before_s / MAX_SPEED, longest_s=before_s / MIN_SPEED))
        target = int(round(float(duration_s) * sampling_rate))
        stretched = fit_length(time_stretch(audio, sampling_rate, factor), target)
        return TempoResult(stretched, factor, "duration_s", before_s, target / float(sampling_rate))
    if speed is None or speed == 1.0:
        return TempoResult(np.asarray(audio, dtype=np.float32), 1.0, "none", before_s, before_s)
    # WSOLA leaves the length a few ms off n / speed (its frame grid); pad or cut to it exactly
    stretched = fit_length(time_stretch(audio, sampling_rate, speed), int(round(audio.size / float(speed))))
    return TempoResult(stretched, float(speed), "speed", before_s, stretched.size / float(sampling_rate))


def integrated_loudness(audio: np.ndarray, sampling_rate: int) -> float:
    """BS.1770-4 integrated loudness in LUFS (pyloudnorm); ``-inf`` for silence.

    Raises:
        InputError: shorter than ``MIN_LOUDNESS_AUDIO_S`` (no gating block fits).
    """
    import pyloudnorm

    audio = np.asarray(audio, dtype=np.float64).reshape(-1)
    if audio.size < MIN_LOUDNESS_AUDIO_S * sampling_rate:
        raise InputError(f"the audio is {audio.size / sampling_rate:.2f} s; loudness needs at least "
                         f"{MIN_LOUDNESS_AUDIO_S} s")
    return float(pyloudnorm.Meter(int(sampling_rate)).integrated_loudness(audio))


@dataclass(frozen=True)
class LoudnessResult:
    """What ``normalize_loudness`` did: levels in LUFS (None when unmeasurable), ``gain_db`` applied, warnings."""

    audio: np.ndarray
    target_lufs: float
    measured_lufs: float | None
    output_lufs: float | None
    gain_db: float
    warnings: tuple[str, ...] = ()


def _run_filter(audio: np.ndarray, sampling_rate: int, name: str, args: str) -> np.ndarray:
    """One FFmpeg audio filter over a mono float32 waveform (PyAV filter graph), flushed to the end."""
    import av
    import av.filter

    graph = av.filter.Graph()
    source = graph.add_abuffer(format="flt", sample_rate=int(sampling_rate), layout="mono")
    node = graph.add(name, args)
    sink = graph.add("abuffersink")
    source.link_to(node)
    node.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(audio[None, :], dtype=np.float32), format="flt",
                                       layout="mono")
    frame.sample_rate, frame.pts = int(sampling_rate), 0
    graph.push(frame)
    graph.push(None)
    parts = []
    while True:
        try:
            parts.append(graph.pull().to_ndarray().reshape(-1))
        except (av.error.EOFError, av.error.BlockingIOError):
            break
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, dtype=np.float32)


#: The limiter's ceiling sits this far below ``peak_ceiling_dbfs``: FFmpeg's alimiter overshoots by a fraction of
#: a dB on fast transients (measured: peaks at -1.0 dBFS with a -1.5 dBFS limit on the test speech).
LIMITER_MARGIN_DB = 0.5
#: alimiter attack / release in ms (its defaults, 5 / 50 ms, suit speech).
LIMITER_ATTACK_MS, LIMITER_RELEASE_MS = 5.0, 50.0


def normalize_loudness(audio: np.ndarray, sampling_rate: int, target_lufs: float, *,
                       peak_ceiling_dbfs: float = -1.0) -> LoudnessResult:
    """Bring ``audio`` to ``target_lufs`` (BS.1770 integrated loudness, pyloudnorm): one gain, then, only when that
    gain pushes peaks past ``peak_ceiling_dbfs``, FFmpeg's look-ahead limiter (``alimiter``, latency compensated,
    its auto-level off) and a second measurement and gain so the limited audio still meets the target.

    Args:
        audio: float32 ``(num_samples,)``.
        sampling_rate: Hz.
        target_lufs: in [MIN_LOUDNESS_LUFS, MAX_LOUDNESS_LUFS] (e.g. -23 EBU R128 broadcast, -16 podcasts).
        peak_ceiling_dbfs: sample peak not exceeded after normalisation, in dBFS.

    Returns:
        ``LoudnessResult``; too short or silent audio is returned unchanged with a warning.

    Raises:
        InputError: target outside the range.
    """
    if not (math.isfinite(target_lufs) and MIN_LOUDNESS_LUFS <= target_lufs <= MAX_LOUDNESS_LUFS):
        raise ConfigError("loudness_lufs", Notice("loudness_target_range", target=target_lufs, low=MIN_LOUDNESS_LUFS,
                                                  high=MAX_LOUDNESS_LUFS))
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    try:
        measured = integrated_loudness(audio, sampling_rate)
    except InputError as exc:
        return LoudnessResult(audio, target_lufs, None, None, 0.0, (f"loudness not normalised: {exc}",))
    if not math.isfinite(measured):
        return LoudnessResult(audio, target_lufs, None, None, 0.0, ("loudness not normalised: the audio is silent",))
    gain_db = target_lufs - measured
    out = (audio * (10 ** (gain_db / 20))).astype(np.float32)
    ceiling = 10 ** (peak_ceiling_dbfs / 20)
    if out.size and float(np.max(np.abs(out))) > ceiling:
        limit = 10 ** ((peak_ceiling_dbfs - LIMITER_MARGIN_DB) / 20)
        out = _run_filter(out, sampling_rate, "alimiter",
                          f"limit={limit:.6f}:attack={LIMITER_ATTACK_MS}:release={LIMITER_RELEASE_MS}:level=0:latency=1")
        out = fit_length(out, audio.size)
        # the limiter lowered the loudness a little: one more gain, as far as the ceiling allows
        again = integrated_loudness(out, sampling_rate)
        peak = float(np.max(np.abs(out)))
        extra_db = min(target_lufs - again, 20 * math.log10(ceiling / peak)) if peak > 0 else 0.0
        out = (out * (10 ** (extra_db / 20))).astype(np.float32)
    output = integrated_loudness(out, sampling_rate)
    warnings: tuple[str, ...] = ()
    if abs(output - target_lufs) > 0.5:
        warnings = (f"loudness {output:.1f} LUFS instead of {target_lufs:.1f}: more would push the peaks past "
                    f"{peak_ceiling_dbfs:.1f} dBFS",)
    return LoudnessResult(out, target_lufs, measured, output, 20 * math.log10(
        max(float(np.max(np.abs(out))), 1e-12) / max(float(np.max(np.abs(audio))), 1e-12)), warnings)


@dataclass(frozen=True)
class RequestEffects:
    """A request's audio after ``apply_request_effects``.

    Attributes:
        audio: float32 ``(num_samples,)``.
        spans: per segment (start_s, end_s) in ``audio`` (scaled by the tempo factor).
        applied: what was done, for the sidecar: ``speed`` (factor applied, 1.0 = none), ``speed_source``
            ("speed", "duration_s" or "none"), ``method`` of the tempo change, ``duration_before_s``,
            ``duration_s``; ``loudness`` block (target, measured, output LUFS, gain dB) or None.
        warnings: notices for the user.
    """

    audio: np.ndarray
    spans: list[tuple[float, float]]
    applied: dict
    warnings: tuple[str, ...] = ()


#: ``RequestEffects.applied["method"]`` of a tempo change
TEMPO_METHOD = "time stretch, pitch kept (FFmpeg atempo, WSOLA, via PyAV)"


def apply_request_effects(audio: np.ndarray, spans: list[tuple[float, float]], sampling_rate: int, *,
                          speed: float | None = None, duration_s: float | None = None,
                          loudness_lufs: float | None = None) -> RequestEffects:
    """Tempo (``apply_tempo``) then loudness (``normalize_loudness``) on a request's joined audio.

    Raises:
        InputError: see ``apply_tempo`` (a target duration that needs a factor outside the speed range).
    """
    tempo = apply_tempo(audio, sampling_rate, speed=speed, duration_s=duration_s)
    out = tempo.audio
    if tempo.speed != 1.0:
        spans = [(a / tempo.speed, min(b / tempo.speed, tempo.duration_after_s)) for a, b in spans]
    applied: dict = {"speed": round(tempo.speed, 6), "speed_source": tempo.source,
                     "method": TEMPO_METHOD if tempo.speed != 1.0 else None,
                     "duration_before_s": round(tempo.duration_before_s, 4),
                     "duration_s": round(out.size / float(sampling_rate), 4), "loudness": None}
    warnings: tuple[str, ...] = ()
    if loudness_lufs is not None:
        loud = normalize_loudness(out, sampling_rate, loudness_lufs)
        out, warnings = loud.audio, loud.warnings
        applied["loudness"] = {"standard": "ITU-R BS.1770-4 integrated (pyloudnorm)", "target_lufs": loud.target_lufs,
                               "measured_lufs": None if loud.measured_lufs is None else round(loud.measured_lufs, 2),
                               "output_lufs": None if loud.output_lufs is None else round(loud.output_lufs, 2),
                               "gain_db": round(loud.gain_db, 2)}
    return RequestEffects(out, list(spans), applied, warnings)
