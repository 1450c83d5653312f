"""Reference cleanup that keeps whole first and last phonemes, a report whose numbers are right (band limits,
bounded SNR, clipping with DC, a lone syllable, clean clips without leading silence), a transcript that follows a
crop, and messages rendered with the caller's file name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tts_app.audio.reference import ReferenceCache
from tts_app.audio.reference import prepare_reference as _prepare_reference
from tts_app.config import ReferenceConfig
from tts_app.errors import ReferenceAudioError

RATE = 24000
# These tests check the full cleanup (trim, filter, shorten pauses, level); "auto" (the default) is tested
# at the end of test_reference.py.
CONFIG = ReferenceConfig(cleanup="full")


def prepare_reference(source, **kwargs):
    """``tts_app.audio.reference.prepare_reference`` with the full cleanup unless a config is given."""
    kwargs.setdefault("config", CONFIG)
    return _prepare_reference(source, **kwargs)
CLEAN = ["en_female_1.wav", "en_male_1.wav", "en_female_2.wav", "zh_female_1.wav", "zh_male_1.wav",
         "zh_female_2.wav"]


def _entry(manifest: dict, name: str) -> dict:
    return next(item for item in manifest["files"] if item["name"] == name)


def _speech(data_dir, manifest, name: str) -> np.ndarray:
    """The clip's speech only (ground-truth boundaries), float32 at 24 kHz."""
    samples, rate = sf.read(data_dir / name, dtype="float32")
    entry = _entry(manifest, name)
    assert rate == RATE
    return samples[int(entry["speech_start_s"] * rate): int(entry["speech_end_s"] * rate)]


def _band_noise(num: int, low_hz: float, high_hz: float, rms: float, seed: int = 0) -> np.ndarray:
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(num))
    freqs = np.fft.rfftfreq(num, 1 / RATE)
    spectrum[(freqs < low_hz) | (freqs > high_hz)] = 0
    noise = np.fft.irfft(spectrum, num)
    return (noise / np.sqrt(np.mean(noise ** 2)) * rms).astype(np.float32)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.float32)


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def _start_in_input(output: np.ndarray, signal: np.ndarray, search_s: float = 1.5) -> float:
    """Where (seconds into ``signal``) the cleaned ``output`` begins: the lag that best matches the output's first
    second against the input (the cleanup keeps the first stretch as is, up to gain and a 50 Hz high-pass)."""
    probe = output[int(0.05 * RATE): int(1.05 * RATE)].astype(np.float64)
    best, best_lag = -1.0, 0
    for lag in range(0, int(search_s * RATE)):
        piece = signal[lag + int(0.05 * RATE): lag + int(1.05 * RATE)].astype(np.float64)
        if len(piece) < len(probe):
            break
        score = float(np.dot(piece, probe)) / (np.linalg.norm(piece) * np.linalg.norm(probe) + 1e-12)
        if score > best:
            best, best_lag = score, lag
    assert best > 0.95, best
    return best_lag / RATE


# --------------------------------------------------------------------------------------------- trimming (item 6)


@pytest.mark.parametrize("kind", ["fricative", "quiet fricative", "breathy"])
def test_a_soft_onset_is_kept_whole_with_a_margin_before_it(data_dir, audio_manifest, kind):
    speech = _speech(data_dir, audio_manifest, "en_female_1.wav")
    level = _rms(speech)
    if kind == "breathy":  # broadband breath rising over 200 ms into the voice
        onset = _band_noise(int(0.2 * RATE), 200, 6000, level * 10 ** (-30 / 20)) * np.linspace(0, 1, int(0.2 * RATE),
                                                                                                 dtype=np.float32)
    else:  # /s/: 150 ms of 3.5-9 kHz noise, 25 or 35 dB below the speech, right before the voicing
        db = -25 if kind == "fricative" else -35
        onset = _band_noise(int(0.15 * RATE), 3500, 9000, level * 10 ** (db / 20))
        onset[: int(0.02 * RATE)] *= np.linspace(0, 1, int(0.02 * RATE), dtype=np.float32)
    signal = np.concatenate([_silence(0.6), onset, speech, _silence(0.5)])
    onset_s = 0.6 + (0.06 if kind == "breathy" else 0.0)  # the breath is inaudible for its first 60 ms
    ref, report = prepare_reference((signal, RATE), target_sampling_rate=RATE)
    begins_s = _start_in_input(ref.samples, signal)
    assert begins_s == pytest.approx(report.kept_start_s, abs=0.005)
    # The whole onset and at least 100 ms (at most ~200 ms) of the room before it are kept.
    assert onset_s - 0.2 <= begins_s <= onset_s - 0.1, (begins_s, report.speech_start_s)


