"""`tltsim report` and `tltsim sweep`.

matplotlib and the sweep backends are imported when a command runs, so `tltsim --help` stays quick.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from tltsim.core.argparser import add_force, show_progress
from tltsim.core.errors import TltsimError
from tltsim.core.io import check_apart, check_file, check_output
from tltsim.analysis.sweep import METRICS
from tltsim.analysis.report.table import format_table
from tltsim.analysis.validation.checked import check_pairs, shipped, validated_pairs


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page (tables, plots, configs) of result directories")
    p.add_argument("results", nargs="+", metavar="RESULT_DIR", help="directories written by simulate / compare; "
                   "the first is the baseline")
    p.add_argument("-o", "--out", required=True, help="HTML file to write")
    p.add_argument("--title", help="page title (default: the run names)")
    p.add_argument("--figures", metavar="DIR", help="also write each figure as a PNG into DIR")
    add_force(p, "the HTML file (and --figures' PNGs)")
    add_validated(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sweep", help="run a grid or list of configs in parallel, cached; one results table")
    p.add_argument("spec", metavar="SWEEP.toml", help="sweep file: base config and [grid] or [[runs]]")
    p.add_argument("-o", "--out", required=True, help="output directory (runs/, results.parquet, results.csv, sweep.png)")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="where the runs execute: local processes or Ray (RAY_ADDRESS, else a local Ray instance)")
    p.add_argument("--workers", type=int, help="parallel runs (default: CPU count)")
    p.add_argument("--metric", default="mean_step_s", help="summary metric to plot and print: one of " + ", ".join(METRICS))
    p.add_argument("--no-progress", action="store_true", help="no progress bar (there is none when stderr is "
                   "not a terminal)")
    p.set_defaults(func=cmd_sweep)


def add_validated(p) -> None:
    """--validated, of compare and report."""
    p.add_argument("--validated", nargs="+", metavar="RUN_DIR", help="your own real runs (`tltsim real run -o`, each "
                   "with the profile.csv of the machine that made it), a verl run first: each other one is replayed "
                   "beside it (tltsim validate) and the ranking's 'checked against a run' cites it beside the shipped "
                   "pairs")


def checks_with(pairs) -> pd.DataFrame | None:
    """The shipped pairs' checks and those of `pairs` (validated_pairs'), or None (the shipped ones) for none."""
    if not pairs:
        return None
    return pd.concat([shipped(), check_pairs(pairs)], ignore_index=True)


def cmd_report(args) -> int:
    from tltsim.analysis.report.page import load_results, write_report

    check_output(args.out)
    if args.figures:
        check_output(Path(args.figures) / "figure.png")
    check_apart({"-o": args.out, "--figures": args.figures},
                {f"RESULT_DIR {i + 1}": r for i, r in enumerate(args.results)})
    check_file(args.out, args.force)
    pairs = validated_pairs(args.validated) if args.validated else None
    path = write_report(load_results(args.results), args.out, args.title, args.figures, force=args.force,
                        checks=checks_with(pairs))
    print(f"wrote {path}" + (f" and its figures in {args.figures}/" if args.figures else ""))
    return 0


def cmd_sweep(args) -> int:
    from tltsim.analysis.report import plots
    from tltsim.analysis.sweep import check_sweep_dir, load_spec, run_sweep, swept_keys

    if args.metric not in METRICS:
        raise TltsimError(f"--metric {args.metric!r} is not a summary metric; choose one of {', '.join(METRICS)}")
    check_sweep_dir(args.out)
    check_apart({"-o": args.out}, {"SWEEP.toml": args.spec})
    runs = load_spec(args.spec)
    out = Path(args.out)
    outcome = run_sweep(runs, out, args.backend, args.workers, progress=show_progress(args))
    table = outcome.table
    keys = swept_keys(runs)
    shown = table[["run", *keys, args.metric]].astype(object)
    print(format_table(list(shown.columns), shown.where(shown.notna(), "-").values.tolist()))
    print(f"{len(outcome.executed)} run(s) simulated, {len(outcome.reused)} reused from {out}/runs/")
    written = [out / "results.parquet", out / "results.csv"]
    fig = plots.sweep_figure(table, keys, args.metric)
    if fig is not None:
        written.append(plots.save_png(fig, out / "sweep.png"))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
