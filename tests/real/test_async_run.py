"""Asynchronous RL for real (real/run/async_rl.py): what a run may take, speculation across a weight update, and runs
of the tiny target."""
import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from real.run.config import RunConfig
from tltsim.core.errors import TltsimError

ROOT = Path(__file__).resolve().parents[2]


def test_async_is_refused_what_a_real_run_cannot_do(tmp_path):
    with pytest.raises(TltsimError, match="needs at least 2 workers"):
        RunConfig(policy="async", workers=1).checked()
    with pytest.raises(TltsimError, match="unknown knob.*rollout_share"):
        RunConfig(policy="async", knobs={"rollout_share": 0.25}).checked()  # the split is the run's workers'
    with pytest.raises(TltsimError, match="does not speculate"):
        RunConfig(policy="async", drafter_checkpoint=str(tmp_path)).checked()
    with pytest.raises(TltsimError, match="no step between its rollouts"):
        RunConfig(policy="async+tlt", probe_static=True).checked()
    with pytest.raises(TltsimError, match="real runs offer"):
        RunConfig(policy="async+das").checked()  # a history drafter is every worker's: not inside async
    config = RunConfig(policy="async", workers=4, prompts=2, knobs={"max_staleness": 2}).checked()
    assert config.to_dict()["knobs"] == {"rollout_share": 0.75, "max_staleness": 2}  # as the simulator replays it
    both = RunConfig(policy="async+sd-always", knobs={"max_staleness": 1, "threshold": 4}).checked()
    assert both.async_knobs().max_staleness == 1 and both.tlt_knobs().threshold == 4 and both.tlt_knobs().sd == "always"


