"""The executor: runs the device work of one step of the engine core's loop and reports how it ended as plain data.

Owns: calling the adapter's device work (``DecodeBatch.prefill`` / ``decode_step``, or ``preprocess -> generate ->
postprocess`` for a family without a step interface), the OOM testing aids (``EngineConfig.simulate_oom_*``), the
ZeroGPU call sizing (``tts_app.zerogpu``), turning whatever a call raised into an ``Outcome`` (``OutcomeKind``: ok /
out of memory / refused / crashed; out of memory detected by type, ``memory.is_out_of_memory``) and freeing device
memory after an out-of-memory error.

The seam that gives the core ONE loop: a family without a step interface (Dia, CSM, Higgs; any family on ZeroGPU)
runs as a ``OneStepBatch``, a ``DecodeBatch`` whose ``prefill`` only gathers the rows and whose one ``decode_step``
runs the whole batch and ends every row. The core's ``schedule -> execute -> update`` step then treats both kinds the
same; the only difference is the ``Phase`` its outcome reports (``Phase.BATCH``: the scheduler's request-level update,
every row finished or requeued together).

May touch: the adapter, the memory probe, the ``GpuCalls`` of ZeroGPU. Never the scheduler, the per-request state,
the engine lock or the output processor (the core passes ``on_oom`` for the bookkeeping that needs the lock).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

import numpy as np

from tts_app.adapters.base import AdapterRow, DecodeBatch, PrefixCache, RowStep, TTSAdapter
from tts_app.config import EngineConfig
from tts_app.engine.memory import MemoryProbe, free_after_oom, is_out_of_memory, make_simulated_oom
from tts_app.engine.scheduler import Outcome, OutcomeKind, Phase, SegmentWork
from tts_app.errors import TTSAppError
from tts_app.finish import Finish
from tts_app.request import StopReason, SynthesisParams
from tts_app.zerogpu import GpuCalls, ZeroGPUConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceRow:
    """One row of a batch's device work: the adapter's row and its expected decode steps (``SegmentWork``), from
    which a ZeroGPU call's duration is sized."""

    row: AdapterRow
    expected_steps: int


class OneStepBatch(DecodeBatch):
    """A family without a step interface as a running batch of one decode step (module docstring).

    ``prefill`` gathers rows (no device work, never raises); ``decode_step`` runs them all through ``run_rows``
    (``preprocess -> generate -> postprocess``) and returns one ``RowStep`` per row with its whole waveform, its
    stop reason and its segment context (``TTSAdapter.segment_contexts``), so every row ends in that step.
    ``generate_s`` is the seconds of that call.
    """

    def __init__(self, params: SynthesisParams,
                 run_rows: Callable[[list[tuple[Hashable, AdapterRow]], SynthesisParams],
                                    list[tuple[np.ndarray, StopReason, Any]]]):
        super().__init__(params)
        self._run_rows = run_rows
        self._rows: list[tuple[Hashable, AdapterRow]] = []
        self.generate_s = 0.0

    @property
    def keys(self) -> list[Hashable]:
        return [key for key, _ in self._rows]

    def prefill(self, rows: Sequence[tuple[Hashable, AdapterRow]]) -> None:
        self._rows += list(rows)

    def decode_step(self) -> list[RowStep]:
        t0 = time.perf_counter()
        outputs = self._run_rows(self._rows, self.params)
        self.generate_s = time.perf_counter() - t0
        return [RowStep(key, wave, reason, context) for (key, _), (wave, reason, context) in zip(self._rows, outputs)]

    def release(self, keys: Iterable[Hashable]) -> None:
        gone = {id(k) for k in keys}
        self._rows = [(k, r) for k, r in self._rows if id(k) not in gone]


