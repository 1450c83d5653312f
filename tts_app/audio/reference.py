"""Reference-audio cleanup: decode -> clean -> mono -> high-pass -> VAD trim -> pause shortening -> crop ->
loudness normalisation -> resample, plus a quality report and an LRU cache keyed by content hash.

Arrays in, arrays out; the only file I/O is ``tts_app.audio.decode.load_audio`` (and hashing a file's bytes).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

import numpy as np

from tts_app.audio.decode import DecodeInfo, load_audio
from tts_app.audio.vad import VAD_SAMPLING_RATE, SpeechSegment, speech_probabilities, speech_segments
from tts_app.config import ReferenceConfig
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.request import ReferenceAudio

ReferenceSource = Union[str, Path, bytes, "tuple[np.ndarray, int]"]

# A sample at or above this magnitude counts as clipped (full scale of 16-bit PCM is 32767/32768 = 0.99997).
CLIP_LEVEL = 0.999
# ... and so does a sample within 0.1% of the clip's own peak: audio clipped and then turned down has flat tops below
# full scale. Unclipped speech has ~0.001-0.01% of its samples that close to its peak (measured on tests/data).
CLIP_RELATIVE_LEVEL = 0.999
# Stereo downmix: if the average of the channels keeps less than this share of the channels' mean energy, the
# channels cancel (polarity-inverted or badly out of phase) and one channel is used instead. Uncorrelated channels
# of equal power keep 0.5, so 0.25 (-6 dB) only fires when the mix destroys most of the signal.
MIN_DOWNMIX_ENERGY_RATIO = 0.25
# Frame length for level / SNR measurements (20 ms at 16 kHz), a common short-time analysis frame.
LEVEL_FRAME_SAMPLES = 320
# Power floor for the noise estimate (-100 dBFS, below 16- and 24-bit quantisation noise of real recordings), so a
# digitally silent background gives a large finite SNR instead of infinity.
NOISE_POWER_FLOOR = 1e-10
# Below this background level (dBFS) the background is reported as "silent" and not classified.
SILENT_BACKGROUND_DBFS = -70.0
# Background classified "music-like" (tonal: music, hum harmonics) when the spectral flatness of its averaged
# 100-5000 Hz spectrum, after removing the spectral tilt, is below this. Measured on this project's test clips and
# synthetic signals: white/pink/brown noise 0.91, a chord bed 0.006, 100+150 Hz hum over noise 0.17.
MUSIC_MAX_FLATNESS = 0.3
# Frames for the background spectrum: 64 ms at 16 kHz (15.6 Hz bins, fine enough to resolve notes), 50% hop.
SPECTRUM_FRAME_SAMPLES = 1024
# A crop keeps at least this share of the speech the longest possible crop keeps, so preferring a long pause
# (sentence end) over a short one (between words) never throws away most of the clip.
CROP_MIN_KEEP_SHARE = 2.0 / 3.0
# Mains hum: a spectral line at 50 or 60 Hz (or a harmonic up to MAX_HUM_HARMONIC) standing this many dB above the
# spectrum 12-30 Hz either side is notched out (torchaudio.functional.bandreject_biquad, bandwidth HUM_NOTCH_HZ).
# The 50 Hz high-pass alone takes only 3 dB off 50 Hz hum. Measured: the pink-noise+hum test clip 28 dB, clean
# speech clips and the music bed < 2 dB.
HUM_PROMINENCE_DB = 12.0
MAX_HUM_HARMONIC = 4
HUM_NOTCH_HZ = 5.0
# Samples below this magnitude (-240 dBFS) are set to exactly zero after filtering (avoids subnormal floats).
TINY_SAMPLE = 1e-12
# Cross-fade at each splice (removed pause) and fade at both ends, in ms: avoids clicks in a noisy background.
SPLICE_FADE_MS = 10.0


@dataclass
class ReferenceReport:
    """Quality report of one reference clip. All times in seconds; levels in dBFS (RMS re full scale).

    Attributes:
        name: file name or label.
        format, subtype: container and encoding found by the decoder (e.g. "MP3", "MPEG_LAYER_III"); "array" for
            in-memory input.
        sampling_rate: Hz of the input.
        channels: channels of the input.
        duration_s: seconds of input decoded; file_duration_s: what the file's header claims (None if unknown).
        speech_start_s, speech_end_s: first and last detected speech in the ORIGINAL timeline (None when none).
        speech_s: total detected speech in the decoded input (unpadded VAD segments).
        speech_kept_s: speech in the output (after cropping).
        output_duration_s, output_sampling_rate: the cleaned clip.
        cropped: speech was removed to fit ``max_speech_s``; crop_at_s: where (original timeline), else None.
        pauses_shortened: internal pauses longer than ``max_internal_pause_ms`` that were shortened.
        channel_used: None when channels were averaged, else the 0-based channel used alone.
        clipping_share: share of input samples at full scale (|x| >= 0.999) or flat-topped at the input's own peak
            (within 0.1% of it: clipped, then turned down), in [0, 1].
        nonfinite_samples: NaN/Inf samples that were zeroed.
        speech_level_dbfs: RMS of the input speech frames; background_level_dbfs: RMS of the non-speech frames
            (or the minimum-statistics estimate, see ``estimate_snr``).
        snr_db: estimated SNR, see ``estimate_snr``; background: "silent", "noise" or "music-like".
        hum_hz: mains hum frequencies (fundamental and harmonics, Hz) that were notched out; empty when none.
        gain_db: gain applied by loudness normalisation; output_peak_dbfs: peak of the output.
        truncated, head_only: see ``DecodeInfo``.
        key: cache key (content hash + settings + target rate).
        warnings: notices (clipped, noisy or music-like background, low level, cropped, truncated, NaN, ...).
        errors: why the clip was refused (filled on the report attached to a raised ``ReferenceAudioError``).
    """

    name: str
    format: str
    subtype: str | None
    sampling_rate: int
    channels: int
    duration_s: float
    file_duration_s: float | None = None
    speech_start_s: float | None = None
    speech_end_s: float | None = None
    speech_s: float = 0.0
    speech_kept_s: float = 0.0
    output_duration_s: float = 0.0
    output_sampling_rate: int = 0
    cropped: bool = False
    crop_at_s: float | None = None
    pauses_shortened: int = 0
    channel_used: int | None = None
    clipping_share: float = 0.0
    nonfinite_samples: int = 0
    speech_level_dbfs: float | None = None
    background_level_dbfs: float | None = None
    snr_db: float | None = None
    background: str | None = None
    hum_hz: list[float] = field(default_factory=list)
    gain_db: float = 0.0
    output_peak_dbfs: float | None = None
    truncated: bool = False
    head_only: bool = False
    key: str = ""
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (floats rounded to 4 decimals)."""
        out: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if isinstance(value, float):
                value = round(value, 4)
            elif isinstance(value, list):
                value = list(value)
            out[item.name] = value
        return out


