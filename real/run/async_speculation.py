"""A rollout worker's speculation in an asynchronous run (`--policy async+tlt` and the others of
real.run.config.ASYNC_POLICIES), as the simulator plays it (tltsim/sim/async_loop.py): the engine's decisions are
the policy layer's `EngineControl` (switch, tuner, guard), the switch starting over at every weight update; the
drafter is the variant's (a trained one: --drafter, the shipped one or one warmed up on the target's answers;
tlt-base: prompt lookup); and where the variant spot-trains, the worker trains its drafter on its own finished
responses while the staleness gate keeps it waiting, until the trainer's next update. Each rollout worker keeps its
drafter to itself: the trainer holds none, so nothing averages the copies or shares their data.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from real import drafters
from real.drafters.ngram import NgramDrafter
from real.run.config import RunConfig
from real.run.drafting import given_drafter, spot_lr, warmed_up_drafter
from real.run.problems import mixed_seed
from real.run.spot import SampleBuffer, SpotTraining
from real.settings import SamplingParams
from tltsim.control.decisions import DecisionKnobs



class RolloutSpeculation:
    """One rollout worker's decisions, drafter and spot training across the run (module docstring)."""

    def __init__(self, config: RunConfig, knobs: DecisionKnobs, target, task, sampling: SamplingParams, rank: int,
                 worker: int, store, out: Path, ckpt: Path | None, state: dict):
        self.config, self.rank, self.store = config, rank, store
        self.control = knobs.control(worker, config.seed)
        given = given_drafter(config, target) if knobs.drafter != "ngram" and ckpt is None else None
        param = next(target.parameters())
        self.spot = SpotTraining(rank, 1, store, SampleBuffer(knobs.buffer_steps, knobs.keep_long_prev),
                                 spot_lr(config), config.drafter_batch, out, param.device, param.dtype,
                                 target.config.hidden_size) if knobs.spot else None
        if knobs.drafter == "ngram":  # each row's own text: nothing to warm up, train or keep
            self.drafter, self.trained = NgramDrafter(), None
        elif ckpt is not None:
            self.trained = drafters.load(ckpt / f"drafter{rank}.pt", target)
        elif given is not None:
            self.trained = given
        else:  # warmed up here; its answers are spot training's first data (step -1)
            self.trained, pairs = warmed_up_drafter(config, target, task, sampling)
            if self.spot:
                self.spot.buffer.add(-1, [(t, f.cpu()) for t, f in pairs])
        if self.trained is not None:
            self.drafter = self.trained.eval()
            if self.spot:
                self.spot.drafter = self.trained
        if state:
            self.control.load_state_dict(state["control"])
            if self.spot:
                self.spot.buffer.load_state_dict(state["buffer"])
                self.spot.opt_state = state["drafter_opt"]

    @property
    def collects_features(self) -> bool:
        """Whether the engine keeps its rows' target features (spot training's data)."""
        return self.spot is not None

    def begin(self) -> None:
        """A policy version's rollout begins on the engine: its switch starts over."""
        self.control.begin_rollout()

    def finished(self, version: int, engine) -> None:
        """The rows `engine` finished under `version`: spot training's data."""
        if self.spot:
            self.spot.buffer.add(version, [(torch.tensor(f.prompt + f.tokens), f.features.cpu())
                                           for f in engine.finished.values()])

    def wait(self, version: int, update: str, since: float, clock) -> tuple[list[tuple[str, float, float]], int] | None:
        """Nothing to decode from `since` until the store holds `update`: spot training the drafter (None where the
        variant does not spot-train: the worker idles). (The wait's timeline phases, the batches trained.)"""
        if self.spot is None:
            return None
        go = f"async/train/{version}/{self.rank}"
        self.store.set(go, "1")  # no dispatcher: a waiting rollout worker trains at once
        rng = np.random.default_rng(mixed_seed(self.config.seed, version, self.rank, 7))
        began, batches = self.spot.train(version, go, update, lambda: None, clock, rng)
        end = clock()
        phases = [("idle", since, began), ("drafter_train", began, end)] if began is not None else []
        return [p for p in phases if p[2] > p[1]] or [("idle", since, end)], batches

    def updated(self) -> None:
        """New target weights arrived."""
        self.drafter.target_updated()

    def state_dict(self) -> dict:
        """What a resumed run needs (plain data and tensors); the trained drafter is `save`d beside it."""
        spot = self.spot
        return {"control": self.control.state_dict(),
                "buffer": spot.buffer.state_dict() if spot else None,
                "drafter_opt": (spot.opt.state_dict() if spot.opt else spot.opt_state) if spot else None}

    def save(self, directory: Path) -> None:
        """The trained drafter into a checkpoint directory (none for prompt lookup)."""
        if self.trained is not None:
            self.trained.save(directory / f"drafter{self.rank}.pt")
