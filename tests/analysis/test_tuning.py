"""The tuning answer: a TLT run's threshold, the bounded search around it, the setting to pass; in compare --json
(`recommended_knobs`) and in the report."""
import json
from html import escape as html_escape

import pytest

from tltsim.analysis.report.page import build_report
from tltsim.analysis.report.tuning import FACTORS, SEARCH_STEPS, tune
from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import simulate
from tltsim.trace import save, synth

# two engines of 64 requests on H100s: speculation pays at every batch, so tlt's fixed 32 leaves speed behind
TRACE = synth("lognormal", steps=4, prompts=16, group=8, max_len=8192, seed=0, median=1000)
CLUSTER = ClusterConfig(gpus=8, tp=4)


def result(policy, knobs=None, path="absent.parquet"):
    cfg = SimConfig(trace=str(path), policy=policy, policy_knobs=knobs or {}, cluster=CLUSTER)
    return simulate(TRACE, cfg, make_policy(policy, cfg.policy_knobs))


def test_a_tlt_run_is_told_a_larger_threshold_and_the_search_is_bounded():
    t = tune(result("tlt"), TRACE)
    assert t.threshold == 32 and t.buckets is None and t.own == "threshold=32"
    assert len(t.search) == len(FACTORS) + 1 and t.steps == SEARCH_STEPS  # the cost, whatever the run's length
    assert t.cost == f"{len(FACTORS) + 1} fast-path runs of {SEARCH_STEPS} steps each"
    makespans = [m for _, _, m in t.search]
    assert makespans == sorted(makespans)
    best = t.search[0]
    assert best[0] != "threshold=32" and t.recommended_knobs  # something beats the fixed 32 here ...
    assert t.recommended_knobs.get("threshold", 0) > 32 or t.recommended_knobs == {"sd": "learned"}
    assert t.recommended.startswith("--policy tlt --knob " if "threshold" in t.recommended_knobs else
                                    "--policy tlt-auto (that is, --policy tlt --knob sd=learned)")


def test_a_tlt_auto_run_reports_its_learned_buckets_and_keeps_its_setting_when_nothing_beats_it():
    r = result("tlt-auto")
    t = tune(r, TRACE)
    assert t.threshold == r.summary["sd_threshold"] and t.buckets == r.summary["sd_buckets"]
    assert t.own == "sd=learned" and "sd=learned" in [s for s, _, _ in t.search]
    own = next(m for s, _, m in t.search if s == "sd=learned")
    assert (t.recommended_knobs == {}) == (own <= t.search[0][2] / 0.98)


def test_only_simulated_tlt_runs_are_tuned_and_a_missing_trace_skips_it():
    assert tune(result("verl"), TRACE) is None and tune(result("sd-always"), TRACE) is None
    assert tune(result("tlt", {"sd": "never"}), TRACE) is None  # no switch to tune
    learned = tune(result("tlt", {"sd": "learned"}), TRACE)  # tlt told to learn is tlt-auto
    assert learned.own == "sd=learned" and learned.buckets is not None
    assert tune(result("tlt")) is None  # its config names a trace file that is not there


@pytest.mark.slow  # a compare of three policies with the search, then a report with its figures: about 13 s here
def test_compare_json_gives_recommended_knobs_and_the_report_the_same_answer(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    save(TRACE, path)
    rc = main(["compare", "--trace", str(path), "--gpus", "8", "--tp", "4", "--policies", "verl,tlt,tlt-auto",
               "-o", str(tmp_path / "out"), "--json", "--no-progress", "--no-report"])
    assert rc == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["policies"]}
    assert "recommended_knobs" not in rows["verl"]
    assert rows["tlt"]["recommended_knobs"] == tune(result("tlt", path=path)).recommended_knobs
    assert rows["tlt-auto"]["buckets"] == rows["tlt-auto"]["sd_buckets"]
    # the report says the same (given the answers, as compare gives them; without, it runs the search itself)
    runs = [result("verl", path=path), result("tlt", path=path)]
    html = build_report(runs, tunings=[None, tune(runs[1])])
    assert "Tuning the switch" in html and "6 fast-path runs of 3 steps each" in html
    assert f"Pass:</b> <code>{html_escape(tune(runs[1]).recommended)}</code>" in html
    assert "--knob" in tune(runs[1]).recommended
