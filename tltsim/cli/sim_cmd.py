"""`tltsim simulate` and `tltsim compare`."""
from __future__ import annotations

import json
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from tqdm.auto import tqdm

from tltsim import config as configmod
from tltsim.core import glossary
from tltsim.analysis.calibration import apply as apply_calibration, cluster_notes, load_calibration
from tltsim.core.argparser import PreformattedHelpFormatter, show_progress
from tltsim.core.errors import TltsimError, TltsimWarning
from tltsim.hardware import preset_names
from tltsim.analysis.report.export import write_chrome_trace
from tltsim.analysis.validation.checked import validated_pairs
from tltsim.cli.analysis_cmd import add_validated, checks_with
from tltsim.core.config_files import read_toml
from tltsim.core.io import atomic_dir, check_apart, check_output, sealed, write_manifest
from tltsim.policies import knob_text, knobs_for, make_policy, policy_knobs, policy_names
from tltsim.control.decisions import knobs_from_text
from tltsim.analysis.report.tuning import tune
from tltsim.core.records import Result
from tltsim.sim.simulator import Simulator
from tltsim.analysis.report.table import format_table
from tltsim.analysis.sweep import pool_of
from tltsim.trace import load as load_trace
from tltsim.verl_config import read_verl_config


def cluster_flags(p) -> None:
    """The trace and cluster flags of simulate, compare and calibrate."""
    p.add_argument("--trace", help="trace file (.parquet, .csv, .jsonl, a length log, Vidur CSV)")
    p.add_argument("--config", help="TOML config file; flags override it, and it overrides the defaults shown")
    p.add_argument("--verl-config", metavar="CONFIG", help="a verl run's .hydra/config.yaml (or its output folder): "
                   "GPUs, TP, memory utilisation, max_num_seqs; overrides --config, flags override it")
    p.add_argument("--model", help=f"model preset ({', '.join(preset_names('models'))}) or .toml path"
                   f"{_default('cluster.model')}")
    p.add_argument("--gpu", help=f"GPU preset (h100, h200, a100, b200, h20) or .toml path{_default('cluster.gpu')}")
    p.add_argument("--gpus", type=int, help=f"GPUs in the cluster{_default('cluster.gpus')}")
    p.add_argument("--tp", type=int, help=f"tensor-parallel size per rollout engine{_default('cluster.tp')}")
    p.add_argument("--max-running", "--max-num-seqs", dest="max_running", type=int,
                   help=f"max concurrent requests per engine (verl's rollout.max_num_seqs){_default('cluster.max_running')}")
    p.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                   help="share of GPU memory the rollout engine fills with weights and KV cache (verl's rollout key)"
                   f"{_default('cost.mem_fraction')}")
    p.add_argument("--steps", help="N: the first N steps (0..N-1), as `real run --steps` counts them; A:B: "
                   "steps A..B-1, either side may be empty; a range past the trace's end is clipped, with a warning "
                   "(default: all)")
    p.add_argument("--exact", action="store_true", default=None, help="run every decode iteration (reference path)")
    p.add_argument("--seed", type=int, help="seed of the random draws: --exact's accepted lengths, the "
                   "tuner's exploration, longest-first's oracle noise. The default fast path uses expected accepted "
                   "lengths and the default arms leave the tuner one strategy per batch size, so there the seed "
                   f"changes nothing{_default('seed')}")


def _cluster_flags(p) -> None:
    cluster_flags(p)
    p.add_argument("--calibration", metavar="CAL.json", help="a calibration fitted to your cluster "
                   "(`tltsim calibrate ... --save-calibration CAL.json`): each phase's times scaled by "
                   "its factor, the step's fixed costs and reward time added")
    p.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE", help="policy knob, repeatable (e.g. threshold=16)")
    p.add_argument("-o", "--out", required=True, help="output directory, written whole: an earlier result there "
                   "is replaced, a directory holding other files is refused")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (there is none when stderr is "
                   "not a terminal)")


