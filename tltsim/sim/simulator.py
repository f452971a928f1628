"""The RL-step simulator: engines as simpy processes, a synchronous barrier, then reward, train, sync.

    trace --> Simulator(config, policy) --> Result (timeline, steps, requests, summary)

Each step: the step's responses are split over the engines (contiguous chunks of
prompt groups as verl does, or the trace's `engine` column); every engine runs
its rollout as a simpy process (fast path or `exact`); when the slowest finishes,
the reward stage (reward + old/ref log-prob forwards), the actor update and the
weight sync run on all GPUs (colocated). Every worker is accounted for from the
first step's start to the last step's end, so busy + idle = GPUs x makespan.
"""
from __future__ import annotations

import gc
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pandas as pd
import simpy
from tqdm.auto import tqdm

from tltsim.config import SimConfig, steps_in
from tltsim.cost import Calibrated, Roofline
from tltsim.control.groups import group_shares, rewards_disagree
from tltsim.core.off_policy import off_policy_columns, off_policy_summary, staleness
from tltsim.core.padding import padded_tokens
from tltsim.core.errors import TltsimError
from tltsim.hardware import load_gpu, load_model
from tltsim.core.records import STEP_COLUMNS, TURN_RECORD_COLUMNS, Result, TimelineRow
from tltsim.sim.agentic import Turns, agentic_rollout
from tltsim.sim.engine import exact_rollout, fast_rollout
from tltsim.sim.hooks import Policy
from tltsim.sim.recorder import SimRecorder
from tltsim.sim.speculation import strategies_text
from tltsim.core.summary import summarize
from tltsim.trace import Trace
from tltsim.trace.schema import flat_turns, tool_calls


GC_YOUNG = 50_000  # allocations between collections of the garbage collector's youngest generation during a run