class ReferenceCache:
    """Bounded, thread-safe LRU of processed references, keyed by content hash + settings + target rate.

    A voice reused by many requests (e.g. 500 lines of a JSONL job) is decoded and cleaned once. Concurrent
    requests for the same key wait for the first one instead of all computing it. Refusals
    (``ReferenceAudioError``) are cached too, so a bad file is not re-analysed for every line. Hits return the
    same ``ReferenceAudio`` object: treat its samples as read-only. ``hits`` / ``misses`` count lookups.

    Args:
        max_entries: most entries kept (``ReferenceConfig.cache_entries``); >= 1.

    Raises:
        InputError: ``max_entries`` < 1.
    """

    def __init__(self, max_entries: int = ReferenceConfig().cache_entries):
        if max_entries < 1:
            raise InputError(f"cache max_entries={max_entries} must be >= 1")
        self.max_entries = int(max_entries)
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        """The cached value for ``key``, or ``compute()`` stored under it (evicting the least recently used).
        A ``ReferenceAudioError`` raised by ``compute`` is cached and re-raised on later calls."""
        found, value = self._lookup(key)
        if not found:
            with self._lock:
                key_lock = self._key_locks.setdefault(key, threading.Lock())
            with key_lock:
                found, value = self._lookup(key, count=False)
                if not found:
                    try:
                        value = compute()
                    except ReferenceAudioError as error:
                        value = error
                    self._store(key, value)
            with self._lock:
                self._key_locks.pop(key, None)
        if isinstance(value, ReferenceAudioError):
            raise copy.copy(value)
        return value

    def _lookup(self, key: str, count: bool = True) -> tuple[bool, Any]:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return True, self._entries[key]
            self.misses += count
            return False, None

    def _store(self, key: str, value: Any) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


