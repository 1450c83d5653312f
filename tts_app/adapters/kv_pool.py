"""A KV pool for the running batch of the step-wise families (VibeVoice's LM streams, IndexTTS 2's GPT): memory held
in fixed slots, one per stream row, so rows join and leave without copying their batch-mates' KV cache.

Layout (gpt-fast's ``KVCache``, transformers' ``StaticCache`` per row): per layer one keys and one values tensor
``(max_rows, kv_heads, max_positions, head_dim)``. A row owns one slot (index into ``max_rows``); its positions are
written at its own columns ``0 .. length - 1``. Per slot the pool keeps ``lengths`` (next column to write),
``positions`` (position id of the next write: visible positions so far), both in one ``meta`` tensor so a step
advances them with one add, and ``valid`` ``(max_rows, max_positions)`` bool (the columns the row attends to; its
column ``lengths[slot]``, the one its next position is written to, is always marked, so a step's mask is ``valid``
itself and no row is ever fully masked). A decode step runs the model over the slot range ``[0, bucket)``
(``bucket`` = the smallest of ``BATCH_BUCKETS`` holding the highest used slot; free slots in it are computed as
dummies and never read) with one new position per slot: each slot writes its column ``lengths[slot]`` in place
(``index_put``), the attention reads the pool's view ``[:bucket, :, :window]`` (no copy) with a 4-D mask built from
``valid`` plus the slot's own new column; lengths and positions of the fed rows then advance on the device (no host
sync). Slots are handed out lowest first, so the bucket stays tight.

What a join, a leave and a beam reorder cost:

* join (``PooledStream.prepare_merge``): the new rows are prefilled apart (a ``DecoderStream``, as before) and their
  visible columns copied into their new slots: bytes copied = the new rows' KV only, never the batch's.
* leave (``keep_rows`` without the row): its slot goes back to the free list; nothing is copied.
* beam reorder (``keep_rows`` with an index that repeats a row, IndexTTS 2's beams): the batch row -> slot table is
  reindexed; a slot continued by several beams is copied once per extra beam into a free slot (one row's KV each,
  copy-on-write; a paged cache would share the pages and copy only the last page).

Why not transformers' own ``generation/continuous_batching/PagedAttentionCache`` (5.24, read before writing this):
it is built for its own ``ContinuousBatchingManager``: requests are ``RequestState`` objects of its scheduler, the
batch is packed into one ``(1, num_tokens)`` sequence described by ``cu_seq_lens`` / ``read_index`` /
``write_index`` kwargs that only its ``paged|*`` / flash attention paths read, and the mask of each request is plain
causal over its contiguous tokens. Our step interface needs per-row masks with holes (VibeVoice's CFG negative stream
drops a row's history when it opens a new speech span; prompts prefilled through the prefix cache carry padding
between prefix and text) and the models' own attention as configured (sdpa/eager, on CPU); its index-based update on
CPU also gathers every read position of every request per layer and step (a copy of the batch's KV per step), and
its ``update`` is ``torch.compiler.disable``d. Pages (vLLM's block table) would bound the waste of a slot to one
page; here a slot holds ``max_positions`` columns whatever the row's length, and ``KVPool.held_bytes`` /
``live_bytes`` report the waste (bench/decode_bench.py prints the ratio).

Sizing: the pool starts at the first join's rows (rounded up to a bucket) and positions (rounded up to
``POSITION_BLOCK``), and grows geometrically (rows to the next bucket, positions by half again) when a join or a
step needs more; a growth is the only time live KV moves. ``max_bytes`` (the engine's memory budget) bounds it: a
growth beyond it raises ``torch.OutOfMemoryError``, the engine's out-of-memory path (fewer rows), before anything
changed.

Atomicity: ``checkpoint`` / ``rollback`` undo a step that raised (``torch.OutOfMemoryError``): a forward writes
only columns at or past each row's length (invisible until its success advances them), and each metadata change
and each slot handed out since the mark is journaled and undone; slots freed inside a step are only returned to
the free list at the next checkpoint (so a rollback can give them back to their rows untouched).

The KV-cache toggle is unchanged: with the cache off the families keep ``DecoderStream``'s embedding history
(recompute every position each step).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

#: Rows of the slot range a decode step runs over (a CUDA graph / compiled step per bucket; issue 27).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Positions are allocated in multiples of this, and the attention window of a step is rounded up to it.
POSITION_BLOCK = 64


def bucket_for(num_rows: int) -> int:
    """The smallest of ``BATCH_BUCKETS`` >= ``num_rows`` (a multiple of the largest beyond them)."""
    for b in BATCH_BUCKETS:
        if num_rows <= b:
            return b
    top = BATCH_BUCKETS[-1]
    return math.ceil(num_rows / top) * top


def _round_up(value: int, block: int) -> int:
    return max(block, math.ceil(value / block) * block)


class KVPool:
    """Fixed-slot KV memory of one stream kind (module docstring).

    Args:
        num_layers, num_kv_heads, head_dim: the decoder's cache layout (``ModelFacts``).
        dtype, device: of the KV tensors (the model's KV dtype).
        max_bytes: most bytes the pool and its ``siblings`` may hold together (the engine's budget); None =
            unbounded.
        initial_rows: slots of the first allocation (the engine's batch cap, in stream rows), rounded up to a bucket.

    Attributes:
        keys, values: per layer ``(max_rows, kv_heads, max_positions, head_dim)``; empty before the first ``reserve``.
        meta: ``(max_rows, 2)`` int64: per slot the next column it writes (``lengths``, a view) and the position id
            of that write (``positions``, a view).
        valid: ``(max_rows, max_positions)`` bool, columns each slot attends to (its next column included).
        free: free slots, lowest first out.
        bytes_copied: bytes of KV written by joins, beam copies and growth (for bench/decode_bench.py).
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype, device, max_bytes: int | None = None,
                 initial_rows: int = 1):
        self.initial_rows = int(initial_rows)
        self.siblings: list[KVPool] = [self]  # pools sharing ``max_bytes`` (an adapter's stream kinds)
        self.leased = False  # a stream (a running batch) uses it
        self.num_layers, self.num_kv_heads, self.head_dim = int(num_layers), int(num_kv_heads), int(head_dim)
        self.dtype, self.device = dtype, device
        self.max_bytes = max_bytes
        self.max_rows = 0
        self.max_positions = 0
        self.keys: list = []
        self.values: list = []
        self.meta = None
        self.valid = None
        self.free: list[int] = []
        self.static_addresses = False  # mark the KV tensors static for CUDA graphs (a compiled step)
        self._compiled = None
        self.bytes_copied = 0

    @property
    def lengths(self):
        return self.meta[:, 0]

    @property
    def positions(self):
        return self.meta[:, 1]

    # -- sizes -------------------------------------------------------------------------------------------------------
    def bytes_per_position(self) -> int:
        """KV bytes of one position of one slot, all layers (2 x layers x heads x head dim x dtype bytes)."""
        import torch

        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * torch.empty(0, dtype=self.dtype).element_size()

    def held_bytes(self) -> int:
        """Bytes of KV the pool holds (every slot, every column)."""
        return self.max_rows * self.max_positions * self.bytes_per_position()

    def live_bytes(self) -> int:
        """Bytes of the visible positions of the used slots (syncs: for gauges and benches, not the step)."""
        used = sorted(set(range(self.max_rows)) - set(self.free))
        if not used:
            return 0
        return int(self.positions[used].sum()) * self.bytes_per_position()

    @property
    def num_used(self) -> int:
        return self.max_rows - len(self.free)

    # -- allocation --------------------------------------------------------------------------------------------------
    def reserve(self, num_rows: int, num_positions: int) -> None:
        """Make room for ``num_rows`` more slots of at least ``num_positions`` columns (grows when needed).

        Raises:
            torch.OutOfMemoryError: the grown pool would exceed ``max_bytes`` (nothing changed).
        """
        rows = self.max_rows
        positions = self.max_positions
        if num_positions > self.max_positions:
            positions = _round_up(max(num_positions, self.max_positions + self.max_positions // 2), POSITION_BLOCK)
        if len(self.free) < num_rows:
            needed = bucket_for(self.num_used + num_rows)
            rows = max(needed, bucket_for(self.initial_rows), bucket_for(self.max_rows + 1) if self.max_rows else 1)
            # the batch cap's rows when they fit the budget, else the largest bucket that does (at least the rows
            # needed now: if those do not fit, _grow raises the out-of-memory error)
            while rows > needed and not self._fits(rows, positions):
                rows //= 2
        if (rows, positions) != (self.max_rows, self.max_positions):
            self._grow(rows, positions)

    def _fits(self, max_rows: int, max_positions: int) -> bool:
        """Whether this pool at that size, plus the other pools of its adapter (``siblings``), stays within
        ``max_bytes``."""
        if self.max_bytes is None:
            return True
        others = sum(p.held_bytes() for p in self.siblings if p is not self)
        return others + max_rows * max_positions * self.bytes_per_position() <= self.max_bytes

    def _grow(self, max_rows: int, max_positions: int) -> None:
        import torch

        needed = max_rows * max_positions * self.bytes_per_position()
        if not self._fits(max_rows, max_positions):
            mib = 1024**2
            raise torch.OutOfMemoryError(
                f"KV pool of {max_rows} rows x {max_positions} positions needs {needed / mib:.1f} MiB, over the "
                f"memory budget of {self.max_bytes / mib:.1f} MiB")
        shape = (max_rows, self.num_kv_heads, max_positions, self.head_dim)
        keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.num_layers)]
        values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.num_layers)]
        meta = torch.zeros((max_rows, 2), dtype=torch.long, device=self.device)
        valid = torch.zeros((max_rows, max_positions), dtype=torch.bool, device=self.device)
        valid[:, 0] = True  # an empty slot's next column
        if self.max_rows:  # the only time live KV moves (module docstring)
            r, p = self.max_rows, self.max_positions
            for new, old in zip(keys + values, self.keys + self.values):
                new[:r, :, :p] = old
            meta[:r], valid[:r, :p] = self.meta, self.valid
            self.bytes_copied += self.held_bytes()
        self.free = sorted(self.free + list(range(self.max_rows, max_rows)))
        self.keys, self.values = keys, values
        self.meta, self.valid = meta, valid
        if self.static_addresses:  # as transformers' StaticCache: CUDA graphs read them in place, never copied
            for t in keys + values + [meta, valid]:
                torch._dynamo.mark_static_address(t)
        self.max_rows, self.max_positions = max_rows, max_positions

    def compiled(self, language_model):
        """``language_model`` through ``torch.compile`` (made once per pool): CUDA ``mode="reduce-overhead"`` (a CUDA
        graph per batch bucket, replayed), elsewhere inductor's default mode. ``dynamic=False``: one graph per
        bucket and pool width, the shapes a compiled step sees (``PooledStream.compiled``)."""
        import torch

        if self._compiled is None:
            mode = "reduce-overhead" if str(self.device).startswith("cuda") else None
            self._compiled = torch.compile(language_model, mode=mode, dynamic=False)
        return self._compiled

    def allocate(self) -> int:
        """A free slot (lowest first), emptied. ``reserve`` first."""
        slot = self.free.pop(0)
        self.meta[slot] = 0
        self.valid[slot] = False
        self.valid[slot, 0] = True  # its next column
        return slot

    def release(self, slots) -> None:
        """Return ``slots`` to the free list."""
        self.free = sorted(set(self.free) | set(int(s) for s in slots))

    def copy_slot(self, source: int, target: int, length_bound: int) -> None:
        """Make slot ``target`` a copy of slot ``source`` (a beam continued twice): KV of its written columns (up to
        ``length_bound``, an upper bound of its length) and its metadata."""
        end = min(self.max_positions, length_bound + 1)
        for tensors in (self.keys, self.values):
            for t in tensors:
                t[target, :, :end] = t[source, :, :end]
        self.meta[target] = self.meta[source]
        self.valid[target] = self.valid[source]
        self.bytes_copied += end * self.bytes_per_position()


