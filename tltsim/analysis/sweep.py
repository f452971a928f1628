"""Parameter sweeps: many simulations from one TOML file, in parallel, cached and resumable.

A sweep file has a base config and the runs that vary it:

    base = "examples/sweeps/base.toml"     # a config file as `tltsim simulate --config` reads,
                                           # or a [base] table with the same sections
    [grid]                                 # cartesian product over dotted config keys (last varies fastest);
    "policy" = ["verl", "tlt"]             # [[grid]] tables give several products, concatenated
    "cluster.gpus" = [32, 64]
    [[runs]]                               # and/or explicit runs, each a table of dotted keys
    policy = "tlt"
    "policy_knobs.threshold" = 16

Paths (base, traces) are relative to the directory tltsim runs in, as for `tltsim simulate`.

Each run is a full SimConfig. Its cache key hashes the config, the trace file's content and the
tltsim version; its result lands in DIR/runs/<key>/, written into a hidden temporary directory and
renamed into place, so DIR/runs/<key>/ is either a complete result or absent. A run whose result
exists is not run again (a damaged one, whose manifest disagrees with its files, is removed and run
again): a sweep killed midway and started again recomputes only what had not finished. One sweep
at a time per DIR (a start removes the temporary directories a killed one left).

The results table (DIR/results.parquet and .csv) has one row per run in the sweep file's order:
`run` (the key), the run's config as flattened dotted columns, then its summary metrics (a metric
whose name is also a config key, such as `steps`, is prefixed `result.`).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from tltsim import config as configmod
from tltsim.core.errors import TltsimError
from tltsim.core.config_files import read_toml
from tltsim.core.io import (MANIFEST, atomic_path, check_output, exclusive, is_temporary, manifest_kind, read_manifest,
                       write_manifest, write_text)
from tltsim.policies import make_policy
from tltsim.sim.simulator import simulate
from tltsim.trace import load as load_trace
from tltsim.trace.formats import sidecar

BACKENDS = ("local", "ray")
# The numeric summary metrics of a simulated run, what `tltsim sweep --metric` plots (tests/analysis/test_sweep.py
# checks them against every policy's summary); `steps`, also a config key, is left out.
METRICS = ("makespan_s", "mean_step_s", "rollout_s", "reward_s", "train_s", "sync_s", "rollout_share", "gpu_seconds",
           "idle_gpu_seconds", "idle_fraction", "busy_gpu_seconds", "tail_share", "tokens_per_s", "sd_share",
           "mean_accepted", "drafter_train_gpu_seconds", "staleness_mean", "staleness_max", "resumed_fraction",
           "dropped_fraction", "trained_len_ratio")


@dataclass(frozen=True)
class Run:
    """One simulation of a sweep."""

    config: configmod.SimConfig  # the full config of the run
    overrides: dict  # the dotted keys the sweep file sets for this run, in file order
    trace_sha256: str  # content hash of the trace file (and its metadata sidecar)
    key: str  # cache key: hash of the config, the trace content and the tltsim version


@dataclass
class SweepOutcome:
    table: pd.DataFrame  # one row per run, in the sweep file's order
    executed: list[str]  # keys of the runs simulated by this call
    reused: list[str]  # keys of the runs whose cached result was used


# --- the sweep file ---------------------------------------------------------------------------------
def load_spec(path: str | Path) -> list[Run]:
    """Parse a sweep file into runs; every run's config, policy and trace is checked before any runs."""
    path = Path(path)
    spec = read_toml(path, "sweep file")
    unknown = sorted(set(spec) - {"base", "grid", "runs"})
    if unknown:
        raise TltsimError(f"{path}: unknown top-level key(s) {', '.join(unknown)}; a sweep file has base, grid, runs")
    base = _base(spec.get("base", {}), path)
    settings = _grid(spec.get("grid", []), path) + _runs(spec.get("runs", []), path)
    if not settings:
        raise TltsimError(f"{path}: no runs; add a [grid] table or [[runs]] entries")
    hashes: dict[str, str] = {}  # trace path -> content hash, each file read once
    return [_make_run(base, o, path, i, hashes) for i, o in enumerate(settings)]


def _base(value, path: Path) -> configmod.SimConfig:
    if isinstance(value, str):
        return configmod.load(value)
    if isinstance(value, dict):
        return configmod.from_dict(value, f"{path} [base]")
    raise TltsimError(f"{path}: base must be a config file path or a [base] table")


def _grid(value, path: Path) -> list[dict]:
    grids = [value] if isinstance(value, dict) else value
    out = []
    for g in grids:
        flat = _flatten(g) if isinstance(g, dict) else None
        if not flat:
            raise TltsimError(f"{path}: [grid] must be a table of dotted config keys to lists of values")
        for key, values in flat.items():
            if not isinstance(values, list) or not values:
                raise TltsimError(f'{path}: [grid] "{key}" must be a non-empty list of values, e.g. [16, 32]')
        out.extend(dict(zip(flat, combo)) for combo in itertools.product(*flat.values()))
    return out


