"""The take scores that need no model: the same normalisation on both sides of an error rate (digits, punctuation,
case, full/half width, traditional Chinese), the signal checks on real clips, and the take policy's thresholds and
choice of the best take."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tts_app.quality.policy import best_take, take_problems
from tts_app.quality.scorer import TakeScores
from tts_app.quality.signal import check_signal, silence_share
from tts_app.quality.text import error_rate, normalize_for_scoring


@pytest.mark.parametrize("text, transcript", [
    ("还得再等10分钟。", "還得再等十分鐘"),                   # digits read out, traditional characters
    ("Hello, World! It's 5 o'clock.", "hello world it's five o'clock"),  # punctuation, case, digits
    ("ＡＢＣ公司，１２３号", "ABC公司一百二十三号"),              # full-width letters and digits
    ("Wait 10 minutes", "wait ten minutes"),
])
def test_same_normalisation_on_both_sides_scores_zero(text, transcript):
    assert error_rate(text, transcript).value == 0.0


def test_metric_follows_the_text_language():
    zh = error_rate("银行门口排起了长队", "银行门口排起长队")
    assert zh.metric == "cer" and zh.value == pytest.approx(1 / 9)
    en = error_rate("the morning train was late", "the morning train late")
    assert en.metric == "wer" and en.value == pytest.approx(1 / 5)


def test_empty_transcript_is_all_wrong_and_babble_can_exceed_one():
    assert error_rate("你好世界", "").value == 1.0
    assert error_rate("hi", "hi there how are you doing").value > 1.0
    assert normalize_for_scoring("  Mixed   CASE, text!  ") == "mixed case text"


def test_signal_checks_on_real_clips(data_dir):
    clean, sr = sf.read(data_dir / "en_female_1.wav", dtype="float32")
    text = "The morning train was late again, so Maria finished a chapter of her book while she waited on the platform."
    checks = check_signal(clean, sr, text)
    assert checks.duration_ok and checks.clipping_share == 0.0 and checks.silence_share < 0.4
    clipped, sr = sf.read(data_dir / "en_female_1__clipped.wav", dtype="float32")
    assert check_signal(clipped, sr, text).clipping_share > 0.001
    silent, sr = sf.read(data_dir / "silence_near_-70dBFS_5s.wav", dtype="float32")
    assert silence_share(silent, sr) == 1.0
    # the same clip as the take of a one-word text is far too long; of a page of text far too short
    assert not check_signal(clean, sr, "Hello.").duration_ok
    assert not check_signal(clean, sr, text * 6).duration_ok
    assert check_signal(clean, sr, text, truncated=True).truncated


def _scores(error_rate=0.0, similarity=0.9, silence=0.2, truncated=False) -> TakeScores:
    signal = check_signal(np.full(2400, 0.1 if silence < 1 else 0.0, np.float32), 24000, "", truncated=truncated)
    signal = type(signal)(**{**signal.__dict__, "silence_share": silence})
    return TakeScores(transcript="x", metric="wer", error_rate=error_rate, similarity=similarity, signal=signal)


def test_policy_thresholds_and_best_take():
    assert take_problems(_scores()) == ()
    assert take_problems(_scores(error_rate=0.6, similarity=0.5, silence=0.9, truncated=True)) == (
        "intelligibility", "speaker", "silence", "truncated")
    assert take_problems(_scores(error_rate=0.6), max_error_rate=0.7) == ()
    takes = [_scores(error_rate=0.8), _scores(error_rate=0.1, similarity=0.5), _scores(error_rate=0.2)]
    assert best_take([(s, take_problems(s)) for s in takes]) == 2  # the only one with no problem
    equal = [_scores(error_rate=0.5), _scores(error_rate=0.5)]
    assert best_take([(s, take_problems(s)) for s in equal]) == 0  # a tie keeps the first take
    unscored = TakeScores(None, None, None, None, _scores().signal, error="no model")
    assert take_problems(unscored) == ("unscored",)


def test_asr_backends_by_name_and_the_transformers_pipeline_scores_a_take(tiny_whisper, data_dir):
    """``--quality-asr`` values pick the backend; the transformers pipeline (a tiny random Whisper: its transcript is
    random letters) goes through the scorer end to end."""
    from tts_app.quality.asr import FasterWhisperAsr, PipelineAsr, asr_backend
    from tts_app.quality.scorer import TakeScorer

    assert isinstance(asr_backend("faster-whisper:base"), FasterWhisperAsr)
    assert isinstance(asr_backend("openai/whisper-small"), PipelineAsr)
    with pytest.raises(ValueError, match="BACKEND:ID_OR_DIR"):
        asr_backend("faster-whisper:")
    backend = asr_backend(f"transformers:{tiny_whisper}")
    samples, sr = sf.read(data_dir / "en_male_1.wav", dtype="float32")
    scores = TakeScorer(backend, None).score(samples[: 2 * sr], sr, "Before you leave the office tonight")
    assert scores.error is None and scores.metric == "wer" and isinstance(scores.transcript, str)
    assert scores.error_rate is not None and scores.similarity is None  # no speaker encoder, no reference
    assert scores.asr_model == f"transformers:{tiny_whisper}"


def test_a_recogniser_that_cannot_load_leaves_the_take_unscored(tmp_path):
    from tts_app.quality.asr import asr_backend
    from tts_app.quality.scorer import TakeScorer

    scores = TakeScorer(asr_backend(f"faster-whisper:{tmp_path / 'missing'}"), None).score(
        np.full(16000, 0.1, np.float32), 16000, "hello")
    assert scores.error is not None and "faster-whisper" in scores.error
    assert take_problems(scores) == ("unscored",) and scores.signal.duration_s == 1.0
