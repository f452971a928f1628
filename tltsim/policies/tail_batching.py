"""Tail batching (RollPacker: Gao et al., 2025, "RollPacker: Mitigating Long-Tail Rollouts for Fast,
Synchronous RL Post-Training").

Short rounds: launch `eta` x the prompt groups the step trains on, fresh from
the prompt stream (tltsim.policies.groups); when as many groups as the step
trains on have finished, abort the rest. The aborted responses' tokens are thrown
away (`dropped`) and their prompts are parked: prompts whose responses run long.
Long round: once the parked prompts fill a step's batch, or `long_every` short
rounds have passed with some parked, a step runs parked prompts (oldest first,
topped up with fresh ones) to completion, as verl would. Every sample is generated
by the policy that trains on it (staleness 0); the cost is a changed sample mix
(long prompts trained later, together) and the aborted work.

Defaults: RollPacker launches more prompts than a step needs in short rounds and
defers long-tail prompts to long rounds; `eta = 1.25` and `long_every = 4` are our
choices (with eta 1.25, a quarter of a batch is parked per short round, so four
short rounds fill one long round).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tltsim.sim.hooks import StepOutcome
from tltsim.policies.groups import concat, groups_in, rollout_until_groups, take_rows
from tltsim.control.knobs import knob
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.prompts import PromptStream


@dataclass(frozen=True)
class TailBatchingKnobs:
    eta: float = knob(1.25, lo=1.0, hi=16.0)  # prompt groups launched in a short round per group trained on
    long_every: int = knob(4, lo=1)  # a long round after at most this many short rounds with prompts parked


class TailBatching(KnobbedPolicy):
    name = "tail-batching"
    multi_turn = False  # stops a rollout on the single-turn token clock
    Knobs = TailBatchingKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.stream = PromptStream(sim.trace.df)
        self.parked: dict = {}
        self.short_rounds = 0  # since the last long round

    def prepare_step(self, step: int, df: dict) -> dict:
        self.need = groups_in(df)
        parked = groups_in(self.parked) if self.parked else 0
        self.long = parked >= self.need or (parked > 0 and self.short_rounds >= self.k.long_every)
        if self.long:
            ids = np.unique(self.parked["group"])[: self.need]  # oldest first: group ids grow in serving order
            run_now = np.isin(self.parked["group"], ids)
            out = concat([take_rows(self.parked, run_now), self.stream.take(self.need - len(ids), step)])
            out["origin"] = np.full(len(out["step"]), step)
            out["step"] = out["origin"]
            self.parked = take_rows(self.parked, ~run_now)
            return out
        return self.stream.take(max(self.need, math.ceil(self.k.eta * self.need - 1e-9)), step)

    def rollout(self, step, df, shares, run):
        if self.long:
            self.done = None
            return super().rollout(step, df, shares, run)
        sr, self.done = rollout_until_groups(df, shares, run, self.need)
        return sr

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        launched = groups_in(df)
        if self.long:
            self.short_rounds = 0
            return StepOutcome(columns=self._columns(True, launched))
        self.short_rounds += 1
        left = ~self.done
        self.parked = concat([self.parked, take_rows(df, left)])
        return StepOutcome(trained=self.done, dropped=int(np.sum(left & (sr.generated > 0))),
                           columns=self._columns(False, launched))

    def _columns(self, long: bool, launched: int) -> dict:
        return {"long_round": long, "launched_groups": launched,
                "parked_groups": groups_in(self.parked) if self.parked else 0}