def prepare_reference(source: ReferenceSource, *, target_sampling_rate: int,
                      config: ReferenceConfig = ReferenceConfig(), reference_text: str | None = None,
                      cache: ReferenceCache | None = None, name: str | None = None
                      ) -> tuple[ReferenceAudio, ReferenceReport]:
    """Decode and clean a reference clip for voice cloning, and report its quality.

    Steps: decode (head only past ``config.max_decode_s``); zero NaN/Inf; mono (average, or one channel when the
    channels cancel); 50 Hz high-pass (``torchaudio.functional.highpass_biquad``); Silero VAD at 16 kHz; trim
    leading/trailing non-speech keeping ``vad_pad_ms``; shorten internal pauses to ``max_internal_pause_ms``; crop
    to ``max_speech_s`` of speech at a VAD boundary; resample (``torchaudio.functional.resample``); normalise the
    speech RMS to ``target_loudness_dbfs`` without exceeding ``peak_ceiling_dbfs``.

    Args:
        source: file path, file content (bytes), or ``(samples, sampling_rate)`` with float samples ``(n,)`` or
            ``(n, channels)`` (int16/int32 arrays are scaled from full scale).
        target_sampling_rate: Hz of the returned clip (the model's rate).
        config: cleanup settings.
        reference_text: transcript of the clip, if known; only used to warn when cropping removed speech.
        cache: optional ``ReferenceCache``; a hit skips all processing.
        name: label for messages (default: the file name, "<uploaded bytes>" or "<array>").

    Returns:
        (ref, report): ``ReferenceAudio`` (float32 ``(num_samples,)`` at ``target_sampling_rate``, ``key`` = cache
        key) and a ``ReferenceReport``.

    Raises:
        ReferenceAudioError: empty/corrupt/undecodable input, too many NaN/Inf samples, no speech, or less than
            ``config.min_speech_s`` of speech. The message names the file and the problem; ``error.report`` holds
            the partial report when one was made.
        InputError: ``target_sampling_rate`` is not a positive integer.
    """
    if not isinstance(target_sampling_rate, (int, np.integer)) or target_sampling_rate <= 0:
        raise InputError(f"target_sampling_rate={target_sampling_rate!r} must be a positive integer (Hz)")
    target_sampling_rate = int(target_sampling_rate)
    label, content_hash = _label_and_hash(source, name)
    settings = repr(dataclasses.astuple(config))
    key = hashlib.sha256(f"{content_hash}|{settings}|{target_sampling_rate}".encode()).hexdigest()[:32]

    def compute() -> tuple[ReferenceAudio, ReferenceReport]:
        try:
            return _prepare_uncached(source, label, key, target_sampling_rate, config)
        except ReferenceAudioError as error:
            error.reference_name = label  # type: ignore[attr-defined]  # lets a cache hit rename it
            raise

    if cache is None:
        ref, report = compute()
    else:
        try:
            ref, report = cache.get_or_compute(key, compute)
        except ReferenceAudioError as error:
            raise _relabel_error(error, label) from None
        # Cached reports are shared; each caller gets its own copy, named after its own file (the same content may
        # arrive under another name, e.g. a re-upload).
        old = repr(report.name)
        report = dataclasses.replace(report, name=label,
                                     warnings=[w.replace(old, repr(label)) for w in report.warnings],
                                     errors=[e.replace(old, repr(label)) for e in report.errors])
    if reference_text is not None and reference_text.strip() and report.cropped:
        report.warnings.append(
            f"reference audio {label!r} was cropped to {report.speech_kept_s:.1f} s of speech, so the reference "
            "text no longer matches the audio; shorten the text to the kept part or give a shorter clip")
    return ref, report


def _relabel_error(error: ReferenceAudioError, label: str) -> ReferenceAudioError:
    """A cached refusal, re-worded for a caller who named the same content ``label``."""
    old = getattr(error, "reference_name", None)
    if old is None or old == label:
        return error
    renamed = ReferenceAudioError(str(error).replace(repr(old), repr(label)))
    renamed.reference_name = label  # type: ignore[attr-defined]
    report = getattr(error, "report", None)
    if report is not None:
        renamed.report = dataclasses.replace(  # type: ignore[attr-defined]
            report, name=label, warnings=[w.replace(repr(old), repr(label)) for w in report.warnings],
            errors=[e.replace(repr(old), repr(label)) for e in report.errors])
    return renamed


def _label_and_hash(source: ReferenceSource, name: str | None) -> tuple[str, str]:
    digest = hashlib.sha256()
    if isinstance(source, tuple):
        if len(source) != 2:
            raise ReferenceAudioError("reference audio array must be given as (samples, sampling_rate)")
        samples, sampling_rate = source
        array = np.ascontiguousarray(np.asarray(samples))
        digest.update(f"array|{array.dtype.str}|{array.shape}|{sampling_rate}|".encode())
        digest.update(array.tobytes())
        return (name or "<array>"), digest.hexdigest()
    if isinstance(source, (bytes, bytearray, memoryview)):
        digest.update(bytes(source))
        return (name or "<uploaded bytes>"), digest.hexdigest()
    if isinstance(source, (str, Path)):
        path = Path(source)
        label = name or path.name
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError as error:
            raise ReferenceAudioError(f"reference audio {str(path)!r} cannot be read: {error.strerror or error}"
                                      ) from None
        return label, digest.hexdigest()
    raise ReferenceAudioError(f"reference audio of type {type(source).__name__} is not supported; pass a path, "
                              "bytes or (samples, sampling_rate)")


