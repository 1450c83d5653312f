"""Per-row seeded token sampling shared by the model adapters.

Why: ``torch.multinomial`` in transformers' ``generate`` draws from the global RNG, so a row's tokens would depend on
how many rows share its batch and on their draws. Here every row owns ONE random stream, a ``torch.Generator``
seeded with ``AdapterRow.seed``; all of that row's draws come from it, in decode-step order, so a seed gives the same
audio batched or alone.

Draw-equal to upstream: a row's draw is ``torch.multinomial(probs, 1, generator=row_generator)`` on that row's own
``(rows_per_seed, vocab_size)`` block of probabilities, the very call transformers' ``_sample``
(generation/utils.py) makes on the global RNG for a batch of one (``multinomial(softmax(scores), num_samples=1)``).
A generator seeded with ``s`` holds the state ``torch.manual_seed(s)`` gives the global one, so a row seeded with
``s`` draws the tokens ``torch.manual_seed(s); model.generate(...)`` draws for that row alone, as long as the adapter
makes its draws in upstream's order and shapes (tests/integration/test_end_to_end_upstream.py checks Dia and CSM).

Pieces:

* ``RowSampler`` -- transformers' logits warpers (``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
  ``TopPLogitsWarper``) built from the sampling knobs, plus the per-row generators. ``sample`` draws one token per
  score row (``torch.multinomial`` with the row's generator); ``generators`` hands the streams to other per-row draws
  (e.g. diffusion noise).
* ``SampledTokenProcessor``: a ``LogitsProcessor`` for adapters that must run inside a library ``generate`` whose own
  path is greedy (``do_sample=False``): it draws with ``RowSampler.sample`` and returns scores ``-inf`` except the
  drawn token, so the library's argmax returns exactly that token.
* ``logits_warpers``: the warpers alone, in transformers' order, for adapters that place them in a library's list.

Score layout: ``scores`` is ``(num_seeds * rows_per_seed, vocab_size)``, row-major by seed: seed ``i`` owns score
rows ``i * rows_per_seed ... (i + 1) * rows_per_seed - 1`` (e.g. one row per codebook of a batch row).

This module imports torch and transformers at import time; adapters import it inside ``generate`` so importing an
adapter module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, \
    TopPLogitsWarper


class RowSampler:
    """Temperature / top-k / top-p warping and one seeded random stream per row.

    Args:
        seeds: one seed per batch row; row ``i``'s generator is ``torch.Generator(device).manual_seed(seeds[i])``.
        temperature: divides the scores (``TemperatureLogitsWarper``); None -> no warper (same as 1.0). Must be > 0.
        top_k: keep the ``top_k`` highest scores (``TopKLogitsWarper``); None or 0 -> off.
        top_p: keep the smallest set of tokens whose probability sums to ``top_p`` (``TopPLogitsWarper``, nucleus
            sampling, Holtzman et al. 2019); None or 1.0 -> off.
        rows_per_seed: score rows per seed (1, or e.g. the number of codebooks predicted per step).
        generator_device: device of the generators; None -> the device of the first scores seen (no host copy per
            step). A CPU generator gives the same stream whatever device the model runs on.

    Raises:
        ValueError: ``rows_per_seed`` < 1, or a knob the transformers warper refuses (temperature <= 0). Request
            knobs are validated before this by ``SynthesisParams`` (``InputError``).
    """

    def __init__(self, seeds: Sequence[int], *, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, rows_per_seed: int = 1,
                 generator_device: str | torch.device | None = None):
        if rows_per_seed < 1:
            raise ValueError(f"rows_per_seed={rows_per_seed} must be >= 1")
        self.seeds = [int(s) for s in seeds]
        self.rows_per_seed = int(rows_per_seed)
        self.generator_device = generator_device
        self._streams = _RowStreams(self.seeds, generator_device)
        self.warpers = logits_warpers(temperature, top_k, top_p)

    def with_knobs(self, *, temperature: float | None = None, top_k: int | None = None,
                   top_p: float | None = None) -> "RowSampler":
        """A sampler with other warpers but the SAME rows and generators (one stream per row across both), e.g. for
        a second decoder level that samples from the row's stream after the first."""
        other = RowSampler(self.seeds, temperature=temperature, top_k=top_k, top_p=top_p,
                           rows_per_seed=self.rows_per_seed, generator_device=self.generator_device)
        other._streams = self._streams
        return other

    def generators(self, device: str | torch.device) -> list[torch.Generator]:
        """The per-row generators (one per seed), created at the first call on ``generator_device`` if set, else on
        ``device``; later calls return the same objects (their streams continue)."""
        return self._streams.get(device)

    def warp(self, input_ids: torch.Tensor | None, scores: torch.Tensor) -> torch.Tensor:
        """Apply the warpers. ``scores``: ``(num_rows, vocab_size)`` float; returns the same shape and dtype with
        filtered tokens at ``-inf``. ``input_ids`` is passed through to the warpers (they ignore it; None is fine)."""
        return self.warpers(input_ids, scores)

    def sample(self, scores: torch.Tensor, input_ids: torch.Tensor | None = None,
               exclude: torch.Tensor | None = None) -> torch.Tensor:
        """Warp, softmax (float32) and draw one token per score row with the owning row's generator.

        Args:
            scores: ``(num_seeds * rows_per_seed, vocab_size)`` logits (any float dtype, on any device).
            exclude: optional ``(vocab_size,)`` bool, True for tokens that must never be drawn. Their probability is
                zeroed AFTER the warpers, which leaves every other draw exactly as without ``exclude``:
                ``torch.multinomial`` draws one exponential variate ``q`` per token and returns ``argmax(p / q)``
                (the Gumbel-max trick, ATen ``multinomial``), so removing a token only changes the rows whose draw
                was that token. A row whose warped distribution holds nothing but excluded tokens takes its most
                likely allowed token (after the same draw, so its stream advances as the others').
        Returns:
            ``(num_seeds * rows_per_seed,)`` int64 token ids on ``scores.device``.
        Raises:
            ValueError: ``scores`` does not have ``num_seeds * rows_per_seed`` rows.
        """
        self._check_rows(scores)
        probs = torch.softmax(self.warp(input_ids, scores).float(), dim=-1)
        if exclude is not None:
            exclude = exclude.to(probs.device)
            probs = probs.masked_fill(exclude, 0.0)
            empty = probs.sum(dim=-1) == 0
            if bool(empty.any()):
                best = scores.float().masked_fill(exclude, -float("inf")).argmax(dim=-1)
                one_hot = torch.nn.functional.one_hot(best, probs.shape[-1]).to(probs.dtype)
                probs = torch.where(empty[:, None], one_hot, probs)
        per_seed = probs.view(len(self.seeds), self.rows_per_seed, -1)  # (num_seeds, rows_per_seed, vocab)
        # One multinomial call per seed, with that seed's generator: a row's draws never touch another row's stream.
        return torch.cat([torch.multinomial(p, 1, generator=g)
                          for p, g in zip(per_seed, self.generators(scores.device))]).view(-1)

    def _check_rows(self, scores: torch.Tensor) -> None:
        expected = len(self.seeds) * self.rows_per_seed
        if scores.ndim != 2 or scores.shape[0] != expected:
            raise ValueError(f"scores of shape {tuple(scores.shape)}; expected ({expected}, vocab_size) = "
                             f"{len(self.seeds)} seeds x {self.rows_per_seed} rows per seed")


