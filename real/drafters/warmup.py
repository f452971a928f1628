"""Offline drafter warm-up on a pretrained target's own generations on the word-problem task.

`collect` runs the target (plain decoding; greedy, or sampled at a run's temperature so the drafter learns
the text rollouts are made of) on training problems and keeps every sequence's tokens and the target's final
hidden states, which are what the EAGLE drafter regresses onto
(real.drafters.eagle). `draft_vocab` picks the `size` most frequent tokens of those sequences (EOS always
in): the drafter proposes among them only (EAGLE-3's reduced draft vocabulary), so a draft step's
head is a `size`-row slice of the target's lm_head instead of all of it; verification is untouched
and stays exact against the target's full distribution. `warm_up` fits a fresh drafter with that
vocabulary on the pairs. `real.tasks.evaluate.accepted_length` measures tokens per target call on held-out problems.
"""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from real.drafters import find_shipped_drafter, shipped_drafter  # noqa: F401  (scripts import them from here)
from real.engine.generate import generate
from real.drafters.eagle import Drafter, DrafterLoss
from real.tasks.evaluate import accepted_length
from real.models.hub import known_name
from real.settings import GenerateSettings, SamplingParams, WarmupSettings
from real.tasks.wordproblems import WordProblemTask
from tltsim.core.io import atomic_path

def collect(target, task: WordProblemTask, problems, batch: int = 16, max_new_tokens: int = 128,
            temperature: float | None = None, seed: int = 0, log=None):
    """(tokens long [L], features bf16 [L - 1, H]) per problem: prompt + the target's response, greedy, or
    sampled at `temperature` (each batch's generator seeded from `seed` and the batch's start)."""
    sampling = SamplingParams() if temperature is None else SamplingParams(greedy=False, temperature=temperature)
    pairs = []
    for start in range(0, len(problems), batch):
        chunk = problems[start: start + batch]
        gen = generate(target, [task.prompt_ids(p) for p in chunk],
                       settings=GenerateSettings(max_new_tokens=max_new_tokens, collect_features=True,
                                                 sampling=sampling, seed=seed * 1_000_003 + start))
        pairs += [(torch.tensor(f.prompt + f.tokens), f.features.to(torch.bfloat16)) for f in gen.finished]
        if log:
            log(f"collected {len(pairs)}/{len(problems)} sequences")
    return pairs


DATA_FORMAT = "tltsim-drafter-data-1"  # the `format` of collected answers (`tltsim real drafter --data`)


