"""Reference-audio cleanup for voice cloning, and its quality report.

``prepare_reference`` runs one named function per stage, in this order (each stage fills its part of the report):

    _decode                 file / bytes / array -> float32 (num_samples, channels), head only past max_decode_s
    _repair_nonfinite       a few NaN/Inf samples zeroed; many = corrupt (refused)
    _measure_clipping       clipped share, after removing DC
    _downmix                mono: channel average, or one channel when the channels cancel
    _highpass               50 Hz high-pass (digital silence refused here)
    _remove_hum             mains hum notched out; the 16 kHz copy for analysis
    _detect_speech          Silero VAD segments
    _measure_levels         speech level, background level and kind, SNR, bandwidth
    _check_speech_amount    no speech / too short (refused)
    _warn_quality           quiet, noisy, music-like, band-limited
    _choose_speech          crop to max_speech_s at a pause or at a sentence end of the transcript
    _find_edges             first/last kept speech, extended over soft onsets and endings
    _cut                    margins, shortened pauses, splice at the target rate
    _normalise_loudness     speech RMS to the target without passing the peak ceiling

``ReferenceConfig.cleanup`` says which of them change the clip: "full" all of the above; "auto" runs every check and
fills the same report, but the clip sent to the model is only decoded, made mono and resampled (what the model's
upstream examples hand their processor); "off" decodes, makes mono and resamples, and checks nothing else.
``ReferenceReport.changes`` lists what was changed.

plus an LRU cache keyed by content hash + settings + target rate + transcript. Arrays in, arrays out; the only
file I/O is ``tts_app.audio.decode.load_audio`` (and hashing a file's bytes). Messages are ``Notice`` s rendered
with the caller's file name when shown (``tts_app.audio.notices``); measurements live in
``tts_app.audio.analysis``, cut decisions in ``tts_app.audio.crop``.
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

from tts_app.audio import analysis, crop
from tts_app.audio.decode import DecodeInfo, load_audio
from tts_app.audio.notices import Notice, refusal
from tts_app.audio.vad import VAD_SAMPLING_RATE, SpeechSegment, speech_probabilities, speech_segments
from tts_app.config import ReferenceConfig
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.frontend import messages
from tts_app.request import ReferenceAudio

ReferenceSource = Union[str, Path, bytes, "tuple[np.ndarray, int]"]

# Stereo downmix: if the average of the channels keeps less than this share of the channels' mean energy, the
# channels cancel (polarity-inverted or badly out of phase) and one channel is used instead. Uncorrelated channels
# of equal power keep 0.5, so 0.25 (-6 dB) only fires when the mix destroys most of the signal.
MIN_DOWNMIX_ENERGY_RATIO = 0.25
# A music-like background is worth a warning only while it is this close to the speech level: 35 dB below the
# speech a bed is inaudible under it (the noise warning threshold, ReferenceConfig.min_snr_db, is 25 dB).
MUSIC_WARN_MAX_SNR_DB = 35.0
# Soft onsets and endings the VAD leaves out are followed this far past its edges, at most.
MAX_EDGE_EXTENSION_S = 0.4


@dataclass
class ReferenceReport:
    """Quality report of one reference clip. All times in seconds; levels in dBFS (RMS re full scale).

    Attributes:
        name: file name or label; every message is rendered with it.
        format, subtype: container and encoding found by the decoder (e.g. "MP3", "MPEG_LAYER_III"); "array" for
            in-memory input.
        sampling_rate: Hz of the input.
        channels: channels of the input.
        duration_s: seconds of input decoded; file_duration_s: what the file's header claims (None if unknown).
        speech_start_s, speech_end_s: first and last speech in the ORIGINAL timeline (VAD, extended over soft
            onsets and endings; None when none).
        speech_s: total detected speech in the decoded input (VAD segments, no margins).
        speech_kept_s: speech in the output (after cropping); None when the clip was refused.
        kept_start_s, kept_end_s: the stretch of the original timeline the output starts and ends with (speech
            plus margins); None when refused.
        output_duration_s, output_sampling_rate: the cleaned clip.
        cropped: speech was removed to fit ``max_speech_s``; crop_at_s: where (original timeline), else None.
        pauses_shortened: internal pauses longer than ``max_internal_pause_ms`` that were shortened.
        channel_used: None when channels were averaged, else the 0-based channel used alone.
        clipping_share: share of input samples clipped (at full scale, or flat-topped at a peak after removing
            DC; see ``analysis.clipping_share``), in [0, 1].
        nonfinite_samples: NaN/Inf samples that were zeroed.
        speech_level_dbfs: RMS of the input speech frames; background_level_dbfs: background RMS (see
            ``analysis.estimate_levels``).
        snr_db: estimated SNR, in [-20, ~100] dB; background: "silent", "noise", "music-like" or None (too little
            pure background to tell).
        bandwidth_hz: highest frequency the speech reaches (``analysis.speech_bandwidth_hz``); None if unknown.
        hum_hz: mains hum frequencies (fundamental and harmonics, Hz) that were notched out; empty when none.
        gain_db: gain applied by loudness normalisation; output_peak_dbfs: peak of the output.
        truncated, head_only: see ``DecodeInfo``.
        reference_text: the transcript that matches the cleaned clip: the one given, its first sentences (cropped
            at a sentence end), or None (none given, or dropped because the crop no longer matches it). Callers
            pass THIS to the model, not the text they gave.
        reference_text_status: None (no transcript given), "kept", "shortened" or "dropped".
        key: cache key (content hash + settings + target rate + transcript).
        cleanup: the ``ReferenceConfig.cleanup`` mode that ran ("auto", "full" or "off").
        changes: what was changed in the clip, in order, as ``tts_app.frontend.messages.Notice`` s (English
            ``str`` s, e.g. "resampled 44100 -> 24000 Hz", "trimmed to the speech: 0.31-5.93 s kept", that render in
            either language: ``to_dict(lang)``); empty when it went to the model as it was.
        notices: warnings as ``Notice`` s; refusals: why the clip was refused (on the report a
            ``ReferenceAudioError`` carries). ``warnings`` / ``errors`` render them with ``name``.
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
    speech_kept_s: float | None = None
    kept_start_s: float | None = None
    kept_end_s: float | None = None
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
    bandwidth_hz: float | None = None
    hum_hz: list[float] = field(default_factory=list)
    gain_db: float = 0.0
    output_peak_dbfs: float | None = None
    truncated: bool = False
    head_only: bool = False
    reference_text: str | None = None
    reference_text_status: str | None = None
    key: str = ""
    cleanup: str = "full"
    changes: list[str] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    refusals: list[Notice] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """The warnings, worded for this report's ``name`` (``tts_app.frontend.messages.Notice`` s: English
        ``str`` s that render in either language)."""
        return [notice.message(self.name) for notice in self.notices]

    @property
    def errors(self) -> list[str]:
        """Why the clip was refused (empty when it was not), worded for ``name`` (as ``warnings``)."""
        return [notice.message(self.name) for notice in self.refusals]

    def warn(self, code: str, key: str | None = None, **values: Any) -> None:
        """Add a warning: the message ``ref_<key or code>`` of ``tts_app.audio.notices`` with ``values``."""
        self.notices.append(Notice(code, values, key))

    def to_dict(self, lang: str = "en") -> dict[str, Any]:
        """JSON-able dict (floats rounded to 4 decimals); ``changes``, ``warnings`` / ``errors`` as text in ``lang``
        ("en" or "zh"), plus ``warning_codes``."""
        out: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            if item.name in ("notices", "refusals"):
                continue
            value = getattr(self, item.name)
            if isinstance(value, float):
                value = round(value, 4)
            elif isinstance(value, list):
                value = list(value)
            out[item.name] = value
        out["changes"] = [messages.localize(change, lang) for change in self.changes]
        out["warnings"] = [message.render(lang) for message in self.warnings]
        out["errors"] = [message.render(lang) for message in self.errors]
        out["warning_codes"] = [notice.code for notice in self.notices]
        return out

    def renamed(self, name: str) -> "ReferenceReport":
        """A copy for a caller who named the same content ``name`` (messages follow the name)."""
        return dataclasses.replace(self, name=name, hum_hz=list(self.hum_hz), notices=list(self.notices),
                                   refusals=list(self.refusals), changes=list(self.changes))


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

    The stages are listed in the module docstring. In short: decode; repair NaN/Inf; mono; 50 Hz high-pass
    (``torchaudio.functional.highpass_biquad``) and mains-hum notches; Silero VAD at 16 kHz; keep the speech plus a
    margin of ``config.vad_pad_ms`` before the first and after the last speech (edges first extended over soft
    onsets such as /s/ and over soft endings the VAD leaves out); shorten internal pauses; crop to
    ``max_speech_s`` of speech at a pause (at a sentence end when a transcript is given); resample
    (``torchaudio.functional.resample``); normalise the speech RMS to ``target_loudness_dbfs`` without exceeding
    ``peak_ceiling_dbfs``.

    Args:
        source: file path, file content (bytes), or ``(samples, sampling_rate)`` with float samples ``(n,)`` or
            ``(n, channels)`` (int16/int32 arrays are scaled from full scale).
        target_sampling_rate: Hz of the returned clip (the model's rate).
        config: cleanup settings.
        reference_text: transcript of the clip, if known. When the clip must be cropped, the crop lands at a
            sentence end of the transcript when one matches, and ``report.reference_text`` is the transcript of
            what was kept (None when no crop could be matched: the text is then dropped, with a warning).
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
    text = (reference_text or "").strip() or None
    settings = repr(dataclasses.astuple(config))
    key = hashlib.sha256(f"{content_hash}|{settings}|{target_sampling_rate}|{text}".encode()).hexdigest()[:32]

    def compute() -> tuple[ReferenceAudio, ReferenceReport]:
        return _prepare_uncached(source, label, key, target_sampling_rate, config, text)

    if cache is None:
        return compute()
    try:
        ref, report = cache.get_or_compute(key, compute)
    except ReferenceAudioError as error:
        raise error.for_name(label) from None
    # Cached reports are shared; each caller gets its own copy, named after its own file (the same content may
    # arrive under another name, e.g. a re-upload).
    return ref, report.renamed(label)


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
            raise refusal("unreadable", label, reason=error.strerror or str(error)) from None
        return label, digest.hexdigest()
    raise ReferenceAudioError(f"reference audio of type {type(source).__name__} is not supported; pass a path, "
                              "bytes or (samples, sampling_rate)")


def _refuse(report: ReferenceReport, code: str, key: str | None = None, **values: Any) -> ReferenceAudioError:
    """Record why the clip is refused on ``report`` and return the error carrying it (message: the table entry
    ``ref_<key or code>`` in ``tts_app.audio.notices``)."""
    notice = Notice(code, values, key)
    report.refusals.append(notice)
    return ReferenceAudioError(notice.message(report.name), report=report, notice=notice)


def _db(power: float) -> float:
    return 10.0 * math.log10(max(power, 1e-20))


# ------------------------------------------------------------------------------------------------------ the stages


def _prepare_uncached(source: ReferenceSource, label: str, key: str, target_sampling_rate: int,
                      config: ReferenceConfig, reference_text: str | None) -> tuple[ReferenceAudio, ReferenceReport]:
    """Run the stages in order (see the module docstring)."""
    samples, sampling_rate, info = _decode(source, label, config)
    report = ReferenceReport(
        name=label, format=info.format, subtype=info.subtype, sampling_rate=sampling_rate, channels=info.channels,
        duration_s=samples.shape[0] / sampling_rate, file_duration_s=info.file_duration_s,
        truncated=info.truncated, head_only=info.head_only, key=key, notices=list(info.warnings),
        output_sampling_rate=target_sampling_rate)
    report.cleanup = config.cleanup
    samples = _repair_nonfinite(samples, report, config)
    if report.nonfinite_samples:
        report.changes.append(messages.Notice("ref_change_nonfinite", count=report.nonfinite_samples))
    _measure_clipping(samples, report, config)
    mono = _downmix(samples, report)
    if samples.shape[1] > 1:
        report.changes.append(
            messages.Notice("ref_change_mixed", channels=samples.shape[1]) if report.channel_used is None
            else messages.Notice("ref_change_channel", channel=report.channel_used, channels=samples.shape[1]))
    if config.cleanup == "off":
        return _as_given(mono, sampling_rate, target_sampling_rate, report, key)
    wave = _highpass(mono, sampling_rate, report, config)
    if config.cleanup == "full" and 0 < config.highpass_cutoff_hz < sampling_rate / 2:
        report.changes.append(messages.Notice("ref_change_highpass", cutoff_hz=config.highpass_cutoff_hz))
    wave, samples_16k = _remove_hum(wave, sampling_rate, report, remove=config.cleanup == "full")
    segments = _detect_speech(samples_16k, config)
    levels = _measure_levels(wave, sampling_rate, samples_16k, segments, report, config)
    _check_speech_amount(samples_16k, segments, levels, report, config)
    _warn_quality(report, config)
    if config.cleanup == "auto":
        report.speech_kept_s = report.speech_s
        report.reference_text = reference_text
        report.reference_text_status = None if reference_text is None else "kept"
        return _as_given(mono, sampling_rate, target_sampling_rate, report, key)
    segments, plan = _choose_speech(samples_16k, segments, reference_text, report, config)
    start_s, end_s = _find_edges(samples_16k, segments, plan, levels, report)
    out, kept, stretches = _cut(wave, sampling_rate, target_sampling_rate, segments, plan, start_s, end_s,
                                report, config)
    if sampling_rate != target_sampling_rate:
        report.changes.append(messages.Notice("ref_change_resampled", source_hz=sampling_rate,
                                              target_hz=target_sampling_rate))
    report.changes.append(messages.Notice(
        "ref_change_trimmed", start_s=report.kept_start_s, end_s=report.kept_end_s,
        cropped=messages.Notice("ref_change_cropped", max_s=config.max_speech_s) if plan.cropped else ""))
    if report.pauses_shortened:
        report.changes.append(messages.Notice("ref_change_pauses", count=report.pauses_shortened,
                                              max_ms=config.max_internal_pause_ms))
    out = _normalise_loudness(out, target_sampling_rate, kept, stretches, report, config)
    report.changes.append(messages.Notice("ref_change_loudness", gain_db=report.gain_db,
                                          target_dbfs=config.target_loudness_dbfs))
    return ReferenceAudio(samples=out, sampling_rate=target_sampling_rate, key=key), report


def _as_given(mono: np.ndarray, sampling_rate: int, target_sampling_rate: int, report: ReferenceReport,
              key: str) -> tuple[ReferenceAudio, ReferenceReport]:
    """The clip as decoded, mono, resampled to ``target_sampling_rate`` (``torchaudio.functional.resample``, as the
    "full" path): cleanup "auto" and "off"."""
    import torch
    import torchaudio.functional as AF

    out = mono.astype(np.float32)
    if sampling_rate != target_sampling_rate:
        out = AF.resample(torch.from_numpy(out), sampling_rate, target_sampling_rate).numpy().astype(np.float32)
        report.changes.append(messages.Notice("ref_change_resampled", source_hz=sampling_rate,
                                              target_hz=target_sampling_rate))
    report.kept_start_s, report.kept_end_s = 0.0, report.duration_s
    report.output_duration_s = len(out) / target_sampling_rate
    peak = float(np.max(np.abs(out))) if out.size else 0.0
    report.output_peak_dbfs = 20.0 * math.log10(max(peak, 1e-10))
    return ReferenceAudio(samples=out, sampling_rate=target_sampling_rate, key=key), report


def _decode(source: ReferenceSource, label: str, config: ReferenceConfig) -> tuple[np.ndarray, int, DecodeInfo]:
    """File, bytes or array -> float32 ``(num_samples, channels)``, its rate, and what the decoder found."""
    if isinstance(source, tuple):
        return _array_input(source, label, config.max_decode_s)
    return load_audio(source, max_decode_s=config.max_decode_s, name=label)


def _array_input(source: tuple, label: str, max_decode_s: float) -> tuple[np.ndarray, int, DecodeInfo]:
    samples, sampling_rate = source
    if not isinstance(sampling_rate, (int, np.integer)) or sampling_rate <= 0:
        raise refusal("bad_rate", label, rate=sampling_rate)
    array = np.asarray(samples)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] < 1:
        raise refusal("bad_shape", label, shape=array.shape)
    if array.dtype.kind in "iu":
        info_ = np.iinfo(array.dtype)
        array = (array.astype(np.float32) - (info_.min + info_.max + 1) / 2.0) / ((info_.max - info_.min + 1) / 2.0)
    elif array.dtype.kind != "f":
        raise refusal("bad_dtype", label, dtype=str(array.dtype))
    sampling_rate = int(sampling_rate)
    info = DecodeInfo(name=label, format="array", subtype=str(np.asarray(samples).dtype), sampling_rate=sampling_rate,
                      channels=int(array.shape[1]), duration_s=array.shape[0] / sampling_rate,
                      file_duration_s=array.shape[0] / sampling_rate, decoder="array")
    max_frames = int(max_decode_s * sampling_rate)
    if array.shape[0] > max_frames:
        array = array[:max_frames]
        info.head_only = True
        info.duration_s = max_frames / sampling_rate
        info.warnings.append(Notice("head_only", {"max_decode_s": max_decode_s}))
    if array.shape[0] == 0:
        raise refusal("no_samples", label)
    return np.ascontiguousarray(array, dtype=np.float32), sampling_rate, info