class _RowStreams:
    """The generators of one batch, created lazily (on the first scores' device unless a device is fixed) and shared
    by every ``RowSampler`` made from the same one with ``with_knobs``."""

    def __init__(self, seeds: list[int], device: str | torch.device | None):
        self.seeds = seeds
        self.device = device
        self.generators: list[torch.Generator] | None = None

    def get(self, device: str | torch.device) -> list[torch.Generator]:
        if self.generators is None:
            where = self.device if self.device is not None else device
            self.generators = [torch.Generator(device=where).manual_seed(s) for s in self.seeds]
        return self.generators


class SampledTokenProcessor(LogitsProcessor):
    """Logits processor that draws with ``RowSampler.sample`` and returns scores that are ``-inf`` everywhere except
    0.0 at the drawn token, so a greedy ``generate``'s argmax returns exactly that token. Use it LAST (a later
    processor would see a one-hot row). Scores in ``(num_seeds * rows_per_seed, vocab_size)``, out same shape and
    dtype. Reads ``scores`` only (``input_ids`` goes to the warpers, which ignore it)."""

    def __init__(self, sampler: RowSampler):
        self.sampler = sampler

    def __call__(self, input_ids, scores):
        chosen = self.sampler.sample(scores, input_ids)  # (num_rows,)
        out = torch.full_like(scores, -float("inf"))
        out[torch.arange(scores.shape[0], device=scores.device), chosen] = 0.0
        return out


def logits_warpers(temperature: float | None = None, top_k: int | None = None,
                   top_p: float | None = None) -> LogitsProcessorList:
    """transformers' warpers in the order ``generate`` applies them (temperature, top-k, top-p; generation/utils.py
    ``_get_logits_processor``), each only when its knob is on: temperature not None, top-k not None or 0, top-p
    below 1. ``min_tokens_to_keep`` is transformers' default 1, as ``generate`` uses without beams."""
    warpers = LogitsProcessorList()
    if temperature is not None:
        warpers.append(TemperatureLogitsWarper(float(temperature)))
    if top_k:  # None or 0: off (0 is transformers' "no top-k")
        warpers.append(TopKLogitsWarper(int(top_k)))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(float(top_p)))
    return warpers
