"""Where a drafter's acceptance has room to grow: its first draft on a run's recorded answers, against the target.

    python docs/investigations/draft_acceptance.py [--run traces/runs/real_verl_smollm2_longtail] [--answers 8]
        [--drafter real/assets/smollm2-135m-longtail-drafter.pt] [--temperature 0.7]

For each of `--answers` recorded answers of the run (every third of its first and fourth steps, answers.parquet),
behind its own prompt (the run records no prompt text; real.run.worker.step_problems rebuilds the step's problems from
the run's seed), the target reads prompt and answer once (teacher forcing) and the drafter reads the target's
features, as an EAGLE drafter does after its catch-up. At every answer position, with p the target's distribution
at the run's temperature, the probability that a first draft is accepted:

    argmax draft     p(d), d the drafter's most likely token: what real.engine.sampling's rule accepts (drafts are
                     the drafter's top tokens, point masses)
    sampled draft    sum_x min(p(x), q(x)), q the drafter's distribution at the same temperature: what the
                     speculative-sampling rule with draft probabilities would accept
    target's argmax  max_x p(x): a drafter that always proposed the target's most likely token
    history draft    p(h), h the history drafter's first draft (real.drafters.suffix; its history only this answer and its
                     prompt: less than a run's, which also holds the siblings' and earlier steps' answers)
    hybrid draft     p(h) where real.drafters.hybrid's rule takes the history draft (a long, confident match), else p(d)

The first two apart say whether drafting by sampling would pay; the first and third apart, how much a better
drafter would; the last two, what drafting from the rollout's history would take of that. A second table splits
the answer tokens by kind (token_kinds: a number or text, seen earlier in the rollout or new), which says what
the drafter misses and whether the rollout's own history holds it; a third, the hybrid's first draft under other
thresholds of its rule. Recorded: draft_acceptance.txt, read by draft_acceptance.md.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd
import torch

from real import drafters
from real.drafters.hybrid import MIN_EXPECTED, MIN_MATCH, sure
from real.models.targets import load_target, load_task
from real.drafters.suffix import SuffixDrafter
from real.run.problems import recorded_prompts
from tltsim.analysis.report.table import format_table

COLUMNS = ("argmax draft", "sampled draft", "target's argmax", "history draft", "hybrid draft")
CHAIN = 4  # drafts a history match is judged on, as for a 4_1_4 chain
RULES = [(m, e) for m in (2, 4, 6) for e in (0.0, 0.5, 0.9, 1.0, 1.5)]  # the hybrid's (min_match, min_expected) swept


def first_draft_acceptance(target, drafter, prompt: list[int], answer: list[int], temperature: float) -> dict:
    """Means over `answer`'s positions of the acceptance probabilities (COLUMNS, module docstring), the same per
    position (`per_token`), and the hybrid's per position under each rule of RULES (`rules`)."""
    x = torch.tensor(prompt + answer)[None]
    n = x.shape[1] - 1
    with torch.no_grad():
        f = target.model(input_ids=x).last_hidden_state  # f_i: what the target's lm_head reads at token i
        p = torch.softmax(target.lm_head(f[0, :-1]).float() / temperature, -1)  # p_i: the token after x_i
        prev = torch.cat([f.new_zeros(1, 1, f.shape[2]), f[:, : n - 1]], 1)  # the drafter reads (x_i, f_{i-1})
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask = torch.zeros(1, 1, n, n, dtype=f.dtype).masked_fill(~causal, torch.finfo(f.dtype).min)
        logits = drafter.head(drafter(x[:, :n], prev, torch.arange(n)[None], mask))[0].float() / temperature
    q_draft = torch.softmax(logits, -1)
    q = torch.zeros_like(p)
    q[:, drafter.to_target(torch.arange(q_draft.shape[1]))] = q_draft
    top = drafter.to_target(logits.argmax(-1))
    answer_rows = slice(len(prompt) - 1, n)  # positions whose next token is an answer token
    at = {"argmax draft": p.gather(1, top[:, None])[answer_rows, 0], "sampled draft":
          torch.minimum(p, q)[answer_rows].sum(-1), "target's argmax": p.max(-1).values[answer_rows]}
    matches, history = history_drafts(prompt, answer)
    trained = top[answer_rows].tolist()
    on_answer = p[answer_rows]

    def accepted(drafts: list[int]) -> torch.Tensor:
        return on_answer.gather(1, torch.tensor(drafts)[:, None])[:, 0]

    at["history draft"] = accepted(history)
    at["hybrid draft"] = accepted(hybrid_drafts(matches, history, trained, MIN_MATCH, MIN_EXPECTED))
    rules = {rule: accepted(hybrid_drafts(matches, history, trained, *rule)).numpy() for rule in RULES}
    return {**{c: float(v.mean()) for c, v in at.items()}, "tokens": len(answer),
            "per_token": {c: v.numpy() for c, v in at.items()}, "rules": rules}


def history_drafts(prompt: list[int], answer: list[int], n: int = CHAIN) -> tuple[list, list[int]]:
    """At each answer position, the history drafter's match of up to `n` drafts (real.drafters.suffix; its history this
    answer and its prompt alone: no siblings, no earlier steps) and its first draft."""
    session = SuffixDrafter().session()
    session.add([prompt])
    matches, history = [], []
    for r in range(len(answer)):
        committed = prompt + answer[:r]
        session.catch_up([committed])
        m = session.matches(n)[0]
        matches.append(m)
        history.append(m.tokens[0] if m.tokens else committed[-1])  # no match: the chain repeats its root
    return matches, history


