"""`tltsim validate RUN_DIR... --profile PROFILE.csv`: the simulator's prediction next to a real run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tltsim.cli.calibrate_cmd import calibration_flags, check_outputs, cmd_calibrate
from tltsim.cli.sim_cmd import cluster_inputs
from tltsim.core.argparser import add_renamed
from tltsim.core.errors import TltsimError
from tltsim.analysis.report.table import format_table


def register(sub) -> None:
    p = sub.add_parser("validate", help="replay real runs in the simulator and compare predicted with measured")
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="directories written by `tltsim real run` "
                   "(give the baseline first, e.g. a verl run, then a tlt run, for the speedup check)")
    calibration_flags(p, moved=True)
    p.add_argument("--profile", help="profile CSV from `tltsim real profile` (default: RUN_DIR/profile.csv)")
    p.add_argument("-o", "--out", help="write per_step.csv, overall.csv, work.csv, validation.json and the predicted "
                   "results into this directory (replaced whole)")
    p.add_argument("--speed", action="store_true", help="scale the profile's times step by step by the run's "
                   "speed probe (how fast the machine ran then; for a machine whose speed drifts)")
    p.add_argument("--json", action="store_true", help="print the overall figures as JSON")
    p.set_defaults(func=cmd_validate)
    register_fit_drafter(sub)


def cmd_validate(args) -> int:
    from tltsim.analysis.validation.validate import POLICY_METRICS, validate, write
    from tltsim.analysis.validation.work_domain import run_totals

    check_outputs(args, "validation", {**cluster_inputs(args), "--profile": args.profile,
                                       "--verl-metrics": args.verl_metrics,
                                       **{f"RUN_DIR {i + 1}": r for i, r in enumerate(args.runs)}})
    if args.verl_metrics:  # where calibrating was before `tltsim calibrate`: it runs it, and says so once done
        rc = cmd_calibrate(args)
        print("tltsim: note: calibrating to a verl run is `tltsim calibrate` (the same flags); `validate "
              "--verl-metrics` runs it", file=sys.stderr)
        return rc
    if not args.runs:
        raise TltsimError("validate: name at least one run directory (written by `tltsim real run`), "
                          "or calibrate to a verl run with `tltsim calibrate --verl-metrics METRICS --trace TRACE`")
    given = [flag for flag, v in (("--save-calibration", args.save_calibration), ("--trace", args.trace),
                                  ("--config", args.config), ("--verl-config", args.verl_config)) if v]
    if given:
        raise TltsimError(f"{', '.join(given)}: with --verl-metrics only (a real run's directory holds its own "
                          f"trace and config); drop it or add --verl-metrics METRICS")
    if args.profile and not Path(args.profile).is_file():
        raise TltsimError(f"--profile {args.profile}: {'is a directory' if Path(args.profile).is_dir() else 'not found'}; "
                          f"give the CSV file `tltsim real profile -o PROFILE.csv` wrote")
    v = validate(args.runs, args.profile, speed=args.speed)
    if args.out:
        write(v, args.out)
    if args.json:
        out = v.to_json()
        work = [r for r in out["work"] if r["step"] is None]  # the whole-run rows
        print(json.dumps({"overall": out["overall"], "speedup": out["speedup"], "work": work,
                          "divergence": out["divergence"]}, default=float, indent=2, allow_nan=False))
        return 0
    for run, g in v.per_step.groupby("run", sort=False):
        wide = g.set_index(["step", "metric"])[["measured", "predicted"]].unstack("metric")
        rows = [[int(s)] + [wide.at[s, (k, m)] for m in ("rollout_s", "total_s", "idle_fraction", "sd_share", "mean_accepted")
                            for k in ("measured", "predicted")] for s in wide.index]
        print(f"\n{run}: per step, measured | predicted")
        print(format_table(["step", "rollout", "pred", "step_s", "pred", "idle", "pred", "sd_share", "pred", "accepted", "pred"], rows))
        decided = [m for m in POLICY_METRICS if ("measured", m) in wide.columns]
        if decided:  # a policy's own decisions: what it carried, parked, resumed, dropped, moved, and how stale
            print(f"\n{run}: the policy's decisions per step, measured | predicted")
            print(format_table(["step", *[h for m in decided for h in (m, "pred")]],
                               [[int(s)] + [wide.at[s, (k, m)] for m in decided for k in ("measured", "predicted")]
                                for s in wide.index]))
    print("\noverall")
    print(format_table(["run", "metric", "measured", "predicted", "error"],
                       [[r.run, r.metric, r.measured, r.predicted, r.error] for r in v.overall.itertuples()]))
    if v.speedup:
        s = v.speedup
        print(f"\nspeedup of {s['run']} over {s['baseline']}: measured {s['measured']:.3f}, predicted "
              f"{s['predicted']:.3f} ({s['error']:+.1%})")
        if "speed_ratio" in s:
            ratio = round(s["speed_ratio"], 3)  # as printed
            pace = "as fast" if ratio == 1 else "slower" if ratio > 1 else "faster"
            print(f"at one machine speed (the speed probes ran {s['speed_ratio']:.3f}x as long during {s['run']}: the "
                  f"machine was {pace} then): measured {s['measured_at_one_speed']:.3f}, predicted "
                  f"{s['predicted_at_one_speed']:.3f}")
    print("\nwork domain (counted, not timed: the machine's speed does not move it; per step and engine in work.csv)")
    print(format_table(["run", "metric", "measured", "predicted", "error"],
                       [[r.run, r.metric, r.measured, r.predicted, r.error] for r in run_totals(v.work).itertuples()]))
    if len(v.divergence):
        print("\nwhere the replay decided otherwise (the first iteration of each step and engine; divergence.csv): "
              "each side's switch, and its guard's plain seconds and speculative tokens/s at its batch")
        print(format_table(["run", "step", "engine", "iter", "cause", "measured", "predicted", "batch", "plain_s",
                            "pred", "spec_tok_s", "pred"],
                           [[r.run, r.step, r.engine, r.iteration, r.cause, r.measured_mode, r.predicted_mode,
                             f"{r.measured_batch}|{r.predicted_batch}", r.measured_plain_s, r.predicted_plain_s,
                             r.measured_spec_tok_s, r.predicted_spec_tok_s] for r in v.divergence.itertuples()]))
    return 0


def register_fit_drafter(sub) -> None:
    p = sub.add_parser("fit-drafter", help="fit the simulator's drafter drift and recovery (its quality knobs) to real "
                       "runs, and predict another run's spot-vs-static gap; a cluster's speed is calibrated by "
                       "`tltsim calibrate`")
    p.add_argument("--spot", nargs="+", metavar="RUN_DIR",
                   help="a run whose drafter was spot-trained (tlt), or several of one config and target learning "
                   "rate (seeds), fitted together (required)")
    p.add_argument("--frozen", nargs="+", metavar="RUN_DIR", help="the same config with its drafter frozen "
                   "(static-sd), one for each --spot run (default: each spot run's own probes of its starting "
                   "drafter, `tltsim real run --probe-static`)")
    add_renamed(p, "--adaptive", "--spot", nargs="+")
    add_renamed(p, "--static", "--frozen", nargs="+")
    p.add_argument("--predict", nargs="+", default=[], metavar="RUN_DIR",
                   help="runs made with --probe-static at other target learning rates: play the fitted model on each "
                   "with the drift scaled by the ratio of the learning rates, beside the spot-vs-static gap it "
                   "measured (and the mean over the runs of each learning rate)")
    p.add_argument("--json", action="store_true", help="print the fitted knobs, their RMS error and the predictions "
                   "as JSON")
    p.set_defaults(func=cmd_fit_drafter)


def cmd_fit_drafter(args) -> int:
    from tltsim.analysis.drafter.fit import fit_drafter, mean_gap, predict_gap, read_probes

    if not args.spot:
        raise TltsimError("fit-drafter: give --spot RUN_DIR, a run whose drafter was spot-trained (tlt)")
    same = {Path(d).resolve() for d in args.spot} & {Path(d).resolve() for d in args.frozen or []}
    if same:
        raise TltsimError(f"--spot and --frozen both name {sorted(same)[0]}; give two runs of one config, one with "
                          f"drafter training (tlt) and one without (static-sd), or the tlt run alone when it was made "
                          f"with --probe-static")
    fit = fit_drafter(args.spot, args.frozen)
    predictions = [predict_gap(fit, probes, _lr_ratio(fit.lr, probes, args.spot[0]))
                   for probes in (read_probes(d) for d in args.predict)]
    by_scale = {}
    for p in predictions:
        by_scale.setdefault(p.drift_scale, []).append(p)
    means = [{"drift_scale": k, **mean_gap(v)} for k, v in by_scale.items()]
    if args.json:
        print(json.dumps({**fit.knobs(), "rms_error": fit.rms_error, "lr": fit.lr,
                          "predictions": [p.to_json() for p in predictions], "mean_predictions": means}, indent=2,
                         allow_nan=False))
        return 0
    print(format_table(["run", "drafter", "step", "measured q", "modelled q"],
                       [[r.run, r.drafter, int(r.step), r.measured_q, r.modelled_q]
                        for r in fit.qualities.itertuples()]))
    print(f"\nq_start {fit.q_start:.4f}  drift {fit.drift:.4f} a step  tau_samples {fit.tau_samples:.1f}  "
          f"(RMS error {fit.rms_error:.4f})")
    print("use in the simulator: " + " ".join(f"--knob {k}={v:.6g}" for k, v in fit.knobs().items()))
    for p in predictions:
        print(f"\n{p.run}: drift x {p.drift_scale:.4g} (the ratio of the target learning rates); accepted length "
              f"per call, measured and predicted")
        print(format_table(["step", "samples", "spot", "pred", "static", "pred", "gap", "pred"],
                           [[int(r.step), int(r.samples), r.spot, r.spot_pred, r.static, r.static_pred,
                             r.spot - r.static, r.spot_pred - r.static_pred] for r in p.per_step.itertuples()]))
        print(f"spot-vs-static gap over steps 1+: measured {p.measured_gap:+.4f}, predicted {p.predicted_gap:+.4f} "
              f"tokens per call (error {_percent(p.error)})")
    for m in means:
        if m["runs"] > 1:
            print(f"\nmean over the {m['runs']} runs at drift x {m['drift_scale']:.4g}: measured "
                  f"{m['measured_gap']:+.4f}, predicted {m['predicted_gap']:+.4f} tokens per call (error "
                  f"{_percent(m['error'])})")
    return 0


def _percent(error) -> str:
    return "n/a (no measured gap)" if error is None else f"{error:+.1%}"


def _lr_ratio(fitted_lr, probes, fitted_run) -> float:
    """The drift scale for `probes`' run: its target learning rate over the fitted run's."""
    if fitted_lr is None or probes.lr is None:
        missing = fitted_run if fitted_lr is None else probes.path
        raise TltsimError(f"{missing}: its config.json has no grpo.lr, so the drift cannot be scaled to the other "
                          f"run's learning rate; give runs made by `tltsim real run`")
    return probes.lr / fitted_lr
