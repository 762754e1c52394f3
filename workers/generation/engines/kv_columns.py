"""The hf engine's KV cache: full-attention layers whose keys and values are views of buffers with spare columns.

transformers' `DynamicLayer` appends a decode step's column with `torch.cat`, copying the layer's whole cache at every
step: O(B*H*W*D) bytes per layer per step, so a row decoding W tokens costs O(W^2) copies. A decode step of a 1M
model at batch 64 and 512 columns took 51 ms with those copies and 24 ms without (bench/kv_cache.py: 1.31x the
tokens/s on a long-tail stream, 1.20x on a 15M model). Here a step writes its column in place
into spare columns at the right of the buffer; a layer copies only when its spare runs out (it then keeps
max(min_spare, W // SPARE_DIVISOR) new spare columns, so copies are amortised) and when the batcher reshapes the batch
(rows retired or spliced in), which rewrote the cache before too.

Invariant: `keys`/`values` are the views `buffer[:, :, start:end]` of this layer's buffers; anything that assigns
them other tensors (transformers' own batch helpers) is adopted on the next `update`, copied into a new buffer.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_SPARE = 16  # spare columns a buffer gets at least (a decode step uses one)
SPARE_DIVISOR = 8  # ... and W // SPARE_DIVISOR for a W-column cache: at most 1/8 more memory, copies every W/8 steps


class SpareColumnsLayer(DynamicLayer):
    """A full-attention layer's cache, (B, H, W, D) views of (B, H, capacity, D) buffers."""

    keys: torch.Tensor  # set by the first `update` (CacheLayerMixin declares them optional until then)
    values: torch.Tensor

    def __init__(self, min_spare: int = MIN_SPARE, spare_divisor: int | None = SPARE_DIVISOR) -> None:
        """`min_spare=0, spare_divisor=None`: no spare columns, a copy at every step (DynamicLayer's cost; the
        baseline of bench/kv_cache.py)."""
        super().__init__()
        self.min_spare, self.spare_divisor = min_spare, spare_divisor
        self._k_buf: torch.Tensor | None = None
        self._v_buf: torch.Tensor | None = None
        self._k_view: torch.Tensor | None = None  # the `keys` this layer set (anything else was assigned from outside)
        self._start = self._end = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        new = key_states.shape[-2]
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True
            self.hold(key_states[:, :, :0], value_states[:, :, :0], extra=new)
        elif self.keys is not self._k_view or self._end + new > self._capacity_held:
            self.hold(self.keys, self.values, extra=new)  # assigned from outside (adopted), or out of spare columns
        assert self._k_buf is not None and self._v_buf is not None
        end = self._end + new
        self._k_buf[:, :, self._end:end] = key_states
        self._v_buf[:, :, self._end:end] = value_states
        self._view(self._start, end)
        return self.keys, self.values

    def hold(self, keys: torch.Tensor, values: torch.Tensor, extra: int = 0) -> None:
        """Copy `keys`/`values` (B, H, W, D) into new buffers with room for `extra` more columns plus the spare."""
        batch, heads, width, dim = keys.shape
        self._k_buf = keys.new_empty((batch, heads, self._capacity(width + extra), dim))
        self._v_buf = values.new_empty((batch, heads, self._capacity(width + extra), values.shape[-1]))
        self._k_buf[:, :, :width] = keys
        self._v_buf[:, :, :width] = values
        self._view(0, width)

    def select_rows(self, index: torch.Tensor, crop: int) -> None:
        """Keep the rows `index` (in that order) and drop the first `crop` columns: one copy of the columns kept,
        into new buffers with the spare."""
        width = self.get_seq_length() - crop
        old_keys, old_values = self.keys[:, :, crop:], self.values[:, :, crop:]
        self._k_buf = old_keys.new_empty((len(index), old_keys.shape[1], self._capacity(width), old_keys.shape[-1]))
        self._v_buf = old_values.new_empty((len(index), *self._k_buf.shape[1:3], old_values.shape[-1]))
        torch.index_select(old_keys, 0, index, out=self._k_buf[:, :, :width])
        torch.index_select(old_values, 0, index, out=self._v_buf[:, :, :width])
        self._view(0, width)

    def gather_columns(self, index: torch.Tensor, columns: torch.Tensor) -> None:
        """Keep the rows `index` and, for the i-th kept row, the columns `columns[i]` (B', W') in that order: one
        copy, into new buffers with the spare (hf_batch.py's compaction of speculative holes)."""
        keys, values = self.keys.index_select(0, index), self.values.index_select(0, index)
        batch, heads, _, dim = keys.shape
        width = columns.shape[1]
        self._k_buf = keys.new_empty((batch, heads, self._capacity(width), dim))
        self._v_buf = values.new_empty((batch, heads, self._capacity(width), values.shape[-1]))
        picks = columns[:, None, :, None]  # (B', 1, W', 1)
        self._k_buf[:, :, :width] = torch.gather(keys, 2, picks.expand(-1, heads, -1, dim))
        self._v_buf[:, :, :width] = torch.gather(values, 2, picks.expand(-1, heads, -1, values.shape[-1]))
        self._view(0, width)

    def truncate(self, width: int) -> None:
        """Keep the first `width` columns; those dropped become spare (speculative drafts no row accepted)."""
        assert 0 <= width <= self.get_seq_length()
        self._view(self._start, self._start + width)

    def zero_columns(self, padded: torch.Tensor) -> None:
        """Zero the (row, column) cells where `padded` (B, W) is true, in place."""
        self.keys.masked_fill_(padded[:, None, :, None], 0.0)
        self.values.masked_fill_(padded[:, None, :, None], 0.0)

    def stack_right_aligned(self, other: SpareColumnsLayer) -> None:
        """Append `other`'s rows below this layer's, both right-aligned to the wider of the two; the narrower is
        left-padded with zero columns."""
        mine, theirs = self.get_seq_length(), other.get_seq_length()
        width = max(mine, theirs)
        rows = self.keys.shape[0]
        keys = self.keys.new_zeros((rows + other.keys.shape[0], *self.keys.shape[1:2], self._capacity(width),
                                    self.keys.shape[-1]))
        values = self.values.new_zeros((keys.shape[0], keys.shape[1], keys.shape[2], self.values.shape[-1]))
        keys[:rows, :, width - mine:width] = self.keys
        values[:rows, :, width - mine:width] = self.values
        keys[rows:, :, width - theirs:width] = other.keys
        values[rows:, :, width - theirs:width] = other.values
        self._k_buf, self._v_buf = keys, values
        self._view(0, width)

    def get_seq_length(self) -> int:
        return self._end - self._start if self.is_initialized else 0

    @property
    def _capacity_held(self) -> int:
        return self._k_buf.shape[-2] if self._k_buf is not None else 0

    def _capacity(self, width: int) -> int:
        spare = max(self.min_spare, width // self.spare_divisor) if self.spare_divisor else self.min_spare
        return width + spare

    def _view(self, start: int, end: int) -> None:
        assert self._k_buf is not None and self._v_buf is not None
        self._start, self._end = start, end
        self.keys, self.values = self._k_buf[:, :, start:end], self._v_buf[:, :, start:end]
        self._k_view = self.keys


class SpareColumnsCache(DynamicCache):
    """A `DynamicCache` whose layers are `SpareColumnsLayer`s; only for models with full attention in every layer
    (the right-aligned batch layout of hf_batch.py needs that too)."""

    def __init__(self, config: Any, min_spare: int = MIN_SPARE, spare_divisor: int | None = SPARE_DIVISOR) -> None:
        super().__init__(config=config)
        if not all(type(layer) is DynamicLayer for layer in self.layers):
            kinds = sorted({type(layer).__name__ for layer in self.layers})
            raise ValueError(f"the hf engine's batch needs full attention in every layer; this model's cache has "
                             f"{kinds}")
        self.layers = [SpareColumnsLayer(min_spare, spare_divisor) for _ in self.layers]


def spare_layers(cache: DynamicCache) -> list[SpareColumnsLayer]:
    layers = list(cache.layers)
    assert all(isinstance(layer, SpareColumnsLayer) for layer in layers), "a SpareColumnsCache's layers"
    return layers  # type: ignore[return-value]
