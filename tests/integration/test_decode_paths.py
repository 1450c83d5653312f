"""Equality is the contract of the pooled decode path (issue 27): VibeVoice and IndexTTS 2 rows decoded with the KV
pool and the batched per-step choice make the same tokens/codes and audio as the eager path as it was before
(``DecodeSettings(pooled=False)``: a ``DynamicCache`` merged by concatenation, IndexTTS 2 picking row by row),
through rows joining and leaving, a cancel and an out-of-memory step; and a finished batch leaves the pool empty."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.adapter_helpers import load_reference  # noqa: E402
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.adapters.kv_pool import DecodeSettings  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402

AUDIO_ATOL = 1e-4  # float32 reassociation between batch shapes (as the continuous-batching tests)


def drive(adapter, params, rows, settings, *, oom_at: int | None = None, lm=None):
    """Decode ``rows`` through the adapter's step interface under ``settings``: rows 0-1 join at step 0, row 2 at
    step 2, row 3 at step 3; row 1 is cancelled at step 4; with ``oom_at`` the model forward ``lm`` raises a real
    ``torch.OutOfMemoryError`` once in that step and the step is retried. Returns {key: (tokens, audio)}."""
    adapter.decode_settings = settings
    try:
        batch = adapter.start_decode(params)
        if hasattr(batch, "make_audio"):
            # IndexTTS 2: codes only (its audio is s2mel + vocoder of the codes with the row's seed, per row, the
            # same code on both paths; tests/integration/test_continuous_indextts2.py compares that audio)
            batch.make_audio = False
        plan = {0: [("a", rows[0]), ("b", rows[1])], 2: [("c", rows[2])], 3: [("d", rows[3])]}
        audio, done = {}, {}
        for step in range(200):
            if step == 4 and "b" in batch.keys:
                batch.release(["b"])
            if plan.get(step):
                batch.prefill(plan[step])
            if not batch.num_rows and step > max(plan):
                break
            if step == oom_at:
                original = type(lm).forward

                def flaky(self, *args, **kwargs):
                    raise torch.OutOfMemoryError("simulated: out of memory in the decoder")

                type(lm).forward = flaky
                try:
                    with pytest.raises(torch.OutOfMemoryError):
                        batch.decode_step()
                finally:
                    type(lm).forward = original
            for out in batch.decode_step():
                audio.setdefault(out.key, []).append(out.audio)
                if out.stop_reason is not None:
                    row = next(r for r in batch.rows if r.key == out.key)
                    tokens = list(getattr(row, "token_ids", None) or row.codes)
                    done[out.key] = (tokens, np.concatenate(audio[out.key]))
                    batch.release([out.key])
        return done, batch
    finally:
        adapter.decode_settings = DecodeSettings()


def assert_same(got, want):
    assert set(got) == set(want)
    for key in want:
        assert got[key][0] == want[key][0], f"row {key}: tokens {got[key][0]} != {want[key][0]}"
        np.testing.assert_allclose(got[key][1], want[key][1], rtol=0, atol=AUDIO_ATOL, err_msg=f"row {key}")


def assert_pool_empty(adapter):
    for role, pools in adapter.__dict__.get("_kv_pools", {}).items():
        for pool in pools:
            assert pool.num_used == 0 and not pool.leased, f"{role} pool still holds {pool.num_used} slots"


def test_vibevoice_pooled_equals_eager_through_joins_a_cancel_and_an_out_of_memory_step(tiny_checkpoint):
    import gc

    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    adapter = VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")
    sr = adapter.facts.sampling_rate
    clips = [load_reference(c, sr, 2.0)[0] for c in ("en_female_1.wav", "en_male_1.wav", "zh_female_1.wav")]
    rows = [AdapterRow(t, clips[i % 3], None, seed=30 + i) for i, t in
            enumerate(["Hello there.", "A longer sentence to speak.", "你好世界", "Short one."])]
    params = SynthesisParams(max_new_tokens=16)
    lm = adapter.model.model.language_model
    eager, _ = drive(adapter, params, rows, DecodeSettings(pooled=False))
    pooled, batch = drive(adapter, params, rows, DecodeSettings(pooled=True), oom_at=5, lm=lm)
    assert "b" not in pooled and len(pooled) == 3  # the cancelled row made nothing more
    assert_same(pooled, eager)
    assert len({len(v[0]) for v in pooled.values()}) > 1  # rows really left at different steps
    del batch
    gc.collect()
    pools = adapter.__dict__["_kv_pools"]
    assert set(pools) == {"positive", "negative"}
    assert_pool_empty(adapter)


@pytest.mark.parametrize("params", [SynthesisParams(greedy=True, num_beams=1, max_new_tokens=30),
                                    SynthesisParams(num_beams=1, temperature=1.0, top_k=20, max_new_tokens=30),
                                    SynthesisParams(temperature=1.0, top_k=20, max_new_tokens=30)],
                         ids=["greedy", "sampled", "beams"])
def test_indextts2_pooled_equals_eager_through_joins_a_cancel_and_an_out_of_memory_step(tiny_adapter, params):
    import gc

    from tests.adapter_helpers import skip_without

    skip_without("indextts")
    adapter = tiny_adapter("indextts2")
    sr = adapter.facts.sampling_rate
    clips = [load_reference(c, sr, s)[0] for c, s in (("zh_female_1.wav", 1.3), ("en_male_1.wav", 1.1),
                                                     ("en_female_1.wav", 0.9), ("zh_male_1.wav", 1.2))]
    rows = [AdapterRow(t, clips[i], None, seed=1 + i) for i, t in
            enumerate(["你好，世界。今天天气很好。", "Hello there, how are you?", "短句。", "One more line."])]
    eager, _ = drive(adapter, params, rows, DecodeSettings(pooled=False))
    pooled, batch = drive(adapter, params, rows, DecodeSettings(pooled=True), oom_at=5, lm=adapter.model.gpt.gpt)
    assert "b" not in pooled
    assert_same(pooled, eager)
    del batch
    gc.collect()
    assert_pool_empty(adapter)
