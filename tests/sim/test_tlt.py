"""TLT policies in the simulator: the speculative engine path by hand, and policy-level properties."""
import json

import numpy as np
import pytest

from tests.sim.conftest import ConstantCost
from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy, policy_names
from tltsim.control import EngineControl, FixedTuner, SDSwitch, SpeculationGuard
from tltsim.sim.engine import fast_rollout
from tltsim.sim.speculation import Speculation
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

SHIPPED = "traces/synthetic/dapo_like.parquet"


class FourTokens:
    """Acceptance double: every verify accepts exactly 4 tokens."""

    def mean(self, strategy, q):
        return 4.0

    def sample(self, strategy, q, rng, size):
        return np.full(size, 4)


def spec(threshold=1, patience=2, quality=0.9, guard=None):
    control = EngineControl(SDSwitch("adaptive", threshold, patience), FixedTuner("4_1_4"), guard)
    control.begin_rollout()
    return Speculation(control=control, acceptance=FourTokens(), quality=quality, model_free=True)


def test_switch_reprefill_and_speculative_tail_by_hand():
    # prefill 0.5, decode 1 s/iter: 3 iterations at batch 2, then 2 at batch 1 before the switch (patience 2),
    # a re-prefill (0.5), then 35 tokens at 4 per verify (1 s each, model-free drafter) = 8.75 s
    ro = fast_rollout([10, 10], [3, 40], ConstantCost(), max_running=8, spec=spec())
    got = [(iv.state, iv.t_start, iv.t_end) for iv in ro.intervals]
    assert got == [("prefill", 0.0, 0.5), ("decode", 0.5, 5.5), ("prefill", 5.5, 6.0), ("spec_decode", 6.0, 14.75)]
    assert ro.finished_at.tolist() == [3.5, 14.75]
    assert ro.switch_at == 5.5 and ro.sd_iterations == 8.75 and ro.sd_accepted / ro.sd_iterations == 4.0


def test_no_switch_when_the_batch_never_gets_small():
    ro = fast_rollout([10] * 4, [5] * 4, ConstantCost(), max_running=8, spec=spec(threshold=2))
    assert [iv.state for iv in ro.intervals] == ["prefill", "decode"] and ro.switch_at is None


class SlowVerify(ConstantCost):
    """Verification costs 10 decode steps: speculation accepting 4 tokens is a loss."""

    def verify_time(self, batch, tokens_per_request, ctx):
        return np.full(np.shape(batch), 10.0)

    def segment_time(self, q, k, ctx0, growth, n):
        return np.asarray(n, dtype=float) * np.where(np.asarray(k) > 1, 10.0, self.decode)


@pytest.mark.parametrize("exact", [False, True])
def test_guard_tries_a_losing_arm_then_decodes_plainly_retrying_after_a_doubling_wait(exact):
    """One arm, measured slower than plain decoding after one iteration (the guard's trial cannot pay: every
    iteration is as slow): the rest of the rollout decodes plainly but for one retry after retry_plain (16)
    plain iterations, refused again; the next rollout, with the same guard, waits out the doubled wait (32,
    11 of them already waited) before its one retry."""
    from tests.sim.test_engine import run_exact
    go = (lambda sp: run_exact([10, 10], [3, 40], SlowVerify(), 8, sp)) if exact else \
        (lambda sp: fast_rollout([10, 10], [3, 40], SlowVerify(), max_running=8, spec=sp))
    assert go(None).duration == 0.5 + 40
    sp = spec(guard=SpeculationGuard())
    first = go(sp)
    # 5.5 s to the switch, the re-prefill 0.5 s, a 10 s iteration of 4 tokens, 16 plain, the retry, 11 plain
    assert [(iv.state, iv.t_end) for iv in first.intervals] == [
        ("prefill", 0.5), ("decode", 5.5), ("prefill", 6.0), ("spec_decode", 16.0), ("decode", 32.0),
        ("spec_decode", 42.0), ("decode", 53.0)]
    assert first.sd_iterations == 2
    sp.control.begin_rollout()
    again = go(sp)
    # 3 plain iterations at batch 2 and 21 at batch 1 (32 - 11), the switch's re-prefill, the retry, 12 plain
    assert [(iv.state, iv.t_end) for iv in again.intervals] == [
        ("prefill", 0.5), ("decode", 24.5), ("prefill", 25.0), ("spec_decode", 35.0), ("decode", 47.0)]
    assert again.sd_iterations == 1


