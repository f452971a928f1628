"""The RL-step simulator: whole timelines by hand, conservation, fast vs exact, scaling, determinism."""
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.sim.conftest import ConstantCost, make_trace
from tltsim.cli import main
from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.core.padding import padded_tokens
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.sim.simulator import Simulator, simulate
from tltsim.trace import Trace, load

SHIPPED = "traces/synthetic/dapo_like.parquet"


def cfg(gpus=2, tp=1, max_running=8, **kw):
    return SimConfig(cluster=ClusterConfig(gpus=gpus, tp=tp, max_running=max_running), rl=RLConfig(reward_s=0.5), **kw)


def test_whole_timeline_of_two_engines_one_step():
    # engine 0 gets prompt 0 (length 4), engine 1 prompt 1 (length 2); prefill 0.5, decode 1 s, train 2, sync 1
    trace = make_trace([[4, 2]])
    res = Simulator(trace, cfg(), cost=ConstantCost()).run()
    got = [tuple(r) for r in res.timeline[["worker", "state", "t_start", "t_end"]].itertuples(index=False)]
    assert got == [
        (0, "prefill", 0.0, 0.5), (0, "decode", 0.5, 4.5),
        (1, "prefill", 0.0, 0.5), (1, "decode", 0.5, 2.5), (1, "idle", 2.5, 4.5),
        (0, "reward", 4.5, 5.0), (1, "reward", 4.5, 5.0),
        (0, "train", 5.0, 7.0), (1, "train", 5.0, 7.0),
        (0, "weight_sync", 7.0, 8.0), (1, "weight_sync", 7.0, 8.0),
    ]
    s = res.summary
    assert s["makespan_s"] == 8.0 and s["rollout_s"] == 4.5
    assert s["idle_gpu_seconds"] == 2.0 and s["idle_fraction"] == 2.0 / 16.0
    step = res.steps.iloc[0]
    assert (step.rollout_s, step.reward_s, step.train_s, step.sync_s, step.total_s) == (4.5, 0.5, 2.0, 1.0, 8.0)
    assert res.requests["finished_at"].tolist() == [4.5, 2.5]


class TokenCost(ConstantCost):
    """Log-prob and train phases linear in the tokens and squared sequence lengths per GPU they are given."""

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return (tokens + sq_tokens / 100) / gpus / 10

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return tokens / gpus / 100


def test_train_phases_follow_balanced_tokens_or_the_slowest_engine():
    # 4 engines of 2 GPUs; engine 0's sequence is 40 + 10 prompt tokens long, the others' 10 + 10 each
    trace = make_trace([[40, 10, 10, 10]])
    steps = {}
    for balance in (True, False):
        c = SimConfig(cluster=ClusterConfig(gpus=8, tp=2), rl=RLConfig(reward_s=0.5, balance_train=balance))
        steps[balance] = Simulator(trace, c, cost=TokenCost()).run().steps.iloc[0]
    sq = 50**2 + 3 * 20**2
    assert steps[True].train_s == pytest.approx((110 + sq / 100) / 8 / 10)
    assert steps[True].reward_s == pytest.approx(0.5 + 110 / 8 / 100)
    assert steps[False].train_s == pytest.approx((50 + 50**2 / 100) / 2 / 10)
    assert steps[False].reward_s == pytest.approx(0.5 + 50 / 2 / 100)
    assert steps[False].rollout_s == steps[True].rollout_s
    # one engine whose GRPO pads micro-batches of <= 200 tokens: all four rows in one, each as long as 50
    c = SimConfig(cluster=ClusterConfig(gpus=1, tp=1), rl=RLConfig(balance_train=False, micro_batch_tokens=200))
    assert Simulator(trace, c, cost=TokenCost()).run().steps.iloc[0].train_s == pytest.approx((200 + 4 * 50**2 / 100) / 10)


def test_padded_tokens_count_each_micro_batch_at_its_longest():
    # micro_batches([5, 1, 3, 3], 6) == [[1, 2], [3], [0]]: 2 rows x 3, 1 x 3, 1 x 5
    assert padded_tokens([5, 1, 3, 3], 6) == (2 * 3 + 3 + 5, 2 * 9 + 9 + 25)
    assert padded_tokens([5, 1, 3, 3], 0) == (12, 25 + 1 + 9 + 9)  # no padding
    assert padded_tokens([5, 1, 3, 3], 100) == (4 * 5, 4 * 25)  # one micro-batch


def test_more_engines_than_prompts_leaves_engines_idle():
    res = Simulator(make_trace([[3]]), cfg(gpus=3), cost=ConstantCost()).run()
    idle = res.timeline[(res.timeline.worker == 2) & (res.timeline.state == "idle")]
    assert idle[["t_start", "t_end"]].values.tolist() == [[0.0, 3.5]]


