"""A run directory (`tltsim real run -o`): whether it can take a run, new or resumed, checked before any worker
starts; the config.json it holds read in today's names."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from real.run import checkpoint
from real.run.config import RunConfig
from tltsim.control.decisions import DecisionKnobs
from tltsim.core.errors import TltsimError, TltsimWarning


def recorded_config(record: dict) -> dict:
    """A run's config.json in today's names: a run recorded before a setting existed has its default then
    (repeat_prompts false), one recorded before the drafter's names its checkpoint as drafter_checkpoint and its
    knobs as DecisionKnobs.renamed reads them (a trained drafter's method then was eagle)."""
    out = {"repeat_prompts": False, **record}
    if "drafter" in out:
        out["drafter_checkpoint"] = out.pop("drafter")
    knobs = out.get("knobs") or {}
    if {"spot", "family", "cotrain"} & set(knobs) or knobs.get("drafter") in ("adaptive", "static", "history"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the record's own names, read as they were meant
            out["knobs"] = {"drafter": "eagle", **DecisionKnobs.renamed(out.get("policy", ""), knobs)}
    return out


def check_run_dir(config: RunConfig, out: str | Path, resume: bool) -> bool:
    """Whether the workers start from RUN_DIR's checkpoint; TltsimError where `out` cannot take this run (`config`
    checked).

    --resume on a run killed before its first checkpoint (records, no checkpoint) starts it again from
    step 0, dropping its records, as it drops the records past the checkpoint of a later kill."""
    out = Path(out)
    has_run = (out / "summary.json").exists() or checkpoint.exists(out)
    if not resume and has_run:
        raise TltsimError(f"{out}: holds a run already; pass --resume to continue it (from its last checkpoint, "
                          "or from step 0 if it has none) or choose another -o")
    if resume:
        if not (out / "config.json").is_file():
            raise TltsimError(f"{out}: no run to resume (no checkpoint, no records); run without --resume")
        old = recorded_config(json.loads((out / "config.json").read_text()))
        new = json.loads(json.dumps(config.to_dict(), default=str))
        differ = sorted(k for k in set(old) | set(new) if k not in ("steps", "command") and old.get(k) != new.get(k))
        if differ:
            raise TltsimError(f"{out}: --resume with a different config ({', '.join(differ)}); "
                              "repeat the original command's options (only --steps may change)")
        if not checkpoint.exists(out):
            warnings.warn(f"{out}: the run was stopped before its first checkpoint; --resume starts it again "
                          "from step 0", TltsimWarning, stacklevel=3)
            return False
    return resume
