"""The reference report's noise estimate on mixes of known SNR (issue 23 item 6): speech from tests/data with band
noise or a piano-like chord bed 10, 20 and 30 dB below it, digital silence around it, speech at -40 dBFS. The SNR
is measured on the VAD's speech frames against the frames where no speech is heard (digital silence left out);
each mix must read within a few dB of what it was made with, and the report must give the right verdict."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tts_app.audio.reference import prepare_reference

RATE = 24000
TOLERANCE_DB = 3.0


def _speech(data_dir, manifest, name: str) -> np.ndarray:
    """The clip's speech only (ground-truth boundaries), float64 at 24 kHz."""
    samples, rate = sf.read(data_dir / name, dtype="float64")
    entry = next(item for item in manifest["files"] if item["name"] == name)
    assert rate == RATE
    return samples[int(entry["speech_start_s"] * rate): int(entry["speech_end_s"] * rate)]


def _active_power(speech: np.ndarray) -> float:
    """Mean power of the 20 ms frames of a clean clip within 40 dB of its loudest frame: the level of the speech
    itself, not of its pauses (the idea of ITU-T P.56's active speech level)."""
    frame = int(0.02 * RATE)
    num = len(speech) // frame
    power = np.mean(speech[: num * frame].reshape(num, frame) ** 2, axis=1)
    return float(np.mean(power[power > power.max() * 1e-4]))


def _band_noise(num: int, seed: int = 0) -> np.ndarray:
    """Gaussian noise of unit power between 100 Hz and 7 kHz: inside the 16 kHz band the report analyses, so its
    level there is its whole level."""
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(num))
    freqs = np.fft.rfftfreq(num, 1 / RATE)
    spectrum[(freqs < 100.0) | (freqs > 7000.0)] = 0
    noise = np.fft.irfft(spectrum, num)
    return noise / np.sqrt(np.mean(noise ** 2))


def _piano_bed(num: int) -> np.ndarray:
    """Unit-power chords with harmonics, 1.5 s each (a piano-like music bed)."""
    t = np.arange(num) / RATE
    bed = np.zeros(num)
    for i in range(int(num / RATE / 1.5) + 1):
        chord = ((261.6, 329.6, 392.0), (220.0, 261.6, 329.6))[i % 2]
        part = (t >= i * 1.5) & (t < (i + 1) * 1.5)
        bed[part] = sum(np.sin(2 * np.pi * h * f * t[part]) / h for f in chord for h in (1, 2, 3))
    return bed / np.sqrt(np.mean(bed ** 2))


def _report(signal: np.ndarray):
    _, report = prepare_reference((signal.astype(np.float32), RATE), target_sampling_rate=RATE)
    return report


def _codes(report) -> set[str]:
    return {notice.code for notice in report.notices}


def _pad(speech: np.ndarray, seconds: float) -> np.ndarray:
    silence = np.zeros(int(seconds * RATE))
    return np.concatenate([silence, speech, silence])


@pytest.mark.parametrize("name", ["zh_female_1.wav", "en_male_1.wav"])
@pytest.mark.parametrize("snr_db", [10, 20, 30])
@pytest.mark.parametrize("kind", ["noise", "music-like"])
def test_a_mix_of_known_snr_reads_within_a_few_db_with_the_right_verdict(data_dir, audio_manifest, name, snr_db,
                                                                          kind):
    speech = _pad(_speech(data_dir, audio_manifest, name), 1.0)
    background = _band_noise(len(speech)) if kind == "noise" else _piano_bed(len(speech))
    level = np.sqrt(_active_power(_speech(data_dir, audio_manifest, name)) * 10 ** (-snr_db / 10))
    report = _report(speech + level * background)
    assert abs(report.snr_db - snr_db) <= TOLERANCE_DB, report.snr_db
    assert report.background == kind
    if kind == "music-like":  # music is warned while it is within 35 dB of the voice
        assert "music" in _codes(report) and "as loud as the voice" not in " ".join(report.warnings)
    else:  # noise is warned below the 25 dB of a clean recording
        assert ("noisy" in _codes(report)) == (snr_db < 25)


@pytest.mark.parametrize("padding_s", [0.5, 3.0])
def test_noise_under_the_voice_is_heard_through_digital_silence_padding(data_dir, audio_manifest, padding_s):
    """An editor padded a noisy recording with zeros: the zeros are not its background (averaged in, 3 s of them
    read 'SNR 25 dB' for noise 10 dB below the voice, and no warning)."""
    clean = _speech(data_dir, audio_manifest, "zh_female_1.wav")
    noisy = clean + np.sqrt(_active_power(clean) * 0.1) * _band_noise(len(clean))
    report = _report(_pad(noisy, padding_s))
    assert abs(report.snr_db - 10.0) <= TOLERANCE_DB, report.snr_db
    assert "noisy" in _codes(report)


@pytest.mark.parametrize("name", ["zh_female_1.wav", "en_male_1.wav", "zh_male_1.wav"])
@pytest.mark.parametrize("padding_s", [0.5, 3.0])
def test_a_clean_clip_with_digital_silence_around_it_is_clean(data_dir, audio_manifest, name, padding_s):
    report = _report(_pad(_speech(data_dir, audio_manifest, name), padding_s))
    assert report.snr_db > 35 and not _codes(report) & {"noisy", "music"}, report.warnings


@pytest.mark.parametrize("name", ["zh_female_1.wav", "en_female_2.wav"])
def test_clean_speech_at_minus_40_dbfs_is_quiet_not_noisy_or_music(data_dir, audio_manifest, name):
    speech = _speech(data_dir, audio_manifest, name)
    speech = speech * np.sqrt(10 ** (-40 / 10) / _active_power(speech))  # active speech level -40 dBFS
    report = _report(_pad(speech, 1.0))
    assert not _codes(report) & {"noisy", "music"}, report.warnings
    assert report.snr_db > 35 and report.background == "silent"
