"""Simulation config: small dataclasses, one TOML file, flags override it; validation in one place.

A config file mirrors the sections below:

    trace = "traces/synthetic/dapo_like.parquet"
    policy = "tlt"
    [cluster]
    gpus = 64
    tp = 4
    [cost]
    eta_bw = 0.75
    [rl]
    reward_s = 1.0
    [policy_knobs]
    threshold = 32
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from tltsim.cost import CostParams, PhaseCalibration
from tltsim.core.errors import TltsimError, TltsimNote
from tltsim.core.config_files import read_toml
from tltsim.core.drafter_names import RUN_METHODS, TRAINED, method_name
from tltsim.drafter.quality import DrafterConfig

SPLITS = ("auto", "contiguous", "trace")
MAX_GPUS, MAX_RUNNING = 1 << 20, 1 << 24  # bounds a number may reach before it is a typo (and overflows an index)


@dataclass(frozen=True)
class ClusterConfig:
    gpus: int = 64  # GPUs of the cluster; colocated RL: all roll out, then all train
    tp: int = 4  # tensor-parallel size of one rollout engine; engines = gpus / tp
    gpu: str = "h100"  # GPU preset name or path to a .toml
    model: str = "qwen2.5-7b"  # model preset name or path to a .toml
    max_running: int = 256  # max concurrent requests per engine (SGLang max_running_requests)
    split: str = "auto"  # responses to engines: contiguous chunks as verl does, the trace's engine column, or auto
    gpu_assumed: bool = False  # set by the CLI: nothing given named the GPU type (a verl config leaves it open), so
    # `gpu` is the default

    @property
    def engines(self) -> int:
        return self.gpus // self.tp


@dataclass(frozen=True)
class RLConfig:
    reward_s: float = 1.0  # reward computation per step, seconds (rule-based verifiers are fast)
    balance_train: bool = True  # the log-prob and train phases see the step's tokens spread evenly over the GPUs
    # (verl balances sequence lengths); false: each engine's GPUs take the responses it generated, so the phases
    # last as long as the engine with the most tokens needs (`tltsim real run`'s data-parallel GRPO)
    micro_batch_tokens: int = 0  # > 0: the phases process length-sorted micro-batches of at most this many padded
    # tokens and pay for the padding (`tltsim real run`'s GRPO); 0: every token once (verl removes padding)
    skip_zero_advantage: bool = False  # the phases skip the responses of prompt groups whose rewards all agree
    # (their advantage, and so gradient, is zero: DAPO drops them; `tltsim real run --task longtail`'s GRPO does);
    # needs the trace's reward column


@dataclass(frozen=True)
class DrafterWorld:
    """The drafter the speculating policies draft with, where no `--knob` says otherwise: its method
    (tltsim.core.drafter_names), its quality when RL starts and what it loses per policy update
    (tltsim.drafter.quality); a calibration to a run that speculated sets them (tltsim.analysis.drafter.calibrate).
    A trained method's serve the policies that train a drafter; ngram's quality serves the n-gram drafter (tlt-base)
    and leaves the trained drafter at its defaults; suffix's is recorded (history drafting predicts its quality per
    request from the trace)."""

    method: str = "eagle"
    q_start: float = DrafterConfig.q_start
    drift: float = DrafterConfig.drift
    source: str = ""  # where they come from, in words ("" for the defaults)

    def trained(self) -> tuple[float, float]:
        """(q_start, drift) of the trained drafter: this section's where its method is a trained one, else the
        defaults (a run that drafted with ngram or suffix measured no trained drafter)."""
        if self.method in TRAINED:
            return self.q_start, self.drift
        return DrafterConfig.q_start, DrafterConfig.drift


@dataclass(frozen=True)
class SimConfig:
    trace: str = ""  # trace file
    policy: str = "verl"  # policy name from the registry (`tltsim compare --help` lists them)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    cost: CostParams = field(default_factory=CostParams)
    rl: RLConfig = field(default_factory=RLConfig)
    policy_knobs: dict = field(default_factory=dict)  # per-policy knobs, validated by the policy registry
    exact: bool = False  # run every decode iteration (the reference path) instead of jumping between events
    steps: str = ""  # "A:B" selects trace steps A..B-1; empty = all
    seed: int = 0  # seeds every stochastic component
    calibration: PhaseCalibration = field(default_factory=PhaseCalibration)  # per-phase factors and fixed costs
    # fitted to a measured cluster (`tltsim calibrate ... --save-calibration`, tltsim.cost.calibrated)
    drafter: DrafterWorld = field(default_factory=DrafterWorld)  # the drafter's method, start and drift

    def to_dict(self) -> dict:
        return asdict(self)

    def checked(self) -> "SimConfig":
        """This config, checked (TltsimError for a bad value)."""
        c = self.cluster
        if c.gpus < 1 or c.tp < 1:
            raise TltsimError(f"cluster: gpus = {c.gpus} and tp = {c.tp} must be >= 1")
        if c.gpus > MAX_GPUS or c.max_running > MAX_RUNNING:
            raise TltsimError(f"cluster: gpus = {c.gpus} and max_running = {c.max_running} must be <= {MAX_GPUS:,} "
                              f"and <= {MAX_RUNNING:,}: more than any cluster or engine has")
        if c.gpus % c.tp:
            raise TltsimError(f"cluster: gpus = {c.gpus} is not a multiple of tp = {c.tp}; engines are whole TP groups")
        if c.max_running < 1:
            raise TltsimError(f"cluster: max_running = {c.max_running} must be >= 1")
        if c.split not in SPLITS:
            raise TltsimError(f"cluster: split = {c.split!r}; choose one of {', '.join(SPLITS)}")
        if self.rl.reward_s < 0:
            raise TltsimError(f"rl: reward_s = {self.rl.reward_s} must be >= 0")
        if self.rl.micro_batch_tokens < 0:
            raise TltsimError(f"rl: micro_batch_tokens = {self.rl.micro_batch_tokens} must be >= 0 (0: no padding)")
        self.cost.checked()
        self.calibration.checked()
        d = self.drafter
        if d.method not in RUN_METHODS:
            raise TltsimError(f"drafter: method = {d.method!r}; choose one of {', '.join(RUN_METHODS)} (the method a "
                              f"run drafted with)")
        if not 0.0 <= d.q_start <= 1.0 or d.drift < 0.0:
            raise TltsimError(f"drafter: q_start = {d.q_start} must be in [0, 1] and drift = {d.drift} >= 0")
        if self.seed < 0:
            raise TltsimError(f"seed = {self.seed} must be >= 0")
        parse_steps(self.steps)
        return self


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """'A:B' -> (A, B), either side may be empty; 'N' -> (None, N): the steps numbered below N, which are the
    first N of a trace numbered from 0 (as every trace tltsim writes is), so `--steps 10` means 10 steps in
    `simulate` as in `real run`."""
    if not text:
        return None, None
    if ":" not in text and text.strip().isdigit() and int(text) > 0:
        return None, int(text)
    a, sep, b = text.partition(":")
    try:
        lo = int(a) if a.strip() else None
        hi = int(b) if b.strip() else None
    except ValueError:
        lo = hi = -1
    if not sep or (lo is not None and lo < 0) or (hi is not None and hi < 0) or (lo is not None and hi is not None and hi <= lo):
        raise TltsimError(f"steps = {text!r}: expected a count N >= 1 (steps 0..N-1) or A:B with 0 <= A < B "
                          "(either side may be empty), e.g. 10 or 5:15")
    return lo, hi


def steps_in(text: str, steps) -> list[int]:
    """The steps among `steps` (a trace's step numbers) that the range `text` (parse_steps's) picks, in order."""
    lo, hi = parse_steps(text)
    return [s for s in steps if (lo is None or s >= lo) and (hi is None or s < hi)]


def from_dict(data: dict, origin: str = "config") -> SimConfig:
    """Build a SimConfig from nested dicts (a parsed TOML file), rejecting unknown keys and wrong types."""
    return _build(SimConfig, data, origin).checked()


def load(path: str | Path) -> SimConfig:
    return from_dict(read_toml(path, "config file"), str(path))


def override(cfg: SimConfig, **changes) -> SimConfig:
    """Apply dotted overrides such as {"cluster.gpus": 8, "policy": "tlt"}; None values are skipped."""
    nested: dict = {}
    for key, value in changes.items():
        if value is None:
            continue
        parts = key.split(".")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    merged = _merge(asdict(cfg), nested)
    return from_dict(merged, "flags")


def _merge(base: dict, new: dict) -> dict:
    out = dict(base)
    for k, v in new.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _build(cls, data: dict, origin: str, section: str = ""):
    if not isinstance(data, dict):
        raise TltsimError(f"{origin}: [{section}] must be a table")
    known = {f.name: f for f in fields(cls)}
    data = _renamed(cls, data, origin)
    unknown = sorted(set(data) - set(known))
    if unknown:
        where = f"[{section}] " if section else ""
        raise TltsimError(f"{origin}: {where}unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    kwargs = {}
    defaults = cls()
    for name, value in data.items():
        default = getattr(defaults, name)
        key = f"{section}.{name}" if section else name
        if is_dataclass(default):
            kwargs[name] = _build(type(default), value, origin, key)
        elif isinstance(default, dict):
            if not isinstance(value, dict):
                raise TltsimError(f"{origin}: {key} must be a table")
            for k, v in value.items():
                if not _finite(v):
                    raise TltsimError(f"{origin}: {key}.{k} = {v!r} should be a finite number")
            kwargs[name] = dict(value)
        else:
            kwargs[name] = _coerce(value, default, key, origin)
    return replace(defaults, **kwargs)


def _renamed(cls, data: dict, origin: str) -> dict:
    """A drafter section's older key `family` (a name older configs, saved runs and calibrations carry) read as
    `method`, its value in today's spelling, with one note line."""
    if cls is not DrafterWorld or "family" not in data or "method" in data:
        return data
    out = {k: v for k, v in data.items() if k != "family"}
    out["method"] = method_name(data["family"]) or data["family"]  # a value no method has: refused as a method
    if method_name(data["family"]):
        warnings.warn(TltsimNote(f"{origin}: drafter.family = {data['family']!r} reads as drafter.method = "
                                 f"{out['method']!r}"))
    return out


def _coerce(value, default, key, origin):
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
    kind = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}[type(default)]
    raise TltsimError(f"{origin}: {key} = {value!r} should be {kind}")


def _finite(value) -> bool:
    """False for a NaN or an infinity, also inside a list (a policy knob's value); True for anything else."""
    if isinstance(value, float):
        return math.isfinite(value)
    return all(_finite(v) for v in value) if isinstance(value, (list, tuple)) else True
