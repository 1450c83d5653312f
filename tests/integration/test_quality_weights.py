"""The ``score`` command and the scorer with real small weights (Whisper base as CTranslate2 files, Resemblyzer's
speaker encoder; licences in the README's test section) on the synthetic speech of tests/data: the right
transcript scores a low error rate and passes, a wrong one a high rate and fails, and the same speaker's clips are
closer than two speakers' clips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tts_app.cli.score import main as score_main


def _clip(audio_manifest, name):
    return next(f for f in audio_manifest["files"] if f["name"] == name)


def _score(capsys, *argv) -> tuple[int, dict]:
    code = score_main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.parametrize("name, wrong_name, reference, same_voice", [
    ("en_female_2.wav", "en_male_1.wav", "en_male_1.wav", False),
    ("zh_male_1.wav", "zh_female_2.wav", "zh_male_1__music_bed.wav", True)])
def test_score_command_right_and_wrong_transcript(name, wrong_name, reference, same_voice, data_dir,
                                                  audio_manifest, quality_asr_spec, capsys):
    """The right transcript scores <= 0.25 (and passes unless the reference is another voice: then only the
    speaker check fails); another clip's transcript of the same language, the wrong text, scores >= 0.5."""
    clip = _clip(audio_manifest, name)
    code, right = _score(capsys, str(data_dir / name), "--text", clip["transcript"], "--asr", quality_asr_spec,
                         "--reference", str(data_dir / reference))
    assert right["metric"] == ("cer" if clip["language"] == "zh" else "wer")
    assert right["error_rate"] <= 0.25, right["transcript"]
    if same_voice:
        assert code == 0 and right["problems"] == [] and right["similarity"] >= 0.7
    else:
        assert code == 1 and right["problems"] == ["speaker"] and right["similarity"] < 0.7
    code, wrong = _score(capsys, str(data_dir / name), "--text", _clip(audio_manifest, wrong_name)["transcript"],
                         "--asr", quality_asr_spec)
    assert wrong["error_rate"] >= 0.5, wrong["transcript"]
    assert code == 1 and "intelligibility" in wrong["problems"]


def test_same_speaker_scores_higher_than_another_speaker(data_dir, audio_manifest, quality_scorer):
    """Pairs from the manifest: a clean reference and a different recording of the same voice (its long clip, a
    stretch of other sentences), against the same reference and another voice of the same language and gender."""
    long = next(f for f in audio_manifest["files"] if f["kind"] == "long_speech")
    voice = long["voice"]["voice_id"]
    same = next(f for f in audio_manifest["files"] if f["kind"] == "clean_reference" and f["voice"]["voice_id"] == voice)
    other = next(f for f in audio_manifest["files"] if f["kind"] == "clean_reference" and f["language"] == same["language"]
                 and f["voice"]["gender"] == same["voice"]["gender"] and f["voice"]["voice_id"] != voice)
    samples, sr = sf.read(data_dir / long["name"], dtype="float32")
    take = samples[20 * sr: 30 * sr]  # sentences the clean reference does not hold
    speaker = quality_scorer.speaker
    take_embedding = speaker.embed(take, sr)
    same_similarity = float(np.dot(take_embedding, speaker.embed(*sf.read(data_dir / same["name"], dtype="float32"))))
    other_similarity = float(np.dot(take_embedding, speaker.embed(*sf.read(data_dir / other["name"], dtype="float32"))))
    print(f"same speaker {same_similarity:.3f}, another speaker {other_similarity:.3f}")
    assert same_similarity > other_similarity + 0.1