def _array_input(source: tuple, label: str, max_decode_s: float) -> tuple[np.ndarray, int, DecodeInfo]:
    samples, sampling_rate = source
    if not isinstance(sampling_rate, (int, np.integer)) or sampling_rate <= 0:
        raise ReferenceAudioError(f"reference audio {label!r}: sampling_rate={sampling_rate!r} must be a positive "
                                  "integer (Hz)")
    array = np.asarray(samples)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] < 1:
        raise ReferenceAudioError(f"reference audio {label!r}: samples of shape {array.shape} must be (n,) or "
                                  "(n, channels)")
    if array.dtype.kind in "iu":
        info_ = np.iinfo(array.dtype)
        array = (array.astype(np.float32) - (info_.min + info_.max + 1) / 2.0) / ((info_.max - info_.min + 1) / 2.0)
    elif array.dtype.kind != "f":
        raise ReferenceAudioError(f"reference audio {label!r}: samples of dtype {array.dtype} are not audio; pass "
                                  "float or integer PCM samples")
    sampling_rate = int(sampling_rate)
    info = DecodeInfo(name=label, format="array", subtype=str(np.asarray(samples).dtype), sampling_rate=sampling_rate,
                      channels=int(array.shape[1]), duration_s=array.shape[0] / sampling_rate,
                      file_duration_s=array.shape[0] / sampling_rate, decoder="array")
    max_frames = int(max_decode_s * sampling_rate)
    if array.shape[0] > max_frames:
        array = array[:max_frames]
        info.head_only = True
        info.duration_s = max_frames / sampling_rate
        info.warnings.append(f"reference audio {label!r} is long; only its first {max_decode_s:g} s are used")
    if array.shape[0] == 0:
        raise ReferenceAudioError(f"reference audio {label!r} has no samples")
    return np.ascontiguousarray(array, dtype=np.float32), sampling_rate, info


def _refuse(report: ReferenceReport, message: str) -> ReferenceAudioError:
    report.errors.append(message)
    error = ReferenceAudioError(message)
    error.report = report  # type: ignore[attr-defined]
    return error


def _db(power: float) -> float:
    return 10.0 * math.log10(max(power, 1e-20))


