"""The take policy in the engine with a fake scorer (no model): "score" records every segment's one take,
"reroll" takes a segment below threshold again through the retake mechanism and keeps the best take, the audio
stays deterministic, a cancel while a take is scored ends the request, a bad setting is refused naming its field,
and the scorer's weights come off an explicit memory budget."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from tests.fakes import FakeAdapter, FakeStepAdapter, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.core import RETAKE_SEED_STRIDE
from tts_app.errors import ConfigError
from tts_app.quality.scorer import TakeScores
from tts_app.quality.signal import check_signal
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")
TEXT = "First sentence here. Second one follows. And a third to end."


class FakeScorer:
    """Scores a take by its audio's first sample: the takes whose audio starts with a value listed in ``bad`` get
    an error rate of 0.9 (below threshold), others 0.05. ``gate``: when set, scoring waits for it."""

    def __init__(self, bad_first_samples=(), gate: threading.Event | None = None, num_bytes: int = 0):
        self.bad = set(bad_first_samples)
        self.gate = gate
        self.calls = []
        self._num_bytes = num_bytes

    def num_bytes(self) -> int:
        return self._num_bytes

    def score(self, samples, sampling_rate, text, *, reference=None, reference_key="", truncated=False):
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.calls.append((threading.current_thread().name, text, reference_key))
        bad = samples.size and float(samples[0]) in self.bad
        # the fake model's takes are 40 samples a character, far shorter than speech: only the error rate decides
        signal = dataclasses.replace(check_signal(samples, sampling_rate, text, truncated=truncated), duration_ok=True)
        return TakeScores(transcript="x", metric="wer", error_rate=0.9 if bad else 0.05, similarity=0.9,
                          signal=signal)


def _run(adapter_class, scorer, params, *, stream=False, max_batch_size=4):
    engine = Engine(adapter_class(fake_facts(max_segment_chars=24)),
                    EngineConfig(max_batch_size=max_batch_size, wait_window_ms=0), take_scorer=scorer).start()
    try:
        chunks = []
        handle = engine.submit(SynthesisRequest(text=TEXT, reference_audio=REF, params=params),
                               stream=stream, on_audio=chunks.append if stream else None)
        return handle.result(timeout=60), chunks
    finally:
        engine.shutdown()


def _first_sample(adapter_class, seed) -> float:
    """The first sample of the fake model's take of segment 2 with ``seed`` (what ``FakeScorer`` keys on)."""
    off, _ = _run(adapter_class, FakeScorer(), SynthesisParams(seed=seed - 1), max_batch_size=1)
    start = round(off.segments[1].start_s * off.sampling_rate)
    return float(off.audio[start])


@pytest.mark.parametrize("adapter_class", [FakeAdapter, FakeStepAdapter])
def test_score_records_one_take_per_segment_off_the_worker_thread(adapter_class):
    scorer = FakeScorer()
    off, _ = _run(adapter_class, scorer, SynthesisParams(seed=10))
    scored, _ = _run(adapter_class, scorer, SynthesisParams(seed=10, take_check="score"))
    np.testing.assert_array_equal(scored.audio, off.audio)  # scoring never changes what a user hears
    assert off.segments[0].takes == () and off.segments[0].scores is None
    assert [len(s.takes) for s in scored.segments] == [1, 1, 1] and all(s.rerolled == 0 for s in scored.segments)
    assert scored.segments[1].scores["error_rate"] == 0.05 and scored.segments[1].takes[0]["kept"]
    assert {name for name, _, _ in scorer.calls} == {"tts-take-checker_0"}  # never the engine's worker thread
    assert [key for _, _, key in scorer.calls] == ["ref"] * 3  # each take against the reference


@pytest.mark.parametrize("adapter_class", [FakeAdapter, FakeStepAdapter])
def test_reroll_takes_a_bad_segment_again_and_keeps_the_best_take(adapter_class):
    first = _first_sample(adapter_class, 11)  # segment 2's first take (seed 10 + 1)
    second = _first_sample(adapter_class, 11 + RETAKE_SEED_STRIDE)
    third = _first_sample(adapter_class, 11 + 2 * RETAKE_SEED_STRIDE)
    result, _ = _run(adapter_class, FakeScorer({first, third}), SynthesisParams(seed=10, take_check="reroll"))
    segment = result.segments[1]
    assert segment.seed == 11 + RETAKE_SEED_STRIDE and segment.rerolled == 1  # the passing second take ends it
    assert [t["kept"] for t in segment.takes] == [False, True] and not segment.needs_listening
    assert [s.rerolled for s in result.segments] == [0, 1, 0]
    # all three bad: three takes, the first kept (a tie keeps the earliest), and the result says to listen
    stuck, _ = _run(adapter_class, FakeScorer({first, second, third}), SynthesisParams(seed=10, take_check="reroll"))
    assert stuck.segments[1].rerolled == 2 and stuck.segments[1].seed == 11 and stuck.segments[1].needs_listening
    note = next(w for w in stuck.warnings if "below the quality thresholds" in w)
    assert "3 take(s)" in note and "第 2 段" in note.render("zh")
    # the same audio streamed: a reroll request sends only its final audio, equal to the result
    streamed, chunks = _run(adapter_class, FakeScorer({first, third}), SynthesisParams(seed=10, take_check="reroll"),
                            stream=True)
    np.testing.assert_array_equal(streamed.audio, result.audio)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), result.audio)


def test_a_request_cancelled_while_its_take_is_scored_ends_cancelled():
    gate = threading.Event()
    engine = Engine(FakeAdapter(fake_facts(max_segment_chars=24)), EngineConfig(wait_window_ms=0),
                    take_scorer=FakeScorer(gate=gate)).start()
    try:
        handle = engine.submit(SynthesisRequest(text=TEXT, reference_audio=REF,
                                                params=SynthesisParams(take_check="reroll")))
        handle.cancel()
        gate.set()
        assert handle.result(timeout=30).status is RequestStatus.CANCELLED
    finally:
        engine.shutdown()


def test_bad_take_settings_are_refused_naming_the_field():
    for field, value in (("take_check", "maybe"), ("take_max_rerolls", 9), ("take_max_rerolls", True),
                         ("take_max_error_rate", -1.0), ("take_min_similarity", 1.5)):
        with pytest.raises(ConfigError) as caught:
            SynthesisParams(**{field: value})
        assert caught.value.field == field and field in str(caught.value)
        assert field in caught.value.args[0].render("zh")


def test_the_scorers_weights_come_off_an_explicit_memory_budget():
    scorer = FakeScorer(num_bytes=100 * 2**20)
    engine = Engine(FakeAdapter(), EngineConfig(memory_budget_bytes=2**30), take_scorer=scorer)
    assert engine._measure_budget() == 2**30  # not loaded yet: nothing taken
    assert engine.takes.scorer is scorer  # built (loaded) on first use
    assert engine._measure_budget() == 2**30 - 100 * 2**20
