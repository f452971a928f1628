"""The simulator against published GPU figures of reasoning-RL rollout systems: docs/fidelity.md.

    python benchmarks/bench_fidelity.py | tee benchmarks/results/bench_fidelity.txt

Each row is one figure a paper or a README publishes (a speedup, a rollout share, a throughput gain), the setup it
was measured on, and the simulator set up as near to it as the existing flags allow: a model and GPU preset, the
cluster, a shipped trace or one drawn by `tltsim trace synth` with a fixed seed to the source's length statistics,
and the policy that plays the source's mechanism. Every prediction is computed here, when the script runs, by
the command (or the API call) the row shows; the published figures are the constants below, each beside its
source. A row is **fitted** when its figure set a parameter of the simulator (the TLT micro-benchmarks of
docs/design.md#calibration-figures, Seer's acceptance lengths the history model is fitted to) and **held out**
otherwise. The error is signed, prediction over published
minus 1; every row over 20% gets a sentence built from what its own runs measured.

It runs the commands one after the other from the repository's root and writes their results under
out/fidelity/ (replaced on every run), then docs/fidelity.md and the record the report reads (which model size,
GPU and policy each row checked: tltsim/analysis/validation/data/published.csv), each atomically, and prints the
table. Deterministic:
every trace is drawn with a fixed seed and the simulator's fast path uses expected accepted lengths. Runs
shorter than the sources' (fewer steps) are said so in their rows.
"""
from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
OUT = "out/fidelity"  # relative to ROOT: the commands shown are the ones run
DOC = ROOT / "docs" / "fidelity.md"
RECORD = ROOT / "tltsim" / "analysis" / "validation" / "data" / "published.csv"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tltsim.trace.synth import MATH_SIGMA  # noqa: E402  (the spread RP_PARAMS and the Seer rows draw lengths at)

# --- what the sources publish --------------------------------------------------------------------------------
# RollPacker (Gao et al., NSDI '26; the paper of its artifact, github.com/Farrrrland/RollPacker,
# files/nsdi26fall-paper677.pdf, where the system is called Flexes). Table 2: end-to-end training speedup over
# veRL, cumulative; P0 = 128 prompts x R0 = 8 responses, eta = 1.25, Qwen2.5-7B/8k on 16 H800 (rollout TP 1),
# 14B/16k on 32 (TP 2), 32B/32k on 64 (TP 2) (section 6, "Models", "Training Configurations").
ROLLPACKER_TAIL = {"7b": 1.30, "14b": 1.48, "32b": 2.21}   # Table 2, row "+ Tail Batching"
ROLLPACKER_WHOLE = {"7b": 2.03, "14b": 2.22, "32b": 2.56}  # Table 2, row "+ Trainer" (the whole system)
ROLLPACKER_ROLLOUT_SHARE = 0.72  # Table 1, Math: veRL's rollout share of a step, Qwen2.5-14B/16k, 32 H800
ROLLPACKER_SCALE = 2.2  # section 6.7 / Figure 14: throughput over veRL, Qwen2.5-14B/16k, batch 512, 128 GPUs
# Section 2.2: the responses' 75th percentile lies between 755 and 1.1k tokens, the longest 25x-32x the median.
# verl-SpeCo README (github.com/verl-project/verl-SpeCo), "Performance Preview": Qwen3-8B, EAGLE3 drafter
# co-trained, 100 steps on vLLM-Ascend/NPU, against the baseline without speculation.
SPECO_ROLLOUT = 1.20  # "about 20% faster rollout"
SPECO_E2E = 1.11      # "11% faster end-to-end training"
APRIL_THROUGHPUT = 1.225  # APRIL (arXiv 2509.18521) abstract: rollout throughput +22.5% on average (at most 44%)
# AReaL v0.3's blog (github.com/inclusionAI/AReaL, blog/AReaL_v0_3.md), Table 2: asynchronous against synchronous
# AReaL on the same GPUs, 1,000 PPO steps each, training hours (the abstract's "up to 2.77x" is the 1.5B row). The
# v0.2 math recipe it follows (blog/AReaL_v0_2.md): DeepSeek-R1-Distill-Qwen-1.5B / 7B, 512 prompts x 16 a step,
# cap 27,648 tokens, truncation "below 5%"; its configs (examples/configs/v0.2-qwen2-math/*-gpus-128.yaml) split
# 16 nodes of 8 H800 into SGLang on 64 GPUs at TP 1 (mem_fraction_static 0.8) and the trainer on 64; their README
# runs them asynchronously at max_head_offpolicyness 4 (synchronous AReaL is the same split at 0).
AREAL_HOURS = {"1.5b": (41.0, 14.8, 128), "7b": (57.7, 25.4, 192)}  # synchronous h, asynchronous h, GPUs
AREAL_PPO_STEPS = 1000
# Seer (Qin et al., arXiv 2511.14617v3, OSDI '26). Table 3: Qwen2-VL-72B on 128 H800 at TP 8, 9,600 requests an
# iteration in groups of 16, generation capped at 40,960 tokens, 7,615 on average (its Moonlight and Kimi-K2 are
# MLA models, which tltsim's presets cannot express). Against veRL, all on one vLLM: Figure 8, veRL's rollout of an
# iteration (the average); Figure 10, divided rollout with every output length known in advance and the longest
# first ("Oracle"); Table 4, the whole system (divided rollout, context-aware scheduling, grouped speculation).
# Figure 11, Seer's grouped speculation alone on veRL (a rollout iteration): throughput 1.38x on Qwen2-VL-72B; its
# tokens a verify there and on the other workloads set the history model (tltsim.drafter.history_quality.SEER_TAU,
# which holds Table 3's workloads too).
SEER_VERL_ROLLOUT_S = 3957
SEER_VERL_PREEMPTIONS = 13686  # section 4.2.2: preemptions in one iteration of this task on veRL (Figure 3)
SEER_VERL_IDLE = 0.37  # section 4.2.2: each instance idle 1,580 s of the iteration on average
SEER_ORACLE_LFS = 1.63
SEER_SCHEDULED = 1.56  # Figure 10 and Table 4: divided rollout and context-aware scheduling, before grouped speculation
SEER_WHOLE = 2.04
SEER_SD_THROUGHPUT = 1.38
SEER_OVER_PARTIAL = 1.43  # section 4.4.3, Figure 12a: Seer's throughput over Partial Rollout (APRIL's 2x over-issue)
SEER_ITERATIONS = 5  # section 4.1, Metrics: the average rollout throughput across 5 iterations
SEER_PHASES = {"rollout": 0.63, "weight update": 0.06}  # Table 1, Qwen2-VL-72B: shares of an iteration (training 31%)
RHYMERL_SPEEDUP = 2.6  # RhymeRL (arXiv 2508.18588v1) abstract: "a 2.6x performance improvement"
# RhymeRL's HistoSpec recipe for verl (github.com/He-Jingkai/verl, recipe/specRL/histoSpec/README.md): drafting from
# earlier epochs' responses (ArcticInference's suffix decoding), "up to 2.1x speedup in rollout and validation phases"
# on Qwen2.5 and Qwen3 models; its plotted experiment: Qwen3-14B-Base trained with DAPO, temperature 1, responses up
# to 8k, 32 H100, 256 prompts x 16.
HISTOSPEC_ROLLOUT = 2.1
DAS_ROLLOUT = 2.0  # DAS (arXiv 2511.13841v1) abstract: rollout time reduced "up to 50%" (a 2x faster rollout)
TLT_SPEEDUP = 1.7  # TLT (arXiv 2511.16665v1) abstract: "over 1.7x end-to-end RL training speedup"
# NeMo-RL's speculative rollouts (Iso et al., arXiv 2604.26779v1). The abstract: "In a reasoning post-training
# workload at 8B scale under synchronous RL, speculative decoding improves rollout throughput by 1.8x". The setup
# as summaries of the paper give it (its body was not at hand): Qwen3-8B, GRPO, 32 GB200, vLLM, an EAGLE-3 drafter
# drafting 3 tokens at every batch size; RL-Zero's generation 100 s -> 56.6 s at 2.05 tokens a verify; generation
# 65-72% of a synchronous step.
NEMO_ROLLOUT = 1.8
NEMO_ACCEPTED = 2.05
NEMO_GEN_SHARE = (0.65, 0.72)
# TLT's micro-benchmarks (Qwen2.5-32B, TP 4, H100; Qwen2.5-7B single stream), as docs/design.md records them
TLT_ACCEPTED_8_8_16 = 6.34         # docs/design.md#accepted-length, depth 8, 16 verify tokens
TLT_SD_SPEEDUP = {(48, 1): 3.56, (16, 32): 2.48}  # docs/design.md#sd-speedup-grid, (verify, batch)
TLT_DECODE_H100 = (165, 430)       # docs/design.md#single-stream-decode: tokens/s without and with speculation