def _repair_nonfinite(samples: np.ndarray, report: ReferenceReport, config: ReferenceConfig) -> np.ndarray:
    """A few dented NaN/Inf samples are zeroed (with a warning); a large share means the data is garbage."""
    finite = np.isfinite(samples)
    num_nonfinite = int(samples.size - np.count_nonzero(finite))
    if not num_nonfinite:
        return samples
    share = num_nonfinite / samples.size
    if share > config.max_nonfinite_share:
        raise _refuse(report, "corrupt", share=share, limit=config.max_nonfinite_share)
    report.nonfinite_samples = num_nonfinite
    report.warn("nonfinite", count=num_nonfinite)
    return np.where(finite, samples, np.float32(0.0))


def _measure_clipping(samples: np.ndarray, report: ReferenceReport, config: ReferenceConfig) -> None:
    """Clipped share of the input over all channels, measured after removing DC (``analysis.clipping_share``),
    kept to the report's 4 decimals: the warning and the report's table then show one and the same number."""
    report.clipping_share = round(analysis.clipping_share(samples), 4)
    if report.clipping_share > config.max_clipping_share:
        report.warn("clipped", share=report.clipping_share)


def _downmix(samples: np.ndarray, report: ReferenceReport) -> np.ndarray:
    """(n, channels) -> (n,): the channel average, or the strongest channel when averaging cancels most energy."""
    if samples.shape[1] == 1:
        return np.ascontiguousarray(samples[:, 0])
    mix = samples.mean(axis=1)
    channel_energy = np.mean(np.square(samples, dtype=np.float64), axis=0)
    if channel_energy.max() > 0 and np.mean(np.square(mix, dtype=np.float64)) < (
            MIN_DOWNMIX_ENERGY_RATIO * channel_energy.mean()):
        report.channel_used = int(np.argmax(channel_energy))
        report.warn("channels_cancel", channel=report.channel_used)
        return np.ascontiguousarray(samples[:, report.channel_used])
    return mix.astype(np.float32)


