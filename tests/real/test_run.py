"""`tltsim real run` end to end on 2 CPU workers: records in the simulator's schema, spot training only
on finished workers, lossless speculation across policies, the drafter kept fresh by spot training,
and resume after a kill."""
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from killed import kill_at_first_checkpoint

from real.drafters.eagle import Drafter
from real.engine.generate import generate
from real.tasks.evaluate import accepted_length
from real.settings import GRPOConfig, GenerateSettings, SamplingParams
from real.run.grpo import GRPO, group_advantages, micro_batches, response_logprobs, token_losses
from real.models.targets import build_target, load_target
from real.settings import PretrainConfig
from real.models.pretrain import save_checkpoint, train
from real.run.grpo import free_port
from real.run.processes import start_workers
from real.run.launch import RunConfig, launch
from real.run.spot import all_gather_pairs
from real.tasks.gcd import GcdTask, TaskConfig
from tltsim.cli import main as tltsim_main
from tltsim.control.groups import streamed
from tltsim.core.errors import TltsimError
from tltsim.core.records import REQUEST_COLUMNS, STATES, STEP_COLUMNS, TIMELINE_COLUMNS, Result
from tltsim.trace import load as load_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """test-llama pretrained briefly on short gcd problems: a fast stand-in target for the mechanism tests.
    It is not yet right (accuracy 0 on 64 problems, greedy and sampled; greedy responses run to a 48-token
    cap), so its GRPO advantages are zero: the test that needs RL updates uses the shipped target."""
    torch.set_num_threads(2)
    config = PretrainConfig(preset="test-llama", steps=120, batch_tokens=2048, lr=1e-2, warmup=10,
                            task=TaskConfig(max_steps=12))
    model, task, _ = train(config)
    return save_checkpoint(model, task, tmp_path_factory.mktemp("target") / "test-llama", {})


def base(target, **kw) -> RunConfig:
    return RunConfig(**{"workers": 2, "steps": 3, "model": str(target), "prompts": 3, "group": 2,
                        "max_running": 2, "max_new_tokens": 48, "warmup_steps": 20, "warmup_prompts": 16, "probe": 4,
                        "knobs": {"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4"}, **kw})


@pytest.fixture(scope="module")
def greedy_runs(target, tmp_path_factory):
    """tlt and verl from one seed, greedy, float64 (no argmax ties between tree and plain forwards). Every
    greedy response runs to the 48-token cap, so the work is in the shares: worker 0 has 2 prompt groups (4 rows,
    2 waves of 2), worker 1 has 1 (1 wave) and is done half the rollout early, time to train the drafter
    (with equal shares the workers finished within milliseconds of each other and spot training seldom began)."""
    out = tmp_path_factory.mktemp("greedy")
    cfg = base(target, greedy=True, dtype="float64")
    launch(cfg, out / "tlt")
    launch(replace(cfg, policy="verl", knobs={}), out / "verl", command="verl-run")
    return out


