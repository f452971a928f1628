"""Attention for a few new tokens per row over a long KV cache: the rollout engine's decode and verify forwards.

transformers' SDPA path serves a grouped-query model's forward of T > 1 new tokens by copying every cached key and
value once per query head sharing it (`repeat_kv`, every layer, every forward), and CPU flash attention spends most
of a small forward's time in per-block overhead. A decode step (T = 1) or a verify (T = 3-13) reads a cache of
hundreds of slots per row with a handful of queries, which two batched matmuls and one softmax do directly: the
G = heads / kv_heads query heads that share a key/value head are folded into the query axis ([B, kv_heads, G * T,
D] against the cache's [B, kv_heads, S, D], nothing copied), scores are masked and normalised in float32 (or
float64), and the weighted values come back in the model's dtype. On a 2-core CPU in bfloat16 this takes a
verify's attention to under half of SDPA's time and a decode step's to about half
(benchmarks/results/bench_attention.txt, `python benchmarks/bench_attention.py`).

`use(model)` makes a transformers model take this path for forwards of at most FEW_QUERIES new tokens per row
without dropout; every other forward (a prefill, the trainer's log-probs, anything with gradients or dropout) goes
to transformers' SDPA as before, so training's memory and kernels do not change.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "tltsim_few_queries"
FEW_QUERIES = 16  # new tokens a row served here: a verify tree has up to 13 (4_4_12); SDPA serves longer forwards


def few_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                        scaling: float) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v for query [B, Hq, T, D] over key, value [B, Hkv, S, D] (Hq a multiple of
    Hkv; query head h reads key/value head h // (Hq / Hkv), as transformers' repeat_kv lays them out) under a
    mask [B, 1, T, S], additive (float) or what each query may see (bool), or None: every query sees every key.
    Returns [B, T, Hq, D], contiguous."""
    batch, heads, t, dim = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    keys, values = key.reshape(batch * kv_heads, slots, dim), value.reshape(batch * kv_heads, slots, dim)
    q = query.reshape(batch * kv_heads, groups * t, dim)
    exact = torch.promote_types(query.dtype, torch.float32)  # scores and softmax at least in float32
    scores = torch.bmm(q, keys.transpose(1, 2)).to(exact).mul_(scaling).view(batch, kv_heads, groups, t, slots)
    if mask is not None and mask.dtype == torch.bool:
        scores.masked_fill_(~mask[:, :, None], float("-inf"))
    elif mask is not None:
        scores.add_(mask[:, :, None])
    weights = torch.softmax(scores, dim=-1).to(value.dtype).view(batch * kv_heads, groups * t, slots)
    out = torch.bmm(weights, values).view(batch, kv_heads, groups, t, dim)
    return out.permute(0, 3, 1, 2, 4).contiguous().view(batch, t, heads, dim)


def attend_few(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
               scaling: float | None = None) -> torch.Tensor | None:
    """`few_query_attention` of query [B, Hq, T, D] over key, value [B, Hkv, S, D] (read in their whole buffers when
    they are a cache's slices of them) under mask [B, 1, T, S] (float or bool) or None, scaled by `scaling` (default
    D ** -0.5); None, for the caller's SDPA to serve, when T > FEW_QUERIES, a mask has other dims, T > 1 has no mask
    (a causal pattern), or gradients are on."""
    t = query.shape[2]
    if t > FEW_QUERIES or torch.is_grad_enabled() or (t > 1 if mask is None else mask.dim() != 4 or mask.shape[1] != 1):
        return None
    if mask is not None:
        mask = mask[..., : key.shape[2]]
    key, value, mask = _whole_buffers(key, value, mask, t)
    return few_query_attention(query, key, value, mask, query.shape[-1] ** -0.5 if scaling is None else scaling)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """An attention function of transformers' AttentionInterface: `attend_few` where it serves, without dropout or
    training; transformers' SDPA otherwise."""
    out = None
    if dropout == 0.0 and not module.training and kwargs.get("softcap") is None:
        out = attend_few(query, key, value, attention_mask, scaling)
    if out is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return out, None


def _whole_buffers(key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, t: int):
    """(key, value, mask) over the whole buffers that key and value [B, Hkv, S, D] are the first S slots of, the mask
    hiding the slots past S; as given when they are not such slices. A RaggedCache layer hands out its keys and
    values as slices of buffers with room to grow, which CPU matmul would copy whole before it multiplies (their rows
    are not S * D apart) but reads in place; the slots past S hold zeros or older keys, always finite."""
    slots = key.shape[2]
    whole_key, whole_value = _buffer(key), _buffer(value)
    if whole_key is None or whole_value is None or whole_key.shape[2] != whole_value.shape[2] \
            or whole_key.shape[2] == slots:
        return key, value, mask
    if mask is None:
        mask = torch.ones(1, 1, t, slots, dtype=torch.bool, device=key.device)
    hide = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
    mask = torch.cat([mask, mask.new_full((*mask.shape[:3], whole_key.shape[2] - slots), hide)], dim=3)
    return whole_key, whole_value, mask


def _buffer(x: torch.Tensor) -> torch.Tensor | None:
    """The [B, H, C, D] buffer whose first S slots per row x [B, H, S, D] is, as a view (C = S when x is
    contiguous); None when x is not laid out so, or the buffer would run past x's storage."""
    batch, heads, _, dim = x.shape
    row = x.stride(1)
    if x.stride(3) != 1 or x.stride(2) != dim or row % dim or x.stride(0) != heads * row:
        return None
    end = x.storage_offset() + (batch - 1) * x.stride(0) + heads * row
    if end * x.element_size() > x.untyped_storage().nbytes():
        return None
    return x.as_strided((batch, heads, row // dim, dim), x.stride())


def use(model) -> None:
    """Make `model` (a transformers model whose attention goes through AttentionInterface) use `attention_forward`,
    with SDPA's masks. Idempotent."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    if model.config._attn_implementation != NAME:
        model.set_attn_implementation(NAME)