def _prepare_uncached(source: ReferenceSource, label: str, key: str, target_sampling_rate: int,
                      config: ReferenceConfig) -> tuple[ReferenceAudio, ReferenceReport]:
    import torch
    import torchaudio.functional as AF

    if isinstance(source, tuple):
        samples, sampling_rate, info = _array_input(source, label, config.max_decode_s)
    else:
        samples, sampling_rate, info = load_audio(source, max_decode_s=config.max_decode_s, name=label)
    report = ReferenceReport(
        name=label, format=info.format, subtype=info.subtype, sampling_rate=sampling_rate, channels=info.channels,
        duration_s=samples.shape[0] / sampling_rate, file_duration_s=info.file_duration_s,
        truncated=info.truncated, head_only=info.head_only, key=key, warnings=list(info.warnings),
        output_sampling_rate=target_sampling_rate)

    # 1. NaN / Inf: a few dented samples are zeroed; a large share means the data is garbage.
    finite = np.isfinite(samples)
    num_nonfinite = int(samples.size - np.count_nonzero(finite))
    if num_nonfinite:
        share = num_nonfinite / samples.size
        if share > config.max_nonfinite_share:
            raise _refuse(report, f"reference audio {label!r} is corrupt: {share:.1%} of its samples are NaN or "
                                  f"infinite (at most {config.max_nonfinite_share:.1%} can be repaired)")
        samples = np.where(finite, samples, np.float32(0.0))
        report.nonfinite_samples = num_nonfinite
        report.warnings.append(f"reference audio {label!r} had {num_nonfinite} NaN/infinite samples; they were "
                               "set to silence")

    # 2. Clipping share of the input, over all channels.
    magnitude = np.abs(samples)
    clip_level = min(CLIP_LEVEL, CLIP_RELATIVE_LEVEL * float(magnitude.max()))
    report.clipping_share = float(np.count_nonzero(magnitude >= clip_level)) / samples.size if clip_level > 0 else 0.0
    if report.clipping_share > config.max_clipping_share:
        report.warnings.append(f"reference audio {label!r} is clipped ({report.clipping_share:.1%} of samples "
                               "flat-topped at the peak); the cloned voice may sound distorted, record at a lower "
                               "level")

    # 3. Mono.
    mono, report.channel_used = _to_mono(samples)
    if report.channel_used is not None:
        report.warnings.append(f"reference audio {label!r}: its channels cancel when mixed (polarity-inverted "
                               f"stereo); channel {report.channel_used} was used alone")

    # 4. High-pass. lfilter clamps its output to [-1, 1], so filter a copy scaled to peak 0.5 and scale back:
    # nothing is clipped here (the loudness step sets the final level).
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak == 0.0:
        raise _refuse(report, f"reference audio {label!r} is digital silence: no speech found; upload a clip with "
                              f"at least {config.min_speech_s:g} s of speech")
    wave = torch.from_numpy(mono)
    if 0.0 < config.highpass_cutoff_hz < sampling_rate / 2:
        scale = 0.5 / peak
        wave = AF.highpass_biquad(wave * scale, sampling_rate, config.highpass_cutoff_hz) / scale
        # The IIR tail decays through digital silence into subnormal floats, which make every later float op
        # (the VAD above all: 4x slower measured) crawl. Values below -240 dBFS are zero for any purpose.
        wave = wave.masked_fill(wave.abs() < TINY_SAMPLE, 0.0)

    # 5. VAD at 16 kHz (after notching out mains hum, which the high-pass barely touches).
    wave_16k = wave if sampling_rate == VAD_SAMPLING_RATE else AF.resample(wave, sampling_rate, VAD_SAMPLING_RATE)
    report.hum_hz = detect_hum(wave_16k.numpy(), VAD_SAMPLING_RATE)
    if report.hum_hz:
        wave = _notch(wave, sampling_rate, report.hum_hz)
        wave_16k = _notch(wave_16k, VAD_SAMPLING_RATE, report.hum_hz)
        report.warnings.append(f"reference audio {label!r} has {report.hum_hz[0]:g} Hz mains hum; it was filtered "
                               f"out (notches at {', '.join(f'{hz:g}' for hz in report.hum_hz)} Hz)")
    samples_16k = wave_16k.numpy()
    probs = speech_probabilities(samples_16k)
    segments = speech_segments(probs, len(samples_16k), threshold=config.vad_threshold)
    levels = estimate_snr(samples_16k, VAD_SAMPLING_RATE, segments, guard_s=config.vad_pad_ms / 1000.0)
    report.speech_level_dbfs, report.background_level_dbfs, report.snr_db, report.background = levels
    if not segments:
        raise _refuse(report, f"reference audio {label!r}: no speech found (silent, noise or music only, or a "
                              "corrupt file); upload a clip of one person speaking")
    report.speech_start_s = segments[0].start_s
    report.speech_end_s = segments[-1].end_s
    report.speech_s = float(sum(seg.duration_s for seg in segments))
    if report.speech_s < config.min_speech_s:
        raise _refuse(report, f"reference audio {label!r} is too short: {report.speech_s:.2f} s of speech; at "
                              f"least {config.min_speech_s:g} s is needed (5-15 s works best)")
    _level_warnings(report, config)

    # 6. Trim, shorten pauses, crop (in seconds of the original timeline), then splice at the target rate.
    forced_cut = segments[0].duration_s > config.max_speech_s
    if forced_cut:
        segments = _split_at_quietest(segments, samples_16k, config.max_speech_s)
        report.warnings.append(f"reference audio {label!r} has no pause in its first {config.max_speech_s:g} s "
                               "of speech; it was cut at the quietest point instead")
    kept, cropped = _crop(segments, config.max_speech_s, head_only=info.head_only,
                          duration_s=len(samples_16k) / VAD_SAMPLING_RATE)
    pieces, num_shortened = _pieces(kept, segments, config, duration_s=report.duration_s)
    report.pauses_shortened = num_shortened
    report.speech_kept_s = float(sum(seg.duration_s for seg in kept))
    if cropped:
        report.cropped = True
        report.crop_at_s = pieces[-1][1]
        where = "at its quietest point" if forced_cut else "at a pause"
        report.warnings.append(f"reference audio {label!r} has {report.speech_s:.1f} s of speech; it was cropped "
                               f"{where} to {report.speech_kept_s:.1f} s (max_speech_s={config.max_speech_s:g})")
    wave_out = wave if sampling_rate == target_sampling_rate else AF.resample(wave, sampling_rate,
                                                                             target_sampling_rate)
    out = _splice(wave_out.numpy(), target_sampling_rate, pieces)

    # 7. Loudness: speech RMS -> target, limited by the peak ceiling (gain only; nothing is clipped).
    speech_power = _speech_power(out, target_sampling_rate, kept, pieces)
    gain_db = config.target_loudness_dbfs - _db(speech_power)
    out_peak = float(np.max(np.abs(out)))
    if out_peak > 0:
        gain_db = min(gain_db, config.peak_ceiling_dbfs - 20.0 * math.log10(out_peak))
    out = (out * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)
    report.gain_db = float(gain_db)
    report.output_peak_dbfs = 20.0 * math.log10(max(float(np.max(np.abs(out))), 1e-10))
    report.output_duration_s = len(out) / target_sampling_rate
    return ReferenceAudio(samples=out, sampling_rate=target_sampling_rate, key=key), report