def _default(key: str) -> str:
    """' (default: X)' with X the SimConfig default of dotted `key`, for a flag whose own default is None."""
    value = configmod.SimConfig()
    for part in key.split("."):
        value = getattr(value, part)
    return f" (default: {value})"


def register(sub) -> None:
    p = sub.add_parser("simulate", help="replay a trace over a modelled cluster under one policy")
    _cluster_flags(p)
    p.add_argument("--policy", help=f"policy name ({', '.join(policy_names())}, or A+B); the config file's policy "
                   f"where it names one (default: {configmod.SimConfig().policy}, the baseline every speedup is "
                   "measured against)")
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("compare", help="run several policies on one trace and cluster; table and report",
                       epilog=glossary.epilog(), formatter_class=PreformattedHelpFormatter)
    _cluster_flags(p)
    p.add_argument("--policies", default=None, help="comma-separated policy names; the first is the baseline (default: all; "
                   "`tltsim policies` lists each with its knobs, their defaults and the values they take)")
    p.add_argument("--no-report", action="store_true", help="do not write OUT/report.html")
    add_validated(p)
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("policies", help="every policy in one line, with its knobs (--knob KEY=VALUE), their defaults "
                       "and the values they take")
    p.add_argument("names", nargs="*", metavar="POLICY", help="only these (default: every one)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the list")
    p.set_defaults(func=cmd_policies)


def cmd_policies(args) -> int:
    """`tltsim policies`: each policy's line (tltsim.core.glossary.POLICIES) and its knobs."""
    names = [n.strip().lower() for n in args.names] or policy_names()
    listed = {n: {"knobs": {k: {"default": d, "takes": t} for k, d, t in policy_knobs(n)},  # refuses a bad name
                  "about": glossary.POLICIES.get(n) or " combined with ".join(n.split("+"))} for n in names}
    if args.json:
        print(json.dumps(listed, indent=2))
        return 0
    for n, entry in listed.items():
        print(f"{n}: {entry['about']}")
        width = max((len(k) for k in entry["knobs"]), default=0)
        for k, knob in entry["knobs"].items():
            print(f"    {k:<{width}}  {knob_text(knob['default']):<10}  {knob['takes']}")
    print("(knobs are set with --knob KEY=VALUE; a combination A+B takes its parts' knobs)")
    return 0


def sim_config(args, policy: str | None = None) -> configmod.SimConfig:
    """--config, then --verl-config, then --calibration, then the flags, each overriding the one before."""
    cfg = configmod.load(args.config) if args.config else configmod.SimConfig()
    if args.verl_config:
        verl = read_verl_config(args.verl_config)
        cfg = configmod.override(cfg, **verl.overrides())
        _note(verl.notes())
    saved = load_calibration(args.calibration) if getattr(args, "calibration", None) else None
    if saved:
        cfg = apply_calibration(saved, cfg, args.calibration)
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
            "cost.mem_fraction": args.gpu_memory_utilization,
            "steps": args.steps,
            "exact": args.exact,
            "seed": args.seed,
            "policy_knobs": knobs_from_text(getattr(args, "knob", [])) or None,
        },
    )
    if not cfg.trace:
        raise TltsimError("no trace given; pass --trace FILE or set trace = ... in the config file")
    if args.verl_config and not args.gpu and not _names_gpu(args.config):
        _note([f"the verl config does not name the GPU type; assuming {cfg.cluster.gpu} (pass --gpu to name yours)"])
        cfg = configmod.override(cfg, **{"cluster.gpu_assumed": True})
    if saved:
        _note(cluster_notes(saved, cfg, args.calibration))
    return cfg


def _names_gpu(config_file: str | None) -> bool:
    """Whether the --config file sets cluster.gpu."""
    return bool(config_file) and "gpu" in read_toml(config_file, "config file").get("cluster", {})


