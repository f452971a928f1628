"""A batched KV cache whose rows have different lengths (ragged), with per-row commit and rollback.

Every layer's keys and values live in one preallocated tensor `kv` [L, 2, B, kv_heads, capacity, head_dim]
(capacity grows by an eighth, at least GROW_SLOTS slots: the engine's attention reads each row's whole
capacity, real.engine.attention, so room held empty costs as much to read as keys do), and a forward's new keys and
values are written into it in place: no step copies the cache (a `transformers.DynamicCache` concatenates
every layer's whole cache at every step). `cache` is the `transformers.Cache` over it that a model's forward
takes.

Row b's committed tokens sit in slots [0, lens[b]); slots from lens[b] to the committed width
W = max(lens) are garbage the attention mask hides. A forward writes its T new tokens at slots
[W + P, W + P + T) for every row (P = tokens written since the last commit, "pending"); the caller
says, per query, which pending and new slots it may see (a causal or tree pattern), and the mask
built here adds the row's committed prefix. `commit` then moves the kept new tokens of each row
down to lens[b], lens[b] + 1, ... (one indexed copy over all layers) and drops everything else:
that is the per-row KV rollback of rejected draft tokens. Keys already carry their rotary position
(position ids are passed explicitly), so moving a key to another slot does not change what it encodes.

Optionally the cache keeps one feature vector per slot (the target's last hidden state for that
token) in the same way, so the drafter and the drafter trainer can read them later.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

GROW_SLOTS = 64  # the least a cache's capacity grows by


class RaggedCache:
    """KV (and optional per-token features) of B rows with lengths `lens`; see the module docstring."""

    def __init__(self, num_layers: int, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, feature_dim: int | None = None):
        self._set_storage(torch.zeros(num_layers, 2, batch, kv_heads, 0, head_dim, dtype=dtype, device=device))
        self._features = None if feature_dim is None else torch.zeros(batch, 0, feature_dim, dtype=dtype, device=device)
        self.cache = Cache(layers=[_SlotLayer(self, i) for i in range(num_layers)])
        self.lens = torch.zeros(batch, dtype=torch.long, device=device)  # committed tokens per row
        self.width = 0  # committed width W = max(lens) = slot count before the pending region
        self.ragged = False  # some row has fewer than W committed tokens (hidden garbage slots)
        self.dtype = dtype

    @property
    def batch(self) -> int:
        return self.lens.shape[0]

    @property
    def capacity(self) -> int:
        return self.kv.shape[4]

    @property
    def pending(self) -> int:
        """Slots written since the last commit (they follow the committed width)."""
        return self.cache.layers[0].size - self.width

    @property
    def features(self) -> torch.Tensor | None:
        """The committed slots' features [B, W, F] (a view), or None when the cache keeps none."""
        return None if self._features is None else self._features[:, : self.width]

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

    def padded_feed(self, feeds: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The inputs of one forward that feeds each row b its tokens `feeds[b]` (nothing pending), as wide as the
        widest: tokens [B, T] (0 past a row's feed), slots [B, T] (each token's offset 0..T-1 past its row's
        committed length: `lens[:, None] + slots` are its positions, and `commit` keeps them), counts [B] (the tokens
        each row keeps) and visibility [B, T, T] (causal over the row's feed; a padding query sees itself alone)."""
        width, device = max(len(f) for f in feeds), self.lens.device
        counts = torch.tensor([len(f) for f in feeds], device=device)
        tokens = torch.zeros(len(feeds), width, dtype=torch.long, device=device)
        for b, f in enumerate(feeds):
            tokens[b, : len(f)] = torch.as_tensor(f, device=device)
        slots = torch.arange(width, device=device)
        valid = slots[None, :] < counts[:, None]
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        visible = (causal[None] & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)[None]
        return tokens, slots[None].expand(len(feeds), width), counts, visible

    def commit(self, keep: torch.Tensor, counts: torch.Tensor, features: torch.Tensor | None = None) -> None:
        """Keep, per row, the first counts[b] slots listed in keep[b] and drop all other pending slots.

        keep: long [B, K], indices into the pending region (0 = first slot after the committed width),
        ascending within a row. counts: long [B]. features: [B, P, F] for the pending slots, when the
        cache keeps features. Afterwards lens += counts and nothing is pending.
        """
        batch, k = keep.shape
        pending = self.pending
        assert self._features is None or (features is not None and features.shape[1] == pending), "features per slot"
        if self._features is not None:
            self._features[:, self.width: self.width + pending] = features
        valid = torch.arange(k, device=keep.device)[None, :] < counts[:, None]
        rows = torch.arange(batch, device=keep.device)[:, None].expand(batch, k)[valid]
        dst = (self.lens[:, None] + torch.arange(k, device=keep.device)[None, :])[valid]
        src = (self.width + keep)[valid]
        if not torch.equal(src, dst):  # else (e.g. one row, or every row full width keeping a prefix) nothing moves
            slots = self.kv.permute(2, 4, 0, 1, 3, 5)  # [B, S, L, 2, H, D]: a (row, slot) pair indexes one block
            slots[rows, dst] = slots[rows, src]
            if self._features is not None:
                self._features[rows, dst] = self._features[rows, src]
        self._set_lens(self.lens + counts)
        self.rollback()

    def commit_all(self) -> None:
        """`commit` keeping every pending slot of every row; with no ragged row (asserted) nothing moves."""
        assert not self.ragged and self._features is None, "commit_all: ragged rows or features need commit"
        self.lens = self.lens + self.pending
        self.width += self.pending

    def rollback(self) -> None:
        """Drop every pending slot (commit nothing)."""
        for layer in self.cache.layers:
            layer.size = self.width

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (long [B']) in this order; nothing may be pending."""
        assert self.pending == 0
        self._set_lens(self.lens[rows])
        self._set_storage(self.kv[:, :, rows])
        if self._features is not None:
            self._features = self._features[rows]
        self.rollback()

    def take(self, rows: torch.Tensor) -> "RaggedCache":
        """A new cache holding copies of `rows` (long [B']) of this one, in this order; nothing may be pending."""
        assert self.pending == 0
        out = RaggedCache.__new__(RaggedCache)
        lens = self.lens[rows]
        width = int(lens.max()) if len(lens) else 0
        out._set_storage(self.kv[:, :, rows, :, :width])  # advanced indexing: a copy
        out._features = None if self._features is None else self._features[rows, :width]
        out.cache = Cache(layers=[_SlotLayer(out, i) for i in range(self.kv.shape[0])])
        out.dtype = self.dtype
        out._set_lens(lens)
        out.rollback()
        return out

    def cut(self, lens: torch.Tensor) -> None:
        """Keep only the first lens[b] (<= the row's) committed slots of each row; nothing may be pending."""
        assert self.pending == 0 and bool((lens <= self.lens).all())
        self._set_lens(lens.to(self.lens))
        self.rollback()

    def extend(self, other: "RaggedCache") -> None:
        """Append the rows of `other` after this cache's rows; nothing may be pending in either."""
        assert self.pending == 0 and other.pending == 0
        width, batch = max(self.width, other.width), self.batch
        self._set_storage(_stack_rows(self.kv, other.kv, width, slot_dim=4, row_dim=2))
        if self._features is not None:
            self._features = _stack_rows(self._features, other._features, width, slot_dim=1, row_dim=0)
        self._set_lens(torch.cat([self.lens, other.lens]))
        self.rollback()
        assert self.batch == batch + other.batch

    def reserve(self, slots: int) -> None:
        """Make room for `slots` slots per row (growing the capacity by at least an eighth, or GROW_SLOTS slots)."""
        if slots <= self.capacity:
            return
        capacity = max(slots, self.capacity + max(GROW_SLOTS, self.capacity // 8))
        self._set_storage(_grow(self.kv, capacity, 4))
        if self._features is not None:
            self._features = _grow(self._features, capacity, 1)

    def _set_storage(self, kv: torch.Tensor) -> None:
        self.kv = kv
        self.views = [layer.unbind(0) for layer in kv.unbind(0)]  # per layer (keys, values) [B, H, capacity, D]

    def _set_lens(self, lens: torch.Tensor) -> None:
        self.lens = lens
        low, self.width = (int(x) for x in torch.aminmax(lens)) if len(lens) else (0, 0)
        self.ragged = low < self.width


class _SlotLayer(CacheLayerMixin):
    """One layer of a RaggedCache as transformers sees it: `update` writes the new keys and values at
    the next free slots of the shared storage and returns views of every slot written so far."""

    is_sliding = False

    def __init__(self, owner: RaggedCache, index: int):  # not CacheLayerMixin's: keys/values are views here
        self.owner, self.index = owner, index
        self.size = 0  # slots written (committed width + pending)
        self.is_initialized = True

    @property
    def keys(self) -> torch.Tensor:
        return self.owner.views[self.index][0].narrow(2, 0, self.size)

    @property
    def values(self) -> torch.Tensor:
        return self.owner.views[self.index][1].narrow(2, 0, self.size)

    def lazy_initialization(self, key_states, value_states) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        t = key_states.shape[2]
        end = self.size + t
        if end > self.owner.capacity:
            self.owner.reserve(end)
        keys, values = self.owner.views[self.index]
        keys.narrow(2, self.size, t).copy_(key_states)
        values.narrow(2, self.size, t).copy_(value_states)
        self.size = end
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.size + query_length, 0

    def get_seq_length(self) -> int:
        return self.size

    def get_max_length(self) -> int:
        return -1


def _grow(x: torch.Tensor, capacity: int, slot_dim: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[slot_dim] = capacity
    out = x.new_zeros(shape)
    out.narrow(slot_dim, 0, x.shape[slot_dim]).copy_(x)
    return out


def _stack_rows(a: torch.Tensor, b: torch.Tensor, width: int, slot_dim: int, row_dim: int) -> torch.Tensor:
    """Rows of `a` then rows of `b` (their first `width` slots) in a new tensor with room to grow."""
    shape = list(a.shape)
    shape[row_dim] = a.shape[row_dim] + b.shape[row_dim]
    shape[slot_dim] = max(a.shape[slot_dim], b.shape[slot_dim], width)
    out = a.new_zeros(shape)
    for x, start in ((a, 0), (b, a.shape[row_dim])):
        n = min(x.shape[slot_dim], width)
        out.narrow(row_dim, start, x.shape[row_dim]).narrow(slot_dim, 0, n).copy_(x.narrow(slot_dim, 0, n))
    return out
