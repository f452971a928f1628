"""Length logs: one JSON line per prompt group with its responses' lengths, as verl-style length logs are and as
PolyTrace's instrumented trainers write them (`profile/packed_length_log/<run>/packed_lengths_step_<step>.jsonl`,
for its verl, rllm and verl-video runs). `tltsim trace convert LOG out.parquet`, LOG a directory of such step files
or one file. A line:

    {"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 112,
     "output": [450, 453, 396, 274, 26, 393, 1842, 681], "n_sampling": 8, "validate": false}

`input` is the prompt's length, `output` its group's response lengths, `dp_rank` the engine
(tltsim.trace.importers.frame_from_verl reads the lines). A line with `"validate": true` is a validation rollout,
not a training step's: it is left out (`TraceMeta.left_out` says how many). Beside its step files PolyTrace keeps
`reward_timings_step_<step>.jsonl` (each rank's reward seconds) and `dapo_filter_indices.jsonl` (which groups DAPO's
filter kept for training): neither holds a response length, so they are not read, and the provenance names them.
Such a log records no response cap: `trace convert --max-len` declares it.
"""
from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.core.jsonl import first_object, read_objects
from tltsim.trace.importers import frame_from_verl
from tltsim.trace.schema import Trace, TraceMeta

FILE = re.compile(r"packed_lengths_step_(\d+)\.jsonl")
WHAT = "a length log"


def is_length_log(path) -> bool:
    """True for a directory holding packed_lengths_step_<step>.jsonl files, or a .jsonl file whose first record has
    an "output" list of lengths."""
    path = Path(path)
    if path.is_dir():
        return any(FILE.fullmatch(f.name) for f in path.glob("*.jsonl"))
    if path.suffix.lower() != ".jsonl":
        return False
    first = first_object(path)
    return first is not None and isinstance(first.get("output"), list)


def read_length_log(path) -> Trace:
    """The trace of a length log file or directory (the module docstring); TltsimError naming the file, line and key
    of the first problem."""
    path = Path(path)
    files = sorted((f for f in path.glob("*.jsonl") if FILE.fullmatch(f.name)),
                   key=lambda f: int(FILE.fullmatch(f.name)[1])) if path.is_dir() else [path]
    frames, group, seen, validation, prompts = [], None, {}, 0, 0
    for f in files:
        records = read_objects(f, WHAT, parse_float=Decimal)  # exact: 3.0000000001 is not a length
        if not records:
            raise TltsimError(f"{f}: the file has no lines; {WHAT} has one JSON line per prompt group")
        training = [(n, rec) for n, rec in records if rec.get("validate") is not True]
        validation += len(records) - len(training)
        if not training:
            continue
        df, meta = frame_from_verl(training, f)
        for step in df["step"].unique().tolist():
            if step in seen:
                raise TltsimError(f"{f}: step {step} is also in {seen[step]}; {WHAT} has one file per step (remove "
                                  f"the copy)")
            seen[step] = f.name
        if group is not None and meta.group_size != group[0]:
            raise TltsimError(f"{f}: groups of {meta.group_size} samples, but {group[1]} has groups of {group[0]}; "
                              f"every step of a run samples n responses per prompt (convert the steps of one run)")
        group = group or (meta.group_size, f.name)
        frames.append(df)
        prompts += len(training)
    if not files:
        raise TltsimError(f"{path}: no packed_lengths_step_<step>.jsonl files; give a length log's directory or file")
    if not frames:
        raise TltsimError(f"{path}: every line is a validation rollout (\"validate\": true); give the training "
                          f"steps' log")
    others = _kinds(f for f in path.glob("*") if f.is_file() and f not in files) if path.is_dir() else []
    meta = TraceMeta(source="verl", group_size=group[0],
                     left_out=f"validation rollouts: {validation} prompt groups" if validation else "",
                     provenance=f"imported from the length log {path.name} ({', '.join(_kinds(files))}): "
                                f"{prompts} prompt groups" + (f"; not read (no response lengths): {', '.join(others)}"
                                                              if others else ""))
    return Trace.from_frame(pd.concat(frames, ignore_index=True), meta, path=path)


def _kinds(files) -> list[str]:
    """File names with their step number as <step>, each kind once with its count: reward_timings_step_<step>.jsonl
    (5 files)."""
    counts: dict[str, int] = {}
    for f in files:
        name = re.sub(r"_step_\d+", "_step_<step>", f.name)
        counts[name] = counts.get(name, 0) + 1
    return [name if n == 1 else f"{name} ({n} files)" for name, n in sorted(counts.items())]
