"""`tltsim calibrate --verl-metrics METRICS --trace TRACE`: the simulator calibrated to a verl run, phase by phase."""
from __future__ import annotations

import json
import sys

from tltsim.cli.sim_cmd import cluster_flags, cluster_inputs, sim_config, sim_trace
from tltsim.core.errors import TltsimError
from tltsim.core.argparser import add_force
from tltsim.core.io import check_apart, check_file, check_output, sealed
from tltsim.analysis.report.table import format_table


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="calibrate the simulator to a verl run: each phase's time beside verl's own "
                       "timer for it, a factor per phase; saved for `simulate|compare --calibration`")
    calibration_flags(p)
    p.add_argument("-o", "--out", help="also write per_step.csv and calibration.json into this directory (replaced whole)")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    p.set_defaults(func=_checked)


def calibration_flags(p, moved: bool = False) -> None:
    """--verl-metrics, --save-calibration and the cluster flags (`validate` keeps them, marked as moved here)."""
    where = "(moved: `tltsim calibrate`) " if moved else ""
    p.add_argument("--verl-metrics", metavar="METRICS", help=f"{where}a verl run's metrics (the file logger's JSONL, "
                   "VERL_FILE_LOGGER_PATH, or a wandb CSV): calibrate its cluster, phase by phase, from its --trace "
                   "(with the cluster flags or --verl-config)")
    p.add_argument("--save-calibration", metavar="CAL.json", help=f"{where}save the calibration (per-phase factors, "
                   "fixed costs, reward time) for `tltsim simulate|compare --calibration CAL.json`")
    add_force(p, "the --save-calibration file")
    cluster_flags(p)


def _checked(args) -> int:
    check_outputs(args, "calibration", {**cluster_inputs(args), "--verl-metrics": args.verl_metrics})
    return cmd_calibrate(args)


def check_outputs(args, kind: str, inputs: dict) -> None:
    """-o (a directory `kind`s of tltsim's may replace) and --save-calibration, before any work: each writable, and
    neither one of `inputs` (flag -> path)."""
    from tltsim.analysis.validation.validate import VALIDATION_KINDS

    if args.out:
        check_output(args.out, sealed(*VALIDATION_KINDS), f"a {kind} tltsim wrote (sealed with its manifest.json, "
                                                          f"holding only the files it lists)")
    if args.save_calibration:
        check_output(args.save_calibration)
    check_apart({"-o": args.out, "--save-calibration": args.save_calibration}, inputs)
    if args.save_calibration:
        check_file(args.save_calibration, args.force)


def cmd_calibrate(args) -> int:
    from tltsim.analysis.calibration import calibrate, save
    from tltsim.verl_metrics import read_metrics

    if getattr(args, "runs", None) or getattr(args, "profile", None) or getattr(args, "speed", False):
        raise TltsimError("--verl-metrics calibrates from a verl run's files; drop the run directories, --profile and --speed")
    if not args.verl_metrics:
        raise TltsimError("calibrate: give --verl-metrics METRICS (a verl run's metrics file) and --trace TRACE (its "
                          "rollout as a trace: `tltsim trace convert`)")
    cfg = sim_config(args)
    metrics = read_metrics(args.verl_metrics)
    cal = calibrate(sim_trace(args, cfg), cfg, metrics,
                    sources={"metrics": args.verl_metrics, "trace": cfg.trace, "verl_config": args.verl_config})
    calibrate_drafter_into(cal, args.verl_config, metrics)
    if args.save_calibration:  # first: with nothing fitted it refuses, its notes in its one line, before any output
        save(cal, args.save_calibration)
    if args.out:  # built whole beside it and swapped in, as a validation's directory
        from tltsim.core.io import atomic_dir, write_json, write_manifest
        from tltsim.analysis.validation.validate import VALIDATION_KINDS

        with atomic_dir(args.out, sealed(*VALIDATION_KINDS)) as tmp:
            cal.per_step.to_csv(tmp / "per_step.csv", index=False)
            write_json(tmp / "calibration.json", cal.to_json())
            write_manifest(tmp, kind="calibration")
    if args.json:
        print(json.dumps(cal.to_json(), default=float, indent=2, allow_nan=False))
    else:
        _print_calibration(cal)
    for note in cal.notes:
        print(f"tltsim: note: {note}", file=sys.stderr)
    if args.save_calibration and not args.json:
        print(f"wrote {args.save_calibration}: use it with `tltsim compare --calibration {args.save_calibration} ...`")
    return 0