class _SlotWrite:
    """The ``cache`` a transformers decoder gets for one pooled decode step (duck-typed ``Cache``: the layers call
    ``update(key_states, value_states, layer_idx, kwargs=...)``; nothing else is asked when position ids and a 4-D
    mask are given). Writes each slot's new key/value ``(bucket, kv_heads, 1, head_dim)`` at its column
    ``columns[slot]`` and returns the pool's view ``(bucket, kv_heads, window, head_dim)`` (no copy)."""

    def __init__(self, pool: KVPool, bucket: int, rows, columns, window: int):
        self.pool, self.bucket, self.rows, self.columns, self.window = pool, bucket, rows, columns, window

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        # advanced indices around a slice: the indexed result is (bucket, kv_heads, head_dim)
        keys[self.rows, :, self.columns] = key_states[:, :, -1].to(keys.dtype)
        values[self.rows, :, self.columns] = value_states[:, :, -1].to(values.dtype)
        return keys[:self.bucket, :, :self.window], values[:self.bucket, :, :self.window]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.window


class PooledStream:
    """One LM input stream of a running batch whose KV cache lives in a ``KVPool`` (the cache-on path; module
    docstring). The same interface as ``DecoderStream`` for what the running batch does with it (``forward`` of one
    new position per row, ``prepare_merge`` / ``prepare_add_empty_rows`` + ``commit``, ``keep_rows``,
    ``checkpoint`` / ``rollback``, ``num_cached_positions``) plus ``visible_counts``.

    Args:
        pool: where the rows' KV lives (shared by the batches of one adapter and stream kind).
        language_model: the transformers decoder, called as ``DecoderStream`` calls it.
        hidden_size, device, dtype: of its inputs.
        new_positions: positions a row may add after its prompt (its decode-step cap): a joining row's slot is
            sized for its prompt plus these, so a running row never makes the pool grow.
    """

    use_cache = True

    def __init__(self, pool: KVPool, language_model, hidden_size: int, device, dtype, new_positions: int = 0):
        self.pool = pool
        self.new_positions = int(new_positions)
        self.language_model = language_model
        self.hidden_size = hidden_size
        self.device = device
        self.dtype = dtype
        self.slots: list[int] = []  # batch row -> slot
        self._reserved: list[int] = []  # slots of a prepared, not yet committed join
        self._pending_free: list[int] = []  # slots freed inside a step: free at the next checkpoint
        self._journal: list | None = None  # undo records since the open checkpoint
        self._index_cache = None  # (slots, bucket, slot index or None, rows) of the last step
        # host-side upper bound of this stream's rows' lengths: the attention window, with no sync; it depends on
        # this stream's own history only, so a row's computation never depends on other batches in the pool
        self.length_bound = 0
        self.compiled = False  # static shapes (bucket rows, the pool's whole width) for a captured step
        implementation = getattr(getattr(language_model, "config", None), "_attn_implementation", "sdpa")
        self._bool_mask = implementation not in ("eager",)
        # a batch dropped with rows still in it gives its slots back, and the pool to the next batch
        pool.leased = True
        self._finalizer = weakref.finalize(self, _give_back, pool, self.slots, self._pending_free, self._reserved)

    @property
    def num_rows(self) -> int:
        return len(self.slots)

    def num_cached_positions(self) -> int:
        """Columns a slot holds (the pool's width): what each row's KV costs in this pool."""
        return self.pool.max_positions

    def _slot_index(self):
        import torch

        return torch.tensor(self.slots, dtype=torch.long, device=self.device)

    def visible_counts(self):
        """Visible positions per batch row ``(num_rows,)`` int64 (``DecoderStream``'s mask sum)."""
        if not self.slots:
            import torch

            return torch.zeros(0, dtype=torch.long, device=self.device)
        return self.pool.positions[self._slot_index()]

    # -- the step --------------------------------------------------------------------------------------------------
    def _step_index(self):
        """(bucket, slot index tensor or None when batch row i is slot i for every i < bucket, rows arange)."""
        import torch

        if self._index_cache is None or self._index_cache[0] != self.slots:
            top = max(self.slots) + 1
            # eager: the range the slots span; compiled: the bucket (static shapes per bucket)
            bucket = min(bucket_for(top), self.pool.max_rows) if self.compiled else top
            identity = self.slots == list(range(bucket))
            index = None if identity else torch.tensor(self.slots, dtype=torch.long, device=self.device)
            self._index_cache = (list(self.slots), bucket, index, torch.arange(bucket, device=self.device))
        return self._index_cache[1:]

    def forward(self, inputs_embeds, mask, reset=None):
        """Run one new position per row: ``inputs_embeds`` ``(num_rows, 1, hidden)``; ``mask`` ``(num_rows, 1)``:
        the rows that take it (a row not fed computes a throw-away output and keeps nothing); ``reset``
        ``(num_rows,)`` bool or None: rows whose earlier positions are dropped first (they see only this one, at
        position 0). Returns the new position's hidden state ``(num_rows, hidden)`` (meaningful for fed rows).

        Raises:
            torch.OutOfMemoryError: from the model or from growing the pool (the stream is then unchanged).
        """
        import torch

        pool = self.pool
        if inputs_embeds.shape[1] != 1:
            raise ValueError("a pooled stream takes one new position per row; prefill in a DecoderStream")
        if self.length_bound + 1 >= pool.max_positions:  # a sync only when the bound reaches the width (rare)
            self.length_bound = int(pool.lengths[torch.tensor(self.slots)].max())
            if self.length_bound + 1 >= pool.max_positions:
                pool.reserve(0, self.length_bound + 2)
        bucket, index, rows = self._step_index()
        window = pool.max_positions if self.compiled else \
            min(pool.max_positions, _round_up(self.length_bound + 1, POSITION_BLOCK))
        meta = pool.meta[:bucket]
        fed = mask[:, -1]
        x = inputs_embeds
        if index is not None:  # scatter the batch rows to their slots
            x = inputs_embeds.new_zeros((bucket, 1, inputs_embeds.shape[-1]))
            x[index] = inputs_embeds
            fed = fed.new_zeros(bucket).index_put_((index,), fed)
        fed = fed.to(meta.dtype)
        columns = meta[:, 0]  # a view: unchanged until the forward succeeded
        positions = meta[:, 1:]  # (bucket, 1) position ids
        old = None
        if reset is not None:  # rows starting afresh see only their next column, at position 0
            if index is not None:
                reset = torch.zeros(bucket, dtype=torch.bool, device=self.device).index_put_((index,), reset)
            old = (pool.valid[:bucket].clone(), meta.clone())
            pool.valid[:bucket] &= ~reset[:, None]
            pool.valid[rows, columns] = True
            meta[:, 1:] = meta[:, 1:].masked_fill(reset[:, None], 0)
        attend = pool.valid[:bucket, :window]
        if not self._bool_mask:
            attend = torch.zeros(attend.shape, dtype=self.dtype, device=self.device).masked_fill(
                ~attend, torch.finfo(self.dtype).min)
        model = self.language_model if not self.compiled else self.pool.compiled(self.language_model)
        try:
            outputs = model(inputs_embeds=x, attention_mask=attend[:, None, None, :], position_ids=positions,
                            cache=_SlotWrite(pool, bucket, rows, columns, window), use_cache=True)
        except BaseException:
            self._undo_step(bucket, rows, None, None, old)
            raise
        # success: a fed row keeps its column and marks the next one
        if self._journal is not None:
            self._journal.append(("step", bucket, rows, columns.clone(), fed, old))
        pool.valid[rows, columns + fed] = True
        meta += fed[:, None]
        self.length_bound += 1
        hidden = outputs.last_hidden_state[:, -1]
        return hidden if index is None else hidden[index]

    def _undo_step(self, bucket, rows, columns, fed, old) -> None:
        pool = self.pool
        if fed is not None:  # the next columns a success marked go (a row not fed had its own marked before)
            pool.valid[rows, columns + fed] = fed == 0
            pool.meta[:bucket] -= fed[:, None]
        if old is not None:
            pool.valid[:bucket], pool.meta[:bucket] = old

    def checkpoint(self):
        """Open an undo journal (see the module docstring); slots freed in the previous step are freed now."""
        self._flush()
        self._journal = []
        return (list(self.slots), self._journal, self.length_bound)

    def rollback(self, mark) -> None:
        """Undo everything since ``checkpoint``: metadata a forward changed, slots handed out (to the free list),
        slots freed (back to their rows), the row -> slot table."""
        slots, journal, self.length_bound = mark
        for record in reversed(journal):
            if record[0] == "step":
                self._undo_step(*record[1:])
            elif record[0] == "alloc":
                self.pool.release([record[1]])
        self._pending_free.clear()
        self.slots[:] = slots
        self._journal = None

    def _flush(self) -> None:
        if self._pending_free:
            self.pool.release(self._pending_free)
            self._pending_free.clear()
        if self._reserved:  # a join prepared and never committed
            self.pool.release(self._reserved)
            self._reserved.clear()

    # -- joining and leaving ---------------------------------------------------------------------------------------
    def prepare_merge(self, other):
        """Copy the rows of ``other`` (a ``DecoderStream`` just prefilled with the KV cache on) into free slots of
        the pool: per row only its visible columns, packed to columns ``0 .. n - 1`` (position ids follow the
        visible positions, so holes and left padding change nothing). Returns what ``commit`` adopts; until then
        the running rows see nothing of it.

        Raises:
            torch.OutOfMemoryError: growing the pool (nothing changed).
        """
        import torch

        self._flush()
        self._journal = None
        mask = other.attention_mask.to(torch.bool)  # (m, width)
        counts = mask.sum(dim=1)
        num_new = int(mask.shape[0])
        longest = int(counts.max()) if num_new else 0
        layers = [layer for layer in other.cache.layers if layer.is_initialized] if other.cache is not None else []
        pool = self.pool
        if pool.max_rows == 0 and layers:
            pool.dtype = layers[0].keys.dtype
        pool.reserve(num_new, longest + self.new_positions + 1)
        new_slots = [pool.allocate() for _ in range(num_new)]
        self._reserved[:] = new_slots
        if num_new and layers:
            rows, columns = mask.nonzero(as_tuple=True)
            targets = (mask.cumsum(dim=1) - 1)[rows, columns]
            slot_index = torch.tensor(new_slots, dtype=torch.long, device=self.device)[rows]
            for layer, keys, values in zip(layers, pool.keys, pool.values):
                keys[slot_index, :, targets] = layer.keys[rows, :, columns].to(keys.dtype)
                values[slot_index, :, targets] = layer.values[rows, :, columns].to(values.dtype)
            pool.bytes_copied += int(rows.numel()) * pool.bytes_per_position()
            new_index = torch.tensor(new_slots, dtype=torch.long, device=self.device)
            pool.meta[new_index] = counts.to(pool.meta.dtype)[:, None]
            # the prompt's columns and the next one
            pool.valid[new_index] = torch.arange(pool.max_positions, device=self.device)[None, :] <= counts[:, None]
        self.length_bound = max(self.length_bound, longest)
        return new_slots

    def prepare_add_empty_rows(self, num_new: int):
        """Free slots for ``num_new`` rows that have seen nothing, for ``commit``."""
        self._flush()
        self._journal = None
        self.pool.reserve(num_new, self.new_positions + 1)
        new_slots = [self.pool.allocate() for _ in range(num_new)]
        self._reserved[:] = new_slots
        return new_slots

    def commit(self, prepared) -> None:
        """Adopt the slots a ``prepare_*`` call filled (appended after the running rows)."""
        self.slots += prepared
        self._reserved[:] = [s for s in self._reserved if s not in set(prepared)]

    def keep_rows(self, rows) -> None:
        """Keep batch rows ``rows`` (int64 index, CPU or device), in that order: the row -> slot table is
        reindexed; a slot kept twice or more (a beam continued by several) is copied into a free slot for each
        extra occurrence; slots no longer used are freed (inside a step: at the next checkpoint)."""
        order = [int(i) for i in rows.tolist()]
        pool = self.pool
        old = list(self.slots)
        new, seen = [], set()
        for i in order:
            slot = old[i]
            if slot in seen:
                pool.reserve(1, 0)
                target = pool.allocate()
                if self._journal is not None:
                    self._journal.append(("alloc", target))
                pool.copy_slot(slot, target, self.length_bound)
                slot = target
            seen.add(slot)
            new.append(slot)
        gone = [s for s in old if s not in seen]
        if self._journal is not None:
            self._pending_free += gone
        else:
            pool.release(gone)
        self.slots[:] = new


