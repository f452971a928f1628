"""Measure what the simulator's cost model needs, on this device, with the real engine.

Rows of the profile (a CSV that `tltsim.cost.profiled.Profiled.fit` reads):

    kind            what was timed                                   keys
    prefill         Engine.add of `batch` prompts                     batch, tokens, sq_tokens
    decode          one plain iteration                               batch, context
    spec            one speculative iteration (drafting + verify)     batch, context, depth, topk, verify
    train           forward + backward + AdamW step of the target     tokens
    logprob         forward of the target (log-probs, no grad)        tokens
    drafter_train   Drafter.train_step on (tokens, features) pairs    tokens

Engine calls are timed as a run records them: through the rollout loop (real.adaptive.rollout),
from the end of one call to the end of the next, so the loop's own work between calls is in the
time as it is in a run's timeline. `context` is the KV tokens of the whole batch when the
iteration starts; every row's time is `seconds` (one measurement; repeats are separate rows).
The engine runs with no end-of-sequence token, so the batch stays whole while it is timed.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from real.adaptive import rollout
from real.drafter import Drafter
from real.generate import Engine
from tltsim.policy import FixedTuner, SDSwitch
from tltsim.policy.strategy import DEFAULT_ARMS, Strategy

COLUMNS = ["kind", "batch", "context", "tokens", "sq_tokens", "depth", "topk", "verify", "seconds"]


def profile(target, drafter=None, *, batches=(1, 2, 4, 8, 16), contexts=(32, 128, 256),
            strategies=tuple(str(s) for s in DEFAULT_ARMS) + ("4_1_4",), repeats: int = 3,
            train_tokens=(256, 1024, 4096), seed: int = 0, progress=None) -> pd.DataFrame:
    """Time the engine's iterations over a grid; returns a DataFrame with COLUMNS."""
    rng = np.random.default_rng(seed)
    drafter = drafter or Drafter.for_target(target, seed=seed)
    vocab = target.get_output_embeddings().weight.shape[0]
    rows: list[dict] = []
    grid = [(b, c) for b in batches for c in contexts]
    for i, (b, c) in enumerate(grid):
        prompts = rng.integers(3, vocab, size=(b, c)).tolist()
        # plain: a warm-up iteration, then `repeats` timed ones
        calls = _rollout(target, drafter, prompts, repeats + 1, None, seed)
        rows.append(_row("prefill", b, tokens=b * (c - 1), sq_tokens=b * (c - 1) ** 2, seconds=calls[0][2]))
        rows += [_row("decode", b, context=ctx, seconds=sec) for _, ctx, sec in calls[2:]]
        for name in strategies:
            s = Strategy.parse(name)
            # the first speculative iteration builds the drafter's state (the switch), not a steady-state step
            calls = _rollout(target, drafter, prompts, repeats + 1, name, seed)
            rows += [_row("spec", b, context=ctx, depth=s.depth, topk=s.topk, verify=s.verify, seconds=sec)
                     for _, ctx, sec in calls[2:]]
        if progress:
            progress(i + 1, len(grid))
    rows += _time_training(target, drafter, train_tokens, repeats, rng)
    return pd.DataFrame(rows, columns=COLUMNS)


def _rollout(target, drafter, prompts, iterations: int, strategy: str | None, seed: int) -> list[tuple[str, int, float]]:
    """Prefill `prompts` and run `iterations` decode iterations (speculative with `strategy`) through the
    rollout loop; returns (mode, batch context tokens at the call's start, seconds) per call."""
    per_row = iterations * (Strategy.parse(strategy).depth + 1 if strategy else 1)
    engine = Engine(target, drafter, max_new_tokens=per_row, eos_token_id=[], seed=seed)
    switch, tuner = (SDSwitch("always"), FixedTuner(strategy)) if strategy else (None, None)
    steps = rollout(engine, prompts, time.perf_counter, switch, tuner).steps
    ctx = sum(len(p) for p in prompts)  # every row's tokens, the pending last one included
    out = []
    for st in steps[: iterations + 1]:
        out.append((st.mode, ctx, st.t_end - st.t_start))
        ctx += st.tokens if st.mode != "prefill" else 0
    return out


def _row(kind, batch=0, context=0, tokens=0, sq_tokens=0, depth=0, topk=0, verify=0, seconds=0.0) -> dict:
    return {"kind": kind, "batch": batch, "context": context, "tokens": tokens, "sq_tokens": sq_tokens,
            "depth": depth, "topk": topk, "verify": verify, "seconds": float(seconds)}


def _time_training(target, drafter, train_tokens, repeats, rng) -> list[dict]:
    """Target fwd+bwd+AdamW (GRPO's update), target forward (log-probs), drafter train step, per token count."""
    rows = []
    vocab = target.get_output_embeddings().weight.shape[0]
    seq = 128
    opt = torch.optim.AdamW(target.parameters(), lr=0.0)  # lr 0: time the step, leave the weights alone
    dopt = torch.optim.AdamW(drafter.parameters(), lr=0.0)
    hidden = target.config.hidden_size
    for n in train_tokens:
        batch = max(1, n // seq)
        x = torch.as_tensor(rng.integers(3, vocab, size=(batch, seq)), device=next(target.parameters()).device)
        for _ in range(repeats):
            start = time.perf_counter()
            target.train()
            loss = target(input_ids=x).logits.float().log_softmax(-1).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            target.eval()
            rows.append(_row("train", tokens=batch * seq, seconds=time.perf_counter() - start))
            start = time.perf_counter()
            with torch.no_grad():
                target(input_ids=x).logits.float().log_softmax(-1)
            rows.append(_row("logprob", tokens=batch * seq, seconds=time.perf_counter() - start))
            pairs = [(x[i], torch.randn(seq - 1, hidden, dtype=next(target.parameters()).dtype)) for i in range(batch)]
            start = time.perf_counter()
            drafter.train_step(pairs, dopt)
            rows.append(_row("drafter_train", tokens=batch * seq, seconds=time.perf_counter() - start))
    drafter.eval()
    return rows