def detect_hum(samples: np.ndarray, sampling_rate: int) -> list[float]:
    """Mains hum lines in a mono clip.

    Method: Welch power spectrum (0.5 s Hann frames, 50% overlap: 2 Hz bins); for mains 50 and 60 Hz, the line at
    ``h * mains`` (h = 1..``MAX_HUM_HARMONIC``) counts when its peak (+/- 2 Hz) stands ``HUM_PROMINENCE_DB`` above
    the median 12-30 Hz either side. The mains frequency with the stronger fundamental wins.

    Args:
        samples: float32 ``(num_samples,)``; sampling_rate: Hz.

    Returns:
        Frequencies in Hz to notch (fundamental first); empty when there is no hum or the clip is under 1 s.
    """
    size = int(sampling_rate * 0.5)
    if len(samples) < 2 * size:
        return []
    starts = range(0, len(samples) - size + 1, size // 2)
    frames = np.stack([samples[i: i + size] for i in starts]).astype(np.float64) * np.hanning(size)
    power = np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)
    freqs = np.fft.rfftfreq(size, 1.0 / sampling_rate)

    def prominence_db(hz: float) -> float:
        peak = power[(freqs > hz - 2) & (freqs < hz + 2)]
        offset = np.abs(freqs - hz)
        around = power[(offset >= 12) & (offset <= 30)]
        if peak.size == 0 or around.size == 0:
            return 0.0
        return 10.0 * math.log10(max(float(peak.max()), 1e-30) / max(float(np.median(around)), 1e-30))

    best: list[float] = []
    best_fundamental = HUM_PROMINENCE_DB
    for mains in (50.0, 60.0):
        fundamental = prominence_db(mains)
        if fundamental >= best_fundamental:
            best_fundamental = fundamental
            best = [mains * h for h in range(1, MAX_HUM_HARMONIC + 1)
                    if h == 1 or prominence_db(mains * h) >= HUM_PROMINENCE_DB]
    return [hz for hz in best if hz < sampling_rate / 2]


def _notch(wave, sampling_rate: int, freqs_hz: list[float]):
    """Band-reject biquads (``torchaudio.functional.bandreject_biquad``, Q = f / ``HUM_NOTCH_HZ``), applied at a
    safe scale because lfilter clamps its output to [-1, 1]."""
    import torchaudio.functional as AF

    peak = float(wave.abs().max())
    if peak == 0.0:
        return wave
    scale = 0.5 / peak
    out = wave * scale
    for hz in freqs_hz:
        out = AF.bandreject_biquad(out, sampling_rate, hz, Q=hz / HUM_NOTCH_HZ)
    return out.masked_fill(out.abs() < TINY_SAMPLE * scale, 0.0) / scale


def _to_mono(samples: np.ndarray) -> tuple[np.ndarray, int | None]:
    """(n, channels) -> (n,): the channel average, or the strongest channel when averaging cancels most energy."""
    if samples.shape[1] == 1:
        return np.ascontiguousarray(samples[:, 0]), None
    mix = samples.mean(axis=1)
    channel_energy = np.mean(np.square(samples, dtype=np.float64), axis=0)
    if channel_energy.max() > 0 and np.mean(np.square(mix, dtype=np.float64)) < (
            MIN_DOWNMIX_ENERGY_RATIO * channel_energy.mean()):
        channel = int(np.argmax(channel_energy))
        return np.ascontiguousarray(samples[:, channel]), channel
    return mix.astype(np.float32), None


