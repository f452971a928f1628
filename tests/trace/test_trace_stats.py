"""Statistics against cases worked out by hand."""
import pandas as pd
import pytest

from tltsim.trace import Trace, TraceMeta, stats, tail_share
from tltsim.trace.stats import AGENTIC_FIGURES, FIGURES, t90


def one_step_per_list(*steps, **extra):
    rows = [{"step": s, "prompt_id": i, "sample": 0, "prompt_len": 1, "response_len": L}
            for s, lengths in enumerate(steps) for i, L in enumerate(lengths)]
    return pd.DataFrame(rows).assign(**extra)


@pytest.mark.parametrize("lengths, t, share", [
    (list(range(1, 11)), 9, 0.1),          # n=10: ceil(9) = 9th shortest
    (list(range(1, 12)), 10, 1 / 11),      # n=11: ceil(9.9) = 10th
    ([5] * 9 + [100], 5, 0.95),            # one straggler holds 95% of the makespan
    ([3, 1, 2], 3, 0.0),                   # n=3: ceil(2.7) = 3rd, the max itself
    ([7], 7, 0.0),
    (list(range(1, 71)), 63, 7 / 70),      # n=70: 0.9*70 is 63.000...01 in floats; the 63rd, not the 64th
])
def test_t90_and_tail_share(lengths, t, share):
    assert t90(lengths) == t
    assert tail_share(lengths) == pytest.approx(share)


def test_stats_hand_computed():
    # step 0: 1..10; step 1: 1, 1, 1, 100
    tr = Trace.from_frame(one_step_per_list(list(range(1, 11)), [1, 1, 1, 100]), TraceMeta(max_response_len=100))
    st = stats(tr)
    s0, s1 = st["per_step"]
    assert s0 == {"step": 0, "responses": 10, "mean": 5.5, "median": 5.5,
                  "p90": pytest.approx(9.1), "p99": pytest.approx(9.91), "max": 10,
                  "max_over_median": pytest.approx(10 / 5.5), "tail_share": pytest.approx(0.1),
                  "truncated_fraction": 0.0, "aborted_fraction": 0.0}
    # n=4: p90 by linear interpolation = 1 + 0.7 * 99; t90 = 4th shortest = 100; 1 of 4 at the cap
    assert s1["p90"] == pytest.approx(70.3) and s1["median"] == 1.0 and s1["tail_share"] == 0.0
    assert s1["truncated_fraction"] == 0.25 and s1["max_over_median"] == 100.0
    assert st["steps"] == 2 and st["responses"] == 14 and "count" not in st
    assert list(st) == ["steps", *FIGURES, "per_step"] and list(s1) == ["step", *FIGURES]
    assert st["max"] == 100 and st["median"] == 4.5 and st["mean"] == pytest.approx(158 / 14)
    # overall tail share: (10 - 9 + 100 - 100) / (10 + 100)
    assert st["tail_share"] == pytest.approx(1 / 110)
    assert st["truncated_fraction"] == pytest.approx(1 / 14)


def test_aborted_rows_count_in_the_share_not_in_the_lengths():
    # step 0: 1..10 and two aborted requests (no tokens); the length figures are those of 1..10
    df = one_step_per_list(list(range(1, 11)) + [0, 0])
    df["aborted"] = df["response_len"] == 0
    st = stats(Trace.from_frame(df, TraceMeta(max_response_len=100)))
    s0 = st["per_step"][0]
    assert (s0["responses"], s0["aborted_fraction"]) == (12, pytest.approx(2 / 12))
    assert (s0["median"], s0["max"], s0["tail_share"], s0["truncated_fraction"]) == (5.5, 10, pytest.approx(0.1), 0.0)
    assert st["aborted_fraction"] == pytest.approx(2 / 12) and st["mean"] == 5.5


def test_truncation_from_finished_column_wins_over_cap():
    df = one_step_per_list([4, 8, 8, 2], finished=[True, False, True, True])
    st = stats(Trace.from_frame(df, TraceMeta(max_response_len=8)))
    assert st["truncated_fraction"] == 0.25


def test_truncation_unknown_without_cap_or_finished():
    st = stats(Trace.from_frame(one_step_per_list([4, 8])))
    assert st["truncated_fraction"] is None and st["per_step"][0]["truncated_fraction"] is None


def test_group_of_samples_counts_each_response():
    df = pd.DataFrame({"step": [0] * 4, "prompt_id": [0, 0, 1, 1], "sample": [0, 1, 0, 1],
                       "prompt_len": 1, "response_len": [2, 4, 6, 8]})
    st = stats(Trace.from_frame(df))
    assert st["responses"] == 4 and st["median"] == 5.0 and st["tail_share"] == 0.0


def agentic_frame(**extra):
    """Step 0: a trajectory of two turns (one tool call) and one of one turn; step 1: one of three turns (two calls)."""
    return pd.DataFrame({"step": [0, 0, 1], "prompt_id": [0, 1, 0], "sample": [0, 0, 0], "prompt_len": [9, 9, 9],
                         "response_len": [30, 5, 12], "turn_response_len": [[10, 20], [5], [4, 4, 4]],
                         "tool_latency_s": [[0.5, None], [None], [1.0, 2.5, None]],
                         "tool_tokens": [[100, 0], [0], [7, 8, 0]]}).assign(**extra)


def test_a_multi_turn_trace_counts_turns_tool_calls_and_the_tool_wait():
    st = stats(Trace.from_frame(agentic_frame(turn_gen_s=[[1.0, 2.0], [0.5], [1.0, 1.0, 1.0]])))
    s0, s1 = st["per_step"]
    assert {k: s0[k] for k in AGENTIC_FIGURES} == {"trajectories": 2, "turns": 3, "tool_calls": 1,
                                                   "completion_tokens": 35, "tool_latency_s": 0.5,
                                                   "tool_wait_share": 0.5 / (0.5 + 3.5)}
    assert (s1["turns"], s1["tool_calls"], s1["tool_latency_s"], s1["tool_wait_share"]) == (3, 2, 3.5, 3.5 / 6.5)
    assert {k: st[k] for k in AGENTIC_FIGURES} == {"trajectories": 3, "turns": 6, "tool_calls": 3,
                                                   "completion_tokens": 47, "tool_latency_s": 4.0,
                                                   "tool_wait_share": 4.0 / (4.0 + 6.5)}


def test_without_generation_seconds_the_tool_wait_is_null_and_single_turn_traces_have_no_turn_figures(tmp_path, capsys):
    from tltsim.cli import main
    from tltsim.trace import save

    t = Trace.from_frame(agentic_frame())
    assert stats(t)["tool_wait_share"] is None and stats(t)["tool_calls"] == 3
    plain = stats(Trace.from_frame(one_step_per_list([1, 2, 3])))
    assert not set(AGENTIC_FIGURES) & set(plain) and not set(AGENTIC_FIGURES) & set(plain["per_step"][0])
    f = save(t, tmp_path / "t.parquet")
    assert main(["trace", "stats", str(f)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(lines) if x.split()[:2] == ["step", "trajectories"])
    assert lines[head].split() == ["step", "trajectories", "turns", "tool_calls", "completion_tokens",
                                   "tool_latency_s", "tool_wait%"]
    assert lines[head + 3].split() == ["all", "3", "6", "3", "47", "4.0", "-"]
    assert main(["trace", "stats", str(save(Trace.from_frame(one_step_per_list([1, 2])), tmp_path / "p.parquet"))]) == 0
    assert "trajectories" not in capsys.readouterr().out
