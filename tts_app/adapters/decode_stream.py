"""One LM input stream of a running batch whose rows join and leave between decode steps (the step interface,
``tts_app.adapters.base.DecodeBatch``), shared by the adapters that decode step by step (VibeVoice, IndexTTS 2).

A ``DecoderStream`` wraps a transformers decoder stack called as ``model(inputs_embeds=..., attention_mask=...,
position_ids=..., cache=..., use_cache=...)`` and keeps the attention mask of every position fed so far (left
padding and finished rows are 0) plus a ``DynamicCache`` (or, with the cache off, the embedding history). Rows join
(``prepare_merge`` / ``prepare_add_empty_rows`` then ``commit``) and leave (``keep_rows``) without touching the other
rows' positions, and ``checkpoint`` / ``rollback`` undo a forward that raised (``torch.OutOfMemoryError``), so a
batch's prefill and decode step can be atomic.

Where it is used: the cache-off path (``use_cache=False``: the embedding history, recomputed every step), the
prefill of joining rows (their own stream, then copied into the running batch's ``KVPool``,
``tts_app.adapters.kv_pool``), and the eager path kept as the reference of the equality tests and benches
(``DecodeSettings(pooled=False)``: the running batch merged by ``torch.cat`` of every layer's cache).
"""

from __future__ import annotations


def pad_left(tensor, width: int, dim: int):
    """``tensor`` with ``width`` zero entries put before the others along ``dim`` (left padding)."""
    import torch

    if width <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = width
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