def sim_trace(args, cfg: configmod.SimConfig):
    """The config's trace; with --verl-config, checked against it (and given its cap when it has none)."""
    trace = load_trace(cfg.trace)
    if args.verl_config:
        trace, notes = read_verl_config(args.verl_config).check_trace(trace)
        _note(notes)
    return trace


def _note(lines) -> None:
    for line in dict.fromkeys(line for line in lines if line):  # each once, in order
        print(f"tltsim: note: {line}", file=sys.stderr)


def cluster_inputs(args) -> dict:
    """The files the cluster flags read (flag -> path; None where not given or not a path): what no output of
    the command may be, lie in or hold."""
    paths = {"--trace": args.trace, "--config": args.config, "--verl-config": args.verl_config,
             "--calibration": getattr(args, "calibration", None), "--gpu": args.gpu, "--model": args.model}
    return {flag: p for flag, p in paths.items() if p and Path(p).exists()}


def check_out_dir(args, kind: str) -> None:
    """Before any work: `-o` can take a new result of `kind` (it is new, empty or an earlier one) and is no input."""
    check_output(args.out, sealed(kind))
    check_apart({"-o": args.out}, cluster_inputs(args))


def run_policy(trace, cfg: configmod.SimConfig, out_dir: Path, progress: bool):
    """Simulate `cfg.policy` on `trace` and save the result into `out_dir` (a fresh directory)."""
    policy = make_policy(cfg.policy, cfg.policy_knobs)
    result = Simulator(trace, cfg, policy).run(progress=progress)
    write_chrome_trace(result, out_dir / "timeline.perfetto.json")
    result.save(out_dir, also=["timeline.perfetto.json"])  # its manifest last
    return result


def cmd_simulate(args) -> int:
    check_out_dir(args, "result")
    cfg = sim_config(args, args.policy)
    trace = sim_trace(args, cfg)
    warn_clipped_steps(cfg.steps, trace)
    with atomic_dir(args.out, sealed("result")) as tmp:
        result = run_policy(trace, cfg, tmp, show_progress(args))
    _note([result.config["split_note"]])
    if args.json:
        print(json.dumps(result.summary, indent=2, default=float))
    else:
        s = result.summary
        if args.calibration:
            print(f"calibrated with {cfg.calibration.source}")
        rows = [[k, s[k]] for k in ("policy", "steps", "makespan_s", "mean_step_s", "rollout_s", "rollout_share",
                                    "idle_fraction", "idle_gpu_seconds", "tail_share", "tokens_per_s", "sd_share")]
        print(format_table(["metric", "value"], rows))
        print(f"wrote {args.out}/ (timeline, steps, requests .parquet, summary.json, timeline.perfetto.json)")
    return 0


def _summarised(trace, cfg: configmod.SimConfig, out_dir: Path, progress: bool, tuned: bool):
    """run_policy's summary and split note (what `compare` keeps of a run; a whole Result stays on disk), and, if
    `tuned`, the run's tuning answer (tltsim.analysis.report.tuning.tune; None for a run that has none)."""
    result = run_policy(trace, cfg, out_dir, progress)
    return dict(result.summary), result.config["split_note"], tune(result, trace, cfg.policy) if tuned else None


COMPARE_COLUMNS = ["policy", "mean_step_s", "mean_rollout_s", "idle_fraction", "speedup",  # seconds a step, shares
                   "staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction", "trained_len_ratio"]


def policy_dir(out: Path, name: str) -> Path:
    """Where `compare` saves the result of policy `name`."""
    return out / name.replace("+", "_plus_")


def compare_workers(policies: list[str]) -> int:
    """The processes `compare` runs `policies` on by default: one a core, at most one a policy."""
    return min(len(policies), os.cpu_count() or 1)


