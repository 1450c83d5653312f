"""ZeroGPU: calls sized from the request and the measured speed, split to fit, through a stub ``spaces`` module
(the real one talks to Hugging Face's GPU scheduler); and a no-op off Spaces."""

from __future__ import annotations

import sys
import types

import pytest

from tts_app.zerogpu import GpuCalls, StepSpeed, ZeroGPUConfig, on_spaces, on_zero_gpu


class StubSpaces(types.ModuleType):
    """``spaces`` as a ZeroGPU Space has it: ``GPU(duration=callable)`` evaluates the duration with the call's own
    arguments before running it (as ``spaces.zero.wrappers`` does), and records it."""

    def __init__(self):
        super().__init__("spaces")
        self.durations: list[float] = []
        self.decorated: list = []

    def GPU(self, task=None, *, duration=None):  # noqa: N802 - the package's name
        def decorate(fn):
            self.decorated.append(fn)

            def handler(*args, **kwargs):
                self.durations.append(duration(*args, **kwargs) if callable(duration) else duration)
                return fn(*args, **kwargs)

            return handler

        return decorate(task) if callable(task) else decorate


@pytest.fixture()
def stub_spaces(monkeypatch):
    stub = StubSpaces()
    monkeypatch.setitem(sys.modules, "spaces", stub)
    monkeypatch.setenv("SPACE_ID", "someone/tts-demo")
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    return stub


def steps_of(rows, params):
    return [len(text) * 10 for text in rows]  # 10 decode steps per character


def echo(rows, params):
    return [text.upper() for text in rows]


def test_environment_detection():
    assert on_spaces({"SPACE_ID": "a/b"}) and not on_spaces({})
    assert on_zero_gpu({"SPACES_ZERO_GPU": "true"}) and not on_zero_gpu({"SPACES_ZERO_GPU": "false"})
    assert not on_zero_gpu({})


def test_off_zero_gpu_nothing_is_wrapped(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "spaces", None)  # importing it would fail: it must not be imported
    calls = GpuCalls(ZeroGPUConfig(), steps_of)
    wrapped = calls.wrap(echo)
    assert wrapped is echo
    assert calls.run(wrapped, ["ab", "c"], None) == ["AB", "C"]


def test_duration_follows_request_size_and_measured_speed(stub_spaces):
    config = ZeroGPUConfig(max_call_s=120, min_call_s=5, overhead_s=5, safety_factor=1.5, initial_s_per_step=0.1)
    calls = GpuCalls(config, steps_of)
    short, longer = calls.duration_s(["abc"], None), calls.duration_s(["a" * 60], None)
    assert short == pytest.approx((5 + 30 * 0.1) * 1.5)  # 30 steps x 0.1 s + 5 s overhead, x 1.5
    assert longer == pytest.approx((5 + 600 * 0.1) * 1.5)  # more text -> more steps -> a longer call
    assert calls.duration_s(["a"], None) == pytest.approx(9.0)  # (5 + 10 x 0.1) x 1.5
    wrapped = calls.wrap(echo)
    assert stub_spaces.decorated == [echo]
    assert calls.run(wrapped, ["abc"], None) == ["ABC"]
    assert stub_spaces.durations == [pytest.approx(short)]  # ZeroGPU was asked for exactly the estimate
    # that call was timed (it took ~0 s): the estimate now uses the measured speed instead of the initial guess
    assert calls.speed.seconds_per_step(1) < 0.1
    assert calls.duration_s(["a" * 60], None) < longer
    assert calls.duration_s(["a"], None) == pytest.approx(7.5, abs=0.01)  # the overhead alone, x 1.5
    tiny = GpuCalls(ZeroGPUConfig(overhead_s=0, min_call_s=5, initial_s_per_step=0.01), steps_of)
    assert tiny.duration_s(["a"], None) == 5  # never below the minimum


def test_a_batch_too_long_for_one_call_is_split_into_calls_that_fit(stub_spaces):
    config = ZeroGPUConfig(max_call_s=60, min_call_s=5, overhead_s=5, safety_factor=1.5, initial_s_per_step=0.1)
    calls = GpuCalls(config, steps_of)
    calls.speed.observe(4, steps=100, seconds=10.0)  # measured: 0.1 s per step with 4 rows ...
    calls.speed.observe(8, steps=100, seconds=20.0)  # ... and 0.2 s per step with 8 rows
    wrapped = calls.wrap(echo)
    # rows of 30 characters: 300 steps. All 8 at once: (5 + 300 x 0.2) x 1.5 = 97.5 s > 60 s; 4 at once: 52.5 s.
    rows = [f"{i:02d}" + "x" * 28 for i in range(8)]
    assert calls.run(wrapped, rows, None) == [r.upper() for r in rows]  # every row once, in order
    assert len(stub_spaces.durations) == calls.num_calls == 2
    assert stub_spaces.durations[0] == pytest.approx(52.5)  # the second is sized from the first one's timing
    assert all(d <= config.max_call_s for d in stub_spaces.durations)


