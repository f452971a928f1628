"""Small results to draw and report: verl and TLT on a tiny trace, simulated once per test session."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import simulate
from tltsim.trace import save, synth


def tiny_trace(steps=3):
    """8 prompts x 4 samples a step, DAPO-like lengths capped at 2048: a run simulates in milliseconds."""
    return synth("dapo", steps=steps, prompts=8, group=4, max_len=2048, seed=1)


def run(policy="verl", knobs=None, exact=False, steps=3):
    """Simulate `policy` on 4 engines of 2 GPUs; TLT's threshold 8 lets SD switch on in these small batches."""
    cfg = SimConfig(trace="tiny.parquet", policy=policy, policy_knobs=knobs or {},
                    cluster=ClusterConfig(gpus=8, tp=2, max_running=16), exact=exact)
    return simulate(tiny_trace(steps), cfg, make_policy(policy, cfg.policy_knobs))


@pytest.fixture(scope="session")
def base():
    return run()


@pytest.fixture(scope="session")
def tlt():
    return run("tlt", {"threshold": 8})


@pytest.fixture(scope="session")
def tlt_exact():
    """TLT with per-iteration records (exact mode): the tuner plot draws choices per batch size."""
    return run("tlt", {"threshold": 8}, exact=True, steps=2)


def overlapping(result):
    """`result` with a trainer that trains throughout its generation (workers 100+), as async's does."""
    tl = result.timeline
    gen = tl[tl["state"].isin(["prefill", "decode", "spec_decode"])]
    return replace(result, timeline=pd.concat([tl, gen.assign(state="train", worker=gen["worker"] + 100)],
                                              ignore_index=True))


@pytest.fixture
def trace_file(tmp_path):
    return save(tiny_trace(), tmp_path / "tiny.parquet")
