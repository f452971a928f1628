"""What a comparison says, read from its results: the ranking, each run's cost and reasons, and the results
that look wrong explained.

    rank(results)             -> [Finding, ...]: realisable policies by speedup (or, by="saved_per_step_s", by
                                 the seconds they save a step), best first, then the bounds
    ranking(values, bounds)   -> that order as indices, for a table of plain rows (compare's)
    headline(findings, base)  -> the fastest policy and its cost, the fastest on-policy one, the bounds
    bound(result)             -> what the run bounds (tltsim.core.glossary.BOUNDS), None for a policy
    explanations(results)     -> [str, ...]: what a bound bounds and who beats it, speculation that pays
                                 beyond the adaptive switch, zero idle time that went to drafter training,
                                 rollout times that are not comparable

The first result is the baseline. Every number in a sentence is read from the results' summaries,
timelines and configs; which clauses a sentence gets is decided by the thresholds below, so other
results give other sentences. Which runs are bounds rather than policies is tltsim.core.glossary.BOUNDS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from tltsim.core.glossary import BOUNDS
from tltsim.analysis.report.plots.steps import NO_IDLE  # idle_fraction at or below which a run had no idle time
from tltsim.analysis.report.plots.style import labelled
from tltsim.core.summary import OVERLAPS, rollout_overlap

SAME = 0.02  # speedups within 2% of 1 are "no faster" / "no slower"
SPECULATES = 0.01  # sd_share above which a run counts as speculating
IDLE = 0.05  # idle_fraction above which idle time is worth a word
PHASE = 0.02  # a change of reward/train/sync time worth a word: this share of the baseline's makespan
WEAK_DRAFTER = 0.8  # mean_accepted below this x the best speculating run's is a weak drafter
LEN_CHANGE = 0.005  # trained_len_ratio further than this from 1 is a changed sample mix
MORE_SD = 0.1  # sd_share this much above another run's: speculates in more of its engine time
ON_POLICY = "none (on-policy)"  # the off-policy cost of a run with none
NO_BETTER_DRAFTER = 0.95  # another run's mean_accepted at least this x a run's: that run's drafter is no better


@dataclass(frozen=True)
class Finding:
    """One run of a comparison: its speedups over the baseline, its cost to the training data, and why."""

    label: str
    speedup: float  # baseline makespan / makespan
    saved_per_step_s: float  # baseline mean_step_s - mean_step_s
    rollout_speedup: float  # baseline rollout_s / rollout_s; nan where rollout_s is not a rollout (overlap)
    cost: str  # off-policy cost, "none (on-policy)" when there is none
    on_policy: bool  # every trained response generated whole by the weights that train on it, none dropped
    why: str  # one sentence, from the data
    bound: str | None = None  # what the run bounds (tltsim.core.glossary.BOUNDS), None for a policy


def rank(results, by: str = "speedup") -> list[Finding]:
    """Every run as a Finding: the realisable policies by `by` (speedup or saved_per_step_s, best first), then the
    bounds."""
    runs = labelled(results)
    ctx = _Context(runs)
    findings = [_finding(label, r, ctx) for label, r in runs]
    return [findings[i] for i in ranking([getattr(f, by) for f in findings], [f.bound is not None for f in findings])]


def ranking(values, bounds) -> list[int]:
    """The order of the report's ranking (and of compare's table): the indices of the runs that are policies by
    `values` (speedup or saved_per_step_s), highest first (nan last, ties in run order), then those of the
    bounds (`bounds[i]`: run i is a bound), the same way."""
    return sorted(range(len(values)), key=lambda i: (bool(bounds[i]), -_num(values[i])))


def headline(findings: list[Finding], baseline: str) -> str:
    """The answer in a few sentences: the fastest policy at its cost, the fastest on-policy one, the bounds."""
    policies = [f for f in findings if f.bound is None]
    if not policies:
        return "Every run here is a bound, not a policy."
    best = policies[0]
    out = f"Fastest here: {best.label}, {best.speedup:.2f}× over {baseline}, off-policy cost: {best.cost}."
    if not best.on_policy:
        on = next((f for f in policies if f.on_policy), None)
        if on is not None:
            cost = "" if on.cost == ON_POLICY else f" (off-policy cost: {on.cost})"
            out += f" Fastest on-policy: {on.label}, {on.speedup:.2f}×{cost}."
    for f in findings:
        if f.bound is not None:
            out += f" {f.label} ({f.speedup:.2f}×) is a bound, not a policy."
    return out


def explanations(results) -> list[str]:
    """Sentences for results that look wrong, each only when the data shows the case."""
    runs = labelled(results)
    ctx = _Context(runs)
    return [*_bounds(runs, ctx), *_speculation_beyond_switch(runs, ctx), *_ties(runs), *_idle_to_drafter(runs),
            *_not_comparable(runs, ctx)]


class _Context:
    """What sentences compare against: the baseline and, among speculating runs, the best drafter."""

    def __init__(self, runs):
        self.base = runs[0][1]
        self.overlap = {label: rollout_overlap(r.timeline) for label, r in runs}
        spec = [(label, r.summary.get("mean_accepted")) for label, r in runs if _speculates(r)]
        spec = [(label, a) for label, a in spec if a is not None and a == a]
        self.best_drafter = max(spec, key=lambda p: p[1]) if spec else None


def _finding(label: str, r, ctx: _Context) -> Finding:
    b, s = ctx.base.summary, r.summary
    speedup = b["makespan_s"] / s["makespan_s"] if s["makespan_s"] else math.nan
    overlaps = ctx.overlap[label] > OVERLAPS
    roll = math.nan if overlaps or not s["rollout_s"] else b["rollout_s"] / s["rollout_s"]
    on_policy = (not s.get("staleness_mean", 0) and not s.get("resumed_fraction", 0)
                 and not s.get("dropped_fraction", 0))
    return Finding(label, speedup, b["mean_step_s"] - s["mean_step_s"], roll, _cost(s), on_policy,
                   _why(label, r, speedup, ctx), bound(r))


def bound(r) -> str | None:
    """What the run bounds, None for a realisable policy (by the policy its summary names)."""
    return BOUNDS.get(str(r.summary.get("policy", "")))


def _cost(s: dict) -> str:
    parts = []
    if s.get("staleness_mean", 0):
        parts.append(f"staleness {s['staleness_mean']:.2f} versions (max {s.get('staleness_max', 0)})")
    if s.get("resumed_fraction", 0):
        parts.append(f"{_pct(s['resumed_fraction'])} of trained responses resumed")
    if s.get("dropped_fraction", 0):
        parts.append(f"{_pct(s['dropped_fraction'])} of generated responses dropped")
    ratio = s.get("trained_len_ratio")
    if ratio is not None and ratio == ratio and abs(ratio - 1) > LEN_CHANGE:
        parts.append(f"trained responses {_pct(abs(1 - ratio))} {'shorter' if ratio < 1 else 'longer'} "
                     "than the trace's")
    if not parts:
        return ON_POLICY
    return ", ".join(parts)


def _why(label: str, r, speedup: float, ctx: _Context) -> str:
    """One sentence: how the run's time differs from the baseline's, and the mechanisms the data shows."""
    b, s = ctx.base.summary, r.summary
    if r is ctx.base:
        return (f"The baseline: rollout is {_pct(s['rollout_share'])} of its time, {_pct(s['tail_share'])} of "
                f"rollout is the long tail (after 90% of a step's responses finished), and GPUs sit idle "
                f"{_pct(s['idle_fraction'])} of the time.")
    if speedup > 1 + SAME:
        verdict = f"{speedup:.2f}× faster"
    elif speedup < 1 - SAME:
        verdict = f"{1 / speedup:.2f}× slower"
    else:
        verdict = f"no faster ({speedup:.2f}×)"
    clauses = []
    if ctx.overlap[label] > OVERLAPS:
        clauses.append(f"its rollout runs beside training ({_pct(ctx.overlap[label])} of its generation time "
                       f"overlaps training), so steps waited only {s['rollout_s']:.1f} s in all for responses")
    else:
        clauses.append(f"rollout takes {_secs(s['rollout_s'])} s against {_secs(b['rollout_s'])} s "
                       f"({b['rollout_s'] / s['rollout_s']:.2f}×)" if s["rollout_s"] else "no rollout time")
        clauses += _rollout_mechanisms(s, b, ctx)
    clauses += _phase_changes(r, ctx)
    if _idle_to_drafter_run(s):
        clauses.append(f"idle GPUs trained the drafter instead of idling ({_drafter_time(s)})")
    elif s["idle_fraction"] > IDLE:
        clauses.append(f"GPUs sit idle {_pct(s['idle_fraction'])} of the time "
                       f"(the baseline's: {_pct(b['idle_fraction'])})")
    return f"{verdict}: " + "; ".join(clauses) + "."


def _rollout_mechanisms(s: dict, b: dict, ctx: _Context) -> list[str]:
    """What the data shows about why rollout time changed: speculation, steps ended early, the tail."""
    out = []
    if s.get("sd_share", 0) > SPECULATES:
        acc = s.get("mean_accepted")
        what = f"speculative decoding in {_pct(s['sd_share'])} of engine time"
        if acc is not None and acc == acc:
            what += f" at {acc:.2f} tokens per verify"
            best = ctx.best_drafter
            if best is not None and acc < WEAK_DRAFTER * best[1]:
                what += f", a weak drafter (the best here: {best[1]:.2f}, {best[0]})"
        out.append(what)
    if s.get("resumed_fraction", 0) or s.get("dropped_fraction", 0):
        out.append(_ends_early(s))
    if b["tail_share"]:
        out.append(f"the tail is {_pct(s['tail_share'])} of rollout against {_pct(b['tail_share'])}")
    return out


def _ends_early(s: dict) -> str:
    how = []
    if s.get("resumed_fraction", 0):
        how.append(f"carries unfinished responses into the next step ({_pct(s['resumed_fraction'])} of trained "
                   "responses resumed)")
    if s.get("dropped_fraction", 0):
        how.append(f"aborts the responses still running ({_pct(s['dropped_fraction'])} of generated responses "
                   "dropped)")
    return "it ends a step before all its responses finish and " + " and ".join(how)


def _phase_changes(r, ctx: _Context) -> list[str]:
    """The other step phases whose time changed by a share of the baseline's makespan worth a word."""
    b, s = ctx.base.summary, r.summary
    out = []
    for key, name in (("reward_s", "reward"), ("train_s", "training"), ("sync_s", "weight sync")):
        if key in s and key in b and abs(s[key] - b[key]) > PHASE * b["makespan_s"]:
            out.append(f"{name} takes {_secs(s[key])} s against {_secs(b[key])} s")
    return out