def _highpass(mono: np.ndarray, sampling_rate: int, report: ReferenceReport, config: ReferenceConfig):
    """50 Hz high-pass (hum and rumble) -> float32 tensor ``(n,)``. Refuses digital silence.

    lfilter clamps its output to [-1, 1], so a copy scaled to peak 0.5 is filtered and scaled back: nothing is
    clipped here (the loudness stage sets the final level)."""
    import torch
    import torchaudio.functional as AF

    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak == 0.0:
        raise _refuse(report, "silent", min_s=config.min_speech_s)
    wave = torch.from_numpy(mono)
    if 0.0 < config.highpass_cutoff_hz < sampling_rate / 2:
        scale = 0.5 / peak
        wave = AF.highpass_biquad(wave * scale, sampling_rate, config.highpass_cutoff_hz) / scale
        # The IIR tail decays through digital silence into subnormal floats, which make every later float op
        # (the VAD above all: 4x slower measured) crawl. Values below -240 dBFS are zero for any purpose.
        wave = wave.masked_fill(wave.abs() < analysis.TINY_SAMPLE, 0.0)
    return wave


def _remove_hum(wave, sampling_rate: int, report: ReferenceReport, remove: bool = True):
    """Notch out mains hum (the high-pass barely touches 50 Hz) -> (wave, float32 16 kHz copy for analysis). With
    ``remove`` False (cleanup "auto") the hum is reported, and notched out of the analysis copy only."""
    import torchaudio.functional as AF

    wave_16k = wave if sampling_rate == VAD_SAMPLING_RATE else AF.resample(wave, sampling_rate, VAD_SAMPLING_RATE)
    report.hum_hz = analysis.detect_hum(wave_16k.numpy(), VAD_SAMPLING_RATE)
    if report.hum_hz:
        wave = analysis.notch(wave, sampling_rate, report.hum_hz)
        wave_16k = analysis.notch(wave_16k, VAD_SAMPLING_RATE, report.hum_hz)
        notches = ", ".join(f"{hz:g}" for hz in report.hum_hz)
        if remove:
            report.warn("hum", hz=report.hum_hz[0], notches=notches)
            report.changes.append(messages.Notice("ref_change_hum", notches=notches))
        else:
            report.warn("hum_kept", hz=report.hum_hz[0])
    return wave, wave_16k.numpy()


