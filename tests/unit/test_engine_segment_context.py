"""Segment context (``SynthesisParams.segment_context``, issue 29 item 4) in the engine, with the fake adapter: a
request's segments run one after another, each row carrying the earlier segments' text and audio, while other
requests' rows still share its batches; off runs as before; a family without it warns and runs as before; the
context is the latest stretch that fits the model's input limit."""

from __future__ import annotations

import numpy as np

from tests.fakes import FakeAdapter, fake_audio, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, 16000, dtype=np.float32), sampling_rate=16000, key="ref")
TEXT = "First sentence here. Second one follows. And a third to end."


class RecordingAdapter(FakeAdapter):
    """The fake adapter that offers segment context and records every row it was given, per batch."""

    def __init__(self, *, supports: bool = True, max_input_positions: int | None = None):
        super().__init__(fake_facts(supports_segment_context=supports))
        self.rows_seen: list[list] = []
        self._limit = max_input_positions

    def preprocess(self, rows, params):
        self.rows_seen.append(list(rows))
        return super().preprocess(rows, params)

    def max_input_positions(self):
        return self._limit


def _run(adapter, *requests) -> list:
    engine = Engine(adapter, EngineConfig(max_batch_size=8, wait_window_ms=20))
    handles = [engine.submit(r) for r in requests]
    engine.start()
    try:
        return [h.result(timeout=60) for h in handles]
    finally:
        engine.shutdown()


def _request(text: str, context: bool, seed: int = 0) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=REF, params=SynthesisParams(
        seed=seed, max_segment_chars=24, pause_between_segments_ms=0, segment_context=context))


def _rows_of(adapter, texts):
    return [(b, r) for b, rows in enumerate(adapter.rows_seen) for r in rows if r.text in texts]


def test_each_segment_hears_the_earlier_ones_and_still_batches_with_other_requests():
    adapter = RecordingAdapter()
    chained, other = _request(TEXT, True), _request("Other request one. Other request two.", False, seed=7)
    result, other_result = _run(adapter, chained, other)
    assert result.status is RequestStatus.DONE and other_result.status is RequestStatus.DONE
    segments = ["First sentence here.", "Second one follows.", "And a third to end."]
    batch_of = {r.text: b for b, batch in enumerate(adapter.rows_seen) for r in batch}
    rows = [r for batch in adapter.rows_seen for r in batch if r.text in segments]
    assert [r.text for r in rows] == segments
    for k, row in enumerate(rows):  # row k hears rows 0..k-1: their text and the audio they made
        assert [c.text for c in row.context] == segments[:k]
        for c, earlier in zip(row.context, rows[:k]):
            np.testing.assert_array_equal(c.audio, fake_audio(earlier.text, earlier.seed, REF.samples))
    # one after another: segment k+1 ran in a later batch than segment k
    assert batch_of[segments[0]] < batch_of[segments[1]] < batch_of[segments[2]]
    # the other request's rows shared the first segment's batch (submitted together, same knobs)
    assert batch_of["Other request one."] == batch_of["Other request two."] == batch_of[segments[0]]
    want = np.concatenate([fake_audio(r.text, r.seed, REF.samples) for r in rows])  # the fake ignores context
    np.testing.assert_array_equal(result.audio, want)


def test_off_runs_every_segment_on_its_own_at_once_as_before():
    adapter = RecordingAdapter()
    result, = _run(adapter, _request(TEXT, False))
    assert len(adapter.rows_seen) == 1 and len(adapter.rows_seen[0]) == 3  # one batch, no waiting
    assert all(r.context == () for r in adapter.rows_seen[0])
    want = np.concatenate([fake_audio(r.text, r.seed, REF.samples) for r in adapter.rows_seen[0]])
    np.testing.assert_array_equal(result.audio, want)


def test_a_family_without_segment_context_warns_in_the_users_language_and_runs_as_before():
    adapter = RecordingAdapter(supports=False)
    result, = _run(adapter, _request(TEXT, True))
    assert result.status is RequestStatus.DONE
    assert len(adapter.rows_seen) == 1 and all(r.context == () for r in adapter.rows_seen[0])
    notice = next(w for w in result.warnings if getattr(w, "code", "") == "eng_segment_context_unsupported")
    assert "segment_context was ignored" in notice and "Fake" in notice
    assert "已忽略 segment_context" in notice.render("zh")


def test_the_context_is_the_latest_segments_that_fit_the_input_limit():
    probe = RecordingAdapter()
    first = probe.estimate_positions(len("And a third to end."), REF.duration_s, 0, probe.max_new_tokens(
        SynthesisParams()))
    one_earlier = probe.context_positions(len("Second one follows."), len(fake_audio("Second one follows.", 1,
                                                                                      REF.samples)) / 16000)
    # room for the row and one earlier segment, not two
    adapter = RecordingAdapter(max_input_positions=first + one_earlier + 1)
    result, = _run(adapter, _request(TEXT, True))
    assert result.status is RequestStatus.DONE
    last = adapter.rows_seen[-1][0]
    assert last.text == "And a third to end." and [c.text for c in last.context] == ["Second one follows."]


def test_a_dialogue_warns_and_each_turn_runs_on_its_own():
    from tts_app.request import Speaker, Turn

    adapter = RecordingAdapter()
    request = SynthesisRequest(text="x", speakers=(Speaker("A", REF), Speaker("B", REF)),
                               turns=(Turn(0, "Hello there."), Turn(1, "Hi to you.")),
                               params=SynthesisParams(segment_context=True))
    result, = _run(adapter, request)
    assert result.status is RequestStatus.DONE
    assert len(adapter.rows_seen) == 1 and all(r.context == () for r in adapter.rows_seen[0])
    notice = next(w for w in result.warnings if getattr(w, "code", "") == "eng_segment_context_dialogue")
    assert "not a dialogue" in notice and "不用于对话" in notice.render("zh")