@pytest.mark.slow
def test_records_follow_the_schema(greedy_runs):
    for policy in ("tlt", "verl"):
        res = Result.load(greedy_runs / policy)
        assert list(res.timeline.columns) == TIMELINE_COLUMNS
        assert set(STEP_COLUMNS + ["mean_reward", "accuracy", "sd_share", "mean_accepted", "drafter_train_s",
                                   "drafter_accepted", "speed_probe_s"]) <= set(res.steps.columns)
        assert (res.steps["speed_probe_s"] > 0).all()  # the machine timed before every step
        assert set(REQUEST_COLUMNS) <= set(res.requests.columns)
        assert set(res.iterations.columns) >= {"step", "worker", "batch_size", "mode", "strategy", "accepted",
                                               "wall_s", "t_end"}
        assert set(res.timeline["state"]) <= set(STATES)
        assert res.steps["step"].tolist() == [0, 1, 2]
        assert res.config["policy"] == policy and res.config["workers"] == 2
        s = res.summary
        for key in ("makespan_s", "rollout_s", "train_s", "rollout_share", "gpu_seconds", "idle_gpu_seconds",
                    "idle_fraction", "tail_share", "tokens_per_s", "steps"):
            assert key in s
        assert s["gpu_seconds"] == pytest.approx(2 * s["makespan_s"])
        # every worker's intervals tile each step: contiguous, non-overlapping, from the step's start to its end
        tl = res.timeline
        assert (tl["t_end"] >= tl["t_start"]).all()
        for (step, worker), iv in tl.sort_values("t_start").groupby(["step", "worker"]):
            row = res.steps.set_index("step").loc[step]
            assert iv["t_start"].iloc[0] == pytest.approx(row["t_start"], abs=0.05)
            assert iv["t_end"].iloc[-1] == pytest.approx(row["t_start"] + row["total_s"])
            assert np.allclose(iv["t_start"].to_numpy()[1:], iv["t_end"].to_numpy()[:-1])
        busy_idle = float((tl["t_end"] - tl["t_start"]).sum())
        assert busy_idle == pytest.approx(s["gpu_seconds"], rel=1e-6)
        trace = load_trace(greedy_runs / policy / "trace.parquet")
        assert trace.meta.source == "real" and trace.meta.group_size == 2 and len(trace.df) == 3 * 3 * 2
        assert set(trace.df["engine"]) == {0, 1}
        # contiguous chunks of prompt groups: prompts 0-1 on worker 0, 2 on worker 1
        assert (trace.df["engine"] == (trace.df["prompt_id"] >= 2)).all()


@pytest.mark.slow
def test_speculation_is_lossless_across_policies(greedy_runs):
    tlt = load_trace(greedy_runs / "tlt" / "trace.parquet").df
    verl = load_trace(greedy_runs / "verl" / "trace.parquet").df
    res = Result.load(greedy_runs / "tlt")
    assert (res.timeline["state"] == "spec_decode").any()  # tlt did speculate
    assert not (Result.load(greedy_runs / "verl").timeline["state"] == "spec_decode").any()
    assert tlt[["step", "prompt_id", "sample", "response_len", "reward"]].equals(
        verl[["step", "prompt_id", "sample", "response_len", "reward"]])


@pytest.mark.slow
def test_drafter_trains_only_on_workers_done_with_their_share(greedy_runs):
    res = Result.load(greedy_runs / "tlt")
    tl = res.timeline
    train = tl[tl["state"] == "drafter_train"]
    assert len(train) > 0
    rollout = tl[tl["state"].isin(["prefill", "decode", "spec_decode"])]
    done = rollout.groupby(["step", "worker"])["t_end"].max()
    barrier = res.steps.set_index("step")["t_start"] + res.steps.set_index("step")["rollout_s"]
    before_barrier = 0.0
    for _, iv in train.iterrows():
        assert iv["t_start"] >= done[(iv["step"], iv["worker"])] - 1e-9
        # told to train while another worker was still generating; it may notice the order a poll
        # (milliseconds) after that worker finished, so its start can fall just past the barrier
        assert iv["t_start"] < barrier[iv["step"]] + 0.05
        before_barrier += max(0.0, min(iv["t_end"], barrier[iv["step"]]) - iv["t_start"])
    assert before_barrier > 0  # it used time in which another worker was still generating
    assert not (Result.load(greedy_runs / "verl").timeline["state"] == "drafter_train").any()