# --- the table's arithmetic ----------------------------------------------------------------------------------
def error(predicted: float, published: float) -> float:
    """Signed relative error of a prediction: predicted / published - 1 (+0.10: 10% over the published figure)."""
    return predicted / published - 1


def summary(rows: list[tuple[str, float]]) -> dict[str, tuple[int, float, float]]:
    """Per group, from (group, signed error) pairs: (rows, median |error|, worst |error|)."""
    out = {}
    for group in sorted({g for g, _ in rows}):
        errs = [abs(e) for g, e in rows if g == group]
        out[group] = (len(errs), statistics.median(errs), max(errs))
    return out


# --- running the simulator -----------------------------------------------------------------------------------
def shown(args: list[str]) -> str:
    return "python -m tltsim " + " ".join(args)


@dataclass
class Runs:
    """Each command run once (rows that share a run share its result), in the repository's root."""
    done: dict = field(default_factory=dict)
    seconds: float = 0.0

    def tltsim(self, args: list[str]) -> str:
        key = tuple(args)
        if key not in self.done:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "tltsim", *args], cwd=ROOT, capture_output=True, text=True)
            self.seconds += time.perf_counter() - t0
            if proc.returncode:
                raise SystemExit(f"{shown(args)} failed:\n{proc.stderr}")
            self.done[key] = proc.stdout
        return self.done[key]

    def compare(self, name: str, trace: str, policies: str, *, model: str, gpus: int, tp: int, steps: str,
                gpu: str = "h100", knobs: tuple[str, ...] = (), memory: float | None = None) -> tuple[dict, str]:
        """`tltsim compare` of `policies` (the baseline first): each policy's summary, and the command."""
        args = ["compare", "--trace", trace, "--model", model, "--gpu", gpu, "--gpus", str(gpus), "--tp", str(tp),
                *(["--gpu-memory-utilization", str(memory)] if memory else []), "--steps", steps, "--policies", policies, *[a for k in knobs for a in ("--knob", k)],
                "--json", "--no-report", "--no-progress", "-o", f"{OUT}/{name}"]
        got = json.loads(self.tltsim(args))
        return {p["policy"]: p for p in got["policies"]}, shown(args)

    def synth(self, name: str, family: str, *, steps: int, prompts: int, group: int, max_len: int,
              params: tuple[str, ...] = (), seed: int = 0) -> tuple[str, str]:
        """A seeded synthetic trace under out/fidelity/: its path and the command that drew it."""
        path = f"{OUT}/{name}.parquet"
        args = ["trace", "synth", family, "--steps", str(steps), "--prompts", str(prompts), "--group", str(group),
                "--max-len", str(max_len), "--seed", str(seed), *[a for p in params for a in ("--param", p)],
                "-o", path]
        self.tltsim(args)
        return path, shown(args)


def rollout_tokens_per_s(s: dict) -> float:
    """Response tokens generated per second of rollout (tokens_per_s is over the makespan)."""
    return s["tokens_per_s"] * s["makespan_s"] / s["rollout_s"]


def measured(base: dict, pol: dict) -> dict:
    """What a pair of runs says beside its headline figure: the facts the rows' explanations quote."""
    other = base["makespan_s"] - base["rollout_s"]
    return {"speedup": base["makespan_s"] / pol["makespan_s"],
            "rollout_speedup": base["rollout_s"] / pol["rollout_s"],
            "base_rollout_share": base["rollout_share"], "base_idle": base["idle_fraction"],
            "base_tail_share": base["tail_share"], "other_s": other / base["steps"],
            "amdahl": base["makespan_s"] / other if other > 0 else float("inf"),
            "sd_share": pol.get("sd_share", 0.0), "accepted": pol.get("mean_accepted") or 0.0,
            "dropped": pol.get("dropped_fraction", 0.0), "pol_idle": pol["idle_fraction"],
            "base_step_s": base["mean_step_s"], "pol_step_s": pol["mean_step_s"],
            "rollout_s": base["rollout_s"] / base["steps"], "reward_s": base["reward_s"] / base["steps"],
            "train_s": base["train_s"] / base["steps"], "pol_rollout_s": pol["rollout_s"] / pol["steps"],
            "resumed": pol.get("resumed_fraction", 0.0), "sync_s": base["sync_s"] / base["steps"],
            "sync_share": base["sync_s"] / base["makespan_s"]}


def at_share(f: dict, share: float) -> float:
    """The step speedup the same rollout speedup would give were the baseline's rollout `share` of its step."""
    return 1 / (1 - share + share / f["rollout_speedup"])


