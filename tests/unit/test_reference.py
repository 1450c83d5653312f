"""Reference-audio cleanup on the real (synthetic-voice) clips in tests/data, with the manifest's ground truth."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import soundfile as sf

from tts_app.audio import reference as reference_module
from tts_app.audio.cli import main as cli_main
from tts_app.audio.reference import ReferenceCache, ReferenceReport
from tts_app.audio.reference import prepare_reference as _prepare_reference
from tts_app.config import ReferenceConfig
from tts_app.errors import InputError, ReferenceAudioError
from tts_app.request import ReferenceAudio

RATE = 24000
# These tests check the full cleanup (trim, filter, shorten pauses, level); "auto" (the default) is tested
# at the end of test_reference.py.
CONFIG = ReferenceConfig(cleanup="full")


def prepare_reference(source, **kwargs):
    """``tts_app.audio.reference.prepare_reference`` with the full cleanup unless a config is given."""
    kwargs.setdefault("config", CONFIG)
    return _prepare_reference(source, **kwargs)
SPEECH_FILES = [
    "en_female_1.wav", "en_male_1.wav", "en_female_2.wav", "zh_female_1.wav", "zh_male_1.wav", "zh_female_2.wav",
    "en_female_1__mp3_stereo_44k1_padded.mp3", "en_male_1__flac_48k_pinknoise_hum50.flac",
    "zh_female_1__ogg_22k05.ogg", "zh_male_1__music_bed.wav", "en_female_2__tel_8k.wav",
    "zh_female_2__pcm24_48k.wav", "en_female_1__float32_16k.wav", "en_female_1__clipped.wav",
    "en_female_2__stereo_inverted_right.wav", "zh_female_1__float32_nan_inf.wav", "zh_male_1__aac.m4a",
    "en_female_1__long_45s.wav",
]
_CACHE = ReferenceCache(max_entries=64)


@pytest.fixture(scope="module")
def processed(data_dir):
    """name -> (ref, report), each file processed once per module (shared cache)."""
    def run(name: str):
        return prepare_reference(data_dir / name, target_sampling_rate=RATE, cache=_CACHE)
    return run


def _entry(manifest: dict, name: str) -> dict:
    return next(item for item in manifest["files"] if item["name"] == name)


def _rms_dbfs(samples: np.ndarray) -> float:
    return 10 * np.log10(max(float(np.mean(np.square(samples, dtype=np.float64))), 1e-20))


def _frame_dbfs(samples: np.ndarray, rate: int, frame_ms: float = 20.0) -> np.ndarray:
    frame = int(rate * frame_ms / 1000)
    num = len(samples) // frame
    power = np.mean(np.square(samples[: num * frame].reshape(num, frame), dtype=np.float64), axis=1)
    return 10 * np.log10(np.maximum(power, 1e-20))


@pytest.mark.parametrize("name", SPEECH_FILES)
def test_speech_start_and_end_match_ground_truth(processed, audio_manifest, name):
    entry = _entry(audio_manifest, name)
    ref, report = processed(name)
    assert report.speech_start_s == pytest.approx(entry["speech_start_s"], abs=0.15)
    assert report.speech_end_s == pytest.approx(entry["speech_end_s"], abs=0.15)
    assert isinstance(ref, ReferenceAudio) and ref.sampling_rate == RATE and ref.key == report.key != ""
    assert ref.samples.dtype == np.float32 and ref.samples.ndim == 1
    assert np.all(np.isfinite(ref.samples))
    # No clipping introduced: the peak ceiling holds even for the clipped input.
    assert float(np.max(np.abs(ref.samples))) <= 10 ** (CONFIG.peak_ceiling_dbfs / 20) + 1e-4


@pytest.mark.parametrize("name", ["en_female_1__mp3_stereo_44k1_padded.mp3", "en_female_1.wav"])
def test_silence_padding_is_trimmed_to_the_vad_pad(processed, audio_manifest, name):
    entry = _entry(audio_manifest, name)
    ref, report = processed(name)
    speech_s = entry["speech_end_s"] - entry["speech_start_s"]
    # Output = speech + vad_pad_ms each side (+/- VAD edge accuracy); the 2.5 s / 1.5 s pads are gone.
    assert ref.duration_s == pytest.approx(speech_s + 2 * CONFIG.vad_pad_ms / 1000, abs=0.2)
    # The first and last 5 ms are not loud speech: the pad kept the onset/offset inside the clip.
    head_tail = np.concatenate([ref.samples[: RATE // 200], ref.samples[-RATE // 200:]])
    assert _rms_dbfs(head_tail) < _rms_dbfs(ref.samples) - 20


def test_padded_mp3_and_its_clean_source_give_the_same_clip(processed):
    mp3, _ = processed("en_female_1__mp3_stereo_44k1_padded.mp3")
    wav, _ = processed("en_female_1.wav")
    assert mp3.duration_s == pytest.approx(wav.duration_s, abs=0.05)
    assert _rms_dbfs(mp3.samples) == pytest.approx(_rms_dbfs(wav.samples), abs=1.0)


def test_speech_is_normalised_to_the_target_loudness_without_exceeding_the_ceiling(processed):
    for name in ["en_female_1.wav", "zh_female_1__ogg_22k05.ogg", "en_female_1__clipped.wav"]:
        ref, report = processed(name)
        peak_dbfs = 20 * np.log10(float(np.max(np.abs(ref.samples))))
        loud = _frame_dbfs(ref.samples, RATE)
        speech_dbfs = 10 * np.log10(np.mean(10 ** (loud[loud > -50] / 10)))
        limited = peak_dbfs == pytest.approx(CONFIG.peak_ceiling_dbfs, abs=0.05)
        assert speech_dbfs <= CONFIG.target_loudness_dbfs + 1.0
        assert limited or speech_dbfs == pytest.approx(CONFIG.target_loudness_dbfs, abs=1.5), name


def test_quiet_input_is_amplified_to_the_same_clip_with_a_warning(data_dir, processed):
    import soundfile as sf

    samples, rate = sf.read(data_dir / "en_female_1.wav", dtype="float32")
    quiet_ref, quiet_report = prepare_reference((samples * 10 ** (-30 / 20), rate), target_sampling_rate=RATE)
    ref, _ = processed("en_female_1.wav")
    # The VAD may place an edge one 32 ms window differently at a lower level; the clip is otherwise the same.
    assert quiet_ref.duration_s == pytest.approx(ref.duration_s, abs=0.1)
    assert _rms_dbfs(quiet_ref.samples) == pytest.approx(_rms_dbfs(ref.samples), abs=0.5)
    assert any("quiet" in warning for warning in quiet_report.warnings)


def test_polarity_inverted_stereo_uses_one_channel_not_silence(processed):
    ref, report = processed("en_female_2__stereo_inverted_right.wav")
    clean, _ = processed("en_female_2.wav")
    assert report.channel_used is not None
    assert any("polarity" in warning for warning in report.warnings)
    assert len(ref.samples) == len(clean.samples)
    assert np.corrcoef(ref.samples, clean.samples)[0, 1] > 0.99


def test_nan_and_inf_samples_are_zeroed_with_a_warning(processed, audio_manifest):
    entry = _entry(audio_manifest, "zh_female_1__float32_nan_inf.wav")
    ref, report = processed("zh_female_1__float32_nan_inf.wav")
    assert report.nonfinite_samples == entry["nan_count"] + entry["posinf_count"] + entry["neginf_count"]
    assert any("NaN" in warning for warning in report.warnings)
    assert np.all(np.isfinite(ref.samples))


def test_mostly_nan_audio_is_refused():
    samples = np.random.default_rng(0).standard_normal(48000).astype(np.float32) * 0.1
    samples[::3] = np.nan
    with pytest.raises(ReferenceAudioError, match="NaN"):
        prepare_reference((samples, 24000), target_sampling_rate=RATE)


@pytest.mark.parametrize("name, message", [
    ("corrupt_empty_0_bytes.wav", r"corrupt_empty_0_bytes\.wav.*empty"),
    ("corrupt_random_data.wav", r"corrupt_random_data\.wav.*no speech"),
    ("silence_digital_5s.wav", r"silence_digital_5s\.wav.*no speech"),
    ("silence_near_-70dBFS_5s.wav", r"silence_near_-70dBFS_5s\.wav.*no speech"),
    ("en_male_1__too_short_0.4s.wav", r"too_short_0\.4s\.wav.*too short.*at least 1 s"),
])
def test_unusable_files_are_refused_with_a_message_naming_the_file(data_dir, name, message):
    with pytest.raises(ReferenceAudioError, match=message) as caught:
        prepare_reference(data_dir / name, target_sampling_rate=RATE)
    report = getattr(caught.value, "report", None)
    if report is not None:
        assert report.errors == [str(caught.value)]


def test_truncated_wav_is_used_with_a_warning(data_dir):
    ref, report = prepare_reference(data_dir / "corrupt_truncated_data.wav", target_sampling_rate=RATE)
    assert report.truncated and ref.duration_s > 1.5
    assert any("truncated" in warning for warning in report.warnings)


def test_clipped_input_is_reported(processed):
    _, report = processed("en_female_1__clipped.wav")
    assert report.clipping_share == pytest.approx(0.029, abs=0.005)
    assert any("clipped" in warning for warning in report.warnings)
    _, clean = processed("en_female_1.wav")
    assert clean.clipping_share < 1e-4 and not any("clipped" in warning for warning in clean.warnings)


def test_clipped_then_turned_down_audio_is_still_reported_clipped(data_dir):
    import soundfile as sf

    clipped, rate = sf.read(data_dir / "en_female_1__clipped.wav", dtype="float32")
    _, report = prepare_reference((clipped * 0.5, rate), target_sampling_rate=RATE)
    assert report.clipping_share == pytest.approx(0.029, abs=0.005)
    assert any("clipped" in warning for warning in report.warnings)


def test_noisy_and_music_backgrounds_are_reported(processed):
    _, noisy = processed("en_male_1__flac_48k_pinknoise_hum50.flac")
    _, music = processed("zh_male_1__music_bed.wav")
    _, clean = processed("zh_male_1.wav")
    assert noisy.background == "noise" and any("noisy background" in w for w in noisy.warnings)
    assert music.background == "music-like" and any("music-like" in w for w in music.warnings)
    # Ground truth: pink noise at 20 dB SNR (the hum is notched out first); music bed 18 dB below the speech.
    assert 16 < noisy.snr_db < 24
    assert 14 < music.snr_db < 22
    assert clean.snr_db > 40 and not any("background" in w for w in clean.warnings)


def test_long_clip_is_cropped_at_a_pause(processed, data_dir, audio_manifest):
    import soundfile as sf

    entry = _entry(audio_manifest, "en_female_1__long_45s.wav")
    ref, report = processed("en_female_1__long_45s.wav")
    assert report.cropped and report.speech_kept_s <= CONFIG.max_speech_s
    assert report.speech_kept_s > CONFIG.max_speech_s / 2
    assert any("cropped" in warning for warning in report.warnings)
    # The crop point lies in a pause of the original: low energy in the 100 ms around it.
    original, rate = sf.read(data_dir / "en_female_1__long_45s.wav", dtype="float32")
    at = int(report.crop_at_s * rate)
    assert _rms_dbfs(original[at - rate // 20: at + rate // 20]) < _rms_dbfs(original) - 30
    assert any(end <= report.crop_at_s <= start for (_, end), (start, _) in
               zip(entry["speech_segments"], entry["speech_segments"][1:]))
    # The clip ends quietly (no word cut off) and its internal 1.8 s pauses were shortened.
    assert _rms_dbfs(ref.samples[-RATE // 20:]) < _rms_dbfs(ref.samples) - 30
    assert report.pauses_shortened >= 1
    silent = _frame_dbfs(ref.samples, RATE) < -60
    longest = max(len(run) for run in "".join("s" if s else "." for s in silent).split(".")) * 0.02
    assert longest <= CONFIG.max_internal_pause_ms / 1000 + 0.05


def test_cache_skips_the_vad_on_the_second_call(data_dir, monkeypatch):
    calls = []
    real = reference_module.speech_probabilities
    monkeypatch.setattr(reference_module, "speech_probabilities", lambda x: calls.append(len(x)) or real(x))
    cache = ReferenceCache(max_entries=2)
    first, _ = prepare_reference(data_dir / "zh_female_2.wav", target_sampling_rate=RATE, cache=cache)
    second, report = prepare_reference(data_dir / "zh_female_2.wav", target_sampling_rate=RATE, cache=cache)
    assert len(calls) == 1
    np.testing.assert_array_equal(first.samples, second.samples)
    # Same content as bytes: same key, still cached.
    prepare_reference((data_dir / "zh_female_2.wav").read_bytes(), target_sampling_rate=RATE, cache=cache)
    assert len(calls) == 1
    # Another target rate or setting is another entry.
    other, _ = prepare_reference(data_dir / "zh_female_2.wav", target_sampling_rate=16000, cache=cache)
    assert len(calls) == 2 and other.sampling_rate == 16000 and other.key != first.key
    # Bounded LRU: a third entry evicts the least recently used (the 24 kHz one).
    prepare_reference(data_dir / "zh_female_2.wav", target_sampling_rate=22050, cache=cache)
    assert len(cache) == 2 and first.key not in cache
    # Refusals are cached too.
    for _ in range(2):
        with pytest.raises(ReferenceAudioError, match="no speech"):
            prepare_reference(data_dir / "silence_near_-70dBFS_5s.wav", target_sampling_rate=RATE, cache=cache)
    assert len(calls) == 4


def test_a_prepare_reads_the_clip_once_to_hash_it(data_dir, monkeypatch):
    """The preparer's ``sha256`` and the cache key's content hash are one hash (was: each read the whole file)."""
    import builtins

    from tts_app.audio import preparer as preparer_module
    from tts_app.audio.preparer import ReferencePreparer

    path = data_dir / "zh_female_2.wav"
    reads = []

    def counted_open(file, *args, **kwargs):
        reads.append(str(file))
        return builtins.open(file, *args, **kwargs)

    for module in (reference_module, preparer_module):  # the modules that hash a source
        monkeypatch.setattr(module, "open", counted_open, raising=False)
    preparer = ReferencePreparer(RATE)
    for _ in range(2):  # computed, then from the cache: hashed once each time
        reads.clear()
        prepared = preparer.prepare(path)
        assert reads == [str(path)]
    assert prepared.sha256 == reference_module.source_sha256(path)


def test_cache_runs_the_vad_once_for_concurrent_requests(data_dir, monkeypatch):
    calls = []
    real = reference_module.speech_probabilities
    monkeypatch.setattr(reference_module, "speech_probabilities", lambda x: calls.append(1) or real(x))
    cache = ReferenceCache()
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        prepare_reference(data_dir / "zh_male_1.wav", target_sampling_rate=RATE, cache=cache)[0].key))
        for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 4


def test_array_input_mono_stereo_and_int16(data_dir, processed):
    import soundfile as sf

    samples, rate = sf.read(data_dir / "en_female_2.wav", dtype="int16")
    ref_int, _ = prepare_reference((samples, rate), target_sampling_rate=RATE)
    ref_stereo, report = prepare_reference((np.stack([samples, samples], axis=1), rate), target_sampling_rate=RATE)
    clean, _ = processed("en_female_2.wav")
    np.testing.assert_allclose(ref_int.samples, clean.samples, atol=1e-4)
    np.testing.assert_allclose(ref_stereo.samples, clean.samples, atol=1e-4)
    assert report.channels == 2 and report.channel_used is None and report.format == "array"


def test_report_is_json_serialisable(processed):
    _, report = processed("en_female_1__mp3_stereo_44k1_padded.mp3")
    assert isinstance(report, ReferenceReport)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["format"] == "MP3" and data["channels"] == 2 and data["sampling_rate"] == 44100
    assert data["duration_s"] == pytest.approx(9.68, abs=0.01)


def test_cli_prints_json_and_writes_the_clip(data_dir, tmp_path, capsys):
    import soundfile as sf

    out = tmp_path / "clean.wav"
    code = cli_main([str(data_dir / "zh_female_2__pcm24_48k.wav"), "--json", "--out", str(out),
                     "--sampling-rate", "16000"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sampling_rate"] == 48000 and report["output_sampling_rate"] == 16000
    info = sf.info(out)
    assert info.samplerate == 16000 and info.duration == pytest.approx(report["output_duration_s"], abs=0.01)


def test_cli_unusable_audio_exits_1_with_the_message(data_dir, capsys):
    code = cli_main([str(data_dir / "en_male_1__too_short_0.4s.wav")])
    captured = capsys.readouterr()
    assert code == 1
    assert "too short" in captured.err and "Traceback" not in captured.err


def test_cache_hits_name_the_callers_file(data_dir):
    cache = ReferenceCache()
    content = (data_dir / "en_female_1__clipped.wav").read_bytes()
    _, first = prepare_reference(content, target_sampling_rate=RATE, cache=cache, name="take1.wav")
    _, second = prepare_reference(content, target_sampling_rate=RATE, cache=cache, name="take2.wav")
    assert first.key == second.key and second.name == "take2.wav"
    assert any("'take1.wav' is clipped" in w for w in first.warnings)
    assert any("'take2.wav' is clipped" in w for w in second.warnings)
    assert not any("take1" in w for w in second.warnings)
    silent = (data_dir / "silence_digital_5s.wav").read_bytes()
    with pytest.raises(ReferenceAudioError, match="'a.wav'"):
        prepare_reference(silent, target_sampling_rate=RATE, cache=cache, name="a.wav")
    with pytest.raises(ReferenceAudioError, match="'b.wav'") as caught:
        prepare_reference(silent, target_sampling_rate=RATE, cache=cache, name="b.wav")
    assert "a.wav" not in str(caught.value) and caught.value.report.name == "b.wav"


def test_speech_without_a_pause_before_max_speech_s_is_cut_at_its_quietest_point(data_dir):
    import soundfile as sf

    original, rate = sf.read(data_dir / "en_female_1__long_45s.wav", dtype="float32")
    config = ReferenceConfig(cleanup="full", max_speech_s=1.5, min_speech_s=0.5)  # first VAD segment: 1.73 s, no pause
    ref, report = prepare_reference((original[: 8 * rate], rate), target_sampling_rate=RATE, config=config)
    assert report.cropped and report.speech_kept_s <= 1.5
    assert any("quietest point" in warning for warning in report.warnings)
    at = int(report.crop_at_s * rate)
    first_words = original[int(report.speech_start_s * rate): at]
    assert _rms_dbfs(original[at - rate // 50: at + rate // 50]) < _rms_dbfs(first_words) - 10


def test_long_file_is_decoded_only_up_to_max_decode_s(data_dir):
    config = ReferenceConfig(cleanup="full", max_decode_s=20.0, max_speech_s=30.0)
    ref, report = prepare_reference(data_dir / "en_female_1__long_45s.wav", target_sampling_rate=RATE, config=config)
    assert report.head_only and report.duration_s == pytest.approx(20.0)
    assert any("first 20 s" in warning for warning in report.warnings)
    # The sentence running into the 20 s decode limit is not kept half-spoken.
    assert report.cropped and report.crop_at_s < 19.0
    assert _rms_dbfs(ref.samples[-RATE // 20:]) < _rms_dbfs(ref.samples) - 30


@pytest.mark.parametrize("field, value", [("vad_threshold", 1.5), ("min_speech_s", 20.0), ("max_decode_s", 0.0)])
def test_unworkable_config_is_refused_naming_the_field(data_dir, field, value):
    from dataclasses import replace

    from tts_app.errors import InputError

    with pytest.raises(InputError, match=field):
        prepare_reference(data_dir / "en_female_2.wav", target_sampling_rate=RATE,
                          config=replace(CONFIG, **{field: value}))


def test_mains_hum_is_detected_and_notched_out(processed, data_dir):
    from tts_app.audio.decode import load_audio
    from tts_app.audio.reference import detect_hum

    ref, report = processed("en_male_1__flac_48k_pinknoise_hum50.flac")
    assert report.hum_hz[0] == 50.0
    assert any("50 Hz mains hum" in warning for warning in report.warnings)
    samples, rate, _ = load_audio(data_dir / "en_male_1__flac_48k_pinknoise_hum50.flac")
    assert detect_hum(samples[:, 0], rate)[0] == 50.0
    assert detect_hum(ref.samples, ref.sampling_rate) == []
    for name in ["en_male_1.wav", "zh_male_1__music_bed.wav", "en_female_2__tel_8k.wav"]:
        assert processed(name)[1].hum_hz == []


def test_batched_vad_finds_the_same_speech_as_the_sequential_pass(data_dir):
    import soundfile as sf
    import torch
    import torchaudio.functional as AF

    from tts_app.audio.vad import speech_probabilities, speech_segments

    samples, rate = sf.read(data_dir / "en_female_1__long_45s.wav", dtype="float32")
    samples_16k = AF.resample(torch.from_numpy(samples[: 20 * rate]), rate, 16000).numpy()
    batched = speech_segments(speech_probabilities(samples_16k), len(samples_16k), threshold=0.5)
    sequential = speech_segments(speech_probabilities(samples_16k, batched=False), len(samples_16k), threshold=0.5)
    assert len(batched) == len(sequential) >= 5
    for a, b in zip(batched, sequential):
        assert a.start_s == pytest.approx(b.start_s, abs=0.065) and a.end_s == pytest.approx(b.end_s, abs=0.065)


def test_python_m_tts_app_reference_exits_1_without_a_traceback(data_dir):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    bad = subprocess.run([sys.executable, "-m", "tts_app", "reference", str(data_dir / "silence_digital_5s.wav")],
                         capture_output=True, text=True, env=env, cwd=root, timeout=120)
    assert bad.returncode == 1
    assert "no speech" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_text_report_reads_as_words_not_python_values(data_dir, capsys):
    assert cli_main([str(data_dir / "en_female_1.wav")]) == 0
    out = capsys.readouterr().out
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line and not line.startswith("warn"))
    assert fields["cropped"] == "no" and fields["crop_at_s"] == "—" and fields["hum_hz"] == "—"
    assert "None" not in out and "False" not in out and "True" not in out and "[]" not in out


@pytest.mark.parametrize("rate", ["100", "0", "-5", "400000", "fast"])
def test_cli_sampling_rate_outside_8k_192k_is_a_usage_error(data_dir, capsys, tmp_path, rate):
    code = cli_main([str(data_dir / "en_female_1.wav"), "--sampling-rate", rate, "--out", str(tmp_path / "o.wav")])
    assert code == 2 and "--sampling-rate" in capsys.readouterr().err
    assert not (tmp_path / "o.wav").exists()


# ------------------------------------------------------------------ reference_cleanup: auto / full / off


def test_cleanup_auto_checks_and_reports_but_only_resamples_as_upstream_does(data_dir):
    """auto (the default): the same checks and warnings as full, but the clip the model hears is the file made mono
    and resampled (what transformers' processors get in their docs), and the report says so."""
    import torch
    import torchaudio.functional as AF

    from tts_app.audio.preparer import ReferencePreparer
    from tts_app.config import DEFAULT_REFERENCE_CLEANUP
    from tts_app.request import SynthesisParams

    assert DEFAULT_REFERENCE_CLEANUP == SynthesisParams().reference_cleanup == "auto"
    path = data_dir / "en_male_1__flac_48k_pinknoise_hum50.flac"
    preparer = ReferencePreparer(24000)
    auto = preparer.prepare(path)
    full = preparer.prepare(path, cleanup="full")
    off = preparer.prepare(path, cleanup="off")
    samples, rate = sf.read(path, dtype="float32", always_2d=True)
    upstream = AF.resample(torch.from_numpy(samples.mean(axis=1)), rate, 24000).numpy()
    np.testing.assert_allclose(auto.audio.samples, upstream, atol=1e-6)
    np.testing.assert_allclose(off.audio.samples, upstream, atol=1e-6)
    assert auto.report.cleanup == "auto" and auto.report.changes == ["resampled 48000 -> 24000 Hz"]
    assert {"hum_kept", "noisy"} <= {n.code for n in auto.report.notices}  # checked and reported, not changed
    assert off.report.notices == [] and off.report.changes == ["resampled 48000 -> 24000 Hz"]
    # full: today's cleaning, every change named
    assert len(full.audio.samples) < len(auto.audio.samples)
    assert any("high-pass" in c for c in full.report.changes) and any("trimmed" in c for c in full.report.changes)
    assert any("loudness" in c for c in full.report.changes) and any("hum" in c for c in full.report.changes)


def test_cleanup_is_refused_when_unknown_and_still_refuses_silence(data_dir):
    from tts_app.audio.preparer import ReferencePreparer

    preparer = ReferencePreparer(24000)
    with pytest.raises(InputError, match="auto, full, off"):
        preparer.prepare(data_dir / "en_female_1.wav", cleanup="light")
    with pytest.raises(ReferenceAudioError):
        preparer.prepare(data_dir / "silence_digital_5s.wav", cleanup="auto")