def compare(trace, base_cfg: configmod.SimConfig, policies: list[str], out: Path, progress: bool,
            workers: int | None = None, tunings: list | None = None, pool: ProcessPoolExecutor | None = None
            ) -> list[dict]:
    """Simulate each policy into its directory under `out`, on `workers` processes (default: compare_workers), or
    on `pool`, each with the config's knobs it takes (tltsim.policies.knobs_for); the policies' rows in their order,
    each its run's summary with its speedup over the first. A list `tunings` receives each run's tuning answer, in
    order (each worked out beside its run)."""
    workers = compare_workers(policies) if workers is None else workers
    tuned = tunings is not None
    tasks = [(trace, replace(base_cfg, policy=name, policy_knobs=knobs_for(name, base_cfg.policy_knobs)),
              policy_dir(out, name)) for name in policies]
    if pool is None and workers <= 1:
        done = [_summarised(*task, progress, tuned) for task in tasks]
    else:  # each run is independent and seeded by its config: the same bytes as one after the other
        with nullcontext(pool) if pool is not None else pool_of(workers) as runs:
            futures = [runs.submit(_summarised, *task, False, tuned) for task in tasks]
            done = [f.result() for f in tqdm(futures, desc="policies", unit="policy", disable=not progress)]
    rows = [summary for summary, _, _ in done]
    if tuned:
        tunings[:] = [t for _, _, t in done]
    _note([note for _, note, _ in done])
    base, base_step = rows[0]["makespan_s"], rows[0]["mean_step_s"]
    for r in rows:
        r["speedup"] = base / r["makespan_s"] if r["makespan_s"] else float("nan")
        r["saved_per_step_s"] = base_step - r["mean_step_s"]  # mean step time saved over the baseline
    return rows


def cmd_compare(args) -> int:
    text = ",".join(policy_names()) if args.policies is None else args.policies
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise TltsimError(f"--policies {text!r}: an empty name; give comma-separated policy names, e.g. "
                          f"--policies verl,tlt (or leave --policies out for all)")
    check_out_dir(args, "comparison")
    cfg = sim_config(args)
    given = {n: knobs_for(n, cfg.policy_knobs) for n in names}  # each policy takes the knobs it has
    for n in names:  # fail fast on unknown names and bad knobs before any run
        make_policy(n, given[n])
    unused = sorted(set(cfg.policy_knobs or {}).difference(*given.values()))
    if unused:
        raise TltsimError(f"--knob {', '.join(unused)}: no policy compared takes it; "
                          f"`tltsim policies {' '.join(names)}` lists their knobs")
    trace = sim_trace(args, cfg)
    warn_clipped_steps(cfg.steps, trace)
    pairs = validated_pairs(args.validated) if args.validated else None  # refused before any run
    answers = args.json or not args.no_report  # the tuning answer of each tlt / tlt-auto run, the drift's rows
    with atomic_dir(args.out, sealed("comparison")) as tmp:  # the whole comparison, its report included, or nothing
        workers = compare_workers(names)  # one run (or one core): the runs in this process, the drift's beside
        with pool_of(workers + bool(answers)) if workers > 1 or answers else nullcontext() as pool:
            drift = pool.submit(_drift_rows, args.calibration, trace, cfg) if answers else None
            tunings = [] if answers else None
            rows = compare(trace, cfg, names, tmp, show_progress(args), tunings=tunings,
                           pool=pool if workers > 1 else None)
            drift = drift.result() if drift else []
        if answers:
            results = [Result.load(policy_dir(tmp, n)) for n in names]
            for row, t in zip(rows, tunings):
                row.update(t.as_json() if t is not None else {})
            sensitivity = _sensitivity_rows(trace, cfg, rows, bool(args.calibration))
        if not args.no_report:
            from tltsim.analysis.report.page import write_report  # matplotlib: imported only when a report is made

            write_report(results, tmp / "report.html", tunings=tunings, drift=drift, checks=checks_with(pairs),
                         sensitivity=sensitivity)
        write_manifest(tmp, kind="comparison")  # every file of every run, and the report
    if args.json:
        print(json.dumps({"policies": rows, "drift_sensitivity": drift, "ranking_sensitivity": sensitivity},
                         indent=2, default=float))
        return 0
    from tltsim.analysis.report.findings import ranking

    by = "saved_per_step_s" if args.calibration else "speedup"
    ranked = [rows[i] for i in ranking([r[by] for r in rows], [r["policy"] in glossary.BOUNDS for r in rows])]
    if args.calibration:
        columns = COMPARE_COLUMNS[:2] + ["saved_per_step_s"] + COMPARE_COLUMNS[2:]
        print(f"calibrated with {cfg.calibration.source}")
        print(f"predicted on your cluster, by seconds saved a step over {rows[0]['policy']} (saved_per_step_s), "
              "as the report ranks them (bounds last):")
    else:
        columns = COMPARE_COLUMNS
        print(f"by speedup over {rows[0]['policy']}, as the report ranks them (bounds last):")
    if trace.agentic:  # where a multi-turn trace's rollout time goes besides generating
        at = columns.index("idle_fraction") + 1
        columns = columns[:at] + ["tool_wait_share", "turns_per_trajectory"] + columns[at:]
    print(format_table(columns, [[r[c] for c in columns] for r in ranked]))
    if not args.no_report:
        print(f"wrote {Path(args.out) / 'report.html'}")
    return 0


