"""Replay a real run in the simulator and compare: is the simulator right about this machine?

    tltsim validate RUN_DIR... --profile PROFILE.csv

For each run directory written by `tltsim real run`: its recorded trace (with the `engine` column, so
every response lands on the worker that served it) goes through the simulator with the same policy and
knobs (`recorded_knobs`: as the run acted on them, a rule added since as the run had it), one engine per
worker (TP 1), and the `profiled` cost model fitted from PROFILE.csv, on the
simulator's exact executor (every iteration run and recorded, deciding before each as a real engine does). The
drafter's quality is replayed from the run: at each step, the quality whose modelled accepted length
for that step's most-used strategy equals the measured one (so this checks the timing model, not the
drafter-staleness model; tltsim.analysis.drafter.fit fits that one), and on the exact executor each response's own,
from what it accepted over the strategies it was verified with (`ReplayedQuality`). Both sides then go through
one function, `step_metrics`, so predicted and measured figures are computed the same way; and both iterations frames
through `tltsim.analysis.validation.work_domain.work_metrics`, the work domain: iterations, switch points, accepted tokens and
drafter-training samples per step and engine, which the machine's speed does not move.

With `speed=True` (`--speed`), the profile's times are scaled step by step by how fast the machine
ran then: a run measures, before every step, a fixed plain decode iteration of its target
(`real.tools.profile.speed_probe`); over the fitted model's time for that iteration it is the step's speed
factor (tltsim.cost.scaled.StepScaled). On a machine shared with others, whose speed moves by tens of
percent between minutes, this separates the simulator's errors from the machine's drift; the
unscaled comparison stays the test of the profile as a forecast.

A pair's speedup under `speed=True` also comes at one machine speed: two runs made one after the other on
such a machine ran at different speeds, and the ratio of their makespans carries that drift
(docs/investigations/cpu_pairs.md has a pair whose two orders differ by about what speculation saved).
`speed_ratio` is the second run's mean speed factor over the first's (each step's factor weighted by its
measured seconds; above 1: the machine ran the second run slower); `measured_at_one_speed` is the measured
speedup times it, and `predicted_at_one_speed` the ratio of the two unscaled replays' makespans, which the drift cannot reach.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.cost.profiled import Profiled
from tltsim.cost.scaled import StepScaled
from tltsim.core.errors import TltsimError
from tltsim.core.records import IDLE_STATES
from tltsim.policies import knobs_for, make_policy
from tltsim.policies.compose import Composite
from tltsim.policies.tlt import TLTPolicy
from tltsim.control import Strategy
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.core.records import SPEED_BATCH, SPEED_CONTEXT, Result
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, load as load_trace
from tltsim.analysis.validation.divergence import COLUMNS as DIVERGENCE
from tltsim.analysis.validation.divergence import divergences
from tltsim.analysis.validation.stream import draw_from, step_frame, stream_frame
from tltsim.control.groups import streamed
from tltsim.analysis.validation.work_domain import compare_work, relative_error, request_acceptance

METRICS = ["rollout_s", "total_s", "idle_fraction", "sd_share", "drafter_train_s", "mean_accepted"]
TURN_METRICS = ["tool_wait_s", "turns", "tool_calls"]  # a multi-turn run's, besides METRICS
# a policy's own decisions per step, where its run records them, besides METRICS: the groups partial carried on and
# tail-batching parked, the samples resumed and dropped and their mean staleness (tltsim.core.off_policy), the rows
# migrate moved and when
POLICY_METRICS = ["carried_groups", "parked_groups", "resumed", "dropped", "staleness_mean", "migrated", "migrate_at_s"]
OFF_POLICY_SUMMARY = ["staleness_mean", "resumed_fraction", "dropped_fraction"]  # the run's, in `overall`
# compared as differences, not relative errors: fractions (in points), counts and staleness (in policy versions)
ABSOLUTE = {"idle_fraction", "sd_share", *(m for m in POLICY_METRICS if m != "migrate_at_s"), *OFF_POLICY_SUMMARY}
TRACE_FILE = "trace.parquet"
PROFILE_FILE = "profile.csv"
SPEED_WINDOW = 5  # steps whose speed probes speak for a step's speed (centred; fewer at the run's ends)


def step_metrics(result: Result) -> pd.DataFrame:
    """Per step: rollout and step seconds, idle fraction, SD share, drafter-training seconds, accepted length."""
    tl = result.timeline.assign(d=result.timeline["t_end"] - result.timeline["t_start"])
    workers = tl["worker"].nunique()
    by_state = tl.pivot_table(index="step", columns="state", values="d", aggfunc="sum", fill_value=0.0)
    steps = result.steps.set_index("step")
    out = pd.DataFrame(index=steps.index)
    out["rollout_s"] = steps["rollout_s"]
    out["total_s"] = steps["total_s"]
    out["idle_fraction"] = sum(by_state.get(s, 0.0) for s in IDLE_STATES) / (workers * steps["total_s"])
    out["sd_share"] = steps["sd_share"] if "sd_share" in steps else 0.0
    out["drafter_train_s"] = by_state.get("drafter_train", 0.0)
    out["mean_accepted"] = steps["mean_accepted"] if "mean_accepted" in steps else np.nan
    for column in POLICY_METRICS:
        if column in steps:
            out[column] = steps[column]
    if "turns" in steps:  # a multi-turn run: engine-seconds with every trajectory waiting on a tool, turns, calls
        out["tool_wait_s"] = steps["tool_wait_share"] * steps["rollout_s"] * workers
        out["turns"], out["tool_calls"] = steps["turns"], steps["tool_calls"]
    return out.fillna({"idle_fraction": 0.0, "drafter_train_s": 0.0})


@dataclass
class Validation:
    per_step: pd.DataFrame  # run, step, metric, measured, predicted, error
    overall: pd.DataFrame  # run, metric, measured, predicted, error
    speedup: dict | None  # measured / predicted speedup of the second run over the first (e.g. tlt over verl)
    predicted: dict  # run name -> simulated Result
    work: pd.DataFrame  # run, step, engine, metric, measured, predicted, error (tltsim.analysis.validation.work_domain.compare_work)
    divergence: pd.DataFrame  # where the replay decided otherwise, and why (tltsim.analysis.validation.divergence.COLUMNS)

    def to_json(self) -> dict:
        """Plain JSON types; undefined cells (NaN, NA) become null, so strict JSON readers accept it."""
        return {"overall": _records(self.overall), "speedup": self.speedup, "per_step": _records(self.per_step),
                "work": _records(self.work), "divergence": _records(self.divergence)}


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: (None if v is pd.NA or (isinstance(v, float) and np.isnan(v)) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def load_run(run_dir: str | Path) -> tuple[Result, object]:
    run_dir = Path(run_dir)
    result = Result.load(run_dir)
    if not (run_dir / TRACE_FILE).exists():
        raise TltsimError(f"{run_dir}: no {TRACE_FILE}; validate needs a run directory written by `tltsim real run`")
    return result, load_trace(run_dir / TRACE_FILE)


def speed_reference(cost, iterations: int) -> float:
    """The cost model's seconds for the speed probe's median iteration (of `iterations` timed ones, at batch
    SPEED_BATCH, after prompts of SPEED_CONTEXT tokens: the batch then holds SPEED_CONTEXT + (iterations+1)/2
    tokens a row)."""
    return float(cost.decode_time(SPEED_BATCH, SPEED_BATCH * (SPEED_CONTEXT + (iterations + 1) / 2)))


def speed_factors(result: Result, cost, where: str = "run") -> dict[int, float]:
    """Per step, how much slower than `cost` says the machine ran it: the median of the speed probes of the
    SPEED_WINDOW steps around it, over the model's time for the probe's iteration.

    One probe is a few tens of milliseconds: on a shared machine it catches spikes of that length (2x for
    a moment) that the step's rollout, hundreds of milliseconds, does not see, while slow spells last
    minutes; the median over neighbouring steps follows the spells and drops the spikes. On 8 runs of
    benchmarks/bench_validate.py, the mean |log| error of the estimate against the step's measured plain
    decode speed: 0.127 unscaled, 0.100 from the step's own probe, 0.084 from its and the next step's,
    0.081 from this median (docs/investigations/validate_repeatability.md)."""
    steps = result.steps
    if "speed_probe_s" not in steps or steps["speed_probe_s"].isna().any():
        raise TltsimError(f"{where}: no speed probe for every step; --speed needs a run made with "
                          f"`tltsim real run --speed-probe N` (N > 0, the default)")
    probe = steps.set_index("step")["speed_probe_s"].astype(float)
    during = probe.rolling(SPEED_WINDOW, center=True, min_periods=1).median()
    ref = speed_reference(cost, int(result.config.get("speed_probe", 8)))
    return {int(s): float(v / ref) for s, v in during.items()}


def replay(run_dir: str | Path, cost, speed: bool = False, policy: str | None = None, knobs: dict | None = None,
           qualities: dict[int, float] | None = None) -> tuple[Result, Result]:
    """(measured, predicted) for one run directory, with the given cost model (scaled by the run's per-step
    speed factors when `speed`). `policy`, `knobs` and `qualities` (per step, the drafter quality) replace the
    run's own for a what-if on its responses (docs/investigations/longtail_whatif.py): what another policy, or
    another drafter, would have made of them on this machine."""
    measured, trace = load_run(run_dir)
    if speed:
        cost = StepScaled(cost, speed_factors(measured, cost, str(run_dir)))
    cfg = measured.config
    workers = int(cfg.get("workers", measured.timeline["worker"].nunique()))
    per_engine = int(trace.df.groupby(["step", "engine"]).size().max())
    stream = None
    asynchronous = cfg.get("policy", "verl").split("+")[0] == "async"
    if streamed(cfg.get("policy", "verl")) or asynchronous:  # the stream the run drew from; the replay's own stops,
        # carries, parks (or, asynchronously, starts and takes)
        stream = stream_frame(trace.df, measured.steps, cfg, trace.meta.max_response_len)
        trace = Trace.from_frame(step_frame(stream, len(measured.steps)), trace.meta)
        per_engine = ((int(cfg["knobs"]["max_staleness"]) + 1) * int(cfg["prompts"]) if asynchronous else
                      math.ceil(int(measured.steps["launched_groups"].max()) / workers)) * int(cfg["group"])
    sim_cfg = SimConfig(
        trace=str(Path(run_dir) / TRACE_FILE),
        policy=policy or cfg.get("policy", "verl"),
        # each row on the worker that ran it (the trace's engine column), but where rows came from the stream or moved
        # mid-step (migrate records a moved row on the worker that finished it): the policy's own placement
        cluster=ClusterConfig(gpus=workers, tp=1, max_running=int(cfg.get("max_running") or per_engine),
                              split="contiguous" if stream is not None or migrates(cfg.get("policy", "")) else "trace"),
        rl=RLConfig(reward_s=0.0, balance_train=False,
                    micro_batch_tokens=int((cfg.get("grpo") or {}).get("micro_batch_tokens", 0)),
                    skip_zero_advantage=bool((cfg.get("grpo") or {}).get("skip_zero_advantage", False))),
        seed=int(cfg.get("seed", 0)),
        exact=not trace.agentic,  # a multi-turn run replays on the event executor (tltsim.sim.agentic)
    )
    knobs = recorded_knobs(cfg) if knobs is None else dict(knobs)
    if knobs:  # a real spot trainer keeps its drafter and optimizer in memory (no load), stops at the end of its
        # batch in progress, and saves its drafter inside its training span, at this machine's speed (no fixed
        # seconds of a paper's checkpoint, which would also tie the samples to the machine's speed under --speed)
        spot = dict(load_s=0.0, checkpoint_s=0.0, drafter_batch=int(cfg.get("drafter_batch", 0)))
        knobs.update(knobs_for(sim_cfg.policy, spot))
    policy = make_policy(sim_cfg.policy, knobs)

    def replayed(part):  # a what-if drafter (`qualities`) drafts for every row alike
        if not isinstance(part, TLTPolicy):
            return part
        return (ReplayedQuality(part, measured_qualities(measured), request_acceptance(measured))
                if qualities is None else ReplayedQuality(part, qualities))

    policy = Composite(*map(replayed, policy.parts)) if isinstance(policy, Composite) else replayed(policy)
    sim = Simulator(trace, sim_cfg, policy, cost=cost)
    if stream is not None:
        draw_from(sim.policy, stream)
    predicted = sim.run()
    return measured, predicted


def migrates(policy: str) -> bool:
    """Whether a run of `policy` moves rows between workers mid-step (migrate, migrate+tlt)."""
    return policy.removesuffix("+tlt") == "migrate"


def recorded_knobs(config: dict) -> dict:
    """The decision knobs a real run acted on, from its config.json: as recorded, with the rules of knobs added
    since spelled out as the run had them (a guard that judged a fresh measurement after its first speculative
    iteration, before `guard_trial`)."""
    knobs = dict(config.get("knobs") or {})
    if knobs.get("guard") and "guard_trial" not in knobs:
        knobs["guard_trial"] = 1
    return knobs


def _one_speed(run_dir: Path, measured: Result, cost) -> tuple[float, Result]:
    """(the run's mean speed factor, each step's weighted by its measured seconds; its replay unscaled)."""
    factors = speed_factors(measured, cost, str(run_dir))
    total = measured.steps.set_index("step")["total_s"].astype(float)
    mean = float(sum(factors[int(s)] * t for s, t in total.items()) / total.sum())
    return mean, replay(run_dir, cost, speed=False)[1]


class ReplayedQuality(TLTPolicy):
    """A speculative policy whose drafter quality at each step is the one measured in the real run, and, given
    the run's `requests` (`tltsim.analysis.validation.work_domain.request_acceptance`), each response's own on the exact
    executor: the quality at which the acceptance model's mean, over the strategies that response was verified
    with, is what it accepted. Rows that accept less then fall behind and make the tail, as in the run."""

    def __init__(self, inner: TLTPolicy, qualities: dict[int, float], requests: pd.DataFrame | None = None):
        self.__dict__.update(inner.__dict__)
        self.qualities = qualities
        self.requests = requests.set_index(["step", "prompt_id", "sample"]) if requests is not None else None
        self.request_quality = None  # the step's rows' qualities (NaN: the row never speculated in the run)

    def prepare_step(self, step: int, df: dict) -> dict:
        df = super().prepare_step(step, df)
        self.request_quality = None
        if self.requests is not None and step in self.requests.index.get_level_values("step"):
            run = self.requests.loc[step]
            keys = list(zip(df["prompt_id"].tolist(), df["sample"].tolist()))
            self.request_quality = np.array([
                self._inverted(run.loc[k, "strategies"], run.loc[k, "accepted"]) if k in run.index else np.nan
                for k in keys])
        return df

    def _inverted(self, strategies: dict, accepted: float) -> float:
        if not strategies or not np.isfinite(accepted):
            return np.nan
        return invert_quality(self.acceptance, {Strategy.parse(s): n for s, n in strategies.items()}, accepted)

    def speculation(self, engine: int, rows=None):
        spec = super().speculation(engine, rows)
        if self.request_quality is None or rows is None:
            return spec
        q = self.request_quality[np.asarray(rows)]
        return replace(spec, row_quality=np.where(np.isnan(q), spec.quality, q))

    def begin_step(self, step: int, t: float) -> None:
        super().begin_step(step, t)
        if step in self.qualities:
            self.quality_now = self.qualities[step]

    def begin_version(self, version: int, t: float) -> None:
        """An asynchronous run's engines serve policy version k while the trainer makes its step k (the run records
        their iterations under that step): the step's measured quality is the version's."""
        super().begin_version(version, t)
        self.step = version
        if version in self.qualities:
            self.quality_now = self.qualities[version]

    def _quality(self, rows=None) -> float:
        """The measured quality where the step has one, for every engine (a history drafter's too: what the real
        run accepted, in place of the history model's estimate)."""
        return self.qualities[self.step] if self.step in self.qualities else super()._quality(rows)


def measured_qualities(result: Result) -> dict[int, float]:
    """Per step, the drafter quality that gives the measured mean accepted length for the most-used strategy."""
    it = result.iterations
    if it is None or "mode" not in it:
        return {}
    spec = it[it["mode"] == "spec_decode"]
    model = AcceptanceModel()
    out = {}
    for step, g in spec.groupby("step"):
        strategy = Strategy.parse(Counter(g["strategy"]).most_common(1)[0][0])
        target = float(g["accepted"].mean())
        out[int(step)] = invert_quality(model, strategy, target)
    return out


def validate(run_dirs: list[str | Path], profile: str | Path | None = None, speed: bool = False) -> Validation:
    if not run_dirs:
        raise TltsimError("validate: name at least one run directory (written by `tltsim real run`)")
    loaded = [load_run(Path(d))[0] for d in run_dirs]  # a clear error for a directory that is not a run, first
    if len(loaded) >= 2 and len(loaded[0].steps) != len(loaded[1].steps):  # the speedup: a ratio of makespans
        raise TltsimError(f"validate: {run_dirs[0]} has {len(loaded[0].steps)} steps and {run_dirs[1]} "
                          f"{len(loaded[1].steps)}; the speedup compares whole runs, so give two runs of as many steps "
                          f"(continue the shorter with `tltsim real run --resume --steps N -o RUN_DIR`)")
    per_step, overall, predicted, work, diverged = [], [], {}, [], []
    runs = {}
    for d in run_dirs:
        d = Path(d)
        prof = Path(profile) if profile else d / PROFILE_FILE
        if profile is None and not prof.exists():
            raise TltsimError(f"{d}: no profile given and none in the run directory; measure one with "
                              f"`tltsim real profile -o profile.csv` on the same machine and pass --profile profile.csv")
        cost = Profiled.fit(prof)
        measured, pred = replay(d, cost, speed)
        name = f"{measured.config.get('policy', d.name)} ({d.name})"
        runs[name] = (measured, pred, _one_speed(d, measured, cost) if speed and len(run_dirs) >= 2 else None)
        predicted[name] = pred
        if pred.iterations is not None:  # the work domain counts iterations: the exact replay's, not a multi-turn one's
            work.append(compare_work(name, measured, pred))
            diverged.append(divergences(name, measured, pred, recorded_knobs(measured.config)))
        m, p = step_metrics(measured), step_metrics(pred)
        for metric in METRICS + [k for k in TURN_METRICS + POLICY_METRICS if k in m and k in p]:
            for step in m.index:
                mv, pv = float(m.at[step, metric]), float(p.at[step, metric]) if step in p.index else np.nan
                per_step.append({"run": name, "step": int(step), "metric": metric, "measured": mv, "predicted": pv,
                                 "error": _error(metric, mv, pv)})
        for metric, mv, pv in [
            *[(k, measured.summary[k], pred.summary[k]) for k in ("makespan_s", "rollout_s", "reward_s", "train_s",
                                                                   "sync_s", "idle_fraction")],
            ("sd_share", measured.summary.get("sd_share", 0.0), pred.summary.get("sd_share", 0.0)),
            ("drafter_train_s", float(m["drafter_train_s"].sum()), float(p["drafter_train_s"].sum())),
            *[(k, measured.summary[k], pred.summary[k]) for k in OFF_POLICY_SUMMARY
              if k in measured.summary and k in pred.summary],
        ]:
            overall.append({"run": name, "metric": metric, "measured": mv, "predicted": pv, "error": _error(metric, mv, pv)})
        errs = pd.DataFrame([r for r in per_step if r["run"] == name and r["metric"] == "rollout_s"])["error"].abs()
        overall.append({"run": name, "metric": "median |error| of per-step rollout", "measured": np.nan,
                        "predicted": np.nan, "error": float(errs.median())})
    speedup = None
    if len(runs) >= 2:
        (a, (ma, pa, oa)), (b, (mb, pb, ob)) = list(runs.items())[:2]
        meas = ma.summary["makespan_s"] / mb.summary["makespan_s"]
        pred_ = pa.summary["makespan_s"] / pb.summary["makespan_s"]
        speedup = {"baseline": a, "run": b, "measured": meas, "predicted": pred_, "error": pred_ / meas - 1}
        if speed:
            ratio = ob[0] / oa[0]
            speedup.update(speed_ratio=ratio, measured_at_one_speed=meas * ratio,
                           predicted_at_one_speed=oa[1].summary["makespan_s"] / ob[1].summary["makespan_s"])
    no_work = pd.DataFrame(columns=["run", "step", "engine", "metric", "measured", "predicted", "error"])
    return Validation(pd.DataFrame(per_step), pd.DataFrame(overall), speedup, predicted,
                      pd.concat(work, ignore_index=True) if work else no_work,
                      _concat([d for d in diverged if len(d)], diverged[0]) if diverged else pd.DataFrame(columns=DIVERGENCE))


def _concat(frames: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    """The frames one after another (their own dtypes), or `empty` when there are none."""
    return pd.concat(frames, ignore_index=True) if frames else empty


def _error(metric: str, measured: float, predicted: float) -> float:
    """Relative error, or the difference for ABSOLUTE metrics (and where the measured value is zero)."""
    return predicted - measured if metric in ABSOLUTE else relative_error(measured, predicted)


# the manifest kinds of what `validate -o` writes (a validation; a calibration to a verl run), so may replace
VALIDATION_KINDS = ("validation", "calibration")


def write(validation: Validation, out: str | Path) -> Path:
    """per_step.csv, overall.csv, work.csv, divergence.csv, validation.json and predicted/<policy>/ (each simulated Result) in
    `out`, built whole beside it and swapped in: an earlier validation there goes whole, never mixed with this
    one; a directory holding anything else is refused (TltsimError) and left as it is."""
    from tltsim.core.io import atomic_dir, sealed, write_json, write_manifest

    out = Path(out)
    with atomic_dir(out, sealed(*VALIDATION_KINDS)) as tmp:
        validation.per_step.to_csv(tmp / "per_step.csv", index=False)
        validation.overall.to_csv(tmp / "overall.csv", index=False)
        validation.work.to_csv(tmp / "work.csv", index=False)
        validation.divergence.to_csv(tmp / "divergence.csv", index=False)
        write_json(tmp / "validation.json", validation.to_json())
        for name, res in validation.predicted.items():
            res.save(tmp / "predicted" / name.split(" ")[0])
        write_manifest(tmp, kind="validation")
    return out
