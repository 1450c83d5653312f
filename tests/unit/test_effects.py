"""Speed, target duration, loudness and output formats on real speech (tests/data), checked by independent measures:
torchaudio's pitch detector, FFmpeg's own EBU R128 meter (``ebur128`` filter), decoding each format back."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tts_app.audio.effects import apply_request_effects, apply_tempo, normalize_loudness, time_stretch
from tts_app.audio.formats import decode_audio, encode_audio
from tts_app.errors import InputError


@pytest.fixture(scope="module")
def speech(data_dir):
    audio, rate = sf.read(data_dir / "en_female_1.wav", dtype="float32")
    return audio, rate


def median_pitch_hz(audio: np.ndarray, rate: int) -> float:
    """Median of torchaudio's frame pitch estimates over the frames with speech energy."""
    import torch
    import torchaudio.functional as F

    pitch = F.detect_pitch_frequency(torch.from_numpy(audio)[None], rate, freq_low=80, freq_high=400)[0].numpy()
    frame = len(audio) // len(pitch)
    energy = np.array([np.sqrt(np.mean(audio[i * frame:(i + 1) * frame] ** 2)) for i in range(len(pitch))])
    voiced = pitch[energy > 0.3 * energy.max()]
    return float(np.median(voiced))


def ffmpeg_loudness_lufs(audio: np.ndarray, rate: int) -> float:
    """Integrated loudness by FFmpeg's ebur128 filter (an implementation independent of pyloudnorm)."""
    import av
    import av.filter

    graph = av.filter.Graph()
    source = graph.add_abuffer(format="flt", sample_rate=rate, layout="mono")
    meter = graph.add("ebur128", "metadata=1")
    sink = graph.add("abuffersink")
    source.link_to(meter)
    meter.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(audio[None, :], dtype=np.float32), format="flt",
                                       layout="mono")
    frame.sample_rate, frame.pts = rate, 0
    graph.push(frame)
    graph.push(None)
    value = None
    while True:
        try:
            out = graph.pull()
        except (av.error.EOFError, av.error.BlockingIOError):
            break
        value = out.metadata.get("lavfi.r128.I", value)
    return float(value)


def test_speed_1_25_shortens_by_a_fifth_and_keeps_the_pitch(speech):
    audio, rate = speech
    faster = time_stretch(audio, rate, 1.25)
    assert len(faster) / len(audio) == pytest.approx(0.8, abs=0.01)
    before, after = median_pitch_hz(audio, rate), median_pitch_hz(faster, rate)
    assert after == pytest.approx(before, rel=0.03), (before, after)
    # a plain resample (what a naive speed-up does) moves the pitch by the same 25 %: the check can fail
    naive = np.interp(np.arange(0, len(audio), 1.25), np.arange(len(audio)), audio).astype(np.float32)
    assert median_pitch_hz(naive, rate) == pytest.approx(before * 1.25, rel=0.05)


def test_target_duration_is_met_within_50_ms(speech):
    audio, rate = speech
    for target_s in (4.0, 5.55, 9.0):
        result = apply_tempo(audio, rate, duration_s=target_s)
        assert abs(len(result.audio) / rate - target_s) <= 0.05
        assert result.source == "duration_s" and result.speed == pytest.approx(len(audio) / rate / target_s)


def test_factors_outside_the_sane_range_are_refused_with_the_range(speech):
    audio, rate = speech
    with pytest.raises(InputError, match="outside 0.5-2.0"):
        time_stretch(audio, rate, 3.0)
    with pytest.raises(InputError, match=r"needs speed 6\.\d+, outside 0.5-2.0: give a target between"):
        apply_tempo(audio, rate, duration_s=1.0)
    with pytest.raises(InputError, match="not both"):
        apply_tempo(audio, rate, speed=1.1, duration_s=3.0)


@pytest.mark.parametrize("target", [-23.0, -16.0])
def test_loudness_lands_within_1_lu_of_the_target(speech, target):
    audio, rate = speech
    quiet = audio * 0.1
    result = normalize_loudness(quiet, rate, target)
    assert abs(ffmpeg_loudness_lufs(result.audio, rate) - target) <= 1.0
    assert np.max(np.abs(result.audio)) <= 10 ** (-1 / 20) + 1e-6  # peak ceiling -1 dBFS


def test_loud_targets_are_met_by_limiting_the_peaks(speech):
    audio, rate = speech  # peaks at -3 dBFS at -20 LUFS: -12 LUFS needs 8 dB more than the peaks allow
    result = normalize_loudness(audio, rate, -12.0)
    assert abs(ffmpeg_loudness_lufs(result.audio, rate) - (-12.0)) <= 1.0
    assert np.max(np.abs(result.audio)) <= 10 ** (-1 / 20) + 1e-6 and len(result.audio) == len(audio)


def test_request_effects_scale_segment_spans_and_record_what_ran(speech):
    audio, rate = speech
    spans = [(0.0, 2.0), (2.5, len(audio) / rate)]
    effects = apply_request_effects(audio, spans, rate, speed=1.25, loudness_lufs=-20.0)
    assert effects.spans[1][0] == pytest.approx(2.0) and effects.spans[-1][1] <= len(effects.audio) / rate + 1e-9
    assert effects.applied["speed"] == 1.25 and effects.applied["speed_source"] == "speed"
    assert effects.applied["loudness"]["target_lufs"] == -20.0 and "BS.1770" in effects.applied["loudness"]["standard"]


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus"])
@pytest.mark.parametrize("rate", [24000, 44100])
def test_each_format_decodes_to_the_same_speech(speech, fmt, rate):
    audio, source_rate = speech
    if rate != source_rate:
        audio = np.interp(np.arange(0, len(audio), source_rate / rate), np.arange(len(audio)), audio)
        audio = audio.astype(np.float32)
    data = encode_audio(audio, rate, fmt)
    decoded, decoded_rate = decode_audio(data)
    duration_s = len(audio) / rate
    assert abs(len(decoded) / decoded_rate - duration_s) < 0.08  # codec priming/padding only
    if fmt in ("wav", "flac"):
        assert decoded_rate == rate
        np.testing.assert_allclose(decoded, np.round(np.clip(audio, -1, 1) * 32767) / 32768, atol=2e-4)
    else:  # lossy: the same loudness within 1 LU
        assert abs(ffmpeg_loudness_lufs(decoded, decoded_rate) - ffmpeg_loudness_lufs(audio, rate)) < 1.0
