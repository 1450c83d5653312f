"""Output audio formats: WAV / FLAC (soundfile, 16-bit PCM, lossless) and MP3 / Opus (PyAV: FFmpeg's libmp3lame and
libopus encoders). Arrays in, bytes out; the caller writes them atomically.

The format is chosen by the output file's ending (``format_for_path``): ``.wav``, ``.flac``, ``.mp3``, ``.opus``
(Ogg Opus, RFC 7845). Bit rates: MP3 192 kbit/s CBR mono and Opus 64 kbit/s, both transparent for speech (Opus is
designed for speech at far lower rates, RFC 6716 §2.1.1; 64 kbit/s is its recommended full-band music rate).
Opus only runs at 8/12/16/24/48 kHz, so other rates (Dia's 44.1 kHz) are resampled to 48 kHz by FFmpeg's resampler.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from tts_app.errors import InputError

#: file ending -> (format name, what the sidecar's ``audio.format`` says)
FORMATS: dict[str, tuple[str, str]] = {
    ".wav": ("wav", "WAV PCM_16"),
    ".flac": ("flac", "FLAC PCM_16"),
    ".mp3": ("mp3", "MP3 192 kbit/s CBR"),
    ".opus": ("opus", "Ogg Opus 64 kbit/s"),
}
#: the format names, in the order offered (``--format``, JSONL ``format``, the web app's choices)
AUDIO_FORMATS: tuple[str, ...] = tuple(name for name, _ in FORMATS.values())
MP3_BIT_RATE = 192_000
OPUS_BIT_RATE = 64_000
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def format_for_path(path: str | Path) -> str:
    """"wav", "flac", "mp3" or "opus" from the file's ending.

    Raises:
        InputError: another ending (the message lists the supported ones).
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"output file {Path(path).name!r}: unknown audio format {suffix or '(no ending)'!r}; end "
                         f"the name with one of {', '.join(FORMATS)}")
    return FORMATS[suffix][0]


def format_label(fmt: str) -> str:
    """The sidecar's description of format ``fmt``."""
    return next(label for name, label in FORMATS.values() if name == fmt)


def encode_audio(audio: np.ndarray, sampling_rate: int, fmt: str) -> bytes:
    """Encode a float waveform ``(num_samples,)`` in [-1, 1] (clipped) as ``fmt`` ("wav", "flac", "mp3", "opus").

    Raises:
        InputError: unknown format.
    """
    samples = np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)
    if fmt in ("wav", "flac"):
        import soundfile as sf

        buf = io.BytesIO()
        sf.write(buf, samples, int(sampling_rate), format=fmt.upper(), subtype="PCM_16")
        return buf.getvalue()
    if fmt == "mp3":
        return _encode_pyav(samples, int(sampling_rate), container="mp3", codec="libmp3lame", bit_rate=MP3_BIT_RATE)
    if fmt == "opus":
        return _encode_pyav(samples, int(sampling_rate), container="ogg", codec="libopus", bit_rate=OPUS_BIT_RATE)
    raise InputError(f"unknown audio format {fmt!r}; use one of {', '.join(n for n, _ in FORMATS.values())}")


def _encode_pyav(samples: np.ndarray, sampling_rate: int, *, container: str, codec: str, bit_rate: int) -> bytes:
    import av

    out_rate = sampling_rate
    if codec == "libopus" and sampling_rate not in OPUS_RATES:
        out_rate = 48000
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as output:
        stream = output.add_stream(codec, rate=out_rate, layout="mono")
        stream.bit_rate = bit_rate
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
        frame.sample_rate = sampling_rate
        # the encoder's own sample format and frame size (libmp3lame: planar float, 1152; libopus: 960 at 48 kHz)
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=out_rate,
                                      frame_size=stream.codec_context.frame_size or None)
        for chunk in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(chunk):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buf.getvalue()


def decode_audio(data: bytes | str | Path) -> tuple[np.ndarray, int]:
    """(float32 mono samples, rate) of an encoded file in any of ``FORMATS`` (PyAV), for checks and tests."""
    import av

    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else str(data)
    parts, rate = [], 0
    with av.open(source) as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono")
        for frame in container.decode(stream):
            rate = frame.sample_rate
            for out in resampler.resample(frame):
                parts.append(out.to_ndarray().reshape(-1))
    audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return audio.astype(np.float32), int(rate)