@pytest.fixture(scope="module")
def shipped():
    return load(SHIPPED)


def run(trace, policy, steps="0:10", gpus=32, exact=False, **knobs):
    cfg = SimConfig(cluster=ClusterConfig(gpus=gpus, tp=4), steps=steps, exact=exact, policy=policy)
    return Simulator(trace, cfg, make_policy(policy, knobs)).run()


def test_a_losing_drafter_costs_a_little_exploring(shipped):
    """A drafter whose tokens are almost never accepted: speculating loses to plain decoding. The guard
    tries it at each batch size an engine reaches (step 0 pays most), again within a rollout after a doubling
    wait and when a refusal expires (every few rollouts), and decodes plainly otherwise: never faster than
    verl, at most a few percent slower in any step, under 2% slower over the later steps."""
    verl = run(shipped, "verl")
    bad = run(shipped, "tlt", q_start=0.02, drift=0.0, training="frozen")
    ratio = (bad.steps["rollout_s"] / verl.steps["rollout_s"]).to_numpy()
    assert (ratio >= 1 - 1e-12).all() and (ratio < 1.05).all() and ratio[0] > 1.0
    assert ratio[1:].mean() < 1.02
    assert 0 < bad.summary["sd_share"] < 0.02


def test_tlt_beats_verl_and_a_stale_drafter_gives_less_speedup(shipped):
    verl, tlt, static = (run(shipped, p) for p in ("verl", "tlt", "static-sd"))
    assert tlt.summary["rollout_s"] < static.summary["rollout_s"] < verl.summary["rollout_s"]
    q = tlt.steps["drafter_quality"].to_numpy()
    qs = static.steps["drafter_quality"].to_numpy()
    assert np.all(q >= qs) and np.all(q[2:] > qs[2:]) and np.all(np.diff(qs) <= 0)
    assert tlt.summary["mean_accepted"] > static.summary["mean_accepted"]


def test_harvested_training_never_exceeds_the_idle_time_that_existed(shipped):
    tlt = run(shipped, "tlt")
    tl = tlt.timeline
    for (step, w), g in tl.groupby(["step", "worker"]):
        barrier = tlt.steps.set_index("step").loc[step]
        end_rollout = barrier.t_start + barrier.rollout_s
        rollout = g[g.state.isin(["prefill", "decode", "spec_decode"])]
        done = rollout.t_end.max() if len(rollout) else barrier.t_start
        spare = g[g.state.isin(["idle", "drafter_train"])]
        assert (spare.t_start >= done - 1e-9).all() and (spare.t_end <= end_rollout + 1e-9).all()
        assert spare.eval("t_end - t_start").sum() == pytest.approx(end_rollout - done, abs=1e-9)
    harvested = tl[tl.state == "drafter_train"].eval("t_end - t_start").sum() * 4
    assert harvested == pytest.approx(tlt.summary["drafter_train_gpu_seconds"])
    assert tlt.summary["drafter_train_gpu_seconds"] > 0


