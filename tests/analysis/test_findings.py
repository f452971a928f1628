"""The report's summary is read from the results: change the data and the ranking and sentences change."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tltsim.analysis.report import findings
from tltsim.core.summary import rollout_overlap
from tests.analysis.conftest import overlapping


def edited(result, config=None, **summary):
    """`result` with summary keys (and policy knobs) replaced."""
    cfg = dict(result.config)
    if config:
        cfg["policy_knobs"] = {**cfg.get("policy_knobs", {}), **config}
    return replace(result, summary={**result.summary, **summary}, config=cfg)


def by_label(found):
    return {f.label: f for f in found}


def test_rank_orders_policies_by_speedup_and_follows_the_makespans(base, tlt):
    found = findings.rank([base, tlt])
    assert [f.label for f in found] == ["tlt", "verl"]
    assert found[0].speedup == pytest.approx(base.summary["makespan_s"] / tlt.summary["makespan_s"])
    assert found[0].why.startswith(f"{found[0].speedup:.2f}× faster")
    slow = edited(tlt, makespan_s=2 * base.summary["makespan_s"])  # the same run, twice as long as verl
    found = findings.rank([base, slow])
    assert [f.label for f in found] == ["verl", "tlt"]
    assert by_label(found)["tlt"].why.startswith("2.00× slower")
    level = edited(tlt, makespan_s=base.summary["makespan_s"] * 1.01)
    assert by_label(findings.rank([base, level]))["tlt"].why.startswith("no faster (0.99×)")


def test_the_reason_names_speculation_only_when_the_run_speculated(base, tlt):
    why = by_label(findings.rank([base, tlt]))["tlt"].why
    assert f"speculative decoding in {tlt.summary['sd_share']:.0%} of engine time" in why
    assert f"at {tlt.summary['mean_accepted']:.2f} tokens per verify" in why
    plain = edited(tlt, sd_share=0.0)
    assert "speculative" not in by_label(findings.rank([base, plain]))["tlt"].why
    # a drafter well below the best speculating run's is called weak, naming that run
    weak = replace(edited(tlt, mean_accepted=2.0, policy="tlt-base"))
    why = by_label(findings.rank([base, tlt, weak]))["tlt-base"].why
    assert f"a weak drafter (the best here: {tlt.summary['mean_accepted']:.2f}, tlt)" in why


def test_off_policy_cost_is_read_from_staleness_resumed_dropped_and_length_mix(base, tlt):
    assert by_label(findings.rank([base, tlt]))["tlt"].cost == "none (on-policy)"
    stale = edited(tlt, staleness_mean=0.5, staleness_max=3, resumed_fraction=0.25, dropped_fraction=0.1,
                   trained_len_ratio=0.96)
    f = by_label(findings.rank([base, stale]))["tlt"]
    assert f.cost == ("staleness 0.50 versions (max 3), 25% of trained responses resumed, 10% of generated "
                      "responses dropped, trained responses 4.0% shorter than the trace's")
    assert not f.on_policy
    assert "carries unfinished responses into the next step (25% of trained responses resumed)" in f.why
    dropped_only = edited(tlt, dropped_fraction=0.1)
    f = by_label(findings.rank([base, dropped_only]))["tlt"]
    assert not f.on_policy and f.cost == "10% of generated responses dropped"  # on-policy: none stale, none dropped


def test_headline_names_the_fastest_and_the_fastest_on_policy(base, tlt):
    assert findings.headline(findings.rank([base, tlt]), "verl").startswith(
        f"Fastest here: tlt, {base.summary['makespan_s'] / tlt.summary['makespan_s']:.2f}× over verl, "
        "off-policy cost: none (on-policy).")
    stale = edited(tlt, staleness_mean=1.0, staleness_max=1)
    text = findings.headline(findings.rank([base, stale]), "verl")
    assert "off-policy cost: staleness 1.00 versions (max 1)" in text and "Fastest on-policy: verl, 1.00×." in text
    assert "))" not in text  # an on-policy run's cost is not repeated in parentheses


def test_the_fastest_on_policy_run_drops_no_responses(base, tlt):
    """A run that aborts its tail (tail-batching) is fast but not on-policy: the headline passes over it."""
    stale = edited(tlt, staleness_mean=1.0, staleness_max=1, makespan_s=base.summary["makespan_s"] / 3)
    dropping = replace(edited(tlt, dropped_fraction=0.17, makespan_s=base.summary["makespan_s"] / 2),
                       summary={**tlt.summary, "policy": "tail-batching", "dropped_fraction": 0.17,
                                "makespan_s": base.summary["makespan_s"] / 2})
    text = findings.headline(findings.rank([base, stale, dropping]), "verl")
    assert text.startswith("Fastest here: tlt,")
    assert "Fastest on-policy: verl, 1.00×." in text and "Fastest on-policy: tail-batching" not in text


def test_a_bound_is_ranked_apart_and_its_explanation_says_who_beats_it(base, tlt):
    slower_bound = edited(base, policy="ideal", makespan_s=tlt.summary["makespan_s"] * 1.2)
    found = findings.rank([base, tlt, slower_bound])
    assert [f.label for f in found] == ["tlt", "verl", "ideal"]  # the bound last, though faster than verl
    assert found[-1].bound is not None and found[0].bound is None
    text, = [t for t in findings.explanations([base, tlt, slower_bound]) if t.startswith("ideal is a bound")]
    assert "plain synchronous decoding" in text
    assert f"Beating it here: tlt (it speculates ({tlt.summary['sd_share']:.0%} of engine time))." in text
    faster_bound = edited(base, policy="ideal", makespan_s=tlt.summary["makespan_s"] * 0.8)
    text, = [t for t in findings.explanations([base, tlt, faster_bound]) if t.startswith("ideal is a bound")]
    assert "No policy beats it here end to end; the closest is tlt" in text
    assert "ideal (" in findings.headline(findings.rank([base, tlt, faster_bound]), "verl")


def test_a_rollout_beside_training_is_not_comparable(base, tlt):
    assert rollout_overlap(tlt.timeline) == 0.0
    beside = overlapping(tlt)
    assert rollout_overlap(beside.timeline) == pytest.approx(1.0)
    f = by_label(findings.rank([base, beside]))["tlt"]
    assert np.isnan(f.rollout_speedup)
    assert "its rollout runs beside training (100% of its generation time overlaps training)" in f.why
    texts = findings.explanations([base, beside])
    assert any(t.startswith("tlt's rollout speedup") and "is not comparable" in t for t in texts)
    assert not any("rollout speedup" in t for t in findings.explanations([base, tlt]))


def test_rollout_overlap_measures_generation_time_under_merged_training_intervals():
    tl = pd.DataFrame({"state": ["train", "train", "reward", "decode", "prefill", "idle"],
                       "t_start": [0.0, 5.0, 20.0, 8.0, 40.0, 0.0], "t_end": [10.0, 12.0, 30.0, 22.0, 41.0, 50.0]})
    # decode 8..22 lies under training for 8..12 and 20..22 (6 s); prefill 40..41 under none
    assert rollout_overlap(tl) == pytest.approx(6.0 / 15.0)
    assert rollout_overlap(tl[tl["state"] != "train"].assign(state="decode")) == 0.0


def test_zero_idle_is_explained_by_drafter_training_only_when_the_drafter_trained(base, tlt):
    spot = edited(tlt, idle_fraction=0.0, drafter_train_gpu_seconds=0.3 * tlt.summary["gpu_seconds"])
    dedicated = edited(tlt, policy="tlt-dedicated", idle_fraction=0.377, drafter_train_gpu_seconds=5.0)
    text, = findings.explanations([base, spot, dedicated])
    assert text.startswith("tlt (") and "30% of its GPU time): idle_fraction 0.000 because" in text
    assert "tlt-dedicated trains its drafter for 5 GPU-s only and leaves those GPUs idle (idle_fraction 0.377)" in text
    no_drafter = edited(tlt, idle_fraction=0.0, drafter_train_gpu_seconds=0.0)
    assert findings.explanations([base, no_drafter]) == []


def test_speculating_more_than_the_adaptive_switch_is_explained_when_it_wins(base, tlt):
    adaptive = edited(tlt, config={"threshold": 32}, sd_share=0.69, mean_accepted=6.4)
    always = edited(tlt, policy="sd-always", sd_share=0.99, mean_accepted=6.3,
                    makespan_s=tlt.summary["makespan_s"] * 0.9, rollout_s=tlt.summary["rollout_s"] * 0.85)
    text, = [t for t in findings.explanations([base, adaptive, always]) if t.startswith("sd-always beats")]
    assert text.startswith("sd-always beats tlt: it speculates in 99% of engine time against 69% (the adaptive")
    assert "falls to 32 requests" in text
    assert "with a drafter no better (6.30 tokens per verify against 6.40)" in text
    # slower, it has nothing to explain; with a better drafter, the drafter may be why it wins
    slower = edited(always, makespan_s=tlt.summary["makespan_s"] * 1.1)
    assert not any(t.startswith("sd-always beats") for t in findings.explanations([base, adaptive, slower]))
    better = edited(always, mean_accepted=7.5)
    assert not any(t.startswith("sd-always beats") for t in findings.explanations([base, adaptive, better]))


def test_a_plain_policy_that_beats_the_bound_end_to_end_says_how():
    # migrate's released engines start the reward stage's log-prob forwards before the barrier: a shorter makespan
    # than ideal's, though no step's rollout is shorter (tests/sim/test_ideal.py)
    from tltsim.config import ClusterConfig, SimConfig
    from tltsim.policies import make_policy
    from tltsim.sim.simulator import Simulator
    from tltsim.trace import load

    trace = load("traces/synthetic/dapo_like.parquet").select_steps(range(3))
    cfg = SimConfig(cluster=ClusterConfig(gpus=64, tp=4))
    runs = [Simulator(trace, cfg, make_policy(p)).run() for p in ("verl", "ideal", "migrate")]
    assert runs[2].summary["makespan_s"] < runs[1].summary["makespan_s"] < runs[0].summary["makespan_s"]
    text, = [t for t in findings.explanations(runs) if t.startswith("ideal is a bound")]
    assert "Beating it here: migrate (it starts the reward stage before its rollout ends (" in text
    assert "Rollout shorter than its own" not in text


def test_runs_that_tie_on_every_figure_are_named_with_why_when_both_speculated_from_the_start():
    from tltsim.config import ClusterConfig, SimConfig
    from tltsim.policies import make_policy
    from tltsim.sim.simulator import Simulator
    from tltsim.trace import load

    # 48 requests an engine at most: tlt-auto's learned threshold is above it, so it speculates from the first
    # token as sd-always does; tlt's switch waits for a batch of 32
    trace = load("traces/synthetic/dapo_like.parquet")
    cfg = SimConfig(cluster=ClusterConfig(gpus=64, tp=4), steps="0:2")
    runs = [Simulator(trace, cfg, make_policy(p)).run() for p in ("verl", "tlt", "sd-always", "tlt-auto")]
    ties = [e for e in findings.explanations(runs) if "tie on every figure" in e]
    assert len(ties) == 1 and ties[0].startswith("sd-always and tlt-auto tie")
    assert "sd-always speculates from the first token and tlt-auto switches at a batch of" in ties[0]
    assert "each speculated from its engines' first iteration" in ties[0]
    assert not [e for e in findings.explanations(runs[:2]) if "tie on every figure" in e]