class Executor:
    """Runs device work for the engine core (module docstring).

    Args:
        adapter: the loaded ``TTSAdapter``.
        config: ``EngineConfig`` (its OOM testing aids and simulated step delay).
        probe: the device-memory probe (peak readings for calibration; freed after out of memory).
        step_mode: the adapter's step interface is used (else every batch is a ``OneStepBatch``).
        zero_gpu: how a ``OneStepBatch``'s device work is sized into ``spaces.GPU`` calls on ZeroGPU.
    """

    def __init__(self, adapter: TTSAdapter, config: EngineConfig, probe: MemoryProbe, *, step_mode: bool,
                 zero_gpu: ZeroGPUConfig):
        self.adapter = adapter
        self.config = config
        self.probe = probe
        self.step_mode = step_mode
        self._rng = random.Random(0)  # simulated-OOM draws; seeded so a test run is repeatable
        # On ZeroGPU every batch's device work (preprocess -> generate -> postprocess) runs inside spaces.GPU calls
        # sized from the rows' expected decode steps; elsewhere ``wrap`` returns the function itself.
        self.gpu_calls: GpuCalls[DeviceRow, tuple[np.ndarray, StopReason, Any]] = GpuCalls(
            zero_gpu, lambda rows, _params: [row.expected_steps for row in rows])
        self._rows_on_device = self.gpu_calls.wrap(self.run_rows)

    # -- batches -------------------------------------------------------------------------------------------------
    def start_batch(self, params: SynthesisParams, prefix_cache: PrefixCache) -> DecodeBatch:
        """A new running batch: the adapter's own (``start_decode``) in step mode, else a ``OneStepBatch``."""
        if self.step_mode:
            return self.adapter.start_decode(params, prefix_cache)
        return OneStepBatch(params, self._run_one_step)

    @staticmethod
    def phase_of(batch: DecodeBatch) -> Phase:
        """The phase a decode step of ``batch`` reports (``Phase.BATCH`` for a ``OneStepBatch``)."""
        return Phase.BATCH if isinstance(batch, OneStepBatch) else Phase.DECODE

    def prefill(self, batch: DecodeBatch, rows: list[tuple[SegmentWork, AdapterRow]]) -> float:
        """Prefill ``rows`` into ``batch`` (with the OOM testing aids). Returns its seconds."""
        oom = self.simulated_oom(batch.num_rows + len(rows))
        if oom is not None:
            raise oom
        before = batch.prefill_s
        batch.prefill(rows)
        return batch.prefill_s - before

    def decode_step(self, batch: DecodeBatch) -> list[RowStep]:
        """One decode step of ``batch`` (with the OOM testing aids and the simulated step delay; a
        ``OneStepBatch`` meets its simulated OOM in ``generate``, as a request-level batch did)."""
        if not isinstance(batch, OneStepBatch):
            oom = self.simulated_oom(batch.num_rows)
            if oom is not None:
                raise oom
            if self.config.simulate_step_delay_ms:
                time.sleep(self.config.simulate_step_delay_ms / 1000.0)
        return batch.decode_step()

    def _run_one_step(self, rows: list[tuple[Hashable, AdapterRow]], params: SynthesisParams
                      ) -> list[tuple[np.ndarray, StopReason, Any]]:
        device_rows = [DeviceRow(row, key.expected_steps) for key, row in rows]
        # one call off ZeroGPU; on ZeroGPU as many spaces.GPU calls as the batch needs to fit their time limit
        return self.gpu_calls.run(self._rows_on_device, device_rows, params)

    def run_rows(self, rows: list[DeviceRow], params: SynthesisParams
                 ) -> list[tuple[np.ndarray, StopReason, Any]]:
        """The device work of one batch: preprocess -> generate -> postprocess -> (waveform float32
        ``(num_samples,)``, stop reason, segment context or None: ``TTSAdapter.segment_contexts``) per row. On ZeroGPU this runs inside a ``spaces.GPU`` call (in ZeroGPU's GPU
        worker: its arguments and result are pickled), so all of it, the codec's decode included, sees the GPU.

        Raises:
            RuntimeError: the adapter returned a different number of waveforms or stop reasons than rows.
        """
        adapter_rows = [row.row for row in rows]
        inputs = self.adapter.preprocess(adapter_rows, params)
        oom = self.simulated_oom(len(adapter_rows))
        if oom is not None:
            raise oom
        outputs = self.adapter.generate(inputs, params)
        waves = self.adapter.postprocess(outputs, inputs)
        reasons = list(self.adapter.stop_reasons(outputs, inputs))
        if len(waves) != len(rows) or len(reasons) != len(rows):
            raise RuntimeError(f"adapter returned {len(waves)} waveforms and {len(reasons)} stop reasons for "
                               f"{len(rows)} rows")
        # only rows that carry context to a next segment need it (the adapter's own carrier, e.g. codec frames)
        contexts = self.adapter.segment_contexts(outputs, inputs) if self.adapter.facts.supports_segment_context \
            else None
        contexts = contexts if contexts is not None else [None] * len(rows)
        return [(np.asarray(w, dtype=np.float32).reshape(-1), r, c) for w, r, c in zip(waves, reasons, contexts)]

    # -- outcomes ------------------------------------------------------------------------------------------------
    def simulated_oom(self, batch_size: int) -> BaseException | None:
        """The testing aids: a real ``torch.OutOfMemoryError`` for batches above ``simulate_oom_above_batch`` rows,
        or with ``simulate_oom_probability`` for batches of more than one row. None = no simulated OOM."""
        cfg = self.config
        if cfg.simulate_oom_above_batch is not None and batch_size > cfg.simulate_oom_above_batch:
            return make_simulated_oom(batch_size, f"simulate_oom_above_batch={cfg.simulate_oom_above_batch}")
        if cfg.simulate_oom_probability > 0 and batch_size > 1 and self._rng.random() < cfg.simulate_oom_probability:
            return make_simulated_oom(batch_size, f"simulate_oom_probability={cfg.simulate_oom_probability}")
        return None

    def run_phase(self, phase: Phase, rows: Sequence[SegmentWork], call: Callable[[], Any],
                  on_oom: Callable[[], None]) -> tuple[Outcome, Any]:
        """Run ``call`` (a prefill or a decode step over ``rows``) and describe how it ended as a plain ``Outcome``
        (its ``finished`` is filled by the caller). Returns (outcome, what ``call`` returned or None). After an
        out-of-memory error ``on_oom`` runs (the core counts it and empties its caches), then the device cache is
        freed."""
        ids = ", ".join(sorted({w.request_id for w in rows}))
        allocated_before, peak_before = self.probe.allocated_bytes(), self.probe.peak_bytes()
        kind, error, value = OutcomeKind.OK, None, None
        try:
            value = call()
        except Exception as exc:  # noqa: BLE001 - the worker must survive any batch
            if is_out_of_memory(exc):
                kind = OutcomeKind.OOM
                logger.warning("out of memory in %s of %d rows (requests %s): %s", phase.value, len(rows), ids, exc)
            elif isinstance(exc, TTSAppError):  # the adapter refused these rows on purpose, with a message
                kind, error = OutcomeKind.REFUSED, Finish.from_error(exc)
                # INFO, not WARNING: the message reaches every request's result (the CLI prints it, the UI shows
                # it), so a WARNING here would show the user the same error twice.
                logger.info("%s of %d rows refused (requests %s): %s", phase.value, len(rows), ids, error.message)
            else:
                # The bare cause: every door frames it once in its user's language ("Synthesis failed (request
                # ..., seed ...): <cause>" in the UI table, "request ... failed: <cause>" in the API, "error:
                # <cause>" in the CLI), so it must not say "synthesis failed" itself.
                kind, error = OutcomeKind.CRASHED, Finish.from_error(exc)
                if len(rows) > 1:
                    # one line, no traceback: each row now runs alone, and the request whose row still fails
                    # logs its traceback then, once, under its own id
                    logger.warning("%s of %d rows failed (requests %s): %s; running each row alone", phase.value,
                                   len(rows), ids, error.message)
                else:
                    # the request's one traceback in the server log, under the id its user is shown
                    logger.error("request %s failed (segment %d): %s", rows[0].request_id, rows[0].index + 1,
                                 error.message, exc_info=exc)
            del exc  # drop the traceback (and the tensors its frames hold) before freeing memory
        if kind is OutcomeKind.OOM:
            on_oom()
            free_after_oom(self.probe)
        measured = None
        peak_after = self.probe.peak_bytes()
        if kind is OutcomeKind.OK and None not in (allocated_before, peak_before, peak_after) \
                and peak_after > peak_before:
            measured = peak_after - allocated_before  # a new high-water mark: this call's exact peak
        return Outcome(phase=phase, kind=kind, rows=tuple(rows), error=error, measured_peak_bytes=measured), value
