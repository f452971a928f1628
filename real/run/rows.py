"""Which rows a worker's engine runs in a step, and what the worker trains on after it, per policy: verl's (its block
of whole groups, every row run to its end), longest-first's (placed by its history predictor: real/run/placement.py),
and those of the policies that draw from the prompt stream, partial's and tail-batching's (the worker's chunk of the
step's groups, the step stopped at its quota, unfinished rows carried or parked: real/run/stream.py). The worker's
step (real/run/worker.py) asks `share(step)` before its rollout and `trained(...)` after it; `state_dict` is the part
of the worker's checkpoint these decisions need (the predictor's history; the stream's position and the rows carried
or parked).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch.distributed as dist

from real.run.config import RunConfig
from real.run.grpo import group_advantages
from real.run.stream import PartialSteps, TailSteps, gathered, worker_rows
from real.run.placement import placed_rows
from real.run.problems import step_problems, stream_problem
from tltsim.control.placement import HistoryPredictor


@dataclass
class Share:
    """This worker's part of a step: the rows its engine runs ((prompt_id, sample) each), their problems and the
    prompts the engine is given (a resumed row's tokens so far end its prompt), their budgets (None: max_new_tokens
    each); `stop(engine)`, for a step that may stop before every row has finished, makes the rollout's `stop`;
    `runs`, the rows' indices among the step's rows (a step drawn from the prompt stream); `carried` and `admitted`,
    for rows that moved here mid-step (migrate)."""

    rows: list[tuple[int, int]]
    problems: list
    prompts: list[list[int]]
    budgets: list[int] | None = None
    stop: Callable | None = None
    runs: np.ndarray | None = None
    carried: list[list[int]] | None = None  # rows moved here mid-step: each row's tokens before (its prompt's end)
    admitted: list[float | None] | None = None  # ... and when it was first admitted (None: never before)


@dataclass
class Sample:
    """A response the step trains on."""

    prompt_id: int
    sample: int
    prompt: list[int]  # the prompt's token ids
    tokens: list[int]  # the response (with tools: their answers between the turns)
    generated: list[bool]  # per token: whether the model generated it
    reward: float
    admitted_at: float  # run clock (a row that finished in an earlier step: the step's start)
    finished_at: float
    turns: list = field(default_factory=list)  # real.engine.records.Turn, with tools


class StepRows:
    """One worker's rows, step by step (module docstring)."""

    def __init__(self, config: RunConfig, task, rank: int, world: int, store):
        self.config, self.task, self.rank, self.world, self.store = config, task, rank, world, store
        # longest-first: each prompt's earlier response lengths, every worker's (the same on every rank)
        self.predictor = HistoryPredictor() if config.placement() else None
        # partial, tail-batching: the prompt stream's position and the rows carried or parked
        partial, tail = config.partial(), config.tail_batching()
        self.stream = (PartialSteps(partial, config.prompts, config.group, config.max_new_tokens) if partial else
                       TailSteps(tail, config.prompts, config.group, config.max_new_tokens) if tail else None)
        self.rows: dict = {}  # such a step's rows (every worker's), as the stream's `begin` made them

    def share(self, step: int) -> Share:
        """This worker's rows of step `step`, in the order its engine admits them."""
        if self.stream:
            return self._stream_share(step)
        cfg = self.config
        problems = step_problems(self.task, cfg.seed, step, cfg.prompts, cfg.repeat_prompts)
        rows = placed_rows(cfg.prompts, cfg.group, self.world, self.predictor)[self.rank]
        mine = [problems[pid] for pid, _ in rows]
        return Share(rows, mine, [self.task.prompt_ids(p) for p in mine])

    def trained(self, step: int, parts: list, t0: float, samples: list[Sample] | None = None) \
            -> tuple[list[Sample], np.ndarray, dict]:
        """After the step's rollout (`parts`: (Share, its engine, real.engine.adaptive.Rollout) for each rollout this
        worker ran, begun at `t0`): this worker's samples the step trains on, their GRPO advantages and the step's
        columns of the policy. `samples`: `samples(parts)` where the caller made them already (their rewards
        scored); a streamed policy's rows come from its stream, not from them."""
        if self.stream:
            return self._stream_trained(step, *parts[0], t0)
        samples = self.samples(parts) if samples is None else samples
        return samples, self._advantages(samples), {}

    def samples(self, parts: list) -> list[Sample]:
        """The rows this worker's rollouts (`trained`'s `parts`) finished, as samples: whole responses (a row moved
        here: its tokens from before the move first), in the order they were given."""
        out = []
        for share, engine, ro in parts:
            for r, ((pid, j), problem, prompt) in enumerate(zip(share.rows, share.problems, share.prompts)):
                i = ro.ids[r] if r < len(ro.ids) else None
                if i not in engine.finished:
                    continue  # moved to another worker
                f, before = engine.finished[i], share.carried[r] if share.carried else []
                tokens = list(before) + f.tokens
                out.append(Sample(pid, j, prompt[:len(prompt) - len(before)], tokens,
                                  [True] * len(before) + f.generated_mask(), self.task.reward(problem, tokens),
                                  share.admitted[r] if share.admitted and share.admitted[r] is not None
                                  else ro.admitted_at[i], ro.finished_at[i], f.turns))
        return out

    def _advantages(self, samples: list[Sample]) -> np.ndarray:
        """This worker's samples' GRPO advantages, each its group's over every worker's rewards (a group's rows may be
        placed on several workers); longest-first's predictor observes every row's length, in (prompt, sample)
        order, so every rank's is the same."""
        cfg = self.config
        everyone = [None] * self.world
        dist.all_gather_object(everyone, [(x.prompt_id, x.sample, x.reward, sum(x.generated)) for x in samples])
        done = sorted(row for part in everyone for row in part)
        table = np.zeros((cfg.prompts, cfg.group))
        for pid, j, r, _ in done:
            table[pid, j] = r
        if self.predictor:
            self.predictor.observe(np.array([pid for pid, *_ in done]), np.array([n for *_, n in done]))
        advantages = group_advantages(table)
        return np.array([advantages[x.prompt_id, x.sample] for x in samples])

    def _problem(self, k: int):
        cfg = self.config
        return stream_problem(self.task, cfg.seed, cfg.prompts, k, cfg.repeat_prompts)

    def _stream_share(self, step: int) -> Share:
        """This worker's rows of a partial or tail-batching step, carried rows resumed with their tokens so far at the
        end of their prompts; its engine stops once the step's quota of groups has finished on every worker (but in
        a long round)."""
        rows = self.rows = self.stream.begin(step, lambda k: len(self.task.prompt_ids(self._problem(k))))
        share, runs = worker_rows(rows, self.rank, self.world)
        quota = self.stream.quota(self.store, step, self.rank, self.world, rows, share)

        def stop(engine):
            def stopped() -> bool:  # a fresh engine's request ids are its prompts' indices
                quota.finished(runs[list(engine.finished)])
                return quota.stop()
            return stopped

        problems = [self._problem(int(k)) for k in rows["prompt_id"][runs]]
        return Share([(int(rows["prompt_id"][i]), int(rows["sample"][i])) for i in runs], problems,
                     [self.task.prompt_ids(p) + list(rows["tokens"][i]) for p, i in zip(problems, runs)],
                     rows["response_len"][runs].tolist(), stop if quota is not None else None, runs)

    def _stream_trained(self, step: int, share: Share, engine, ro, t0: float) -> tuple[list[Sample], np.ndarray, dict]:
        """Every worker's rows gathered; the groups finished on every worker trained on (the rest carried or dropped):
        this worker's trained samples are whole responses, the tokens carried from earlier steps first."""
        rows, left = self.rows, engine.in_progress()
        mine = [(int(i), r in engine.finished, engine.finished[r].tokens if r in engine.finished else left.get(r, []),
                 ro.admitted_at.get(r, t0), ro.finished_at.get(r, t0)) for r, i in enumerate(share.runs)]
        everyone = [None] * self.world
        dist.all_gather_object(everyone, mine)
        finished, new, times = gathered(rows, everyone)
        trained, columns = self.stream.end(step, rows, finished, new)
        order = np.flatnonzero(trained)  # every trained row, in group order (a group's rows are adjacent)
        problems = {i: self._problem(int(rows["prompt_id"][i])) for i in order}
        rewards = [self.task.reward(problems[i], list(rows["tokens"][i])) for i in order]
        advantages = group_advantages(np.reshape(rewards, (-1, self.config.group))).reshape(-1)
        ours = set(worker_rows(rows, self.rank, self.world)[0].tolist())
        picked = [(Sample(int(rows["prompt_id"][i]), int(rows["sample"][i]), self.task.prompt_ids(problems[i]),
                          list(rows["tokens"][i]), [True] * len(rows["tokens"][i]), r, *times.get(i, (t0, t0))), a)
                  for i, r, a in zip(order, rewards, advantages) if i in ours]
        return [x for x, _ in picked], np.array([a for _, a in picked]), columns

    def state_dict(self) -> dict:
        return {"placement": self.predictor.state_dict() if self.predictor else None,
                "stream": self.stream.state_dict() if self.stream else None}

    def load_state_dict(self, state: dict) -> None:
        if self.predictor:
            self.predictor.load_state_dict(state["placement"])
        if self.stream:
            self.stream.load_state_dict(state["stream"])
