"""The page's audio players, without the ``ffmpeg`` program.

gradio 6.31's ``gr.Audio`` runs the ``ffmpeg`` / ``ffprobe`` programs in two places our page reaches:

- a streamed output (``streaming=True``, the live player): ``Audio._encode_chunk`` starts one ``ffmpeg`` process per
  stream (``gradio.audio_stream_encoder.AacStreamEncoder``) to turn the handler's WAV pieces into the ADTS AAC
  segments of an HLS playlist (``/stream/.../playlist.m3u8``; the route serves ``.aac`` and ``.ts`` segments only).
  Without the program, Generate fails with "Streaming audio output requires ffmpeg".
- a file output (``postprocess`` of a path): where ``ffmpeg`` is on PATH it probes every file with ``ffprobe``
  (``processing_utils.audio_is_playable``), and a machine with ``ffmpeg`` but no ``ffprobe`` fails on every clip
  shown (the cleaned reference after an upload, the result).

Uploads need neither (``type="filepath"`` hands gradio's copy of the file to our decoder, ``tts_app.audio.decode``:
soundfile, else PyAV). ``Audio`` below is ``gr.Audio`` (the same player in the browser) with those two places
replaced: the live stream is encoded to AAC by PyAV, whose wheels bundle FFmpeg's libraries (libavcodec's native
AAC encoder, LGPL; PyAV itself is BSD) - the same frames gradio's ffmpeg command makes (``-c:a aac -f adts``, at the
nearest ADTS sampling rate) - and a local file (one the app wrote: WAV, FLAC, MP3 or Ogg Opus, all played by browsers)
is served as it is, never probed. So the page works the same whether or not a machine has the programs.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import gradio as gr
import numpy as np
from gradio.audio_stream_encoder import (AAC_FRAME_SAMPLES, EncoderSlot, decode_to_pcm, nearest_adts_rate,
                                         parse_adts_frames, segment_from_frames)
from gradio.components import audio as gradio_audio
from gradio.data_classes import FileData
from gradio_client import utils as client_utils


class _ByteSink:
    """A write-only file object for PyAV's muxer: collects what it writes."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)