def estimate_snr(samples: np.ndarray, sampling_rate: int, segments: list[SpeechSegment], *, guard_s: float = 0.1
                 ) -> tuple[float | None, float | None, float | None, str | None]:
    """Speech level, background level, SNR and background kind of a mono clip.

    Method: power of 20 ms frames. Speech frames lie inside VAD segments; background frames lie more than
    ``guard_s`` outside every segment. With at least 5 background frames (100 ms), the background power is their
    mean; otherwise it is the 10th percentile of the speech frames' power (minimum statistics, after R. Martin,
    "Noise power spectral density estimation based on optimal smoothing and minimum statistics", IEEE TSAP 2001).
    SNR = 10 log10((P_speech - P_background) / P_background), P_background floored at -100 dBFS.
    The background is "silent" below -70 dBFS; "music-like" when its tilt-removed spectral flatness is below
    ``MUSIC_MAX_FLATNESS`` (peaky, tonal spectrum: music, hum harmonics); else "noise".

    Args:
        samples: float32 ``(num_samples,)``; sampling_rate: Hz; segments: VAD speech segments in seconds.

    Returns:
        (speech_level_dbfs, background_level_dbfs, snr_db, background); Nones where there is no speech.
    """
    frame = max(1, int(round(LEVEL_FRAME_SAMPLES * sampling_rate / VAD_SAMPLING_RATE)))
    num_frames = len(samples) // frame
    if num_frames == 0:
        return None, None, None, None
    frames = samples[: num_frames * frame].reshape(num_frames, frame).astype(np.float64)
    power = np.mean(frames * frames, axis=1)
    sample_times = np.arange(len(samples)) / sampling_rate
    in_speech_samples = np.zeros(len(samples), dtype=bool)
    near_speech_samples = np.zeros(len(samples), dtype=bool)
    for seg in segments:
        in_speech_samples |= (sample_times >= seg.start_s) & (sample_times < seg.end_s)
        near_speech_samples |= (sample_times >= seg.start_s - guard_s) & (sample_times < seg.end_s + guard_s)
    centres = (np.arange(num_frames) * frame + frame // 2)
    in_speech = in_speech_samples[centres]
    background = ~near_speech_samples[centres]
    if not in_speech.any():
        return None, _db(max(float(np.mean(power)), NOISE_POWER_FLOOR)), None, None
    speech_power = float(np.mean(power[in_speech]))
    if np.count_nonzero(background) >= 5:
        background_power = float(np.mean(power[background]))
    else:
        background_power = float(np.percentile(power[in_speech], 10))
    background_power = max(background_power, NOISE_POWER_FLOOR)
    snr_db = _db(max(speech_power - background_power, 1e-20) / background_power)
    background_dbfs = _db(background_power)
    if background_dbfs < SILENT_BACKGROUND_DBFS:
        kind = "silent"
    else:
        flatness = _background_flatness(samples, ~near_speech_samples, sampling_rate)
        kind = "music-like" if flatness is not None and flatness < MUSIC_MAX_FLATNESS else "noise"
    return _db(speech_power), background_dbfs, snr_db, kind


def _background_flatness(samples: np.ndarray, background: np.ndarray, sampling_rate: int) -> float | None:
    """Spectral flatness (geometric / arithmetic mean, as in librosa.feature.spectral_flatness) of the mean
    100-5000 Hz power spectrum of all-background frames, after dividing out a quadratic fit of log power over log
    frequency (so coloured noise counts as flat and only peaks count). None with fewer than 2 frames."""
    size = max(64, int(round(SPECTRUM_FRAME_SAMPLES * sampling_rate / VAD_SAMPLING_RATE)))
    hop = size // 2
    starts = [i for i in range(0, len(samples) - size + 1, hop) if background[i: i + size].all()]
    if len(starts) < 2:
        return None
    frames = np.stack([samples[i: i + size] for i in starts]).astype(np.float64) * np.hanning(size)
    spectrum = np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)
    freqs = np.fft.rfftfreq(size, 1.0 / sampling_rate)
    band = (freqs >= 100.0) & (freqs <= min(5000.0, sampling_rate / 2.0 * 0.9))
    if np.count_nonzero(band) < 8:
        return None
    power = spectrum[band] + 1e-20
    log_freq = np.log(freqs[band])
    residual = power / np.exp(np.polyval(np.polyfit(log_freq, np.log(power), 2), log_freq))
    return float(np.exp(np.mean(np.log(residual))) / np.mean(residual))


def _level_warnings(report: ReferenceReport, config: ReferenceConfig) -> None:
    if report.speech_level_dbfs is not None and report.speech_level_dbfs < config.min_speech_level_dbfs:
        report.warnings.append(f"reference audio {report.name!r} is quiet (speech at "
                               f"{report.speech_level_dbfs:.0f} dBFS); it was amplified, which also raises noise")
    if report.background == "music-like":
        report.warnings.append(f"reference audio {report.name!r} has a music-like background (estimated SNR "
                               f"{report.snr_db:.0f} dB; music or hum); the cloned voice may carry it, use a clip "
                               "without background music")
    elif report.snr_db is not None and report.snr_db < config.min_snr_db:
        report.warnings.append(f"reference audio {report.name!r} has a noisy background (estimated SNR "
                               f"{report.snr_db:.0f} dB < {config.min_snr_db:g} dB); the cloned voice may carry "
                               "the noise, use a cleaner recording")


def _split_at_quietest(segments: list[SpeechSegment], samples_16k: np.ndarray, max_speech_s: float
                       ) -> list[SpeechSegment]:
    """Split the first segment (longer than ``max_speech_s``, no VAD pause) at its quietest 60 ms between
    ``max_speech_s / 2`` and ``max_speech_s`` from its start: the likeliest gap between two words. The two halves
    touch, so no padding is added at the cut (see ``_pieces``)."""
    first = segments[0]
    frame = LEVEL_FRAME_SAMPLES
    lo = int((first.start_s + max_speech_s / 2) * VAD_SAMPLING_RATE)
    hi = int((first.start_s + max_speech_s) * VAD_SAMPLING_RATE)
    window = samples_16k[lo:hi].astype(np.float64)
    num = len(window) // frame
    if num < 3:
        cut_s = first.start_s + max_speech_s
    else:
        power = np.mean(window[: num * frame].reshape(num, frame) ** 2, axis=1)
        smoothed = np.convolve(power, np.ones(3) / 3, mode="same")  # 3 frames = 60 ms
        cut_s = (lo + (int(np.argmin(smoothed[1:-1])) + 1.5) * frame) / VAD_SAMPLING_RATE
    return [SpeechSegment(first.start_s, cut_s), SpeechSegment(cut_s, first.end_s), *segments[1:]]