def test_speculation_across_a_weight_update_is_lossless():
    """A row a weight update interrupts goes on from its tokens on a fresh engine under the new weights (its prompt
    and tokens prefilled anew): greedy, speculating with a drafter told of the update gives the tokens plain decoding
    gives under the same weight schedule (the update after the same 9 tokens of every row)."""
    from tiny_lm import MAX_NEW, PROMPTS, target, trained_drafter

    from real.drafters.eagle import Drafter
    from real.engine.adaptive import rollout
    from real.engine.generate import Engine
    from real.settings import SamplingParams
    from tltsim.control.decisions import DecisionKnobs

    model, prompts, cut = copy.deepcopy(target("llama", "trained")), PROMPTS["trained"], 9
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    noise = torch.Generator().manual_seed(3)
    after = {n: p + 0.05 * torch.randn(p.shape, generator=noise, dtype=p.dtype) for n, p in before.items()}

    def load(weights):
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(weights[n])

    def run(speculate: bool) -> tuple[list[list[int]], int]:
        load(before)
        drafter = None
        if speculate:
            drafter = Drafter.for_target(model, seed=0)
            drafter.load_state_dict(trained_drafter("llama", "trained").state_dict())
        control = DecisionKnobs(sd="always", tuner="fixed", arms=("3_1_3",)).control(0, 0) if speculate else None
        first = Engine(model, drafter, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
        rollout(first, prompts, lambda: 0.0, control, budgets=[cut] * len(prompts))
        so_far = [first.finished[i].tokens for i in range(len(prompts))]
        load(after)
        if drafter is not None:
            drafter.target_updated()
            control.begin_rollout()
        again = Engine(model, drafter, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
        ro = rollout(again, [p + t for p, t in zip(prompts, so_far)], lambda: 0.0, control,
                     budgets=[MAX_NEW - cut] * len(prompts))
        return [t + again.finished[i].tokens for i, t in enumerate(so_far)], \
            sum(c.mode == "spec_decode" for c in ro.calls)

    plain, _ = run(False)
    spec, calls = run(True)
    assert spec == plain and calls > 0 and all(len(t) == MAX_NEW for t in plain)


@pytest.mark.slow
def test_an_async_run_trains_fresh_whole_groups_beside_its_rollout(tmp_path):
    """2 workers (one rolls out, one trains), 2 groups of 2 a step, at most 1 version stale, the engine running 2
    rows at a time, killed (`kill PID`) once its first checkpoint is written and resumed with --resume (the stream's
    position, the groups in progress and those finished but not trained, and the policy version in the
    checkpoint): each step trains whole groups of the stream, each once, none staler than the bound; the
    trainer waits, rewards, trains and sends its weights while the rollout worker decodes; both workers' timelines
    tile the run; validate replays it with the simulator's async on the run's split."""
    from killed import kill_at_first_checkpoint
    from tltsim.cli import main as tltsim_main
    from tltsim.core.records import Result
    from tltsim.trace import load

    out = tmp_path / "run"
    args = ["real", "run", "--policy", "async", "--workers", "2", "--steps", "3", "--prompts", "2", "--group", "2",
            "--max-new-tokens", "24", "--max-running", "2", "--probe", "0", "--speed-probe", "0",
            "--knob", "max_staleness=1", "-o", str(out)]
    killed_at = kill_at_first_checkpoint(args, out)
    assert killed_at < 2, "the run finished before it could be killed"
    first = load(out / "trace.parquet").df
    assert tltsim_main([*args, "--resume", "--threads", str(torch.get_num_threads())]) == 0
    res = Result.load(out)
    df = load(out / "trace.parquet").df
    kept = lambda d: d[d["step"] <= killed_at].reset_index(drop=True)  # noqa: E731: the checkpointed steps
    assert kept(df).equals(kept(first))
    assert (df.groupby(["step", "prompt_id"]).size() == 2).all() and not df.duplicated(["prompt_id", "sample"]).any()
    steps = res.steps.set_index("step")
    assert steps["responses"].tolist() == [4, 4, 4] and (steps["staleness_max"] <= 1).all()
    assert (df["engine"] == 0).all() and (df["response_len"] <= 24).all()
    # a step trains groups the gate let start by then: at most (step + 1 + 1) x 2 of the stream's
    assert all((g["prompt_id"] < (s + 2) * 2).all() for s, g in df.groupby("step"))
    tl = res.timeline
    assert set(tl[tl.worker == 1]["state"]) <= {"idle", "reward", "train", "weight_sync"}
    assert set(tl[tl.worker == 0]["state"]) <= {"prefill", "decode", "idle", "weight_sync"}
    assert (tl[tl.worker == 0]["state"] == "decode").any()
    ends = steps["t_start"] + steps["total_s"]
    assert np.allclose(steps["t_start"].to_numpy()[1:], ends.to_numpy()[:-1])  # a step starts where the last ended
    for _, w in tl.sort_values(["worker", "t_start"]).groupby("worker"):
        assert np.allclose(w["t_start"].to_numpy()[1:], w["t_end"].to_numpy()[:-1])
        assert np.isclose(w["t_start"].min(), steps["t_start"].iloc[0]) and np.isclose(w["t_end"].max(), ends.iloc[-1])
    trainer = tl[(tl.worker == 1) & (tl.state == "idle")].groupby("step")["t_start"].min()
    assert np.allclose(trainer.to_numpy(), steps["t_start"].to_numpy())  # it waits for groups first: rollout_s
    assert res.summary["resumed_fraction"] == steps["resumed"].sum() / steps["responses"].sum()
    from tltsim.analysis.validation.validate import validate

    v = validate([out], ROOT / "traces/profiles/real_cpu_profile.csv")
    predicted = next(iter(v.predicted.values()))
    assert predicted.summary["staleness_max"] <= 1 and len(predicted.steps) == 3
    assert {"staleness_mean", "resumed_fraction", "dropped_fraction"} <= set(v.overall["metric"])


@pytest.mark.slow
def test_an_async_tlt_run_speculates_trains_its_drafter_while_gated_and_resumes(tmp_path):
    """async+tlt, no staleness (the trainer waits for every group the gate let start, so the rollout worker then
    waits for the update), batches small enough to speculate at once, and no guard (it times speculation against
    plain decoding, and on a loaded machine may find it losing a step): the rollout worker speculates, spot-trains
    its drafter while it waits (its own responses' features), and a run resumed after step 0 (its control, buffer
    and drafter in the checkpoint) goes on."""
    from real.run.launch import launch
    from tltsim.core.records import Result

    def run(steps):
        return RunConfig(policy="async+tlt", workers=2, steps=steps, prompts=2, group=2, max_new_tokens=24,
                         probe=0, speed_probe=0, warmup_steps=5, warmup_prompts=4,
                         knobs={"max_staleness": 0, "threshold": 4, "patience": 2, "arms": "4_1_4", "guard": False})

    out = tmp_path / "run"
    launch(run(1), out)
    assert (out / "checkpoint" / "drafter1.pt").is_file()  # the rollout worker's (rank 1) drafter
    launch(run(3), out, resume=True)
    res = Result.load(out)
    steps = res.steps.set_index("step")
    assert steps["responses"].tolist() == [4, 4, 4] and (steps["staleness_max"] == 0).all()
    assert (steps["sd_share"] > 0).all() and (steps["mean_accepted"] >= 1).all()
    assert steps["drafter_train_batches"].sum() > 0  # the gate closed, the worker trained until the update
    tl = res.timeline
    rollout = tl[tl.worker == 0]
    assert set(rollout["state"]) <= {"prefill", "decode", "spec_decode", "idle", "drafter_train", "weight_sync"}
    assert np.isclose(rollout.loc[rollout.state == "drafter_train", "t_end"].sub(
        rollout.loc[rollout.state == "drafter_train", "t_start"]).sum(), steps["drafter_train_s"].sum())
    # validate replays it, each policy version at the drafter quality its trainer step measured
    from tltsim.analysis.validation.validate import validate

    v = validate([out], ROOT / "traces/profiles/real_cpu_profile.csv")
    predicted = next(iter(v.predicted.values())).steps
    assert len(predicted) == 3 and (predicted["sd_share"] > 0).any()