def _sensitivity_rows(trace, cfg, rows: list[dict], calibrated: bool) -> list[dict]:
    """Whether the ranking's first policies (ranking_sensitivity.TOP, the bounds aside) keep their order if the
    trained drafter is 20% better or worse (tltsim.analysis.drafter.ranking_sensitivity), each by the seconds the
    ranking orders it by (its makespan, or its mean step on a calibrated cluster); none on a multi-turn trace, as
    the drift's rows."""
    from tltsim.analysis.drafter.ranking_sensitivity import TOP, ranking_sensitivity
    from tltsim.analysis.report.findings import ranking

    if trace.agentic:
        return []
    by, seconds = ("saved_per_step_s", "mean_step_s") if calibrated else ("speedup", "makespan_s")
    order = ranking([r[by] for r in rows], [r["policy"] in glossary.BOUNDS for r in rows])
    top = [rows[i] for i in order if rows[i]["policy"] not in glossary.BOUNDS][:TOP]
    return ranking_sensitivity(trace, cfg, {r["policy"]: r[seconds] for r in top})


def _drift_rows(calibration, trace, cfg) -> list[dict]:
    """The ways to get a drafter over the span of drifts (tltsim.analysis.drafter.drift_sensitivity), at the calibrated run's
    draft tree where the calibration fitted one; none on a multi-turn trace (the speculating ways run single-turn
    rollouts the same way, and the question is the drafter's, not the agent's)."""
    from tltsim.analysis.drafter.drift_sensitivity import drift_sensitivity
    from tltsim.control.strategy import Strategy

    if trace.agentic:
        return []
    saved = load_calibration(calibration) if calibration else None
    fitted = (saved or {}).get("drafter")
    return drift_sensitivity(trace, cfg, Strategy.parse(fitted["strategy"]) if fitted else None,
                             fitted.get("drift_per_step") if fitted else None)


def warn_clipped_steps(steps: str, trace) -> None:
    """A TltsimWarning when the --steps range reaches past the trace's steps but keeps some (it runs those);
    one that keeps none is the simulator's error."""
    lo, hi = configmod.parse_steps(steps)
    have = trace.steps
    chosen = configmod.steps_in(steps, have)
    if chosen and ((lo is not None and lo < have[0]) or (hi is not None and hi > have[-1] + 1)):
        warnings.warn(f"--steps {steps}: the trace has steps {have[0]}..{have[-1]}; running steps "
                      f"{chosen[0]}..{chosen[-1]} ({len(chosen)} steps)", TltsimWarning)
