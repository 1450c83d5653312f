"""Measurements on a reference clip for its quality report and its trimming: clipping, mains hum, background level
and kind, SNR, bandwidth, and where soft speech sounds begin and end. Pure numpy on float32 mono arrays (the hum
notch alone uses torchaudio's biquad); no I/O, no decisions about what to warn (``reference.py`` makes those).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tts_app.audio.vad import VAD_SAMPLING_RATE, SpeechSegment

# A sample at or above this magnitude counts as clipped (full scale of 16-bit PCM is 32767/32768 = 0.99997).
CLIP_LEVEL = 0.999
# ... and so does a sample within 0.1% of the clip's own positive or negative peak (after removing DC): audio
# clipped and then turned down, or shifted by a DC offset, has flat tops below full scale. Unclipped speech has
# ~0.001-0.01% of its samples that close to a peak (measured on tests/data).
CLIP_RELATIVE_LEVEL = 0.999
# Frame length for level / SNR measurements (20 ms at 16 kHz), a common short-time analysis frame.
LEVEL_FRAME_SAMPLES = 320
# Minimum-statistics frames (10 ms at 16 kHz): short enough to fall into the closures and gaps between words.
MIN_STATS_FRAME_SAMPLES = 160
# Percentile of 10 ms frame power taken as the background when the clip has too little pure background. Measured
# on tests/data cut to their speech only: clean clips give 46-58 dB SNR at the 2nd percentile (28-41 dB at the
# 10th, which called clean speech "noisy"); pink noise at 20 dB and the music bed at 18 dB read 20 and 20 dB.
MIN_STATS_PERCENTILE = 2.0
# Pure background (frames farther than BACKGROUND_GUARD_S from any speech) needed to measure it directly: 100 ms.
MIN_BACKGROUND_FRAMES = 5
# Frames this close to detected speech may still hold its onset or decay; they are not background.
BACKGROUND_GUARD_S = 0.1
# Power floor for the noise estimate (-100 dBFS, below 16- and 24-bit quantisation noise of real recordings), so a
# digitally silent background gives a large finite SNR instead of infinity.
NOISE_POWER_FLOOR = 1e-10
# A frame below this power (-90 dBFS) is digital silence: the zeros an editor pads a clip with, or a gate, never a
# microphone's background (16-bit dithered silence sits at about -96 dBFS, a quiet studio's room tone at -60 to -80
# dBFS). It is left out of the background estimate: averaged in, 5 s of padding around a clip with noise 10 dB
# below the voice read "SNR 27 dB" and hid the noise.
DIGITAL_SILENCE_POWER = 1e-9
# SNR is reported no lower than this: below 0 dB the background is louder than the speech, and the exact figure
# (which a power difference can push to -180 dB) means nothing to anyone.
MIN_REPORTED_SNR_DB = -20.0
# Below this background level (dBFS) the background is reported as "silent" and not classified.
SILENT_BACKGROUND_DBFS = -70.0
# Background classified "music-like" (tonal: music, hum harmonics) when the spectral flatness of its averaged
# 100-5000 Hz spectrum, after removing the spectral tilt, is below this. Measured on this project's test clips and
# synthetic signals: white/pink/brown noise 0.91, a chord bed 0.006, 100+150 Hz hum over noise 0.17.
MUSIC_MAX_FLATNESS = 0.3
# Frames for the background spectrum: 64 ms at 16 kHz (15.6 Hz bins, fine enough to resolve notes), 50% hop.
SPECTRUM_FRAME_SAMPLES = 1024
# Background frames needed before its kind is judged (4 frames, ~0.16 s); fewer give a spectrum of a frame or two,
# whose chance peaks looked "music-like" on clean clips.
MIN_SPECTRUM_FRAMES = 4
# Mains hum: a spectral line at 50 or 60 Hz (or a harmonic up to MAX_HUM_HARMONIC) standing this many dB above the
# spectrum 12-30 Hz either side is notched out (torchaudio.functional.bandreject_biquad, bandwidth HUM_NOTCH_HZ).
# The 50 Hz high-pass alone takes only 3 dB off 50 Hz hum. Measured: the pink-noise+hum test clip 28 dB, clean
# speech clips and the music bed < 2 dB.
HUM_PROMINENCE_DB = 12.0
MAX_HUM_HARMONIC = 4
HUM_NOTCH_HZ = 5.0
# Samples below this magnitude (-240 dBFS) are set to exactly zero after filtering (avoids subnormal floats).
TINY_SAMPLE = 1e-12
# Bandwidth: the highest frequency where the long-term speech spectrum is within this many dB of its peak.
# Measured (64 ms frames): telephone-band test clip 3.5 kHz; flite's 16 kHz voice (little energy above 3.4 kHz:
# 32 dB below 0-4 kHz) 7.2 kHz; every other clean or noisy clip in tests/data 10.6 kHz or more. At 40 dB the flite
# voice would read 3.4 kHz, as narrow as a telephone.
BANDWIDTH_BELOW_PEAK_DB = 60.0
# Soft onsets/endings: 10 ms frames; a frame is "sound" when it is this many dB above the background and no more
# than EDGE_BELOW_SPEECH_DB below the speech level (so a -100 dBFS filter tail in digital silence is not).
EDGE_FRAME_SAMPLES = 160
EDGE_ABOVE_BACKGROUND_DB = 6.0
EDGE_BELOW_SPEECH_DB = 50.0
# "Sound" for telling a lone syllable from no speech: within this many dB of the loudest 10 ms frame.
SOUND_BELOW_PEAK_DB = 40.0
# Gaps of quiet frames up to this long inside a soft onset are bridged (the closure before a stop's burst).
EDGE_MAX_GAP_S = 0.03


def _db(power: float) -> float:
    return 10.0 * math.log10(max(power, 1e-20))


def frame_power(samples: np.ndarray, frame: int) -> np.ndarray:
    """Mean power of consecutive ``frame``-sample frames: float64 ``(len(samples) // frame,)``."""
    num = len(samples) // frame
    frames = samples[: num * frame].reshape(num, frame).astype(np.float64)
    return np.mean(frames * frames, axis=1)


def clipping_share(samples: np.ndarray) -> float:
    """Share of samples (all channels) that are clipped, in [0, 1].

    A sample is clipped when it sits at full scale (``|x| >= CLIP_LEVEL``) or, after removing each channel's DC
    offset, within 0.1 % of that channel's own positive or negative peak (flat tops: clipped then turned down, or
    clipped and then shifted by DC, which leaves the two sides at different heights).

    Args:
        samples: float32 ``(num_samples, channels)``, finite.
    """
    if samples.size == 0:
        return 0.0
    clipped = np.abs(samples) >= CLIP_LEVEL
    centred = samples - samples.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
    top, bottom = centred.max(axis=0, keepdims=True), centred.min(axis=0, keepdims=True)
    clipped |= (centred >= CLIP_RELATIVE_LEVEL * top) & (top > 0)
    clipped |= (centred <= CLIP_RELATIVE_LEVEL * bottom) & (bottom < 0)
    return float(np.count_nonzero(clipped)) / samples.size


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


def notch(wave, sampling_rate: int, freqs_hz: list[float]):
    """Band-reject biquads (``torchaudio.functional.bandreject_biquad``, Q = f / ``HUM_NOTCH_HZ``) on a float32
    tensor ``(num_samples,)``, applied at a safe scale because lfilter clamps its output to [-1, 1]."""
    import torchaudio.functional as AF

    peak = float(wave.abs().max())
    if peak == 0.0:
        return wave
    scale = 0.5 / peak
    out = wave * scale
    for hz in freqs_hz:
        out = AF.bandreject_biquad(out, sampling_rate, hz, Q=hz / HUM_NOTCH_HZ)
    return out.masked_fill(out.abs() < TINY_SAMPLE * scale, 0.0) / scale


@dataclass(frozen=True)
class Levels:
    """Speech and background levels of a clip.

    Attributes:
        speech_dbfs: mean power of the speech frames, dBFS (None when there is no speech).
        background_dbfs: background power, dBFS (floored at -100 dBFS).
        snr_db: ``10 log10((P_speech - P_background) / P_background)``, no lower than ``MIN_REPORTED_SNR_DB``
            (None when there is no speech).
        background: "silent", "noise", "music-like", or None when too little pure background was heard to say.
        measured_directly: the background came from pure background frames (else from minimum statistics).
    """

    speech_dbfs: float | None
    background_dbfs: float | None
    snr_db: float | None
    background: str | None
    measured_directly: bool = False

    @property
    def background_power(self) -> float:
        return NOISE_POWER_FLOOR if self.background_dbfs is None else 10.0 ** (self.background_dbfs / 10.0)


def estimate_levels(samples: np.ndarray, sampling_rate: int, segments: list[SpeechSegment], *,
                    guard_s: float = BACKGROUND_GUARD_S) -> Levels:
    """Speech level, background level, SNR and background kind of a mono clip.

    Method: power of 20 ms frames. Speech frames lie inside VAD segments; background frames lie more than
    ``guard_s`` outside every segment and are not digital silence (below ``DIGITAL_SILENCE_POWER``: padding or a
    gate, which says nothing of the noise the recording carries under the voice). With at least
    ``MIN_BACKGROUND_FRAMES`` (100 ms) of them, the background power is their mean; otherwise (a clip with little or
    no pause, or only digital silence around the speech) it is the ``MIN_STATS_PERCENTILE`` percentile of the 10 ms
    frames of the clip that are not digital silence: minimum statistics, after R. Martin, "Noise power spectral
    density estimation based on optimal smoothing and minimum statistics", IEEE TSAP 2001 — short frames fall into
    the closures and gaps between words, where only the background is heard. A clip that is digital silence
    wherever no speech is heard has a "silent" background (-100 dBFS). The background is "silent" below -70
    dBFS; "music-like" when its tilt-removed spectral flatness is below ``MUSIC_MAX_FLATNESS``; else "noise"; and
    None (unknown) when fewer than ``MIN_SPECTRUM_FRAMES`` frames of pure background exist to judge it from.

    Args:
        samples: float32 ``(num_samples,)``; sampling_rate: Hz; segments: VAD speech segments in seconds.
        guard_s: distance from speech beyond which a frame counts as pure background, in s.
    """
    frame = max(1, int(round(LEVEL_FRAME_SAMPLES * sampling_rate / VAD_SAMPLING_RATE)))
    num_frames = len(samples) // frame
    if num_frames == 0:
        return Levels(None, None, None, None)
    power = frame_power(samples, frame)
    sample_times = np.arange(len(samples)) / sampling_rate
    in_speech_samples = np.zeros(len(samples), dtype=bool)
    near_speech_samples = np.zeros(len(samples), dtype=bool)
    for seg in segments:
        in_speech_samples |= (sample_times >= seg.start_s) & (sample_times < seg.end_s)
        near_speech_samples |= (sample_times >= seg.start_s - guard_s) & (sample_times < seg.end_s + guard_s)
    centres = np.arange(num_frames) * frame + frame // 2
    in_speech = in_speech_samples[centres]
    digital_silence = power < DIGITAL_SILENCE_POWER
    background = ~near_speech_samples[centres] & ~digital_silence
    if not in_speech.any():
        return Levels(None, _db(max(float(np.mean(power)), NOISE_POWER_FLOOR)), None, None)
    speech_power = float(np.mean(power[in_speech]))
    direct = np.count_nonzero(background) >= MIN_BACKGROUND_FRAMES
    if direct:
        background_power = float(np.mean(power[background]))
    else:
        background_power = _minimum_statistics(samples, sampling_rate, frame // 2, segments)
        only_digital_silence_around = not np.any(~near_speech_samples[centres] & ~digital_silence)
        if only_digital_silence_around and _db(background_power) < SILENT_BACKGROUND_DBFS:
            background_power = NOISE_POWER_FLOOR  # nothing but digital silence around, and no noise under the speech
    background_power = max(background_power, NOISE_POWER_FLOOR)
    excess = speech_power - background_power
    snr_db = max(MIN_REPORTED_SNR_DB, _db(excess / background_power) if excess > 0 else MIN_REPORTED_SNR_DB)
    background_dbfs = _db(background_power)
    if background_dbfs < SILENT_BACKGROUND_DBFS:
        kind = "silent"
    else:
        digital_samples = np.repeat(digital_silence, frame)
        digital_samples = np.concatenate([digital_samples, np.zeros(len(samples) - len(digital_samples), bool)])
        flatness = _background_flatness(samples, ~near_speech_samples & ~digital_samples, sampling_rate)
        kind = None if flatness is None else "music-like" if flatness < MUSIC_MAX_FLATNESS else "noise"
    return Levels(_db(speech_power), background_dbfs, snr_db, kind, direct)


def _minimum_statistics(samples: np.ndarray, sampling_rate: int, frame: int, segments: list[SpeechSegment]) -> float:
    """The ``MIN_STATS_PERCENTILE`` percentile of the power of the ``frame``-sample frames that are not digital
    silence; when every frame outside the speech is digital silence, of the frames inside the speech only (the
    noise a padded recording carries under the voice). ``NOISE_POWER_FLOOR`` when all of it is digital silence."""
    frame = max(1, frame)
    short = frame_power(samples, frame)
    times_s = (np.arange(len(short)) + 0.5) * frame / sampling_rate
    inside = np.zeros(len(short), dtype=bool)
    for seg in segments:
        inside |= (times_s >= seg.start_s) & (times_s < seg.end_s)
    recorded = short >= DIGITAL_SILENCE_POWER
    if not np.any(recorded & ~inside):
        recorded &= inside
    return float(np.percentile(short[recorded], MIN_STATS_PERCENTILE)) if recorded.any() else NOISE_POWER_FLOOR


def _background_flatness(samples: np.ndarray, background: np.ndarray, sampling_rate: int) -> float | None:
    """Spectral flatness (geometric / arithmetic mean, as in librosa.feature.spectral_flatness) of the mean
    100-5000 Hz power spectrum of all-background frames, after dividing out a quadratic fit of log power over log
    frequency (so coloured noise counts as flat and only peaks count). None with fewer than
    ``MIN_SPECTRUM_FRAMES`` frames."""
    size = max(64, int(round(SPECTRUM_FRAME_SAMPLES * sampling_rate / VAD_SAMPLING_RATE)))
    hop = size // 2
    starts = [i for i in range(0, len(samples) - size + 1, hop) if background[i: i + size].all()]
    if len(starts) < MIN_SPECTRUM_FRAMES:
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


def speech_bandwidth_hz(samples: np.ndarray, sampling_rate: int, segments: list[SpeechSegment]) -> float | None:
    """Highest frequency (Hz) the speech reaches: where its long-term average spectrum (64 ms Hann frames inside
    the VAD segments, 50 % hop) last stands within ``BANDWIDTH_BELOW_PEAK_DB`` of its peak above 100 Hz. A
    telephone-band clip gives ~3.4 kHz, low-bitrate codecs their low-pass cut-off, clean wideband speech 7 kHz or
    more (up to the Nyquist frequency). None when the speech holds fewer than 2 frames.

    Args:
        samples: float32 mono ``(num_samples,)`` at the input's own rate (not the 16 kHz VAD copy, which would
            cap every clip at 8 kHz); sampling_rate: Hz; segments: VAD segments in seconds.
    """
    size = int(round(0.064 * sampling_rate))
    size += size % 2
    hop = size // 2
    starts = [i for seg in segments
              for i in range(int(seg.start_s * sampling_rate), int(seg.end_s * sampling_rate) - size + 1, hop)]
    if len(starts) < 2 or size < 16:
        return None
    spectrum = np.zeros(size // 2 + 1)
    window = np.hanning(size)
    for chunk in range(0, len(starts), 256):  # bounded memory on a long clip
        frames = np.stack([samples[i: i + size] for i in starts[chunk: chunk + 256]]).astype(np.float64) * window
        spectrum += np.sum(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)
    freqs = np.fft.rfftfreq(size, 1.0 / sampling_rate)
    level = 10.0 * np.log10(spectrum / len(starts) + 1e-30)
    band = freqs >= 100.0
    if not band.any():
        return None
    above = np.nonzero(band & (level > level[band].max() - BANDWIDTH_BELOW_PEAK_DB))[0]
    return float(freqs[above[-1]])


def sound_frames(samples_16k: np.ndarray, background_power: float, speech_power: float | None) -> np.ndarray:
    """Which 10 ms frames of a 16 kHz mono clip hold sound: more than ``EDGE_ABOVE_BACKGROUND_DB`` above the
    background and (when the speech level is known) no more than ``EDGE_BELOW_SPEECH_DB`` below the speech.
    Returns bool ``(len(samples_16k) // 160,)``."""
    power = frame_power(samples_16k, EDGE_FRAME_SAMPLES)
    threshold = background_power * 10.0 ** (EDGE_ABOVE_BACKGROUND_DB / 10.0)
    if speech_power is not None:
        threshold = max(threshold, speech_power * 10.0 ** (-EDGE_BELOW_SPEECH_DB / 10.0))
    return power > threshold


def edge_background_power(samples_16k: np.ndarray, segments: list[SpeechSegment], background_power: float) -> float:
    """The background level soft onsets and endings are judged against: the clip's background estimate, or the
    10th percentile of the 10 ms frames outside the speech when that is lower (a clip with almost no pause gets a
    minimum-statistics estimate from inside the speech, which can sit above a soft /s/ before it)."""
    power = frame_power(samples_16k, EDGE_FRAME_SAMPLES)
    times = (np.arange(len(power)) + 0.5) * EDGE_FRAME_SAMPLES / VAD_SAMPLING_RATE
    outside = np.ones(len(power), dtype=bool)
    for seg in segments:
        outside &= (times < seg.start_s) | (times >= seg.end_s)
    if np.count_nonzero(outside) < 3:
        return background_power
    return max(NOISE_POWER_FLOOR, min(background_power, float(np.percentile(power[outside], 10))))


def sound_duration_s(samples_16k: np.ndarray, background_power: float) -> float:
    """Seconds of a 16 kHz clip that hold sound well above its background: frames within 40 dB of the loudest 10 ms
    frame (``SOUND_BELOW_PEAK_DB``) and ``EDGE_ABOVE_BACKGROUND_DB`` above the background. Used to tell "too short" (a single syllable, which the
    VAD may not even call speech) from "no speech" (a long stretch of noise or music)."""
    power = frame_power(samples_16k, EDGE_FRAME_SAMPLES)
    if power.size == 0:
        return 0.0
    threshold = max(background_power * 10.0 ** (EDGE_ABOVE_BACKGROUND_DB / 10.0),
                    float(power.max()) * 10.0 ** (-SOUND_BELOW_PEAK_DB / 10.0))
    return float(np.count_nonzero(power > threshold)) * EDGE_FRAME_SAMPLES / VAD_SAMPLING_RATE


def extend_edges(start_s: float, end_s: float, sound: np.ndarray, *, max_extension_s: float,
                 lower_s: float, upper_s: float) -> tuple[float, float]:
    """Move the first speech start earlier and the last speech end later over adjoining sound the VAD left out:
    a soft onset (a fricative such as /s/, a breathy start) before the voicing, a soft ending (breath, decay) after.

    Walks 10 ms frames of ``sound`` (from ``sound_frames``) outward from each edge while they hold sound, bridging
    quiet gaps up to ``EDGE_MAX_GAP_S``, by at most ``max_extension_s``, never past ``lower_s`` / ``upper_s``.

    Returns:
        (start_s, end_s), seconds.
    """
    frame_s = EDGE_FRAME_SAMPLES / VAD_SAMPLING_RATE
    max_frames = int(round(max_extension_s / frame_s))
    max_gap = int(round(EDGE_MAX_GAP_S / frame_s))

    def walk(edge_frame: int, step: int, limit_frame: int) -> int:
        best = edge_frame
        gap = 0
        frame = edge_frame
        for _ in range(max_frames):
            frame += step
            if (step < 0 and frame < limit_frame) or (step > 0 and frame > limit_frame) or not 0 <= frame < len(sound):
                break
            if sound[frame]:
                best, gap = frame, 0
            else:
                gap += 1
                if gap > max_gap:
                    break
        return best

    first = int(start_s / frame_s)
    last = int(math.ceil(end_s / frame_s)) - 1
    new_first = walk(first, -1, int(math.ceil(lower_s / frame_s)))
    new_last = walk(last, +1, int(upper_s / frame_s) - 1)
    return min(start_s, new_first * frame_s), max(end_s, (new_last + 1) * frame_s)