@pytest.mark.slow
def test_spot_training_keeps_the_drafter_ahead_of_a_static_one(tmp_path):
    """tlt and static-sd from the same warm-up drafter and seed, sampled, on the shipped target (its groups
    get mixed rewards, so GRPO does move it): the spot-trained drafter is checkpointed, averaged and carried
    on, the static one never trains, and on the RL-updated final target the spot-trained drafter accepts
    more than the warm-up one, greedy, on 32 held-out prompts.

    The setting gives spot training time and data: 3 prompt groups of 8 on 2 workers with at most 2 rows
    running per engine, so worker 1 (one group) finishes about halfway through each rollout and trains for
    the rest on the step's and the warm-up's responses. Over 16 seeds (docs/investigations/spot_vs_static.py,
    docs/investigations/spot_vs_static.txt) the margin was +0.50 to +0.96 tokens. With 6 groups of 4 and no
    cap, workers finish within tens of milliseconds of each other, train a handful of batches and the margin
    ranges -0.08 to +0.96.

    Seed 4: its prompts get mixed rewards in every step, so GRPO updates the target in all three. The sampled
    tokens differ from machine to machine (float and thread order) and with the drafter (speculative sampling
    draws per drafted token), so a seed whose groups are mostly all-right or all-wrong can leave the target
    unmoved on another machine; the test asserts the target moved."""
    cfg = RunConfig(workers=2, steps=3, prompts=3, group=8, max_running=2, max_new_tokens=96, warmup_steps=10,
                    warmup_prompts=16, probe=4, drafter_batch=4, seed=4,
                    knobs={"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4", "buffer_steps": 2})
    launch(replace(cfg, probe_static=True), tmp_path / "tlt")
    tlt = Result.load(tmp_path / "tlt").steps
    # the starting drafter, probed every step beside the spot-trained one with the same target: the same at first
    assert tlt["static_drafter_accepted"].notna().all()
    assert tlt["static_drafter_accepted"].iloc[0] == tlt["drafter_accepted"].iloc[0]
    assert tlt["drafter_train_batches"].sum() > 0
    assert tlt["grpo_loss"].ne(0).any()  # some group had mixed rewards: the target was updated
    assert sorted(p.name for p in (tmp_path / "tlt" / "spot").iterdir())  # the trainable part, saved when stopped

    # its first step suffices: the same start, and a static drafter that never trains
    launch(replace(cfg, policy="static-sd", steps=1, drafter_checkpoint=str(tmp_path / "tlt" / "drafter_init.pt")),
           tmp_path / "static")
    static = Result.load(tmp_path / "static").steps
    assert static["drafter_train_batches"].sum() == 0 and not (tmp_path / "static" / "spot").exists()
    assert tlt["drafter_accepted"].iloc[0] == pytest.approx(static["drafter_accepted"].iloc[0])  # same start

    final = load_target(tmp_path / "tlt" / "checkpoint" / "target", "cpu")
    task = GcdTask.load(cfg.model)
    problems = task.sample(np.random.default_rng(12345), 32, split="test")
    spot = accepted_length(final, Drafter.load(tmp_path / "tlt" / "checkpoint" / "drafter.pt", final), task,
                           problems, "4_1_4", max_new_tokens=64)
    warmup = accepted_length(final, Drafter.load(tmp_path / "tlt" / "drafter_init.pt", final), task,
                             problems, "4_1_4", max_new_tokens=64)
    assert spot > warmup


def verl_args(target, out: Path) -> list[str]:
    """The `tltsim real run` arguments of greedy_runs' verl run (3 steps) into `out`."""
    return ["real", "run", "--policy", "verl", "--workers", "2", "--steps", "3", "--model", str(target),
            "--prompts", "3", "--group", "2", "--max-running", "2", "--max-new-tokens", "48", "--greedy",
            "--dtype", "float64", "--probe", "4", "-o", str(out)]


def verl_command(target, out: Path) -> list[str]:
    """verl_args as a command line of its own process."""
    return [sys.executable, "-m", "tltsim", *verl_args(target, out)]


def in_process(args: list[str]) -> int:
    """`tltsim ARGS` run by this process's CLI, which has torch loaded already (a process of its own spends
    seconds of CPU importing it); --threads keeps this process's torch setting."""
    return tltsim_main([*args, "--threads", str(torch.get_num_threads())])


