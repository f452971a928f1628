"""Every figure renders on small results and carries the labels, series and bars it should."""
from dataclasses import replace

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest

from tltsim.analysis.report import plots
from tltsim.core.errors import TltsimError
from tltsim.analysis.report.plots.steps import parse_strategies, tuner_table
from tltsim.analysis.report.plots.style import labelled
from tltsim.analysis.report.plots.timeline import _occupancy, running_batch, switch_points
from tltsim.core.records import STATES

from tests.analysis.conftest import overlapping


def saved(fig, tmp_path, name="fig.png"):
    path = plots.save_png(fig, tmp_path / name)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left beside it
    return fig


def legend_texts(fig):
    return [t.get_text() for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)] if leg for t in leg.get_texts()]


def test_gantt_stacks_one_panel_per_run_with_state_colours(base, tlt, tmp_path):
    fig = saved(plots.gantt([base, tlt], step=1), tmp_path)
    axes = fig.axes
    assert len(axes) == 2
    assert axes[0].get_title(loc="left").startswith("verl: step 1")
    assert axes[1].get_title(loc="left").startswith("tlt: step 1")
    assert axes[-1].get_xlabel() == "time since step start (s)"
    assert axes[0].get_ylabel() == "engine (2 GPUs)"
    # one bar per timeline interval of the step, coloured by its state
    for ax, r in zip(axes, (base, tlt)):
        tl = r.timeline[r.timeline["step"] == 1]
        assert len(ax.patches) == len(tl)
    labels = legend_texts(fig)
    assert "spec decode" in labels and "decode" in labels and "idle" in labels
    assert labels == [s.replace("_", " ") for s in STATES if s.replace("_", " ") in labels]  # STATES order


def test_gantt_defaults_to_slowest_step_and_rejects_a_missing_one(base):
    slowest = int(base.steps.loc[base.steps["rollout_s"].idxmax(), "step"])
    assert plots.gantt(base).axes[0].get_title(loc="left").startswith(f"verl: step {slowest}")
    with pytest.raises(TltsimError, match="step 99 is not in the result"):
        plots.gantt(base, step=99)


def test_running_batch_rebuilt_from_requests():
    req = pd.DataFrame({"engine": [0, 0, 0, 1], "admitted_at": [0.0, 0.0, 2.0, 0.0],
                        "finished_at": [2.0, 3.0, 5.0, 1.0]})
    curves = running_batch(req)
    t, b = curves[0]
    # at t=2 one finishes and one is admitted: the count stays 2 with no spike
    assert t.tolist() == [0.0, 2.0, 3.0, 5.0] and b.tolist() == [2, 2, 1, 0]
    assert curves[1][0].tolist() == [0.0, 1.0] and curves[1][1].tolist() == [1, 0]


def test_switch_points_are_prefills_between_decode_and_spec_decode():
    tl = pd.DataFrame({"step": 0, "worker": [0, 0, 0, 0, 1, 1],
                       "state": ["prefill", "decode", "prefill", "spec_decode", "prefill", "spec_decode"],
                       "t_start": [0.0, 1, 5, 6, 0, 1], "t_end": [1.0, 5, 6, 9, 1, 4], "batch_size": [8.0, 8, 4, 4, 8, 8]})
    sw = switch_points(tl)
    # worker 1 speculates from its first prefill (sd always): no switch
    assert sw[["worker", "t_start", "batch_size"]].values.tolist() == [[0, 5.0, 4.0]]


