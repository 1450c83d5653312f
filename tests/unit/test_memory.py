"""Memory estimate, budget, size parsing and OOM detection."""

from __future__ import annotations

import pytest
import torch

from tests.fakes import FakeMemoryProbe, fake_facts
from tts_app.engine.memory import (
    ACTIVATION_FLOOR_BYTES,
    ACTIVATION_KV_RATIO,
    CpuMemoryProbe,
    MemoryEstimator,
    is_out_of_memory,
    make_simulated_oom,
    max_text_chars_for_budget,
    memory_budget_bytes,
    parse_size,
)
from tts_app.errors import InputError


def test_kv_term_is_the_analytic_cache_size():
    facts = fake_facts(num_layers=3, num_kv_heads=4, head_dim=16, dtype_bytes=2, cfg_multiplier=2)
    est = MemoryEstimator(facts.kv_bytes_per_position, facts.cfg_multiplier, activation_bytes_per_row=0)
    positions = 123
    # K and V, per layer, per KV head, per head dim, per position, per forward row (CFG doubles the rows)
    analytic = 2 * 3 * 4 * 16 * 2 * positions * 2
    assert est.kv_bytes(positions) == analytic
    # a real KV cache tensor pair of that shape has exactly that many bytes
    k = torch.zeros(2, 4, positions, 16, dtype=torch.float16)  # (cfg rows, kv heads, positions, head dim)
    assert est.kv_bytes(positions) == 3 * 2 * k.numel() * k.element_size()


def test_batch_is_padded_to_its_longest_row():
    est = MemoryEstimator(kv_bytes_per_position=100, cfg_multiplier=1, activation_bytes_per_row=1000)
    assert est.batch_bytes([10, 50, 20]) == 3 * (100 * 50 + 1000)
    assert est.batch_bytes([]) == 0


def test_default_activation_estimate_follows_documented_formula():
    est = MemoryEstimator(kv_bytes_per_position=1024, cfg_multiplier=1)
    assert est.activation_bytes(1000) == int(ACTIVATION_KV_RATIO * 1024 * 1000) + ACTIVATION_FLOOR_BYTES
    assert est.row_bytes(1000) == 1024 * 1000 + est.activation_bytes(1000)


@pytest.mark.parametrize("text,expected", [
    ("2GiB", 2 * 1024**3), ("512MB", 512 * 1000**2), ("1.5 GiB", int(1.5 * 1024**3)), ("1000", 1000),
    ("64kib", 64 * 1024), ("3G", 3 * 1000**3),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "lots", "-1GiB", "2 GiBs", "GiB"])
def test_parse_size_rejects_bad_text_with_a_hint(bad):
    with pytest.raises(InputError, match="2GiB"):
        parse_size(bad)


def test_budget_explicit_probe_or_unlimited():
    probe = FakeMemoryProbe(available_bytes=10 * 1024**3)
    assert memory_budget_bytes(probe, memory_budget_bytes=123, memory_utilization=0.9,
                               safety_margin_bytes=0) == 123
    assert memory_budget_bytes(probe, memory_budget_bytes=None, memory_utilization=0.5,
                               safety_margin_bytes=1024**3) == 4 * 1024**3
    assert memory_budget_bytes(FakeMemoryProbe(available_bytes=100), memory_budget_bytes=None,
                               memory_utilization=0.9, safety_margin_bytes=1000) == 0
    assert memory_budget_bytes(CpuMemoryProbe(), memory_budget_bytes=None, memory_utilization=0.9,
                               safety_margin_bytes=0) is None


def test_oom_is_detected_by_type_not_by_message():
    assert is_out_of_memory(torch.OutOfMemoryError("whatever"))
    assert is_out_of_memory(make_simulated_oom(4, "test"))
    assert not is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(MemoryError())


def test_max_text_chars_for_budget_is_the_largest_fitting_length():
    row = lambda chars: 1000 + 10 * chars  # noqa: E731
    assert max_text_chars_for_budget(row, 1000 + 10 * 37) == 37
    assert max_text_chars_for_budget(row, 999) == 0


def test_observe_raises_the_activation_estimate_to_a_measured_peak_and_never_lowers_it():
    est = MemoryEstimator(kv_bytes_per_position=1000, cfg_multiplier=1)
    positions = [400, 500]
    before = est.batch_bytes(positions)
    assert not est.observe(positions, before // 2)  # below the estimate: nothing learned
    assert est.batch_bytes(positions) == before
    assert est.observe(positions, 3 * before)
    assert 3 * before <= est.batch_bytes(positions) <= 3 * before + 16
    raised = est.activation_kv_ratio
    assert not est.observe(positions, before)
    assert est.activation_kv_ratio == raised
    fixed = MemoryEstimator(kv_bytes_per_position=1000, activation_bytes_per_row=5)
    assert not fixed.observe(positions, 10**12) and fixed.batch_bytes(positions) == 2 * (500_000 + 5)
