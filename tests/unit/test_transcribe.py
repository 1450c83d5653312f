"""Automatic reference transcription through transformers' ASR pipeline, on a tiny random Whisper built in code
(plumbing, not accuracy), and the message when no ASR model can be loaded."""

from __future__ import annotations

import pytest

from tts_app.audio.preparer import ReferencePreparer
from tts_app.audio.transcribe import AsrUnavailableError, Transcriber, make_tiny_whisper


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    return make_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper"))


def test_tiny_whisper_pipeline_fills_an_empty_transcript(tiny_whisper, data_dir, tmp_path):
    from tts_app.voices import VoiceLibrary

    prepared = ReferencePreparer(24000).prepare(data_dir / "en_female_1.wav")
    transcriber = Transcriber(str(tiny_whisper), device="cpu")
    text = transcriber.transcribe(prepared.audio.samples, prepared.audio.sampling_rate, max_new_tokens=12)
    assert text and set(text) <= set("abcdefghijklmnopqrstuvwxyz ")  # the tiny model's letters, decoded
    library = VoiceLibrary(tmp_path / "voices", bundled_dir=None)
    voice = library.save("auto", data_dir / "en_female_1.wav", ReferencePreparer(24000), reference_text=text)
    assert VoiceLibrary(tmp_path / "voices").get("auto").reference_text == text == voice.reference_text


def test_no_loadable_asr_model_gives_a_clear_message(tmp_path):
    missing = Transcriber(str(tmp_path / "no-such-model"), device="cpu")
    with pytest.raises(AsrUnavailableError, match="type the reference text yourself, or start with --asr-model"):
        missing.transcribe([0.0] * 16000, 16000)
    with pytest.raises(AsrUnavailableError, match="--asr-model none"):  # the failure is remembered, not retried
        missing.transcribe([0.0] * 16000, 16000)
    off = Transcriber("none")
    assert not off.enabled
    with pytest.raises(AsrUnavailableError, match="automatic transcription is off"):
        off.transcribe([0.0] * 16000, 16000)
