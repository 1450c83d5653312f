"""Decode audio files (path or bytes) to float32 arrays.

WAV (8/16/24/32-bit int, float), FLAC, OGG and MP3 go through soundfile (libsndfile); anything libsndfile does not
recognise (M4A/AAC, Opus in WebM, ...) goes through PyAV, which bundles its own FFmpeg (no system ffmpeg needed).
File I/O lives only here; everything downstream is arrays in, arrays out.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tts_app.audio.notices import Notice, refusal
from tts_app.frontend import messages

# soundfile reads in blocks so a file that breaks half way still gives its good head (a truncated FLAC/MP3).
_READ_BLOCK_FRAMES = 1 << 16
# A file this much shorter than its header claims is reported truncated (compressed formats estimate lengths).
_LENGTH_TOLERANCE_S = 0.05
# libsndfile's log (``SoundFile.extra_info``) says "data : 248160 (should be 124081)" when the WAV data chunk is
# shorter than its header claims.
_SNDFILE_SHORT_CHUNK = re.compile(r"^\s*data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)


@dataclass
class DecodeInfo:
    """What the decoder found out about the file.

    Attributes:
        name: the file name (or the caller's label for bytes), used in messages.
        format: container format, e.g. "WAV", "FLAC", "OGG", "MP3", "M4A".
        subtype: sample encoding or codec, e.g. "PCM_16", "PCM_24", "FLOAT", "VORBIS", "AAC"; None when unknown.
        sampling_rate: Hz of the decoded samples (the file's own rate).
        channels: number of channels decoded.
        duration_s: seconds actually decoded (after a head-only read, or a truncated file).
        file_duration_s: seconds the file's header claims; None when the container does not say.
        decoder: "soundfile" or "pyav".
        truncated: the file holds less audio than its header claims (or decoding broke off part way).
        head_only: decoding stopped at ``max_decode_s``; the file is longer.
        warnings: notes about the above, as ``Notice`` s (rendered with the clip's name when shown).
    """

    name: str
    format: str
    subtype: str | None
    sampling_rate: int
    channels: int
    duration_s: float
    file_duration_s: float | None
    decoder: str
    truncated: bool = False
    head_only: bool = False
    warnings: list[Notice] = field(default_factory=list)


def _source_name(source: str | Path | bytes, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(source, (str, Path)):
        return Path(source).name
    return "<uploaded bytes>"


def load_audio(source: str | Path | bytes, *, max_decode_s: float | None = None, name: str | None = None
               ) -> tuple[np.ndarray, int, DecodeInfo]:
    """Decode an audio file.

    Args:
        source: a file path, or the file's content as bytes.
        max_decode_s: decode at most this many seconds from the start (the head of a long file); None = all.
        name: label used in messages (default: the file name, or "<uploaded bytes>").

    Returns:
        (samples, sampling_rate, info): float32 array ``(num_samples, channels)`` with values nominally in [-1, 1]
        (float files may exceed it and may hold NaN/Inf; the caller cleans them), the file's sampling rate in Hz,
        and a ``DecodeInfo``.

    Raises:
        ReferenceAudioError: missing, empty, unreadable or undecodable file, or one that decodes to no samples;
            the message names the file and the problem.
    """
    label = _source_name(source, name)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise refusal("empty", label, key="empty_upload")
        opener = lambda: io.BytesIO(data)  # noqa: E731 - each decoder needs a fresh stream
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise refusal("missing", label)
        if path.stat().st_size == 0:
            raise refusal("empty", label)
        opener = lambda: str(path)  # noqa: E731
    else:
        raise refusal("unsupported_source", label, kind=type(source).__name__)

    try:
        samples, sampling_rate, info = _load_soundfile(opener(), label, max_decode_s)
    except _NotForSoundfile as sf_error:
        try:
            samples, sampling_rate, info = _load_pyav(opener(), label, max_decode_s)
        except _NotForPyAV as av_error:
            raise refusal("not_audio", label, detail=f"soundfile: {sf_error}; FFmpeg: {av_error}") from None
    if samples.shape[0] == 0:
        raise refusal("no_samples", label, key="no_samples_decoded")
    return samples, sampling_rate, info


class _NotForSoundfile(Exception):
    pass


class _NotForPyAV(Exception):
    pass


def _load_soundfile(file, label: str, max_decode_s: float | None) -> tuple[np.ndarray, int, DecodeInfo]:
    import soundfile as sf

    try:
        handle = sf.SoundFile(file)
    except (sf.LibsndfileError, RuntimeError, TypeError) as error:
        # "Error opening 'x.wav': Format not recognised." -> the reason only (the caller names the file).
        raise _NotForSoundfile(str(error).rsplit(": ", 1)[-1].strip()) from None
    with handle:
        sampling_rate, channels = int(handle.samplerate), int(handle.channels)
        frames_in_file = int(handle.frames) if handle.frames and handle.frames > 0 else None
        claimed_frames = frames_in_file
        log = handle.extra_info or ""
        short = _SNDFILE_SHORT_CHUNK.search(log)
        if short and int(short.group(1)) > int(short.group(2)):
            claimed_frames = int(short.group(1)) // _bytes_per_frame(handle)
        max_frames = None if max_decode_s is None else int(max_decode_s * sampling_rate)
        blocks: list[np.ndarray] = []
        num_read = 0
        broke_off = None
        while max_frames is None or num_read < max_frames:
            want = _READ_BLOCK_FRAMES if max_frames is None else min(_READ_BLOCK_FRAMES, max_frames - num_read)
            try:
                block = handle.read(want, dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError) as error:
                broke_off = str(error)
                break
            if block.shape[0] == 0:
                break
            blocks.append(block)
            num_read += block.shape[0]
            if block.shape[0] < want:
                break
        head_only = max_frames is not None and num_read >= max_frames and (
            frames_in_file is None or frames_in_file > max_frames)
        fmt, subtype = handle.format, handle.subtype
    samples = np.concatenate(blocks) if blocks else np.zeros((0, channels), dtype=np.float32)
    if broke_off is not None and not blocks:
        raise _NotForSoundfile(f"decoding failed: {broke_off}")
    info = DecodeInfo(
        name=label, format="WAV" if fmt in ("WAV", "WAVEX", "RF64", "W64") else fmt, subtype=subtype,
        sampling_rate=sampling_rate, channels=channels, duration_s=num_read / sampling_rate,
        file_duration_s=None if claimed_frames is None else claimed_frames / sampling_rate,
        decoder="soundfile", head_only=head_only)
    # Compressed formats only estimate their length in the header; 50 ms short is not a truncated file.
    truncated = broke_off is not None or (
        claimed_frames is not None and not head_only
        and num_read < claimed_frames - int(_LENGTH_TOLERANCE_S * sampling_rate))
    if truncated:
        info.truncated = True
        claimed = (messages.Notice("ref_claimed_s", seconds=info.file_duration_s) if info.file_duration_s
                   else messages.Notice("ref_claimed_more"))
        info.warnings.append(Notice("truncated", {"claimed": claimed, "decoded_s": info.duration_s}))
    if head_only:
        info.warnings.append(_head_only_notice(max_decode_s))
    return samples, sampling_rate, info


def _head_only_notice(max_decode_s: float | None) -> Notice:
    return Notice("head_only", {"max_decode_s": max_decode_s}, key="head_only_read")


def _bytes_per_frame(handle) -> int:
    bits = {"PCM_S8": 8, "PCM_U8": 8, "PCM_16": 16, "PCM_24": 24, "PCM_32": 32, "FLOAT": 32, "DOUBLE": 64,
            "ULAW": 8, "ALAW": 8}.get(handle.subtype, 16)
    return max(1, bits // 8 * int(handle.channels))


def _load_pyav(file, label: str, max_decode_s: float | None) -> tuple[np.ndarray, int, DecodeInfo]:
    import av

    try:
        container = av.open(file, mode="r")
    except (av.error.FFmpegError, ValueError, OSError) as error:
        raise _NotForPyAV(getattr(error, "strerror", None) or str(error)) from None
    with container:
        if not container.streams.audio:
            raise _NotForPyAV("no audio stream in the file")
        stream = container.streams.audio[0]
        codec = stream.codec_context.name
        sampling_rate = int(stream.codec_context.sample_rate or stream.rate or 0)
        if sampling_rate <= 0:
            raise _NotForPyAV("audio stream has no sampling rate")
        file_duration_s = None
        if stream.duration is not None and stream.time_base is not None:
            file_duration_s = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            file_duration_s = container.duration / 1_000_000.0
        max_frames = None if max_decode_s is None else int(max_decode_s * sampling_rate)
        chunks: list[np.ndarray] = []
        num_read = 0
        broke_off = None
        try:
            for frame in container.decode(stream):
                # to_ndarray: (channels, n) for planar formats, (1, n * channels) for packed ones.
                array = frame.to_ndarray()
                num_channels = len(frame.layout.channels)
                if frame.format.is_planar:
                    block = array.T
                else:
                    block = array.reshape(-1, num_channels)
                block = _to_float32(block, frame.format.name)
                chunks.append(block)
                num_read += block.shape[0]
                if max_frames is not None and num_read >= max_frames:
                    break
        except (av.error.FFmpegError, ValueError) as error:
            broke_off = str(error)
        container_name = container.format.name
    if not chunks:
        raise _NotForPyAV(f"no audio decoded{': ' + broke_off if broke_off else ''}")
    samples = np.concatenate(chunks)
    head_only = max_frames is not None and num_read >= max_frames
    if head_only:
        samples = samples[:max_frames]
    fmt = _container_format(container_name, label)
    info = DecodeInfo(name=label, format=fmt, subtype=codec.upper(), sampling_rate=sampling_rate,
                      channels=int(samples.shape[1]), duration_s=samples.shape[0] / sampling_rate,
                      file_duration_s=file_duration_s, decoder="pyav", head_only=head_only)
    if broke_off is not None:
        info.truncated = True
        info.warnings.append(Notice("truncated", {"decoded_s": info.duration_s, "detail": broke_off},
                                    key="truncated_damaged"))
    if head_only:
        info.warnings.append(_head_only_notice(max_decode_s))
    return np.ascontiguousarray(samples, dtype=np.float32), sampling_rate, info


def _to_float32(block: np.ndarray, sample_format: str) -> np.ndarray:
    """FFmpeg sample formats -> float32 in [-1, 1] (u8 is offset binary; s16/s32 are two's complement)."""
    if block.dtype.kind == "f":
        return block.astype(np.float32, copy=False)
    if sample_format.startswith("u8"):
        return (block.astype(np.float32) - 128.0) / 128.0
    scale = float(2 ** (8 * block.dtype.itemsize - 1))
    return block.astype(np.float32) / scale


def _container_format(container_name: str, label: str) -> str:
    """FFmpeg names demuxers by a comma list ("mov,mp4,m4a,3gp,3g2,mj2"); prefer the entry matching the suffix."""
    names = container_name.split(",")
    suffix = Path(label).suffix.lower().lstrip(".")
    return (suffix if suffix in names else names[0]).upper()


# ------------------------------------------------------------------------------------------------ header probing

# Magic bytes of the audio containers the decoders read (offset, bytes, format); from each format's specification
# (RIFF/WAVE, RF64 EBU Tech 3306, AIFF, FLAC, Ogg RFC 3533, ID3v2, ISO BMFF 'ftyp', EBML/Matroska, CAF, AMR RFC 4867,
# Sun .au, WavPack, Monkey's Audio).
_AUDIO_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"RIFF", "WAV"), (0, b"RF64", "WAV"), (0, b"BW64", "WAV"), (0, b"FORM", "AIFF"), (0, b"fLaC", "FLAC"),
    (0, b"OggS", "OGG"), (0, b"ID3", "MP3"), (4, b"ftyp", "M4A"), (0, b"\x1a\x45\xdf\xa3", "WEBM"),
    (0, b"caff", "CAF"), (0, b"#!AMR", "AMR"), (0, b".snd", "AU"), (0, b"wvpk", "WV"), (0, b"MAC ", "APE"),
)
# Common non-audio files, named in the message so the user sees what they picked instead.
_OTHER_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"), (b"%PDF", "a PDF"),
    (b"PK\x03\x04", "a ZIP archive"), (b"\x7fELF", "a program"), (b"{", "JSON text"),
)
#: Bytes ``sniff_audio_format`` needs from the start of a file.
PROBE_BYTES = 64


def sniff_audio_format(head: bytes) -> tuple[str | None, str]:
    """What the first bytes of a file say it is, without decoding it.

    Args:
        head: at least the first ``PROBE_BYTES`` bytes (fewer for a shorter file).

    Returns:
        (audio format or None, description): ("WAV", "WAV audio") for audio; (None, "a PNG image" / "text" /
        "empty" / "unknown data") otherwise. MPEG audio without an ID3 tag (and ADTS AAC) is recognised by its
        11-bit frame sync.
    """
    if not head:
        return None, "empty"
    for offset, magic, fmt in _AUDIO_MAGIC:
        if head[offset: offset + len(magic)] == magic:
            return fmt, f"{fmt} audio"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:  # MPEG-1/2 layer I-III or ADTS frame sync
        return "MP3", "MPEG audio"
    for magic, what in _OTHER_MAGIC:
        if head.startswith(magic):
            return None, what
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None, "unknown data"
    return (None, "text") if all(ch.isprintable() or ch in "\n\r\t" for ch in text) else (None, "unknown data")


def probe_duration_s(file) -> float | None:
    """Seconds of audio a file's header declares (soundfile: WAV, FLAC, OGG, MP3, ...), or None when libsndfile
    cannot read the header (M4A and other PyAV-only formats). ``file``: a path or a seekable binary file object."""
    import soundfile as sf

    try:
        info = sf.info(file)
    except Exception:  # LibsndfileError / RuntimeError / TypeError for headers libsndfile does not know
        return None
    if not info.samplerate or info.frames <= 0:
        return None
    return info.frames / info.samplerate