def test_a_soft_ending_is_kept_with_a_margin_after_it(data_dir, audio_manifest):
    speech = _speech(data_dir, audio_manifest, "en_female_1.wav")
    tail = _band_noise(int(0.3 * RATE), 200, 6000, _rms(speech) * 10 ** (-30 / 20))
    tail *= np.exp(-np.arange(len(tail)) / RATE / 0.06).astype(np.float32)  # a breath decaying over ~150 ms
    signal = np.concatenate([_silence(0.5), speech, tail, _silence(0.6)])
    ref, report = prepare_reference((signal, RATE), target_sampling_rate=RATE)
    voice_end_s = 0.5 + len(speech) / RATE
    audible_end_s = voice_end_s + 0.06 * np.log(10 ** (20 / 20))  # where the breath is 50 dB below the speech
    assert report.kept_end_s >= audible_end_s + 0.1
    assert report.output_duration_s == pytest.approx(report.kept_end_s - report.kept_start_s, abs=0.01)


def test_the_margin_is_bounded_by_the_file(data_dir, audio_manifest):
    speech = _speech(data_dir, audio_manifest, "en_female_1.wav")
    onset = _band_noise(int(0.15 * RATE), 3500, 9000, _rms(speech) * 10 ** (-25 / 20))
    signal = np.concatenate([_silence(0.04), onset, speech, _silence(0.02)])
    ref, report = prepare_reference((signal, RATE), target_sampling_rate=RATE)
    assert report.kept_start_s == 0.0 and report.kept_end_s == pytest.approx(len(signal) / RATE, abs=1e-3)
    assert ref.duration_s == pytest.approx(len(signal) / RATE, abs=0.01)


@pytest.mark.parametrize("name", CLEAN)
def test_clean_clips_keep_100_to_200_ms_before_and_after_the_speech(data_dir, audio_manifest, name):
    entry = _entry(audio_manifest, name)
    _, report = prepare_reference(data_dir / name, target_sampling_rate=RATE)
    assert 0.1 <= entry["speech_start_s"] - report.kept_start_s <= 0.25
    assert 0.1 <= report.kept_end_s - entry["speech_end_s"] <= 0.3


# --------------------------------------------------------------------------------------------- report (item 7)


def test_telephone_band_audio_is_warned_and_full_band_audio_is_not(data_dir, audio_manifest):
    _, phone = prepare_reference(data_dir / "en_female_2__tel_8k.wav", target_sampling_rate=RATE)
    assert phone.bandwidth_hz < 4000 and "band_limited" in phone.to_dict()["warning_codes"]
    assert any("telephone" in w and "3.5 kHz" in w for w in phone.warnings)
    # The same band at 24 kHz (a low-passed or low-bitrate file that keeps a high sampling rate) is found too.
    samples, _ = sf.read(data_dir / "en_female_1.wav", dtype="float32")
    spectrum = np.fft.rfft(samples)
    spectrum[np.fft.rfftfreq(len(samples), 1 / RATE) > 3400] = 0
    _, lowpassed = prepare_reference((np.fft.irfft(spectrum, len(samples)).astype(np.float32), RATE),
                                     target_sampling_rate=RATE)
    assert "band_limited" in lowpassed.to_dict()["warning_codes"]
    for name in CLEAN + ["zh_female_1__ogg_22k05.ogg", "en_female_1__mp3_stereo_44k1_padded.mp3"]:
        _, report = prepare_reference(data_dir / name, target_sampling_rate=RATE)
        assert report.bandwidth_hz > 6000 and "band_limited" not in report.to_dict()["warning_codes"], name


