"""Plain vs speculative decoding of a model on its own tokenizer: `tltsim real speed`.

For each batch size, the same held-out word problems (through the model's chat template) are decoded
greedily, plainly and speculatively, `rounds` times each, interleaved (plain, spec, spec, plain, ...)
so that a machine whose speed drifts slows both alike. A row per (batch, mode) reports tokens per
second (generated tokens over the decode iterations' wall time: prefill is the same work either way
and is left out), the speedup over plain at that batch size (the ratio of the medians over rounds),
tokens per target call (accepted drafts + 1, averaged over rows and iterations; 1 for plain), whether
the speculative output is token-identical to the plain one, and the per-iteration breakdown: drafter
(catch-up included), target forward, and the rest (verification, bookkeeping).
"""
from __future__ import annotations

import numpy as np

from real.generate import generate
from real.settings import GenerateSettings
from real.wordproblems import WordProblemTask
from tltsim.errors import TltsimError

KEYS = ("batch", "mode", "strategy", "tok_s", "speedup", "tokens_per_call", "identical", "iterations",
        "draft_ms", "target_ms", "overhead_ms")


def _decode(gen):
    """(tokens generated, decode seconds, iterations, draft s, target s, tokens per call) of a Generation."""
    its = [it for it in gen.iterations if it.mode != "prefill"]
    per_call = [a + 1 for it in its for a in it.accepted] if any(it.mode == "spec_decode" for it in its) else [1]
    return (sum(map(len, gen.tokens)), sum(it.wall_s for it in its), len(its), sum(it.draft_s for it in its),
            sum(it.target_s for it in its), float(np.mean(per_call)))


def heldout_prompts(task: WordProblemTask, n: int, seed: int = 0) -> list[list[int]]:
    """Chat-template prompts of `n` held-out word problems."""
    return [task.prompt_ids(p) for p in task.sample(np.random.default_rng(seed), n, split="test")]


def measure(target, drafter, prompts: list[list[int]], batches=(1, 4, 16), strategy: str = "4_1_4",
            max_new_tokens: int = 64, rounds: int = 3, eos_token_id=None, log=None) -> list[dict]:
    """The rows described in the module docstring, two per batch size (plain first); batch b decodes the
    first b prompts (token-id lists; at least max(batches) of them). `eos_token_id`: as in real.generate."""
    if len(prompts) < max(batches):
        raise TltsimError(f"speed: {len(prompts)} prompts for a batch of {max(batches)}")
    rows = []
    for b in batches:
        prompts_b = prompts[:b]
        runs = {"decode": [], "spec_decode": []}
        outputs = {}
        for r in range(rounds):
            for mode in (("decode", "spec_decode") if r % 2 == 0 else ("spec_decode", "decode")):
                gen = generate(target, prompts_b, drafter if mode == "spec_decode" else None,
                               GenerateSettings(strategy=strategy, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id))
                outputs.setdefault(mode, gen.tokens)
                runs[mode].append(_decode(gen))
        tok_s = {m: float(np.median([n / s for n, s, *_ in v])) for m, v in runs.items()}
        for mode, v in runs.items():
            n, secs, iters, draft, tgt, per_call = (float(np.sum([x[i] for x in v])) for i in range(6))
            row = {"batch": b, "mode": mode, "strategy": strategy if mode == "spec_decode" else "",
                   "tok_s": round(tok_s[mode], 2), "speedup": round(tok_s[mode] / tok_s["decode"], 3),
                   "tokens_per_call": round(per_call / len(v), 3), "identical": outputs["spec_decode"] == outputs["decode"],
                   "iterations": int(iters / len(v)), "draft_ms": round(1e3 * draft / iters, 2),
                   "target_ms": round(1e3 * tgt / iters, 2), "overhead_ms": round(1e3 * (secs - draft - tgt) / iters, 2)}
            rows.append(row)
            if log:
                log(row)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as an aligned text table."""
    import pandas as pd

    return pd.DataFrame(rows, columns=KEYS).to_string(index=False)
