"""Automatic reference transcription through transformers' ASR pipeline, on a tiny random Whisper built in code
(plumbing, not accuracy), and the message when no ASR model can be loaded."""

from __future__ import annotations

import pytest

from tts_app.audio.preparer import ReferencePreparer
from tts_app.audio.transcribe import AsrUnavailableError, Transcriber, fill_transcript, transcriber_from


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


def test_fill_transcript_runs_when_the_family_needs_one_or_the_model_was_chosen(tiny_whisper, data_dir):
    prepared = ReferencePreparer(24000).prepare(data_dir / "zh_female_1.wav")
    chosen = transcriber_from(str(tiny_whisper), "cpu")  # --asr-model DIR: for every family
    text, notes = fill_transcript(chosen, prepared, None, needs_reference_text=False)
    assert text and len(notes) == 1 and repr(text) in notes[0] and "transcribed automatically" in notes[0]
    assert fill_transcript(chosen, prepared, "我自己写的文本。", needs_reference_text=True) == ("我自己写的文本。", [])
    assert fill_transcript(chosen, None, None, needs_reference_text=True) == (None, [])  # no reference: no text
    default = transcriber_from(None, "cpu")  # not given: the default checkpoint, only for families that need it
    assert default.enabled and not default.for_every_family
    assert fill_transcript(default, prepared, None, needs_reference_text=False) == (None, [])
    assert fill_transcript(transcriber_from("none", "cpu"), prepared, None, needs_reference_text=True) == (None, [])
    missing = Transcriber(str(data_dir / "no-such-whisper"), "cpu")
    text, notes = fill_transcript(missing, prepared, None, needs_reference_text=True)
    assert text is None and "type the reference text yourself" in notes[0]  # a warning, never an exception
