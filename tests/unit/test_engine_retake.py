"""A sampled segment the model ends at once (no audio; IndexTTS 2's three sampled beams do this for ~1 seed in 6 on
the tiny checkpoint, where upstream's ``infer()`` then fails) is taken again with another seed
(``EngineCore._retake_empty``): the user gets speech, the result and sidecar name the seeds, and the audio is the
same alone, in a batch, and streamed."""

from __future__ import annotations

import numpy as np
import pytest

import tests.fakes as fakes
from tests.fakes import FakeAdapter, FakeStepAdapter, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.core import MAX_EMPTY_RETAKES, RETAKE_SEED_STRIDE
from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")
TEXT = "First sentence here. Second one follows. And a third to end."


@pytest.fixture
def mute_seeds(monkeypatch):
    """The fakes' audio is empty for the seeds in the returned set (the model ended speech at once)."""
    mute: set[int] = set()
    real = fakes.fake_audio

    def audio(text, seed, *args, **kwargs):
        return np.zeros(0, np.float32) if seed in mute else real(text, seed, *args, **kwargs)

    monkeypatch.setattr(fakes, "fake_audio", audio)
    return mute


def _run(adapter_class, stream=False, max_batch_size=4, greedy=False, seed=10):
    engine = Engine(adapter_class(fake_facts(max_segment_chars=24)),
                    EngineConfig(max_batch_size=max_batch_size, wait_window_ms=0)).start()
    try:
        chunks = []
        handle = engine.submit(SynthesisRequest(text=TEXT, reference_audio=REF,
                                                params=SynthesisParams(seed=seed, greedy=greedy)),
                               stream=stream, on_audio=chunks.append if stream else None)
        result = handle.result(timeout=60)
    finally:
        engine.shutdown()
    return result, chunks


@pytest.mark.parametrize("adapter_class", [FakeAdapter, FakeStepAdapter])
def test_a_segment_that_ends_at_once_is_taken_again_with_another_seed(adapter_class, mute_seeds):
    mute_seeds.update({11, 11 + RETAKE_SEED_STRIDE})  # segment 2 ends at once twice, speaks on its third take
    alone, _ = _run(adapter_class, max_batch_size=1)
    batched, _ = _run(adapter_class)
    streamed, chunks = _run(adapter_class, stream=True)
    assert alone.ok and all(s.end_s > s.start_s for s in alone.segments)
    second = alone.segments[1]
    assert second.seed == 11 + 2 * RETAKE_SEED_STRIDE and second.retaken_seeds == (11, 11 + RETAKE_SEED_STRIDE)
    assert [s.retaken_seeds for s in alone.segments if s.index != 1] == [(), ()]
    note = next(w for w in alone.warnings if "generated again" in w)
    assert "seed 11, 1000014" in note and "第 2 段" in note.render("zh")
    np.testing.assert_array_equal(alone.audio, batched.audio)
    np.testing.assert_array_equal(alone.audio, streamed.audio)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), streamed.audio)


def test_retakes_stop_after_their_cap_and_greedy_is_never_retaken(mute_seeds):
    mute_seeds.update(11 + k * RETAKE_SEED_STRIDE for k in range(MAX_EMPTY_RETAKES + 1))
    result, _ = _run(FakeStepAdapter)
    assert result.segments[1].retaken_seeds == tuple(11 + k * RETAKE_SEED_STRIDE for k in range(MAX_EMPTY_RETAKES))
    assert result.segments[1].end_s == result.segments[1].start_s  # still empty: the doors say so
    greedy, _ = _run(FakeStepAdapter, greedy=True)
    assert greedy.segments[1].retaken_seeds == () and greedy.segments[1].seed == 11