def test_batch_size_marks_threshold_and_switches_when_speculating(base, tlt, tmp_path):
    fig = saved(plots.batch_size(tlt, step=0), tmp_path)
    ax = fig.axes[0]
    engines = tlt.requests.loc[tlt.requests["step"] == 0, "engine"].nunique()
    assert len(ax.get_lines()) >= engines + 2  # engine curves, threshold, switch markers
    assert ax.get_ylabel() == "running requests (log scale)" and ax.get_yscale() == "log"
    labels = legend_texts(fig)
    assert "SD threshold (8)" in labels
    n_switch = len(switch_points(tlt.timeline[tlt.timeline["step"] == 0]))
    assert n_switch > 0 and f"SD switch ({n_switch} engines)" in labels
    fig = plots.batch_size(base, step=0)
    assert legend_texts(fig) == [f"one line per engine ({engines})"]
    assert len(fig.axes[0].get_lines()) == engines


def test_occupancy_is_exact_per_bin():
    # intervals [0, 2) and [1, 4): bins [0,1) 1, [1,2) 2, [2,4) 1
    occ = _occupancy(np.array([0.0, 1.0]), np.array([2.0, 4.0]), np.array([0.0, 1.0, 2.0, 4.0]))
    assert occ.tolist() == [1.0, 2.0, 1.0]


def test_utilisation_stacks_states_up_to_all_gpus(tlt, tmp_path):
    fig = saved(plots.utilisation(tlt), tmp_path)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "GPUs" and ax.get_ylim() == (0, 8)
    present = set(tlt.timeline["state"])
    assert len(ax.collections) == len(present)
    top = ax.collections[-1].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(8.0)  # every GPU is in some state at every moment
    assert "steps" not in ax.get_title(loc="left")  # all 3 steps shown


def test_utilisation_of_a_long_run_shows_its_first_steps(base):
    ax = plots.utilisation(base, max_steps=2).axes[0]
    assert ax.get_title(loc="left").endswith("steps 0-1 of 3)")
    t1 = base.steps.loc[base.steps["step"] == 1]
    assert ax.get_xlim() == pytest.approx((0.0, float(t1["t_start"].iloc[0] + t1["total_s"].iloc[0])))
    idle = f"idle {base.summary['idle_fraction']:.0%}"
    assert plots.utilisation(base).axes[0].get_title(loc="left") == f"verl: GPUs by state over time ({idle} of GPU time)"
    with pytest.raises(TltsimError, match="none of the steps"):
        plots.utilisation(base, steps=[7])


def test_length_distribution_from_result_trace_and_frame(base, tmp_path):
    from tests.analysis.conftest import tiny_trace

    fig = saved(plots.length_distribution(base), tmp_path)
    hist, cdf = fig.axes[:2]
    assert hist.get_xscale() == "log" and cdf.get_xscale() == "log"
    assert hist.get_xlabel() == "response length (tokens, log scale)"
    assert cdf.get_ylabel() == "fraction of responses ≤ length"
    steps = base.requests["step"].nunique()
    assert len(cdf.get_lines()) == steps + 1  # one CDF per step and the overall one
    p50 = np.quantile(base.requests["response_len"], 0.5)
    assert f"p50 = {p50:,.0f}" in legend_texts(fig)
    trace_fig = plots.length_distribution(tiny_trace(), steps=[0])
    assert len(trace_fig.axes[1].get_lines()) == 2
    with pytest.raises(TltsimError, match="no responses"):
        plots.length_distribution(base.requests, steps=[42])


def test_step_breakdown_has_a_bar_per_run_and_phase_fastest_on_top(base, tlt, tmp_path):
    fig = saved(plots.step_breakdown([base, tlt]), tmp_path)
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * 4
    assert [t.get_text() for t in ax.get_yticklabels()] == ["tlt", "verl"]  # ranked as the speedup chart
    assert ax.get_ylim()[0] > ax.get_ylim()[1]
    assert ax.get_xlabel() == "mean time per step (s)"
    assert legend_texts(fig) == ["rollout", "reward", "train", "weight sync"]
    ends = [p.get_x() + p.get_width() for p in ax.patches[-2:]]
    assert ends == pytest.approx([tlt.steps["total_s"].mean(), base.steps["total_s"].mean()])
    slow = replace(tlt, summary={**tlt.summary, "makespan_s": 2 * base.summary["makespan_s"]})
    assert [t.get_text() for t in plots.step_breakdown([base, slow]).axes[0].get_yticklabels()] == ["verl", "tlt"]
    assert ([t.get_text() for t in plots.step_breakdown([base, slow]).axes[0].get_yticklabels()]
            == [t.get_text() for t in plots.speedup([base, slow]).axes[0].get_yticklabels()])


