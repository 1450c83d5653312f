"""IndexTTS 2's step interface (``IndexTTS2DecodeBatch``) and continuous batching through the engine, on the tiny
checkpoint: rows that join a running batch, leave it, or live through an out-of-memory step make the same codes and
audio as ``generate`` alone (which the adapter tests compare with the package's own ``infer``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tests.adapter_helpers import load_reference, skip_without  # noqa: E402

skip_without("indextts")

from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.config import EngineConfig  # noqa: E402
from tts_app.engine import Engine  # noqa: E402
from tts_app.request import ReferenceAudio, StopReason, SynthesisParams, SynthesisRequest  # noqa: E402

AUDIO_ATOL = 1e-4  # float32 reassociation between batch shapes (as the adapter's batch-vs-alone tests)
GREEDY = SynthesisParams(greedy=True, num_beams=1, max_new_tokens=40)
SAMPLED = SynthesisParams(max_new_tokens=40, num_beams=1, temperature=1.0, top_k=20)
BEAMS = SynthesisParams(max_new_tokens=40, temperature=1.0, top_k=20)  # the checkpoint's 3 beams, sampled


@pytest.fixture(scope="module")
def adapter(tiny_adapter):
    return tiny_adapter("indextts2")


@pytest.fixture(scope="module")
def rows(adapter):
    sr = adapter.facts.sampling_rate
    clip = lambda name, seconds: load_reference(name, sr, seconds)[0]  # noqa: E731
    return [AdapterRow("你好，世界。今天天气很好。", clip("zh_female_1.wav", 1.3), None, seed=1),
            AdapterRow("Hello there, how are you?", clip("en_male_1.wav", 1.1), None, seed=2),
            AdapterRow("短句。", clip("en_female_1.wav", 0.9), None, seed=3),
            AdapterRow("One more line in another voice.", clip("zh_male_1.wav", 1.2), None, seed=4)]


def alone(adapter, row, params):
    """(codes, audio, stop reason) of ``row`` decoded alone through ``generate``."""
    inputs = adapter.preprocess([row], params)
    outputs = adapter.generate(inputs, params)
    n = outputs.code_lengths[0]
    return (outputs.codes[0, :n].tolist(), adapter.postprocess(outputs, inputs)[0],
            adapter.stop_reasons(outputs, inputs)[0])


def drive(batch, plan: dict[int, list], *, release_at: dict[int, list] | None = None, max_steps: int = 200):
    """Step ``batch``; before step k prefill ``plan[k]`` ((key, row) pairs) and release ``release_at[k]`` keys.
    Returns {key: (codes, audio, stop reason)} of the rows that finished."""
    done: dict = {}
    for step in range(max_steps):
        for key in (release_at or {}).get(step, []):
            batch.release([key])
        if plan.get(step):
            batch.prefill(plan[step])
        if not batch.num_rows and step > max(plan):
            break
        for out in batch.decode_step():
            if out.stop_reason is not None:
                row = next(r for r in batch.rows if r.key == out.key)
                done[out.key] = (list(row.codes), out.audio, out.stop_reason)
                batch.release([out.key])
            else:
                assert out.audio.size == 0  # IndexTTS 2 makes a row's audio once its codes are done
    return done


def assert_same(got, want, what):
    assert got[0] == want[0], f"{what}: codes {got[0]} != {want[0]}"
    assert got[2] == want[2], what
    assert got[1].shape == want[1].shape, f"{what}: {got[1].shape} != {want[1].shape}"
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=AUDIO_ATOL, err_msg=what)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED, BEAMS,
                                    SynthesisParams(greedy=True, num_beams=1, max_new_tokens=40, use_cache=False)],
                         ids=["greedy", "sampled", "beams", "no-kv-cache"])
def test_rows_joining_and_leaving_a_running_batch_make_what_they_make_alone(adapter, rows, params):
    want = [alone(adapter, row, params) for row in rows]
    assert len({len(w[0]) for w in want}) > 1  # rows of different lengths: they really leave at different steps
    batch = adapter.start_decode(params)
    done = drive(batch, {0: [("a", rows[0]), ("b", rows[1])], 3: [("c", rows[2])], 5: [("d", rows[3])]})
    for key, row, expected in zip("abcd", rows, want):
        assert_same(done[key], expected, f"row {key} ({row.text!r})")
    assert batch.num_padded_row_steps == 0 and batch.num_rows == 0


def test_a_row_at_the_cap_ends_with_its_codes_and_the_cap_reason(adapter, rows):
    params = SynthesisParams(greedy=True, num_beams=1, max_new_tokens=4)
    want = alone(adapter, rows[0], params)
    done = drive(adapter.start_decode(params), {0: [("a", rows[0])]})
    assert want[2] is StopReason.MAX_NEW_TOKENS and len(want[0]) == 4
    assert_same(done["a"], want, "capped row")


def test_a_row_released_mid_way_leaves_the_others_unchanged(adapter, rows):
    want = {i: alone(adapter, rows[i], GREEDY) for i in (0, 3)}
    batch = adapter.start_decode(GREEDY)
    done = drive(batch, {0: [("a", rows[1]), ("b", rows[0]), ("c", rows[3])]}, release_at={2: ["a"]})
    assert "a" not in done
    assert_same(done["b"], want[0], "b")
    assert_same(done["c"], want[3], "c")


@pytest.mark.parametrize("params", [SAMPLED, BEAMS], ids=["sampled", "beams"])
def test_an_out_of_memory_error_inside_a_step_leaves_the_batch_as_it_was(adapter, rows, monkeypatch, params):
    """A real torch.OutOfMemoryError raised by the GPT in the middle of a sampled decode step (after the rows drew
    their codes; with beams, after the stream rows were reordered): the step is undone (stream, beam searches and
    generators), and going on gives exactly the uninterrupted run."""
    plan = {0: [("a", rows[0]), ("b", rows[1]), ("c", rows[2])]}
    reference = drive(adapter.start_decode(params), plan)
    batch = adapter.start_decode(params)
    batch.prefill(plan[0])
    batch.decode_step()
    gpt2 = adapter.model.gpt.gpt
    original = type(gpt2).forward
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        raise torch.OutOfMemoryError("simulated: out of memory in the GPT")

    with monkeypatch.context() as patch:
        patch.setattr(type(gpt2), "forward", flaky)
        with pytest.raises(torch.OutOfMemoryError):
            batch.decode_step()
    assert calls["n"] == 1
    done = drive(batch, {0: []})
    for key in "abc":
        assert done[key][0] == reference[key][0]
        np.testing.assert_array_equal(done[key][1], reference[key][1])  # bit for bit: the same computation


def _engine_results(adapter, requests, config, stream_index=None):
    engine = Engine(adapter, config)
    assert engine.continuous  # IndexTTS 2 offers the step interface: the engine batches per decode step
    with engine:
        handles = [engine.submit(r, stream=(i == stream_index)) for i, r in enumerate(requests)]
        results = [h.result(timeout=600) for h in handles]
        chunks = list(handles[stream_index].stream()) if stream_index is not None else []
    return results, chunks, engine.stats()


def test_the_engine_batches_indextts2_continuously_and_each_request_gets_its_own_audio(adapter, rows):
    """Through the engine (continuous batching, cap 3, simulated OOM in steps and prefills: the engine's seeded draws
    make the 4th call of several rows run out of memory): every request's audio is what it is one by one (cap 1),
    its stream concatenates to it, and requests really shared batches."""
    sr = adapter.facts.sampling_rate
    requests = [SynthesisRequest(text=row.text, reference_audio=ReferenceAudio(row.reference_audio, sr),
                                 params=SynthesisParams(seed=row.seed, greedy=True, num_beams=1, max_new_tokens=40))
                for row in rows]
    want, _, _ = _engine_results(adapter, requests, EngineConfig(max_batch_size=1, wait_window_ms=0))
    got, chunks, stats = _engine_results(adapter, requests, EngineConfig(max_batch_size=3, wait_window_ms=0,
                                                                         simulate_oom_probability=0.3),
                                         stream_index=2)
    for i, (result, expected) in enumerate(zip(got, want)):
        assert result.ok and expected.ok, (result.error, expected.error)
        assert result.audio.shape == expected.audio.shape and result.audio.size > 0, i
        np.testing.assert_allclose(result.audio, expected.audio, rtol=0, atol=AUDIO_ATOL, err_msg=f"request {i}")
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), got[2].audio)
    assert stats.continuous and stats.num_padded_row_steps == 0 and stats.num_oom >= 1
    assert max(s.batch_size for r in got for s in r.segments) > 1