def hybrid_drafts(matches: list, history: list[int], trained: list[int], min_match: int,
                  min_expected: float) -> list[int]:
    """real.drafters.hybrid's rule (real.drafters.hybrid.sure) at each position: the history draft where its match is at least
    `min_match` tokens long and expects at least `min_expected` accepted drafts, else the trained drafter's."""
    return [h if sure(m, min_match, min_expected) else t for m, h, t in zip(matches, history, trained)]


def per_token_means(results: list[dict]) -> dict:
    """The acceptance probabilities of `first_draft_acceptance`'s results, each answer weighted by its tokens."""
    total = sum(r["tokens"] for r in results)
    return {c: sum(r[c] * r["tokens"] for r in results) / total for c in COLUMNS}


KINDS = ("number, seen", "number, new", "text, seen", "text, new")


def token_kinds(tokenizer, prompt: list[int], answer: list[int], context: int = 3) -> list[str]:
    """Each answer token's kind (KINDS): a number (its text has a digit) or text, and seen (it and the `context`
    tokens before it occurred together earlier in prompt and answer: a lookup in the rollout's own history could
    have drafted it) or new."""
    x, seen, kinds = prompt + answer, set(), []
    for i in range(len(x)):
        gram = tuple(x[max(0, i - context): i + 1])
        if i >= len(prompt):
            number = any(ch.isdigit() for ch in tokenizer.decode([x[i]]))
            kinds.append(f"{'number' if number else 'text'}, {'seen' if gram in seen else 'new'}")
        seen.add(gram)
    return kinds


def by_kind(tokenizer, prompts: list[list[int]], answers: list[list[int]], results: list[dict]) -> list[list]:
    """Rows of (kind, share of the answer tokens, the acceptance probabilities) over token_kinds: what the
    drafter misses, and whether the rollout's history holds it."""
    kinds = np.concatenate([token_kinds(tokenizer, p, a) for p, a in zip(prompts, answers)])
    per_token = {c: np.concatenate([r["per_token"][c] for r in results]) for c in COLUMNS}
    return [[k, float(np.mean(kinds == k)), *[float(per_token[c][kinds == k].mean()) for c in COLUMNS]]
            for k in KINDS if (kinds == k).any()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="traces/runs/real_verl_smollm2_longtail")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="longtail")
    ap.add_argument("--drafter", default="real/assets/smollm2-135m-longtail-drafter.pt")
    ap.add_argument("--answers", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_target(args.model, dtype="float32")
    drafter = drafters.load(args.drafter, target)
    drafter.eval()
    task = load_task(args.model, args.task)
    answers = pd.read_parquet(f"{args.run}/answers.parquet")
    steps = sorted(answers["step"].unique())
    chosen = answers[answers["step"].isin([steps[0], steps[min(3, len(steps) - 1)]])].iloc[::3][: args.answers]
    rows, prompts = [], recorded_prompts(args.run, task, chosen)
    for (_, a), prompt in zip(chosen.iterrows(), prompts):
        r = first_draft_acceptance(target, drafter, prompt, [int(t) for t in a["tokens"]], args.temperature)
        rows.append({"step": int(a["step"]), "prompt": int(a["prompt_id"]), "sample": int(a["sample"]), **r})
        print(f"  answer {len(rows)}/{len(chosen)}: {r['tokens']} tokens", file=sys.stderr, flush=True)
    cols = COLUMNS
    print(f"# python docs/investigations/draft_acceptance.py --run {args.run} --drafter {args.drafter} "
          f"--answers {args.answers} --temperature {args.temperature} (float32)")
    print(format_table(["step", "prompt", "sample", "tokens", *cols],
                       [[r["step"], r["prompt"], r["sample"], r["tokens"], *[r[c] for c in cols]] for r in rows]))
    means = per_token_means(rows)
    print("\nper answer token: " + ", ".join(f"{c} {v:.3f}" for c, v in means.items()))
    chain = {c: sum(means[c] ** k for k in range(5)) for c in COLUMNS[:3]}  # 1 + a + .. + a^4, if every depth took a
    print("a chain of 4 accepting at that rate at every depth, tokens per target call (a bound: deeper drafts read "
          "the drafter's own features, not the target's): "
          + ", ".join(f"{c} {v:.2f}" for c, v in chain.items()))
    print("\nby the kind of token drafted (seen: it and the 3 tokens before it occurred earlier in prompt or answer):")
    answers = [[int(t) for t in a] for a in chosen["tokens"]]
    print(format_table(["kind", "share", *cols], by_kind(task.tokenizer, prompts, answers, rows)))
    print(f"\nthe hybrid's first draft by its rule (real.drafters.hybrid: min_match {MIN_MATCH}, min_expected {MIN_EXPECTED}):")
    total = sum(r["tokens"] for r in rows)
    print(format_table(["min_match", "min_expected", "hybrid draft"],
                       [[m, e, sum(float(r["rules"][(m, e)].sum()) for r in rows) / total] for m, e in RULES]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
