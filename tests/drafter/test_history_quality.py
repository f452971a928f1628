"""History drafting in the simulator: its acceptance model (tltsim.drafter.history_quality), fitted to published
acceptance on RL rollouts and to real/'s measurements, and the policies das and das+tlt."""
import json

import numpy as np
import pytest

from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.control.strategy import Strategy
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy, policy_names
from tltsim.policies.tlt import TLTPolicy
from tltsim.drafter import history_quality as hq
from tltsim.drafter.acceptance import AcceptanceModel
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

SHIPPED = "traces/synthetic/dapo_like.parquet"
MODEL = hq.HistoryQuality()


def test_more_history_never_lowers_quality():
    h = np.linspace(0, 40, 81)
    q = MODEL.quality(h)
    assert np.all(np.diff(q) >= 0) and q[-1] > q[0]
    for more in ([1, 0, 0], [0, 1, 0], [0, 0, 1]):  # one more finished, in-flight or earlier sibling
        base = MODEL.quality(MODEL.history(2, 3, 4))
        assert MODEL.quality(MODEL.history(*(np.array([2, 3, 4]) + more))) >= base


def test_no_siblings_and_no_repeats_is_the_prompt_only_quality():
    q = MODEL.of_step(group=[0, 1, 2], response_len=[10, 500, 3000], earlier=[0, 0, 0])
    assert q == pytest.approx([hq.Q_PROMPT] * 3)
    assert hq.HistoryDrafter().quality == hq.Q_PROMPT


def test_siblings_by_finishing_order():
    """Shorter siblings finished before a row (whole in the history); as long or longer ones are in flight with
    it; an aborted one (length 0) is neither."""
    finished, in_flight = hq.siblings([7, 7, 7, 7, 3, 3], [50, 10, 50, 0, 5, 9])
    assert finished.tolist() == [1, 0, 1, 0, 0, 1]
    assert in_flight.tolist() == [1, 2, 1, 0, 1, 0]
    q = MODEL.of_step([7, 7, 7], [300, 100, 200], [0, 0, 0])
    assert q[0] > q[2] > q[1]  # the longest has the most whole siblings to draft from


def test_the_rows_fit_the_constants_they_set_and_a_lower_line():
    """Refitting from real/'s recorded rows returns the constants they set (IN_FLIGHT, H_MAX, the lookup's cost), and
    a line below the stored one, which published reasoning rollouts set (SmolLM2's 32-token answers repeat less)."""
    rows = hq.read_rows()
    m = hq.fit(rows)
    assert m.in_flight == pytest.approx(hq.IN_FLIGHT, abs=1e-4)
    assert m.h_max == pytest.approx(hq.H_MAX, rel=1e-4)
    assert hq.fit_lookup(rows) == pytest.approx(hq.LOOKUP_FRACTION, rel=1e-3)
    assert m.quality(0) < hq.Q_PROMPT and m.quality(hq.H_MAX) < MODEL.quality(hq.H_MAX)


def test_the_stored_constants_are_the_fit_of_seers_figures():
    """Refitting Q_PROMPT and PER_SIBLING to Seer's published acceptance returns the stored ones."""
    m = hq.fit_published()
    assert (m.q_prompt, m.per_sibling) == pytest.approx((hq.Q_PROMPT, hq.PER_SIBLING), abs=1e-5)


@pytest.mark.parametrize("figure", hq.SEER_TAU, ids=lambda f: f"{f.workload}-{'grouped' if f.grouped else 'ungrouped'}")
def test_the_stored_model_accepts_what_seer_published_on_its_workloads(figure):
    """Each of Seer's Figure 11 figures (tokens a verify of suffix drafting in a rollout iteration on veRL) comes out
    within 5% on its Table 3 workload; the rows' SmolLM2 fit falls over 10% short of each."""
    assert hq.seer_tau(MODEL, figure) == pytest.approx(figure.tau, rel=0.05)
    assert hq.seer_tau(hq.fit(hq.read_rows()), figure) < 0.9 * figure.tau


def test_a_groups_siblings_raise_an_iterations_tau():
    """Drafting from the group accepts more than drafting from the prompt alone, on the same responses."""
    df = hq.seer_trace(hq.SEER_TAU[1]).df
    group, lengths = df["prompt_id"], df["response_len"]
    assert hq.iteration_tau(MODEL, group, lengths, 8, True) > hq.iteration_tau(MODEL, group, lengths, 8, False)


