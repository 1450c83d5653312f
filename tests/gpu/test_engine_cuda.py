"""The engine on a real CUDA device: a real ``torch.OutOfMemoryError`` is survived, memory is given back, batched
equals one by one on the device. Runs only where CUDA exists (``pytest -m gpu tests/gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.fakes import FakeAdapter, fake_audio
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.memory import CudaMemoryProbe
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


class HungryAdapter(FakeAdapter):
    """Allocates ``bytes_per_row`` of real device memory per row inside generate, so large batches really OOM."""

    def __init__(self, bytes_per_row: int):
        super().__init__(device="cuda")
        self.bytes_per_row = bytes_per_row

    def generate(self, inputs, params):
        rows = inputs["rows"]
        block = torch.empty(len(rows) * self.bytes_per_row, dtype=torch.uint8, device="cuda")  # may OOM for real
        block.fill_(1)
        out = super().generate(inputs, params)
        del block
        return out


def test_real_cuda_oom_is_survived_and_memory_given_back():
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    baseline = torch.cuda.memory_allocated()
    adapter = HungryAdapter(bytes_per_row=int(free / 2.5))  # 2 rows fit, 3 do not
    engine = Engine(adapter, EngineConfig(max_batch_size=8, wait_window_ms=0))
    assert isinstance(engine.probe, CudaMemoryProbe)
    budget = engine.stats().memory_budget_bytes
    assert budget is not None and 0 < budget <= free
    ref = ReferenceAudio(np.zeros(16000, np.float32), 16000)
    texts = [f"Row {w} on the device." for w in ("one", "two", "three", "four", "five", "six")]
    handles = [engine.submit(SynthesisRequest(text=t, reference_audio=ref, params=SynthesisParams(seed=5)))
               for t in texts]
    engine.start()
    results = [h.result(timeout=120) for h in handles]
    assert [r.status for r in results] == [RequestStatus.DONE] * 6
    for r in results:
        (seg,) = r.segments
        np.testing.assert_array_equal(r.audio, fake_audio(seg.text, 5, ref.samples))
    stats = engine.stats()
    print(f"cap history {engine.batch_cap.history}, OOMs {stats.num_oom}, batches {adapter.calls}, "
          f"learned activation/KV ratio {engine.estimator.activation_kv_ratio:.3g}")
    # the measured peak of the 2-row batches taught the estimator: a 3-row batch no longer fits the budget
    assert engine.estimator.batch_bytes([1000] * 3) > budget
    assert stats.num_oom >= 1 and max(len(b) for b in adapter.batches) <= 2
    assert torch.cuda.memory_allocated() - baseline < 64 * 1024**2  # nothing leaked from the failed batches
    engine.shutdown()


def test_tiny_checkpoint_batched_equals_one_by_one_on_cuda(tiny_checkpoint):
    from tts_app.adapters import load_adapter

    adapter = load_adapter(tiny_checkpoint("csm"), device="cuda", dtype="float32")
    sr = adapter.facts.sampling_rate
    t = np.arange(sr) / sr
    ref = ReferenceAudio((0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), sr)
    text = "The quick brown fox jumps. Pack my box with jugs. How quick zebras jump. Judge my vow."
    out = {}
    for batch_size in (4, 1):
        engine = Engine(adapter, EngineConfig(max_batch_size=batch_size, wait_window_ms=0)).start()
        out[batch_size] = engine.submit(SynthesisRequest(
            text=text, reference_audio=ref,
            params=SynthesisParams(greedy=True, max_new_tokens=6, max_segment_chars=30))).result(timeout=300)
        engine.shutdown()
    assert out[4].ok and out[1].ok and len(out[4].audio) == len(out[1].audio) > 0
    np.testing.assert_allclose(out[4].audio, out[1].audio, atol=1e-3)
