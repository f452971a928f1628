"""Trained vs history drafting vs their hybrid on GRPO groups of a real model, and history drafting's constants.

    python benchmarks/bench_drafters.py [--model smollm2-135m] [--task wordproblems|longtail] [--batches 1,8,16]
        [--group 8] [--rounds 1] [--rows ROWS.jsonl]
    # record: ... | tee benchmarks/results/bench_drafters.txt

1. speed: `tltsim real speed --model M --batches B --group G --temperature 0.7 --drafters shipped,suffix,hybrid
   --json` (its JSON line as it prints it), then its rows side by side: tokens per second, speedup over plain
   and tokens per target call of each drafter, per batch size. Goal: the hybrid above both.
2. acceptance: what the simulator's acceptance model of history drafting needs: tokens per
   target call of `suffix` (chain of 4) by the row's position among its prompt's G siblings, (a) siblings
   decoded one after another (sibling j drafts from j finished ones), (b) all G in flight together, and (c) a
   repeat of the prompt in a later step (the same drafter after (a): its history holds the first step's G
   responses); for G in --sizes, over --prompts prompts. With --rows, every (group, arrangement, pass, prompt,
   sibling) is also written as a JSON line (its tokens per call, calls, response length and finish rank among its
   siblings), and the lookup's per-batch medians after them: what tltsim.drafter.history_quality fits.
3. cost: history drafting's per-iteration lookup (the engine's draft_s: catch-up and lookup) against the target's
   forward (target_s), per batch, from (a) and (b).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from real.tools import speed  # noqa: E402
from real.cli import main as real_main  # noqa: E402
from real.models.targets import load_target  # noqa: E402
from real.settings import SpeedSettings  # noqa: E402
from real.drafters.suffix import SuffixDrafter  # noqa: E402
from real.models.targets import load_task  # noqa: E402
from tltsim.core.io import write_text  # noqa: E402


def side_by_side(rows: list[dict]) -> str:
    df = pd.DataFrame(rows)
    df["drafter"] = df["drafter"].replace("", "plain")
    return df.pivot(index="batch", columns="drafter", values=["tok_s", "speedup", "tokens_per_call"]).round(2) \
        .to_string()


def acceptance(model: str, task: str, sizes: list[int], prompts: int, max_new: int, temperature: float,
               rows_path: str | None, pool_seed: int = 1) -> None:
    target = load_target(model)
    pool = speed.heldout_prompts(load_task(model, task), prompts, seed=pool_seed)
    settings = SpeedSettings(max_new_tokens=max_new, temperature=temperature, group=max(sizes))
    table, cost = [], []
    for g in sizes:
        for arrangement, running in (("one after another", 1), ("in flight together", g)):
            for i in range(prompts):
                drafter = SuffixDrafter()
                rows = [(i, j) for j in range(g)]
                passes = [("step 1", rows)] + ([("step 2 (repeat)", rows)] if running == 1 else [])
                for k, (label, todo) in enumerate(passes):  # a repeat samples afresh, as a later step does
                    engine, row_of, per_call = speed.decode(target, drafter, pool, todo, running, settings,
                                                            seed=i + 1000 * k)
                    length = {row_of[r][1]: len(f.tokens) for r, f in engine.finished.items()}
                    for j, tpc in speed.by_sibling(per_call).items():
                        rank = j if running == 1 else sum(n < length[j] for n in length.values())
                        table.append({"task": task, "pool_seed": pool_seed, "group": g, "arrangement": arrangement,
                                      "pass": label, "prompt": i, "sibling": j, "rank": rank, "length": length[j],
                                      "calls": len(per_call[(i, j)]), "tokens_per_call": tpc,
                                      "strategy": settings.strategy})
                    its = [it for it in engine.iterations if it.mode == "spec_decode"]
                    cost += [{"batch": it.batch_size, "draft_ms": 1e3 * it.draft_s, "target_ms": 1e3 * it.target_s}
                             for it in its]
    df = pd.DataFrame(table)
    print("\n# tokens per call of suffix (chain of 4) by sibling position, mean over prompts")
    print(df.pivot_table(index=["group", "arrangement", "pass"], columns="sibling", values="tokens_per_call")
          .round(2).to_string())
    first = df[df.sibling == 0].groupby(["group", "arrangement", "pass"]).tokens_per_call.mean()
    later = df[df.sibling > 0].groupby(["group", "arrangement", "pass"]).tokens_per_call.mean()
    print("\n# first sample vs the later ones (mean tokens per call)")
    print(pd.DataFrame({"first": first, "later": later}).round(3).to_string())
    c = pd.DataFrame(cost)
    print("\n# history drafting's lookup (draft_ms: catch-up + lookup) vs the target forward (target_ms), "
          "median per iteration")
    summary = c.groupby("batch")[["draft_ms", "target_ms"]].median()
    summary["lookup/forward"] = summary.draft_ms / summary.target_ms
    summary["iterations"] = c.groupby("batch").size()
    print(summary.round(3).to_string())
    if rows_path:
        lookup = [{"kind": "lookup", "task": task, "batch": int(b), **{k: float(v) for k, v in r.items()}}
                  for b, r in summary.iterrows()]
        write_text(rows_path, "".join(json.dumps(r) + "\n" for r in [*({"kind": "acceptance", **t} for t in table),
                                                                      *lookup]))
        print(f"# rows: {rows_path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="wordproblems", choices=("wordproblems", "longtail"),
                    help="the chat task whose held-out problems the acceptance part answers")
    ap.add_argument("--rows", default=None, help="acceptance part: also write its raw rows here, as JSON lines")
    ap.add_argument("--pool-seed", type=int, default=1, help="acceptance part: the seed that draws its held-out "
                    "prompts (another seed, other prompts: runs side by side add up)")
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sizes", default="2,4,8", help="group sizes of the acceptance part")
    ap.add_argument("--prompts", type=int, default=3, help="prompts the acceptance part averages over")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", default="speed,acceptance")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} threads",
          flush=True)
    parts = args.parts.split(",")
    if "speed" in parts:
        words = ["speed", "--model", args.model, "--batches", args.batches, "--group", str(args.group),
                 "--temperature", str(args.temperature), "--drafters", "shipped,suffix,hybrid", "--rounds",
                 str(args.rounds), "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads),
                 "--json"]
        print("# tltsim real " + " ".join(words), flush=True)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            real_main(words)
        line = buf.getvalue().strip().splitlines()[-1]
        print(line)
        print(side_by_side(json.loads(line)), flush=True)
    if "acceptance" in parts:
        print(f"\n# acceptance and cost: suffix, task {args.task}, groups {args.sizes}, {args.prompts} prompts, "
              f"temperature {args.temperature}, {args.max_new_tokens} tokens, pool seed {args.pool_seed}", flush=True)
        acceptance(args.model, args.task, [int(s) for s in args.sizes.split(",")], args.prompts,
                   args.max_new_tokens, args.temperature, args.rows, args.pool_seed)


if __name__ == "__main__":
    main()