@pytest.fixture(scope="module")
def shipped():
    return load(SHIPPED)


def test_conservation_busy_plus_idle_is_gpus_times_makespan(shipped):
    c = SimConfig(cluster=ClusterConfig(gpus=32, tp=4), steps="0:4")
    res = simulate(shipped, c)
    s = res.summary
    assert np.isclose(s["busy_gpu_seconds"] + s["idle_gpu_seconds"], 32 * s["makespan_s"], rtol=1e-12)
    # no worker has overlapping or missing intervals
    for _, w in res.timeline.sort_values(["worker", "t_start"]).groupby("worker"):
        assert np.allclose(w["t_start"].to_numpy()[1:], w["t_end"].to_numpy()[:-1])
        assert w["t_start"].iloc[0] == 0.0 and np.isclose(w["t_end"].iloc[-1], s["makespan_s"])


def test_fast_path_agrees_with_exact_on_a_shipped_trace(shipped):
    base = SimConfig(cluster=ClusterConfig(gpus=16, tp=2, max_running=32), steps="0:2")
    fast = simulate(shipped, base).summary
    exact = simulate(shipped, SimConfig(**{**base.__dict__, "exact": True})).summary
    assert abs(fast["makespan_s"] / exact["makespan_s"] - 1) < 0.005
    assert abs(fast["idle_fraction"] - exact["idle_fraction"]) < 0.005 * exact["idle_fraction"]


def test_more_gpus_never_lengthen_the_rollout(shipped):
    rollout = [simulate(shipped, SimConfig(cluster=ClusterConfig(gpus=g, tp=2), steps="0:3")).summary["rollout_s"]
               for g in (4, 8, 16, 32, 64)]
    assert all(b <= a for a, b in zip(rollout, rollout[1:])), rollout


def test_deterministic(shipped):
    c = SimConfig(cluster=ClusterConfig(gpus=16, tp=4), steps="0:3")
    a, b = simulate(shipped, c), simulate(shipped, c)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)
    assert a.summary == b.summary


def test_trace_engine_column_is_used_when_it_fits():
    trace = make_trace([[4, 2, 3, 1]])
    trace.df["engine"] = [1, 1, 0, 0]
    res = Simulator(trace, cfg(), cost=ConstantCost()).run()
    assert res.requests.sort_values("prompt_id")["engine"].tolist() == [1, 1, 0, 0]
    with pytest.raises(TltsimError, match="records engines up to 1 but the cluster has 1"):
        Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=1, tp=1, split="trace")), cost=ConstantCost())


