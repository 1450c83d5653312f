"""Token choice for a whole decode step without a host sync per row (issue 27): every row's draw stays on its own
seeded generator, and the step's codes reach the host in one transfer (the stop check).

``exponential_race`` is gpt-fast's ``multinomial_sample_one_no_sync``: ``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn
per token from the row's generator. It is draw-for-draw ``torch.multinomial(probs, k, generator=g)`` (without
replacement, k >= 1): ATen's ``multinomial`` takes exactly this path for one sample or no replacement
(``aten/src/ATen/native/Distributions.cpp``, "Fast-path for no replacement or if only one sample is drawn": ``q =
empty_like(self).exponential_(1, gen)``, ``div_out(q, self, q)``, then ``argmax`` / ``topk``), after a validity check
that reads ``probs.max()`` and ``probs.min()`` on the host (``.item()``): the sync this function leaves out.
``tests/unit/test_step_sampling.py`` checks the equality draw for draw, so the upstream-equality tests (IndexTTS 2's
``infer`` samples with ``torch.multinomial``) hold on this path.
"""

from __future__ import annotations

from collections.abc import Sequence


def exponential_race(probs, generators: Sequence, num_samples: int = 1):
    """One (or ``num_samples``, without replacement) draw per row of ``probs`` from that row's generator.

    Args:
        probs: ``(num_rows, vocab)`` float, non-negative, each row with some mass (on the generators' device).
        generators: one ``torch.Generator`` per row, on ``probs.device``.
        num_samples: draws per row, distinct, in ``torch.multinomial``'s order (largest ``p / q`` first).
    Returns:
        ``(num_rows, num_samples)`` int64 on ``probs.device``, equal to ``torch.cat([torch.multinomial(p[None],
        num_samples, generator=g) for p, g in zip(probs, generators)])``.
    Raises:
        ValueError: ``generators`` does not have one generator per row.
    """
    import torch

    if len(generators) != probs.shape[0]:
        raise ValueError(f"{len(generators)} generators for {probs.shape[0]} rows of probabilities")
    race = torch.empty_like(probs)
    for row, generator in enumerate(generators):
        race[row].exponential_(1, generator=generator)
    race = probs / race
    if num_samples == 1:
        return race.argmax(dim=-1, keepdim=True)
    return torch.topk(race, num_samples, dim=-1)[1]