def test_speedup_panels_rank_runs_end_to_end_and_by_rollout(base, tlt, tmp_path):
    fig = saved(plots.speedup([base, tlt]), tmp_path)
    end, roll = fig.axes
    assert [t.get_text() for t in end.get_yticklabels()] == ["tlt", "verl"]  # fastest on top
    assert [p.get_width() for p in end.patches] == pytest.approx(
        [base.summary["makespan_s"] / tlt.summary["makespan_s"], 1.0])
    assert [p.get_width() for p in roll.patches] == pytest.approx(
        [base.summary["rollout_s"] / tlt.summary["rollout_s"], 1.0])
    assert end.get_title(loc="left") == "Speedup over verl: end to end (makespan)"
    assert roll.get_xscale() == "linear"  # the bars differ less than tenfold


def test_speedup_leaves_out_a_rollout_that_overlaps_training_and_goes_log_past_tenfold(base, tlt):
    fast = replace(overlapping(tlt), summary={**tlt.summary, "rollout_s": base.summary["rollout_s"] / 80})
    roll = plots.speedup([base, fast]).axes[1]
    assert [p.get_width() for p in roll.patches] == [0.0, 1.0]  # no bar for the overlapping run ...
    assert any("not comparable" in t.get_text() for t in roll.texts)  # ... but a note
    assert roll.get_xscale() == "linear"  # its 80x is not drawn, so nothing stretches the axis
    slow = replace(base, summary={**base.summary, "rollout_s": base.summary["rollout_s"] * 20})
    assert plots.speedup([base, slow]).axes[1].get_xscale() == "log"  # 1x and 0.05x: tenfold apart


def never_idle(result, policy):
    """`result` renamed `policy`, with no idle time (neither in its timeline nor in its summary)."""
    tl = result.timeline
    return replace(result, timeline=tl[tl["state"] != "idle"].reset_index(drop=True),
                   summary={**result.summary, "policy": policy, "idle_fraction": 0.0, "idle_gpu_seconds": 0.0})


def test_idle_per_step_draws_only_the_runs_that_idle_each_its_own_look(base, tlt, tmp_path):
    assert base.summary["idle_fraction"] > 0.01
    other = replace(base, summary={**base.summary, "policy": "migrate"})
    quiet = [never_idle(tlt, p) for p in ("tlt", "sd-always", "tlt-auto", "partial", "tail-batching")]
    fig = saved(plots.idle_per_step([base, other, *quiet]), tmp_path)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2  # five of the seven runs never idle: not drawn as lines flat on 0
    looks = {(line.get_color(), line.get_marker()) for line in lines}
    assert len(looks) == 2
    assert ax.get_ylabel() == "idle GPU-seconds"
    assert ax.get_xlabel() == "RL step\nnever idle (not drawn): tlt, sd-always, tlt-auto, partial, tail-batching"
    assert lines[0].get_ydata().sum() == pytest.approx(base.summary["idle_gpu_seconds"])
    assert legend_texts(fig)[0].startswith("verl (")
    alone = plots.idle_per_step([base])
    assert len(alone.axes[0].get_lines()) == 1 and alone.axes[0].get_xlabel() == "RL step"
    none = plots.idle_per_step(quiet[:2]).axes[0]
    assert not none.get_lines() and any("no run left GPUs idle" in t.get_text() for t in none.texts)


