"""IndexTTS 2's second stage (s2mel flow matching + BigVGAN) batched across the rows that end together, on the tiny
checkpoint: each row's audio equals that row alone through the package's own ``solve_euler`` (its own noise, drawn
from its own seed in its own shape), with rows of different lengths and references; a group that runs out of memory
is split, not failed; the flow-matching step count (the fast preset) is a setting that changes what runs and is
recorded in the sidecar settings."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tests.adapter_helpers import load_reference, skip_without  # noqa: E402

skip_without("indextts")

from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.request import StopReason, SynthesisParams  # noqa: E402

AUDIO_ATOL = 1e-4  # float32 reassociation between batch shapes (as the adapter's batch-vs-alone tests)
STEPS = 4  # Euler steps in the equality tests: equality does not depend on the count, runtime does


@pytest.fixture(scope="module")
def adapter(tiny_adapter):
    return tiny_adapter("indextts2")


@pytest.fixture(scope="module")
def four_rows(adapter):
    """Four rows with different references (lengths 0.9-1.3 s), texts and seeds, preprocessed together, and code
    lists of different lengths (1.72 mel frames per code): total frames differ by 1 frame between two rows (the
    reflect-padding edge case) and by tens between others."""
    rate = adapter.facts.sampling_rate
    clips = [("zh_female_1.wav", 1.3), ("en_male_1.wav", 1.1), ("en_female_1.wav", 0.9), ("zh_male_1.wav", 1.2)]
    rows = [AdapterRow(text, load_reference(name, rate, seconds)[0], None, seed=seed)
            for (name, seconds), text, seed in zip(clips, ["你好，世界。", "Hello there.", "短句。", "Good morning."],
                                                   [1, 2, 3, 4])]
    inputs = adapter.preprocess(rows, adapter.resolve(SynthesisParams(num_beams=1)))
    codes = [[(7 * i + k) % 60 for k in range(n)] for i, n in enumerate([5, 14, 7, 21])]
    return [(inputs, i, c) for i, c in enumerate(codes)]


@pytest.fixture(scope="module")
def alone(adapter, four_rows):
    """Each of ``four_rows`` alone: one row per call, the package's own ``solve_euler`` and vocoder call."""
    return [adapter.stage2_audio([item], STEPS)[0] for item in four_rows]


def test_batched_second_stage_equals_each_row_alone(adapter, four_rows, alone):
    batched = adapter.stage2_audio(four_rows, STEPS)
    lengths = {a.size for a in alone}
    assert len(lengths) == 4  # the rows really differ in length, so padding is exercised
    for b, a in zip(batched, alone):
        assert b.shape == a.shape and np.allclose(b, a, atol=AUDIO_ATOL)
    # each row's noise is its own seed's: row 0 with another seed (in a batch or alone) gives other audio
    inputs, _, codes = four_rows[0]
    reseeded = dataclasses.replace(inputs, seeds=[99, *inputs.seeds[1:]])
    other = adapter.stage2_audio([(reseeded, 0, codes), *four_rows[1:]], STEPS)
    assert not np.allclose(other[0], batched[0], atol=AUDIO_ATOL)
    assert all(np.allclose(o, b, atol=AUDIO_ATOL) for o, b in zip(other[1:], batched[1:]))  # batch-mates unchanged


def test_without_the_per_row_fills_shorter_rows_would_leak(adapter, four_rows, alone, monkeypatch):
    """The equality test can fail: without ``_RowLengths`` the padding after a shorter row reaches its last frames
    (the DiT's WaveNet convolutions, BigVGAN's convolutions and resamplers)."""
    from tts_app.adapters import indextts2

    monkeypatch.setattr(indextts2._RowLengths, "__enter__", lambda self: self)
    batched = adapter.stage2_audio(four_rows, STEPS)
    equal = [np.allclose(b, a, atol=AUDIO_ATOL) for b, a in zip(batched, alone)]
    assert not all(equal)