def _detect_speech(samples_16k: np.ndarray, config: ReferenceConfig) -> list[SpeechSegment]:
    """Silero VAD speech segments (seconds, unpadded)."""
    probs = speech_probabilities(samples_16k)
    return speech_segments(probs, len(samples_16k), threshold=config.vad_threshold)


def _measure_levels(wave, sampling_rate: int, samples_16k: np.ndarray, segments: list[SpeechSegment],
                    report: ReferenceReport, config: ReferenceConfig) -> analysis.Levels:
    """Speech and background level, SNR, background kind, and the speech bandwidth (at the input's own rate)."""
    levels = analysis.estimate_levels(samples_16k, VAD_SAMPLING_RATE, segments)
    report.speech_level_dbfs, report.background_level_dbfs = levels.speech_dbfs, levels.background_dbfs
    report.snr_db, report.background = levels.snr_db, levels.background
    report.bandwidth_hz = analysis.speech_bandwidth_hz(wave.numpy(), sampling_rate, segments)
    return levels


def _check_speech_amount(samples_16k: np.ndarray, segments: list[SpeechSegment], levels: analysis.Levels,
                         report: ReferenceReport, config: ReferenceConfig) -> None:
    """Refuse a clip with no speech, or with less than ``min_speech_s`` of it. A lone syllable (which the VAD may
    not call speech at all) is "too short", not "no speech"."""
    if segments:
        report.speech_start_s = segments[0].start_s
        report.speech_end_s = segments[-1].end_s
    report.speech_s = float(sum(seg.duration_s for seg in segments))
    if not segments:
        sound_s = analysis.sound_duration_s(samples_16k, analysis.edge_background_power(
            samples_16k, segments, levels.background_power))
        if 0.0 < sound_s < config.min_speech_s:
            raise _refuse(report, "too_short", "too_short_sound", found_s=sound_s, min_s=config.min_speech_s)
        raise _refuse(report, "no_speech")
    if report.speech_s < config.min_speech_s:
        raise _refuse(report, "too_short", found_s=report.speech_s, min_s=config.min_speech_s)


