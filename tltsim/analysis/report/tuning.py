"""The tuning answer for a TLT run: its switch threshold, a small threshold search around it, the setting to pass.

    tune(result, trace=None) -> Tuning | None    None for a run that is not a simulated tlt or tlt-auto run

The search re-simulates the run (its trace, cluster and knobs) on the fast path over its first SEARCH_STEPS
steps, once per threshold in FACTORS x the run's threshold (tlt-auto's: the one it learned), with the switch
fixed (tlt), and once as tlt-auto: at most len(FACTORS) + 1 runs of SEARCH_STEPS steps, whatever the run's
length (`Tuning.cost` says it). The recommendation is the fastest setting of the search, unless it beats the
run's own setting by less than BETTER of its makespan: then the run's own (nothing to change).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from tltsim.config import SimConfig, from_dict, steps_in
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

TUNED = ("tlt", "tlt-auto")  # the policies whose switch the search tunes
SEARCH_STEPS = 3  # steps each search run simulates (the run's first)
FACTORS = (0.25, 0.5, 1, 2, 4)  # thresholds searched, as multiples of the run's
BETTER = 0.02  # a setting must be this share of makespan faster than the run's own to be recommended


@dataclass(frozen=True)
class Tuning:
    label: str  # the run
    policy: str  # tlt or tlt-auto
    threshold: int  # tlt: its fixed threshold; tlt-auto: the one it learned (sd_threshold)
    buckets: list | None  # tlt-auto: the batch buckets where it speculates (sd_buckets); None for tlt
    search: list  # [(setting as --knob flags, knobs, makespan_s over the searched steps)], fastest first
    steps: int  # steps each search run simulated
    recommended_knobs: dict  # what to pass (as --knob KEY=VALUE, with the run's --policy); {} to keep the run's
    own: str  # the run's own setting, as search names it

    @property
    def cost(self) -> str:
        return f"{len(self.search)} fast-path runs of {self.steps} step{'s' * (self.steps != 1)} each"

    @property
    def recommended(self) -> str:
        """The setting to pass, as flags."""
        if not self.recommended_knobs:
            return f"--policy {self.policy} as run (no setting searched is {BETTER:.0%} faster)"
        flags = _flags(self.policy, self.recommended_knobs)
        return f"--policy tlt-auto (that is, {flags})" if self.recommended_knobs == {"sd": "learned"} else flags

    def as_json(self) -> dict:
        return {"threshold": self.threshold, "buckets": self.buckets, "recommended_knobs": self.recommended_knobs,
                "threshold_search": [{"setting": s, "makespan_s": m} for s, _, m in self.search],
                "search_cost": self.cost}


def tune(result, trace=None, label: str | None = None) -> Tuning | None:
    """The tuning answer for `result` (a simulated tlt or tlt-auto run whose switch is adaptive or learned; None
    otherwise). `trace`: the run's
    trace when the caller holds it, else loaded from the path its config names (None when it is not there)."""
    c = result.config
    policy = result.summary.get("policy")
    if policy not in TUNED or "cluster" not in c or "policy_knobs" not in c:
        return None
    if trace is None:
        if not c.get("trace") or not Path(c["trace"]).exists():
            return None
        trace = load(c["trace"])
    known = {f.name for f in fields(SimConfig)}
    cfg = from_dict({k: v for k, v in c.items() if k in known})
    trace = trace.select_steps(steps_in(cfg.steps, trace.steps)[:SEARCH_STEPS])  # the run's first steps
    cfg = replace(cfg, steps="", exact=False)
    knobs = {k: v for k, v in c["policy_knobs"].items() if k in make_policy(policy).knob_names}
    if knobs.get("sd") not in ("adaptive", "learned"):  # speculation always or never: no switch to tune
        return None
    auto = knobs["sd"] == "learned"
    threshold = int(result.summary["sd_threshold"] if auto else knobs["threshold"])
    base = {**knobs, "sd": "adaptive"}
    candidates = {f"threshold={t}": {**base, "threshold": t}
                  for t in sorted({max(1, round(f * max(threshold, 1))) for f in FACTORS})}
    candidates["sd=learned"] = {**base, "sd": "learned"}
    runs = []
    for setting, k in candidates.items():
        makespan = Simulator(trace, cfg, make_policy(policy, k)).run().summary["makespan_s"]
        runs.append((setting, k, makespan))
    runs.sort(key=lambda r: (r[2], r[0]))
    own = "sd=learned" if auto else f"threshold={threshold}"
    own_makespan = next(m for s, _, m in runs if s == own)
    best, best_knobs, best_makespan = runs[0]
    recommended = {} if best == own or best_makespan > (1 - BETTER) * own_makespan else \
        {k: v for k, v in best_knobs.items() if v != knobs.get(k)}
    return Tuning(label or policy, policy, threshold, result.summary.get("sd_buckets") if auto else None, runs,
                  len(trace.steps), recommended, own)


def _flags(policy: str, knobs: dict) -> str:
    return f"--policy {policy} " + " ".join(f"--knob {k}={v}" for k, v in knobs.items())