def test_fit_recovers_a_known_model():
    """Rows made from a known model's accepted lengths give that model back."""
    true = hq.HistoryQuality(0.25, 0.02, 0.4)
    am, rows = AcceptanceModel(), []
    for g in (4, 8):
        for j in range(g):
            for arrangement, pass_, h in (("one after another", "step 1", j), ("one after another", "step 2 (repeat)",
                                          g + j), ("in flight together", "step 1", j + 0.4 * (g - 1 - j))):
                rows.append({"kind": "acceptance", "task": "t", "group": g, "arrangement": arrangement,
                             "pass": pass_, "rank": j, "calls": 50, "strategy": "4_1_4",
                             "tokens_per_call": am.mean(Strategy.chain(4), float(true.quality(h)))})
    m = hq.fit(rows)
    assert (m.q_prompt, m.per_sibling, m.in_flight) == pytest.approx((0.25, 0.02, 0.4), abs=1e-6)
    assert m.h_max == pytest.approx(15)  # the repeat of the last of 8 siblings: 8 earlier + 7 finished


def test_no_extrapolation_past_the_fitted_history():
    m = hq.HistoryQuality(0.2, 0.05, 0.5, h_max=6.0)
    assert m.quality(6.0) == m.quality(60.0) == pytest.approx(0.5)
    assert hq.HistoryQuality(0.5, 0.1, 0.5, h_max=100.0).quality(50.0) == 1.0  # never above 1


def test_fit_refuses_too_few_rows(tmp_path):
    with pytest.raises(TltsimError, match="acceptance rows"):
        hq.fit([])
    bad = tmp_path / "rows.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(TltsimError, match="cannot read"):
        hq.read_rows(bad)


def test_history_drafts_a_chain_of_the_verify_tokens():
    acc = hq.ChainAcceptance()
    assert acc.mean(Strategy(8, 4, 16), 0.5) == pytest.approx(AcceptanceModel().mean(Strategy.chain(16), 0.5))


def test_hybrid_takes_the_better_quality_per_row():
    assert hq.hybrid([0.2, 0.8], 0.5).tolist() == [0.5, 0.8]


def test_das_and_das_tlt_are_variants_not_combinations():
    das, both = make_policy("das"), make_policy("das+tlt")
    assert isinstance(both, TLTPolicy) and both.name == "das+tlt" and both.k.drafter == "hybrid" and both.k.training == "spot"
    assert isinstance(das, TLTPolicy) and das.k.drafter == "suffix" and not das.trains_drafter
    assert policy_names().count("das+tlt") == 1 and "das" in policy_names()
    with pytest.raises(TltsimError, match="training = 'spot' needs a drafter with weights"):
        make_policy("das", {"training": "spot"})


def run(policy, knobs=None, steps="0:3"):
    cfg = SimConfig(cluster=ClusterConfig(gpus=32, tp=4), steps=steps)
    return Simulator(load(SHIPPED), cfg, make_policy(policy, knobs)).run()


def test_das_trains_nothing_and_speculates_das_tlt_trains():
    das, both = run("das"), run("das+tlt")
    assert das.summary["drafter_train_gpu_seconds"] == 0 and (das.steps["drafter_train_samples"] == 0).all()
    assert das.summary["sd_share"] > 0 and das.summary["mean_accepted"] > 1
    assert both.summary["drafter_train_gpu_seconds"] > 0 and both.summary["sd_share"] > 0
    assert (das.steps["drafter_quality"] > hq.Q_PROMPT).all()  # siblings finish first: more than the prompt's q


def test_repeats_count_only_when_asked():
    """With history_repeats, a prompt_id's earlier responses raise its quality in later steps; without, every
    step starts from its own siblings (the schema's prompt_id numbers prompts within a step)."""
    off, on = run("das", steps="0:3"), run("das", {"history_repeats": True}, steps="0:3")
    assert on.steps["drafter_quality"].iloc[0] == pytest.approx(off.steps["drafter_quality"].iloc[0])
    assert (on.steps["drafter_quality"].iloc[1:].to_numpy() > off.steps["drafter_quality"].iloc[1:].to_numpy()).all()


def test_lookup_is_charged():
    free, dear = (run("das", {"lookup_fraction": f}) for f in (0.0, 0.5))
    assert free.summary["makespan_s"] < dear.summary["makespan_s"]


def test_compare_runs_verl_tlt_das_and_das_tlt(tmp_path, capsys):
    rc = main(["compare", "--trace", SHIPPED, "--policies", "verl,tlt,das,das+tlt", "--gpus", "32", "--tp", "4",
               "--steps", "0:2", "-o", str(tmp_path), "--json", "--no-progress"])
    assert rc == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["policies"]}
    assert list(rows) == ["verl", "tlt", "das", "das+tlt"]
    assert rows["das"]["drafter_train_gpu_seconds"] == 0 and rows["das"]["sd_share"] > 0
    assert rows["das+tlt"]["drafter_train_gpu_seconds"] > 0
    assert "das+tlt" in (tmp_path / "report.html").read_text()
