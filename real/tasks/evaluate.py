"""Accuracy and response lengths of a target on task problems, with transformers' `generate`; a drafter's
accepted length with a target.

Greedy: one response per problem. Sampled: `samples` responses per problem (a
GRPO group), from which `mixed_fraction` says how often a group holds both right
and wrong answers, i.e. how often GRPO would get a non-zero advantage.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from real.engine.generate import DEFAULT_STRATEGY, generate
from real.settings import GenerateSettings
from tltsim.core.errors import TltsimError
from real.tasks.gcd import GcdTask, Problem


@dataclass
class EvalResult:
    rewards: np.ndarray  # (problems, samples) reward of each response
    lengths: np.ndarray  # (problems, samples) response tokens, eos included

    @property
    def accuracy(self) -> float:
        return float(self.rewards.mean())

    @property
    def mixed_fraction(self) -> float:
        """Share of problems whose responses are neither all right nor all wrong (0 when samples == 1)."""
        per_problem = self.rewards.mean(axis=1)
        return float(((per_problem > 0) & (per_problem < 1)).mean())

    def length_stats(self) -> dict:
        x = self.lengths.ravel()
        return {"median": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                "p99": float(np.percentile(x, 99)), "max": int(x.max())}

    def summary(self) -> dict:
        return {"problems": self.rewards.shape[0], "samples": self.rewards.shape[1], "accuracy": self.accuracy,
                "mixed_fraction": self.mixed_fraction, "length": self.length_stats()}


@torch.no_grad()
def evaluate(model, task: GcdTask, problems: list[Problem], greedy: bool = True, temperature: float = 1.0,
             samples: int = 1, batch_size: int = 64, max_new_tokens: int | None = None, seed: int = 0) -> EvalResult:
    """Generate `samples` responses per problem (batched, left-padded) and score them.

    Sampling draws from a torch RNG seeded by `seed` inside a forked RNG state, so
    results repeat and the global RNG is left as it was.
    """
    tok = task.tokenizer
    max_new = max_new_tokens or task.max_response_tokens
    device = next(model.parameters()).device
    prompts = [task.prompt_ids(p) for p in problems for _ in range(samples)]
    responses: list[list[int]] = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            width = max(map(len, chunk))
            ids = torch.tensor([[tok.pad_id] * (width - len(p)) + p for p in chunk], device=device)
            out = model.generate(
                input_ids=ids, attention_mask=(ids != tok.pad_id).long(), max_new_tokens=max_new,
                do_sample=not greedy, temperature=temperature if not greedy else None, top_p=None, top_k=None,
                pad_token_id=tok.pad_id, eos_token_id=tok.eos_id,
            )
            for row in out[:, width:].tolist():
                responses.append(row[: row.index(tok.eos_id) + 1] if tok.eos_id in row else row)
    rewards = np.array([task.reward(problems[i // samples], r) for i, r in enumerate(responses)])
    lengths = np.array([len(r) for r in responses])
    return EvalResult(rewards.reshape(len(problems), samples), lengths.reshape(len(problems), samples))


@torch.no_grad()
def accepted_tokens(target, drafter, task, problems: list, strategy: str = DEFAULT_STRATEGY,
                    max_new_tokens: int | None = None, batch: int | None = None) -> np.ndarray:
    """Tokens per row of every speculative iteration (accepted drafts + the target's own) when `target` decodes
    `problems` of `task` (any task with prompt_ids and max_response_tokens) greedily with `drafter` and `strategy`
    on every iteration, `batch` prompts at a time (None: all at once); empty for no problems."""
    out: list[float] = []
    step = batch or max(len(problems), 1)
    for start in range(0, len(problems), step):
        gen = generate(target, [task.prompt_ids(p) for p in problems[start: start + step]], drafter,
                       GenerateSettings(strategy=strategy, max_new_tokens=max_new_tokens or task.max_response_tokens),
                       tools=getattr(task, "tools", None))  # a task with a tool: its rows call it
        out += [a + 1 for it in gen.iterations if it.mode == "spec_decode" for a in it.accepted]
    return np.array(out, dtype=float)


def accepted_length(target, drafter, task, problems: list, strategy: str = DEFAULT_STRATEGY,
                    max_new_tokens: int | None = None, batch: int | None = None) -> float:
    """Mean of `accepted_tokens`: the drafter's mean accepted length (bonus token included); TltsimError for no
    problems."""
    if not problems:
        raise TltsimError("accepted_length: no problems")
    return float(np.mean(accepted_tokens(target, drafter, task, problems, strategy, max_new_tokens, batch)))


@torch.no_grad()
def token_kl(start, current, sequences: list[tuple[list[int], list[int]]]) -> float:
    """How far a target moved: the mean over the response positions of `sequences` (prompt, response) of
    KL(start's next-token distribution || current's), in nats a token; >= 0, and 0 for an unmoved target."""
    total, n = 0.0, 0
    for prompt, response in sequences:
        ids = torch.tensor([prompt + response], device=next(start.parameters()).device)
        at = slice(len(prompt) - 1, len(prompt) + len(response) - 1)  # the positions that predict the response
        p = torch.log_softmax(start(ids).logits[0, at].double(), -1)
        q = torch.log_softmax(current(ids.to(next(current.parameters()).device)).logits[0, at].double(), -1)
        total += float((p.exp() * (p - q.to(p.device))).sum())
        n += len(response)
    return total / n
