"""`tltsim simulate` and `tltsim compare`."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from tltsim import config as configmod
from tltsim import glossary
from tltsim.errors import TltsimError
from tltsim.export import write_chrome_trace
from tltsim.policies import make_policy, policy_names
from tltsim.sim.simulator import Simulator
from tltsim.table import format_table
from tltsim.trace import load as load_trace


def _cluster_flags(p) -> None:
    p.add_argument("--trace", help="trace file (.parquet, .csv, .jsonl, verl-style log, Vidur CSV)")
    p.add_argument("--config", help="TOML config file; flags override it")
    p.add_argument("--model", help="model preset (e.g. qwen2.5-7b) or .toml path")
    p.add_argument("--gpu", help="GPU preset (h100, h200, a100, b200, h20) or .toml path")
    p.add_argument("--gpus", type=int, help="GPUs in the cluster")
    p.add_argument("--tp", type=int, help="tensor-parallel size per rollout engine")
    p.add_argument("--max-running", type=int, help="max concurrent requests per engine")
    p.add_argument("--steps", help="A:B selects trace steps A..B-1")
    p.add_argument("--exact", action="store_true", default=None, help="run every decode iteration (reference path)")
    p.add_argument("--seed", type=int)
    p.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE", help="policy knob, repeatable (e.g. threshold=16)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(sub) -> None:
    p = sub.add_parser("simulate", help="replay a trace over a modelled cluster under one policy")
    _cluster_flags(p)
    p.add_argument("--policy", help=f"policy name ({', '.join(policy_names())}, or A+B)")
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("compare", help="run several policies on one trace and cluster; table and report",
                       epilog=glossary.epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _cluster_flags(p)
    p.add_argument("--policies", default=None, help="comma-separated policy names; the first is the baseline (default: all)")
    p.add_argument("--no-report", action="store_true", help="do not write OUT/report.html")
    p.set_defaults(func=cmd_compare)


def _config(args, policy: str | None = None) -> configmod.SimConfig:
    cfg = configmod.load(args.config) if args.config else configmod.SimConfig()
    cfg = configmod.override(
        cfg,
        **{
            "trace": args.trace,
            "policy": policy,
            "cluster.model": args.model,
            "cluster.gpu": args.gpu,
            "cluster.gpus": args.gpus,
            "cluster.tp": args.tp,
            "cluster.max_running": args.max_running,
            "steps": args.steps,
            "exact": args.exact,
            "seed": args.seed,
            "policy_knobs": _knobs(args.knob) or None,
        },
    )
    if not cfg.trace:
        raise TltsimError("no trace given; pass --trace FILE or set trace = ... in the config file")
    return cfg


def _knobs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TltsimError(f"--knob {pair!r}: expected KEY=VALUE, e.g. --knob threshold=16")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def run_policy(trace, cfg: configmod.SimConfig, out_dir: Path, progress: bool):
    policy = make_policy(cfg.policy, cfg.policy_knobs)
    result = Simulator(trace, cfg, policy).run(progress=progress)
    result.save(out_dir)
    write_chrome_trace(result, out_dir / "timeline.perfetto.json")
    return result


def cmd_simulate(args) -> int:
    cfg = _config(args, args.policy)
    trace = load_trace(cfg.trace)
    result = run_policy(trace, cfg, Path(args.out), not args.no_progress)
    if args.json:
        print(json.dumps(result.summary, indent=2, default=float))
    else:
        s = result.summary
        rows = [[k, s[k]] for k in ("policy", "steps", "makespan_s", "mean_step_s", "rollout_s", "rollout_share",
                                    "idle_fraction", "idle_gpu_seconds", "tail_share", "tokens_per_s", "sd_share")]
        print(format_table(["metric", "value"], rows))
        print(f"wrote {args.out}/ (timeline, steps, requests .parquet, summary.json, timeline.perfetto.json)")
    return 0


COMPARE_COLUMNS = ["policy", "mean_step_s", "rollout_s", "idle_fraction", "speedup",
                   "staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction", "trained_len_ratio"]


def policy_dir(out: Path, name: str) -> Path:
    """Where `compare` saves the result of policy `name`."""
    return out / name.replace("+", "_plus_")


def compare(trace, base_cfg: configmod.SimConfig, policies: list[str], out: Path, progress: bool) -> list[dict]:
    rows = []
    for name in policies:
        cfg = replace(base_cfg, policy=name)
        result = run_policy(trace, cfg, policy_dir(out, name), progress)
        rows.append(dict(result.summary))
    base = rows[0]["makespan_s"]
    for r in rows:
        r["speedup"] = base / r["makespan_s"] if r["makespan_s"] else float("nan")
    return rows


def cmd_compare(args) -> int:
    names = [n.strip() for n in (args.policies or ",".join(policy_names())).split(",") if n.strip()]
    if not names:
        raise TltsimError("--policies is empty; name at least one policy, e.g. --policies verl,tlt")
    cfg = _config(args)
    for n in names:  # fail fast on unknown names before any run
        make_policy(n, cfg.policy_knobs)
    trace = load_trace(cfg.trace)
    out = Path(args.out)
    rows = compare(trace, cfg, names, out, not args.no_progress)
    if args.json:
        print(json.dumps({"policies": rows}, indent=2, default=float))
    else:
        print(format_table(COMPARE_COLUMNS, [[r[c] for c in COMPARE_COLUMNS] for r in rows]))
    if not args.no_report:
        from tltsim.report import load_results, write_report  # matplotlib: imported only when a report is made

        path = write_report(load_results(policy_dir(out, n) for n in names), out / "report.html")
        if not args.json:
            print(f"wrote {path}")
    return 0