@pytest.mark.slow
def test_resume_after_a_kill_continues_the_run(target, greedy_runs, tmp_path):
    out = tmp_path / "verl"
    killed_at = kill_at_first_checkpoint(verl_args(target, out), out)
    assert killed_at < 2, "the run finished before it could be killed"
    assert Result.load(out).steps["step"].max() <= killed_at + 1  # finished steps are readable
    with pytest.raises(TltsimError, match="--resume"):
        launch(replace(base(target, greedy=True, dtype="float64"), policy="verl", knobs={}), out)
    # the same command with --resume, run in this process (its own process's --resume: the next test)
    assert in_process([*verl_args(target, out), "--resume"]) == 0
    res = Result.load(out)
    assert res.steps["step"].tolist() == [0, 1, 2]
    assert (res.steps["t_start"].diff().dropna() > 0).all()
    # greedy verl is deterministic: the resumed run generated what the uninterrupted one did
    resumed = load_trace(out / "trace.parquet").df
    whole = load_trace(greedy_runs / "verl" / "trace.parquet").df
    cols = ["step", "prompt_id", "sample", "engine", "response_len", "reward"]
    assert resumed[cols].equals(whole[cols])


@pytest.mark.slow
def test_a_run_stopped_before_its_first_checkpoint_restarts_by_the_command_the_error_names(target, greedy_runs,
                                                                                          tmp_path, capsys):
    """The state a kill between step 0's records and its checkpoint leaves (built here: a one-step run whose
    checkpoint is removed): a plain rerun is refused naming --resume, and that command, in a process of its own,
    runs the whole run from step 0, reporting each step on stderr."""
    out = tmp_path / "verl"
    assert in_process([*verl_args(target, out), "--steps", "1"]) == 0  # the state, built in this process
    shutil.rmtree(out / "checkpoint")
    assert Result.load(out).steps["step"].tolist() == [0]
    capsys.readouterr()
    assert in_process(verl_args(target, out)) == 2  # refused before any worker starts: in this process too
    refused = capsys.readouterr().err
    assert len(refused.splitlines()) == 1 and "pass --resume" in refused and "step 0" in refused
    done = subprocess.run(verl_command(target, out) + ["--resume"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "before its first checkpoint" in done.stderr  # the warning: it starts again
    steps = [ln for ln in done.stderr.splitlines() if ln.startswith("real run verl: step ")]
    assert [ln.split()[4] for ln in steps] == ["1/3", "2/3", "3/3"]
    assert all("rollout" in ln and "mean length" in ln and "sd share" not in ln for ln in steps)
    res = Result.load(out)
    assert res.steps["step"].tolist() == [0, 1, 2] and checkpoint_step(out) == 2
    resumed = load_trace(out / "trace.parquet").df
    whole = load_trace(greedy_runs / "verl" / "trace.parquet").df
    cols = ["step", "prompt_id", "sample", "engine", "response_len", "reward"]
    assert resumed[cols].equals(whole[cols])  # greedy verl is deterministic: the run it would have been


def checkpoint_step(out: Path) -> int:
    return json.loads((out / "checkpoint" / "state.json").read_text())["step"]


def test_the_default_cap_is_the_tasks_longest_response(tmp_path):
    from real.settings import SHIPPED_TARGET

    assert RunConfig().checked().max_new_tokens == GcdTask.load(SHIPPED_TARGET).max_response_tokens
    assert RunConfig(model="test-llama").checked().max_new_tokens == GcdTask().max_response_tokens
    assert RunConfig(max_new_tokens=48).checked().max_new_tokens == 48


@pytest.mark.slow
def test_the_default_run_has_a_long_tail_that_few_responses_cut():
    """The shipped target sampled as the default run's step is (8 training problems in groups of 4, temperature 1,
    the default cap): few responses reach the cap and the longest are several times the median."""
    from real.settings import SHIPPED_TARGET
    from tltsim.trace.stats import tail_share

    cfg = RunConfig().checked()
    model, task = load_target(SHIPPED_TARGET), GcdTask.load(SHIPPED_TARGET)
    problems = task.sample(np.random.default_rng(3), cfg.prompts)
    prompts = [task.prompt_ids(p) for p in problems for _ in range(cfg.group)]
    gen = generate(model, prompts, settings=GenerateSettings(sampling=SamplingParams(greedy=False, temperature=cfg.temperature), max_new_tokens=cfg.max_new_tokens))
    lengths = np.array([len(f.tokens) for f in gen.finished])
    assert (lengths >= cfg.max_new_tokens).mean() <= 0.1
    assert lengths.max() / np.median(lengths) >= 2
    assert tail_share(lengths) >= 0.05


def test_a_run_replays_a_recorded_runs_answers_token_for_token(target, tmp_path):
    """verl samples and records its answers; tlt given them (--answers) emits the very same responses, so the
    rewards agree too, while it speculates on them (on the first of verl's two steps: a run may replay fewer
    steps than it holds); a run of other prompts or sampling, or of more steps, is refused up front."""
    cfg = base(target, steps=1, dtype="float64")
    launch(replace(cfg, policy="verl", knobs={}, steps=2), tmp_path / "verl")
    launch(replace(cfg, answers=str(tmp_path / "verl")), tmp_path / "tlt")
    answers = {run: pd.read_parquet(tmp_path / run / "answers.parquet").sort_values(["step", "prompt_id", "sample"])
               for run in ("verl", "tlt")}
    answers["verl"] = answers["verl"][answers["verl"]["step"] == 0]
    assert len(answers["verl"]) == 3 * 2 and answers["verl"]["tokens"].map(len).nunique() > 1  # sampled, ragged
    same = lambda df: [(r.step, r.prompt_id, r.sample, list(r.tokens)) for r in df.itertuples()]  # noqa: E731
    assert same(answers["tlt"]) == same(answers["verl"])
    traces = [load_trace(tmp_path / run / "trace.parquet").df.query("step == 0").sort_values(["prompt_id", "sample"])
              for run in ("verl", "tlt")]
    for col in ("response_len", "reward"):
        assert traces[0][col].tolist() == traces[1][col].tolist()
    assert Result.load(tmp_path / "tlt").summary["sd_share"] > 0
    with pytest.raises(TltsimError, match="its seed is 0, this run's 1"):
        launch(replace(cfg, seed=1, answers=str(tmp_path / "verl")), tmp_path / "other")
    with pytest.raises(TltsimError, match="holds the answers of 2 whole steps, this run asks for 3"):
        launch(replace(cfg, steps=3, answers=str(tmp_path / "verl")), tmp_path / "longer")
    assert not (tmp_path / "other").exists() and not (tmp_path / "longer").exists()


def test_bad_runs_are_refused_before_any_worker_starts(tmp_path):
    with pytest.raises(TltsimError, match="drafts from each row's own text and trains no drafter"):
        launch(base("test-llama", policy="tlt-base", knobs={"cadence": 2}), tmp_path / "a")
    with pytest.raises(TltsimError, match="unknown knob"):  # the simulator's drafter model: not a knob here
        launch(base("test-llama", knobs={"drift": 0.1}), tmp_path / "b")
    with pytest.raises(TltsimError, match="no knobs"):
        launch(base("test-llama", policy="verl"), tmp_path / "c")
    with pytest.raises(TltsimError, match="no run to resume"):
        launch(base("test-llama"), tmp_path / "d", resume=True)


# --- GRPO ------------------------------------------------------------------------------------------

def test_group_advantages_are_normalised_per_group():
    adv = group_advantages(np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    assert adv[0] == pytest.approx([1, -1, -1, 1], abs=1e-5)
    assert adv[1] == pytest.approx([0, 0, 0, 0])


def test_clipped_loss_stops_the_gradient_beyond_the_clip():
    logp = torch.tensor([[0.5, -0.5]], requires_grad=True)
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss = token_losses(logp, old, torch.tensor([1.0]), mask, clip=0.2).sum()
    loss.backward()
    # ratio e^0.5 > 1.2 with A > 0: clipped, no gradient; ratio e^-0.5 < 0.8 with A > 0: unclipped
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] < 0


def test_grpo_update_raises_the_likelihood_of_rewarded_responses():
    model = build_target("test-llama", seed=0).float()
    prompts = [[1, 5, 6], [1, 5, 6]]
    responses = [[7, 8, 9, 2], [10, 11, 12, 13]]
    grpo = GRPO(model, GRPOConfig(lr=1e-2))
    before = response_logprobs(model, prompts, responses)[0].sum(dim=1).detach()
    adv = group_advantages(np.array([[1.0, 0.0]])).ravel()
    for _ in range(3):
        old, ref = grpo.old_logprobs(prompts, responses)
        grpo.update(prompts, responses, adv, old, ref)
    after = response_logprobs(model, prompts, responses)[0].sum(dim=1).detach()
    assert after[0] > before[0] and after[1] < before[1]



GRPO_CASE = ([[1, 5, 6], [1, 5], [1, 5, 6, 7], [1]], [[7, 8, 9, 2], [10], [11, 12], [13, 14, 15, 16, 17]],
             np.array([1.0, -1.0, 0.5, -0.5]))


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().ravel() for p in model.parameters()])