def _bounds(runs, ctx: _Context) -> list[str]:
    out = []
    for label, r in runs:
        what = bound(r)
        if what is None:
            continue
        policies = [(lab, x) for lab, x in runs if bound(x) is None]
        beat = [(lab, x) for lab, x in policies if x.summary["makespan_s"] < r.summary["makespan_s"]]
        text = f"{label} is a bound, not a policy: {what}"
        if beat:
            text += " Beating it here: " + "; ".join(f"{lab} ({_means(x, ctx.overlap[lab])})" for lab, x in beat) + "."
        elif policies:
            near_label, near = min(policies, key=lambda p: p[1].summary["makespan_s"])
            text += (f" No policy beats it here end to end; the closest is {near_label} "
                     f"({near.summary['makespan_s']:,.1f} s against {r.summary['makespan_s']:,.1f} s).")
        under = [(lab, x) for lab, x in policies if x.summary["rollout_s"] < r.summary["rollout_s"]
                 and (lab, x) not in beat]
        if under:
            text += " Rollout shorter than its own: " + "; ".join(
                f"{lab} ({x.summary['rollout_s']:,.1f} s against {r.summary['rollout_s']:,.1f} s: "
                f"{_means(x, ctx.overlap[lab])})" for lab, x in under) + "."
        out.append(text)
    return out


