"""The page's audio players without the ffmpeg program (``tts_app.ui.audio``): the live stream's AAC segments are
made in process and decode to the samples streamed; a file is shown without probing it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tts_app.audio.post import encode_wav

pytest.importorskip("av")


@pytest.fixture()
def fresh_path(monkeypatch, tmp_path) -> Path:
    """PATH = only Python's folder and an empty one of our own (tests may add programs to it)."""
    programs = tmp_path / "bin"
    programs.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(programs), os.path.dirname(sys.executable)]))
    if shutil.which("ffmpeg") is not None:
        pytest.fail(f"ffmpeg is in Python's own folder ({shutil.which('ffmpeg')}): this test needs a PATH without it")
    return programs


def _stream(widget, pieces: list[bytes], stream_id: str) -> list[dict]:
    """Run the pieces through gradio's streaming calls, as ``Blocks.handle_streaming_outputs`` does."""

    async def run():
        segments = []
        for i, piece in enumerate(pieces):
            segment, _ = await widget.stream_output(piece, stream_id, i == 0)
            segments.append(segment)
        segments.append(await widget.flush_stream_output(stream_id))
        return [s for s in segments if s]

    # in a thread of its own: an earlier test of the session (a server run in-process) may leave this thread marked
    # as running an event loop, where asyncio.run refuses to start
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def test_the_live_stream_is_aac_that_decodes_to_the_streamed_samples_without_ffmpeg(fresh_path):
    import av

    from tts_app.ui.audio import Audio

    rate = 24_000
    t = np.arange(3 * rate) / rate
    speech_like = (0.3 * np.sin(2 * np.pi * (200 * t + 300 * t * t))).astype(np.float32)  # a chirp: one alignment
    pieces = [encode_wav(p, rate) for p in np.array_split(speech_like, 7)]  # as handlers.synthesize_stream yields
    segments = _stream(Audio(streaming=True, interactive=False), pieces, "session/run/1/playlist.m3u8")
    assert len(segments) >= 2 and {s["extension"] for s in segments} == {".aac"}  # the HLS route's segment type
    decoded = np.concatenate([f.to_ndarray().ravel() for f in
                              av.open(io.BytesIO(b"".join(s["data"] for s in segments)), format="aac").decode(audio=0)])
    assert sum(s["duration"] for s in segments) == pytest.approx(decoded.size / rate)  # the playlist's #EXTINF
    lag = 1024  # the AAC encoder's priming frame
    kept = decoded[lag:lag + speech_like.size]
    assert kept.size == speech_like.size
    snr_db = 10 * np.log10(np.sum(speech_like**2) / np.sum((kept - speech_like) ** 2))
    assert snr_db > 20  # lossy, but the same sound in the same place (measured: 29 dB)


def test_a_file_is_shown_without_ffprobe_even_where_ffmpeg_is_installed(fresh_path, tmp_path):
    """gradio probes every shown file with ffprobe when an ffmpeg program exists; with no ffprobe beside it every
    clip failed (the cleaned reference after an upload, the result)."""
    from tts_app.ui.audio import Audio

    fake = fresh_path / "ffmpeg"  # a machine with ffmpeg but no ffprobe
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert shutil.which("ffmpeg") and shutil.which("ffprobe") is None
    clip = tmp_path / "clip.wav"
    sf.write(clip, np.zeros(2400, dtype=np.float32), 24_000)
    shown = Audio(type="filepath", interactive=False).postprocess(str(clip))
    assert Path(shown.path) == clip and shown.orig_name == "clip.wav"
