"""How much does prompt lookup (tlt-base's n-gram drafter) accept against history drafting from a group's siblings
(das), on the same recorded answers, and what quality q does each give the simulator's acceptance model?

    python docs/investigations/model_free_and_switch.py [--run traces/runs/real_verl_smollm2_longtail] [--depth 4]

The run's rollouts are replayed with no model, as docs/investigations/history_depth.py replays them: each step,
each engine's rows (trace.parquet's `engine`) advance together, every iteration speculative; each row drafts a chain
of `depth` tokens, padded as the engines pad it (real.drafters.suffix.chain), and keeps the drafts that equal its
recorded continuation, plus one (real.engine.sampling.verify_chosen, the replay's acceptance rule). Three drafters:

    ngram        real.drafters.ngram: the row's own prompt and tokens so far (prompt lookup, vLLM's `ngram`)
    suffix-own   real.drafters.suffix with nothing but the row's own prompt and tokens so far
    suffix       real.drafters.suffix as a das run feeds it: the prompt, its in-flight siblings on the engine, earlier
                 steps' responses of every engine

Printed per drafter: tokens per call (accepted + 1) overall and at each batch (rows still running), and the q that
gives that many tokens a call to a chain of `depth` in tltsim's acceptance model (tltsim.drafter.history_quality.
ChainAcceptance, inverted by tltsim.drafter.acceptance.invert_quality). Recorded: model_free_and_switch.txt, read
by model_free_and_switch.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from real.drafters.ngram import lookup
from real.drafters.suffix import SuffixDrafter, chain
from real.engine.sampling import recorded_table, verify_chosen
from real.models.targets import load_task
from real.run.problems import recorded_prompts
from tltsim.analysis.report.table import format_table
from tltsim.control.strategy import Strategy
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality

DRAFTERS = ("ngram", "suffix-own", "suffix")


def replay(rows: pd.DataFrame, drafter: str, depth: int) -> dict[int, list[int]]:
    """Tokens per call of every row-iteration, by the batch it ran at (module docstring)."""
    shared = {e: SuffixDrafter() for e in sorted(rows["engine"].unique())}
    calls = defaultdict(list)
    for step in sorted(rows["step"].unique()):
        this = rows[rows["step"] == step]
        for engine, group in this.groupby("engine"):
            prompts, answers = list(group["prompt"]), [list(t) for t in group["tokens"]]
            if drafter == "suffix":
                sessions = [shared[engine].session()]
                sessions[0].add(prompts)
            elif drafter == "suffix-own":  # one index per row: its prompt and its own tokens only
                sessions = [SuffixDrafter().session() for _ in prompts]
                for s, p in zip(sessions, prompts):
                    s.add([p])
            done, live = [0] * len(answers), list(range(len(answers)))
            while live:
                context = [prompts[i] + answers[i][:done[i]] for i in live]
                if drafter == "ngram":
                    matches = [lookup(c, depth) for c in context]
                elif drafter == "suffix":
                    sessions[0].catch_up(context)
                    matches = sessions[0].matches(depth)
                else:
                    matches = []
                    for i, c in zip(live, context):
                        sessions[i].catch_up([c])
                        matches += sessions[i].matches(depth)
                tree = chain(torch.tensor([c[-1] for c in context]), matches, depth)
                ahead = recorded_table([answers[i] for i in live], [done[i] for i in live],
                                       int(tree.depth.max()) + 1).gather(1, tree.depth)
                _, kept, _ = verify_chosen(tree.tokens, tree.parents, ahead)
                for i, a in zip(live, kept.tolist()):
                    done[i] = min(done[i] + a + 1, len(answers[i]))
                    calls[len(live)].append(a + 1)
                keep = [k for k, i in enumerate(live) if done[i] < len(answers[i])]
                if drafter == "suffix":
                    sessions[0].select(keep, [prompts[i] + answers[i] for k, i in enumerate(live) if k not in keep])
                live = [live[k] for k in keep]
        for engine, d in shared.items():  # every other engine's responses of the step join the history
            for prompt, tokens, other in zip(this["prompt"], this["tokens"], this["engine"]):
                if other != engine:
                    d.remember(prompt, list(tokens))
    return calls


def recorded_rows(run: str, model: str) -> pd.DataFrame:
    """The recorded answers of `run` (step, prompt_id, sample, tokens) with each row's engine and its prompt's
    token ids (rebuilt with `model`'s tokenizer)."""
    config = json.loads((Path(run) / "config.json").read_text())
    task = load_task(model, config.get("task"))
    trace = pd.read_parquet(Path(run) / "trace.parquet")[["step", "prompt_id", "sample", "engine"]]
    rows = pd.read_parquet(Path(run) / "answers.parquet").merge(trace, on=["step", "prompt_id", "sample"])
    rows["prompt"] = recorded_prompts(run, task, rows)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="traces/runs/real_verl_smollm2_longtail")
    ap.add_argument("--model", default="smollm2-135m", help="whose tokenizer rebuilds the prompts")
    ap.add_argument("--depth", type=int, default=4)
    args = ap.parse_args(argv)
    rows = recorded_rows(args.run, args.model)
    by = {d: replay(rows, d, args.depth) for d in DRAFTERS}
    batches = sorted({b for calls in by.values() for b in calls})
    model, strategy = AcceptanceModel(), Strategy.chain(args.depth)
    table = []
    for d, calls in by.items():
        mean = float(np.mean([x for v in calls.values() for x in v]))
        table.append([d, round(mean, 3), round(invert_quality(model, strategy, mean), 3)]
                     + [round(float(np.mean(calls[b])), 2) if calls.get(b) else None for b in batches])
    print(f"# {args.run}: {len(rows)} answers, {int(rows['tokens'].map(len).sum())} tokens; chains of {args.depth}; "
          f"tokens per call (accepted drafts + 1) overall, the q the acceptance model gives that at a chain of "
          f"{args.depth}, and tokens per call at each batch (b<k>: k rows running)")
    print(format_table(["drafter", "all", "q"] + [f"b{b}" for b in batches], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
