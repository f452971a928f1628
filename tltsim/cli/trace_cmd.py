"""`tltsim trace stats | synth | convert`: inspect, generate and convert response-length traces."""
from __future__ import annotations

import json
import warnings

from tltsim.core import glossary
from tltsim.core.argparser import PreformattedHelpFormatter, add_force, whole
from tltsim.core.errors import TltsimError, TltsimWarning
from tltsim.core.io import check_apart, check_file
from tltsim.trace import FAMILIES, load, save, stats, synth
from tltsim.trace.synth import COMMON
from tltsim.trace.formats import SUFFIXES, detect, sidecar
from tltsim.trace.schema import Trace, TraceMeta
from tltsim.trace.tokens import token_counter


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="inspect, generate and convert response-length traces")
    sub = p.add_subparsers(dest="trace_command")

    s = sub.add_parser("stats", help="per-step and overall length statistics, tail share",
                       epilog=glossary.trace_stats_epilog(), formatter_class=PreformattedHelpFormatter)
    s.add_argument("file", help=f"trace file ({', '.join(SUFFIXES)}; length logs, Vidur CSV and PolyTrace's "
                   "multi-turn workload log, a file or its directory, too)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_stats)

    g = sub.add_parser(
        "synth",
        help="generate a synthetic trace from a named family",
        description="Generate a seeded synthetic trace (tltsim/trace/synth.py documents each family). "
        + "; ".join(f"{f.name}: {', '.join(f'{k}={v:g}' for k, v in f.defaults.items())}" for f in FAMILIES.values()),
    )
    g.add_argument("family", help=f"one of {', '.join(FAMILIES)}")
    g.add_argument("--steps", type=int, required=True, help="RL steps")
    g.add_argument("--prompts", type=int, required=True, help="prompts per step")
    g.add_argument("--group", type=int, required=True, help="samples per prompt (GRPO n)")
    g.add_argument("--max-len", type=int, required=True, help="generation cap; longer responses are truncated")
    g.add_argument("--seed", type=int, required=True, help="seed of the generator")
    g.add_argument("--drift", type=float, help="relative growth of lengths per step (0.02 = +2%% a step), the family's drift parameter "
                   f"(default: {COMMON['drift']:g})")
    g.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a family parameter (repeatable), e.g. --param rho=0.3")
    g.add_argument("-o", "--output", required=True, help=f"output file ({', '.join(SUFFIXES)})")
    add_force(g, "the output file (and a CSV or JSONL trace's sidecar NAME.meta.json)")
    g.set_defaults(func=_synth)

    c = sub.add_parser("convert", help="convert between formats (and import verl / Vidur / PolyTrace logs)")
    c.add_argument("input", help="trace file to read, a verl rollout dump (trainer.rollout_data_dir or one file of it), "
                   "PolyTrace's multi-turn workload log (its directory or one multiturn_workload_step_<step>.jsonl), "
                   "or a length log (PolyTrace's packed_length_log directory or one packed_lengths_step_<step>.jsonl)")
    c.add_argument("output", help=f"file to write ({', '.join(SUFFIXES)})")
    add_force(c, "OUTPUT (and a CSV or JSONL trace's sidecar OUTPUT.meta.json)")
    c.add_argument("--max-len", type=whole(1), help="declare the response cap, whatever the log says (a warning where it "
                   "says another; length logs do not record it)")
    c.add_argument("--requests-per-step", type=int, help="Vidur CSV only: chunk requests into steps of this many")
    c.add_argument("--tokenizer", metavar="TOK", help="verl rollout dumps only: the run's tokenizer (a local model or "
                   "tokenizer directory, or a `tltsim real model` name such as smollm2-135m) that counts the tokens of the dumped texts")
    c.set_defaults(func=_convert)


def _stats(args) -> int:
    trace = load(args.file)
    st = stats(trace)
    if args.json:
        print(json.dumps(st))
        return 0
    m = trace.meta
    cap = m.max_response_len if m.max_response_len is not None else "unknown"
    print(f"{args.file}: source {m.source}, model {m.model}, cap {cap}, group {m.group_size}, "
          f"{st['steps']} steps, {st['responses']} responses")
    if m.left_out:
        print(f"left out of the source: {m.left_out}")
    print(_table(st))
    if "turns" in st:
        print(_turn_table(st))
    print("(columns: `tltsim trace stats --help`)")
    return 0


def _table(st: dict) -> str:
    head = ["step", "responses", "mean", "median", "p90", "p99", "max", "max/med", "trunc%", "tail%", "aborted%"]
    rows = [_row(str(e["step"]), e) for e in st["per_step"]] + [_row("all", st)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head] + rows)