def test_a_policy_has_one_colour_whichever_runs_are_drawn(base, tlt):
    """The report draws every policy, a notebook a few: each policy keeps its colour (tltsim.analysis.report.plots.style)."""
    from tltsim.analysis.report.plots.style import policy_color, run_colors

    ours = plots.speedup([base, tlt]).axes[0]
    assert {p.get_facecolor()[:3] for p in ours.patches} == {
        mpl.colors.to_rgb(policy_color("verl")), mpl.colors.to_rgb(policy_color("tlt"))}
    other = replace(base, summary={**base.summary, "policy": "partial"})
    assert run_colors(labelled([base, other, tlt]))["tlt"] == run_colors(labelled([tlt]))["tlt"] == policy_color("tlt")
    twice = run_colors(labelled([base, tlt, tlt]))
    assert twice["tlt #2"] not in {policy_color("verl"), policy_color("tlt")}  # a repeat gets a colour of its own
    # two unregistered combinations whose hashed colours are the same get one each, the registered keep theirs
    pair = [replace(base, summary={**base.summary, "policy": p}) for p in ("async+sd-always", "async+tlt-auto")]
    assert policy_color("async+sd-always") == policy_color("async+tlt-auto")
    mixed = run_colors(labelled([base, *pair, tlt]))
    assert len(set(mixed.values())) == 4 and mixed["verl"] == policy_color("verl") and mixed["tlt"] == policy_color("tlt")


def test_gantt_says_where_a_step_began_before_its_start(base):
    """Async generates a step's responses beside the previous step's training: those rows start before the step;
    its panel marks the step's start and says what lies left of it."""
    early = base.timeline.copy()
    t0 = float(base.steps.loc[base.steps["step"] == 1, "t_start"].iloc[0])
    first = early.index[(early["step"] == 1) & (early["state"] == "decode")][0]
    early.loc[first, "t_start"] = t0 - 2.5
    fig = plots.gantt([base, replace(base, timeline=early)], step=1)
    plain, shifted = fig.axes[:2]
    assert plain.get_title(loc="right") == ""
    assert shifted.get_title(loc="right").startswith("left of the dashed line (the step's start): the step's rollout")
    assert "begun 2.5 s earlier" in shifted.get_title(loc="right")
    assert any(list(line.get_xdata()) == [0, 0] for line in shifted.get_lines())


def test_drafter_panels_follow_the_columns_present(base, tlt, tmp_path):
    fig = saved(plots.drafter([base, tlt]), tmp_path)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["Accepted length", "Drafter quality", "Drafter training per step"]
    assert all(ax.get_xlabel() == "RL step" for ax in fig.axes)
    assert legend_texts(fig) == ["tlt"]  # verl has no speculative data to draw
    empty = plots.drafter(base)
    assert [t.get_text() for t in empty.axes[0].texts] == ["no speculative decoding in these runs"]


def test_tuner_choices_per_step_and_per_batch_size(tlt, tlt_exact, base, tmp_path):
    fig = saved(plots.tuner_choices(tlt), tmp_path)
    ax = fig.axes[0]
    share, xlabel = tuner_table(tlt)
    assert xlabel == "RL step" and ax.get_xlabel() == "RL step"
    assert len(ax.patches) == share.size
    assert np.allclose(share.sum(axis=1), 1.0)
    fig = plots.tuner_choices(tlt_exact)
    share, xlabel = tuner_table(tlt_exact)
    assert xlabel == "running batch size" and fig.axes[0].get_xlabel() == "running batch size"
    assert set(share.columns) <= set(legend_texts(fig))
    assert share.index[0] in ("1", "2-3", "4-7", "8-15")
    assert [t.get_text() for t in plots.tuner_choices(base).axes[0].texts] == ["verl: no speculative decoding in this run"]


def test_parse_strategies():
    assert parse_strategies("8_4_48:120,8_4_16:30.5") == {"8_4_48": 120.0, "8_4_16": 30.5}
    assert parse_strategies("") == {}