def _warn_quality(report: ReferenceReport, config: ReferenceConfig) -> None:
    """Warnings about how the clip will clone: quiet, music or noise behind the voice, narrow bandwidth."""
    if report.speech_level_dbfs is not None and report.speech_level_dbfs < config.min_speech_level_dbfs:
        report.warn("quiet", level=report.speech_level_dbfs)
    snr = report.snr_db
    louder = messages.Notice("ref_louder") if snr is not None and snr <= 0 else ""
    if report.background == "music-like" and snr is not None and snr < MUSIC_WARN_MAX_SNR_DB:
        report.warn("music", snr=snr, louder=louder)
    elif snr is not None and snr < config.min_snr_db:
        report.warn("noisy", snr=snr, min_snr=config.min_snr_db, louder=louder)
    if report.bandwidth_hz is not None and report.bandwidth_hz < config.min_bandwidth_hz:
        report.warn("band_limited", khz=report.bandwidth_hz / 1000.0, min_khz=config.min_bandwidth_hz / 1000.0)


def _choose_speech(samples_16k: np.ndarray, segments: list[SpeechSegment], reference_text: str | None,
                   report: ReferenceReport, config: ReferenceConfig) -> tuple[list[SpeechSegment], crop.CropPlan]:
    """Which speech to keep: all of it, or at most ``max_speech_s`` cut at a pause (at a sentence end of the
    transcript when one matches). Returns the segments (the first split at its quietest point when it has no
    pause within ``max_speech_s``) and the plan."""
    forced_cut = segments[0].duration_s > config.max_speech_s
    if forced_cut:
        segments = crop.split_at_quietest(segments, samples_16k, config.max_speech_s)
        report.warn("no_pause", max_s=config.max_speech_s)
    plan = crop.plan_crop(segments, config.max_speech_s, head_only=report.head_only,
                          duration_s=len(samples_16k) / VAD_SAMPLING_RATE, reference_text=reference_text)
    report.speech_kept_s = float(sum(seg.duration_s for seg in segments[: plan.num_kept]))
    report.reference_text, report.reference_text_status = plan.reference_text, plan.text_status
    if plan.cropped:
        report.cropped = True
        report.warn("cropped", speech_s=report.speech_s,
                    where=messages.Notice("ref_at_quietest" if forced_cut else "ref_at_pause"),
                    kept_s=report.speech_kept_s, max_s=config.max_speech_s)
    if plan.text_status == "shortened":
        report.warn("text_shortened", count=plan.sentences_kept, kept_s=report.speech_kept_s)
    elif plan.text_status == "dropped":
        report.warn("text_dropped", kept_s=report.speech_kept_s, max_s=config.max_speech_s)
    return segments, plan


