"""RowSampler (tts_app/adapters/sampling.py): per-row seeded sampling shared by the model adapters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tts_app.adapters.sampling import RowSampler, SampledTokenProcessor, logits_warpers  # noqa: E402

VOCAB = 50
STEPS = 6


def _scores(num_rows: int, seed: int = 0) -> list[torch.Tensor]:
    """STEPS decode steps of random logits ``(num_rows, VOCAB)`` float32."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(num_rows, VOCAB, generator=gen) * 3 for _ in range(STEPS)]


def _draw(sampler: RowSampler, steps: list[torch.Tensor]) -> torch.Tensor:
    """Tokens ``(STEPS, num_rows)`` from ``sample``."""
    return torch.stack([sampler.sample(s) for s in steps])


@pytest.mark.parametrize("rows_per_seed", [1, 3])
def test_a_rows_draws_depend_only_on_its_seed(rows_per_seed):
    knobs = dict(temperature=1.2, top_k=20, top_p=0.95, rows_per_seed=rows_per_seed)
    seeds = [5, 7, 9]
    steps = _scores(len(seeds) * rows_per_seed)
    batched = _draw(RowSampler(seeds, **knobs), steps)  # (STEPS, 3 * rows_per_seed)
    middle = slice(rows_per_seed, 2 * rows_per_seed)
    alone = _draw(RowSampler([7], **knobs), [s[middle] for s in steps])
    assert torch.equal(batched[:, middle], alone)
    # Other batch-mates (other seeds, other order) do not change the row either.
    mates = [11, 7]
    swapped = [torch.cat([s[2 * rows_per_seed:], s[middle]]) for s in steps]
    assert torch.equal(_draw(RowSampler(mates, **knobs), swapped)[:, rows_per_seed:], alone)
    # A different seed gives a different stream (30+ draws from a 20-token nucleus).
    reseeded = _draw(RowSampler([8], **knobs), [s[middle] for s in steps])
    assert not torch.equal(reseeded, alone)


def test_top_k_1_is_argmax():
    steps = _scores(4)
    drawn = _draw(RowSampler([1, 2, 3, 4], temperature=1.5, top_k=1), steps)
    assert torch.equal(drawn, torch.stack([s.argmax(-1) for s in steps]))


def test_draws_follow_the_warped_distribution():
    """8000 draws from one seed's rows: frequencies match softmax(logits / T); top-p removes the tail token."""
    logits = torch.tensor([2.0, 1.0, 0.0, -3.0])
    num_draws = 8000
    scores = logits.expand(num_draws, -1).clone()
    temperature = 2.0
    sampler = RowSampler([0], temperature=temperature, rows_per_seed=num_draws)
    tokens = _draw(sampler, [scores])[0]
    freq = torch.bincount(tokens, minlength=4).float() / num_draws
    # Binomial standard deviation at 8000 draws is <= 0.006; 0.025 is > 4 sigma.
    assert torch.allclose(freq, torch.softmax(logits / temperature, -1), atol=0.025)
    # Nucleus 0.95 at T=1: probabilities 0.662, 0.244, 0.090, 0.004 -> only the last token is cut.
    nucleus = _draw(RowSampler([0], top_p=0.95, rows_per_seed=num_draws), [scores])[0]
    assert int((nucleus == 3).sum()) == 0 and int((nucleus == 2).sum()) > 0


def test_shapes_dtypes_and_bad_shapes():
    sampler = RowSampler([3, 4], temperature=0.8, rows_per_seed=2)
    scores = torch.randn(4, VOCAB, dtype=torch.bfloat16)
    tokens = sampler.sample(scores)
    assert tokens.shape == (4,) and tokens.dtype == torch.int64 and int(tokens.max()) < VOCAB
    with pytest.raises(ValueError, match=r"expected \(4, vocab_size\) = 2 seeds x 2 rows per seed"):
        sampler.sample(torch.randn(3, VOCAB))
    with pytest.raises(ValueError, match="rows_per_seed=0"):
        RowSampler([1], rows_per_seed=0)


def test_with_knobs_continues_the_same_row_stream():
    """Two decoder levels with their own knobs draw from ONE generator per row, in call order."""
    first, second = _scores(2, seed=1)[:2]
    backbone = RowSampler([5, 6], temperature=1.0)
    depth = backbone.with_knobs(temperature=1.0)
    shared = [backbone.sample(first), depth.sample(second)]
    single = RowSampler([5, 6], temperature=1.0)
    assert all(torch.equal(a, b) for a, b in zip(shared, [single.sample(first), single.sample(second)]))
    assert depth.generators("cpu") is backbone.generators("cpu")
    # Own knobs: top-k 1 on the depth level only.
    greedy_depth = RowSampler([5, 6], temperature=1.0).with_knobs(top_k=1)
    assert torch.equal(greedy_depth.sample(second), second.argmax(-1))


def test_processors_make_a_greedy_argmax_pick_the_seeded_sample():
    steps = _scores(6)
    knobs = dict(temperature=1.3, top_k=10, rows_per_seed=2)
    expected = _draw(RowSampler([4, 5, 6], **knobs), steps)
    one_hot = SampledTokenProcessor(RowSampler([4, 5, 6], **knobs))
    for step, scores in enumerate(steps):
        out = one_hot(None, scores)
        assert out.shape == scores.shape
        assert torch.equal(torch.isfinite(out).sum(-1), torch.ones(6, dtype=torch.long))
        assert torch.equal(out.argmax(-1), expected[step])


def test_fixed_cpu_generators_and_knobs_that_are_off():
    sampler = RowSampler([2], generator_device="cpu")
    assert sampler.generators("meta")[0].device == torch.device("cpu")
    assert len(RowSampler([1], temperature=None, top_k=0, top_p=1.0).warpers) == 0
    assert len(RowSampler([1], temperature=0.7, top_k=5, top_p=0.9).warpers) == 3


@pytest.mark.parametrize("rows_per_seed", [1, 9])
def test_each_row_draws_what_the_global_rng_draws_for_it_alone(rows_per_seed):
    """transformers' ``_sample`` (generation/utils.py) draws ``multinomial(softmax(warped scores), 1)`` on the global
    RNG; for a batch of one after ``torch.manual_seed(s)`` those are the draws of our row seeded with ``s``, whatever
    its batch-mates (rows_per_seed 9: Dia's codebooks, one block per row)."""
    knobs = dict(temperature=1.2, top_k=20, top_p=0.95)
    seeds = [3, 11, 42]
    steps = _scores(len(seeds) * rows_per_seed, seed=2)
    batched = _draw(RowSampler(seeds, rows_per_seed=rows_per_seed, **knobs), steps)
    warpers = logits_warpers(**knobs)
    with torch.random.fork_rng(devices=[]):
        for i, seed in enumerate(seeds):
            rows = slice(i * rows_per_seed, (i + 1) * rows_per_seed)
            torch.manual_seed(seed)
            upstream = torch.stack([torch.multinomial(torch.softmax(warpers(None, s[rows]), dim=-1), num_samples=1)
                                    .squeeze(1) for s in steps])
            assert torch.equal(batched[:, rows], upstream), f"seed {seed}"
