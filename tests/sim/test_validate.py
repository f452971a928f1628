"""Validation pieces that need no real run: quality inversion, step metrics, errors."""
import numpy as np
import pytest

from tltsim.config import ClusterConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy
from tltsim.control import Strategy
from tltsim.drafter.acceptance import AcceptanceModel
from tltsim.sim.simulator import Simulator
from tltsim.trace import load, save
from tltsim.analysis.validation.validate import invert_quality, step_metrics, validate


@pytest.mark.parametrize("strategy", ["8_4_48", "4_1_4", "12_8_16"])
@pytest.mark.parametrize("q", [0.1, 0.5, 0.85, 0.95])
def test_invert_quality_recovers_the_quality(strategy, q):
    model = AcceptanceModel()
    s = Strategy.parse(strategy)
    assert invert_quality(model, s, model.mean(s, q)) == pytest.approx(q, abs=1e-9)


def test_invert_quality_clamps_outside_the_models_range():
    model, s = AcceptanceModel(), Strategy.parse("4_1_4")
    assert invert_quality(model, s, 0.5) == 0.0 and invert_quality(model, s, 99.0) == 1.0


def test_step_metrics_agree_with_the_summary():
    trace = load("traces/synthetic/dapo_like.parquet")
    res = Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=16, tp=4), steps="0:3"), make_policy("tlt")).run()
    m = step_metrics(res)
    assert list(m.index) == [0, 1, 2]
    total = res.summary["makespan_s"] * 4  # worker-seconds (16 GPUs / tp 4)
    assert (m["idle_fraction"] * m["total_s"] * 4).sum() == pytest.approx(res.summary["idle_gpu_seconds"] / 4)
    assert m["drafter_train_s"].sum() * 4 == pytest.approx(res.summary["drafter_train_gpu_seconds"])
    assert m["total_s"].sum() == pytest.approx(res.summary["makespan_s"]) and total > 0


def test_validate_needs_a_profile(tmp_path):
    res = Simulator(load("traces/synthetic/dapo_like.parquet"), SimConfig(cluster=ClusterConfig(gpus=4, tp=4), steps="0:1")).run()
    res.save(tmp_path / "run")
    with pytest.raises(TltsimError, match="no trace.parquet"):
        validate([tmp_path / "run"], tmp_path / "p.csv")
    save(load("traces/synthetic/dapo_like.parquet"), tmp_path / "run" / "trace.parquet")
    with pytest.raises(TltsimError, match="p.csv: profile not found"):
        validate([tmp_path / "run"], tmp_path / "p.csv")
    with pytest.raises(TltsimError, match="no profile given and none in the run directory"):
        validate([tmp_path / "run"])


