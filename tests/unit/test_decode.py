"""Decoding reference audio files: every format in tests/data, bytes input, broken files, head-only reads."""

from __future__ import annotations

import numpy as np
import pytest

from tts_app.audio.decode import load_audio
from tts_app.errors import ReferenceAudioError

FORMAT_FILES = [
    "en_female_2__tel_8k.wav",                   # 8 kHz 16-bit
    "zh_female_2__pcm24_48k.wav",                # 24-bit WAVE_FORMAT_EXTENSIBLE
    "en_female_1__float32_16k.wav",              # 32-bit float
    "en_female_1__mp3_stereo_44k1_padded.mp3",   # MP3 stereo
    "zh_female_1__ogg_22k05.ogg",                # Ogg Vorbis
    "en_male_1__flac_48k_pinknoise_hum50.flac",  # FLAC
    "zh_male_1__aac.m4a",                        # AAC in MP4: PyAV
]



def _rendered(info) -> list[str]:
    """The decoder's warnings as the user reads them (they are Notices, worded for the file's name when shown)."""
    return [notice.render(info.name) for notice in info.warnings]

def _entry(manifest: dict, name: str) -> dict:
    return next(item for item in manifest["files"] if item["name"] == name)


@pytest.mark.parametrize("name", FORMAT_FILES)
def test_formats_decode_with_the_files_rate_channels_and_length(data_dir, audio_manifest, name):
    entry = _entry(audio_manifest, name)
    samples, sampling_rate, info = load_audio(data_dir / name)
    assert samples.dtype == np.float32 and samples.ndim == 2
    assert sampling_rate == entry["sample_rate"] == info.sampling_rate
    assert samples.shape[1] == entry["channels"] == info.channels
    # AAC may decode up to one 1024-sample frame longer than its edit list says (see manifest note).
    assert abs(samples.shape[0] / sampling_rate - entry["duration_s"]) < 0.05
    assert 0.1 < float(np.max(np.abs(samples))) <= 1.0
    assert info.format == entry["format"]
    assert not info.truncated and not info.head_only and info.warnings == []


def test_m4a_goes_through_pyav_and_wav_through_soundfile(data_dir):
    assert load_audio(data_dir / "zh_male_1__aac.m4a")[2].decoder == "pyav"
    assert load_audio(data_dir / "en_female_1.wav")[2].decoder == "soundfile"


@pytest.mark.parametrize("name", ["en_female_1.wav", "zh_male_1__aac.m4a"])
def test_bytes_decode_like_the_file(data_dir, name):
    from_path, rate_a, _ = load_audio(data_dir / name)
    from_bytes, rate_b, info = load_audio((data_dir / name).read_bytes(), name="upload")
    assert rate_a == rate_b
    np.testing.assert_array_equal(from_path, from_bytes)
    assert info.name == "upload"


def test_zero_byte_file_is_refused_naming_the_file(data_dir):
    with pytest.raises(ReferenceAudioError, match=r"corrupt_empty_0_bytes\.wav.*empty"):
        load_audio(data_dir / "corrupt_empty_0_bytes.wav")
    with pytest.raises(ReferenceAudioError, match="empty"):
        load_audio(b"")


def test_missing_file_is_refused_naming_the_path(tmp_path):
    with pytest.raises(ReferenceAudioError, match="nope.wav.*does not exist"):
        load_audio(tmp_path / "nope.wav")


def test_garbage_without_a_header_is_refused(tmp_path):
    path = tmp_path / "garbage.wav"
    path.write_bytes(np.random.default_rng(0).bytes(20000))
    with pytest.raises(ReferenceAudioError, match=r"garbage\.wav.*is not an audio file this app can read"):
        load_audio(path)


def test_truncated_wav_decodes_its_head_with_a_warning(data_dir, audio_manifest):
    entry = _entry(audio_manifest, "corrupt_truncated_data.wav")
    samples, sampling_rate, info = load_audio(data_dir / "corrupt_truncated_data.wav")
    assert samples.shape[0] == entry["actual_complete_frames"]
    assert info.truncated
    assert info.file_duration_s == pytest.approx(entry["duration_s"], abs=0.01)
    assert any("truncated" in warning for warning in _rendered(info))


@pytest.mark.parametrize("name, full_s", [("en_male_1__flac_48k_pinknoise_hum50.flac", 6.05),
                                          ("en_female_1__mp3_stereo_44k1_padded.mp3", 9.68)])
def test_half_a_flac_or_mp3_decodes_its_head_with_a_truncation_warning(data_dir, name, full_s):
    content = (data_dir / name).read_bytes()
    samples, sampling_rate, info = load_audio(content[: len(content) // 2], name="half")
    assert 0.3 * full_s < samples.shape[0] / sampling_rate < 0.7 * full_s
    assert info.truncated and info.file_duration_s == pytest.approx(full_s, abs=0.01)
    assert any("'half' is truncated" in warning for warning in _rendered(info))


def test_truncated_m4a_without_its_index_is_refused(data_dir):
    content = (data_dir / "zh_male_1__aac.m4a").read_bytes()
    with pytest.raises(ReferenceAudioError, match="'half.m4a' is not an audio file this app can read"):
        load_audio(content[: len(content) // 2], name="half.m4a")


@pytest.mark.parametrize("name", ["en_female_1__long_45s.wav", "zh_male_1__aac.m4a"])
def test_long_files_are_read_only_up_to_max_decode_s(data_dir, name):
    samples, sampling_rate, info = load_audio(data_dir / name, max_decode_s=2.0)
    assert samples.shape[0] == 2 * sampling_rate
    assert info.head_only
    assert any("first 2 s" in warning for warning in _rendered(info))


@pytest.mark.parametrize("subtype, tolerance", [("PCM_U8", 1 / 64), ("PCM_16", 1e-4), ("PCM_24", 1e-4),
                                                ("PCM_32", 1e-4), ("FLOAT", 1e-6), ("DOUBLE", 1e-6)])
def test_every_wav_sample_width_decodes_to_the_same_waveform(data_dir, tmp_path, subtype, tolerance):
    import soundfile as sf

    original, rate = sf.read(data_dir / "en_female_2.wav", dtype="float32")
    path = tmp_path / f"en_female_2_{subtype}.wav"
    sf.write(path, original, rate, subtype=subtype)
    samples, sampling_rate, info = load_audio(path)
    assert sampling_rate == rate and info.subtype == subtype and samples.shape == (len(original), 1)
    np.testing.assert_allclose(samples[:, 0], original, atol=tolerance)
