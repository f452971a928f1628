"""A batched KV cache whose rows have different lengths (ragged), with per-row commit and rollback.

One `transformers.DynamicCache` holds every row: layer tensors are [B, kv_heads, S, head_dim].
Row b's committed tokens sit in slots [0, lens[b]); slots from lens[b] to the committed width
W = max(lens) are garbage the attention mask hides. A forward appends its T new tokens at slots
[W + P, W + P + T) for every row (P = tokens appended since the last commit, "pending"); the caller
says, per query, which pending and new slots it may see (a causal or tree pattern), and the mask
built here adds the row's committed prefix. `commit` then moves the kept new tokens of each row
down to lens[b], lens[b] + 1, ... and drops everything else: that is the per-row KV rollback of
rejected draft tokens. Keys already carry their rotary position (position ids are passed
explicitly), so moving a key to another slot does not change what it encodes.

Optionally the cache keeps one feature vector per slot (the target's last hidden state for that
token), compacted the same way, so the drafter and the drafter trainer can read them later.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


class RaggedCache:
    """KV (and optional per-token features) of B rows with lengths `lens`; see the module docstring."""

    def __init__(self, num_layers: int, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, feature_dim: int | None = None):
        empty = torch.zeros(batch, kv_heads, 0, head_dim, dtype=dtype, device=device)
        self.cache = DynamicCache(ddp_cache_data=[(empty, empty)] * num_layers)
        self.lens = torch.zeros(batch, dtype=torch.long, device=device)  # committed tokens per row
        self.width = 0  # committed width W = max(lens) = slot count before the pending region
        self.ragged = False  # some row has fewer than W committed tokens (hidden garbage slots)
        self.features = None if feature_dim is None else torch.zeros(batch, 0, feature_dim, dtype=dtype, device=device)
        self.dtype = dtype

    @property
    def batch(self) -> int:
        return self.lens.shape[0]

    @property
    def pending(self) -> int:
        """Slots appended since the last commit (they follow the committed width)."""
        return self.cache.layers[0].keys.shape[2] - self.width

    def mask(self, visible: torch.Tensor) -> torch.Tensor:
        """Additive attention mask for the next forward of T tokens per row.

        visible: bool [B, T, P + T]: query t of row b may attend pending/new slot j. The committed
        prefix [0, lens[b]) is always visible. Returns float [B, 1, T, W + P + T] (0 or dtype min).
        """
        batch, t, pt = visible.shape
        assert batch == self.batch and pt == self.pending + t, (visible.shape, self.batch, self.pending)
        prefix = torch.arange(self.width, device=visible.device)[None, :] < self.lens[:, None]  # [B, W]
        allowed = torch.cat([prefix[:, None, :].expand(batch, t, self.width), visible], dim=2)
        zero = torch.zeros((), dtype=self.dtype, device=visible.device)
        return torch.where(allowed, zero, torch.finfo(self.dtype).min)[:, None]

    def mask_one(self) -> torch.Tensor | None:
        """The mask for one new token per row that sees every pending slot (a chain's next node, a plain
        decoding step): None, i.e. no mask, when no row hides garbage slots; else `mask` of that pattern."""
        if not self.ragged:
            return None
        return self.mask(torch.ones(self.batch, 1, self.pending + 1, dtype=torch.bool, device=self.lens.device))

    def commit(self, keep: torch.Tensor, counts: torch.Tensor, features: torch.Tensor | None = None) -> None:
        """Keep, per row, the first counts[b] slots listed in keep[b] and drop all other pending slots.

        keep: long [B, K], indices into the pending region (0 = first slot after the committed width),
        ascending within a row. counts: long [B]. features: [B, P, F] for the pending slots, when the
        cache keeps features. Afterwards lens += counts and nothing is pending.
        """
        batch, k = keep.shape
        pending = self.pending
        assert self.features is None or (features is not None and features.shape[1] == pending), "features per slot"
        valid = torch.arange(k, device=keep.device)[None, :] < counts[:, None]
        rows = torch.arange(batch, device=keep.device)[:, None].expand(batch, k)[valid]
        dst = (self.lens[:, None] + torch.arange(k, device=keep.device)[None, :])[valid]
        src = (self.width + keep)[valid]
        in_place = torch.equal(src, dst)  # e.g. one row, or every row full width, keeping a prefix
        old_width = self.width
        self._set_lens(self.lens + counts)
        for layer in self.cache.layers:
            layer.keys = _move(layer.keys, rows, dst, src, self.width, in_place)
            layer.values = _move(layer.values, rows, dst, src, self.width, in_place)
        if self.features is not None:
            full = torch.cat([self.features[:, :old_width], features.to(self.features.dtype)], dim=1)
            self.features = _move(full, rows, dst, src, self.width, in_place, slot_dim=1)

    def commit_all(self) -> None:
        """`commit` keeping every pending slot of every row; with no ragged row (asserted) nothing moves."""
        assert not self.ragged and self.features is None, "commit_all: ragged rows or features need commit"
        self.lens = self.lens + self.pending
        self.width += self.pending

    def rollback(self) -> None:
        """Drop every pending slot (commit nothing)."""
        for layer in self.cache.layers:
            layer.keys = layer.keys[:, :, : self.width]
            layer.values = layer.values[:, :, : self.width]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (long [B']) in this order; nothing may be pending."""
        assert self.pending == 0
        self._set_lens(self.lens[rows])
        for layer in self.cache.layers:
            layer.keys = layer.keys[rows, :, : self.width]
            layer.values = layer.values[rows, :, : self.width]
        if self.features is not None:
            self.features = self.features[rows, : self.width]

    def extend(self, other: "RaggedCache") -> None:
        """Append the rows of `other` after this cache's rows; nothing may be pending in either."""
        assert self.pending == 0 and other.pending == 0
        width = max(self.width, other.width)
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat([_pad_slots(mine.keys, width, 2), _pad_slots(theirs.keys, width, 2)])
            mine.values = torch.cat([_pad_slots(mine.values, width, 2), _pad_slots(theirs.values, width, 2)])
        if self.features is not None:
            self.features = torch.cat([_pad_slots(self.features, width, 1), _pad_slots(other.features, width, 1)])
        self._set_lens(torch.cat([self.lens, other.lens]))

    def _set_lens(self, lens: torch.Tensor) -> None:
        self.lens = lens
        low, self.width = (int(x) for x in torch.aminmax(lens)) if len(lens) else (0, 0)
        self.ragged = low < self.width


def _move(x: torch.Tensor, rows, dst, src, width: int, in_place: bool, slot_dim: int = 2) -> torch.Tensor:
    """Copy slot src -> dst of each (row, dst, src) triple (slots along `slot_dim`), then cut to `width` slots."""
    if slot_dim == 2:  # [B, H, S, D]
        if not in_place:
            x[rows, :, dst] = x[rows, :, src]
        return x[:, :, :width]
    if not in_place:  # [B, S, F]
        x[rows, dst] = x[rows, src]
    return x[:, :width]


def _pad_slots(x: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - x.shape[dim]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x, x.new_zeros(shape)], dim=dim)
