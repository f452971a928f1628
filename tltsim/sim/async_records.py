"""What an asynchronous run's training step records (tltsim.sim.async_loop.AsyncRun): its step row, with the
off-policy columns, the speculation of the policy version it ends and, on a multi-turn trace, its turns; and the
requests it trained."""
from __future__ import annotations

import numpy as np

from tltsim.sim.speculation import Tally, strategies_text
from tltsim.trace.schema import tool_calls

NAN = np.nan


def record_step(run, k: int, step: int, t0: float, waited: float, phases: list, ids: np.ndarray, dropped: int) -> None:
    """Record the run's k-th training step (trace step `step`, begun at `t0`, its batch ready at `waited`): its
    `phases` (reward, train, weight_sync) and the samples `ids` it trained, `dropped` too stale."""
    sim = run.sim
    pick = lambda v: np.asarray(v)[ids]  # noqa: E731
    df = {"origin": pick(run.s_version), "resumed": pick(run.s_resumed), "response_len": pick(run.s_rlen)}
    trained = pick(run.s_rlen) > 0  # the trace's aborted rows (response_len 0) leave nothing to train on
    dropped += int(np.sum(~trained))
    sim.recorder.step_requests({
        "step": np.full(len(ids), step), "prompt_id": pick(run.s_prompt), "sample": pick(run.s_sample),
        "engine": pick(run.s_engine), "prompt_len": pick(run.s_plen), "response_len": pick(run.s_rlen),
        "admitted_at": pick(run.s_admit), "finished_at": pick(run.s_finish),
        "finished": np.ones(len(ids), dtype=bool),
    })
    sim.recorder.step({
        "step": step, "t_start": t0, "rollout_s": waited - t0, "reward_s": phases[0][1], "train_s": phases[1][1],
        "sync_s": phases[2][1], "total_s": run.env.now - t0, "responses": int(trained.sum()),
        "response_tokens": int(pick(run.s_rlen).sum()), "tail_s": 0.0,
        **sim.off_policy_columns(k, df, trained, dropped),
        **spec_columns(run, t0), **run.policy.end_version(k, pick(run.s_rlen)[trained]),
        **(turn_columns(run, ids, t0) if sim.agentic else {}),
    })


def spec_columns(run, t0: float) -> dict:
    """The speculation of the policy version that just ended, on every rollout engine: its share of their time
    since `t0`, its mean accepted length and its strategies' iterations (a synchronous step's columns)."""
    tally, span = run.tally, run.R * (run.env.now - t0)
    run.tally, seconds, run.spec_s = Tally(), run.spec_s, 0.0
    return {"sd_share": seconds / span if span else 0.0,
            "mean_accepted": tally.accepted / tally.iterations if tally.iterations else NAN,
            "strategies": strategies_text(tally.strategies)}


def turn_columns(run, ids, t0: float) -> dict:
    """A multi-turn step's trajectories, turns and tool calls (of the samples it trains on), and the share of
    the rollout engines' time since the step began in which every sample an engine held waited on a tool."""
    turns = [run.s_turns[i] for i in ids]
    rows = [r for r in run.sim.recorder.timeline if r.state == "tool_wait" and r.worker < run.R and r.t_end > t0]
    wait = sum(r.t_end - max(r.t_start, t0) for r in rows)
    span = run.R * (run.env.now - t0)
    return {"trajectories": len(ids), "turns": sum(len(t[0]) for t in turns),
            "tool_calls": tool_calls(t[1] for t in turns),
            "tool_wait_share": wait / span if span else 0.0}