# --- the rows ------------------------------------------------------------------------------------------------
@dataclass
class Row:
    source: str     # the source and where in it
    setup: str      # the source's setup, and what it leaves out and was assumed
    figure: str     # what the figure is
    published: float
    group: str      # "fitted" or "held out"
    predicted: float = 0.0
    how: list[str] = field(default_factory=list)  # the commands (or the API call) that give the prediction
    facts: dict = field(default_factory=dict)
    fitted: str = ""  # for a fitted row: the parameter the figure set
    why: Callable[[dict], str] | None = None  # the explanation of a miss over 20%, from the row's own facts
    policy: str = ""  # the policy the row checks, where its command compares several (else the command's last)


# How the setups were matched: the RollPacker traces are drawn lognormal, median 450 tokens and sigma 1.08, so
# that the 75th percentile (450 x e^(0.674 x 1.08) = 930) sits inside 755-1.1k and the longest of a step's 1,024
# responses (about e^(3.1 x 1.08) = 28x the median) inside 25x-32x (section 2.2); rho (how alike a prompt's
# responses run) keeps the family's default 0.5, the paper giving none.
RP_PARAMS = ("median=450", f"sigma={MATH_SIGMA}")
RP_MODELS = {"7b": ("qwen2.5-7b", 16, 1, 8192), "14b": ("qwen3-14b", 32, 2, 16384), "32b": ("qwen2.5-32b", 64, 2, 32768)}
RP_LABEL = {"7b": "Qwen2.5-7B/8k, 16 GPUs, rollout TP 1", "14b": "Qwen2.5-14B/16k, 32 GPUs, TP 2",
            "32b": "Qwen2.5-32B/32k, 64 GPUs, TP 2"}
RP_ASSUMED = ("H800 played by the h100 preset (the same chip, less NVLink bandwidth); the lengths of section 2.2 for "
              "every cap; 10 steps (two rounds of 4 short + 1 long) where Figure 9 shows 40; tail-batching's eta 1.25 "
              "(the paper's), long_every 4 (ours)")
DAPO = "traces/synthetic/dapo_like.parquet"
INTERN = "traces/synthetic/intern_s1_mixture.parquet"


def amdahl_why(name: str, also: Callable[[dict], str]) -> Callable[[dict], str]:
    return lambda f: (
        f"The simulated veRL step spends {f['base_rollout_share']:.0%} of its time in rollout and "
        f"{f['other_s']:.0f} s a step in reward, training and weight sync, which {name} leaves as they are: a "
        f"rollout {f['rollout_speedup']:.2f}x faster gives the step {f['speedup']:.2f}x, and no rollout speedup "
        f"could give more than {f['amdahl']:.2f}x; {also(f)}.")


def share_why(f: dict) -> str:
    return (f"the simulated veRL step is {f['base_rollout_share']:.0%} rollout ({f['rollout_s']:.0f} s a step against "
            f"{f['reward_s']:.1f} s of reward and {f['train_s']:.1f} s of training) where RollPacker's Table 1 "
            f"measured 72% rollout, 5% reward and 23% training on veRL, so a faster rollout moves the simulated step "
            f"more: the simulated rollout gain, {f['rollout_speedup']:.2f}x, would give {at_share(f, 0.72):.2f}x at "
            f"a 72% share")


def rollpacker_rows(runs: Runs) -> list[Row]:
    rows, facts = [], {}
    for size, (model, gpus, tp, cap) in RP_MODELS.items():
        trace, synth = runs.synth(f"rollpacker_{size}", "lognormal", steps=10, prompts=128, group=8, max_len=cap,
                                  params=RP_PARAMS)
        got, cmd = runs.compare(f"rollpacker_{size}", trace, "verl,tail-batching", model=model, gpus=gpus, tp=tp,
                                steps="10")
        f = measured(got["verl"], got["tail-batching"])
        facts[size] = (f, [synth, cmd], got)
        stand_in = "; Qwen2.5-14B played by the qwen3-14b preset (14.8B against 14.7B parameters)" if size == "14b" else ""
        rows.append(Row(
            "RollPacker (NSDI '26), Table 2, \"+ Tail Batching\"",
            f"{RP_LABEL[size]}, 128 prompts x 8, eta 1.25; assumed: {RP_ASSUMED}{stand_in}",
            "end-to-end speedup over veRL, tail batching alone", ROLLPACKER_TAIL[size], "held out",
            f["speedup"], [synth, cmd], f, why=lambda f: (
                f"Tail batching cuts the simulated rollout {f['rollout_speedup']:.2f}x (veRL's engines idle "
                f"{f['base_idle']:.0%} of the time, tail batching's {f['pol_idle']:.0%}, with {f['dropped']:.0%} of "
                f"the responses generated aborted), and {share_why(f)}; the rest is the drawn lengths, the paper's "
                f"own per step being in plots (Figure 10a), not in numbers")))
    for size in RP_MODELS:
        f, how, _ = facts[size]
        rows.append(Row(
            "RollPacker (NSDI '26), Table 2, \"+ Trainer\" (the whole system)",
            f"as the row above ({RP_LABEL[size]}); the simulator plays tail batching alone: it has no reward "
            "scheduler, parallelism planner or stream trainer", "end-to-end speedup over veRL",
            ROLLPACKER_WHOLE[size], "held out", f["speedup"], how, f,
            why=amdahl_why("tail batching", lambda f: "RollPacker's reward scheduler and stream trainer overlap "
                           "and shorten those parts, which the simulator does not model")))
    f, how, got = facts["14b"]
    rows.append(Row(
        "RollPacker (NSDI '26), Table 1, Math",
        "veRL, GRPO, Qwen2.5-14B/16k, batch 128 x 8, 32 H800 (section 2.2); the simulated run of the \"+ Tail "
        "Batching\" 14B row, its verl half", "veRL's rollout share of a step", ROLLPACKER_ROLLOUT_SHARE, "held out",
        got["verl"]["rollout_share"], how, f,
        why=lambda f: (f"The simulated veRL step spends {f['rollout_s']:.0f} s in rollout, {f['reward_s']:.1f} s in "
                       f"reward and {f['train_s']:.1f} s in training (log-probs and the update) where Table 1 measured "
                       f"5% reward and 23% training: the simulator's reward and update cost less, against its "
                       f"rollout, than veRL's on this setup, and no one utilisation of the update puts this share "
                       f"and a long-response one at their figures (docs/investigations/update_phase.md)")))
    trace, synth = runs.synth("rollpacker_14b_512", "lognormal", steps=10, prompts=512, group=8, max_len=16384,
                              params=RP_PARAMS)
    got, cmd = runs.compare("rollpacker_14b_512", trace, "verl,tail-batching", model="qwen3-14b", gpus=128, tp=2,
                            steps="10")
    f = measured(got["verl"], got["tail-batching"])
    rows.append(Row(
        "RollPacker (NSDI '26), section 6.7, Figure 14",
        f"Qwen2.5-14B/16k, batch 512 prompts x 8 on 128 GPUs; samples a second over 20 steps; assumed: {RP_ASSUMED}; "
        "qwen3-14b for Qwen2.5-14B", "throughput over veRL (the whole system)", ROLLPACKER_SCALE, "held out",
        f["speedup"], [synth, cmd], f,
        why=amdahl_why("tail batching", lambda f: "the paper's figure is the whole system's, with its reward "
                       "scheduler and stream trainer")))
    return rows