def test_out_of_memory_splits_the_group_instead_of_failing(adapter, four_rows, alone, monkeypatch, caplog):
    """A group of more than two rows 'does not fit' (a real ``torch.OutOfMemoryError``): it is split in halves,
    which run batched; every row still gets its own audio."""
    real = type(adapter)._stage2_batch
    sizes = []

    def limited(self, group, steps):
        sizes.append(len(group))
        if len(group) > 2:
            raise torch.OutOfMemoryError(f"simulated out of memory for {len(group)} rows")
        return real(self, group, steps)

    monkeypatch.setattr(type(adapter), "_stage2_batch", limited)
    with caplog.at_level(logging.WARNING, logger="tts_app.adapters.indextts2"):
        audio = adapter.stage2_audio(four_rows, STEPS)
    assert sizes == [4, 2, 2]
    assert "out of memory for 4 rows" in caplog.text
    monkeypatch.undo()
    for b, a in zip(audio, alone):
        assert np.allclose(b, a, atol=AUDIO_ATOL)


def test_rows_ending_in_one_decode_step_get_their_audio_from_one_batched_call(adapter, monkeypatch):
    """The step interface: rows that hit their cap in the same step go through the second stage together, and each
    row's audio equals that row decoded alone."""
    rate = adapter.facts.sampling_rate
    rows = [AdapterRow(text, load_reference(name, rate, seconds)[0], None, seed=seed)
            for text, name, seconds, seed in [("你好，世界。", "zh_female_1.wav", 1.3, 5),
                                              ("Hello there.", "en_male_1.wav", 0.9, 6),
                                              ("短句。", "en_female_1.wav", 1.1, 7)]]
    params = SynthesisParams(greedy=True, num_beams=1, max_new_tokens=6, num_diffusion_steps=STEPS)
    calls = []
    real = type(adapter).stage2_audio

    def counting(self, items, steps):
        calls.append((len(items), steps))
        return real(self, items, steps)

    def decode(batch_rows):
        batch = adapter.start_decode(params)
        batch.prefill(list(enumerate(batch_rows)))
        audio, reasons = {}, {}
        while len(audio) < len(batch_rows):
            for step in batch.decode_step():
                if step.stop_reason is not None:
                    audio[step.key], reasons[step.key] = step.audio, step.stop_reason
        return [audio[k] for k in range(len(batch_rows))], [reasons[k] for k in range(len(batch_rows))]

    monkeypatch.setattr(type(adapter), "stage2_audio", counting)
    together, reasons = decode(rows)
    finishing_calls = [c for c in calls if c[0] > 0]
    monkeypatch.undo()
    if set(reasons) != {StopReason.MAX_NEW_TOKENS}:
        pytest.skip("a tiny-model row stopped before the cap")  # random weights; the cap is 6 codes
    assert finishing_calls == [(3, STEPS)]  # one call with all three rows, the request's step count
    for row, audio in zip(rows, together):
        alone, _ = decode([row])
        assert audio.shape == alone[0].shape and np.allclose(audio, alone[0], atol=AUDIO_ATOL)


def test_fast_preset_is_a_setting_that_changes_the_steps_and_is_recorded(adapter, four_rows):
    from tts_app.outputs import SOURCE_REQUEST, generation_settings

    default = adapter.resolve(SynthesisParams())
    assert default.num_diffusion_steps == 25  # upstream's diffusion_steps
    assert "diffusion_steps=25" in adapter.facts.generation_defaults.sources["num_diffusion_steps"]
    fast = SynthesisParams(num_diffusion_steps=12)
    settings, sources = generation_settings(adapter.facts, fast, adapter.resolve(fast))
    assert settings["num_diffusion_steps"] == 12 and sources["num_diffusion_steps"] == SOURCE_REQUEST
    settings, sources = generation_settings(adapter.facts, SynthesisParams(), default)
    assert settings["num_diffusion_steps"] == 25 and "fast preset: 12" in sources["num_diffusion_steps"]

    forwards = []
    estimator = adapter.model.s2mel.models["cfm"].estimator
    handle = estimator.register_forward_hook(lambda *_: forwards.append(1))
    try:
        two_steps = adapter.stage2_audio(four_rows[:2], 2)
        assert len(forwards) == 2  # one DiT forward per Euler step for both rows (and their CFG twins)
        three_steps = adapter.stage2_audio(four_rows[:2], 3)
        assert len(forwards) == 2 + 3
    finally:
        handle.remove()
    assert not np.allclose(two_steps[0], three_steps[0], atol=AUDIO_ATOL)
