"""Spot training across worker processes: rank 0's dispatcher of train/stop orders, a worker's sample
buffer, the collective that shares the step's samples, and a worker's training itself (`SpotTraining`).

Every worker reports "done" through the process group's store when its rollout share ends; rank 0's
`SpotDispatcher` feeds the reports to the policy layer's `SpotTrainer` and answers with "train" (the
workers it names) and, when every worker is done, "stop". A training worker trains its drafter copy on
what its `SampleBuffer` (the policy layer's `DataBuffer` over (tokens, target features) pairs) selects.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from real.drafters.master_weights import MasterWeightAdamW
from real.run.grpo import all_reduce_tensors
from tltsim.control import DataBuffer, SpotTrainer


def all_gather_pairs(pairs: list[tuple[torch.Tensor, torch.Tensor]], hidden: int, dtype, device) -> list[list]:
    """Every rank's (tokens [n], features [n - 1, hidden]) pairs, on the CPU, rank by rank, through two tensor
    all-gathers: the sizes, then one flat buffer a rank (lengths, tokens and features, in float: token ids and
    lengths below 2**24 are exact there, which every vocabulary is), padded to the largest. A pickled
    all_gather_object of the pairs took 4x as long (benchmarks/results/bench_share.txt)."""
    world = dist.get_world_size()
    wire = torch.float64 if dtype == torch.float64 else torch.float32  # what every backend all-gathers

    def gather(t: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(out, t)
        return [o.cpu() for o in out]

    lengths = torch.tensor([len(t) for t, _ in pairs], dtype=wire)
    flat = torch.cat([lengths] + [t.to(wire) for t, _ in pairs] + [f.to(wire).reshape(-1) for _, f in pairs])
    sizes = [sz.tolist() for sz in gather(torch.tensor([len(pairs), len(flat)], device=device))]
    most = max(1, *(n for _, n in sizes))  # every rank's buffer padded to this (never empty)
    everyone = []
    for (n, _), buf in zip(sizes, gather(torch.cat([flat, flat.new_zeros(most - len(flat))]).to(device))):
        lens = buf[:n].long().tolist()
        toks = buf[n: n + sum(lens)].long().split(lens)
        feats = buf[n + sum(lens):][: (sum(lens) - n) * hidden].view(-1, hidden).to(dtype)
        feats = feats.split([m - 1 for m in lens])
        everyone.append(list(zip(toks, feats)))
    return everyone


class SpotDispatcher:
    """Rank 0's side of spot training: feeds workers' "done" reports to the SpotTrainer, answers through the store."""

    poll_s = 0.01  # during a rollout, look at the store at most this often (2 workers: 0.12 ms a look on
    # the 2-core CI machine, 4-5% of a decode iteration of the default target)

    def __init__(self, trainer: SpotTrainer, store, clock):
        self.trainer = trainer
        self.store = store
        self.clock = clock
        self.t = -np.inf  # latest time fed to the trainer (it must not go backwards)
        self._next_poll = -np.inf  # clock time before which a throttled poll returns at once

    def start(self, step: int, t: float) -> None:
        self.step, self.pending, self.t = step, set(range(self.trainer.num_workers)), max(self.t, t)
        self._next_poll = -np.inf
        self.trainer.start_rollout(step, self.t)

    def poll(self, throttled: bool = False) -> None:
        """Take in every new "done" (in time order); start the trainers the SpotTrainer names; stop when all are
        done. `throttled` (the rollout loop's calls): at most once every `poll_s`."""
        now = self.clock()
        if not self.pending or (throttled and now < self._next_poll):
            return
        self._next_poll = now + self.poll_s
        keys = {w: f"{self.step}/done/{w}" for w in sorted(self.pending)}
        reports = [(float(self.store.get(k)), w) for w, k in keys.items() if self.store.check([k])]
        for t, w in sorted(reports):
            self.pending.discard(w)
            self.t = max(self.t, t)
            started = self.trainer.worker_done(w, self.t)
            for s in started if self.pending else []:
                self.store.set(f"{self.step}/train/{s}", "1")
        if not self.pending:
            self.t = max(self.t, self.clock())
            self.trainer.preempt(self.t)
            self.store.set(f"{self.step}/stop", "1")


class SampleBuffer:
    """A worker's drafter training data: (tokens, features) pairs by step (its own at once, the other workers'
    at the end of the step), selected as its DataBuffer says."""

    def __init__(self, last_n_steps: int, keep_long_prev: float):
        self.index = DataBuffer(last_n_steps, keep_long_prev)
        self.pairs: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def add(self, step: int, pairs) -> None:
        self.index.add(step, [len(t) for t, _ in pairs])
        self.pairs.setdefault(step, []).extend(pairs)
        for old in [s for s in self.pairs if s < step - self.index.last_n_steps]:
            del self.pairs[old]

    def state_dict(self) -> dict:
        """The pairs by step (tensors) and the DataBuffer's state: plain data."""
        return {"index": self.index.state_dict(),
                "pairs": [[s, [list(p) for p in pairs]] for s, pairs in self.pairs.items()]}

    def load_state_dict(self, state: dict) -> None:
        self.index.load_state_dict(state["index"])
        self.pairs = {int(s): [tuple(p) for p in pairs] for s, pairs in state["pairs"]}

    def select(self, step: int) -> list:
        """All pairs of the window's steps, plus the longest of the step before, as many as the DataBuffer keeps."""
        n = self.index.last_n_steps
        window = [p for s in range(step - n + 1, step + 1) for p in self.pairs.get(s, [])]
        keep = self.index.samples(step).num_samples - len(window)
        before = sorted(self.pairs.get(step - n, []), key=lambda p: len(p[0]))
        return window + (before[len(before) - keep:] if keep > 0 else [])


class SpotTraining:
    """One worker's spot training, as TLT's spot trainer runs it: from the end of its rollout share until rank
    0 says stop, idle, or train its copy of the drafter on the data buffer once told to; after the step, share
    the step's samples with every worker and average the copies that trained into every worker's.

    `drafter` (the trained drafter, drafters.Trainable) is set by the worker once it is built. The optimizer is
    an AdamW over the copy's fp32 masters (real.drafters.master_weights), made when first needed and kept across
    steps: the masters are averaged at every sync, the moments stay this worker's own.
    """

    def __init__(self, rank: int, world: int, store, buffer: SampleBuffer, lr: float, batch: int,
                 out, device, dtype, hidden: int):
        self.rank, self.world, self.store, self.buffer = rank, world, store, buffer
        self.lr, self.batch, self.out = lr, batch, out
        self.device, self.dtype, self.hidden = device, dtype, hidden
        self.drafter = None
        self.opt, self.opt_state = None, None  # the optimizer; its state from a checkpoint until it is made

    def optimizer(self) -> MasterWeightAdamW:
        if self.opt is None:
            self.opt = MasterWeightAdamW(self.drafter.parameters(), lr=self.lr)
            if self.opt_state is not None:
                self.opt.load_state_dict(self.opt_state)
        return self.opt

    def train(self, step: int, go: str, stop: str, poll, clock, rng) -> tuple[float | None, int]:
        """Until the store holds `stop`: idle, or once it holds `go`, train on what the buffer selects for `step`
        (batches drawn with `rng`). (When training began, None if it never did; batches trained.)"""
        began, pairs, batches = None, None, 0
        while True:
            poll()
            if self.store.check([stop]):
                break
            if pairs is None and self.store.check([go]):
                began = clock()
                pairs = [p for p in self.buffer.select(step) if len(p[0]) >= 2]
                optimizer = self.optimizer()
            if pairs:
                chosen = rng.choice(len(pairs), size=min(self.batch, len(pairs)), replace=False)
                self.drafter.train_step([pairs[i] for i in chosen], optimizer)
                batches += 1
            else:
                time.sleep(0.002)
        if began is not None:
            self.drafter.eval()
            if batches:
                self.drafter.save(self.out / "spot" / f"rank{self.rank}.pt")
        return began, batches

    def share(self, step: int, samples: list) -> None:
        """Add every other worker's (tokens, features) of this step to this worker's buffer: the buffer holds
        the whole step's responses, as TLT's does (so the next steps' spot training on a worker that served
        few responses does not fit just those)."""
        if self.world == 1:
            return
        for rank, pairs in enumerate(all_gather_pairs(samples, self.hidden, self.dtype, self.device)):
            if rank != self.rank and pairs:
                self.buffer.add(step, pairs)

    def sync(self, batches: int) -> None:
        """Average the drafters that trained (weighted by their batches) into every rank's copy."""
        weight = torch.tensor([float(batches)], dtype=torch.float64, device=self.device)
        dist.all_reduce(weight)
        if weight.item() == 0:
            return
        optimizer = self.optimizer()  # the masters are the weights: average those, then round them back
        masters = [m.data for m in optimizer.masters]
        for m in masters:
            m.mul_(batches)
        all_reduce_tensors(masters)
        for m in masters:
            m.div_(weight.item())
        optimizer.write_back()