def speco_rows(runs: Runs) -> list[Row]:
    got, cmd = runs.compare("speco", DAPO, "verl,cotrain", model="qwen3-8b", gpus=8, tp=1, steps="10")
    f = measured(got["verl"], got["cotrain"])
    setup = ("Qwen3-8B, EAGLE3 drafter co-trained in the RL loop, vLLM-Ascend on NPUs, 100 steps; the README gives "
             "no cluster, batch or lengths: assumed 8 H100 (h100 preset for the NPU), TP 1, the shipped DAPO-like "
             "trace, its first 10 steps")
    return [Row("verl-SpeCo README, \"Performance Preview\"", setup, "rollout speedup over the baseline, co-trained "
                "drafter", SPECO_ROLLOUT, "held out", f["rollout_speedup"], [cmd], f,
                why=lambda f: (f"The simulated co-trained drafter, back at its best quality every step, speculates "
                               f"in {f['sd_share']:.0%} of the engines' time at {f['accepted']:.2f} tokens a verify "
                               f"(the acceptance model fitted to TLT's Qwen2.5-32B drafter, 8-deep trees) on an "
                               f"H100 roofline, and cuts the simulated rollout from {f['rollout_s']:.1f} s to "
                               f"{f['pol_rollout_s']:.1f} s a step; the README's run is on NPUs, which have no "
                               f"preset, and gives its acceptance length in a plot only")),
            Row("verl-SpeCo README, \"Performance Preview\"", "as the row above",
                "end-to-end speedup over the baseline", SPECO_E2E, "held out", f["speedup"], [cmd], f,
                why=lambda f: (f"The rollout is {f['rollout_speedup']:.2f}x faster in the simulation (the row "
                               f"above), and the drafter's training added to the update phase costs less than "
                               f"the rollout saves: veRL's simulated step is {f['base_step_s']:.1f} s, "
                               f"co-training's {f['pol_step_s']:.1f} s")) ]


def other_rows(runs: Runs) -> list[Row]:
    rows = []
    small = "assumed: Qwen2.5-7B on 8 H100, TP 1, the shipped DAPO-like trace (96 prompts x 8, cap 8k), its first 10 steps"
    got, cmd = runs.compare("april", DAPO, "verl,partial", model="qwen2.5-7b", gpus=8, tp=1, steps="10")
    f = measured(got["verl"], got["partial"])
    f["throughput"] = rollout_tokens_per_s(got["partial"]) / rollout_tokens_per_s(got["verl"])
    rows.append(Row("APRIL (arXiv 2509.18521), abstract",
                    f"GRPO, DAPO and GSPO on math; the abstract gives no model, cluster or lengths: {small}; "
                    "partial's ratio 2 (ours)", "rollout throughput over the baseline (average)",
                    APRIL_THROUGHPUT, "held out", f["throughput"], [cmd], f,
                    why=lambda f: (f"The simulated veRL step waits {f['rollout_s']:.1f} s for its rollout, most of it "
                                   f"for the trace's longest responses (tail share {f['base_tail_share']:.0%}, "
                                   f"engines idle {f['base_idle']:.0%} of the time); partial at ratio 2 ends each "
                                   f"step after {f['pol_rollout_s']:.1f} s, once the groups it needs have finished, "
                                   f"and carries the long ones on ({f['resumed']:.0%} of the responses it trains "
                                   f"were resumed), so on this trace and cluster the gain is far larger than "
                                   f"APRIL's average; the ratio APRIL ran and its lengths are not in the abstract")))
    got, cmd = runs.compare("das", DAPO, "verl,das", model="qwen2.5-7b", gpus=8, tp=1, steps="10")
    f = measured(got["verl"], got["das"])
    rows.append(Row("DAS (arXiv 2511.13841v1), abstract",
                    f"math and code reasoning; {small}", "rollout speedup (rollout time \"up to 50%\" less)",
                    DAS_ROLLOUT, "held out", f["rollout_speedup"], [cmd], f,
                    why=lambda f: (f"Simulated history drafting speculates in {f['sd_share']:.0%} of the engines' "
                                   f"time at {f['accepted']:.2f} tokens a verify, switched on by TLT's rule (a "
                                   f"running batch of 32 or fewer), and the simulator has no counterpart of DAS's "
                                   f"length-aware policy, which gives long trajectories larger draft budgets (its "
                                   f"abstract); the figure is DAS's best case (\"up to\")")))
    long = ("assumed: 64 H100, TP 4, the shipped Intern-S1 mixture trace (512 responses a step, cap 32k), its "
            "first 4 steps")
    got, cmd = runs.compare("tlt", INTERN, "verl,tlt", model="qwen2.5-32b", gpus=64, tp=4, steps="4")
    f = measured(got["verl"], got["tlt"])
    rows.append(Row("TLT (arXiv 2511.16665v1), abstract",
                    f"the abstract gives no setup; Qwen2.5-32B (the model of its micro-benchmarks), {long}",
                    "end-to-end speedup over veRL (\"over 1.7x\")", TLT_SPEEDUP, "held out", f["speedup"], [cmd], f,
                    why=amdahl_why("speculation", lambda f: "the abstract's figure is a lower bound (\"over 1.7x\") over "
                                   "setups it does not give")))
    got, cmd = runs.compare("rhymerl", INTERN, "verl,longest-first+das", model="qwen2.5-32b", gpus=64, tp=4,
                            steps="4")
    f = measured(got["verl"], got["longest-first+das"])
    rows.append(Row("RhymeRL (arXiv 2508.18588v1), abstract",
                    f"production environment, dozens to thousands of GPUs; HistoSpec (drafts from earlier epochs' "
                    f"responses) and HistoPipe (length-aware placement); the abstract gives no setup: Qwen2.5-32B, "
                    f"{long}; played by longest-first + das", "end-to-end improvement over existing systems",
                    RHYMERL_SPEEDUP, "held out", f["speedup"], [cmd], f,
                    why=amdahl_why("longest-first + das", lambda f: (
                        f"history drafting, on only once a batch is down to 32, speculates in {f['sd_share']:.0%} of "
                        f"the engines' time at {f['accepted']:.2f} tokens a verify"))))
    prompts, group, gpus, tp = 256, 16, 32, 2
    hs_trace, hs_synth = runs.synth("histospec", "dapo", steps=2, prompts=prompts, group=group, max_len=8192)
    got, cmd = runs.compare("histospec", hs_trace, "verl,das", model="qwen3-14b", gpus=gpus, tp=tp, steps="2",
                            knobs=("history_repeats=true", "sd=always"))
    f = measured(got["verl"], got["das"])
    f["best_step"] = max(step_column("histospec", "verl", "rollout_s") / step_column("histospec", "das", "rollout_s"))
    f["per_engine"] = prompts * group // (gpus // tp)
    rows.append(Row("RhymeRL's HistoSpec recipe for verl (github.com/He-Jingkai/verl), its README",
                    "Qwen3-14B-Base (the qwen3-14b preset), DAPO, temperature 1, responses up to 8k, 32 H100, 256 "
                    "prompts x 16; assumed: rollout TP 2 (not given), the dapo family's lengths (DAPO text rollouts) "
                    "capped at 8k, two steps as two epochs of the same prompts (history_repeats: the second drafts "
                    "from the first's responses too), speculation at every batch size (sd=always: the recipe has no "
                    "switch); the better of its two steps",
                    "rollout speedup of history drafting (\"up to 2.1x\" over models and phases)",
                    HISTOSPEC_ROLLOUT, "held out", f["best_step"], [hs_synth, cmd], f,
                    why=lambda f: (f"History drafting accepts {f['accepted']:.2f} tokens a verify here (the model "
                                   f"fitted to Seer's grouped suffix trees; a group of 16 in flight already brings a "
                                   f"response near H_MAX, the most history the model credits, so the first epoch's "
                                   f"responses add little) and speculates in {f['sd_share']:.0%} of the engines' "
                                   f"time, from {f['per_engine']} rows an engine down, which gives the rollout "
                                   f"{f['best_step']:.2f}x at best; the figure is the recipe's best case (\"up to\") "
                                   f"over models and phases")))
    return rows


