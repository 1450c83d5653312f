"""Test doubles others may reuse: a fake TTS adapter and a fake device-memory probe.

``FakeAdapter`` follows the real ``TTSAdapter`` protocol (preprocess -> generate -> postprocess) without a model;
``FakeStepAdapter`` adds the step interface (``DecodeBatch``: prefill / decode_step / release):
each row's audio is a deterministic function of the row's text, seed and reference audio only (never of its
batch-mates or of batch size), so "batched equals one by one" and "with OOM retries equals without" are exact
comparisons. Generate can be slowed, held at a gate, or made to raise.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from tts_app.adapters.base import (AdapterRow, DecodeBatch, GenerationDefaults, ModelFacts, PrefixCache,
                                   RowStep, TTSAdapter)
from tts_app.request import StopReason, SynthesisParams

FAKE_GENERATION_DEFAULTS = GenerationDefaults(greedy=False, temperature=1.0, top_p=1.0, top_k=50, cfg_scale=None,
                                              max_new_tokens=400, sources={"max_new_tokens": "fake default"})

FAKE_FACTS = ModelFacts(
    family="fake",
    sampling_rate=16000,
    num_layers=2,
    num_kv_heads=2,
    head_dim=8,
    dtype_bytes=4,
    cfg_multiplier=1,
    frames_per_second=50.0,
    text_positions_per_char=1.0,
    reference_positions_per_second=10.0,
    max_segment_chars=60,
    generation_defaults=FAKE_GENERATION_DEFAULTS,
    languages=("en", "zh"),
)


def fake_facts(*, default_max_new_tokens: int | None = None, **overrides) -> ModelFacts:
    """``FAKE_FACTS`` with some fields replaced (``default_max_new_tokens`` sets ``generation_defaults``'s cap)."""
    if default_max_new_tokens is not None:
        overrides["generation_defaults"] = replace(FAKE_GENERATION_DEFAULTS, max_new_tokens=default_max_new_tokens)
    return replace(FAKE_FACTS, **overrides)


def fake_audio(text: str, seed: int, reference: np.ndarray | None, sampling_rate: int = 16000,
               samples_per_char: int = 40) -> np.ndarray:
    """The audio ``FakeAdapter`` produces for one row: float32 ``(samples_per_char * len(text),)`` noise whose
    values depend only on (text, seed, reference samples)."""
    h = hashlib.sha256(f"{text}\x00{seed}\x00".encode())
    if reference is not None:
        h.update(np.ascontiguousarray(reference, dtype=np.float32).tobytes())
    rng = np.random.default_rng(int.from_bytes(h.digest()[:8], "little"))
    return rng.uniform(-0.5, 0.5, samples_per_char * max(1, len(text))).astype(np.float32)


class FakeAdapter(TTSAdapter):
    """A model-free adapter.

    Args:
        facts: model facts (memory estimate, sampling rate...); default ``FAKE_FACTS``.
        delay_s: seconds each generate call sleeps (a slow model).
        gate: when given, generate waits until the event is set (hold the worker inside a batch).
        raise_if: ``raise_if(rows)`` -> exception to raise inside generate, or None.
        device: reported device string.
        cap_if: ``cap_if(row)`` -> True when that row should report ``StopReason.MAX_NEW_TOKENS`` (a segment cut at
            its cap); default: never.
        unencodable: characters its "tokenizer" cannot encode (``unencodable_characters``).

    Attributes:
        batches: texts of every generate call that ran to completion, in order.
        calls: batch sizes of every generate call, including those that raised.
    """

    family = "fake"
    display_name = "Fake"

    def __init__(self, facts: ModelFacts | None = None, *, delay_s: float = 0.0,
                 gate: threading.Event | None = None,
                 raise_if: Callable[[list[AdapterRow]], BaseException | None] | None = None,
                 device: str = "cpu", samples_per_char: int = 40,
                 cap_if: Callable[[AdapterRow], bool] | None = None, unencodable: frozenset[str] = frozenset()):
        self.facts = facts or FAKE_FACTS
        self.unencodable = unencodable
        self.delay_s = delay_s
        self.gate = gate
        self.raise_if = raise_if
        self.device = device
        self.dtype = "float32"
        self.samples_per_char = samples_per_char
        self.cap_if = cap_if
        self.params_seen: list[SynthesisParams] = []  # params of every generate call, in order
        self.batches: list[list[str]] = []
        self.calls: list[int] = []
        self.entered = threading.Event()  # set when a generate call starts

    @classmethod
    def from_pretrained(cls, id_or_path, *, device="cpu", dtype="float32"):
        raise NotImplementedError("FakeAdapter has no checkpoint")

    @classmethod
    def make_tiny_checkpoint(cls, out_dir, seed=0):
        raise NotImplementedError("FakeAdapter has no checkpoint")

    def unencodable_characters(self, chars) -> set[str]:
        return set(chars) & set(self.unencodable)

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams):
        return {"rows": list(rows), "params": params}

    def generate(self, inputs, params: SynthesisParams):
        rows = inputs["rows"]
        self.calls.append(len(rows))
        self.params_seen.append(params)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.raise_if is not None:
            exc = self.raise_if(rows)
            if exc is not None:
                raise exc
        self.batches.append([r.text for r in rows])
        return inputs

    def postprocess(self, outputs, inputs) -> list[np.ndarray]:
        return [fake_audio(r.text, r.seed, r.reference_audio, self.facts.sampling_rate, self.samples_per_char)
                for r in outputs["rows"]]

    def stop_reasons(self, outputs, inputs) -> list[StopReason]:
        return [StopReason.MAX_NEW_TOKENS if self.cap_if is not None and self.cap_if(r) else StopReason.END_OF_SPEECH
                for r in outputs["rows"]]


