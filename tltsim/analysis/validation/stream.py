"""A run of a policy that draws from the prompt stream (partial rollout, tail batching, asynchronous RL) replayed: the
simulator's policy draws from the stream the run drew from, in the run's order and at its responses' lengths, and
decides for itself when each step stops and what it carries or parks (or, asynchronously, which groups start when
and which the trainer takes).

Such a real run (real/run/stream.py, real/run/async_rl.py) numbers its prompt groups by the stream (`prompt_id` k:
the k-th group drawn) and records each trained response whole (`response_len`: its tokens over every step that
generated them). `stream_groups` counts the groups the run drew (a partial or tail-batching step records its
`drawn_groups`; an asynchronous run starts at most max_staleness steps' worth past the last step's). `stream_frame`
turns that back into the stream: every group the run drew, in order, at its rows' full lengths. A group the run never
trained (carried or parked still at its end, in progress, or dropped) runs to the cap: it had not finished while
the run had it, and how much longer it would have run, no record says. A launch's worth of groups past the last one
drawn runs to the cap too, so a replay that carries or parks fewer groups than the run (and so draws more) does not
wrap round to the first.

The replay's steps (`step_frame`) hold `prompts` groups each, the groups each step trains on, as the run's do; the
measured and predicted off-policy columns (carried or parked groups, resumed and dropped samples, staleness) then
differ only where the simulator's stops differ from the run's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.policies.async_rl import AsyncRL
from tltsim.policies.partial import PartialRollout
from tltsim.policies.tail_batching import TailBatching
from tltsim.sim.prompts import PromptStream


def stream_groups(steps: pd.DataFrame, config: dict) -> int:
    """The groups of the stream a replay of the run may draw (module docstring), from its steps frame and config."""
    if config.get("policy", "").split("+")[0] == "async":
        return (len(steps) + int(config["knobs"]["max_staleness"])) * int(config["prompts"])
    return int(steps["drawn_groups"].sum() + steps["launched_groups"].max())


def stream_frame(trained: pd.DataFrame, steps: pd.DataFrame, config: dict, cap: int) -> pd.DataFrame:
    """The stream the run drew from (module docstring): rows step (k // prompts), prompt_id (k), sample, prompt_len,
    response_len, reward, from the run's trace (`trained`), its steps frame and config; `cap`, the response cap."""
    prompts, group = int(config["prompts"]), int(config["group"])
    total = stream_groups(steps, config)
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


def draw_from(policy, stream: pd.DataFrame) -> None:
    """Have the bound simulator policy (a Composite's parts too) that draws from a prompt stream draw from `stream`
    (`stream_frame`) instead of the replay's trace."""
    for part in getattr(policy, "parts", (policy,)):
        if isinstance(part, (PartialRollout, TailBatching, AsyncRL)):
            part.stream = PromptStream(stream)