@pytest.mark.parametrize("name", CLEAN)
def test_clean_speech_with_no_silence_around_it_has_no_warnings(data_dir, audio_manifest, name):
    speech = _speech(data_dir, audio_manifest, name)
    _, report = prepare_reference((speech, RATE), target_sampling_rate=RATE, name=name)
    assert report.warnings == [] and report.snr_db > 35


def test_a_music_bed_louder_than_the_voice_gives_a_bounded_snr_and_says_music(data_dir, audio_manifest):
    speech = _speech(data_dir, audio_manifest, "zh_male_1.wav")
    t = np.arange(int(len(speech) + 1.0 * RATE)) / RATE
    chords = [(261.6, 329.6, 392.0), (220.0, 261.6, 329.6)]
    bed = np.zeros_like(t)
    for i, chord in enumerate(chords * 4):  # piano-like: notes with harmonics, 1.5 s per chord
        part = (t >= i * 1.5) & (t < (i + 1) * 1.5)
        bed[part] = sum(np.sin(2 * np.pi * h * f * t[part]) / h for f in chord for h in (1, 2, 3))
    # 6 dB louder than the voice in the pauses, ducked to the voice's level under it (as a mixed podcast intro):
    # the pauses are louder than the speech frames, which once made "SNR -182 dB".
    bed = (bed / _rms(bed) * _rms(speech) * 2.0).astype(np.float32)
    under = slice(int(0.5 * RATE), int(0.5 * RATE) + len(speech))
    signal = bed.copy()
    signal[under] = 0.5 * bed[under] + speech
    _, report = prepare_reference((signal, RATE), target_sampling_rate=RATE)
    assert -20.0 <= report.snr_db <= 5.0
    assert report.background == "music-like" and any("music-like" in w for w in report.warnings)
    assert all("-1" not in w.split("SNR")[-1][:6] for w in report.warnings)  # never "-182 dB"


def test_clipping_is_measured_after_removing_a_dc_offset(data_dir):
    clipped, _ = sf.read(data_dir / "en_female_1__clipped.wav", dtype="float32")
    _, plain = prepare_reference((clipped, RATE), target_sampling_rate=RATE)
    # Clipped, then turned down and shifted: the flat tops sit at +0.95, the flat bottoms at -0.65.
    _, shifted = prepare_reference((clipped * 0.8 + 0.15, RATE), target_sampling_rate=RATE)
    assert plain.clipping_share == pytest.approx(0.029, abs=0.005)
    assert shifted.clipping_share == pytest.approx(plain.clipping_share, rel=0.1)
    assert any("clipped (2.9%" in w for w in shifted.warnings)


@pytest.mark.parametrize("name", ["zh_male_1.wav", "en_male_1.wav"])
def test_a_single_syllable_is_too_short_not_no_speech(data_dir, audio_manifest, name):
    # The first 0.3 s of zh_male_1 is one syllable the VAD does not call speech at all; en_male_1's it does.
    syllable = _speech(data_dir, audio_manifest, name)[: int(0.3 * RATE)].copy()
    fade = np.linspace(0, 1, int(0.01 * RATE), dtype=np.float32)
    syllable[: len(fade)] *= fade
    syllable[-len(fade):] *= fade[::-1]
    with pytest.raises(ReferenceAudioError, match=r"too short: (it holds about 0\.3 s of sound|0\.[23]\d s of "
                                                  r"speech); at least 1 s") as caught:
        prepare_reference((np.concatenate([_silence(0.5), syllable, _silence(0.5)]), RATE), target_sampling_rate=RATE)
    assert caught.value.report.errors == [str(caught.value)] and caught.value.report.speech_kept_s is None


def test_a_too_short_report_and_its_message_give_the_same_numbers(data_dir):
    with pytest.raises(ReferenceAudioError) as caught:
        prepare_reference(data_dir / "en_male_1__too_short_0.4s.wav", target_sampling_rate=RATE)
    report = caught.value.report
    assert f"{report.speech_s:.2f} s of speech" in str(caught.value)
    assert report.speech_kept_s is None and report.kept_start_s is None  # nothing was kept, and none is claimed