class FakeMemoryProbe:
    """A device-memory probe with fixed numbers (bytes). Counts ``empty_cache`` calls.

    ``allocated`` / ``peak`` (bytes, None = unknown) stand for ``torch.cuda.memory_allocated`` /
    ``max_memory_allocated``; ``allocate(n)`` simulates a batch touching ``n`` more bytes at its peak.
    """

    def __init__(self, available_bytes: int | None, total_bytes: int | None = None, device: str = "cuda:0",
                 allocated_bytes: int | None = None):
        self.device = device
        self._available = available_bytes
        self._total = total_bytes if total_bytes is not None else available_bytes
        self.num_empty_cache = 0
        self.allocated = allocated_bytes
        self.peak = allocated_bytes

    def allocated_bytes(self) -> int | None:
        return self.allocated

    def peak_bytes(self) -> int | None:
        return self.peak

    def allocate(self, num_bytes: int) -> None:
        """A transient allocation: raises the peak to ``allocated + num_bytes``, leaves ``allocated`` as it was."""
        if self.allocated is not None:
            self.peak = max(self.peak or 0, self.allocated + num_bytes)

    def available_bytes(self) -> int | None:
        return self._available

    def total_bytes(self) -> int | None:
        return self._total

    def empty_cache(self) -> None:
        self.num_empty_cache += 1

    def set_available(self, available_bytes: int | None) -> None:
        self._available = available_bytes


class FakeStepAdapter(FakeAdapter):
    """``FakeAdapter`` with the step interface (``supports_decode_steps``): each row's audio (``fake_audio``, so the
    same as ``FakeAdapter``'s) comes out ``frame_samples`` samples per decode step, the last step reporting
    ``END_OF_SPEECH``; a row still speaking at ``max_new_tokens`` steps stops there with ``MAX_NEW_TOKENS`` (its audio
    cut after that many frames).

    Args (besides ``FakeAdapter``'s):
        frame_samples: samples per decode step.
        step_delay_s: seconds each decode step sleeps (a slow model, for streaming tests).
        raise_in_step: ``raise_in_step(keys)`` -> exception to raise inside ``decode_step`` (before any change, as
            the atomicity contract asks), or None.

    Attributes:
        steps: number of rows in the batch at every decode step, in order.
        prefills: texts of every prefill that succeeded, in order.
    """

    supports_decode_steps = True

    def __init__(self, facts: ModelFacts | None = None, *, frame_samples: int = 400, step_delay_s: float = 0.0,
                 raise_in_step: Callable[[list], BaseException | None] | None = None, **kwargs):
        super().__init__(facts, **kwargs)
        self.frame_samples = frame_samples
        self.step_delay_s = step_delay_s
        self.raise_in_step = raise_in_step
        self.steps: list[int] = []
        self.prefills: list[list[str]] = []

    def start_decode(self, params: SynthesisParams, prefix_cache=None) -> "FakeDecodeBatch":
        return FakeDecodeBatch(self, self.resolve(params), prefix_cache)


