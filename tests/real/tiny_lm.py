"""Tiny random-weight Llama / Qwen2 targets (grouped-query attention) and references for the decoder tests.

float64 keeps greedy argmax ties out of the way, so token-identity tests test the algorithm, not
rounding. Everything is cached per process: the tests share one target, reference and drafter per
architecture.
"""
from __future__ import annotations

from functools import lru_cache

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import real

VOCAB = 48
PROMPTS = [[3, 1, 4, 1, 5], [9], [2, 6, 5, 3, 5, 8, 9, 7, 9], [4, 4], [11, 12, 13], [8, 1, 8, 2, 8, 4, 5]]
MAX_NEW = 24


@lru_cache(maxsize=None)
def tiny_target(arch: str = "llama", vocab: int = VOCAB, seed: int = 0):
    """A 2-layer target with 4 query and 2 key/value heads, random weights from `seed`."""
    kwargs = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, tie_word_embeddings=False)
    config = LlamaConfig(**kwargs) if arch == "llama" else Qwen2Config(**kwargs)
    model_cls = LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_cls(config)
    return model.to(torch.float64).eval()


def hf_greedy(model, prompts, max_new_tokens: int, eos: int | None) -> list[list[int]]:
    """transformers' own greedy `generate`, one prompt at a time, cut after the first EOS."""
    out = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=0,
                             eos_token_id=eos, pad_token_id=0)[0, len(p):].tolist()
        out.append(ids[: ids.index(eos) + 1] if eos in ids else ids)
    return out


@lru_cache(maxsize=None)
def ragged_eos(arch: str) -> int:
    """An EOS id that ends some rows early and at different steps and leaves others to run to MAX_NEW."""
    free = real.generate(tiny_target(arch), PROMPTS, max_new_tokens=MAX_NEW, eos_token_id=[]).tokens
    best, spread = None, -1
    for tok in range(VOCAB):
        firsts = {row.index(tok) for row in free if tok in row}
        hits = sum(tok in row for row in free)
        if 2 <= hits < len(free) and len(firsts) > spread:
            best, spread = tok, len(firsts)
    return best


@lru_cache(maxsize=None)
def reference(arch: str) -> tuple[tuple[int, ...], ...]:
    return tuple(map(tuple, hf_greedy(tiny_target(arch), PROMPTS, MAX_NEW, ragged_eos(arch))))


@lru_cache(maxsize=None)
def trained_drafter(arch: str, steps: int = 300):
    """A drafter fitted on the target's own greedy continuations of 64 seeded random prompts."""
    target = tiny_target(arch)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (int(n),), generator=gen).tolist()
               for n in torch.randint(1, 8, (64,), generator=gen)]
    run = real.generate(target, prompts, max_new_tokens=40, eos_token_id=[], collect_features=True)
    pairs = [(f_.prompt + f_.tokens, f_.features) for f_ in run.finished]
    drafter = real.Drafter.for_target(target, seed=0)
    drafter.fit(pairs, steps=steps, batch_size=8, lr=1e-2, seed=0)
    return drafter