def step_column(name: str, policy: str, column: str):
    """One column of a run's steps.parquet, step by step."""
    import pandas as pd

    return pd.read_parquet(ROOT / OUT / name / policy / "steps.parquet")[column].to_numpy()


def steady_step_s(name: str, policy: str, summary: dict) -> float:
    """The mean step of a run's second half: a run of thousands of steps pays an asynchronous pipeline's filling
    once, where the makespan of a short one pays it in full."""
    t = step_column(name, policy, "t_start")
    k = len(t) // 2
    return (summary["makespan_s"] - t[k]) / (len(t) - k)


def areal_rows(runs: Runs) -> list[Row]:
    """AReaL's asynchronous against its synchronous runs on the same split of the same GPUs (its blog's Table 2)."""
    import pandas as pd

    trace, synth = runs.synth("areal", "mixture", steps=20, prompts=512, group=16, max_len=27648)
    lengths = pd.read_parquet(ROOT / trace)["response_len"]
    rows = []
    for size, (sync_h, async_h, gpus) in AREAL_HOURS.items():
        model = f"deepseek-r1-distill-qwen-{size}"
        common = dict(model=model, gpus=gpus, tp=1, steps="20", memory=0.8)
        got, cmd = runs.compare(f"areal_{size}", trace, "async", **common)
        base, base_cmd = runs.compare(f"areal_{size}_sync", trace, "async", knobs=("max_staleness=0",), **common)
        steady = steady_step_s(f"areal_{size}", "async", got["async"])
        base_steady = steady_step_s(f"areal_{size}_sync", "async", base["async"])
        f = {"steady": steady, "base_steady": base_steady, "whole": base["async"]["makespan_s"] / got["async"]["makespan_s"],
             "pub_sync_s": 3600 * sync_h / AREAL_PPO_STEPS, "pub_async_s": 3600 * async_h / AREAL_PPO_STEPS}
        split = ("the 128-GPU config's even split" if gpus == 128 else
                 f"{gpus // 2} GPUs each side, the 128-GPU config's even split assumed at {gpus}")
        setup = (f"DeepSeek-R1-Distill-Qwen-{size.upper()}, math (AReaL-boba-106k), {gpus // 8} nodes of 8 H800 (the h100 "
                 f"preset), SGLang at TP 1 and memory 0.8, {split}, 512 prompts x 16 a step, cap 27,648 (its v0.2 "
                 f"recipe and configs); synchronous is the same split at staleness 0 (async's max_staleness=0), "
                 f"asynchronous at staleness 4; assumed: the Intern-S1 mixture's lengths (production math rollouts: "
                 f"mean {lengths.mean():,.0f} tokens, {(lengths >= 27648).mean():.1%} at the cap, where AReaL's "
                 f"truncation was below 5%), 20 steps where AReaL ran {AREAL_PPO_STEPS:,}, each side's steady step "
                 f"(the mean of its run's second half; over the whole 20 steps {f['whole']:.2f}x). The simulated "
                 f"steps, {base_steady:.0f} s and {steady:.0f} s, are the lengths' as much as the cost model's: the "
                 f"published hours give {f['pub_sync_s']:.0f} s and {f['pub_async_s']:.0f} s if a PPO step is one "
                 f"step of 512 prompts")
        rows.append(Row("AReaL v0.3 blog (github.com/inclusionAI/AReaL), Table 2", setup,
                        f"training speedup, asynchronous over synchronous AReaL ({sync_h} h against {async_h} h)",
                        sync_h / async_h, "held out", base_steady / steady, [synth, cmd, base_cmd], f,
                        why=lambda f: (f"The simulated steady steps are {f['base_steady']:.0f} s synchronous and "
                                       f"{f['steady']:.0f} s asynchronous, against {f['pub_sync_s']:.0f} s and "
                                       f"{f['pub_async_s']:.0f} s in AReaL's hours: the assumed lengths set how long "
                                       f"a rollout runs against the update")))
    return rows


