"""What a run measures before each step: how fast the machine runs (the speed probe of `tltsim validate --speed`;
a synchronous run's every rank at once, an asynchronous run's trainer alone) and how many tokens the policy's drafter
gets accepted on held-out prompts (every rank of a synchronous run at once)."""
from __future__ import annotations

import numpy as np
import torch

from real import drafters
from real.run.config import RunConfig
from real.run.grpo import all_reduce_tensors
from real.run.problems import mixed_seed
from real.settings import SamplingParams
from real.tasks.evaluate import accepted_tokens
from real.tools.profile import speed_probe


def machine_speed(config: RunConfig, target, sampling: SamplingParams, world: int, group=None) -> float:
    """Seconds of the speed probe's plain decode iteration (real.tools.profile.speed_probe), every rank of `group`
    (default: all; `world` of them) at once, averaged over them; NaN when off."""
    n = config.speed_probe
    if n == 0:
        return float("nan")
    seconds = speed_probe(target, n, mixed_seed(config.seed, 998), sampling)
    total = torch.tensor([seconds], dtype=torch.float64, device=next(target.parameters()).device)
    all_reduce_tensors([total], group)
    return float(total[0]) / world


def drafter_accepted(config: RunConfig, target, task, drafter: drafters.Drafting | None, rank: int,
                     world: int) -> float:
    """Mean accepted length (bonus included) of `drafter` with the current target, greedy, on fixed held-out prompts
    with a chain of DEFAULT_STRATEGY; NaN without a drafter. Every rank decodes its share of the prompts at once
    (none waits at the barrier while another probes, and more workers probe faster) and the counts are summed: a
    greedy row's tokens do not depend on its batch mates (but for floating-point near-ties), so the mean is the one
    a single process would measure."""
    if drafter is None or config.probe == 0:
        return float("nan")
    problems = task.sample(np.random.default_rng(mixed_seed(config.seed, 999)), config.probe, split="test")
    mine = [problems[i] for i in np.array_split(np.arange(len(problems)), world)[rank]]
    tokens = accepted_tokens(target, drafter, task, mine, max_new_tokens=config.max_new_tokens)
    total = torch.tensor([tokens.sum(), len(tokens)], dtype=torch.float64, device=next(target.parameters()).device)
    all_reduce_tensors([total])
    return float(total[0] / total[1])