def _runs(value, path: Path) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise TltsimError(f"{path}: runs must be [[runs]] tables of dotted config keys")
    return [_flatten(r) for r in value]


def _flatten(d: dict, prefix: str = "") -> dict:
    """{"cluster": {"gpus": 8}, "a.b": 1} -> {"cluster.gpus": 8, "a.b": 1}."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def _make_run(base: configmod.SimConfig, overrides: dict, path: Path, i: int, hashes: dict) -> Run:
    where = f"{path}: run {i} ({', '.join(f'{k}={v!r}' for k, v in overrides.items())})"
    try:
        cfg = configmod.override(base, **overrides)
        make_policy(cfg.policy, cfg.policy_knobs)
    except TltsimError as e:
        raise TltsimError(f"{where}: {e}") from None
    if not cfg.trace:
        raise TltsimError(f"{where}: no trace; set trace in the base config or sweep it in [grid]")
    if cfg.trace not in hashes:
        if not Path(cfg.trace).is_file():
            raise TltsimError(f"{where}: trace {cfg.trace!r} does not exist "
                              f"(paths are relative to the directory tltsim runs in)")
        hashes[cfg.trace] = trace_hash(cfg.trace)
    return Run(cfg, overrides, hashes[cfg.trace], run_key(cfg, hashes[cfg.trace]))


def run_key(cfg: configmod.SimConfig, trace_sha256: str) -> str:
    """16 hex digits of a SHA-256 over the full config, the trace file's content and the tltsim version."""
    blob = json.dumps({"config": cfg.to_dict(), "trace": trace_sha256, "tltsim": version("tltsim")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def trace_hash(trace: str | Path) -> str:
    """SHA-256 of a trace file's bytes and of its metadata sidecar when it has one."""
    path = Path(trace)
    h = hashlib.sha256(path.read_bytes())
    if sidecar(path).is_file():
        h.update(sidecar(path).read_bytes())
    return h.hexdigest()


# --- running ----------------------------------------------------------------------------------------
def run_sweep(runs: list[Run], out: str | Path, backend: str = "local", workers: int | None = None,
              progress: bool = True) -> SweepOutcome:
    """Simulate the runs whose result is not yet in `out`/runs/, then write and return the results table."""
    if backend not in BACKENDS:
        raise TltsimError(f"backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise TltsimError(f"workers = {workers}: must be >= 1")
    check_sweep_dir(out)
    runs_dir = Path(out) / "runs"
    created = [d for d in (Path(out), runs_dir) if not d.exists()]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out):  # one sweep at a time per DIR: a second one stops here, before it removes anything
        runs_dir.mkdir(parents=True, exist_ok=True)
        for stale in runs_dir.glob(".*.tmp"):
            shutil.rmtree(stale)
        try:
            executed = _execute(runs, runs_dir, backend, workers, progress)
        except BaseException:
            for d in reversed(created):  # a sweep that failed before any result leaves no empty directories
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
            raise
        table = results_table(runs, out)
        (Path(out) / MANIFEST).unlink(missing_ok=True)  # the tables change: unsealed until written
        with atomic_path(Path(out) / "results.parquet") as tmp:
            table.to_parquet(tmp, index=False)
        write_text(Path(out) / "results.csv", table.to_csv(index=False))
        write_manifest(out, SWEEP_TABLES, kind="sweep")
    reused = [r.key for r in {r.key: r for r in runs}.values() if r.key not in executed]
    return SweepOutcome(table, executed, reused)


SWEEP_TABLES = ("results.parquet", "results.csv")  # what a sweep writes beside runs/ and seals (its manifest)


def check_sweep_dir(out: str | Path) -> None:
    """That `out` can take a sweep, checked before any run: new or empty, or a sweep's: runs/ holding only results
    and temporaries, the tables its manifest (kind "sweep") lists, the plot beside them. Anything else (a user's
    directory) is a TltsimError, and the directory is left as is."""
    out = check_output(out, lambda d: True)
    if not out.is_dir():
        return
    listed = set(json.loads((out / MANIFEST).read_text())["files"]) if manifest_kind(out) == "sweep" else None

    def ours(e: Path) -> bool:
        if is_temporary(e.name):
            return True
        if e.name == "runs" and e.is_dir() and not e.is_symlink():
            return all(is_temporary(r.name) or manifest_kind(r) == "result" for r in e.iterdir())
        return listed is not None and e.is_file() and (e.name in listed or e.name in (MANIFEST, "sweep.png"))

    if not all(ours(e) for e in out.iterdir()):
        raise TltsimError(f"{out}: exists and is not a sweep's directory (runs/ of results, results.parquet, "
                          f"results.csv, sweep.png); it is left as is: remove it or choose another directory")


def _execute(runs: list[Run], runs_dir: Path, backend: str, workers: int, progress: bool) -> list[str]:
    """Simulate the runs without a result in `runs_dir`; returns their keys."""
    unique = list({r.key: r for r in runs}.values())
    reused = [r.key for r in unique if _cached(runs_dir / r.key)]
    todo = [r for r in unique if r.key not in reused]
    tasks = [(r.config.to_dict(), str(Path(r.config.trace).resolve()), r.trace_sha256, str(runs_dir / r.key))
             for r in todo]
    run = {"local": _local, "ray": _ray}[backend]
    executed = []
    with tqdm(total=len(todo), desc=f"sweep ({len(reused)} cached)", unit="run", disable=not progress) as bar:
        for key in run(tasks, workers):
            executed.append(key)
            bar.update(1)
    return executed


def _cached(run_dir: Path) -> bool:
    """Whether `run_dir` holds a complete result; a damaged one (or one from before manifests) is removed."""
    if not run_dir.exists():
        return False
    try:
        read_manifest(run_dir, "sweep run")
        return True
    except TltsimError:
        shutil.rmtree(run_dir)
        return False


def run_task(config: dict, trace_path: str, trace_sha256: str, run_dir: str) -> str:
    """Simulate one run and move its complete result to `run_dir`; returns the run's key (the dir name)."""
    cfg = configmod.from_dict(config)
    result = simulate(_load(trace_path, trace_sha256), cfg, make_policy(cfg.policy, cfg.policy_knobs))
    final = Path(run_dir)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    result.save(tmp)
    try:
        os.rename(tmp, final)
    except OSError:  # another process finished the same run first: its result stands
        shutil.rmtree(tmp)
    return final.name


@lru_cache(maxsize=4)
def _load(trace_path: str, trace_sha256: str):
    """The trace, loaded once per process and content (the hash keys the cache: an edited file reloads)."""
    return load_trace(trace_path)


def _local(tasks, workers: int):
    """Run tasks in this process (1 worker) or a process pool; yield keys as runs finish."""
    if workers == 1 or len(tasks) <= 1:
        for t in tasks:
            yield run_task(*t)
        return
    with pool_of(workers) as pool:
        pending = {pool.submit(run_task, *t) for t in tasks}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()
        finally:
            for f in pending:
                f.cancel()


def pool_of(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` forked processes, each ending with this one (end_with). Its processes are forked at its
    first submit, before its own threads start; a process forked while another pool's threads run may inherit a
    lock one of them held (an import's, pickling a task) and hang on it, so one command keeps to one pool at a
    time. Forked explicitly: where another start method is the default (forkserver from Python 3.14), a worker's
    parent would be the server, and end_with would end it at once."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=end_with, initargs=(os.getpid(),))


def end_with(parent: int) -> None:
    """In a pool worker: exit as soon as `parent` (the sweep, the comparison) is gone, killed or not, so no run goes
    on uncollected."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="end-with-parent").start()


def _ray(tasks, workers: int):
    """Run tasks as Ray tasks (the cluster RAY_ADDRESS names, else a local instance of `workers` CPUs)."""
    try:
        import ray
    except ImportError:
        raise TltsimError("--backend ray needs Ray: pip install tltsim[sweep]") from None
    started = not ray.is_initialized()
    if started:
        ray.init(**({} if os.environ.get("RAY_ADDRESS") else {"num_cpus": workers}), include_dashboard=False,
                 log_to_driver=False)
    remote = ray.remote(run_task)
    pending = [remote.remote(*t) for t in tasks]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                if isinstance(e.cause, TltsimError):
                    raise TltsimError(str(e.cause)) from None
                raise
    finally:
        for ref in pending:
            ray.cancel(ref)
        if started:
            ray.shutdown()


# --- the table --------------------------------------------------------------------------------------
def results_table(runs: list[Run], out: str | Path) -> pd.DataFrame:
    """One row per run (in order): run key, flattened config columns, summary metrics."""
    rows, config_cols, summary_cols = [], {}, {}
    for r in runs:
        d = Path(out) / "runs" / r.key
        config = {k: _cell(v) for k, v in _flatten(json.loads((d / "config.json").read_text())).items()}
        summary = {(f"result.{k}" if k in config else k): _cell(v)
                   for k, v in json.loads((d / "summary.json").read_text()).items()}
        config_cols.update(dict.fromkeys(config))
        summary_cols.update(dict.fromkeys(summary))
        rows.append({"run": r.key, **config, **summary})
    table = pd.DataFrame(rows, columns=["run", *config_cols, *summary_cols])
    for col in table.columns:  # an integer key some runs lack (a policy knob) stays integer, not float
        values = [r[col] for r in rows if col in r]
        if len(values) < len(rows) and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            table[col] = table[col].astype("Int64")
    return table


def _cell(v):
    """Lists (e.g. strategy arms) as JSON text, so every column has one type."""
    return json.dumps(v) if isinstance(v, list) else v


def swept_keys(runs: list[Run]) -> list[str]:
    """The dotted keys the sweep sets to more than one value, in order of first appearance."""
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    configs = [_flatten(r.config.to_dict()) for r in runs]
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