def test_sweep_lines_and_heatmap(tmp_path):
    table = pd.DataFrame({"cluster.gpus": [8, 8, 16, 16], "policy_knobs.threshold": [8, 32, 8, 32],
                          "mean_step_s": [4.0, 3.0, 2.5, 2.0]})
    fig = saved(plots.sweep_lines(table, "cluster.gpus", "mean_step_s", by=["policy_knobs.threshold"]), tmp_path)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "cluster.gpus" and ax.get_ylabel() == "mean step time (s)"
    assert legend_texts(fig) == ["policy_knobs.threshold=8", "policy_knobs.threshold=32"]
    assert ax.get_lines()[0].get_ydata().tolist() == [4.0, 2.5]
    fig = plots.sweep_heatmap(table, "cluster.gpus", "policy_knobs.threshold", "mean_step_s")
    ax = fig.axes[0]
    assert ax.images[0].get_array().tolist() == [[4.0, 2.5], [3.0, 2.0]]
    assert sorted(t.get_text() for t in ax.texts) == ["2", "2.5", "3", "4"]
    assert plots.sweep_figure(table, ["cluster.gpus", "policy_knobs.threshold"], "mean_step_s").axes[0].images
    assert plots.sweep_figure(table, [], "mean_step_s") is None
    with pytest.raises(TltsimError, match="several runs share"):
        plots.sweep_heatmap(pd.concat([table, table]), "cluster.gpus", "policy_knobs.threshold", "mean_step_s")


def test_sweep_lines_with_a_categorical_key():
    table = pd.DataFrame({"policy": ["verl", "tlt"], "mean_step_s": [4.0, 3.0]})
    ax = plots.sweep_figure(table, ["policy"], "mean_step_s").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["verl", "tlt"]


def test_sweep_bars_when_no_swept_key_is_numeric(tmp_path):
    table = pd.DataFrame({"policy": ["verl", "tlt", "tlt"], "policy_knobs.tuner": [np.nan, "beg", "ucb"],
                          "mean_step_s": [4.0, 3.0, 3.5]})
    fig = saved(plots.sweep_figure(table, ["policy", "policy_knobs.tuner"], "mean_step_s"), tmp_path)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["policy=verl", "policy=tlt, tuner=beg",
                                                           "policy=tlt, tuner=ucb"]
    assert [p.get_width() for p in ax.patches] == [4.0, 3.0, 3.5]
    assert ax.get_xlabel() == "mean step time (s)"


def test_many_steps_are_thinned_or_pooled(tlt):
    from tests.analysis.conftest import tiny_trace

    fig = plots.length_distribution(tiny_trace(steps=5), max_cdfs=3)
    assert len(fig.axes[1].get_lines()) == 3 + 1
    assert fig.axes[1].get_title(loc="left") == "CDF per step (3 of 5 steps) and overall"
    share, xlabel = tuner_table(tlt, max_rows=2)
    assert xlabel == "RL steps" and share.index.tolist() == ["0-1", "2"]
    assert np.allclose(share.sum(axis=1), 1.0)


def test_sd_always_draws_no_threshold():
    from tests.analysis.conftest import run

    r = run("sd-always", steps=1)
    assert (r.timeline["state"] == "spec_decode").any()
    labels = legend_texts(plots.batch_size(r))
    assert not any(t.startswith("SD threshold") or t.startswith("SD switch") for t in labels)


def test_unfinished_requests_run_until_the_rollout_stops():
    from tests.analysis.conftest import run

    r = run("partial", steps=1)  # partial rollout stops once enough groups finished
    stopped = r.requests["finished_at"].isna()
    assert stopped.any()
    ax = plots.batch_size(r, step=0).axes[0]
    ends = [line.get_xdata()[-1] for line in ax.get_lines()]
    busy = r.requests[stopped]["engine"].nunique()
    assert sum(e == pytest.approx(r.steps["rollout_s"].iloc[0]) for e in ends) == busy