def _find_edges(samples_16k: np.ndarray, segments: list[SpeechSegment], plan: crop.CropPlan,
                levels: analysis.Levels, report: ReferenceReport) -> tuple[float, float]:
    """First and last kept speech (seconds), extended over soft onsets and endings (``analysis.extend_edges``),
    never into a dropped segment's half of the pause."""
    kept = segments[: plan.num_kept]
    duration_s = len(samples_16k) / VAD_SAMPLING_RATE
    upper_s = duration_s
    if plan.num_kept < len(segments):
        upper_s = kept[-1].end_s + (segments[plan.num_kept].start_s - kept[-1].end_s) / 2.0
    speech_power = None if levels.speech_dbfs is None else 10.0 ** (levels.speech_dbfs / 10.0)
    background = analysis.edge_background_power(samples_16k, segments, levels.background_power)
    sound = analysis.sound_frames(samples_16k, background, speech_power)
    start_s, end_s = analysis.extend_edges(kept[0].start_s, kept[-1].end_s, sound,
                                           max_extension_s=MAX_EDGE_EXTENSION_S, lower_s=0.0, upper_s=upper_s)
    report.speech_start_s = start_s
    if not plan.cropped:
        report.speech_end_s = end_s
    return start_s, end_s


def _cut(wave, sampling_rate: int, target_sampling_rate: int, segments: list[SpeechSegment], plan: crop.CropPlan,
         start_s: float, end_s: float, report: ReferenceReport, config: ReferenceConfig
         ) -> tuple[np.ndarray, list[SpeechSegment], list[tuple[float, float]]]:
    """Keep the speech plus ``vad_pad_ms`` margins, shorten long pauses, resample, splice.

    Returns:
        (float32 output ``(num_samples,)`` at ``target_sampling_rate``, kept segments, kept stretches of the
        original timeline).
    """
    import torchaudio.functional as AF

    kept = segments[: plan.num_kept]
    stretches, report.pauses_shortened = crop.pieces(
        kept, segments, start_s=start_s, end_s=end_s, margin_s=config.vad_pad_ms / 1000.0,
        max_pause_s=config.max_internal_pause_ms / 1000.0, duration_s=report.duration_s)
    report.kept_start_s, report.kept_end_s = stretches[0][0], stretches[-1][1]
    if plan.cropped:
        report.crop_at_s = stretches[-1][1]
    wave_out = wave if sampling_rate == target_sampling_rate else AF.resample(wave, sampling_rate,
                                                                             target_sampling_rate)
    return crop.splice(wave_out.numpy(), target_sampling_rate, stretches), kept, stretches


def _normalise_loudness(out: np.ndarray, sampling_rate: int, kept: list[SpeechSegment],
                        stretches: list[tuple[float, float]], report: ReferenceReport,
                        config: ReferenceConfig) -> np.ndarray:
    """Speech RMS -> ``target_loudness_dbfs``, limited by ``peak_ceiling_dbfs`` (gain only; nothing is clipped)."""
    gain_db = config.target_loudness_dbfs - _db(crop.speech_power(out, sampling_rate, kept, stretches))
    out_peak = float(np.max(np.abs(out)))
    if out_peak > 0:
        gain_db = min(gain_db, config.peak_ceiling_dbfs - 20.0 * math.log10(out_peak))
    out = (out * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)
    report.gain_db = float(gain_db)
    report.output_peak_dbfs = 20.0 * math.log10(max(float(np.max(np.abs(out))), 1e-10))
    report.output_duration_s = len(out) / sampling_rate
    return out


# Measurements other modules and tests use by these names.
detect_hum = analysis.detect_hum