def _give_back(pool: KVPool, slots: list, pending: list, reserved: list) -> None:
    pool.release(list(slots) + list(pending) + list(reserved))
    pool.leased = False


@dataclass(frozen=True)
class DecodeSettings:
    """How an adapter's step-wise decode runs (set once by the engine, ``adapter.decode_settings``).

    Attributes:
        pooled: the pooled decode path (default): the running batch's KV cache in a ``KVPool`` and each step's
            choices made for all rows at once (one host sync per step). False = the eager path as it was before
            (``DecoderStream``: a ``DynamicCache`` merged by concatenation; IndexTTS 2 picks row by row), kept as
            the reference of the equality tests and benches.
        compile: the resolved ``EngineConfig.compile`` (True = graph-captured decode step where the family has one).
        max_kv_bytes: most bytes a pool may hold (the engine's memory budget); None = unbounded.
        max_rows: the engine's batch cap (``EngineConfig.max_batch_size``): a pool's first allocation holds that
            many batch rows, so joins up to the cap never move live KV.
    """

    pooled: bool = True
    compile: bool = False
    max_kv_bytes: int | None = None
    max_rows: int = 1


def decode_settings(adapter) -> DecodeSettings:
    """The adapter's ``DecodeSettings`` (the defaults when the engine set none)."""
    settings = getattr(adapter, "decode_settings", None)
    return settings if isinstance(settings, DecodeSettings) else DecodeSettings()