class PyAVAacEncoder:
    """One AAC encoder (PyAV, in process) for the whole life of a streamed output; the interface of gradio's
    ``AacStreamEncoder`` (``feed`` / ``take`` / ``flush`` / ``close``, ``sample_rate``, ``channels``,
    ``frame_duration``), so gradio's stream registry (``EncoderSlot``) and playlist code use it unchanged.

    One encoder for all pieces, as gradio's: an AAC frame decodes only overlap-added with its neighbours, so an
    encoder per piece would put a gap at every boundary; pieces need not be multiples of 1024 samples (the
    resampler keeps the remainder).

    Args:
        sample_rate: Hz of the PCM fed in.
        channels: 1 or 2.
    """

    def __init__(self, sample_rate: int, channels: int):
        import av

        self.sample_rate = sample_rate
        self.channels = channels
        # An ADTS header can only name these rates (gradio.audio_stream_encoder.ADTS_SAMPLE_RATES); the 24 kHz,
        # 22.05 kHz and 44.1 kHz of our models are all among them, so nothing is resampled for them.
        self.output_rate = nearest_adts_rate(sample_rate)
        self._layout = "mono" if channels == 1 else "stereo"
        self._sink = _ByteSink()
        # flush_packets: the muxer hands each frame over as it is made (as gradio's ``-flush_packets 1``)
        self._container = av.open(self._sink, mode="w", format="adts", options={"flush_packets": "1"})
        self._stream = self._container.add_stream("aac", rate=self.output_rate, layout=self._layout)
        self._resampler = av.AudioResampler(format="fltp", layout=self._layout, rate=self.output_rate,
                                            frame_size=AAC_FRAME_SAMPLES)
        self._lock = threading.Lock()  # close() may come from another thread (a cancelled stream)
        self._closed = False

    @property
    def frame_duration(self) -> float:
        """Seconds of audio in one AAC frame (1024 samples at the output rate)."""
        return AAC_FRAME_SAMPLES / self.output_rate

    def _encode(self, frame) -> None:
        for resampled in self._resampler.resample(frame):
            for packet in self._stream.encode(resampled):
                self._container.mux(packet)

    def feed(self, pcm: bytes) -> None:
        """Encode signed 16-bit little-endian interleaved PCM (``channels`` channels at ``sample_rate``). A no-op
        once closed (the stream was ended under the piece being encoded)."""
        import av

        samples = np.frombuffer(pcm, dtype="<i2")
        if samples.size < self.channels:
            return
        samples = samples[: samples.size - samples.size % self.channels]
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout=self._layout)
        frame.sample_rate = self.sample_rate
        with self._lock:
            if not self._closed:
                self._encode(frame)

    def take(self, timeout: float | None = None) -> list[bytes]:  # noqa: ARG002 - no process to wait for
        """Every whole ADTS frame made so far (each with its 7-byte header)."""
        with self._lock:
            frames, used = parse_adts_frames(self._sink.data)
            del self._sink.data[:used]
        return frames

    def flush(self, timeout: float = 5.0) -> list[bytes]:  # noqa: ARG002
        """Encode what the resampler and encoder still hold, close, and return the last frames. Terminal."""
        with self._lock:
            if not self._closed:
                self._encode(None)
                for packet in self._stream.encode(None):
                    self._container.mux(packet)
        frames = self.take()
        self.close()
        return frames

    def close(self) -> None:
        """Release the encoder and muxer (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._container.close()

from gradio.events import Dependency

class Audio(gr.Audio):
    """``gr.Audio`` that needs no ``ffmpeg`` / ``ffprobe`` program (module docstring): the same browser component
    (``get_block_name`` is "audio"), the same values and API."""

    def get_block_name(self) -> str:
        return "audio"

    def postprocess(self, value):
        """A path to a local file is served as it is (the app's own WAV / FLAC / MP3 / Opus output, or a clip it
        cleaned: all play in browsers); other values go to ``gr.Audio.postprocess``."""
        if isinstance(value, (str, Path)) and self.format is None and not client_utils.is_http_url_like(str(value)):
            path = Path(value)
            return FileData(path=str(path), orig_name=path.name if path.exists() else None)
        return super().postprocess(value)

    def _encode_chunk(self, output_id: str, data: bytes):
        """One piece of a streamed output (bytes of an audio file, our handlers' 16-bit WAV) -> the AAC segment
        it completes (``MediaStreamChunk``), or None. As ``gr.Audio._encode_chunk``, with ``PyAVAacEncoder`` for
        gradio's ffmpeg process; ``decode_to_pcm`` reads 16-bit WAV with the standard library."""
        slot: EncoderSlot | None = gradio_audio._stream_encoders.get(output_id)
        if slot is None:  # the stream ended (disconnect, cancel) while this piece was on its way
            return None
        encoder = slot.encoder
        if encoder is None:
            sample_rate, channels, pcm = decode_to_pcm(data)
            encoder = PyAVAacEncoder(sample_rate, channels)
            if not slot.attach(encoder):
                encoder.close()
                return None
        else:
            _, _, pcm = decode_to_pcm(data, encoder.sample_rate, encoder.channels)
        encoder.feed(pcm)
        return segment_from_frames(encoder, encoder.take())
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component


def media_programs_line() -> str:
    """The start-up line saying which ``ffmpeg`` / ``ffprobe`` programs are on PATH and that the app needs none,
    with the audio libraries it uses instead (versions)."""
    import av
    import soundfile

    found = {name: shutil.which(name) for name in ("ffmpeg", "ffprobe")}
    where = ", ".join(f"{name} {path}" if path else f"{name} not found" for name, path in found.items())
    libavcodec = ".".join(str(v) for v in av.library_versions.get("libavcodec", ()))
    return (f"Audio: {where} on PATH - not needed: uploads are read by soundfile {soundfile.__version__} / PyAV "
            f"{av.__version__} (bundled libavcodec {libavcodec}), the live player's stream is encoded by PyAV")