def seer_rows(runs: Runs) -> list[Row]:
    """Seer's Qwen2-VL-72B task (its Table 3) against veRL: veRL's rollout time, longest-first with every length
    known, and the whole system played by that placement with history drafting from the group; Figure 11's
    acceptance, which the history model is fitted to, and its grouped speculation alone."""
    from tltsim.drafter import history_quality as hq
    from tltsim.trace.synth import MATH_SIGMA, lognormal_median

    task = next(f for f in hq.SEER_TAU if f.workload == "Qwen2-VL-72B")
    median = lognormal_median(task.mean, task.cap, MATH_SIGMA)  # hq.seer_trace's draw, shown as its command
    trace, synth = runs.synth("seer", "lognormal", steps=SEER_ITERATIONS, prompts=task.requests // task.group,
                              group=task.group, max_len=task.cap, params=(f"median={median}", f"sigma={MATH_SIGMA}"))
    gpus, tp = 128, 8
    common = dict(model="qwen2-72b", gpus=gpus, tp=tp, steps=str(SEER_ITERATIONS))
    got, cmd = runs.compare("seer", trace, "verl,longest-first,longest-first+das,partial",
                            knobs=("predictor=oracle",), **common)
    verl = got["verl"]
    lfs, whole = measured(verl, got["longest-first"]), measured(verl, got["longest-first+das"])
    for f, name in ((lfs, "longest-first"), (whole, "longest-first+das")):
        f["throughput"] = rollout_tokens_per_s(got[name]) / rollout_tokens_per_s(verl)
    partial = measured(verl, got["partial"])
    partial.update(throughput=rollout_tokens_per_s(got["partial"]) / rollout_tokens_per_s(verl),
                   whole=whole["throughput"])
    partial["over_partial"] = partial["whole"] / partial["throughput"]
    setup = (f"Qwen2-VL-72B (its language model, the qwen2-72b preset; the vision encoder left out), {gpus} H800 (the "
             f"h100 preset) at TP {tp}, {task.requests:,} requests an iteration in groups of {task.group}, cap "
             f"{task.cap:,}, mean {task.mean:,} tokens (Table 3), the mean of {SEER_ITERATIONS} iterations as Seer "
             f"takes it; assumed: lognormal lengths of the spread of math rollouts (sigma {MATH_SIGMA}), the median "
             f"({median:,}) set to Table 3's mean")
    sd, sd_cmd = runs.compare("seer_sd", trace, "verl,das", knobs=("sd=learned",), **common)
    alone = measured(sd["verl"], sd["das"])
    alone.update(throughput=rollout_tokens_per_s(sd["das"]) / rollout_tokens_per_s(sd["verl"]),
                 per_engine=task.requests // (gpus // tp))
    taus = [Row("Seer (arXiv 2511.14617v3), Figure 11",
                f"{f.workload} (Table 3: {f.requests:,} requests an iteration, cap {f.cap:,}, mean {f.mean:,} tokens), "
                f"lengths drawn lognormal (sigma {MATH_SIGMA}); " +
                (f"its grouped suffix trees, groups of {f.group} in flight together, a chain of up to {f.chain}"
                 if f.grouped else f"SuffixDecoding without group context, a chain of up to {f.chain}"),
                "mean acceptance length (tokens a verify) of a rollout iteration", f.tau, "fitted",
                hq.seer_tau(hq.HistoryQuality(), f),
                [f"seer_tau(HistoryQuality(), SEER_TAU[{i}])  # tltsim.drafter.history_quality"],
                fitted="the history model's Q_PROMPT and PER_SIBLING: tltsim/drafter/history_quality.py")
            for i, f in enumerate(hq.SEER_TAU)]
    return taus + [
        Row("Seer (arXiv 2511.14617v3), Figure 8", setup, "veRL's rollout of an iteration, s", SEER_VERL_ROLLOUT_S,
            "held out", lfs["rollout_s"], [synth, cmd], lfs, policy="verl",
            why=lambda f: (f"Seer's veRL rollout takes {SEER_VERL_ROLLOUT_S / f['rollout_s']:.1f}x the simulated one, "
                           f"whose engines idle {f['base_idle']:.0%} of the run where Seer's idle {SEER_VERL_IDLE:.0%} "
                           f"of the rollout. The simulator admits a request only where the cache holds its whole "
                           f"footprint, so it never preempts, where Seer counted {SEER_VERL_PREEMPTIONS:,} "
                           f"preemptions an iteration; "
                           f"but played with vLLM's admission and recompute preemption the same engines finish "
                           f"sooner, and neither a heavier tail nor H800's NVLink closes the gap "
                           f"(docs/investigations/preemption.md)")),
        Row("Seer (arXiv 2511.14617v3), Table 1", "as the row above; the table does not name the system it timed: "
            "veRL, Seer's baseline, assumed", "rollout's share of an iteration", SEER_PHASES["rollout"], "held out",
            lfs["base_rollout_share"], [synth, cmd], lfs, policy="verl",
            why=lambda f: (f"The simulated iteration spends {f['rollout_s']:.0f} s in rollout, {f['reward_s']:.0f} s "
                           f"in log-probs and reward and {f['train_s']:.0f} s in training")),
        Row("Seer (arXiv 2511.14617v3), Table 1", "as the row above", "the weight update's share of an iteration",
            SEER_PHASES["weight update"], "held out", lfs["sync_share"], [synth, cmd], lfs, policy="verl",
            why=lambda f: (f"The simulated weight update takes {f['sync_s']:.1f} s an iteration: the model's bytes over "
                           f"the interconnect and a fixed second (the cost model's sync_fixed_s), where Seer's "
                           f"{SEER_PHASES['weight update']:.0%} of an iteration of about "
                           f"{SEER_VERL_ROLLOUT_S / SEER_PHASES['rollout']:,.0f} s is about "
                           f"{SEER_VERL_ROLLOUT_S / SEER_PHASES['rollout'] * SEER_PHASES['weight update']:,.0f} s; "
                           f"the simulator has no model of a checkpoint's conversion or reload")),
        Row("Seer (arXiv 2511.14617v3), Figure 10, \"Oracle\"", "as the row above; every output length known in "
            "advance and the longest first: longest-first with its oracle predictor (on Seer's divided rollout, "
            "which the simulator has no counterpart of)", "rollout throughput over veRL", SEER_ORACLE_LFS,
            "held out", lfs["throughput"], [synth, cmd], lfs, policy="longest-first"),
        Row("Seer (arXiv 2511.14617v3), Table 4, \"+ Grouped SD\" (the whole system)", f"as the row above; played by "
            f"longest-first with its oracle predictor (Seer's context-aware scheduling reaches {SEER_SCHEDULED}x "
            f"where the oracle reaches {SEER_ORACLE_LFS}x, Figure 10) + das (drafts from the group's responses)",
            "rollout throughput over veRL", SEER_WHOLE, "held out", whole["throughput"], [synth, cmd], whole,
            policy="longest-first+das",
            why=lambda f: (f"With every length known the placement leaves veRL's engines' idle share of "
                           f"{f['base_idle']:.0%} at {f['pol_idle']:.1%}, so an engine's batch reaches das's "
                           f"switch (32 running) only in its last moments and history drafting speculates in "
                           f"{f['sd_share']:.1%} of the engines' time; Seer's grouped speculation decides by a "
                           f"profiled cost model at every batch size (its Algorithm 1) and adds "
                           f"{SEER_WHOLE / SEER_SCHEDULED - 1:.0%} to its scheduling (Table 4)")),
        Row("Seer (arXiv 2511.14617v3), section 4.4.3, Figure 12a", "as the row above; Partial Rollout as APRIL "
            "runs it (twice the requests issued, the rest resumed next iteration): partial at its ratio 2",
            "Seer's rollout throughput over Partial Rollout's", SEER_OVER_PARTIAL, "held out",
            partial["over_partial"], [synth, cmd], partial, policy="partial",
            why=lambda f: (f"Simulated partial rollout runs {f['throughput']:.2f}x veRL's throughput, where Seer's own "
                           f"figures put Partial Rollout at {SEER_WHOLE / SEER_OVER_PARTIAL:.2f}x (its "
                           f"{SEER_WHOLE}x over veRL, Table 4, over its {SEER_OVER_PARTIAL}x over Partial Rollout): "
                           f"the miss is mostly the row above's, the simulated Seer at {f['whole']:.2f}x")),
        Row("Seer (arXiv 2511.14617v3), Figure 11", "Table 3's task as in the Figure 8 row above; Seer's grouped "
            "speculation alone on veRL, played by das with its switch learned per batch size from the cost model "
            "(sd=learned: Seer decides a draft length per batch size by a profiled cost model, its Algorithm 1)", "rollout throughput over veRL",
            SEER_SD_THROUGHPUT, "held out", alone["throughput"], [synth, sd_cmd], alone,
            why=lambda f: (f"History drafting accepts {f['accepted']:.2f} tokens a verify (the history model is "
                           f"fitted to Seer's figures, this workload's among them) but speculates in only "
                           f"{f['sd_share']:.0%} of the engines' time, where the switch learned from the cost model "
                           f"finds a verify pays at {f['per_engine']:,} requests an engine only once few are left")),
    ]


def nemo_rows(runs: Runs) -> list[Row]:
    """NeMo-RL's EAGLE-3 speculation at every batch size on GB200s: the drafter set to accept the published tokens a
    verify on its chain of 3 (an input of the setup, as a row's model or GPU is), the rest the simulator's."""
    from scipy.optimize import brentq

    from tltsim.control import Strategy
    from tltsim.cost import CostParams, Roofline
    from tltsim.drafter.acceptance import AcceptanceModel
    from tltsim.drafter.methods import METHODS
    from tltsim.hardware import load_gpu, load_model

    chain = Strategy(3, 1, 3)
    q = round(brentq(lambda q: AcceptanceModel().mean(chain, q) - NEMO_ACCEPTED, 0.01, 0.999), 5)
    knobs = ("drafter=eagle3", "training=frozen", f"arms={chain}", f"q_start={q}", f"q_max={q}", "guard=false")
    got, cmd = runs.compare("nemo_rl", DAPO, "verl,sd-always", model="qwen3-8b", gpus=32, tp=1, steps="10",
                            gpu="b200", knobs=knobs)
    f = measured(got["verl"], got["sd-always"])
    cost, per_engine = Roofline(load_model("qwen3-8b"), load_gpu("b200"), 1, CostParams()), 24  # 768 rows / 32
    f.update(draft_ms=1e3 * chain.depth * float(cost.draft_time(1, 1, METHODS["eagle3"].vocab)),
             decode_ms=1e3 * float(cost.decode_time(1, 2000)),
             overhead_ms=1e3 * CostParams().draft_overhead_s, per_engine=per_engine)
    setup = ("Qwen3-8B, GRPO, synchronous, 32 GB200 (the b200 preset), vLLM, an EAGLE-3 drafter drafting 3 tokens at "
             f"every batch size (sd-always without its guard, arms {chain}), {NEMO_ACCEPTED} tokens a verify (RL-Zero; "
             f"the drafter's quality {q} accepts that on a chain of 3); the setup from summaries of the paper; "
             "assumed: TP 1 (32 engines), the shipped DAPO-like trace, its first 10 steps")
    return [Row("NeMo-RL speculative rollouts (arXiv 2604.26779v1), abstract", setup,
                "rollout speedup of speculative decoding at 8B", NEMO_ROLLOUT, "held out", f["rollout_speedup"],
                [cmd], f,
                why=lambda f: (f"At batch 1 the simulated drafter's 3 forwards take {f['draft_ms']:.1f} ms against "
                               f"{f['decode_ms']:.1f} ms for the target's decode, each forward "
                               f"{f['overhead_ms']:.2f} ms of fixed overhead (draft_overhead_s, fitted to TLT's "
                               f"8-wide trees of depth 12 on H100s) and the read of its head of {METHODS['eagle3'].vocab:,} "
                               f"entries; so {f['accepted']:.2f} tokens a "
                               f"verify give the simulated rollout {f['rollout_speedup']:.2f}x, speculating in "
                               f"{f['sd_share']:.0%} of the engines' time at {f['per_engine']} rows an engine")),
            Row("NeMo-RL speculative rollouts (arXiv 2604.26779v1), summaries", "as the row above, its baseline",
                "generation's share of a synchronous step (the middle of 65-72%)", sum(NEMO_GEN_SHARE) / 2,
                "held out", f["base_rollout_share"], [cmd], f,
                why=lambda f: (f"The simulated step spends {f['rollout_s']:.1f} s in rollout against "
                               f"{f['reward_s']:.1f} s of reward (log-probs) and {f['train_s']:.1f} s of training: the "
                               f"simulator's update costs less, against its rollout, than NeMo-RL's on this setup, "
                               f"as against veRL's in RollPacker's Table 1"))]


def micro_rows() -> list[Row]:
    """TLT's micro-benchmarks, through the cost and acceptance models' own API (what bench_calibration prints)."""
    from bench_calibration import CTX, sd_speedup
    from tltsim.control import DEFAULT_ARMS, Strategy
    from tltsim.cost import CostParams, Roofline
    from tltsim.drafter.acceptance import Q_TRAINED, AcceptanceModel
    from tltsim.hardware import load_gpu, load_model

    rows = [Row("TLT micro-benchmark (docs/design.md#accepted-length)",
                "Qwen2.5-32B, TP 4, H100, batch 1, strategy 8_8_16 (top-k 8 assumed by the code)",
                "accepted tokens per verify", TLT_ACCEPTED_8_8_16, "fitted",
                AcceptanceModel().mean(Strategy.parse("8_8_16"), Q_TRAINED),
                ['AcceptanceModel().mean(Strategy.parse("8_8_16"), Q_TRAINED)  # tltsim.drafter.acceptance'],
                fitted="Q_TRAINED, the well-trained drafter's quality (tltsim/drafter/acceptance.py)")]
    cost = Roofline(load_model("qwen2.5-32b"), load_gpu("h100"), 4, CostParams())
    for (v, b), pub in TLT_SD_SPEEDUP.items():
        rows.append(Row("TLT micro-benchmark (docs/design.md#sd-speedup-grid)",
                        f"Qwen2.5-32B, TP 4, H100, depth 12, top-k 8, {v} verify tokens, batch {b}; {CTX} tokens of "
                        "context a request assumed", "speculative over plain decoding", pub, "fitted",
                        sd_speedup(cost, Strategy(12, 8, v), b, CTX),
                        [f"sd_speedup(Roofline(load_model('qwen2.5-32b'), load_gpu('h100'), 4, CostParams()), "
                         f"Strategy(12, 8, {v}), {b}, {CTX})  # benchmarks/bench_calibration.py"],
                        fitted="eta_flops, draft_overhead_s, overlap (tltsim/cost/roofline.py), least squares on the grid"))
    c7 = Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), 1)
    plain = 1 / float(c7.decode_time(1, 1000))
    best = max(DEFAULT_ARMS, key=lambda s: sd_speedup(c7, s, 1, 1000))
    rows.append(Row("TLT micro-benchmark (docs/design.md#single-stream-decode)",
                    "Qwen2.5-7B, one H100, batch 1 (1k tokens of context assumed)", "tokens/s, plain decoding",
                    TLT_DECODE_H100[0], "fitted", plain,
                    ["1 / Roofline(load_model('qwen2.5-7b'), load_gpu('h100'), 1).decode_time(1, 1000)"],
                    fitted="the roofline's bandwidth efficiency and per-iteration overhead (tltsim/cost/roofline.py)"))
    rows.append(Row("TLT micro-benchmark (docs/design.md#single-stream-decode)",
                    f"as the row above, with speculation (the best default arm at batch 1: {best})",
                    "tokens/s, speculative decoding", TLT_DECODE_H100[1], "held out",
                    plain * sd_speedup(c7, best, 1, 1000),
                    ["plain * max(sd_speedup(cost, arm, 1, 1000) for arm in DEFAULT_ARMS)  # benchmarks/bench_calibration.py"]))
    return rows