def _grpo_update(rows, micro_batch_tokens=GRPOConfig().micro_batch_tokens):
    """One GRPO update of the float64 test target on GRPO_CASE's `rows` (a worker's share): (parameters
    after it, the old log-probs, the update's stats)."""
    prompts, responses, adv = GRPO_CASE
    model = build_target("test-llama", seed=0).double()
    grpo = GRPO(model, GRPOConfig(lr=1e-2, micro_batch_tokens=micro_batch_tokens))
    prompts, responses = [prompts[i] for i in rows], [responses[i] for i in rows]
    old, ref = grpo.old_logprobs(prompts, responses)
    stats = grpo.update(prompts, responses, adv[rows], old, ref)
    return _flat(model), old, stats


def test_micro_batches_bound_padding_and_give_the_one_batch_update():
    assert micro_batches([5, 1, 3, 3], budget=6) == [[1, 2], [3], [0]]  # sorted; 2 rows x 3 <= 6, 3 x 3 > 6
    assert micro_batches([9], budget=4) == [[0]]  # longer than the budget: alone
    # one forward of 4 rows x 7; or micro-batches of at most 8 padded tokens
    (p1, old1, s1), (p2, old2, s2) = (_grpo_update([0, 1, 2, 3], budget) for budget in (10**6, 8))
    assert torch.allclose(old1, old2, atol=1e-6) and torch.allclose(p1, p2, atol=1e-10)
    assert s1["loss"] == pytest.approx(s2["loss"]) and s1["clip_frac"] == s2["clip_frac"]
    assert not torch.equal(p1, _flat(build_target("test-llama", seed=0).double()))


