"""Would the ranking hold if the trained drafter were 20% better or worse? The report's line on it.

    ranking_sensitivity(trace, cfg, times) -> [row, ...]      # one row per change (CHANGES)
    reordered(rows) -> str                                     # the report's sentence ("" without rows)

The report asks it of the ranking's first TOP policies (the bounds left out), the choice a user makes, in the
ranking's own order.

The simulator's accepted length and drift of a trained drafter are fitted to one drafter (TLT's, or a calibration's
run); another model, task or drafter accepts more or less and drifts faster or slower. Each change of CHANGES
moves one of them by 20% (the accepted length at the reference draft tree, through the drafter's quality at RL's
start and its trained best, q_start and q_max; the drift per policy update) for every policy of the comparison
that drafts with a trained drafter (it has the knobs); a policy without one (verl, a model-free drafter, the
long-tail answers alone) keeps its time. A row says which pairs of the policies change places.

Cheap by design, as the drift sensitivity (tltsim.analysis.drafter.drift_sensitivity): the change is played on the
trace's first STEPS steps of the run's steps, and each policy's time in the ranking (its makespan, or its mean step
on a calibrated cluster) scaled by what the change does to its mean step there.
"""
from __future__ import annotations

from dataclasses import replace

from tltsim.analysis.drafter.drift_sensitivity import STEPS, mean_step
from tltsim.config import steps_in
from tltsim.core.glossary import BOUNDS
from tltsim.core.drafter_names import TRAINED
from tltsim.drafter.acceptance import RL_REFERENCE_STRATEGY, AcceptanceModel, invert_quality
from tltsim.drafter.quality import DrafterConfig
from tltsim.policies import knobs_for, make_policy, policy_knobs

TOP = 5  # the ranking's first policies the report asks about
CHANGES = (("accepted length", 0.8), ("accepted length", 1.2), ("drift", 0.8), ("drift", 1.2))
KNOBS = ("q_start", "q_max", "drift")  # what a policy with a trained drafter takes, and the changes move


def ranking_sensitivity(trace, cfg, times: dict[str, float]) -> list[dict]:
    """One row per change of CHANGES, for the policies of `times` (policy -> the seconds the ranking orders by,
    fewer first): `change` (what moved, in words), `before` and `order` (the policies fastest first, unchanged
    and changed) and `swapped` (the pairs (faster before, slower before) that changed places); [] where no policy
    drafts with a trained drafter."""
    times = {p: t for p, t in times.items() if p not in BOUNDS}  # a bound is not in the policies' order
    moved = [p for p in times if _trained(p, cfg)]
    if not moved:
        return []
    short = trace.select_steps(steps_in(cfg.steps, trace.steps)[:STEPS])
    cfg = replace(cfg, steps="")
    unchanged = {p: mean_step(short, cfg, p, {}) for p in moved}
    before = _order(times)
    model, strategy = AcceptanceModel(), RL_REFERENCE_STRATEGY
    q_start, drift = cfg.drafter.trained()
    q0 = float(cfg.policy_knobs.get("q_start", q_start))
    q_max = max(q0, float(cfg.policy_knobs.get("q_max", DrafterConfig.q_max)))
    drift = float(cfg.policy_knobs.get("drift", drift))
    rows = []
    for what, factor in CHANGES:
        if what == "drift":
            knobs = {"drift": drift * factor}
        else:
            knobs = {n: invert_quality(model, strategy, factor * model.mean(strategy, q)) for n, q in
                     (("q_start", q0), ("q_max", q_max))}
        changed = {**times, **{p: times[p] * mean_step(short, cfg, p, knobs) / unchanged[p] for p in moved}}
        after = _order(changed)
        swapped = [(a, b) for i, a in enumerate(before) for b in before[i + 1:] if after.index(a) > after.index(b)]
        rows.append({"change": f"{what} {factor - 1:+.0%}", "before": before, "order": after, "swapped": swapped})
    return rows


def reordered(rows: list[dict]) -> str:
    """The report's one sentence: which changes of the trained drafter reorder which policies, or that none does;
    "" without rows."""
    if not rows:
        return ""
    head = f"The order {' > '.join(rows[0]['before'])}"
    moves = [f"{r['change']} puts " + ", ".join(f"{b} ahead of {a}" for a, b in r["swapped"]) for r in rows
             if r["swapped"]]
    if not moves:
        return (f"{head} holds over the first {STEPS} steps if the trained drafter accepts 20% more or fewer tokens a "
                f"verify or drifts 20% faster or slower.")
    return f"{head} rests on the trained drafter's figures over the first {STEPS} steps: " + "; ".join(moves) + "."


def _trained(policy: str, cfg) -> bool:
    """Whether `policy`, with the comparison's knobs, drafts with a trained drafter (a part of it has the knobs a
    change moves and a trained method, or the hybrid)."""
    if not {n for n, _, _ in policy_knobs(policy)} >= set(KNOBS):  # verl, a long-tail answer alone: none
        return False
    built = make_policy(policy, knobs_for(policy, cfg.policy_knobs))
    return any(all(hasattr(k, n) for n in KNOBS) and (k.drafter in TRAINED or k.drafter == "hybrid")
               for k in (getattr(p, "k", None) for p in getattr(built, "parts", [built])) if k is not None)


def _order(times: dict) -> list[str]:
    return sorted(times, key=lambda p: (times[p], list(times).index(p)))

