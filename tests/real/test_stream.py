"""The policies that draw from the prompt stream in a real run (real/run/stream.py: partial rollout, tail batching):
the same decisions as the simulator's on the same lengths, an engine that stops mid-row and a row resumed from its
tokens, runs that train whole groups, carry or park the rest and resume so, and validate's replay of them."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dict_store import DictStore

from real.run.stream import PartialSteps, TailSteps
from tltsim.control.groups import group_shares, quota_stop
from tltsim.control.partial import PartialControl, PartialKnobs
from tltsim.control.tail import TailBatchingKnobs, TailControl
from tltsim.core.off_policy import off_policy_columns


def _real_step(steps: PartialSteps, step: int, store: DictStore, full: dict, workers: int):
    """One real step (partial or tail-batching) on `workers` workers whose rows generate a token a second each from the step's start
    (rows that need no engine have finished): each worker tells its quota its rows as they finish, in time order,
    and reads the others' after each finish; the step stops at the first moment a worker's view meets the quota.
    Returns (rows, done mask, the step's columns)."""
    rows = steps.begin(step, lambda k: 10)
    left = np.array([full[(int(k), int(j))] for k, j in zip(rows["prompt_id"], rows["sample"])]) - \
        np.array([len(t) for t in rows["tokens"]])
    left = np.where(rows["response_len"] == 0, 0, left)  # finished before
    shares = group_shares(rows["group"], workers)
    quotas = [steps.quota(store, step, w, workers, rows, share) for w, share in enumerate(shares)]
    stop = math.inf
    for t in sorted(set(left.tolist())) if quotas[0] is not None else []:  # the moments rows finish, every worker's
        for w, share in enumerate(shares):
            quotas[w].finished(share[left[share] <= t])
        if any(q.stop() for q in quotas):
            stop = t
            break
    new = [[7] * int(min(r, stop)) for r in left]
    done, columns = steps.end(step, rows, left <= stop, new)
    return rows, done, columns


def _drawn(served: int, groups: int, step: int, full: dict) -> dict:
    """The simulator's side: `groups` fresh groups of 2 from the stream after the `served` ones, at their full
    lengths, as tltsim.sim.prompts.PromptStream serves them."""
    k = np.repeat(np.arange(served, served + groups), 2)
    sample = np.tile([0, 1], groups)
    return {"step": np.full(len(k), step), "prompt_id": k, "group": k, "sample": sample,
            "prompt_len": np.full(len(k), 10), "origin": np.full(len(k), step), "carried": np.zeros(len(k), int),
            "response_len": np.array([full[(int(a), int(b))] for a, b in zip(k, sample)])}


@pytest.mark.parametrize("unfinished", ["resume", "drop"])
def test_the_real_partial_step_decides_what_the_simulators_does_on_the_same_lengths(unfinished):
    """Three steps of 2 groups of 2 trained on, 2x launched, on 2 workers, with lengths drawn at random: the real
    executor's glue (its prompt stream, group_shares, StoreQuota over a store, PartialSteps.end) and the simulator's
    rule (quota_stop over the rows' finish times, PartialControl) launch, train, carry and drop the same rows, with
    the same tokens carried, at every step."""
    rng = np.random.default_rng(3)
    full = {(k, j): int(rng.integers(1, 30)) for k in range(40) for j in range(2)}
    knobs = PartialKnobs(ratio=2.0, unfinished=unfinished)
    real, store = PartialSteps(knobs, prompts=2, group=2, max_new_tokens=64), DictStore()
    sim, served = PartialControl(knobs), 0
    for step in range(3):
        rows, done, columns = _real_step(real, step, store, full, workers=2)

        fresh_groups = sim.begin_step(2)
        fresh = _drawn(served, fresh_groups, step, full)
        served += fresh_groups
        df = sim.rows(fresh)
        stop, sim_done = quota_stop(df["group"], df["response_len"].astype(float), 2)  # a token a second
        generated = np.minimum(df["response_len"], stop).astype(int)
        sim_dropped = sim.end_step(step, df, sim_done, generated)

        assert rows["prompt_id"].tolist() == df["prompt_id"].tolist()
        assert done.tolist() == sim_done.tolist()
        assert columns == {**columns, **off_policy_columns(step, df, sim_done, sim_dropped)}  # as the simulator records
        assert real.control.launched == sim.launched and real.control.carried_groups == sim.carried_groups
        carry, expected = real.control.carry, sim.carry
        assert [len(t) for t in carry.get("tokens", [])] == list(expected.get("carried", []))
        for c in ("prompt_id", "sample", "origin", "carried"):
            assert list(carry.get(c, [])) == list(expected.get(c, [])), c
        # a carried row has left what the simulator's has: its full length less the tokens it carries
        assert [t for t, f in zip(carry.get("response_len", []), expected.get("response_len", [])) if f == 0] == \
            [0] * int(np.sum(expected.get("response_len", np.array([])) == 0))
    assert sim.carried_groups or unfinished == "drop"


def test_the_real_tail_batching_step_decides_what_the_simulators_does_on_the_same_lengths():
    """Six steps of 2 groups of 2 trained on, 2x launched in a short round, a long round after at most 2 short ones
    with prompts parked, on 2 workers, lengths drawn at random: the real executor's glue (TailSteps: its stream, a
    long round's rows run anew, StoreQuota, end) and the simulator's rule (quota_stop, TailControl) run the same
    rounds, train, abort and park the same rows at every step."""
    rng = np.random.default_rng(5)
    full = {(k, j): int(rng.integers(1, 30)) for k in range(60) for j in range(2)}
    knobs = TailBatchingKnobs(eta=2.0, long_every=2)
    real, store = TailSteps(knobs, prompts=2, group=2, max_new_tokens=64), DictStore()
    sim, served, rounds = TailControl(knobs), 0, []
    for step in range(6):
        rows, done, columns = _real_step(real, step, store, full, workers=2)

        fresh_groups = sim.begin_step(2)
        fresh = _drawn(served, fresh_groups, step, full)
        served += fresh_groups
        df = sim.rows(step, fresh)
        if sim.long:  # every row to its end
            sim_done, generated = np.ones(len(df["step"]), bool), df["response_len"]
        else:
            stop, sim_done = quota_stop(df["group"], df["response_len"].astype(float), 2)  # a token a second
            generated = np.minimum(df["response_len"], stop).astype(int)
        rounds.append(sim.long)
        sim_dropped = sim.end_step(df, None if sim.long else sim_done, generated)

        assert real.control.long == rounds[-1]
        assert rows["prompt_id"].tolist() == df["prompt_id"].tolist()
        assert done.tolist() == sim_done.tolist()
        assert columns == {**columns, **off_policy_columns(step, df, sim_done, sim_dropped)}  # as the simulator records
        assert list(real.control.parked.get("prompt_id", [])) == list(sim.parked.get("prompt_id", []))
    assert any(rounds) and not all(rounds)


def test_a_partial_steps_state_is_what_resumes_it():
    steps, store = PartialSteps(PartialKnobs(), prompts=2, group=2, max_new_tokens=64), DictStore()
    full = {(k, j): 5 + 7 * k + j for k in range(20) for j in range(2)}
    _real_step(steps, 0, store, full, workers=2)
    again = PartialSteps(PartialKnobs(), prompts=2, group=2, max_new_tokens=64)
    again.load_state_dict(steps.state_dict())
    a, b = steps.begin(1, lambda k: 10), again.begin(1, lambda k: 10)
    assert a.keys() == b.keys() and steps.served == again.served
    for c in a:
        assert list(map(list, a[c])) == list(map(list, b[c])) if c == "tokens" else a[c].tolist() == b[c].tolist()


def test_a_partial_runs_stream_is_replayed_in_its_order_at_its_lengths():
    """validate's replay of a partial run (tltsim.analysis.validation.stream): the groups the run drew, in order, at
    their trained rows' whole lengths; a group it never trained, and those past the last drawn, at the cap."""
    from tltsim.analysis.validation.stream import step_frame, stream_frame

    trained = pd.DataFrame({"step": [0, 0, 1, 1, 1, 1], "prompt_id": [1, 1, 0, 0, 3, 3], "sample": [0, 1, 1, 0, 0, 1],
                            "prompt_len": [9, 9, 7, 7, 11, 11], "response_len": [5, 6, 30, 29, 8, 2],
                            "reward": [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]})
    steps = pd.DataFrame({"launched_groups": [4, 4], "drawn_groups": [4, 1]})
    stream = stream_frame(trained, steps, {"prompts": 1, "group": 2}, cap=32)
    assert stream["prompt_id"].tolist() == np.repeat(np.arange(9), 2).tolist()  # 5 drawn, 4 more: a launch's worth
    assert stream["response_len"].tolist() == [29, 30, 5, 6, 32, 32, 8, 2] + [32] * 10
    assert stream["prompt_len"].tolist()[:8] == [7, 7, 9, 9, 9, 9, 11, 11]  # an untrained group: the median prompt
    assert stream["step"].tolist() == stream["prompt_id"].tolist()  # one group a step: the quota
    assert step_frame(stream, 2)["prompt_id"].tolist() == [0, 0, 1, 1]


def test_a_stopped_row_resumed_from_its_tokens_generates_what_it_would_have():
    """An engine stopped mid-rollout (rollout's `stop`) leaves its rows' tokens so far (Engine.in_progress); each
    resumed on a fresh engine, its tokens at the end of its prompt and the rest of the cap as its budget, generates
    greedy what the uninterrupted row did and stops at the same cap."""
    from tiny_lm import MAX_NEW, PROMPTS, target

    from real.engine.adaptive import rollout
    from real.engine.generate import Engine
    from real.settings import SamplingParams

    model, prompts = target("llama", "random"), PROMPTS["random"][:4]
    whole = Engine(model, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
    rollout(whole, prompts, lambda: 0.0)
    calls = iter(range(1000))
    engine = Engine(model, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
    ro = rollout(engine, prompts, lambda: 0.0, max_running=2, stop=lambda: next(calls) >= 9)
    left = engine.in_progress()
    assert len(left) == 2 and not engine.finished and len(ro.ids) == 2  # two admitted, two never were
    so_far = [left.get(i, []) for i in range(len(prompts))]
    assert all(0 < len(t) < MAX_NEW for t in so_far[:2]) and so_far[2:] == [[], []]
    again = Engine(model, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
    rollout(again, [p + t for p, t in zip(prompts, so_far)], lambda: 0.0,
            budgets=[MAX_NEW - len(t) for t in so_far])
    for i, t in enumerate(so_far):
        assert t + again.finished[i].tokens == whole.finished[i].tokens
    # a rollout that runs out of rows asks once more, so a quota hears of the rows its last call finished
    seen = []
    done = Engine(model, sampling=SamplingParams(greedy=True), max_new_tokens=MAX_NEW, eos_token_id=[])
    rollout(done, prompts, lambda: 0.0, stop=lambda: seen.append(len(done.finished)) or False)
    assert seen[-1] == len(prompts) and seen[-2] < len(prompts)


def test_partial_is_refused_what_a_real_run_cannot_do(tmp_path):
    from real.run.config import RunConfig
    from tltsim.core.errors import TltsimError

    with pytest.raises(TltsimError, match="ratio = 0.5"):
        RunConfig(policy="partial", knobs={"ratio": 0.5}).checked()
    with pytest.raises(TltsimError, match="unknown knob"):
        RunConfig(policy="partial", knobs={"threshold": 4}).checked()
    with pytest.raises(TltsimError, match="--answers"):
        RunConfig(policy="partial", answers=str(tmp_path)).checked()
    combined = RunConfig(policy="partial+tlt", knobs={"ratio": 1.5, "threshold": 4}).checked()
    assert combined.partial().ratio == 1.5 and combined.tlt_knobs().threshold == 4
    assert combined.to_dict()["knobs"]["ratio"] == 1.5


@pytest.mark.slow
def test_a_partial_run_trains_whole_groups_carries_the_rest_and_resumes_so(tmp_path):
    """2 workers, 2 groups of 2 trained on a step, 4 launched, sampled, each worker running its rows one at a time
    (the tiny target's responses mostly run to the cap, so rows run together would finish together): each step
    trains whole groups, at least its quota, and carries the rest; a group is trained once, at or after the step
    that drew it from the stream; every group drawn is trained or still carried; a resumed row stops at the cap; and
    a run resumed after step 0 (its carry and the stream's position in the checkpoint) goes on from there."""
    from real.run.config import RunConfig
    from real.run.launch import launch
    from real.run.problems import recorded_prompts
    from tltsim.core.records import Result
    from tltsim.trace import load

    def run(**kw):
        return RunConfig(**{"policy": "partial+tlt", "workers": 2, "steps": 3, "prompts": 2, "group": 2,
                            "max_running": 1, "max_new_tokens": 24, "probe": 0, "speed_probe": 0, "warmup_steps": 5,
                            "warmup_prompts": 4, "knobs": {"threshold": 2, "patience": 2, "arms": "4_1_4"}, **kw})

    launch(run(steps=1), tmp_path / "run")
    first = load(tmp_path / "run" / "trace.parquet").df
    launch(run(), tmp_path / "run", resume=True)
    res = Result.load(tmp_path / "run")
    df = load(tmp_path / "run" / "trace.parquet").df
    assert df[df["step"] == 0].reset_index(drop=True).equals(first)
    sizes = df.groupby(["step", "prompt_id"]).size()
    assert (sizes == 2).all() and not df.duplicated(["prompt_id", "sample"]).any()  # whole groups, each once
    steps = res.steps.set_index("step")
    assert (steps["responses"] >= 4).all() and (steps["launched_groups"] == 4).all()
    # the stream: a step draws the groups it launches beyond those carried in; a group is trained once, at or
    # after the step that drew it, and every group drawn is trained or still carried at the end (none dropped)
    carried_in = steps["carried_groups"].shift(fill_value=0)
    drawn = (steps["launched_groups"] - carried_in).cumsum()
    drew = {k: int(np.searchsorted(drawn.to_numpy(), k, side="right")) for k in df["prompt_id"].unique()}
    assert df["prompt_id"].nunique() + steps["carried_groups"].iloc[-1] == drawn.iloc[-1]
    assert (steps["carried_groups"] > 0).all() and (df["response_len"] <= 24).all()  # the policy acted
    for s, g in df.groupby("step"):
        assert all(drew[k] <= s for k in g["prompt_id"])
        # a sample's first tokens are no older than the step that drew its group
        assert steps.at[s, "staleness_max"] <= max(s - drew[k] for k in g["prompt_id"])
    assert res.summary["resumed_fraction"] == steps["resumed"].sum() / steps["responses"].sum()
    # a partial run's answers map to their prompts through its prompt stream
    answers = pd.read_parquet(tmp_path / "run" / "answers.parquet")
    from real.settings import SHIPPED_TARGET  # the default target's own task (gcd)
    from real.models.targets import load_task

    task = load_task(str(SHIPPED_TARGET), None)
    assert [len(p) for p in recorded_prompts(tmp_path / "run", task, answers)] == df["prompt_len"].tolist()
    # validate replays it with the simulator's partial policy drawing from the run's stream: the same launches, its
    # own stops, the off-policy figures beside the measured ones
    from tltsim.analysis.validation.validate import validate

    v = validate([tmp_path / "run"], Path(__file__).resolve().parents[2] / "traces/profiles/real_cpu_profile.csv")
    predicted = next(iter(v.predicted.values()))
    assert predicted.steps["launched_groups"].tolist() == steps["launched_groups"].tolist()
    assert {"carried_groups", "resumed", "staleness_mean"} <= set(v.per_step["metric"])
    assert {"staleness_mean", "resumed_fraction"} <= set(v.overall["metric"])


@pytest.mark.slow
def test_a_tail_batching_run_parks_the_tail_and_runs_it_anew_in_a_long_round(tmp_path):
    """2 workers, 2 groups of 2 trained on a step, 4 launched in a short round, a long round after each short one
    that parked prompts, run 1 step and resumed to 3 (the parked rows in the checkpoint): step 0 trains whole groups
    and parks the others, step 1 is a long round that runs them anew, each to its end, and trains every row it ran;
    no sample is stale or resumed. validate replays it with the simulator's tail-batching on the run's stream."""
    from real.run.config import RunConfig
    from real.run.launch import launch
    from tltsim.analysis.validation.validate import validate
    from tltsim.core.records import Result
    from tltsim.trace import load

    def run(**kw):
        return RunConfig(**{"policy": "tail-batching", "workers": 2, "steps": 3, "prompts": 2, "group": 2,
                            "max_running": 1, "max_new_tokens": 24, "probe": 0, "speed_probe": 0,
                            "knobs": {"eta": 2.0, "long_every": 1}, **kw})

    launch(run(steps=1), tmp_path / "run")
    launch(run(), tmp_path / "run", resume=True)
    steps = Result.load(tmp_path / "run").steps.set_index("step")
    df = load(tmp_path / "run" / "trace.parquet").df
    assert steps["long_round"].tolist() == [False, True, False]
    assert (df.groupby(["step", "prompt_id"]).size() == 2).all() and not df.duplicated(["prompt_id", "sample"]).any()
    parked = set(range(4)) - set(df[df["step"] == 0]["prompt_id"])  # step 0 drew groups 0..3
    assert parked and steps.at[0, "parked_groups"] == len(parked) and steps.at[1, "parked_groups"] == 0
    assert parked <= set(df[df["step"] == 1]["prompt_id"])  # run anew and trained in the long round
    assert steps.at[1, "responses"] == 2 * steps.at[1, "launched_groups"]  # every row it ran
    assert (steps["staleness_max"] == 0).all() and (steps["resumed"] == 0).all()
    v = validate([tmp_path / "run"], Path(__file__).resolve().parents[2] / "traces/profiles/real_cpu_profile.csv")
    predicted = next(iter(v.predicted.values())).steps
    assert predicted["long_round"].tolist() == [False, True, False]
    assert {"dropped", "staleness_mean"} <= set(v.per_step["metric"])