def _means(r, overlap: float) -> str:
    """The mechanisms that put a run outside plain synchronous decoding, from its data."""
    s = r.summary
    m = []
    if overlap > OVERLAPS:
        m.append(f"it overlaps rollout with training ({_pct(overlap)} of its generation time), so its rollout_s "
                 "is only the wait for responses")
    if s.get("sd_share", 0) > SPECULATES:
        m.append(f"it speculates ({_pct(s['sd_share'])} of engine time)")
    if overlap <= OVERLAPS and (s.get("resumed_fraction", 0) or s.get("dropped_fraction", 0)):
        m.append(_ends_early(s))
    if 0 < overlap <= OVERLAPS:
        m.append(f"it starts the reward stage before its rollout ends ({_pct(overlap)} of its generation time "
                 "beside it)")
    return "; ".join(m) or "no mechanism in its data puts it outside plain synchronous decoding"


def _speculation_beyond_switch(runs, ctx: _Context) -> list[str]:
    """The run that speculates most beats runs that speculate less with as good a drafter: SD paid beyond
    the adaptive switch's threshold on this cluster."""
    spec = [(lab, r) for lab, r in runs if _speculates(r) and _plain_step(r, ctx.overlap[lab])]
    if len(spec) < 2:
        return []
    top_label, top = max(spec, key=lambda p: p[1].summary["sd_share"])
    t = top.summary
    slower = [(lab, r) for lab, r in spec if r.summary["sd_share"] < t["sd_share"] - MORE_SD
              and r.summary["makespan_s"] > t["makespan_s"]
              and r.summary.get("mean_accepted", 0) >= NO_BETTER_DRAFTER * t.get("mean_accepted", math.inf)]
    if not slower:
        return []
    names = ", ".join(lab for lab, _ in slower)
    shares = [r.summary["sd_share"] for _, r in slower]
    thresholds = sorted({k for _, r in slower if (k := _switch_threshold(r)) is not None})
    switch = (f" (the adaptive switch turns SD on only once an engine's batch falls to "
              f"{' / '.join(map(str, thresholds))} requests)") if thresholds else ""
    accepted = [r.summary["mean_accepted"] for _, r in slower]
    return [f"{top_label} beats {names}: it speculates in {_pct(t['sd_share'])} of engine time against "
            f"{_span(shares, _pct)}{switch}, with a drafter no better ({t['mean_accepted']:.2f} tokens per verify "
            f"against {_span(accepted, '{:.2f}'.format)}), so on this trace and cluster speculation also pays at "
            f"the large batches where the others still decode plainly: rollout {_secs(t['rollout_s'])} s against "
            f"{_secs(min(r.summary['rollout_s'] for _, r in slower))} s or more."]


