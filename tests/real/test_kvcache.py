"""The ragged KV cache against a per-row reference: commit, rollback, select, extend and growth."""
import numpy as np
import pytest
import torch

from real.engine.kvcache import GROW_SLOTS, RaggedCache

LAYERS, HEADS, DIM, FEAT = 2, 2, 3, 4


def _append(cache: RaggedCache, t: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A forward's worth of new slots: random keys/values per layer [L, 2, B, H, t, D] and features [B, t, F]."""
    kv = torch.randn(LAYERS, 2, cache.batch, HEADS, t, DIM, generator=gen, dtype=torch.float64)
    for i, layer in enumerate(cache.cache.layers):
        keys, values = layer.update(kv[i, 0], kv[i, 1])
        assert keys.shape[2] == cache.width + cache.pending and torch.equal(keys[:, :, -t:], kv[i, 0])
    return kv, torch.randn(cache.batch, t, FEAT, generator=gen, dtype=torch.float64)


def _check(cache: RaggedCache, ref: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
    """Row b's first lens[b] slots hold exactly the reference's committed (kv, feature) entries, in order."""
    assert cache.lens.tolist() == [len(r) for r in ref] and cache.pending == 0
    assert cache.width == max(map(len, ref), default=0) and cache.ragged == (min(map(len, ref), default=0) < cache.width)
    for b, row in enumerate(ref):
        if row:
            got = torch.stack([torch.stack([layer.keys[b, :, : len(row)], layer.values[b, :, : len(row)]])
                               for layer in cache.cache.layers])  # [L, 2, H, n, D]
            assert torch.equal(got, torch.stack([kv for kv, _ in row], dim=3))
            assert torch.equal(cache.features[b, : len(row)], torch.stack([f for _, f in row]))


def _new(batch: int, gen: torch.Generator, ref: list) -> RaggedCache:
    cache = RaggedCache(LAYERS, batch, HEADS, DIM, torch.float64, torch.device("cpu"), feature_dim=FEAT)
    ref += [[] for _ in range(batch)]
    return cache


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_keep_every_rows_committed_slots(seed, monkeypatch):
    monkeypatch.setattr("real.engine.kvcache.GROW_SLOTS", 2)  # growth within a few dozen small forwards
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    ref: list[list] = []
    cache = _new(3, gen, ref)
    grew = 0
    for _ in range(40):
        op = rng.choice(["commit", "commit", "commit", "rollback", "select", "extend"])
        if op == "select" and cache.batch > 1:
            rows = sorted(rng.choice(cache.batch, size=rng.integers(1, cache.batch + 1), replace=False).tolist())
            cache.select(torch.tensor(rows))
            ref[:] = [ref[b] for b in rows]
        elif op == "extend":
            other_ref: list = []
            other = _new(int(rng.integers(1, 3)), gen, other_ref)
            kv, feats = _append(other, int(rng.integers(1, 4)), gen)
            counts = rng.integers(1, kv.shape[4] + 1, size=other.batch)
            other.commit(torch.arange(kv.shape[4]).expand(other.batch, -1), torch.tensor(counts), feats)
            for b, n in enumerate(counts):
                other_ref[b] += [(kv[:, :, b, :, j], feats[b, j]) for j in range(n)]
            cache.extend(other)
            ref += other_ref
        else:  # a forward of t slots, then keep a random ascending subset per row (or nothing: rollback)
            capacity = cache.capacity
            t = int(rng.integers(1, 5))
            kv, feats = _append(cache, t, gen)
            grew += cache.capacity > capacity
            if op == "rollback":
                cache.rollback()
            else:
                keep = torch.zeros(cache.batch, t, dtype=torch.long)
                counts = rng.integers(0, t + 1, size=cache.batch)
                for b, n in enumerate(counts):
                    chosen = sorted(rng.choice(t, size=n, replace=False).tolist())
                    keep[b, :n] = torch.tensor(chosen, dtype=torch.long)
                    ref[b] += [(kv[:, :, b, :, j], feats[b, j]) for j in chosen]
                cache.commit(keep, torch.tensor(counts), feats)
        _check(cache, ref)
    assert grew > 0  # the storage did have to grow


def test_writes_go_into_the_storage_in_place_until_it_is_full():
    gen = torch.Generator().manual_seed(0)
    cache = _new(2, gen, [])
    _append(cache, 5, gen)
    cache.commit(torch.arange(5).expand(2, 5), torch.tensor([5, 3]), torch.zeros(2, 5, FEAT, dtype=torch.float64))
    storage, capacity = cache.kv.data_ptr(), cache.capacity
    for _ in range(capacity - cache.width):  # plain steps: one slot per row, kept, into the same storage
        _append(cache, 1, gen)
        cache.commit(torch.zeros(2, 1, dtype=torch.long), torch.tensor([1, 1]), torch.zeros(2, 1, FEAT, dtype=torch.float64))
        assert cache.kv.data_ptr() == storage
    _append(cache, 1, gen)
    assert cache.kv.data_ptr() != storage and cache.capacity == capacity + max(GROW_SLOTS, capacity // 8)