def test_a_spot_trainer_finishes_its_batch_before_the_reward_stage(shipped):
    """drafter_batch > 0: told to stop at the barrier, a trainer runs to the end of the batch in progress (at most
    one batch past the barrier), and the reward stage waits for the last one; 0 (the default): it stops at once."""
    base = run(shipped, "tlt", steps="0:4")
    late = run(shipped, "tlt", steps="0:4", drafter_batch=64)
    assert late.steps.at[0, "rollout_s"] == pytest.approx(base.steps.at[0, "rollout_s"])  # same rollout
    steps = late.steps.set_index("step")
    release = steps.total_s - steps.rollout_s - steps.reward_s - steps.train_s - steps.sync_s
    assert (release > 1e-6).all()
    base_release = base.steps.set_index("step").eval("total_s - rollout_s - reward_s - train_s - sync_s")
    assert np.allclose(base_release, 0.0, atol=1e-9)
    tl = late.timeline
    for step, g in tl[tl.state == "drafter_train"].groupby("step"):
        barrier = steps.at[step, "t_start"] + steps.at[step, "rollout_s"]
        over = g.t_end - barrier
        # each at or past the barrier (at it: still loading the drafter), by less than its span
        assert (over >= 0).all() and (over <= g.t_end - g.t_start).all()
        assert over.max() == pytest.approx(release[step])  # the last trainer holds the reward stage back
    for (step, w), g in tl.sort_values("t_start").groupby(["step", "worker"]):  # still tiles every step
        assert np.allclose(g.t_start.to_numpy()[1:], g.t_end.to_numpy()[:-1])
        assert g.t_end.iloc[-1] == pytest.approx(steps.at[step, "t_start"] + steps.at[step, "total_s"])


def test_the_checkpoint_seconds_come_off_every_training_span(shipped):
    """checkpoint_s: what each spot-training span spends saving the drafter when preempted; the rest trains
    (`tltsim validate` sets it to 0: a real trainer's save lies inside its measured span)."""
    runs = {c: run(shipped, "tlt", steps="0:1", load_s=0.0, checkpoint_s=c) for c in (0.0, 0.5)}
    tl = runs[0.0].timeline
    assert runs[0.5].timeline.equals(tl) and (tl.state == "drafter_train").any()  # the same spans
    spans = tl[tl.state == "drafter_train"].eval("t_end - t_start")
    assert (spans > 0.5).all()
    samples = {c: r.steps.at[0, "drafter_train_samples"] for c, r in runs.items()}
    assert samples[0.5] / samples[0.0] == pytest.approx(1 - 0.5 * len(spans) / spans.sum())
    with pytest.raises(TltsimError, match="checkpoint_s = -1"):
        make_policy("tlt", {"checkpoint_s": -1})


def test_min_idle_of_all_workers_means_no_training(shipped):
    res = run(shipped, "tlt", steps="0:3", min_idle=8)
    assert res.summary["drafter_train_gpu_seconds"] == 0.0


def test_dedicated_gpus_train_all_rollout_and_do_not_roll_out(shipped):
    res = run(shipped, "tlt-dedicated", steps="0:2", dedicated_gpus=8)
    tl = res.timeline
    assert set(res.requests["engine"]) == set(range(6))
    for w in (6, 7):
        states = tl[(tl.worker == w) & (tl.step == 0)].state.tolist()
        assert states == ["drafter_train", "reward", "train", "weight_sync"]
    with pytest.raises(TltsimError, match="dedicated_gpus = 6 must be a multiple of tp = 4"):
        run(shipped, "tlt-dedicated", steps="0:1", dedicated_gpus=6)


def test_fast_path_tracks_exact_with_speculation(shipped):
    fast = run(shipped, "tlt", steps="0:2", gpus=16)
    exact = run(shipped, "tlt", steps="0:2", gpus=16, exact=True)
    assert fast.summary["rollout_s"] == pytest.approx(exact.summary["rollout_s"], rel=0.03)
    assert fast.summary["mean_accepted"] == pytest.approx(exact.summary["mean_accepted"], rel=0.03)