def test_result_round_trip_and_perfetto_export(tmp_path, shipped):
    out = tmp_path / "run"
    rc = main(["simulate", "--trace", SHIPPED, "--gpus", "8", "--tp", "4", "--steps", "0:2", "-o", str(out), "--no-progress"])
    assert rc == 0
    res = Result.load(out)
    assert res.summary["steps"] == 2 and set(res.timeline["state"]) >= {"prefill", "decode", "idle", "train"}
    events = json.loads((out / "timeline.perfetto.json").read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(res.timeline)


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "6", "--tp", "4"], "gpus = 6 is not a multiple of tp = 4"),
    (["--gpu", "v100"], "unknown gpu preset 'v100'"),
    (["--model", "llama-3.3-70b", "--gpu", "a100", "--tp", "1", "--gpus", "2"], "does not fit on A100 at TP 1"),
    (["--steps", "5:2"], "expected a count N >= 1 (steps 0..N-1) or A:B"),
    (["--steps", "0"], "expected a count N >= 1"),
    (["--policy", "nope"], "unknown policy 'nope'"),
])
def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    rc = main(["simulate", "--trace", SHIPPED, "-o", str(tmp_path / "o"), "--no-progress", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_steps_is_a_count_as_in_real_run_or_a_range():
    from tltsim.config import parse_steps, steps_in

    assert parse_steps("3") == (None, 3) and parse_steps("2:5") == (2, 5) and parse_steps(":4") == (None, 4)
    assert parse_steps("") == (None, None)
    have = [0, 1, 2, 5, 7]  # a trace's steps need not be contiguous
    assert steps_in("3", have) == [0, 1, 2] and steps_in("2:6", have) == [2, 5] and steps_in("", have) == have
    assert steps_in("6:", have) == [7] and steps_in("8:9", have) == []


def test_config_file_with_flag_override(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(f'trace = "{SHIPPED}"\nsteps = "0:1"\n[cluster]\ngpus = 8\ntp = 2\n')
    assert main(["simulate", "--config", str(f), "--gpus", "4", "-o", str(tmp_path / "o"), "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 1
    assert Result.load(tmp_path / "o").config["cluster"]["gpus"] == 4
    f.write_text("[cluster]\ngpus = 'many'\n")
    assert main(["simulate", "--config", str(f), "--trace", SHIPPED, "-o", str(tmp_path / "o")]) == 2
    assert "cluster.gpus = 'many' should be an integer" in capsys.readouterr().err


class PerTokenCost(ConstantCost):
    """ConstantCost whose log-prob and train phases take a second per 100 tokens: what they process shows."""

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return float(tokens) / 100.0

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return float(tokens) / 100.0


def rewarded_trace(rewards, lengths=(4, 6, 2, 8)):
    """One step, two prompts of two samples, with these rewards (prompt 0's two, then prompt 1's)."""
    t = make_trace([list(lengths)], group=2)
    return Trace.from_frame(t.df.assign(reward=rewards), t.meta)


def test_skip_zero_advantage_trains_only_the_groups_whose_rewards_differ():
    # prompt 0 (rows 4, 6 tokens + 10 prompt each) agrees on its reward; prompt 1 (rows 2, 8) does not
    trace = rewarded_trace([0.0, 0.0, 1.0, 0.0])
    def step(skip):
        c = replace(cfg(), rl=RLConfig(reward_s=0.5, skip_zero_advantage=skip))
        return Simulator(trace, c, cost=PerTokenCost()).run().steps.iloc[0]
    every, informative = step(False), step(True)
    assert every.train_s == pytest.approx((14 + 16 + 12 + 18) / 100)
    assert informative.train_s == pytest.approx((12 + 18) / 100)  # prompt 1's two rows only
    assert informative.reward_s == pytest.approx(0.5 + (12 + 18) / 100)  # its log-probs too
    assert informative.rollout_s == every.rollout_s  # the rollout is the same
    # the step's samples are all four either way, as a real run counts them: the phases skip, the record does not
    assert every.responses == informative.responses == 4


@pytest.mark.parametrize("policy", ["partial", "tail-batching"])
def test_skip_zero_advantage_reads_the_rewards_of_the_groups_a_policy_draws_from_its_stream(policy):
    """partial and tail batching draw their groups from the prompt stream (tltsim.sim.prompts), which carries each
    row's reward: with ratio 1 they launch the step's own groups, so they train on verl's rows, prompt 1's alone."""
    from tltsim.policies import make_policy

    c = replace(cfg(), rl=RLConfig(reward_s=0.5, skip_zero_advantage=True))
    knobs = {"ratio": 1.0} if policy == "partial" else {"eta": 1.0}
    s = Simulator(rewarded_trace([0.0, 0.0, 1.0, 0.0]), c, make_policy(policy, knobs), cost=PerTokenCost()).run()
    assert s.steps.iloc[0].train_s == pytest.approx((12 + 18) / 100)


def test_skip_zero_advantage_trains_nothing_when_every_group_agrees():
    s = Simulator(rewarded_trace([1.0, 1.0, 0.0, 0.0]), replace(cfg(), rl=RLConfig(skip_zero_advantage=True)),
                  cost=PerTokenCost()).run().steps.iloc[0]
    assert s.train_s == 0.0
    assert s.responses == 4 and s.trained_len_mean == pytest.approx(5.0)  # the step's samples, none with a gradient


def test_a_replayed_partial_run_counts_the_samples_it_resumed_as_the_run_did():
    """The shipped partial run (skip_zero_advantage, its steps 1 and 3 all of reward 0) resumed every sample of those
    steps; the replay counts the same, trained with a gradient or not."""
    from tltsim.analysis.validation.validate import replay
    from tltsim.cost.profiled import Profiled

    root = Path(__file__).resolve().parents[2]
    cost = Profiled.fit(root / "traces" / "profiles" / "smollm2_sampled_cpu_profile.csv")
    measured, predicted = replay(root / "traces" / "runs" / "real_partial_smollm2_sampled", cost)
    assert measured.steps.resumed.tolist() == [0, 16, 0, 16]
    assert predicted.steps.resumed.tolist() == measured.steps.resumed.tolist()
    assert predicted.steps.staleness_mean.tolist() == measured.steps.staleness_mean.tolist()


def test_skip_zero_advantage_needs_rewards():
    with pytest.raises(TltsimError, match="reward column"):
        Simulator(make_trace([[4, 2]]), replace(cfg(), rl=RLConfig(skip_zero_advantage=True)), cost=PerTokenCost())