@contextmanager
def fewer_collections():
    """Python's cyclic garbage collector run less often while a replay allocates its records (timeline rows, heap
    entries, intervals) and restored after: at its default threshold (700) its collections took about a fifth of an
    agentic replay's time and a few percent of a single-turn one (docs/investigations/replay_speed.md), and a run's
    objects live until its result is built, so collecting them young frees little. The results do not depend on it."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], GC_YOUNG), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Simulator:
    agentic_reference = False  # multi-turn rollouts by the event executor that scans every row
    # (agentic.reference.Run), the fast one's reference, instead of the fast one: for benchmarks and tests that
    # compare them

    def __init__(self, trace: Trace, cfg: SimConfig, policy: Policy | None = None, cost=None):
        self.cfg = cfg.checked()
        c = cfg.cluster
        self.model = load_model(c.model)
        self.gpu = load_gpu(c.gpu)
        self.cost = cost or Roofline(self.model, self.gpu, c.tp, cfg.cost)
        if cfg.calibration.applied:  # a calibrated cluster (tltsim.analysis.calibration)
            self.cost = Calibrated(self.cost, cfg.calibration)
        self.policy = policy or Policy()
        self.reserved_workers = self.policy.reserved_gpus(c) // c.tp
        self.workers = c.gpus // c.tp  # one worker per TP group; the first `engines` roll out
        self.engines = self.workers - self.reserved_workers
        self.trace = trace.select_steps(steps_in(cfg.steps, trace.steps))
        if cfg.rl.skip_zero_advantage and "reward" not in self.trace.df:
            raise TltsimError(f"rl: skip_zero_advantage needs the trace's reward column, which {cfg.trace or 'the trace'} "
                              f"lacks; set it false or give a trace with rewards (a real run's trace.parquet)")
        self.split, self.split_note = choose_split(self.trace, c.split, self.engines)
        self.agentic = self.trace.agentic
        if self.agentic and not self.policy.multi_turn:
            raise TltsimError(f"policy {self.policy.name!r} does not run multi-turn trajectories (its rollout works on "
                              f"single responses); on {cfg.trace or 'this trace'} run verl, tlt and the tlt variants, "
                              f"das, partial, async, longest-first, or their combinations")
        if self.agentic and cfg.exact:
            raise TltsimError("exact: the per-iteration executor runs single-turn traces; drop --exact for a "
                              "multi-turn trace")
        self.policy.bind(self)

    def run(self, progress: bool = False) -> Result:
        env = simpy.Environment()
        self.recorder = SimRecorder()
        self._staleness: Counter = Counter()  # policy versions behind -> trained samples
        bar = tqdm(total=len(self.trace.steps), desc=f"simulating {self.policy.name}", unit="step", disable=not progress)
        with fewer_collections():
            main = env.process(self.policy.loop(self, env, bar) or self._run(env, bar))
            env.run(until=main)  # processes a policy leaves behind (async engines mid-update) end with the run
            bar.close()
            return self._result(float(env.now))

    # --- processes ---------------------------------------------------------------------------
    def step_columns(self):
        """(step, column arrays) of each trace step in order (the trace is sorted by step, prompt_id, sample)."""
        df = self.trace.df
        cols = {c: df[c].to_numpy() for c in ("step", "prompt_id", "sample", "prompt_len", "response_len")}
        if self.split == "trace":
            cols["engine"] = df["engine"].to_numpy()
        if "aborted" in df:
            cols["aborted"] = df["aborted"].to_numpy()
        if self.cfg.rl.skip_zero_advantage:
            cols["reward"] = df["reward"].to_numpy(dtype=float)
        if self.agentic:  # each row's turns (lists), and the tools' tokens its sequence holds
            for c in ("turn_response_len", "tool_latency_s", "tool_tokens", "turn_kept_len"):
                if c in df:
                    cols[c] = df[c].to_numpy()
            cols["tool_total"] = self.trace.sequence_tokens() - cols["response_len"]
        bounds = np.flatnonzero(np.diff(cols["step"])) + 1
        starts, ends = np.concatenate([[0], bounds]), np.concatenate([bounds, [len(df)]])
        return [(int(cols["step"][a]), {c: v[a:b] for c, v in cols.items()}) for a, b in zip(starts, ends)]

    def _run(self, env, bar):
        for step, cols in self.step_columns():
            yield env.process(self._step(env, step, cols))
            bar.update(1)

    def _step(self, env, step: int, df: dict):
        t0 = env.now
        if hasattr(self.cost, "begin_step"):  # a cost model that changes by step (tltsim.cost.scaled)
            self.cost.begin_step(step)
        df = self.policy.prepare_step(step, df)
        shares = self.policy.split(df, self.engines) or self._shares(df)
        self.policy.begin_step(step, t0)
        self._step_rows = df
        sr = self.policy.rollout(step, df, shares, self.run_engine)
        yield simpy.AllOf(env, [env.process(self._engine(env, e, sr)) for e in range(self.engines)])
        barrier = env.now
        outcome = self.policy.end_rollout(step, barrier, df, sr)
        settled = outcome.trained if outcome.trained is not None else sr.finished
        aborted = settled & df["aborted"] if "aborted" in df else np.zeros(len(settled), bool)  # the trace's aborted
        trained = settled & ~aborted  # rows: admitted, aborted, nothing to train on (thrown away: dropped)
        # the phases' rows: every trained one, or (rl.skip_zero_advantage) those with a gradient; the step's samples
        # and their off-policy columns count every trained row, as a real run and the async loop count them
        scored = trained & rewards_disagree(df) if self.cfg.rl.skip_zero_advantage else trained
        logprob, train = self._train_phases(df, scored, sr)
        phases = [
            ("reward", self.cfg.rl.reward_s + max(0.0, logprob - outcome.prework_gpu_s / self.cfg.cluster.gpus)),
            ("train", train + outcome.train_s),
            ("weight_sync", float(self.cost.sync_time())),
        ]
        self._record_rollout(step, t0, barrier, df, sr, outcome)
        if outcome.release_s > 0:  # workers busy past the barrier (a spot trainer's last batch)
            yield env.timeout(outcome.release_s)
        for state, dt in phases:
            t = env.now
            yield env.timeout(dt)
            for w in range(self.workers):
                self.recorder.interval(TimelineRow(step, w, state, t, env.now))
        finished = sr.finished_at[sr.finished]
        t90 = float(np.quantile(finished, 0.9, method="inverted_cdf")) if len(finished) else 0.0
        self.recorder.step(
            {
                "step": step,
                "t_start": t0,
                "rollout_s": barrier - t0,
                "reward_s": phases[0][1],
                "train_s": phases[1][1],
                "sync_s": phases[2][1],
                "total_s": env.now - t0,
                "responses": int(trained.sum()),
                "response_tokens": int(sr.generated.sum()),
                "tail_s": (barrier - t0) - t90,
                **self.off_policy_columns(step, df, trained, outcome.dropped + int(aborted.sum())),
                **self._spec_columns(sr.rollouts, barrier - t0),
                **(self._turn_columns(df, sr, barrier - t0) if self.agentic else {}),
                **outcome.columns,
            }
        )

    def run_engine(self, e: int, prompt_len, response_len, rows=None):
        """One EngineRollout of these requests (the step's `rows`, where the caller knows them) on engine e from
        time 0, fast or exact, with the policy's speculation."""
        spec = self.policy.speculation(e, rows)
        if self.agentic:
            df = self._step_rows
            pending = df["tool_pending_s"][rows] if "tool_pending_s" in df else None  # carried on in a tool call
            turns = Turns.of(prompt_len, *(df[c][rows] for c in ("turn_response_len", "tool_latency_s", "tool_tokens")),
                             pending, df["turn_kept_len"][rows] if "turn_kept_len" in df else None)
            return agentic_rollout(turns, self.cost, self.cfg.cluster.max_running, spec, self.policy.priority(df, rows),
                                   reference=self.agentic_reference)
        if not self.cfg.exact:
            return fast_rollout(prompt_len, response_len, self.cost, self.cfg.cluster.max_running, spec)
        env, out = simpy.Environment(), {}  # engines do not interact within a rollout: each runs in its own clock
        env.process(exact_rollout(env, prompt_len, response_len, self.cost, self.cfg.cluster.max_running, spec, out))
        env.run()
        return out["rollout"]

    def _engine(self, env, e: int, sr):
        ro = sr.rollouts.get(e)
        if ro is not None:
            yield env.timeout(ro.duration)
        self.policy.worker_done(e, env.now)

    def off_policy_columns(self, step: int, df: dict, trained: np.ndarray, dropped: int) -> dict:
        """The step's off-policy columns (tltsim.core.off_policy); its trained samples' staleness join the run's
        counts."""
        self._staleness.update(dict(zip(*np.unique(staleness(step, df, trained), return_counts=True))))
        return off_policy_columns(step, df, trained, dropped)

    # --- records -----------------------------------------------------------------------------
    def _train_phases(self, df: dict, trained: np.ndarray, sr) -> tuple[float, float]:
        """(log-prob, train) seconds of the step's trained sequences: spread over every GPU, or (rl.balance_train
        false) each engine's on its own TP group, as long as the slowest engine takes; padded as rl says."""
        lengths = (df["prompt_len"] + df["response_len"] + df.get("tool_total", 0))[trained].astype(float)
        if self.cfg.rl.balance_train:
            parts, gpus = [lengths], self.cfg.cluster.gpus
        else:
            engine = sr.engine[trained]
            parts, gpus = [lengths[engine == e] for e in range(self.engines)], self.cfg.cluster.tp
        work = [padded_tokens(x, self.cfg.rl.micro_batch_tokens) for x in parts]
        return tuple(max(float(phase(tokens, gpus, sq_tokens=sq)) for tokens, sq in work)
                     for phase in (self.cost.logprob_time, self.cost.train_time))

    def _shares(self, df: dict) -> list[np.ndarray]:
        """Each engine's rows, in admission order: contiguous chunks of prompt groups (verl), or by `engine`."""
        if self.split == "trace":
            order = np.argsort(df["engine"], kind="stable")
            cuts = np.searchsorted(df["engine"][order], np.arange(1, self.engines))
            return np.split(order, cuts)
        return group_shares(df.get("group", df["prompt_id"]), self.engines)

    def _record_rollout(self, step, t0, barrier, df, sr, outcome):
        for e in range(self.workers):
            ro = sr.rollouts.get(e)
            end = t0 + (ro.duration if ro else 0.0)
            if ro:
                self.recorder.timeline.extend(
                    TimelineRow(step, e, iv.state, t0 + iv.t_start, t0 + iv.t_end, iv.batch_size, iv.tokens,
                                iv.accepted, iv.strategy) for iv in ro.intervals if iv.t_end > iv.t_start)
                if ro.iterations:
                    it = pd.DataFrame(ro.iterations)
                    it.insert(0, "worker", e)
                    it.insert(0, "step", step)
                    it["t_end"] += t0
                    self.recorder.iterations.append(it)
            # after its share: what the policy used this worker for (e.g. drafter training), else idle
            span = outcome.spans.get(e)
            if span and span[2] > span[1]:
                state, a, b = span
                if a > end:
                    self.recorder.interval(TimelineRow(step, e, "idle", end, a))
                self.recorder.interval(TimelineRow(step, e, state, a, b))
                end = b
            free = barrier + outcome.release_s  # when the reward stage starts
            if free > end:
                self.recorder.interval(TimelineRow(step, e, "idle", end, free))
        if self.agentic:
            self._record_turns(step, t0, df, sr)
        ran = sr.engine >= 0
        self.recorder.step_requests({
            "step": np.full(int(ran.sum()), step), "prompt_id": df["prompt_id"][ran], "sample": df["sample"][ran],
            "engine": sr.engine[ran], "prompt_len": df["prompt_len"][ran], "response_len": sr.generated[ran],
            "admitted_at": t0 + sr.admitted_at[ran], "finished_at": t0 + sr.finished_at[ran],
            "finished": sr.finished[ran],
        })

    def _record_turns(self, step: int, t0: float, df: dict, sr) -> None:
        """The step's turns (TURN_RECORD_COLUMNS) that began generating, from each engine's rollout of its rows:
        their tokens generated this step (all of a turn's, unless a policy stopped the rollout in it)."""
        if not sr.turn_records:
            return
        parts = {c: [] for c in ("each", "turn", "prompt_tokens", "cached_tokens", "response_len", "admitted_at",
                                 "finished_at")}
        for rows, rec, offset in sr.turn_records:  # one frame of every run's turns, in the runs' order
            counts = np.diff(rec["first"])
            parts["each"].append(np.repeat(rows, counts))
            parts["turn"].append(np.arange(int(rec["first"][-1])) - np.repeat(rec["first"][:-1], counts))
            # whole tokens: a context that speculation's fractional gains summed to an ulp short still counts
            parts["prompt_tokens"].append(np.rint(rec["prompt_tokens"]).astype(np.int64))
            parts["cached_tokens"].append(np.rint(rec["cached_tokens"]).astype(np.int64))
            parts["response_len"].append(rec.get("got", rec["gen"]).astype(np.int64))
            parts["admitted_at"].append(t0 + offset + rec["admitted_at"])
            parts["finished_at"].append(t0 + offset + rec["finished_at"])
        col = {c: np.concatenate(v) for c, v in parts.items()}
        each, rows = col.pop("each"), np.concatenate([rows for rows, _, _ in sr.turn_records])
        frame = pd.DataFrame({
            "step": step, "prompt_id": df["prompt_id"][each], "sample": df["sample"][each], "engine": sr.engine[each],
            **col, "tool_latency_s": flat_turns(df["tool_latency_s"][rows], float),
            "tool_tokens": flat_turns(df["tool_tokens"][rows], np.int64),
        })[TURN_RECORD_COLUMNS]
        self.recorder.turns.append(frame[frame["admitted_at"].notna()])

    def _turn_columns(self, df: dict, sr, rollout_s: float) -> dict:
        """A multi-turn step's trajectories, turns, tool calls and the share of the engines' rollout time in which
        every trajectory an engine held waited on a tool."""
        turns = sum(len(t) for t in df["turn_response_len"])
        wait = sum(ro.tool_wait_s for ro in sr.rollouts.values())
        return {"trajectories": len(df["step"]), "turns": turns, "tool_calls": tool_calls(df["tool_latency_s"]),
                "tool_wait_share": wait / (self.engines * rollout_s) if rollout_s else 0.0}

    def _spec_columns(self, rollouts: dict, rollout_s: float) -> dict:
        sd_time = sum(iv.t_end - iv.t_start for ro in rollouts.values() for iv in ro.intervals if iv.state == "spec_decode")
        engine_time = sum(ro.duration for ro in rollouts.values())
        iters = sum(ro.sd_iterations for ro in rollouts.values())
        acc = sum(ro.sd_accepted for ro in rollouts.values())
        strategies: Counter = Counter()
        for ro in rollouts.values():
            strategies.update(ro.strategies)
        return {
            "sd_share": sd_time / engine_time if engine_time else 0.0,
            "mean_accepted": acc / iters if iters else np.nan,
            "strategies": strategies_text(strategies),
        }

    def _off_policy_summary(self, steps: pd.DataFrame) -> dict:
        samples = int(steps["responses"].sum())
        return {
            **off_policy_summary(steps, self._staleness),
            # mean length of the responses trained on / of the trace's responses: 1 unless the mix changed
            "trained_len_ratio": float((steps["trained_len_mean"] * steps["responses"]).sum()) / samples
            / float(self.trace.df["response_len"].mean()) if samples else np.nan,
        }

    def _result(self, makespan: float) -> Result:
        tl = self.recorder.timeline_frame()
        steps = pd.DataFrame(self.recorder.steps)
        summary = {
            "policy": self.policy.name,
            "trace": self.trace.meta.source,
            **summarize(tl, steps, makespan, self.cfg.cluster.gpus, self.cfg.cluster.tp),
            **self._off_policy_summary(steps),
            **self.policy.summary(),
        }
        requests = self.recorder.requests_frame()
        iterations = self.recorder.iterations_frame()
        turns = pd.concat(self.recorder.turns, ignore_index=True) if self.recorder.turns else None
        config = self.cfg.to_dict()
        config["engines"] = self.engines
        config["split"], config["split_note"] = self.split, self.split_note  # the split that ran, and why
        config["policy_knobs"] = {**config["policy_knobs"], **self.policy.knob_values}
        return Result(tl, steps[STEP_COLUMNS + [c for c in steps.columns if c not in STEP_COLUMNS]], requests, summary, config,
                      iterations, turns)


def choose_split(trace: Trace, split: str, engines: int) -> tuple[str, str]:
    """(the split that runs, a one-line note when the trace's engine column is not the one that runs, else "").

    "auto" takes the trace's engine column only when it names exactly the cluster's engines 0..engines-1;
    otherwise the responses go to all engines in contiguous chunks, and the note says so: replaying a
    two-rank log on four engines by its column would leave two engines idle every step."""
    has = "engine" in trace.df.columns
    named = sorted(int(e) for e in trace.df["engine"].unique()) if has else []
    if split == "trace":
        if not has:
            raise TltsimError("cluster.split = 'trace' but the trace has no 'engine' column; use split = 'contiguous'")
        if named[-1] >= engines:
            raise TltsimError(
                f"the trace records engines up to {named[-1]} but the cluster has {engines} "
                f"engines (gpus / tp); match the cluster to the recording or use split = 'contiguous'"
            )
        idle = engines - len(named)
        return "trace", (f"the trace's engine column names {len(named)} of the cluster's {engines} engines: with "
                         f"cluster.split = 'trace', {idle} engine(s) get no responses" if idle else "")
    if split == "auto" and has and named == list(range(engines)):
        return "trace", ""
    notes = []
    if split == "auto" and has:
        notes.append(
            f"the trace's engine column names {len(named)} engine(s) ({_id_range(named)}) but the cluster has "
            f"{engines} (gpus / tp): the responses are split over all {engines} in contiguous chunks of prompt groups, "
            f"as verl does; give the recorded cluster ({len(named)} engines) to replay the recorded assignment")
    groups = trace.df.groupby("step")["prompt_id"].nunique()
    if groups.min() < engines:  # one chunk of prompt groups per engine: some get none
        notes.append(f"step {int(groups.idxmin())} has {int(groups.min())} prompt groups for {engines} engines: "
                     f"{engines - int(groups.min())} engine(s) get no responses in it")
    return "contiguous", "; ".join(notes)


def _id_range(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1 else ", ".join(map(str, ids))


def simulate(trace: Trace, cfg: SimConfig, policy: Policy | None = None, progress: bool = False) -> Result:
    """Run `trace` through the simulator under `cfg` (and `policy`, default from cfg.policy)."""
    return Simulator(trace, cfg, policy).run(progress=progress)