def _turn_table(st: dict) -> str:
    """A multi-turn trace's turns and tool calls, per step and overall."""
    head = ["step", "trajectories", "turns", "tool_calls", "completion_tokens", "tool_latency_s", "tool_wait%"]

    def row(label, e):
        wait = "-" if e["tool_wait_share"] is None else f"{100 * e['tool_wait_share']:.1f}"
        return [label, str(e["trajectories"]), str(e["turns"]), str(e["tool_calls"]), str(e["completion_tokens"]),
                f"{e['tool_latency_s']:.1f}", wait]

    rows = [row(str(e["step"]), e) for e in st["per_step"]] + [row("all", st)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head] + rows)


def _row(label: str, e: dict) -> list[str]:
    trunc = "-" if e["truncated_fraction"] is None else f"{100 * e['truncated_fraction']:.1f}"
    return [label, str(e["responses"]), f"{e['mean']:.0f}", f"{e['median']:.0f}", f"{e['p90']:.0f}",
            f"{e['p99']:.0f}", str(e["max"]), f"{e['max_over_median']:.2f}", trunc, f"{100 * e['tail_share']:.1f}",
            f"{100 * e['aborted_fraction']:.1f}"]


def _synth(args) -> int:
    _check_trace_output(args.output, args.force)
    params = _params(args.param)
    if args.drift is not None:
        params["drift"] = args.drift
    trace = synth(args.family, args.steps, args.prompts, args.group, args.max_len, args.seed, **params)
    save(trace, args.output)
    print(f"wrote {args.output}: {args.steps} steps x {args.prompts} prompts x {args.group} samples "
          f"({len(trace.df)} responses), family {args.family}")
    return 0


def _check_trace_output(path, force: bool) -> None:
    """The trace file to write, and the sidecar a CSV or JSONL one gets (tltsim.core.io.check_file, each)."""
    check_file(path, force)
    if str(path).lower().endswith((".csv", ".jsonl")):
        check_file(sidecar(path), force)


def _params(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise TltsimError(f"--param {item!r}: expected NAME=VALUE with a number, e.g. --param rho=0.3")
    return out


def _convert(args) -> int:
    check_apart({"OUTPUT": args.output, "OUTPUT's sidecar": sidecar(args.output)},
                {"INPUT": args.input, "INPUT's sidecar": sidecar(args.input), "--tokenizer": args.tokenizer})
    _check_trace_output(args.output, args.force)
    with warnings.catch_warnings(record=True) as read:  # said once the trace is whole: an error is one line
        warnings.simplefilter("always")
        trace = _read_input(args)
    if args.max_len is not None:
        declared = trace.meta.max_response_len
        meta = TraceMeta.from_dict({**trace.meta.to_dict(), "max_response_len": args.max_len}, path="--max-len")
        trace = Trace.from_frame(trace.df, meta, path=args.input)
    for w in read:
        warnings.warn(w.message, w.category)
    if args.max_len is not None and declared not in (None, args.max_len):
        warnings.warn(f"--max-len {args.max_len}: {args.input} declares a cap of {declared}; the trace takes "
                      f"{args.max_len}, as asked", TltsimWarning)
    save(trace, args.output)
    print(f"wrote {args.output}: {len(trace.df)} responses in {len(trace.steps)} steps, source {trace.meta.source}")
    return 0


def _read_input(args) -> Trace:
    fmt = detect(args.input)  # the registry's order: a log recognised by content before plain JSONL
    if "count_tokens" not in fmt.options:
        if args.tokenizer:
            raise TltsimError(f"--tokenizer applies to verl rollout dumps (texts); {args.input} is not one: drop it")
        return load(args.input, requests_per_step=args.requests_per_step)
    if not args.tokenizer:
        raise TltsimError(f"{args.input} is a verl rollout dump: it keeps texts, not token counts, so counting its "
                          f"tokens needs the run's tokenizer; pass --tokenizer DIR (the run's model directory)")
    if args.requests_per_step is not None:
        raise TltsimError("--requests-per-step applies to Vidur CSV traces only; drop it")
    from real.models.hub import resolve_model  # a known model's name (smollm2-135m) -> its directory in the cache

    return load(args.input, count_tokens=token_counter(str(resolve_model(args.tokenizer))), tokenizer=args.tokenizer)