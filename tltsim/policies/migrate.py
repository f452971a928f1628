"""Tail migration (RLHFuse: Zhong et al., 2025, "Optimizing RLHF Training for Large Language Models
with Stage Fusion", NSDI '25).

When the step's unfinished responses fall to `remaining` x the step's responses
or fewer, every one still unfinished (running or waiting) moves onto the
`to_engines` engines that hold the most of them; moving costs a re-prefill of
each moved request's prompt and tokens so far (the target engines restart from
a prefill of every request they then hold, their own included: a slight
overcharge). The other engines are released at that moment:

    idle        they wait for the barrier (frees GPUs for another job; no speed-up for this one)
    next-stage  they start the next stage early: the reference/old-policy log-prob forwards of the
                responses already finished (RLHFuse's inter-stage fusion), shortening the reward stage
    drafter     they train TLT's drafter (`migrate+tlt`): the spot trainer harvests them

Defaults: `remaining = 0.02` and `to_engines = 2` are our choices (RLHFuse picks the
migration point and the number of kept instances from its cost model; on the shipped
DAPO-like trace at 64 GPUs, TP 4, these beat 0.1 / 1 and 0.05 / 2, which lengthen the
rollout by more than the fusion saves); `release = "next-stage"` is RLHFuse's fusion.
On-policy: nothing is stopped or carried.

The decisions (when the tail moves, onto which engines, which rows go where, how long the released engines run
the next stage) are tltsim.control.migration's, which a real executor drives too; this module is the simulator's
glue: it cuts and appends the engines' rollouts and prices the next stage's work.
"""
from __future__ import annotations

import numpy as np

from tltsim.control.migration import MigrateKnobs, MigrationControl, next_stage_span
from tltsim.core.errors import TltsimError
from tltsim.core.padding import padded_tokens
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.hooks import StepOutcome
from tltsim.sim.rollout import StepRollout, truncate


class Migrate(KnobbedPolicy):
    """The simulator's glue around tltsim.control's `MigrationControl`, which decides."""

    name = "migrate"
    multi_turn = False  # moves requests on the single-turn token clock
    Knobs = MigrateKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.control = MigrationControl(self.k)
        if self.k.release == "drafter" and not getattr(sim.policy, "trains_drafter", False):
            raise TltsimError(f"policy {sim.policy.name!r}: release = 'drafter' needs a drafter to train; "
                              f"use migrate+tlt, or release = 'next-stage' or 'idle'")

    def begin_step(self, step: int, t: float) -> None:
        self.t0 = t

    def rollout(self, step, df, shares, run) -> StepRollout:
        n = len(df["step"])
        full = {e: (rows, run(e, df["prompt_len"][rows], df["response_len"][rows], rows)) for e, rows in enumerate(shares)
                if len(rows)}
        finish = np.sort(np.concatenate([ro.finished_at for _, ro in full.values()])) if full else np.array([])
        self.at, self.moved, self.released = None, 0, []
        sr = StepRollout.empty(n)
        at = self.control.when(finish, n)
        if at is not None:
            targets = self.control.targets({e: int(np.sum(ro.finished_at > at)) for e, (_, ro) in full.items()})
            if targets is not None:
                self.at = at
                return self._migrate(df, full, targets, at, sr, run)
        for e, (rows, ro) in full.items():
            sr.add(e, rows, ro, df["response_len"][rows])
        return sr

    def _migrate(self, df, full, targets, at, sr, run) -> StepRollout:
        moving, got_all = [], []
        for e, (rows, ro) in full.items():
            cut, got = truncate(ro, at, df["response_len"][rows])
            sr.add(e, rows, cut, got)
            left = got < df["response_len"][rows]
            moving.append(rows[left])
            got_all.append(got[left])
        self.released = self.control.released(full, targets)
        rows, got = np.concatenate(moving), np.concatenate(got_all)
        self.moved = len(rows)
        for e, pos in self.control.assign(len(rows), targets).items():
            r, g = rows[pos], got[pos]
            if len(r):
                rest = df["response_len"][r] - g
                sr.add(e, r, run(e, df["prompt_len"][r] + g, rest, r), rest, offset=at)
        return sr

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        cols = {"migrated": self.moved, "migrate_at_s": np.nan if self.at is None else self.at,
                "released_engines": len(self.released)}
        if self.at is None or self.k.release != "next-stage":
            return StepOutcome(columns=cols)
        # log-prob forwards of the responses finished before the move, on the released GPUs, until the barrier
        done = sr.finished_at <= self.at
        tokens, sq = padded_tokens((df["prompt_len"] + df["response_len"])[done], self.sim.cfg.rl.micro_batch_tokens)
        gpus = self.sim.cfg.cluster.gpus
        work = float(self.sim.cost.logprob_time(tokens, gpus, sq_tokens=sq)) * gpus  # GPU-seconds
        tp = self.sim.cfg.cluster.tp
        t_at = self.t0 + self.at  # absolute time of the move
        span = next_stage_span(work, tp, len(self.released), t - t_at)
        spans = {e: ("reward", t_at, t_at + span) for e in self.released} if span > 0 else {}
        return StepOutcome(spans=spans, prework_gpu_s=span * tp * len(self.released), columns=cols)