def calibrate_drafter_into(cal, verl_config, metrics) -> None:
    """A run that speculated (its --verl-config's speculative settings): its drafter fitted to the metrics' accepted
    lengths, into `cal.drafter` (tltsim.analysis.drafter.calibrate), its notes into the calibration's; metrics holding
    accepted lengths without a config to read the draft tree from get a note."""
    from tltsim.analysis.drafter.calibrate import METRICS, calibrate_drafter
    from tltsim.verl_config import read_speculation

    spec = read_speculation(verl_config) if verl_config else None
    if spec is None:
        if any(c in metrics and metrics[c].notna().any() for c, _ in METRICS):
            cal.notes.append("the metrics hold speculative accepted lengths, but " + (
                f"{verl_config} does not speculate in its rollout" if verl_config else "no --verl-config says the "
                "draft tree") + ": the drafter is not fitted; give the run's .hydra/config.yaml")
        return
    fit = calibrate_drafter(spec, metrics)
    cal.drafter = fit.to_json()
    cal.notes += [f"drafter: {n}" for n in fit.notes]


def _print_drafter(d: dict) -> None:
    how = {"cotrain": "co-trained every step", "periodic": f"trained every {d['train_interval']} steps"}.get(
        d["training"], d["training"])
    print(f"\ndrafter: {d['method']}, {how}, draft tree {d['strategy']} ({d['engine']}); accepted length per verify "
          f"from {d['metric']}:")
    print(format_table(["step", "measured", "fitted", "quality"],
                       [[r["step"], r["measured"], r["fitted"], r["quality"]] for r in d["accept_length"]]))
    drift = d["drift_per_step"]
    print(f"fit: {d['fit']}; drift_per_step (accepted length lost per RL step without retraining): "
          + ("not measured" if drift is None else f"{drift:.4g}")
          + (f"; recovered per training: {d['recovery_per_training']:.4g}" if d["recovery_per_training"] is not None
             else ""))


def _print_calibration(cal) -> None:
    d = cal.per_step
    print(format_table(["step", "gen_s", "pred", "calib", "step_s", "pred", "calib", "len_mean", "trace", "fitted"],
                       [[int(r.step), r.measured_gen_s, r.predicted_gen_s, r.calibrated_gen_s, r.measured_step_s,
                         r.predicted_step_s, r.calibrated_step_s, r.metrics_len_mean, r.trace_len_mean,
                         "yes" if r.fitted else r.reason] for r in d.itertuples()]))
    if cal.phases is None:
        print("\nno calibration: no step of the metrics matches the trace")
        return
    c = cal.cluster
    print(f"\nper phase, medians over {int(d.fitted.sum())} steps, for {c['gpus']} x {c['gpu']}, TP {c['tp']}, {c['model']}: "
          f"calibrated = factor x predicted + fixed_s a step")
    print(format_table(["phase", "verl timers (timing_s/)", "measured_s", "predicted_s", "factor", "fixed_s"],
                       [list(r) for r in cal.phase_table().itertuples(index=False)]))
    print(f"rollout: {cal.rollout_fit}")
    step = (f"; per-step step time {cal.step_error_before:.1%} -> {cal.step_error_after:.1%}"
            if cal.step_error_before is not None else "")
    print(f"median |error| of per-step rollout time: {cal.error_before:.1%} as modelled, {cal.error_after:.1%} "
          f"calibrated{step}")
    if cal.drafter:
        _print_drafter(cal.drafter)