# --- the page ------------------------------------------------------------------------------------------------
def fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"


def page(rows: list[Row]) -> str:
    errs = [(r.group, error(r.predicted, r.published)) for r in rows]
    head = summary(errs)
    sources = {r.source.split(" (")[0].split(",")[0] for r in rows}
    beyond = [r for r in rows if not r.source.startswith("TLT micro-benchmark")]
    beyond_sources = {r.source.split(" (")[0].split(",")[0] for r in beyond}
    lines = [
        "# Fidelity: the simulator against published figures",
        "",
        "Published GPU figures of reasoning-RL rollout systems, each beside the simulator's prediction for the "
        "setup it was measured on, as near as the simulator's flags get (`python benchmarks/bench_fidelity.py` "
        "writes this page; its recorded output is benchmarks/results/bench_fidelity.txt). A **fitted** row's figure "
        "set a parameter of the simulator (the row says which); a **held out** row's set nothing. Error: prediction "
        "over published, minus 1. Where a source leaves part of its setup out, the row says what was assumed; an "
        "abstract's figure is usually its best case or its range over setups it does not give, so such a row "
        "compares the simulator's answer for one assumed setup with that figure.",
        "",
        f"{len(rows)} rows from {len(sources)} sources ({len(beyond)} from {len(beyond_sources)} sources beyond "
        "TLT's micro-benchmarks). " + "; ".join(
            f"**{g}**: {n} rows, median |error| {m:.1%}, worst {w:.1%}" for g, (n, m, w) in head.items()) + ".",
        "",
        "| # | source | setup (and what was assumed) | figure | group | published | predicted | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, (r, (_, e)) in enumerate(zip(rows, errs), 1):
        group = r.group + (f" ({r.fitted})" if r.fitted else "")
        lines.append(f"| {i} | {r.source} | {r.setup} | {r.figure} | {group} | {fmt(r.published)} | "
                     f"{fmt(r.predicted)} | {e:+.1%} |")
    lines += ["", "## How each prediction is made", ""]
    for i, r in enumerate(rows, 1):
        lines.append(f"{i}. " + "<br>".join(f"`{h}`" for h in r.how))
    misses = [(i, r, e) for i, (r, (_, e)) in enumerate(zip(rows, errs), 1) if abs(e) > 0.20]
    lines += ["", "## Rows over 20%, and why", ""]
    for i, r, e in misses:
        text = (r.why(r.facts) if r.why else "") or "not explained by a measured figure of its runs"
        lines.append(f"- **Row {i}** ({e:+.0%}): {text.rstrip('.')}.")
    if not misses:
        lines.append("None.")
    lines.append("")
    return "\n".join(lines)


def record(rows: list[Row]):
    """The rows the report reads (tltsim.analysis.validation.published): each row that ran `tltsim compare`, with
    the model, GPU and policy of its command (the last it compares, or the row's own `policy`)."""
    import pandas as pd

    out = []
    for i, r in enumerate(rows, 1):
        command = next((h for h in r.how if h.startswith("python -m tltsim compare ")), None)
        if command is None:
            continue
        words = shlex.split(command)
        flag = lambda name: words[words.index(name) + 1]  # noqa: E731
        out.append({"row": i, "source": r.source, "group": r.group, "model": flag("--model"), "gpu": flag("--gpu"),
                    "policy": r.policy or flag("--policies").split(",")[-1], "published": r.published,
                    "predicted": round(r.predicted, 6), "error": round(error(r.predicted, r.published), 6)})
    return pd.DataFrame(out)


def main() -> None:
    from tltsim.core.io import atomic_path

    runs = Runs()
    rows = (rollpacker_rows(runs) + speco_rows(runs) + other_rows(runs) + areal_rows(runs) + seer_rows(runs)
            + nemo_rows(runs) + micro_rows())
    text = page(rows)
    with atomic_path(DOC) as tmp:
        tmp.write_text(text)
    with atomic_path(RECORD) as tmp:
        record(rows).to_csv(tmp, index=False)
    print(text)
    print(f"(the commands took {runs.seconds:.0f} s of wall time, one after the other; docs/fidelity.md and "
          f"{RECORD.relative_to(ROOT)} written)")


if __name__ == "__main__":
    main()