def _crop(segments: list[SpeechSegment], max_speech_s: float, *, head_only: bool, duration_s: float
          ) -> tuple[list[SpeechSegment], bool]:
    """The first ``k`` segments, with at most ``max_speech_s`` of speech, ending at the best pause.

    Segments end at VAD pauses (a first segment longer than ``max_speech_s`` was split at its quietest point), so
    the crop never lands inside a word. Among the cut points that keep at least ``CROP_MIN_KEEP_SHARE`` of the
    speech the greedy cut keeps, the one before the longest pause wins (a sentence end rather than a breath
    between words). A last segment running into the end of a head-only decode was cut by the decode limit, not
    by a pause, so it is dropped when others remain.

    Returns:
        (kept segments, whether speech was dropped).
    """
    candidates: list[tuple[int, float]] = []  # (number of segments kept, speech seconds kept)
    total = 0.0
    for count, seg in enumerate(segments, start=1):
        total += seg.duration_s
        if candidates and total > max_speech_s + 1e-6:
            break
        candidates.append((count, total))
    if head_only and len(candidates) > 1 and segments[candidates[-1][0] - 1].end_s >= duration_s - 0.05:
        candidates.pop()
    count = candidates[-1][0]
    if count < len(segments):
        greedy_s = candidates[-1][1]

        def pause_after(option: tuple[int, float]) -> float:
            return segments[option[0]].start_s - segments[option[0] - 1].end_s

        eligible = [option for option in candidates if option[1] >= CROP_MIN_KEEP_SHARE * greedy_s]
        count = max(eligible, key=lambda option: (pause_after(option), option[0]))[0]
    return segments[:count], count < len(segments)


def _pieces(kept: list[SpeechSegment], segments: list[SpeechSegment], config: ReferenceConfig, *,
            duration_s: float) -> tuple[list[tuple[float, float]], int]:
    """Stretches of the original timeline (seconds) to keep: speech plus ``vad_pad_ms`` at both ends; internal
    pauses longer than ``max_internal_pause_ms`` keep half that length after the speech before and half before
    the speech after. Padding never reaches past half the pause to a dropped segment."""
    pad_s = config.vad_pad_ms / 1000.0
    max_pause_s = config.max_internal_pause_ms / 1000.0
    start = max(0.0, kept[0].start_s - pad_s)
    end = min(duration_s, kept[-1].end_s + pad_s)
    if len(kept) < len(segments):
        following = segments[len(kept)]
        end = min(end, kept[-1].end_s + (following.start_s - kept[-1].end_s) / 2.0)
    pieces: list[tuple[float, float]] = []
    num_shortened = 0
    piece_start = start
    for before, after in zip(kept, kept[1:]):
        if after.start_s - before.end_s > max_pause_s:
            pieces.append((piece_start, before.end_s + max_pause_s / 2.0))
            piece_start = after.start_s - max_pause_s / 2.0
            num_shortened += 1
    pieces.append((piece_start, end))
    return pieces, num_shortened


def _splice(wave: np.ndarray, sampling_rate: int, pieces: list[tuple[float, float]]) -> np.ndarray:
    """Concatenate ``pieces`` (seconds) of ``wave`` with ``SPLICE_FADE_MS`` linear cross-fades, faded at both ends."""
    fade = max(1, int(round(SPLICE_FADE_MS * sampling_rate / 1000.0)))
    parts = [wave[int(round(a * sampling_rate)): int(round(b * sampling_rate))].astype(np.float32) for a, b in pieces]
    parts = [part for part in parts if len(part)]
    out = parts[0].copy()
    for part in parts[1:]:
        n = min(fade, len(out), len(part))
        up = np.linspace(0.0, 1.0, n, dtype=np.float32)
        out = np.concatenate([out[:len(out) - n], out[len(out) - n:] * up[::-1] + part[:n] * up, part[n:]])
    n = min(fade, len(out) // 2)
    up = np.linspace(0.0, 1.0, n, dtype=np.float32)
    out[:n] *= up
    out[len(out) - n:] *= up[::-1]
    return out


def _speech_power(out: np.ndarray, sampling_rate: int, kept: list[SpeechSegment],
                  pieces: list[tuple[float, float]]) -> float:
    """Mean power of the output samples that are speech (kept VAD segments mapped into the spliced timeline)."""
    mask = np.zeros(len(out), dtype=bool)
    fade = int(round(SPLICE_FADE_MS * sampling_rate / 1000.0))
    offset = 0.0  # output time minus original time, per piece
    cursor = 0.0
    for index, (a, b) in enumerate(pieces):
        offset = cursor - a
        for seg in kept:
            s, e = max(seg.start_s, a), min(seg.end_s, b)
            if e > s:
                mask[int((s + offset) * sampling_rate): int((e + offset) * sampling_rate)] = True
        cursor += (b - a) - (fade / sampling_rate if index < len(pieces) - 1 else 0.0)
    speech = out[mask] if mask.any() else out
    return float(np.mean(np.square(speech, dtype=np.float64)))
