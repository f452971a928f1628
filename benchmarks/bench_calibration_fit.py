"""How many steps a rollout fixed cost takes to be fitted beside the factor (tltsim.analysis.calibration).

    python benchmarks/bench_calibration_fit.py | tee benchmarks/results/bench_calibration_fit.txt

A synthetic verl run whose timing_s/gen is 1.3 x the simulator's rollout + 2 s (replica wake and sleep,
agent-loop bookkeeping), every other timer as the simulator predicts it, each value with relative noise,
is calibrated on its first N steps (dapo trace, 16 prompts x 4 samples a step, 16 H100, TP 4). Per N and
noise, over 10 seeds: how often the fit separates the fixed cost (else one factor), the median fitted fixed
cost, and the median |error| of the calibrated step time on the steps after the N (a forecast, not a fit).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.analysis.calibration import MIN_FIXED_STEPS, apply, calibrate
from tltsim.analysis.report.table import format_table
from tltsim.config import ClusterConfig, SimConfig
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth

CFG = SimConfig(cluster=ClusterConfig(gpus=16, tp=4, gpu="h100", model="qwen2.5-7b", max_running=64))
FACTOR, FIXED = 1.3, 2.0
STEPS, HELD_OUT, SEEDS = (4, 6, 8, 12, 16, 24), 16, range(10)


def metrics(pred: pd.DataFrame, noise: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    noisy = lambda x: x * (1 + noise * rng.standard_normal(len(x)))  # noqa: E731
    m = pd.DataFrame(index=pred.index)
    m["gen_s"] = noisy(FACTOR * pred.rollout_s + FIXED)
    m["reward_s"] = noisy(np.full(len(pred), CFG.rl.reward_s))
    m["old_log_prob_s"] = noisy(pred.reward_s - CFG.rl.reward_s)
    m["update_actor_s"] = noisy(pred.train_s)
    m["update_weights_s"] = noisy(pred.sync_s)
    m["step_s"] = m.sum(axis=1)
    for col in ("ref_s", "values_s", "adv_s", "update_critic_s", "len_mean", "len_max"):
        m[col] = np.nan
    return m


def main() -> None:
    trace = synth("dapo", max(STEPS) + HELD_OUT, 16, 4, 4096, seed=5)
    pred = Simulator(trace, CFG).run().steps.set_index("step")
    rows = []
    for noise in (0.01, 0.03):
        for n in STEPS:
            fitted, fixed, errors = 0, [], []
            for seed in SEEDS:
                m = metrics(pred, noise, seed)
                cal = calibrate(trace.select_steps(trace.steps[:n]), CFG, m.iloc[:n])
                fitted += cal.phases.rollout_fixed_s > 0
                fixed.append(cal.phases.rollout_fixed_s)
                held = trace.select_steps(trace.steps[-HELD_OUT:])
                steps = Simulator(held, apply(cal.to_json(), CFG)).run().steps.set_index("step")["total_s"]
                errors.append(float(np.median(np.abs(steps / m["step_s"].loc[steps.index] - 1))))
            rows.append([f"{noise:.0%}", n, f"{fitted}/{len(SEEDS)}", float(np.median(fixed)), float(np.median(errors))])
    print(f"timing_s/gen = {FACTOR} x predicted + {FIXED} s; the fixed cost is fitted from {MIN_FIXED_STEPS} steps on")
    print(format_table(["noise", "steps", "fixed fitted", "fixed_s (median)", "held-out step error"], rows))


if __name__ == "__main__":
    main()
