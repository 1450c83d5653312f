"""VibeVoice's step interface (``VibeVoiceDecodeBatch``) and continuous batching through the engine, on the tiny
random checkpoint: rows that join a running batch, leave it, or live through an out-of-memory step make the same
tokens and audio as alone."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapter_helpers import load_reference
from tts_app.adapters.base import AdapterRow
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.request import Priority, ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

TEXTS = ["Hello there.", "A somewhat longer sentence to speak here.", "你好世界", "Short one.",
         "Another voice says something else entirely."]
CLIPS = ["en_female_1.wav", "en_male_1.wav", "zh_female_1.wav"]
AUDIO_ATOL = 1e-4  # float32 reassociation between batch shapes (as the adapter's batch-vs-alone tests)
PARAMS = SynthesisParams(max_new_tokens=40)


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint):
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    return VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def references(adapter):
    return [load_reference(c, adapter.facts.sampling_rate, 3.0)[0] for c in CLIPS]


@pytest.fixture(scope="module")
def rows(references):
    return [AdapterRow(text=t, reference_audio=references[i % len(references)], reference_text=None, seed=20 + i)
            for i, t in enumerate(TEXTS)]


def alone(adapter, row, params=PARAMS):
    """(tokens, audio) of ``row`` decoded alone through ``generate``."""
    inputs = adapter.preprocess([row], params)
    outputs = adapter.generate(inputs, params)
    return outputs.token_ids[0].tolist(), adapter.postprocess(outputs, inputs)[0]


@pytest.fixture(scope="module")
def alone_runs(adapter, rows):
    return {row.text: alone(adapter, row) for row in rows}


def drive(batch, plan: dict[int, list], *, release_at: dict[int, list] | None = None, max_steps: int = 200):
    """Step ``batch``; before step k prefill ``plan[k]`` ((key, row) pairs) and release ``release_at[k]`` keys.
    Returns {key: (tokens, audio)} of the rows that finished."""
    audio: dict = {}
    done: dict = {}
    for step in range(max_steps):
        for key in (release_at or {}).get(step, []):
            batch.release([key])
        if plan.get(step):
            batch.prefill(plan[step])
        if not batch.num_rows and step > max(plan):
            break
        for out in batch.decode_step():
            audio.setdefault(out.key, []).append(out.audio)
            if out.stop_reason is not None:
                row = next(r for r in batch.rows if r.key == out.key)
                done[out.key] = (list(row.token_ids), np.concatenate(audio[out.key]))
                batch.release([out.key])
    return done


def assert_same(got, want, what):
    assert got[0] == want[0], f"{what}: tokens {got[0]} != {want[0]}"
    assert got[1].shape == want[1].shape, f"{what}: {got[1].shape} != {want[1].shape}"
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=AUDIO_ATOL, err_msg=what)


@pytest.mark.parametrize("use_cache", [True, False])
def test_rows_joining_and_leaving_a_running_batch_make_what_they_make_alone(adapter, rows, use_cache):
    params = SynthesisParams(max_new_tokens=40, use_cache=use_cache)
    want = {row.text: alone(adapter, row, params) for row in rows}
    batch = adapter.start_decode(params)
    plan = {0: [("a", rows[0]), ("b", rows[1])], 2: [("c", rows[2])], 3: [("d", rows[3]), ("e", rows[4])]}
    done = drive(batch, plan)
    for key, row in zip("abcde", rows):
        assert_same(done[key], want[row.text], f"row {key} ({row.text!r}), use_cache={use_cache}")
    assert batch.num_padded_row_steps == 0 and batch.num_rows == 0


def test_a_row_released_mid_way_leaves_the_others_unchanged(adapter, rows, alone_runs):
    batch = adapter.start_decode(PARAMS)
    done = drive(batch, {0: [("a", rows[1]), ("b", rows[0]), ("c", rows[4])]}, release_at={2: ["a"]})
    assert "a" not in done
    assert_same(done["b"], alone_runs[rows[0].text], "b")
    assert_same(done["c"], alone_runs[rows[4].text], "c")


def test_an_out_of_memory_error_inside_a_step_leaves_the_batch_as_it_was(adapter, rows, monkeypatch):
    """A real torch.OutOfMemoryError raised by the language model in the middle of a decode step (after the CFG
    negative stream already ran): the step is undone, and retrying it gives exactly the uninterrupted run."""
    reference = drive(adapter.start_decode(PARAMS), {0: [("a", rows[0]), ("b", rows[1]), ("c", rows[2])]})
    batch = adapter.start_decode(PARAMS)
    batch.prefill([("a", rows[0]), ("b", rows[1]), ("c", rows[2])])
    batch.decode_step()
    lm = adapter.model.model.language_model
    original = type(lm).forward
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the positive stream's forward, after the negative stream's
            raise torch.OutOfMemoryError("simulated: out of memory in the positive stream")
        return original(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(type(lm), "forward", flaky)
        with pytest.raises(torch.OutOfMemoryError):
            batch.decode_step()
    assert calls["n"] == 2
    # go on from the restored state: finish every row
    audio = {"a": [], "b": [], "c": []}
    replay = adapter.start_decode(PARAMS)  # the first step's audio, made the same way
    replay.prefill([("a", rows[0]), ("b", rows[1]), ("c", rows[2])])
    for out in replay.decode_step():
        audio[out.key].append(out.audio)
    done = {}
    while batch.num_rows:
        for out in batch.decode_step():
            audio[out.key].append(out.audio)
            if out.stop_reason is not None:
                row = next(r for r in batch.rows if r.key == out.key)
                done[out.key] = (list(row.token_ids), np.concatenate(audio[out.key]))
                batch.release([out.key])
    for key in "abc":
        assert done[key][0] == reference[key][0]
        np.testing.assert_array_equal(done[key][1], reference[key][1])  # bit for bit: the same computation


def test_a_voice_seen_before_starts_from_its_cached_prefix(adapter, rows, alone_runs):
    from tts_app.adapters.base import PrefixCache

    cache = PrefixCache(max_entries=4)
    batch = adapter.start_decode(PARAMS, cache)
    same_voice = [AdapterRow(text=t, reference_audio=rows[0].reference_audio, reference_text=None, seed=50 + i)
                  for i, t in enumerate(["One line of the book.", "Two lines of it.", "And a third."])]
    want = {r.text: alone(adapter, r) for r in same_voice}
    done = drive(batch, {0: [("a", same_voice[0])], 1: [("b", same_voice[1]), ("c", same_voice[2])]})
    assert (cache.num_misses, cache.num_hits) == (1, 1) and len(cache) == 1 and cache.num_bytes > 0
    for key, row in zip("abc", same_voice):
        assert_same(done[key], want[row.text], f"prefix reuse, row {key}")


def _engine_results(adapter, requests, config, delays=None, cancel=()):
    engine = Engine(adapter, config).start()
    handles = []
    for i, request in enumerate(requests):
        if delays:
            time.sleep(delays[i])
        handles.append(engine.submit(request))
        if i in cancel:
            handles[-1].cancel()
    results = [h.result(timeout=600) for h in handles]
    stats = engine.stats()
    engine.shutdown()
    return results, stats


def _requests(references, specs):
    sr = 24000
    return [SynthesisRequest(text=text, reference_audio=ReferenceAudio(references[voice], sr),
                             params=SynthesisParams(seed=seed, max_new_tokens=40), priority=priority)
            for text, voice, seed, priority in specs]


@pytest.fixture(scope="module")
def one_by_one(adapter, references):
    """Each request of the pool alone (engine at max batch 1): the reference audio."""
    pool = _requests(references, [(t, i % 3, 7 * i, Priority.JOB) for i, t in enumerate(TEXTS)])
    results, _ = _engine_results(adapter, pool, EngineConfig(max_batch_size=1, wait_window_ms=0,
                                                             prefix_cache_entries=0))
    return {(r.text, r.params.seed): res for r, res in zip(pool, results)}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(range(len(TEXTS)))), priorities=st.lists(st.sampled_from(list(Priority)),
                                                                           min_size=len(TEXTS),
                                                                           max_size=len(TEXTS)),
       cancel=st.sets(st.integers(0, len(TEXTS) - 1), max_size=1), oom=st.sampled_from([0.0, 0.3]),
       cap=st.integers(2, 4), seed=st.integers(0, 1000))
def test_continuous_engine_equals_one_by_one_under_random_arrivals_priorities_cancels_and_oom(
        adapter, references, one_by_one, order, priorities, cancel, oom, cap, seed):
    """The pool of requests in a random order with random priorities, submitted at random moments while others
    decode, one maybe cancelled, random out-of-memory errors in prefills and steps: every request that ran has the
    audio it has alone (same length; samples within float32 reassociation)."""
    rng = random.Random(seed)
    specs = [(TEXTS[i], i % 3, 7 * i, priorities[k]) for k, i in enumerate(order)]
    requests = _requests(references, specs)
    config = EngineConfig(max_batch_size=cap, wait_window_ms=0, simulate_oom_probability=oom)
    results, stats = _engine_results(adapter, requests, config, delays=[rng.uniform(0, 0.05) for _ in requests],
                                     cancel=cancel)
    for k, (request, result) in enumerate(zip(requests, results)):
        if k in cancel and result.status is RequestStatus.CANCELLED:
            continue
        assert result.ok, result.error
        want = one_by_one[(request.text, request.params.seed)]
        assert result.audio.shape == want.audio.shape, request.text
        np.testing.assert_allclose(result.audio, want.audio, rtol=0, atol=AUDIO_ATOL, err_msg=request.text)
    assert stats.continuous and stats.num_padded_row_steps == 0
