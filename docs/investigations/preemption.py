"""How much of veRL's rollout on Seer's 72B task would preemption explain? The simulator's admission against an
engine that admits on the cache it uses and preempts when it runs out.

    python docs/investigations/preemption.py | tee docs/investigations/preemption.txt

(preemption.md reads its output.) The setup of docs/fidelity.md's Seer rows: Qwen2-VL-72B's language model (the
qwen2-72b preset) at TP 8 on 128 H100-class GPUs, 9,600 responses an iteration in groups of 16 (Seer's Table 3),
the lengths bench_fidelity draws (out/fidelity/seer.parquet's recipe), its first iteration; each of the 16 engines
runs its contiguous share of 600 responses, at most 256 at once (the simulator's default), from the same roofline.

Two admission rules, each played here by one event loop over an engine's requests (between events every running
request gains a token an iteration, so a stretch of iterations costs the roofline's `segment_time`; an admission
costs a prefill of what the admitted requests bring):
- reserve: a request is admitted when the cache holds its whole final footprint (prompt and response, which the
  trace knows), what tltsim.sim.schedule does: it never runs out, so it never preempts;
- preempt: a request is admitted when the cache holds its prompt (and what it had generated, if it was preempted)
  with 1% of the cache to spare, as vLLM admits (its watermark), and not in an iteration that had to preempt; when
  the running requests' next tokens no longer fit, the one admitted last is preempted, its cache freed, and it
  waits at the head of the queue to be prefilled again with everything it had generated (vLLM's recompute
  preemption).
Printed: per rule the step's rollout (its slowest engine), the engines' mean, the preemptions and the tokens
prefilled again; beside them the simulator's own step (verl) as a check of the reserve loop, and the simulator's step
with the two other setup details that could lengthen it: a heavier tail at the same mean (sigma 1.5) and H800's
NVLink (400 GB/s in all, 200 a direction, where the h100 preset has 450 a direction). Deterministic.
"""
from __future__ import annotations

import tempfile
from collections import deque
from dataclasses import replace
from pathlib import Path

import numpy as np

from tltsim.config import ClusterConfig, SimConfig
from tltsim.cost import Roofline
from tltsim.drafter import history_quality as hq
from tltsim.hardware import load_gpu, load_model
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth
from tltsim.trace.synth import MATH_SIGMA, lognormal_median

ENGINES, TP, MAX_RUNNING = 16, 8, 256
WATERMARK = 0.01  # of the cache kept free when admitting (vLLM's default watermark)


def engine_time(cost: Roofline, prompt: np.ndarray, response: np.ndarray, rule: str) -> tuple[float, int, int]:
    """One engine's rollout under `rule` ("reserve" or "preempt"): (seconds, preemptions, tokens prefilled again)."""
    cap = cost.kv_capacity_tokens
    waiting = deque((i, 0) for i in range(len(prompt)))  # (request, tokens it had generated)
    running: list[list[int]] = []  # [request, context tokens, tokens left], in admission order
    used = reserved = 0
    t, preemptions, again = 0.0, 0, 0
    preempted = False  # as vLLM: nothing is admitted in an iteration that had to preempt
    while waiting or running:
        admitted, sq = 0, 0
        while waiting and len(running) < MAX_RUNNING and not preempted:
            i, done = waiting[0]
            need = prompt[i] + done
            if (reserved + prompt[i] + response[i] > cap) if rule == "reserve" else (used + need > cap - WATERMARK * cap):
                break
            waiting.popleft()
            running.append([i, need, response[i] - done])
            used, reserved = used + need, reserved + prompt[i] + response[i]
            admitted, sq, again = admitted + need, sq + need * need, again + done
        t += float(cost.prefill_time(admitted, sq)) if admitted else 0.0
        if not running:
            raise SystemExit(f"a request of {prompt[waiting[0][0]] + response[waiting[0][0]]} tokens does not fit")
        b = len(running)
        room = (cap - used) // b  # iterations before the running requests' next tokens no longer fit
        if rule == "preempt" and room < 1:
            i, ctx, left = running.pop()  # the one admitted last
            used, reserved = used - ctx, reserved - prompt[i] - response[i]
            waiting.appendleft((i, ctx - prompt[i]))
            preemptions, preempted = preemptions + 1, True
            continue
        preempted = False
        k = min(r[2] for r in running)
        if rule == "preempt":
            k = min(k, room)
        t += float(cost.segment_time(b, 1, used, b, k))
        used += b * k
        for r in running:
            r[1] += k
            r[2] -= k
        for i, ctx, left in [r for r in running if r[2] == 0]:
            used, reserved = used - ctx, reserved - prompt[i] - response[i]
        running = [r for r in running if r[2] > 0]
    return t, preemptions, again


def main() -> None:
    trace = drawn(MATH_SIGMA)
    step = trace.df[trace.df["step"] == 0]
    prompt, response = step["prompt_len"].to_numpy(np.int64), step["response_len"].to_numpy(np.int64)
    cost = Roofline(load_model("qwen2-72b"), load_gpu("h100"), TP)
    cluster = ClusterConfig(gpus=ENGINES * TP, tp=TP, gpu="h100", model="qwen2-72b")
    sim = rollout(trace, cluster)
    share = len(step) // ENGINES
    print(f"# Seer's Qwen2-VL-72B task, its first iteration: {len(step):,} responses (mean {response.mean():,.0f} "
          f"tokens), {ENGINES} engines of {share} at TP {TP}, at most {MAX_RUNNING} running; the cache holds "
          f"{cost.kv_capacity_tokens:,} tokens an engine")
    print(f"# the simulator's verl step: rollout {sim:.1f} s")
    print(f"{'rule':<9}{'rollout s':>11}{'engine mean s':>15}{'preemptions':>13}{'re-prefilled tokens':>21}")
    for rule in ("reserve", "preempt"):
        runs = [engine_time(cost, prompt[e * share:(e + 1) * share], response[e * share:(e + 1) * share], rule)
                for e in range(ENGINES)]
        times = [r[0] for r in runs]
        print(f"{rule:<9}{max(times):>11.1f}{np.mean(times):>15.1f}{sum(r[1] for r in runs):>13,}"
              f"{sum(r[2] for r in runs):>21,}")
    h800 = Path(tempfile.mkdtemp()) / "h800.toml"
    h800.write_text('name = "H800"\nmemory_gb = 80\nbandwidth_tbs = 3.35\nbf16_tflops = 989\ninterconnect_gbs = 200\n')
    print(f"# the simulator's verl step, sigma 1.5 at the same mean: rollout {rollout(drawn(1.5), cluster):.1f} s; "
          f"H800's NVLink: {rollout(trace, replace(cluster, gpu=str(h800))):.1f} s")


def drawn(sigma: float):
    """Seer's Qwen2-VL-72B workload as history_quality.seer_trace draws it, at spread `sigma`."""
    task = next(f for f in hq.SEER_TAU if f.workload == "Qwen2-VL-72B")
    return hq.seer_trace(task) if sigma == MATH_SIGMA else synth(
        "lognormal", 1, task.requests // task.group, task.group, task.cap, 0,
        median=lognormal_median(task.mean, task.cap, sigma), sigma=sigma)


def rollout(trace, cluster: ClusterConfig) -> float:
    """The simulator's verl rollout of the trace's first step, s."""
    return Simulator(trace, SimConfig(cluster=cluster, steps="0:1"), make_policy("verl")).run().summary["rollout_s"]


if __name__ == "__main__":
    main()
