"""Does training on the rollouts' own sampled answers close the drafter's gap to the target?

    python benchmarks/bench_drafter_on_rollouts.py [LR] [ROUNDS]

Continues the long-tail drafter (real/assets/smollm2-135m-longtail-drafter.pt, warmed on greedy answers) on the
shipped verl run's sampled answers of steps 0-2 (behind prompts of the task's template, as
bench_draft_acceptance.py puts them), ROUNDS x 100 AdamW steps of 8 answers at LR (default 3e-4, 1 round), and
measures the first draft's acceptance (bench_draft_acceptance.first_draft_acceptance) on 8 answers of steps 3-5
before and after each round. float32, 2 threads. Recorded in results/NOTES.md (session 14).
"""
import sys, time
import numpy as np, pandas as pd, torch
sys.path.insert(0, "benchmarks")
from bench_draft_acceptance import first_draft_acceptance
from real import drafting
from real.models import load_target, load_task
torch.set_num_threads(2)
T = 0.7
target = load_target("smollm2-135m", dtype="float32")
task = load_task("smollm2-135m", "longtail")
ans = pd.read_parquet("traces/real_verl_smollm2_longtail/answers.parquet")
train, test = ans[ans.step <= 2], ans[ans.step >= 3].iloc[::4][:8]
rng = np.random.default_rng(1)
probs = task.sample(rng, len(train) + len(test))
def evaluate(d, label):
    rs = [first_draft_acceptance(target, d, task.prompt_ids(p), [int(t) for t in a], T)
          for a, p in zip(test.tokens, probs[len(train):])]
    w = np.array([r["tokens"] for r in rs], float); w /= w.sum()
    print(label, {k: round(float(sum(r[k] * x for r, x in zip(rs, w))), 3) for k in ("argmax draft", "sampled draft", "target's argmax")}, flush=True)
d = drafting.load("real/assets/smollm2-135m-longtail-drafter.pt", target); d.eval()
evaluate(d, "before")
t0 = time.time()
pairs = []
with torch.no_grad():
    for a, p in zip(train.tokens, probs[:len(train)]):
        x = torch.tensor(task.prompt_ids(p) + [int(t) for t in a])
        f = target.model(input_ids=x[None]).last_hidden_state[0, :-1]
        pairs.append((x, f))
print("features", round(time.time() - t0), "s", sum(len(x) for x, _ in pairs), "tokens", flush=True)
for steps in [100] * (int(sys.argv[2]) if len(sys.argv) > 2 else 1):
    t0 = time.time()
    losses = d.fit(pairs, steps=steps, batch_size=8, lr=float(sys.argv[1]) if len(sys.argv) > 1 else 3e-4, seed=0)
    print("fit", steps, round(time.time() - t0), "s loss", round(np.mean(losses[:10]), 3), "->", round(np.mean(losses[-10:]), 3), flush=True)
    evaluate(d, f"after +{steps}")
