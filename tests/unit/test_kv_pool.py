"""The KV pool's stream (``PooledStream``) gives the hidden states of the eager ``DecoderStream`` (a ``DynamicCache``
merged by concatenation) for rows that join, leave, get reordered like beams, drop their history and live through
a failed step, on tiny random Qwen2 (VibeVoice's LM) and GPT-2 (IndexTTS 2's GPT) decoders; and a join copies only
the joining rows' KV."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tts_app.adapters.decode_stream import DecoderStream  # noqa: E402
from tts_app.adapters.kv_pool import KVPool, PooledStream, bucket_for  # noqa: E402

HIDDEN = 32
ATOL = 1e-5  # float32 reassociation between attention widths


def qwen2():
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=16, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    return Qwen2Model(config).eval(), (2, 2, 8)


def gpt2():
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(vocab_size=16, n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=512)).eval(), (2, 4, 8)


def prefilled(model, lengths, seed):
    """A DecoderStream of rows with prompts of ``lengths`` (left-padded), and its last hidden states."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    embeds = torch.randn((len(lengths), width, HIDDEN), generator=g)
    mask = torch.stack([torch.cat([torch.zeros(width - n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
                        for n in lengths])
    stream = DecoderStream(model, HIDDEN, torch.device("cpu"), torch.float32, True)
    return stream, stream.forward(embeds, mask)


def streams(model, layout):
    pool = KVPool(*layout, torch.float32, torch.device("cpu"))
    eager = DecoderStream(model, HIDDEN, torch.device("cpu"), torch.float32, True)
    return eager, PooledStream(pool, model, HIDDEN, torch.device("cpu"), torch.float32), pool


def join(eager, pooled, model, lengths, seed):
    for target in (eager, pooled):
        sub, _ = prefilled(model, lengths, seed)
        target.commit(target.prepare_merge(sub))


def step(eager, pooled, seed, feed=None, reset=None):
    n = eager.num_rows
    x = torch.randn((n, 1, HIDDEN), generator=torch.Generator().manual_seed(seed))
    feed = torch.ones((n, 1), dtype=torch.long) if feed is None else feed
    if reset is not None:  # the eager way: mask the dropped rows' history (VibeVoice's _NegativeStream)
        eager.attention_mask = eager.attention_mask.masked_fill(reset[:, None], 0)
    want = eager.forward(x, feed)
    got = pooled.forward(x, feed, reset=reset)
    rows = feed[:, 0].bool()
    torch.testing.assert_close(got[rows], want[rows], rtol=0, atol=ATOL)


@pytest.mark.parametrize("build", [qwen2, gpt2], ids=["qwen2", "gpt2"])
def test_pooled_stream_equals_the_eager_stream_through_joins_leaves_beams_drops_and_a_failed_step(build):
    model, layout = build()
    with torch.inference_mode():
        eager, pooled, pool = streams(model, layout)
        join(eager, pooled, model, [5, 9], seed=1)
        for s in range(3):
            step(eager, pooled, seed=10 + s)
        join(eager, pooled, model, [3, 12, 7], seed=2)  # rows join a running batch
        step(eager, pooled, seed=20, feed=torch.tensor([[1], [0], [1], [1], [0]]))  # some rows not fed
        for target in (eager, pooled):
            target.keep_rows(torch.tensor([0, 2, 3, 4]))  # a row leaves (cancel)
        step(eager, pooled, seed=21)
        for target in (eager, pooled):
            target.keep_rows(torch.tensor([1, 1, 0, 3]))  # beams: row 1 continued twice, row 2 dropped
        step(eager, pooled, seed=22)
        step(eager, pooled, seed=23, reset=torch.tensor([False, True, False, False]))  # a row starts afresh
        # a step that fails after a beam reorder leaves both streams as they were
        marks = eager.checkpoint(), pooled.checkpoint()
        used = pool.num_used
        for target in (eager, pooled):
            target.keep_rows(torch.tensor([3, 3, 3, 0]))
        assert pool.num_used > used  # copies of row 3 took free slots
        eager.rollback(marks[0])
        pooled.rollback(marks[1])
        assert pool.num_used == used
        for s in range(70):  # past the first attention window (POSITION_BLOCK) and a growth of the pool
            step(eager, pooled, seed=30 + s)
        for target in (eager, pooled):
            target.keep_rows(torch.tensor([], dtype=torch.long))
        pooled.checkpoint()  # frees what the last release left pending
        assert pool.num_used == 0


def test_a_join_copies_only_the_joining_rows_kv_and_slots_are_reused():
    model, layout = qwen2()
    with torch.inference_mode():
        _, pooled, pool = streams(model, layout)
        sub, _ = prefilled(model, [6, 6, 6, 6, 6, 6, 6, 6], seed=1)
        pooled.commit(pooled.prepare_merge(sub))
        held = pool.held_bytes()
        before = pool.bytes_copied
        sub, _ = prefilled(model, [4, 9], seed=2)  # two rows join a batch of eight
        pooled.commit(pooled.prepare_merge(sub))
        assert pool.held_bytes() > held  # ten rows need the next bucket: the one growth, which moves live KV
        before = pool.bytes_copied
        sub, _ = prefilled(model, [5], seed=3)
        pooled.commit(pooled.prepare_merge(sub))
        assert pool.bytes_copied - before == 5 * pool.bytes_per_position()  # its own visible positions only
        assert pool.live_bytes() == (8 * 6 + 4 + 9 + 5) * pool.bytes_per_position()
        pooled.keep_rows(torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]))  # the last row leaves: its slot is free
        assert pool.num_used == 10
        sub, _ = prefilled(model, [3], seed=4)
        slots = pooled.prepare_merge(sub)
        assert slots == [10]  # the lowest free slot, the one just left
        assert bucket_for(11) == 16


def test_the_pool_refuses_to_grow_past_its_budget_with_an_out_of_memory_error():
    model, layout = qwen2()
    pool = KVPool(*layout, torch.float32, torch.device("cpu"), max_bytes=64 * 1024)
    pooled = PooledStream(pool, model, HIDDEN, torch.device("cpu"), torch.float32)
    with torch.inference_mode():
        sub, _ = prefilled(model, [5] * 16, seed=1)
        with pytest.raises(torch.OutOfMemoryError, match="over the memory budget"):
            pooled.prepare_merge(sub)
    assert pooled.num_rows == 0 and pool.max_rows == 0


@pytest.mark.slow
def test_the_compiled_pooled_step_equals_the_eager_pooled_step():
    """The same decode steps through ``torch.compile`` (inductor on the CPU; static shapes: the slot bucket and the
    pool's whole width) give the eager pooled step's hidden states, with a row not fed and a row leaving."""
    model, layout = qwen2()
    outs = {}
    with torch.inference_mode():
        for compiled in (False, True):
            pool = KVPool(*layout, torch.float32, torch.device("cpu"), initial_rows=4)
            stream = PooledStream(pool, model, HIDDEN, torch.device("cpu"), torch.float32, new_positions=16)
            stream.compiled = pool.static_addresses = compiled
            sub, _ = prefilled(model, [5, 9, 3], seed=1)
            stream.commit(stream.prepare_merge(sub))
            got = []
            for k in range(6):
                if k == 3:
                    stream.keep_rows(torch.tensor([0, 2]))
                n = stream.num_rows
                x = torch.randn((n, 1, HIDDEN), generator=torch.Generator().manual_seed(k))
                feed = torch.ones((n, 1), dtype=torch.long)
                if k == 1:
                    feed[1] = 0
                hidden = stream.forward(x, feed)
                got.append(hidden[feed[:, 0].bool()])
            outs[compiled] = torch.cat(got)
    torch.testing.assert_close(outs[True], outs[False], rtol=0, atol=ATOL)


def test_the_first_allocation_takes_the_batch_cap_only_as_far_as_the_budget_allows():
    """The engine sizes a pool for its batch cap; with a tight budget the pool takes fewer slots (still the rows
    it needs), and the pools of one adapter share the budget."""
    layout = (2, 2, 8)
    bytes_per_row = 64 * KVPool(*layout, torch.float32, "cpu").bytes_per_position()  # one slot of 64 positions
    first = KVPool(*layout, torch.float32, "cpu", max_bytes=5 * bytes_per_row, initial_rows=64)
    first.reserve(2, 10)
    assert (first.max_rows, first.max_positions) == (4, 64)  # 64 and 8 slots would not fit, 4 do
    second = KVPool(*layout, torch.float32, "cpu", max_bytes=5 * bytes_per_row, initial_rows=64)
    first.siblings = second.siblings = [first, second]
    second.reserve(1, 10)  # one slot left in the shared budget
    assert second.max_rows == 1
    with pytest.raises(torch.OutOfMemoryError):
        second.reserve(2, 10)