def test_policy_knob_errors():
    with pytest.raises(TltsimError, match="unknown knob\\(s\\) thresh; its knobs are"):
        make_policy("tlt", {"thresh": 3})
    with pytest.raises(TltsimError, match="threshold = 0 must be an integer >= 1"):
        make_policy("tlt", {"threshold": 0})
    with pytest.raises(TltsimError, match="training = 'spot' needs a drafter with weights"):
        make_policy("tlt-base", {"training": "spot"})
    with pytest.raises(TltsimError, match="expected depth_topk_verify"):
        make_policy("tlt", {"arms": ["8-4-48"]})
    with pytest.raises(TltsimError, match="eps = nan must be a number in \\[0.0, 1.0\\]"):
        make_policy("tlt", {"eps": float("nan")})


@pytest.mark.parametrize("name", policy_names())
def test_a_policy_names_the_knobs_it_takes_and_holds_their_values(name):
    """The registry's factory and the policy it makes name the same knobs (`knob_names`); the policy holds a value
    for each (`knob_values`), the defaults where none was given."""
    from tltsim.policies import REGISTRY
    policy = make_policy(name)
    factories = [REGISTRY[name]] if name in REGISTRY else [REGISTRY[p] for p in name.split("+")]
    assert set(policy.knob_names) == {k for f in factories for k in f.knob_names}
    assert set(policy.knob_values) == set(policy.knob_names)


