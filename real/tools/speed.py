"""Plain vs speculative decoding of a model on its own tokenizer, per drafter: `tltsim real speed`.

For each batch size b, held-out word problems (through the model's chat template) are decoded plainly and
with each drafter, `rounds` times each, interleaved (plain, drafters, then the reverse order, ...) so that a
machine whose speed drifts slows all alike. With a group G (GRPO's), each prompt is decoded as G sibling
rows: a batch of b holds ceil(b / G) prompts' siblings, at most b rows at once (a finished row makes room for
the next sibling: below G, siblings run partly one after another), sampled at the temperature given. Each
generation gets a fresh drafter from its factory, so a drafter with a history (real.drafters.suffix) starts without one.

A row per (batch, mode, drafter) reports tokens per second (generated tokens over the decode iterations'
wall time: prefill is the same work every way and is left out), the speedup over plain at that batch size (the
ratio of the medians over rounds), tokens per target call (accepted drafts + 1, averaged over rows and
iterations; 1 for plain), whether the speculative output is token-identical to the plain one (greedy only;
None when sampling, where outputs differ by their random draws and only their distribution is kept), and the
per-iteration breakdown: drafter (catch-up and lookup included), target forward, and the rest.
`by_sibling` gives tokens per call by a row's position among its prompt's siblings (real.drafters.suffix's inputs).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from real.engine.generate import Engine
from real.settings import SpeedSettings
from real.tasks.wordproblems import WordProblemTask
from tltsim.core.errors import TltsimError

KEYS = ("batch", "mode", "drafter", "strategy", "tok_s", "speedup", "tokens_per_call", "identical", "iterations",
        "draft_ms", "target_ms", "overhead_ms")


def heldout_prompts(task: WordProblemTask, n: int, seed: int = 0) -> list[list[int]]:
    """Chat-template prompts of `n` held-out word problems."""
    return [task.prompt_ids(p) for p in task.sample(np.random.default_rng(seed), n, split="test")]


def rows_for(batch: int, group: int) -> list[tuple[int, int]]:
    """(prompt index, sibling) of the rows a batch decodes: ceil(batch / group) prompts, `group` siblings each."""
    return [(i, j) for i in range(math.ceil(batch / group)) for j in range(group)]


def decode(target, drafter, prompts: list[list[int]], rows: list[tuple[int, int]], running: int,
           settings: SpeedSettings, seed: int = 0):
    """Decode `rows` ((prompt index, sibling)) at most `running` at once, every iteration speculative with
    `drafter` (plain without). Returns (the engine, tokens per call of each row's iterations, by row)."""
    engine = Engine(target, drafter, sampling=settings.sampling, max_new_tokens=settings.max_new_tokens,
                    eos_token_id=settings.eos_token_id, seed=seed)
    mode = "decode" if drafter is None else "spec_decode"
    queue, row_of, per_call = list(rows), {}, defaultdict(list)
    while queue or engine.running:
        room = running - engine.running
        if room > 0 and queue:
            admitted, queue = queue[:room], queue[room:]
            row_of.update(zip(engine.add([prompts[i] for i, _ in admitted]), admitted))
        ids = list(engine.ids)
        it = engine.step(mode, settings.strategy)
        for rid, a in zip(ids, it.accepted):
            per_call[row_of[rid]].append(a + 1)
    return engine, row_of, per_call


def _summary(engine):
    """(tokens generated, decode seconds, iterations, draft s, target s) of an engine's iterations."""
    its = [it for it in engine.iterations if it.mode != "prefill"]
    return (sum(it.tokens for it in its), sum(it.wall_s for it in its), len(its), sum(it.draft_s for it in its),
            sum(it.target_s for it in its))


def measure(target, drafters: dict, prompts: list[list[int]], settings: SpeedSettings = SpeedSettings(),
            log=None) -> list[dict]:
    """The rows described in the module docstring, per batch size plain first, then `drafters` (name -> a
    factory returning a fresh drafter) in their order; a batch b decodes the first ceil(b / group) prompts."""
    s = settings
    if len(prompts) < math.ceil(max(s.batches) / s.group):
        raise TltsimError(f"speed: {len(prompts)} prompts for a batch of {max(s.batches)} in groups of {s.group}")
    out = []
    modes = [""] + list(drafters)
    for b in s.batches:
        rows = rows_for(b, s.group)
        runs, outputs, calls = defaultdict(list), {}, {}
        for r in range(s.rounds):
            for name in (modes if r % 2 == 0 else modes[::-1]):
                engine, row_of, per_call = decode(target, drafters[name]() if name else None, prompts, rows, b, s)
                by_row = {row_of[i]: f.tokens for i, f in engine.finished.items()}
                outputs.setdefault(name, [by_row[row] for row in rows])
                calls.setdefault(name, []).extend(x for row in rows for x in per_call[row])
                runs[name].append(_summary(engine))
        tok_s = {m: float(np.median([n / sec for n, sec, *_ in v])) for m, v in runs.items()}
        for name in modes:
            n, secs, iters, draft, tgt = (float(np.sum([x[i] for x in runs[name]])) for i in range(5))
            spec = name != ""
            out.append({"batch": b, "mode": "spec_decode" if spec else "decode", "drafter": name,
                        "strategy": s.strategy if spec else "", "tok_s": round(tok_s[name], 2),
                        "speedup": round(tok_s[name] / tok_s[""], 3),
                        "tokens_per_call": round(float(np.mean(calls[name])), 3) if spec else 1.0,
                        "identical": (outputs[name] == outputs[""]) if s.temperature is None else None,
                        "iterations": int(iters / s.rounds), "draft_ms": round(1e3 * draft / iters, 2),
                        "target_ms": round(1e3 * tgt / iters, 2),
                        "overhead_ms": round(1e3 * (secs - draft - tgt) / iters, 2)})
            if log:
                log(out[-1])
    return out


def by_sibling(per_call: dict) -> dict[int, float]:
    """Mean tokens per call by sibling position, from `decode`'s per-row lists."""
    pooled = defaultdict(list)
    for (_, j), values in per_call.items():
        pooled[j] += values
    return {j: float(np.mean(v)) for j, v in sorted(pooled.items())}


def table(rows: list[dict]) -> str:
    """The rows as an aligned text table."""
    import pandas as pd

    return pd.DataFrame(rows, columns=KEYS).to_string(index=False)