def adapter_pool(adapter, role: str, dtype, device, rows_per_row: int = 1) -> KVPool:
    """A ``KVPool`` of the adapter for one stream kind (``role``, e.g. ``"positive"``) that no running batch holds
    (``KVPool.leased``), made at the first call with the decoder layout of ``adapter.facts`` (layers, KV heads, head
    dim) and kept for every later batch: the engine runs one batch at a time, so its memory is allocated once and
    reused batch after batch. A second batch running at the same time (tests, benches) gets a pool of its own, so
    its rows' slots, and thus their computation, never depend on another batch."""
    pools = adapter.__dict__.setdefault("_kv_pools", {})
    for pool in pools.get(role, []):
        if not pool.leased:
            return pool
    facts = adapter.facts
    settings = decode_settings(adapter)
    pool = KVPool(facts.num_layers, facts.num_kv_heads, facts.head_dim, dtype, device,
                  max_bytes=settings.max_kv_bytes, initial_rows=settings.max_rows * rows_per_row)
    pools.setdefault(role, []).append(pool)
    siblings = [p for kind in pools.values() for p in kind]  # all of the adapter's pools share the budget
    for p in siblings:
        p.siblings = siblings
    return pool


def make_stream(adapter, role: str, language_model, hidden_size: int, device, dtype, use_cache: bool, *,
                new_positions: int = 0, rows_per_row: int = 1):
    """The running batch's stream: a ``PooledStream`` over ``adapter_pool(adapter, role)`` when the KV cache is on
    and ``DecodeSettings.pooled``; else a ``DecoderStream`` (the cache-off recompute path, or the eager path).
    ``new_positions``: a row's decode-step cap; ``rows_per_row``: stream rows per batch row (beams)."""
    from tts_app.adapters.decode_stream import DecoderStream

    if use_cache and decode_settings(adapter).pooled:
        pool = adapter_pool(adapter, role, dtype, device, rows_per_row)
        stream = PooledStream(pool, language_model, hidden_size, device, dtype, new_positions=new_positions)
        if decode_settings(adapter).compile:
            stream.compiled = pool.static_addresses = True
        return stream
    return DecoderStream(language_model, hidden_size, device, dtype, use_cache)


def held_pool_bytes(adapter) -> int:
    """Bytes the adapter's KV pools hold (allocated once, kept between batches): the engine adds them back to a
    budget measured from free device memory, as it does for its prefix cache."""
    return sum(pool.held_bytes() for kind in adapter.__dict__.get("_kv_pools", {}).values() for pool in kind)