def test_one_row_over_the_limit_still_runs_alone(stub_spaces):
    calls = GpuCalls(ZeroGPUConfig(max_call_s=10, min_call_s=5), steps_of)
    wrapped = calls.wrap(echo)
    assert calls.run(wrapped, ["x" * 500], None) == ["X" * 500]
    assert stub_spaces.durations == [10]  # capped at the maximum


def test_step_speed_scales_unmeasured_batch_sizes_up():
    speed = StepSpeed(0.1)
    assert speed.seconds_per_step(4) == 0.1
    speed.observe(2, steps=10, seconds=1.0)
    assert speed.seconds_per_step(2) == pytest.approx(0.1)
    assert speed.seconds_per_step(8) == pytest.approx(0.4)  # from batch 2, x 8/2


def test_the_engine_runs_its_batches_through_spaces_gpu_on_zero_gpu(stub_spaces, monkeypatch):
    """On ZeroGPU the engine's device work goes through ``spaces.GPU`` calls sized from the batch, a batch too long
    for one call is split into calls that fit (a JSONL job's lines batch the same way), and the audio is the same
    as off ZeroGPU."""
    import threading

    import numpy as np

    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import SynthesisParams, SynthesisRequest

    texts = [f"Line number {i} of a job, spoken at some length." for i in range(6)]

    def run(zero: bool, **engine_kwargs):
        monkeypatch.setenv("SPACES_ZERO_GPU", "true" if zero else "false")
        gate = threading.Event()  # hold the worker until every line is queued: they make one batch
        adapter = FakeAdapter(gate=gate)
        engine = Engine(adapter, EngineConfig(max_batch_size=8, wait_window_ms=0), **engine_kwargs).start()
        try:
            handles = [engine.submit(SynthesisRequest(text=t, params=SynthesisParams(seed=3))) for t in texts]
            gate.set()
            results = [h.result(timeout=60) for h in handles]
        finally:
            engine.shutdown()
        assert all(r.ok for r in results), [r.error for r in results]
        return [r.audio for r in results], adapter, engine

    plain, _, off = run(False)
    assert not off.gpu_calls.enabled and stub_spaces.durations == []  # off ZeroGPU: spaces.GPU is never used
    zero, _, engine = run(True)
    assert engine.gpu_calls.num_calls >= 1 and len(stub_spaces.durations) == engine.gpu_calls.num_calls
    assert all(5.0 <= d <= 120.0 for d in stub_spaces.durations)  # ZeroGPUConfig's default limits
    for a, b in zip(plain, zero):
        np.testing.assert_array_equal(a, b)
    # a short call limit: the same lines run in several calls that each fit, with the same audio
    stub_spaces.durations.clear()
    tight = ZeroGPUConfig(max_call_s=8.0, min_call_s=1.0, overhead_s=1.0, safety_factor=1.0, initial_s_per_step=0.05)
    split, adapter, engine = run(True, zero_gpu=tight)
    assert engine.gpu_calls.num_calls > 1 and len(stub_spaces.durations) == engine.gpu_calls.num_calls
    assert all(d <= tight.max_call_s for d in stub_spaces.durations)
    assert max(adapter.calls) < len(texts)  # no generate call held all the lines
    for a, b in zip(plain, split):
        np.testing.assert_array_equal(a, b)


def test_a_step_adapter_on_zero_gpu_runs_its_batches_inside_spaces_gpu_calls(stub_spaces, monkeypatch):
    """A family that batches per decode step off ZeroGPU (VibeVoice, IndexTTS 2) would keep its KV cache on the GPU
    between steps, outside any spaces.GPU call, where ZeroGPU lends no GPU. On ZeroGPU it batches request-level,
    every batch inside calls, with the same audio as its continuous batching elsewhere."""
    import numpy as np

    from tests.fakes import FakeStepAdapter
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import SynthesisParams, SynthesisRequest

    texts = [f"Line {i} of a job, a little longer each time{'.' * i}" for i in range(4)]

    def run(zero: bool, **engine_kwargs):
        monkeypatch.setenv("SPACES_ZERO_GPU", "true" if zero else "false")
        engine = Engine(FakeStepAdapter(), EngineConfig(max_batch_size=4, wait_window_ms=0), **engine_kwargs).start()
        try:
            results = [h.result(timeout=60) for h in
                       [engine.submit(SynthesisRequest(text=t, params=SynthesisParams(seed=5))) for t in texts]]
        finally:
            engine.shutdown()
        assert all(r.ok for r in results), [r.error for r in results]
        return [r.audio for r in results], engine

    plain, off = run(False)
    assert off.continuous and stub_spaces.durations == []
    zero, on = run(True)
    assert not on.continuous and on.gpu_calls.num_calls >= 1 and len(stub_spaces.durations) == on.gpu_calls.num_calls
    for a, b in zip(plain, zero):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="ZeroGPU"):
        run(True, continuous=True)