def test_messages_use_words_not_setting_names(data_dir):
    names = ["en_female_1__long_45s.wav", "en_male_1__flac_48k_pinknoise_hum50.flac", "zh_male_1__music_bed.wav",
             "en_female_2__tel_8k.wav", "en_female_1__clipped.wav", "corrupt_random_data.wav",
             "en_male_1__too_short_0.4s.wav", "silence_digital_5s.wav"]
    messages = []
    for name in names:
        try:
            messages += prepare_reference(data_dir / name, target_sampling_rate=RATE, reference_text="Hi.")[1].warnings
        except ReferenceAudioError as error:
            messages.append(str(error))
    assert len(messages) >= 8
    for message in messages:
        assert "_s=" not in message and "_db" not in message and "max_" not in message and "min_" not in message, message


def test_a_file_that_is_not_audio_gets_a_readable_message(tmp_path):
    fake = tmp_path / "notes.wav"
    fake.write_text("these are my notes, not a recording\n" * 20, encoding="utf-8")
    with pytest.raises(ReferenceAudioError, match=r"'notes\.wav' is not an audio file this app can read"):
        prepare_reference(fake, target_sampling_rate=RATE)


# --------------------------------------------------------------------------------------------- transcript (item 8)


def test_a_cropped_long_clip_keeps_the_sentences_it_still_holds(data_dir, audio_manifest):
    entry = _entry(audio_manifest, "en_female_1__long_45s.wav")
    ref, report = prepare_reference(data_dir / "en_female_1__long_45s.wav", target_sampling_rate=RATE,
                                    reference_text=entry["transcript"])
    assert report.cropped and report.reference_text_status == "shortened"
    kept = next(n for n in range(1, 8) if report.reference_text == " ".join(entry["segment_transcripts"][:n]))
    # The audio ends in the pause after sentence ``kept``: the transcript and the audio hold the same sentences.
    segments = entry["speech_segments"]
    assert segments[kept - 1][1] < report.crop_at_s < segments[kept][0]
    kept_speech_s = sum(end - start for start, end in segments[:kept])
    assert report.speech_kept_s == pytest.approx(kept_speech_s, rel=0.1)  # VAD speech: short pauses excluded
    assert any("shortened to its first" in w for w in report.warnings)


def test_a_transcript_that_cannot_follow_the_crop_is_dropped_and_the_user_told(data_dir):
    _, report = prepare_reference(data_dir / "en_female_1__long_45s.wav", target_sampling_rate=RATE,
                                  reference_text="The morning train was late again.")
    assert report.reference_text_status == "dropped" and report.reference_text is None
    assert any("reference text" in w and "not used" in w for w in report.warnings)
    _, whole = prepare_reference(data_dir / "en_female_2.wav", target_sampling_rate=RATE, reference_text=" anything ")
    assert (whole.reference_text_status, whole.reference_text) == ("kept", "anything")
    assert not any("reference text" in w for w in whole.warnings)


# --------------------------------------------------------------------------------------------- names (item 10)


@pytest.mark.parametrize("other", ["copy.wav", "my {name} 100%.wav"])
def test_a_cached_clip_is_worded_for_each_callers_own_file_name(data_dir, other):
    cache = ReferenceCache()
    content = (data_dir / "en_female_1__clipped.wav").read_bytes()
    _, first = prepare_reference(content, target_sampling_rate=RATE, cache=cache, name="take1.wav")
    _, second = prepare_reference(content, target_sampling_rate=RATE, cache=cache, name=other)
    assert cache.hits == 1
    assert all("'take1.wav'" in w for w in first.warnings if "reference audio" in w)
    assert second.warnings and all("take1" not in w for w in second.warnings)
    assert any(repr(other) in w for w in second.warnings)
    assert json.dumps(second.to_dict())  # still JSON-able
    silent = (data_dir / "silence_digital_5s.wav").read_bytes()
    for name in ("a.wav", other):
        with pytest.raises(ReferenceAudioError) as caught:
            prepare_reference(silent, target_sampling_rate=RATE, cache=cache, name=name)
        assert repr(name) in str(caught.value) and caught.value.report.name == name
        assert caught.value.report.errors == [str(caught.value)]