def _data_parallel_worker(rank, port, out):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        torch.save(_grpo_update([[0, 3], [1, 2]][rank])[0], Path(out) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def test_data_parallel_update_is_the_one_batch_update(tmp_path):
    """2 gloo workers, each updating on half of the responses, end with the parameters one process gets from
    all of them (gradients summed over workers in one flattened all-reduce, loss over the global token count)."""
    start_workers(_data_parallel_worker, (free_port(), str(tmp_path)), 2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert torch.equal(ranks[0], ranks[1])
    assert torch.allclose(ranks[0], _grpo_update([0, 1, 2, 3])[0], atol=1e-10)
    assert not torch.allclose(ranks[0], _grpo_update([0, 3])[0], atol=1e-6)  # one worker's share alone differs


def _gather_worker(rank, port, out):
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        g = torch.Generator().manual_seed(rank)
        results = {}
        for case, counts in {"uneven": (3, 1), "one empty": (0, 2)}.items():
            lengths = torch.randint(2, 40, (counts[rank],), generator=g).tolist()
            pairs = [(torch.randint(3, 19, (n,), generator=g), torch.randn(n - 1, 16, generator=g).to(torch.bfloat16))
                     for n in lengths]
            theirs = [None, None]
            torch.distributed.all_gather_object(theirs, pairs)
            results[case] = (all_gather_pairs(pairs, 16, torch.bfloat16, torch.device("cpu")), theirs)
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def test_samples_are_shared_as_all_gather_object_would(tmp_path):
    """The drafter's buffer gets every worker's (tokens, features) pairs through tensor all-gathers: the same
    pairs, in rank order, as a pickled all_gather_object, for uneven counts and lengths and an empty share."""
    out = tmp_path
    start_workers(_gather_worker, (free_port(), str(out)), 2)
    for rank in range(2):
        for case, (mine, reference) in torch.load(out / f"rank{rank}.pt", weights_only=False).items():
            assert [len(p) for p in mine] == [len(p) for p in reference], case
            for got, want in zip(sum(mine, []), sum(reference, [])):
                assert torch.equal(got[0], want[0]) and got[0].dtype == torch.long
                assert torch.equal(got[1], want[1]) and got[1].dtype == torch.bfloat16


# --- the shipped recorded runs ------------------------------------------------------------------------

SHIPPED_PAIRS = [("real_tlt_cpu", "real_verl_cpu"), ("real_tlt_smollm2", "real_verl_smollm2"),  # (run, its verl twin)
                 ("real_tlt_smollm2_longtail", "real_verl_smollm2_longtail"),
                 ("real_tlt_auto_smollm2", "real_verl_smollm2_b"), ("real_das_smollm2", "real_verl_smollm2_b"),
                 ("real_das_smollm2_longtail", "real_verl_smollm2_longtail"),
                 ("real_das_tlt_smollm2_longtail", "real_verl_smollm2_longtail"),
                 ("real_tlt_smollm2_longtail_interleaved", "real_verl_smollm2_longtail_interleaved"),
                 ("real_tlt_smollm2_agentic", "real_verl_smollm2_agentic"),
                 ("real_partial_smollm2_sampled", "real_verl_smollm2_sampled"),
                 ("real_tail_batching_smollm2_sampled", "real_verl_smollm2_sampled"),
                 ("real_async_smollm2_sampled", "real_verl_smollm2_sampled"),
                 ("real_async_tlt_smollm2_sampled", "real_verl_smollm2_sampled"),
                 ("real_migrate_smollm2_sampled", "real_verl_smollm2_sampled"),
                 ("real_longest_first_smollm2_repeated", "real_verl_smollm2_repeated")]
SHIPPED_TWINS = {run: verl for run, verl in SHIPPED_PAIRS} | {verl: run for run, verl in SHIPPED_PAIRS}  # a verl run two
# pairs share is checked against the later pair's run


def _as_in_repo(command: str) -> str:
    """A recorded command as a README gives it: its output directory left open, the machine's paths to files of
    this repository (real/assets/..., a shipped run's answers) as the repository's own, the runs in traces/runs/."""
    command = re.sub(r"(-o|--out) \S+", r"\1 RUN_DIR", command)
    command = re.sub(r"(\s)/\S*?/((?:real|traces)/\S+)", r"\1\2", command)
    return re.sub(r"(\s)traces/(?:runs/)?(real_\w+)", r"\1traces/runs/\2", command)


def test_every_shipped_run_is_in_a_twin_pair():
    assert sorted(p.name for p in (ROOT / "traces" / "runs").glob("real_*") if p.is_dir()) == sorted(SHIPPED_TWINS)


def test_the_shipped_long_tail_runs_emitted_the_same_answers():
    """They replayed one verl run's answers, so the set compares the policies' speed alone (notebook 06 says so);
    the pair made in turn did too."""
    import pandas as pd

    runs = sorted((ROOT / "traces" / "runs").glob("real_*_smollm2_longtail*"))
    assert len(runs) == 6
    answers = [pd.read_parquet(run / "answers.parquet").sort_values(["step", "prompt_id", "sample"]) for run in runs]
    keys = [a[["step", "prompt_id", "sample"]].to_numpy().tolist() for a in answers]
    tokens = [[list(t) for t in a["tokens"]] for a in answers]
    assert all(k == keys[0] for k in keys) and all(t == tokens[0] for t in tokens)
    assert len({int(Result.load(run).requests.response_len.sum()) for run in runs}) == 1


@pytest.mark.parametrize("name", sorted(SHIPPED_TWINS))
def test_shipped_runs_are_complete_small_and_documented(name):
    run = ROOT / "traces" / "runs" / name
    res = Result.load(run)
    assert set(res.timeline["state"]) <= set(STATES) and list(res.timeline.columns) == TIMELINE_COLUMNS
    assert res.steps["step"].tolist() == list(range(res.config["steps"]))
    trace = load_trace(run / "trace.parquet")
    trained = res.config["steps"] * res.config["prompts"] * res.config["group"]  # a step trains `prompts` groups
    assert trace.meta.source == "real" and (len(trace.df) >= trained if streamed(res.config["policy"])  # or more: a
                                            else len(trace.df) == trained)  # long round trains what it parked too
    names = sorted(p.name for p in run.iterdir() if p.name != "answers.parquet")  # answers: not in older shipped runs
    turns = ["turns.parquet"] if trace.agentic else []  # a run whose task calls a tool records its turns
    assert names == sorted(["README.md", "config.json", "iterations.parquet", "manifest.json", "requests.parquet",
                            "steps.parquet", "summary.json", "timeline.parquet", "trace.parquet", *turns])
    assert sum(p.stat().st_size for p in run.iterdir()) < 1_000_000
    readme = [c.strip() for c in re.findall(r"tltsim real run [^\n`]*", (run / "README.md").read_text())]
    assert _as_in_repo(res.config["command"]) in map(_as_in_repo, readme)
    twin = Result.load(ROOT / "traces" / "runs" / SHIPPED_TWINS[name]).config
    # what differs by policy: its name, knobs and command line, the drafter it starts from and how it is probed (a
    # verl or async run has none), and whose answers it replays (its twin's, or none)
    same = lambda c: {k: v for k, v in c.items() if k not in ("policy", "knobs", "command", "drafter_checkpoint",  # noqa: E731
                                                               "probe", "probe_static", "answers")}
    assert same(res.config) == same(twin)


def test_a_runs_command_names_the_default_target_as_typed_from_the_repository(monkeypatch):
    """The shipped target's default is an absolute path; the recorded command gives it as one would type it in the
    working directory holding it, and leaves a path elsewhere as given."""
    import argparse

    from real.cli import _run_command
    from real.settings import SHIPPED_TARGET

    monkeypatch.chdir(ROOT)
    args = argparse.Namespace(out="out/r", model=str(SHIPPED_TARGET), drafter_checkpoint="/elsewhere/d.pt", policy="tlt",
                              knob=["threshold=4"], lr=1e-5, probe_static=True, func=None)
    command = _run_command(args)
    assert "--model real/assets/gcd-tiny-llama" in command and "--drafter-checkpoint /elsewhere/d.pt" in command
    assert str(ROOT) not in command and "--knob threshold=4" in command and "--probe-static" in command