TIE = 1e-9  # relative: two runs whose makespan, rollout, SD share, idle share and drafter training agree this closely
# made the same decisions


def _ties(runs) -> list[str]:
    """Runs of different policies that tie on every figure, and why: where they all speculated from their engines'
    first iteration, because each one's switch threshold is at or above the largest batch an engine ran."""
    keys = ("makespan_s", "rollout_s", "sd_share", "idle_fraction", "drafter_train_gpu_seconds")
    groups: list[list] = []
    for lab, r in runs:
        if bound(r) is not None:
            continue
        for g in groups:
            s0, s1 = g[0][1].summary, r.summary
            if all(math.isclose(s0.get(k, 0.0), s1.get(k, 0.0), rel_tol=TIE, abs_tol=TIE) for k in keys):
                g.append((lab, r))
                break
        else:
            groups.append([(lab, r)])
    out = []
    for g in (g for g in groups if len(g) > 1):
        names = " and ".join(lab for lab, _ in g)
        s0 = g[0][1].summary
        line = (f"{names} tie on every figure ({_secs(s0['mean_step_s'])} s a step, SD in {_pct(s0['sd_share'])} of "
                f"engine time): they made the same decisions on this trace and cluster")
        tl = pd.concat([r.timeline for _, r in g])
        largest = tl.loc[tl["state"].isin(("decode", "spec_decode")), "batch_size"].max()
        reasons = [_from_first_iteration(lab, r, largest) for lab, r in g]
        if s0["sd_share"] > 0 and largest == largest and all(reasons):
            line += (f": no engine ran more than {largest:.0f} requests at once, {' and '.join(reasons)}, so each "
                     f"speculated from its engines' first iteration")
        out.append(line + ".")
    return out