def test_a_pair_of_runs_of_unequal_steps_is_refused_before_any_replay(capsys):
    """The speedup is a ratio of makespans: a 3-step run against a 6-step one would report half a speedup."""
    from tltsim.cli import main

    short, long_ = "traces/runs/real_verl_smollm2", "traces/runs/real_das_smollm2_longtail"
    assert main(["validate", short, long_, "--profile", "traces/profiles/smollm2_cpu_profile.csv"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"{short} has 3 steps and {long_} 6" in err and "as many steps" in err


def test_step_scaled_cost_scales_each_steps_times_by_its_factor():
    from tltsim.cost import Roofline, StepScaled

    trace = load("traces/synthetic/dapo_like.parquet")
    cfg = SimConfig(cluster=ClusterConfig(gpus=8, tp=4), steps="0:3")
    sim = Simulator(trace, cfg, make_policy("verl"))
    plain = sim.run().steps.set_index("step")
    scaled_cost = StepScaled(Roofline(sim.model, sim.gpu, 4, cfg.cost), {1: 3.0, 2: 0.5})
    scaled = Simulator(trace, cfg, make_policy("verl"), cost=scaled_cost).run().steps.set_index("step")
    fixed = cfg.rl.reward_s  # the reward stage's fixed seconds (a config figure, not the cost model's)
    plain["reward_s"] -= fixed
    scaled["reward_s"] -= fixed
    for col in ("rollout_s", "reward_s", "train_s", "sync_s"):
        assert scaled.at[0, col] == pytest.approx(plain.at[0, col])  # no factor: 1
        assert scaled.at[1, col] == pytest.approx(3.0 * plain.at[1, col])
        assert scaled.at[2, col] == pytest.approx(0.5 * plain.at[2, col])
    assert scaled_cost.drafter_train_tokens_per_s(4) == pytest.approx(Roofline(sim.model, sim.gpu, 4, cfg.cost)
                                                                      .drafter_train_tokens_per_s(4) / 0.5)


def test_speed_factors_are_the_median_probe_of_the_steps_around():
    import pandas as pd

    from tltsim.cost.profiled import Profiled
    from tltsim.core.records import Result
    from tltsim.analysis.validation.validate import speed_factors, speed_reference

    cost = Profiled({"c0": 1e-3, "c_q": 1e-4, "c_kv": 1e-7, "c_att": 0.0, "d0": 0.0, "d_q": 0.0,
                     "p0": 0.0, "p_t": 0.0, "p_sq": 0.0})
    ref = speed_reference(cost, 4)
    assert ref == pytest.approx(1e-3 + 8e-4 + 1e-7 * 8 * (64 + 2.5))
    probes = np.array([1.0, 1.2, 9.0, 1.1, 1.3, 2.0, 2.2, 2.1]) * ref  # a spike at step 2, a slow spell from 5
    res = Result(pd.DataFrame(), pd.DataFrame({"step": range(8), "speed_probe_s": probes}), pd.DataFrame(), {},
                 {"speed_probe": 4})
    # medians of steps s-2..s+2 (those that exist): the spike is dropped, the spell followed
    assert speed_factors(res, cost) == pytest.approx({0: 1.2, 1: 1.15, 2: 1.2, 3: 1.3, 4: 2.0, 5: 2.0, 6: 2.05,
                                                     7: 2.1})
    res.steps.loc[1, "speed_probe_s"] = np.nan  # a run made with --speed-probe 0, or before it existed
    with pytest.raises(TltsimError, match="no speed probe for every step"):
        speed_factors(res, cost, "somewhere")


def test_replay_takes_the_runs_spot_trainer_settings(tmp_path):
    """A real run's trainer keeps its drafter in memory (no load time) and stops at the end of its batch of
    `drafter_batch` sequences: the replay's trainer does too, so the reward stage waits for it. Engine 0 is
    done 0.6 s before engine 1: with the simulator's default load of 1 s it would still be loading at the
    barrier and stop at once; a run config without drafter_batch gives a trainer that stops at once."""
    import pandas as pd

    from tests.sim.conftest import ConstantCost, make_trace
    from tltsim.core.records import TIMELINE_COLUMNS, Result
    from tltsim.analysis.validation.validate import replay

    trace = make_trace([[5, 7], [5, 7]])
    trace.df["engine"] = trace.df["prompt_id"]
    releases = {}
    for batch in (8, None):
        run = tmp_path / f"run{batch}"
        config = {"policy": "tlt", "workers": 2, "seed": 0, "knobs": {"sd": "never"},
                  **({"drafter_batch": batch} if batch else {})}
        Result(pd.DataFrame(columns=TIMELINE_COLUMNS), pd.DataFrame({"step": [0, 1]}), pd.DataFrame(), {},
               config).save(run)
        save(trace, run / "trace.parquet")
        _, predicted = replay(run, ConstantCost(decode=0.3))
        st = predicted.steps.set_index("step")
        assert st.rollout_s.tolist() == pytest.approx([0.5 + 7 * 0.3] * 2)
        releases[batch] = (st.total_s - st.rollout_s - st.reward_s - st.train_s - st.sync_s).to_numpy()
        train = predicted.timeline[predicted.timeline.state == "drafter_train"]
        assert set(train.worker) == {0} and len(train) == 2
    # a batch: 8 sequences of the buffer's mean length (< 20 tokens) at 1000 tokens/s, so < 0.16 s past the barrier
    assert ((releases[8] > 0) & (releases[8] < 0.16)).all()
    assert np.allclose(releases[None], 0.0)


def test_a_pairs_speedup_at_one_machine_speed():
    """Under --speed the pair's speedup also comes at one machine speed: the measured one times the ratio of the
    runs' time-weighted speed factors, and the predicted one from the unscaled replays."""
    from tltsim.cost.profiled import Profiled
    from tltsim.core.records import Result
    from tltsim.analysis.validation.validate import speed_factors

    pair, profile = ["traces/runs/real_verl_smollm2", "traces/runs/real_tlt_smollm2"], "traces/profiles/smollm2_cpu_profile.csv"
    scaled, unscaled = validate(pair, profile, speed=True).speedup, validate(pair, profile).speedup
    cost = Profiled.fit(profile)
    means = []
    for run in pair:
        result = Result.load(run)
        f, steps = speed_factors(result, cost), result.steps.set_index("step")
        means.append(sum(f[s] * t for s, t in steps["total_s"].items()) / steps["total_s"].sum())
    assert scaled["speed_ratio"] == pytest.approx(means[1] / means[0])
    assert scaled["speed_ratio"] != pytest.approx(1.0, abs=1e-3)  # the two runs did meet different speeds
    assert scaled["measured_at_one_speed"] == pytest.approx(scaled["measured"] * scaled["speed_ratio"])
    assert scaled["predicted_at_one_speed"] == pytest.approx(unscaled["predicted"])
    assert scaled["predicted"] != pytest.approx(unscaled["predicted"])
    assert "speed_ratio" not in unscaled


def test_replay_can_put_another_policy_and_drafter_on_a_runs_responses():
    """The what-if of docs/investigations/longtail_whatif.py: the verl run's responses under the tlt run's knobs, with
    a drafter quality given per step; a better drafter speculates more and finishes sooner. A what-if drafter
    drafts for every row alike: the run's own replay differs from it only in each row's own quality."""
    from tltsim.cost.profiled import Profiled
    from tltsim.core.records import Result
    from tltsim.analysis.validation.validate import measured_qualities, recorded_knobs, replay

    verl, tlt = "traces/runs/real_verl_smollm2", "traces/runs/real_tlt_smollm2"
    cost = Profiled.fit("traces/profiles/smollm2_cpu_profile.csv")
    run = Result.load(tlt)
    _, own = replay(tlt, cost)
    _, same = replay(tlt, cost, policy="tlt", knobs=recorded_knobs(run.config), qualities=measured_qualities(run))
    assert same.steps["drafter_quality"].tolist() == pytest.approx(own.steps["drafter_quality"].tolist())
    assert same.summary["makespan_s"] != pytest.approx(own.summary["makespan_s"])
    _, plain = replay(verl, cost)
    assert plain.summary.get("sd_share", 0.0) == 0.0
    what_if = {q: replay(verl, cost, policy="tlt", knobs={**run.config["knobs"], "sd": "always"},
                         qualities={s: q for s in range(3)})[1] for q in (0.2, 0.9)}
    assert what_if[0.9].summary["sd_share"] > 0.5
    assert what_if[0.9].summary["makespan_s"] < what_if[0.2].summary["makespan_s"]


def test_a_run_is_replayed_with_the_guard_rule_it_ran():
    """A run recorded before the guard's trial (no `guard_trial` in its knobs) judged a fresh measurement after
    one speculative iteration, and is replayed so: on the short pair that replay speculates closer to the run
    than one with today's trial of 4."""
    from tltsim.cost.profiled import Profiled
    from tltsim.control.decisions import DecisionKnobs
    from tltsim.analysis.validation.validate import recorded_knobs, replay
    from tltsim.core.records import Result

    assert recorded_knobs({"knobs": {"guard": True}}) == {"guard": True, "guard_trial": 1}
    assert recorded_knobs({"knobs": {"guard": True, "guard_trial": 4}})["guard_trial"] == 4
    assert recorded_knobs({"knobs": {"guard": False}}) == {"guard": False}
    assert recorded_knobs({"policy": "verl"}) == {}
    assert DecisionKnobs(guard_trial=2).control(0, 0).guard.trial == 2
    tlt = "traces/runs/real_tlt_smollm2"
    run = Result.load(tlt)
    cost = Profiled.fit("traces/profiles/smollm2_cpu_profile.csv")
    spec = lambda r: int((r.iterations["mode"] == "spec_decode").sum())  # noqa: E731
    _, own = replay(tlt, cost)
    _, today = replay(tlt, cost, knobs={**run.config["knobs"], "guard_trial": 4})
    assert abs(spec(own) - spec(run)) < abs(spec(today) - spec(run))


def test_invert_quality_over_a_mix_of_strategies():
    """A response verified with several strategies: the q whose mean over its iterations is what it accepted."""
    model, q = AcceptanceModel(), 0.7
    mix = {Strategy.parse("2_1_2"): 30, Strategy.parse("4_1_4"): 10}
    accepted = (30 * model.mean(Strategy.parse("2_1_2"), q) + 10 * model.mean(Strategy.parse("4_1_4"), q)) / 40
    assert invert_quality(model, mix, accepted) == pytest.approx(q, abs=1e-9)
    assert invert_quality(model, mix, accepted) != pytest.approx(invert_quality(model, Strategy.parse("2_1_2"),
                                                                                   accepted), abs=1e-3)
