"""Tiny Llama / Qwen2 targets (grouped-query attention), their drafters and greedy references.

Two kinds of target per architecture: "random" (random weights: flat next-token distributions)
and "trained" (briefly trained on arithmetic progressions mod VOCAB: peaked, mostly predictable
distributions, so a trained drafter gets long runs accepted). float64 keeps greedy argmax ties out
of the way, so token-identity tests test the algorithm, not rounding. Everything is cached per
process: the tests share one target, reference and drafter per (architecture, kind).
"""
from __future__ import annotations

import copy
from functools import lru_cache

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from real.drafters.eagle import Drafter
from real.engine.generate import generate
from real.settings import GenerateSettings

VOCAB = 48
MAX_NEW = 24
# random targets: arbitrary prompts; trained targets: progressions (step, start, start + step, ...)
# with a slip in some, where the target's guess is less sure
PROMPTS = {
    "random": [[3, 1, 4, 1, 5], [9], [2, 6, 5, 3, 5, 8, 9, 7, 9], [4, 4], [11, 12, 13], [8, 1, 8, 2, 8, 4, 5]],
    "trained": [[2, 5, 7, 9], [3], [1, 40, 41, 42, 43, 44, 45], [5, 0, 5, 11], [4, 30], [3, 7, 10, 13, 17]],
}


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


@lru_cache(maxsize=None)
def trained_target(arch: str, steps: int = 150):
    """tiny_target(arch, seed=1) after `steps` AdamW steps on progressions mod VOCAB."""
    model = copy.deepcopy(tiny_target(arch, seed=1)).train()
    gen = torch.Generator().manual_seed(2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        step = torch.randint(1, 6, (16, 1), generator=gen)
        start = torch.randint(0, VOCAB, (16, 1), generator=gen)
        seq = torch.cat([step, (start + step * torch.arange(23)) % VOCAB], dim=1)
        loss = model(input_ids=seq, labels=seq).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def target(arch: str, kind: str):
    return tiny_target(arch) if kind == "random" else trained_target(arch)


def hf_greedy(model, prompts, max_new_tokens: int, eos: int | None) -> list[list[int]]:
    """transformers' own greedy `generate`, one prompt at a time, cut after the first EOS."""
    out = []
    for p in prompts:
        x = torch.tensor([p])  # an explicit mask: else generate would take token 0 (pad_token_id) for padding
        ids = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_new_tokens,
                             min_new_tokens=0, eos_token_id=eos, pad_token_id=0)[0, len(p):].tolist()
        out.append(ids[: ids.index(eos) + 1] if eos in ids else ids)
    return out


@lru_cache(maxsize=None)
def ragged_eos(arch: str, kind: str) -> int:
    """An EOS id that ends some rows early and at different steps and leaves others to run to MAX_NEW."""
    free = generate(target(arch, kind), PROMPTS[kind], settings=GenerateSettings(max_new_tokens=MAX_NEW, eos_token_id=())).tokens
    best, spread = None, -1
    for tok in range(VOCAB):
        firsts = {row.index(tok) for row in free if tok in row}
        hits = sum(tok in row for row in free)
        if 2 <= hits < len(free) and len(firsts) > spread:
            best, spread = tok, len(firsts)
    return best


@lru_cache(maxsize=None)
def reference(arch: str, kind: str) -> tuple[tuple[int, ...], ...]:
    """transformers' greedy output for PROMPTS[kind] with the ragged EOS."""
    return tuple(map(tuple, hf_greedy(target(arch, kind), PROMPTS[kind], MAX_NEW, ragged_eos(arch, kind))))


@lru_cache(maxsize=None)
def trained_drafter(arch: str, kind: str = "random", steps: int = 300):
    """A drafter fitted on the target's own greedy continuations of 64 seeded random prompts
    (progression prompts for the trained target)."""
    model = target(arch, kind)
    gen = torch.Generator().manual_seed(1)
    if kind == "random":
        prompts = [torch.randint(0, VOCAB, (int(n),), generator=gen).tolist()
                   for n in torch.randint(1, 8, (64,), generator=gen)]
    else:
        prompts = [[int(k)] + [(int(s) + int(k) * i) % VOCAB for i in range(int(n))]
                   for k, s, n in torch.stack([torch.randint(1, 6, (64,), generator=gen),
                                               torch.randint(0, VOCAB, (64,), generator=gen),
                                               torch.randint(0, 6, (64,), generator=gen)], dim=1)]
    run = generate(model, prompts, settings=GenerateSettings(max_new_tokens=40, eos_token_id=(), collect_features=True))
    pairs = [(f.prompt + f.tokens, f.features) for f in run.finished]
    drafter = Drafter.for_target(model, seed=0)
    drafter.fit(pairs, steps=steps, batch_size=8, lr=1e-2, seed=0)
    return drafter
