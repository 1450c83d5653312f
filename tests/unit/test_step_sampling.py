"""The no-sync sampler draws exactly what torch.multinomial draws from the same generator (the upstream-equality
tests of IndexTTS 2 rest on it), one sample or several without replacement, with zeroed tokens."""

import pytest

torch = pytest.importorskip("torch")

from tts_app.adapters.step_sampling import exponential_race  # noqa: E402


@pytest.mark.parametrize("num_samples", [1, 6])
def test_exponential_race_draws_what_multinomial_draws(num_samples):
    vocab = 1025
    logits = torch.randn((4, vocab), generator=torch.Generator().manual_seed(0)) * 3
    probs = torch.softmax(logits, dim=-1)
    probs[:, ::7] = 0.0  # excluded codes (IndexTTS 2's undecodable ones)
    seeds = [11, 12, 13, 14]
    ours = [torch.Generator().manual_seed(s) for s in seeds]
    theirs = [torch.Generator().manual_seed(s) for s in seeds]
    for _ in range(20):  # the streams stay in step, draw after draw
        got = exponential_race(probs, ours, num_samples)
        want = torch.cat([torch.multinomial(p[None], num_samples, generator=g) for p, g in zip(probs, theirs)])
        assert torch.equal(got, want)
    assert not bool((probs.gather(1, got) == 0).any())  # never an excluded code


def test_each_row_draws_from_its_own_generator_only():
    probs = torch.full((2, 50), 1 / 50)
    alone = exponential_race(probs[:1], [torch.Generator().manual_seed(5)])
    together = exponential_race(probs, [torch.Generator().manual_seed(5), torch.Generator().manual_seed(9)])
    assert torch.equal(alone[0], together[0])
    with pytest.raises(ValueError, match="2 generators for 1 rows"):
        exponential_race(probs[:1], [torch.Generator(), torch.Generator()])
