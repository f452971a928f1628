"""A partial run replayed: the simulator's `partial` policy draws from the prompt stream the run drew from, in the
run's order and at its responses' lengths, and decides for itself when each step stops and what it carries.

A real partial run (real/run/partial.py) numbers its prompt groups by the stream (`prompt_id` k: the k-th group
drawn) and records each trained response whole (`response_len`: its tokens over every step that generated them).
`stream_frame` turns that back into the stream: every group the run drew, in order, at its rows' full lengths. A
group the run never trained (carried still at its end, or dropped) runs to the cap: it had not finished while the
run had it, and how much longer it would have run, no record says. Groups past the last one drawn run to the cap
too, so a replay that carries fewer groups than the run (and so draws more) does not wrap round to the first.

The replay's steps (`step_frame`) hold `prompts` groups each, the groups each step trains on, as the run's do; the
measured and predicted off-policy columns (carried groups, resumed samples, staleness) then differ only where the
simulator's stop differs from the run's.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tltsim.policies.partial import PartialRollout
from tltsim.sim.prompts import PromptStream


def is_streamed(policy: str) -> bool:
    """Whether a real run of `policy` draws its groups from the prompt stream (partial, partial+tlt)."""
    return policy.removesuffix("+tlt") == "partial"


def stream_frame(trained: pd.DataFrame, steps: pd.DataFrame, config: dict, cap: int) -> pd.DataFrame:
    """The stream the run drew from (module docstring): rows step (k // prompts), prompt_id (k), sample, prompt_len,
    response_len, reward, from the run's trace (`trained`), its steps frame and config; `cap`, the response cap."""
    prompts, group = int(config["prompts"]), int(config["group"])
    ratio = float((config.get("knobs") or {}).get("ratio", 1.0))
    drawn = int(steps["launched_groups"].sum() - steps["carried_groups"].iloc[:-1].sum())
    total = drawn + math.ceil(ratio * prompts)
    total += -total % prompts  # whole steps
    k = np.repeat(np.arange(total), group)
    out = pd.DataFrame({"step": k // prompts, "prompt_id": k, "sample": np.tile(np.arange(group), total),
                        "prompt_len": int(trained["prompt_len"].median()), "response_len": cap, "reward": 0.0})
    known = trained.set_index(["prompt_id", "sample"])[["prompt_len", "response_len", "reward"]]
    index = pd.MultiIndex.from_arrays([out["prompt_id"], out["sample"]])
    hit = index.isin(known.index)
    out.loc[hit, ["prompt_len", "response_len", "reward"]] = known.loc[index[hit]].to_numpy()
    return out.astype({"prompt_len": np.int64, "response_len": np.int64})


def step_frame(stream: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The replay's trace: its first `steps` steps (each step's groups are the quota it trains on)."""
    return stream[stream["step"] < steps].reset_index(drop=True)


class StreamedPartial(PartialRollout):
    """The simulator's partial policy drawing from a run's stream (`stream_frame`) instead of the replay's trace."""

    def __init__(self, inner: PartialRollout, stream: pd.DataFrame):
        self.__dict__.update(inner.__dict__)
        self.stream_rows = stream

    def bind(self, sim) -> None:
        super().bind(sim)
        self.stream = PromptStream(self.stream_rows)