def test_compare_json_has_speedup_vs_the_first(tmp_path, capsys):
    rc = main(["compare", "--trace", SHIPPED, "--policies", "verl,tlt,tlt-base", "--gpus", "32", "--tp", "4",
               "--steps", "0:3", "-o", str(tmp_path), "--json", "--no-progress", "--no-report"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["policies"]
    assert [r["policy"] for r in rows] == ["verl", "tlt", "tlt-base"]
    assert rows[0]["speedup"] == 1.0 and rows[1]["speedup"] > 1.0
    assert rows[1]["speedup"] == pytest.approx(rows[0]["makespan_s"] / rows[1]["makespan_s"])


class SlowVerifyAboveOne(ConstantCost):
    """Verify 10 s at batch >= 2, 2 s at batch 1; a drafter forward 0.1 s per token (catch-ups cost)."""

    def verify_time(self, batch, tokens_per_request, ctx):
        return np.where(np.asarray(batch) >= 2, 10.0, 2.0)

    def draft_time(self, batch, topk=1):
        return 0.1 * np.asarray(batch, dtype=float) * topk


def test_guard_refusals_and_the_drafters_catch_up_by_hand():
    """Exact engine, 3 rows of 6, 12, 30 tokens, 4 tokens a verify; plain decoding 1 s; 4 drafter forwards."""
    from tests.sim.test_engine import run_exact
    sp = Speculation(control=EngineControl(SDSwitch("adaptive", 3, 1), FixedTuner("4_1_4"), SpeculationGuard()),
                     acceptance=FourTokens(), quality=0.9)
    sp.control.begin_rollout()
    ro = run_exact([10, 10, 10], [6, 12, 30], SlowVerifyAboveOne(), 8, sp)
    got = [(it["batch_size"], it["mode"], round(it["wall_s"], 9)) for it in ro.iterations]
    assert got == [
        (3, "decode", 1.0),  # patience 1, then the switch's re-prefill (0.5)
        (3, "spec_decode", 11.2),  # tried: 12 tokens in 4 x 0.3 + 10 s, slower than plain (3 tokens/s): refused
        (3, "decode", 1.0),  # the row of 6 finishes
        (2, "spec_decode", 11.0),  # tried: 0.8 + 10, plus the catch-up over 1 plain token x 2 rows (0.2)
        (2, "decode", 1.0), (2, "decode", 1.0),  # refused; the row of 12 finishes
        (1, "spec_decode", 2.6),  # tried: 0.4 + 2, plus catching up 2 tokens (0.2): 4 tokens / 2.4 s beats 1/s
        (1, "spec_decode", 2.4), (1, "spec_decode", 2.4), (1, "spec_decode", 2.4), (1, "spec_decode", 2.4),
    ]
    assert ro.duration == pytest.approx(0.5 + 0.5 + sum(w for _, _, w in got))


@pytest.mark.parametrize("policy, old, new", [
    ("tlt", {"drafter": "adaptive"}, {"drafter": "eagle", "training": "spot"}),
    ("tlt", {"drafter": "static", "spot": False}, {"drafter": "eagle", "training": "frozen"}),
    ("tlt", {"family": "draft-model"}, {"drafter": "draft_model", "training": "spot"}),
    ("tlt", {"spot": False, "cotrain": True}, {"drafter": "eagle", "training": "cotrain"}),
    ("tlt", {"drafter": "history", "spot": False}, {"drafter": "suffix", "training": "frozen"}),
    ("tlt-base", {"family": "mtp"}, {"drafter": "ngram", "training": "frozen"}),  # n-gram has no trained part
])
def test_the_drafters_older_knobs_read_as_the_two_it_has_now(recwarn, policy, old, new):
    from tltsim.core.errors import TltsimNote

    k = make_policy(policy, old).k
    assert (k.drafter, k.training) == (new["drafter"], new["training"])
    notes = [str(w.message) for w in recwarn if w.category is TltsimNote]
    assert len(notes) == len(old) and all(n.startswith(f"policy {policy!r}: knob ") for n in notes)


def test_an_older_knob_runs_as_the_knob_it_became():
    trace = load(SHIPPED)
    cfg = SimConfig(cluster=ClusterConfig(gpus=16, tp=4), steps="0:2")
    a = Simulator(trace, cfg, make_policy("tlt", {"drafter": "static", "spot": False})).run()
    b = Simulator(trace, cfg, make_policy("static-sd")).run()
    assert a.steps["total_s"].tolist() == b.steps["total_s"].tolist()


def test_a_config_drafter_family_reads_as_its_method(recwarn):
    from tltsim.config import from_dict
    from tltsim.core.errors import TltsimNote

    cfg = from_dict({"drafter": {"family": "block", "q_start": 0.5}}, "old.toml")
    assert (cfg.drafter.method, cfg.drafter.q_start) == ("dflash", 0.5)
    assert [str(w.message) for w in recwarn if w.category is TltsimNote] == [
        "old.toml: drafter.family = 'block' reads as drafter.method = 'dflash'"]


def test_a_combinations_older_drafter_knob_goes_to_its_speculating_part(recwarn):
    """Read against that part's own variant: das keeps its suffix drafter where `family` names a trained method."""
    from tltsim.core.errors import TltsimNote

    def speculating(policy):
        return next(p for p in policy.parts if hasattr(p, "k") and hasattr(p.k, "training"))

    assert speculating(make_policy("partial+tlt", {"spot": False, "ratio": 1.5})).k.training == "frozen"
    assert speculating(make_policy("partial+das", {"family": "mtp"})).k.drafter == "suffix"
    assert [str(w.message) for w in recwarn if w.category is TltsimNote] == [
        "policy 'tlt': knob spot = False reads as training = 'frozen' (the drafter's knobs are drafter, its method, "
        "and training: `tltsim policies`)",
        "policy 'das': knob family = 'mtp' is left out: the drafter is 'suffix' (the drafter's knobs are drafter, its "
        "method, and training: `tltsim policies`)"]


def test_an_older_knob_that_says_otherwise_than_a_knob_beside_it_is_refused():
    with pytest.raises(TltsimError, match="drafter = 'adaptive' \\(an older knob\\) means training = 'spot', but "
                                          "training = 'frozen' is given too"):
        make_policy("tlt", {"drafter": "adaptive", "training": "frozen"})


def test_dedicated_gpus_train_the_drafter_there_and_nothing_else_does():
    policy = make_policy("tlt-dedicated", {"spot": False})  # as tlt-dedicated always was: read as spot there
    assert policy.k.training == "spot" and policy.dedicated and not policy.trains_drafter
    with pytest.raises(TltsimError, match="dedicated_gpus keeps GPUs to spot-train the drafter on"):
        make_policy("tlt-dedicated", {"training": "frozen"})
