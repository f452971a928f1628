"""Whether, and how closely, the simulator has been checked against real runs of each policy: what the report's
ranking says beside every policy ("checked against a run").

A check is a pair of real runs, verl and the policy, replayed by `tltsim validate` (one machine speed: `--speed`
where both runs probed it): the predicted speedup of the policy over verl beside the measured one. The shipped pairs'
checks are recorded in data/checked.csv (`python benchmarks/bench_checked.py` replays them and writes it); a user's
own runs (`tltsim compare` and `tltsim report` with `--validated RUN...`) are replayed when the report is made.

    check_pairs([(baseline, run, profile), ...])   -> a frame of CHECK_COLUMNS, one row a pair
    shipped()                                      -> the shipped pairs' checks (data/checked.csv)
    validated_pairs(runs)                          -> the pairs of `--validated`: the first run, a verl run, with
                                                      each other one (each run directory's own profile.csv)
    verdict(checks, policy)                        -> the ranking's words for a policy: how close, over how many
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError

SHIPPED = Path(__file__).parent / "data" / "checked.csv"
# error: of the predicted speedup, at one machine speed where both runs probed it (validate --speed: the measured
# ratio corrected for the machine's drift between the runs); error_as_measured: of the plain ratio of makespans
CHECK_COLUMNS = ["policy", "run", "baseline", "profile", "steps", "measured_speedup", "predicted_speedup", "error",
                 "error_as_measured"]  # profile: the file name of the profile given, "" for each run's own


def check_pairs(pairs: list[tuple[str | Path, str | Path, str | Path | None]]) -> pd.DataFrame:
    """Each (verl run, policy run, profile: None for each run's own profile.csv) replayed by validate: the speedup
    measured and predicted at one machine speed where both runs probed it, else as measured."""
    from tltsim.analysis.validation.validate import validate  # the simulator: only when a check is made

    rows = []
    for baseline, run, profile in pairs:
        config = json.loads((Path(run) / "config.json").read_text())
        speed = all(json.loads((Path(d) / "config.json").read_text()).get("speed_probe", 0) > 0
                    for d in (baseline, run))
        s = validate([baseline, run], profile, speed=speed).speedup
        measured = s["measured_at_one_speed"] if speed else s["measured"]
        predicted = s["predicted_at_one_speed"] if speed else s["predicted"]
        steps = len(pd.read_parquet(Path(run) / "steps.parquet", columns=["step"]))
        rows.append({"policy": config["policy"], "run": Path(run).name, "baseline": Path(baseline).name,
                     "profile": Path(profile).name if profile else "", "steps": steps, "measured_speedup": measured, "predicted_speedup": predicted,
                     "error": predicted / measured - 1, "error_as_measured": s["error"]})
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def shipped() -> pd.DataFrame:
    """The shipped pairs' checks, as benchmarks/bench_checked.py recorded them."""
    return pd.read_csv(SHIPPED)


def validated_pairs(runs: list[str | Path]) -> list[tuple[Path, Path, None]]:
    """`--validated RUN...` as pairs: the first run (verl) beside each other one; TltsimError for a run directory
    that is not one, a first run that is not verl, or a run without its profile.csv (validate's replay needs it)."""
    runs = [Path(r) for r in runs]
    if len(runs) < 2:
        raise TltsimError("--validated: give a verl run and at least one run of a policy (`tltsim real run -o`), "
                          "the verl run first")
    for r in runs:
        if not (r / "config.json").is_file():
            raise TltsimError(f"--validated {r}: not a run directory (no config.json); give what `tltsim real run -o` "
                              f"wrote")
        if not (r / "profile.csv").is_file():
            raise TltsimError(f"--validated {r}: no profile.csv in it; measure one with `tltsim real profile -o "
                              f"{r / 'profile.csv'}` on the machine that made the run")
    first = json.loads((runs[0] / "config.json").read_text())["policy"]
    if first != "verl":
        raise TltsimError(f"--validated: the first run is the baseline, a verl run; {runs[0]} is a {first!r} run")
    return [(runs[0], r, None) for r in runs[1:]]


def verdict(checks: pd.DataFrame, policy: str) -> str:
    """The ranking's words for `policy`: the predicted speedup's error against the measured one over the pairs
    that checked it, or that none has."""
    errors = checks.loc[checks["policy"] == policy, "error"].to_numpy(dtype=float)
    if not len(errors):
        return "not yet"
    if len(errors) == 1:
        return f"{errors[0]:+.1%} (1 pair)"
    return f"{np.min(errors):+.1%} to {np.max(errors):+.1%} ({len(errors)} pairs)"