class DecoderStream:
    """One LM input stream (the positive prompt stream, or the CFG negative stream) of a running batch.

    Holds the attention mask of every position so far, ``(num_rows, num_columns)`` (left padding, finished rows and
    dropped history are 0), and either a ``DynamicCache`` (``use_cache=True``: each forward reads only the new
    positions) or the whole embedding history (``use_cache=False``: each forward re-reads every position). Position
    ids come from the mask (``cumsum(mask) - 1``), so a row's positions do not depend on how much padding its
    batch-mates forced on it nor on masked holes.

    Rows join (``prepare_merge`` / ``prepare_add_empty_rows`` then ``commit``: another stream's rows or rows with no
    position yet, the shorter side left-padded) and leave (``keep_rows``, which also drops leading columns no row
    sees). ``checkpoint`` / ``rollback`` undo a forward that raised (each layer is cropped back to its old length),
    so a failed decode step leaves the stream as it was.
    """

    def __init__(self, language_model, hidden_size: int, device, dtype, use_cache: bool):
        import torch

        self.language_model = language_model
        self.use_cache = use_cache
        self.hidden_size = hidden_size
        self.device = device
        self.dtype = dtype
        self.attention_mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self.history = torch.zeros((0, 0, hidden_size), dtype=dtype, device=device)  # without cache only
        self.cache = self._new_cache()

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.language_model.config) if self.use_cache else None

    @property
    def num_rows(self) -> int:
        return int(self.attention_mask.shape[0])

    @property
    def num_columns(self) -> int:
        return int(self.attention_mask.shape[1])

    def _layers(self):
        return [layer for layer in self.cache.layers if layer.is_initialized] if self.cache is not None else []

    def forward(self, inputs_embeds, mask):
        """Run new positions ``inputs_embeds`` ``(num_rows, k, hidden)``; ``mask`` ``(num_rows, k)``: which rows attend
        to them. Returns the last position's hidden state ``(num_rows, hidden)``."""
        import torch

        if self.num_columns == 0 and self.num_rows != inputs_embeds.shape[0]:  # a fresh stream takes its rows
            self.attention_mask = self.attention_mask.new_zeros((inputs_embeds.shape[0], 0))
            self.history = self.history.new_zeros((inputs_embeds.shape[0], 0, self.hidden_size))
        attention_mask = torch.cat([self.attention_mask, mask.to(self.attention_mask.dtype)], dim=1)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        num_new = inputs_embeds.shape[1]
        if self.use_cache:
            outputs = self.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                          position_ids=position_ids[:, -num_new:], cache=self.cache, use_cache=True)
        else:
            history = torch.cat([self.history, inputs_embeds], dim=1)
            outputs = self.language_model(inputs_embeds=history, attention_mask=attention_mask,
                                          position_ids=position_ids, use_cache=False)
            self.history = history
        self.attention_mask = attention_mask
        return outputs.last_hidden_state[:, -1]

    def checkpoint(self):
        """The stream's state before a forward (or a ``keep_rows`` reorder), for ``rollback``: references to its
        tensors (each forward and ``keep_rows`` makes new ones), so it costs no copy."""
        layers = [(layer, layer.keys, layer.values) for layer in self._layers()]
        return self.attention_mask, self.history, self.num_columns, layers

    def rollback(self, mark) -> None:
        """Undo what happened since ``checkpoint`` (a forward that raised half-way, a reorder before it): the layers
        that existed get their old tensors back, layers it started are cropped to the old length."""
        self.attention_mask, self.history, length, layers = mark
        saved = {id(layer): (keys, values) for layer, keys, values in layers}
        for layer in self._layers():
            if id(layer) in saved:
                layer.keys, layer.values = saved[id(layer)]
            elif layer.keys.shape[-2] > length:
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]

    def prepare_merge(self, other: "DecoderStream"):
        """This stream's rows followed by ``other``'s (a stream of rows just prefilled), the shorter side left-padded
        to the longer; returned for ``commit`` (nothing changes yet, so a failure here changes nothing)."""
        import torch

        if self.num_rows == 0:
            return other.attention_mask, other.history, other.cache
        width = max(self.num_columns, other.num_columns)
        pad_self, pad_other = width - self.num_columns, width - other.num_columns
        mask = torch.cat([pad_left(self.attention_mask, pad_self, 1), pad_left(other.attention_mask, pad_other, 1)])
        history = self.history
        if not self.use_cache:
            history = torch.cat([pad_left(self.history, pad_self, 1), pad_left(other.history, pad_other, 1)])
        cache = self.cache
        if self.use_cache:
            merged = []
            for mine, theirs in zip(self.cache.layers, other.cache.layers):
                merged.append((torch.cat([pad_left(mine.keys, pad_self, 2), pad_left(theirs.keys, pad_other, 2)]),
                               torch.cat([pad_left(mine.values, pad_self, 2),
                                          pad_left(theirs.values, pad_other, 2)])))
            cache = (self.cache, merged)
        return mask, history, cache

    def prepare_add_empty_rows(self, num_new: int):
        """This stream with ``num_new`` rows that have seen nothing (all masked), for ``commit``."""
        import torch

        mask = torch.cat([self.attention_mask, self.attention_mask.new_zeros((num_new, self.num_columns))])
        history = self.history
        if not self.use_cache:
            history = torch.cat([self.history, self.history.new_zeros((num_new, *self.history.shape[1:]))])
        cache = self.cache
        if self.use_cache and self._layers():
            cache = (self.cache, [(torch.cat([layer.keys, layer.keys.new_zeros((num_new, *layer.keys.shape[1:]))]),
                                   torch.cat([layer.values,
                                              layer.values.new_zeros((num_new, *layer.values.shape[1:]))]))
                                  for layer in self.cache.layers])
        return mask, history, cache

    def commit(self, prepared) -> None:
        """Adopt what a ``prepare_*`` call built (assignments only)."""
        mask, history, cache = prepared
        self.attention_mask, self.history = mask, history
        if isinstance(cache, tuple):
            target, layers = cache
            for layer, (keys, values) in zip(target.layers, layers):
                layer.keys, layer.values = keys, values
            self.cache = target
        else:
            self.cache = cache

    def keep_rows(self, rows) -> None:
        """Keep only batch rows ``rows`` (int64 index), in that order, and drop the leading columns none of them
        sees (left padding a long prompt forced on the others, history that every row has dropped)."""
        if int(rows.numel()) == 0:
            self.attention_mask = self.attention_mask[:0, :0]
            self.history = self.history[:0, :0]
            self.cache = self._new_cache()
            return
        mask = self.attention_mask[rows]
        seen = mask.any(dim=0).nonzero()
        start = int(seen[0]) if seen.numel() else self.num_columns
        self.attention_mask = mask[:, start:]
        if not self.use_cache:
            self.history = self.history[rows, start:]
        for layer in self._layers():
            layer.keys = layer.keys[rows, :, start:]
            layer.values = layer.values[rows, :, start:]

    def num_cached_positions(self) -> int:
        """Positions held per row (cache or history length)."""
        return self.num_columns
