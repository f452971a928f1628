"""A verl run's per-step metrics: the file logger's JSONL, or a wandb CSV export of the same keys.

With `trainer.logger=[console,file]`, verl's FileLogger (verl/utils/tracking.py) truncates the path in
VERL_FILE_LOGGER_PATH when the trainer starts and writes one line per `Tracking.log(data, step)`:

    {"step": 3, "data": {"timing_s/gen": 61.2, "timing_s/step": 98.7, ...}}

(verl 0.9.1; later versions may add elapsed_seconds, which is ignored; which keys appear varies with version
and config). A line without `timing_s/gen` (the validation before training, a validation-only line) is not
a training step and is skipped. `timing_s/step` is the step without validation: on a step that validates,
`timing_s/testing` is logged beside it and is not part of it (docs/verl.md). A step whose every request
aborted (verl logs `response_length/mean` 0.0, or `response/aborted_ratio` 1.0, and null for the means it
cannot take) generated no response to time: it is left out, named in one `tltsim: warning:` line, and its steps
are the frame's `attrs["all_aborted"]` (the calibration notes them). A last line cut short (a trainer killed
while writing it: no newline, not JSON) is left out with a warning. Training steps never go back within one
run: a step below an earlier one means two runs in one file, refused naming both lines. A wandb CSV has one row per
step: a step column (`step`, `_step` or `Step`) and the same keys as columns, or `<run> - <key>` columns as
a panel's export names them.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError, TltsimWarning
from tltsim.core.jsonl import read_objects

# verl's step timers (verl/trainer/ppo/ray_trainer.py: marked_timer(name), logged as timing_s/<name> by
# metric_utils.compute_timing_metrics); each is the column <name>_s, NaN where a line lacks it
TIMERS = (
    "gen",  # the rollout: generate_sequences (with an agent loop, also what the loop does: reward scoring there)
    "reward",  # the reward, where the trainer computes it (about 0 when the agent loop scored the responses)
    "old_log_prob", "ref", "values",  # the forwards: old policy, reference policy, critic values
    "adv",  # advantages, on the driver
    "update_critic", "update_actor",  # the updates
    "update_weights",  # the weight sync to the rollout replicas (newer verl; older ones sync inside gen)
    "step",  # the whole step
)
GEN = "timing_s/gen"
LEN_MEAN, LEN_MAX = "response_length/mean", "response_length/max"  # tokens, EOS counted
# speculative rollout, where the run speculates: verl's compute_spec_decode_metrics (verl/trainer/ppo/ray_trainer.py)
# logs per step the mean over requests of 1 + accepted / verify steps (a request with no verify step counts 0) and of
# accepted / drafted; verl-SpeCo (verl_speco/trainer/speco_ray_trainer.py) its own 1 + accepted / verify rounds
SPEC_KEYS = {"rollout/spec_accept_length": "spec_accept_length", "rollout/spec_accept_rate": "spec_accept_rate",
             "drafter/spec_decode/mean_acceptance_length": "speco_accept_length"}
KEYS = {**{f"timing_s/{t}": f"{t}_s" for t in TIMERS}, LEN_MEAN: "len_mean", LEN_MAX: "len_max", **SPEC_KEYS}
STEP_COLUMNS = ("step", "_step", "Step")
ABORTED_RATIO = "response/aborted_ratio"  # the share of a step's requests that aborted (verl logs it beside the lengths)

# verl's agent loop (verl/experimental/agent_loop/agent_loop.py, AgentLoopManager._performance_metrics) times each
# trajectory: `generate_sequences` the seconds of its calls to the inference server (every assistant turn, queueing
# in the server included), `tool_calls` the seconds of its tool rounds (each round's calls run together: one wait a
# round); the step's min/max/mean over its trajectories, and the slowest trajectory's (by the two summed), go into
# the trainer's timing dict and are logged as timing_s/agent_loop/... (compute_timing_metrics). num_turns/* is
# compute_data_metrics' (verl/trainer/ppo/metric_utils.py) over the trajectories' user + assistant turns + 1.
AGENT_LOOP = "timing_s/agent_loop/"
AGENT_LOOP_KEYS = {
    **{f"{AGENT_LOOP}generate_sequences/{s}": f"agent_gen_{s}_s" for s in ("mean", "min", "max")},
    **{f"{AGENT_LOOP}tool_calls/{s}": f"agent_tool_{s}_s" for s in ("mean", "min", "max")},
    f"{AGENT_LOOP}slowest/generate_sequences": "slowest_gen_s", f"{AGENT_LOOP}slowest/tool_calls": "slowest_tool_s",
    f"{AGENT_LOOP}slowest/prompt_length": "slowest_prompt_len",  # tokens, though logged under timing_s/
    f"{AGENT_LOOP}slowest/response_length": "slowest_response_len",
    **{f"num_turns/{s}": f"turns_{s}" for s in ("mean", "min", "max")},
}
KEYS.update(AGENT_LOOP_KEYS)  # read as the trainer's keys; a file without them has no such columns


def read_metrics(path) -> pd.DataFrame:
    """Per training step (the index, verl's global step): <timer>_s for each of TIMERS, len_mean, len_max and the
    speculative columns of SPEC_KEYS (NaN where absent; a column is all NaN when the file never has its key).

    Raises TltsimError naming the file, line or column when the file is not such a log."""
    path = Path(path)
    if not path.is_file():
        raise TltsimError(f"{path} does not exist; give the file verl's file logger wrote (VERL_FILE_LOGGER_PATH) "
                          f"or a wandb CSV export")
    aborted: dict[int, str] = {}  # step -> where it is (line or row): steps whose every request aborted
    rows = _read_csv(path, aborted) if path.suffix.lower() == ".csv" else _read_jsonl(path, aborted)
    if not rows and aborted:
        raise TltsimError(f"{path}: every step's requests aborted (response_length/mean 0.0): no step generated a "
                          f"response to time; give the metrics of a run that generated")
    if not rows:
        raise TltsimError(f"{path}: no line has {GEN!r}; these are not the metrics of a verl training run "
                          f"(log with trainer.logger=[console,file])")
    left_out = sorted(set(aborted) - set(rows))  # a step logged again after an aborted line: the later one counts
    if left_out:
        warnings.warn(TltsimWarning(
            f"{path}: step(s) {', '.join(f'{s} ({aborted[s]})' for s in left_out)}: every request aborted "
            f"(response_length/mean 0.0): left out, as no response was generated to time"))
    frame = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    frame.index.name = "step"
    frame = frame.reindex(columns=_columns(frame))
    frame.attrs["all_aborted"] = left_out
    return frame


def _columns(frame: pd.DataFrame) -> list[str]:
    """The trainer's columns, then the agent loop's where the file has any of them (a run whose rollout went
    through verl's agent loop)."""
    agent = list(AGENT_LOOP_KEYS.values())
    return [c for c in KEYS.values() if c not in agent] + (agent if frame.columns.isin(agent).any() else [])


def agent_loop(frame: pd.DataFrame) -> bool:
    """Whether these metrics (read_metrics') time an agent loop's trajectories (timing_s/agent_loop/...)."""
    return "agent_gen_mean_s" in frame.columns and bool(frame["agent_gen_mean_s"].notna().any())


def _all_aborted(data: dict) -> bool:
    """Whether a step's metrics say every request aborted: no response token (verl's mean counts the EOS token,
    so a generated response has one), or an aborted share of 1."""
    mean, ratio = data.get(LEN_MEAN), data.get(ABORTED_RATIO)
    number = lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)  # noqa: E731
    return (number(mean) and mean == 0) or (number(ratio) and ratio == 1)


def _read_jsonl(path: Path, aborted: dict) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    last = None  # (step, line) of the last training line: steps never go back within one run
    for n, rec in read_objects(path, "verl's file-logger metrics", cut_last=True):
        if "step" not in rec or not isinstance(rec.get("data"), dict):
            raise TltsimError(f"{path}, line {n}: expected {{\"step\": k, \"data\": {{...}}}} as verl's file logger "
                              f"writes it; is this VERL_FILE_LOGGER_PATH's file?")
        step = _step(rec["step"], f"{path}, line {n}, key 'step'")
        if GEN in rec["data"] and last is not None and step < last[0]:
            raise TltsimError(f"{path}, line {n}: step {step} after step {last[0]} (line {last[1]}): the steps start "
                              f"again, so the file holds two runs; keep one run's lines (from the last start) and "
                              f"give that file")
        if GEN in rec["data"]:
            last = (step, n)
        if GEN in rec["data"] and _all_aborted(rec["data"]):
            aborted[step] = f"line {n}"
            rows.pop(step, None)  # a step logged twice: the later line wins
            continue
        row = {KEYS[k]: _number(rec["data"][k], f"{path}, line {n}, key {k!r}", KEYS[k]) for k in KEYS
               if k in rec["data"]}
        if "gen_s" in row and not math.isnan(row["gen_s"]):
            rows.setdefault(step, {}).update(row)  # a step logged twice: the later values win
    return rows


def _read_csv(path: Path, aborted: dict) -> dict[int, dict]:
    try:
        df = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise TltsimError(f"{path}: not a readable CSV file ({e})") from None
    step_col = next((c for c in STEP_COLUMNS if c in df.columns), None)
    if step_col is None:
        raise TltsimError(f"{path}: no step column ({', '.join(STEP_COLUMNS)}); export the run's history with its steps")
    cols = {}
    for key, name in KEYS.items():
        found = [c for c in df.columns if c == key or c.endswith(f" - {key}")]
        if len(found) > 1:
            raise TltsimError(f"{path}: columns {', '.join(map(repr, found))} all hold {key}; export one run")
        if found:
            cols[name] = found[0]
    rows: dict[int, dict] = {}
    ratio = next((c for c in df.columns if c == ABORTED_RATIO or c.endswith(f" - {ABORTED_RATIO}")), None)
    for i, rec in enumerate(df.to_dict("records"), start=2):  # line 1 is the header
        data = {key: rec[cols[name]] for key, name in KEYS.items() if name in cols}
        data.update({ABORTED_RATIO: rec[ratio]} if ratio else {})
        if "gen_s" in cols and not pd.isna(rec[cols["gen_s"]]) and _all_aborted(data):
            aborted[_step(rec[step_col], f"{path}, line {i}, column {step_col!r}")] = f"line {i}"
            continue
        row = {name: _number(rec[c], f"{path}, line {i}, column {c!r}", name) for name, c in cols.items()}
        if "gen_s" in row and not math.isnan(row["gen_s"]):
            rows[_step(rec[step_col], f"{path}, line {i}, column {step_col!r}")] = row
    return rows


def _step(v, where: str) -> int:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise TltsimError(f"{where}: {v!r} is not a step number")
    return int(v)


# a step's rollout and the step itself take time, and a response has a token; another phase may take none (a
# reference model's forward where there is no reference model: verl logs 0.0)
POSITIVE = ("gen_s", "step_s", "len_mean", "len_max")


def _number(v, where: str, name: str) -> float:
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TltsimError(f"{where}: {v!r} is not a number")
    try:
        v = float(v)
    except OverflowError:  # an integer of hundreds of digits
        v = math.inf
    if math.isinf(v) or v < 0 or (v == 0 and name in POSITIVE):
        low = "> 0" if name in POSITIVE else ">= 0"
        raise TltsimError(f"{where}: {v!r} is not a time or length (a finite number {low})")
    return v
