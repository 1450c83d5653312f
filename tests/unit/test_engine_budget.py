"""One memory budget for admission, scheduling and refusals: the voice-prefix cache is evicted before a row that fits
the budget is refused, and every refusal quotes the budget it was checked against."""

from __future__ import annotations

import re

import numpy as np

from tests.fakes import FakeMemoryProbe, FakeStepAdapter, fake_facts
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.engine.memory import format_bytes
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

FACTS = fake_facts(max_segment_chars=200)
NUM_VOICES = 15
VOICE_BYTES = 1000  # what FakeDecodeBatch stores per voice in the prefix cache


def voice(i: int) -> ReferenceAudio:
    samples = np.random.default_rng(i).uniform(-0.3, 0.3, 16000).astype(np.float32)
    return ReferenceAudio(samples=samples, sampling_rate=16000, key=f"voice{i}")


def request(text: str, ref: ReferenceAudio, seed: int = 0) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=ref, params=SynthesisParams(seed=seed, greedy=True))


def quoted_sizes(message: str) -> tuple[str, str]:
    """(what the segment needs, the budget) as the refusal writes them."""
    found = re.search(r"needs (\S+ \S+) but the memory budget is (\S+ \S+?)[;,]", message)
    assert found, message
    return found.group(1), found.group(2)


def test_after_15_voices_fill_the_prefix_cache_a_request_that_fits_the_budget_runs():
    config = dict(max_batch_size=4, activation_bytes_per_row=0, wait_window_ms=0)
    big = request("A longer sentence that needs most of the memory budget to itself.", voice(99), seed=7)
    need = Engine(FakeStepAdapter(FACTS), EngineConfig(**config)).estimate_request_bytes(big)
    budget = need + 5 * VOICE_BYTES  # fits alone, but not next to 15 cached voices
    assert budget // 8 >= NUM_VOICES * VOICE_BYTES  # the cache's share of the budget holds all 15
    engine = Engine(FakeStepAdapter(FACTS), EngineConfig(memory_budget_bytes=budget, **config)).start()
    for i in range(NUM_VOICES):
        assert engine.submit(request("Hi.", voice(i), seed=i)).result(timeout=30).ok
    assert engine.stats().prefix_cache_bytes == NUM_VOICES * VOICE_BYTES
    result = engine.submit(big).result(timeout=30)
    assert result.ok, result.error  # before: "needs 120.8 KiB but the memory budget is 125.6 KiB"
    stats = engine.stats()
    assert stats.prefix_cache_bytes <= budget - need + VOICE_BYTES  # evicted to make room, the rest kept
    assert stats.memory_budget_bytes == budget
    engine.shutdown()


def test_every_refusal_quotes_the_budget_it_was_checked_against_and_needs_more_than_it():
    probe = FakeMemoryProbe(available_bytes=10 * 1024 ** 2)
    config = EngineConfig(max_batch_size=4, activation_bytes_per_row=0, wait_window_ms=0, safety_margin_bytes=0)
    engine = Engine(FakeStepAdapter(FACTS), config, memory_probe=probe)
    text = "A sentence of some length for the row."
    need = engine.estimate_request_bytes(request(text, voice(1)))
    # refused at submit: the budget is too small from the start
    small = Engine(FakeStepAdapter(FACTS), EngineConfig(memory_budget_bytes=need - 1, activation_bytes_per_row=0,
                                                        wait_window_ms=0))
    refused = small.submit(request(text, voice(1))).result(timeout=5)
    assert refused.status is RequestStatus.FAILED
    needs, budget = quoted_sizes(refused.error)
    assert (needs, budget) == (format_bytes(need), format_bytes(need - 1))
    # refused by the scheduler: the device's free memory fell after submit (the budget is measured again)
    handle = engine.submit(request(text, voice(1)))
    probe.set_available(int((need - 1) / config.memory_utilization))
    engine.start()
    refused = handle.result(timeout=30)
    assert refused.status is RequestStatus.FAILED
    needs, budget = quoted_sizes(refused.error)
    assert needs == format_bytes(need) and budget == format_bytes(engine.stats().memory_budget_bytes)
    assert engine.stats().memory_budget_bytes < need
    engine.shutdown()