def _from_first_iteration(label: str, r, largest: float) -> str | None:
    """Why `r` speculated from its engines' first iteration, given the largest batch any engine ran, or None."""
    if r.config.get("policy_knobs", {}).get("sd") == "always":
        return f"{label} speculates from the first token"
    t = _switch_threshold(r)
    return f"{label} switches at a batch of {t} or below" if t is not None and t >= largest else None


def _switch_threshold(r) -> int | None:
    """The batch at or below which the run's switch turned SD on: the one tlt-auto learned (sd_threshold), else
    the threshold knob; None for a run without one."""
    learned = r.summary.get("sd_threshold")
    return learned if learned is not None else r.config.get("policy_knobs", {}).get("threshold")


def _span(values, fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _idle_to_drafter_run(s: dict) -> bool:
    """No idle time because the drafter trained on it (a sizeable share of GPU time), not for another reason."""
    return s["idle_fraction"] <= NO_IDLE and s.get("drafter_train_gpu_seconds", 0) > IDLE * s["gpu_seconds"]


def _drafter_time(s: dict) -> str:
    return f"{s['drafter_train_gpu_seconds']:,.0f} GPU-s, {_pct(s['drafter_train_gpu_seconds'] / s['gpu_seconds'])} " \
           "of its GPU time"


def _idle_to_drafter(runs) -> list[str]:
    """Runs with no idle time whose idle GPUs trained the drafter, beside runs that train one and still idle."""
    spot = [(lab, r.summary) for lab, r in runs if _idle_to_drafter_run(r.summary)]
    if not spot:
        return []
    text = (", ".join(f"{lab} ({_drafter_time(s)})" for lab, s in spot)
            + f": idle_fraction {max(s['idle_fraction'] for _, s in spot):.3f}"
            + (" because" if len(spot) == 1 else ", each because")
            + " the GPUs that finished their rollout share early trained the drafter instead of waiting for "
              "the tail: busy, not idle.")
    idle = [(lab, r.summary) for lab, r in runs if r.summary.get("drafter_train_gpu_seconds", 0) > 0
            and r.summary["idle_fraction"] > IDLE]
    if idle:
        text += " " + "; ".join(f"{lab} trains its drafter for {s['drafter_train_gpu_seconds']:,.0f} GPU-s only "
                                f"and leaves those GPUs idle (idle_fraction {s['idle_fraction']:.3f})"
                                for lab, s in idle) + "."
    return [text]


def _not_comparable(runs, ctx: _Context) -> list[str]:
    b = ctx.base.summary
    out = []
    for lab, r in runs:
        share = ctx.overlap[lab]
        if share > OVERLAPS and r.summary["rollout_s"]:
            out.append(f"{lab}'s rollout speedup ({b['rollout_s'] / r.summary['rollout_s']:.1f}×) is not comparable: "
                       f"its rollout runs beside training ({_pct(share)} of its generation time overlaps training), "
                       f"so its rollout_s ({r.summary['rollout_s']:.1f} s) is only the time training waited for "
                       f"responses. The charts leave it out of rollout speedups; compare it end to end.")
    return out


def _plain_step(r, overlap: float) -> bool:
    """A synchronous step that trains on every response it generates, on-policy: speculation is what differs."""
    s = r.summary
    return overlap <= OVERLAPS and not s.get("resumed_fraction", 0) and not s.get("dropped_fraction", 0)


def _speculates(r) -> bool:
    return r.summary.get("sd_share", 0) > SPECULATES


def _pct(x: float) -> str:
    p = 100 * x
    return f"{p:.0f}%" if abs(p) >= 10 or p == 0 else f"{p:.1f}%"


def _secs(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _num(x: float) -> float:
    return -math.inf if x != x else x