def save_pairs(pairs, path: str | Path, meta: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save({"format": DATA_FORMAT, "meta": meta, "pairs": pairs}, tmp)


def load_pairs(path: str | Path, meta: dict):
    """The pairs saved at `path` by `save_pairs` with the same `meta`, or None."""
    path = Path(path)
    if not path.is_file():
        return None
    payload = torch.load(path, weights_only=True)
    return payload["pairs"] if payload.get("meta") == meta else None


def draft_vocab(pairs, size: int, eos: list[int]) -> torch.Tensor:
    """The `size` most frequent tokens of the pairs' sequences (ties by id), EOS ids included; sorted."""
    counts = Counter()
    for tokens, _ in pairs:
        counts.update(tokens.tolist())
    keep = set(eos)
    for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(keep) >= size:
            break
        keep.add(tok)
    return torch.tensor(sorted(keep), dtype=torch.long)


def coverage(pairs, vocab: torch.Tensor) -> float:
    """Share of the pairs' response and prompt tokens that lie in `vocab`."""
    allowed = set(vocab.tolist())
    tokens = [t for seq, _ in pairs for t in seq.tolist()]
    return sum(t in allowed for t in tokens) / max(len(tokens), 1)


def warm_up(target, pairs, vocab: torch.Tensor | None, steps: int, batch_size: int = 8, lr: float = 3e-3,
            seed: int = 0, unroll: int = 1, init: Drafter | None = None, log=None) -> tuple[Drafter, list[float]]:
    """A drafter with draft vocabulary `vocab`, fitted on the pairs with `unroll` passes of the training-time test
    (real.drafters.eagle.DrafterLoss); returns it and its losses. It starts fresh (seeded), or from the trained weights
    of the drafter `init`: those are its input projection and layer, while its head is rows of the target's, so
    a drafter trained on other answers continues under this data's draft vocabulary."""
    dtype = next(target.parameters()).dtype
    drafter = Drafter.for_target(target, seed=seed, draft_vocab=vocab)
    if init is not None:
        trained = {k: v for k, v in init.state_dict().items() if k != "draft_vocab"}
        missing = drafter.load_state_dict(trained, strict=False).missing_keys
        assert set(missing) <= {"draft_vocab"}, missing  # the trained part is the same shape for one target
    losses = drafter.fit([(t, f.to(dtype)) for t, f in pairs], steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                         weights=DrafterLoss(unroll=unroll), log=log)
    return drafter, losses


def heldout_tokens_per_call(target, drafter, task, problems: int, seed: int, max_new_tokens: int) -> float:
    """The drafter's tokens per target call on `problems` held-out problems (the task's test split drawn with
    `seed` + 1; greedy, chain 4_1_4, batch 8): what a checkpoint records as `heldout_tokens_per_call_4_1_4`."""
    test = task.sample(np.random.default_rng(seed + 1), problems, split="test")
    return accepted_length(target, drafter, task, test, max_new_tokens=max_new_tokens, batch=8)


def make_drafter(model: str, out: str | Path, settings: WarmupSettings = WarmupSettings(),
                 data: str | Path | None = None, command: str = "", log=print) -> dict:
    """Collect (or reuse `data`), pick the draft vocabulary, warm up, measure on held-out problems, and save
    the drafter at `out` in bf16 with its provenance; returns that provenance."""
    from real.models.targets import default_eos, load_target, load_task

    s = settings
    t0 = time.perf_counter()
    meta = {"model": known_name(model) or str(model), "task": s.task, "problems": s.problems, "seed": s.seed,
            "max_new_tokens": s.max_new_tokens, "batch": s.collect_batch, "dtype": s.dtype}
    if s.temperature is not None:  # greedy collections' meta as before, so their --data files still match
        meta["temperature"] = s.temperature
    target, task = load_target(model, dtype=s.dtype), load_task(model, s.task)
    init = Drafter.load(s.init, target) if s.init else None  # a bad --init fails here, before the collection
    pairs = load_pairs(data, meta) if data else None
    if pairs is None:
        train = task.sample(np.random.default_rng(s.seed), s.problems, split="train")
        pairs = collect(target, task, train, batch=s.collect_batch, max_new_tokens=s.max_new_tokens,
                        temperature=s.temperature, seed=s.seed, log=log)
        if data:
            save_pairs(pairs, data, meta)
    t1 = time.perf_counter()
    eos = default_eos(target)
    ids = draft_vocab(pairs, s.vocab, [eos] if isinstance(eos, int) else list(eos or []))
    drafter, losses = warm_up(target, pairs, ids, s.steps, s.batch_size, s.lr, s.seed, s.unroll, init,
                              log=lambda step, loss: log(f"step {step}/{s.steps} loss {loss:.3f}") if step % 25 == 0 else None)
    t2 = time.perf_counter()
    provenance = {**meta, "tokens": int(sum(len(t) for t, _ in pairs)), "draft_vocab": len(ids),
                  "draft_vocab_coverage": round(coverage(pairs, ids), 4), "init": s.init, "steps": s.steps,
                  "unroll": s.unroll, "batch_size": s.batch_size, "lr": s.lr, "final_loss": round(float(np.mean(losses[-20:])), 4),
                  "heldout_problems": s.heldout, "heldout_tokens_per_call_4_1_4":
                      round(heldout_tokens_per_call(target, drafter, task, s.heldout, s.seed, s.max_new_tokens), 3),
                  "collect_s": round(t1 - t0, 1), "train_s": round(t2 - t1, 1), "command": command}
    drafter.save(out, dtype=torch.bfloat16, meta=provenance)
    return provenance