class FakeDecodeBatch(DecodeBatch):
    """The running batch of ``FakeStepAdapter``. A prefix cache, when given, keeps one entry per reference audio
    (the 'voice'), so tests can see hits."""

    def __init__(self, adapter: FakeStepAdapter, params: SynthesisParams, prefix_cache: PrefixCache | None):
        super().__init__(params)
        self.adapter = adapter
        self.prefix_cache = prefix_cache
        self._rows: dict = {}  # key -> [audio, frames done, max frames, finished]

    @property
    def keys(self) -> list:
        return list(self._rows)

    def prefill(self, rows) -> None:
        a = self.adapter
        if a.raise_if is not None:
            exc = a.raise_if([r for _, r in rows])
            if exc is not None:
                raise exc
        cap = self.params.max_new_tokens or a.facts.default_max_new_tokens
        for key, row in rows:
            if self.prefix_cache is not None and row.reference_audio is not None:
                voice = hashlib.sha256(np.ascontiguousarray(row.reference_audio).tobytes()).hexdigest()
                if self.prefix_cache.get(voice) is None:
                    self.prefix_cache.put(voice, voice, 1000)
            audio = fake_audio(row.text, row.seed, row.reference_audio, a.facts.sampling_rate, a.samples_per_char)
            frames = -(-audio.size // a.frame_samples)
            if a.cap_if is not None and a.cap_if(row):
                frames = cap + 1  # speaks past its cap
            self._rows[key] = [audio, 0, frames, False, cap]
        a.prefills.append([r.text for _, r in rows])

    def decode_step(self) -> list[RowStep]:
        a = self.adapter
        if a.raise_in_step is not None:
            exc = a.raise_in_step(self.keys)
            if exc is not None:
                raise exc
        a.steps.append(len(self._rows))
        a.entered.set()
        if a.step_delay_s:
            time.sleep(a.step_delay_s)
        if a.gate is not None:
            a.gate.wait(timeout=30)
        out = []
        for key, state in self._rows.items():
            self.num_row_steps += 1
            audio, done, frames, finished, cap = state
            if finished:
                self.num_padded_row_steps += 1
                continue
            chunk = audio[done * a.frame_samples:(done + 1) * a.frame_samples]
            state[1] = done = done + 1
            reason = None
            if done >= frames:
                reason = StopReason.END_OF_SPEECH
            elif done >= cap:
                reason = StopReason.MAX_NEW_TOKENS
            state[3] = reason is not None
            out.append(RowStep(key=key, audio=chunk, stop_reason=reason))
        return out

    def release(self, keys) -> None:
        for key in keys:
            self._rows.pop(key, None)


def fake_app_context(output_root, adapter: TTSAdapter | None = None, *, start_jobs: bool = False):
    """An ``AppContext`` (the web page's server side) over ``adapter`` (default a ``FakeAdapter``) with a 1 ms wait
    window, writing under ``output_root``; its job manager started when ``start_jobs``. Close it after use."""
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.runtime import Runtime
    from tts_app.ui.context import AppContext, AppSettings

    config = EngineConfig(wait_window_ms=1)
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=config, output_root=output_root),
                     runtime=Runtime.from_adapter(adapter or FakeAdapter(), "fake", config))
    if start_jobs:
        ctx.start_jobs()
    return ctx
