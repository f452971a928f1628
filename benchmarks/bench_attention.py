"""The engine's attention (real.engine.attention) against transformers' SDPA, side by side in one process.

    python benchmarks/bench_attention.py [--model smollm2-135m] [--batches 1,4,8] [--context 600] [--steps 12]

Two tables. First, one layer's attention of T = 1, 5 and 13 new tokens a row over a cache-like slice (the first S
slots of a buffer with room to grow, as real.engine.kvcache.RaggedCache hands them out), as transformers' SDPA path
computes it (query heads packed for T = 1, keys and values repeated per query head otherwise) and as
real.engine.attention.attend_few does; the largest difference between the two outputs is printed beside. Second, the
engine itself: a batch of rows with prompts of context +- 100 random tokens, in the run's dtype and one torch
thread (a `tltsim real run` worker's), where plain decode steps and speculative iterations (chain 4_1_4, the
sampled-answer long-tail drafter) alternate between the target on SDPA and on real.engine.attention, iteration by
iteration, so that the machine's drift falls on both alike. It prints the median target seconds (the target's
forward and lm_head: what the attention changes) and the whole iteration's, and the verify's cost in decode steps,
which is what speculation's gain is divided by. Only the target's attention is switched: the drafter's layer
attends through real.engine.attention in both columns, and the cache grows as real.engine.kvcache grows it in both.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from real.engine import attention

from real import drafters
from real.engine.generate import Engine
from real.models.targets import load_target
from real.settings import SamplingParams

DRAFTER = "real/assets/smollm2-135m-longtail-sampled-drafter.pt"


class _Heads(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, True


def layer_table(batch: int, slots: int, dtype: torch.dtype, repeats: int = 40) -> list[str]:
    """One layer of SmolLM2-135M's shape (9 query heads, 3 key/value heads, head dim 64), ms per call."""
    heads, kv_heads, dim = 9, 3, 64
    gen = torch.Generator().manual_seed(0)
    buffers = torch.randn(2, batch, kv_heads, slots + slots // 8, dim, generator=gen).to(dtype)
    key, value = buffers[0].narrow(2, 0, slots), buffers[1].narrow(2, 0, slots)
    module = _Heads(heads // kv_heads).eval()
    lines = [f"one layer, batch {batch}, {slots} cached slots, {dtype}: ms a call (median of {repeats})",
             "tokens  sdpa   engine  ratio  max |diff|"]
    for t in (1, 5, 13):
        query = torch.randn(batch, heads, t, dim, generator=gen).to(dtype)
        visible = torch.rand(batch, 1, t, slots, generator=gen) < 0.9
        mask = torch.where(visible, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)
        sdpa = lambda: sdpa_attention_forward(module, query, key, value, mask, scaling=dim ** -0.5)[0]  # noqa: E731
        ours = lambda: attention.attend_few(query, key, value, mask, dim ** -0.5)  # noqa: E731
        times = {f: [] for f in (sdpa, ours)}
        with torch.no_grad():
            diff = (sdpa().float() - ours().float()).abs().max().item()
            for _ in range(repeats):
                for f in times:
                    start = time.perf_counter()
                    f()
                    times[f].append(time.perf_counter() - start)
        a, b = (statistics.median(times[f]) * 1000 for f in (sdpa, ours))
        lines.append(f"{t:6d}  {a:5.2f}  {b:6.2f}  {a / b:5.2f}  {diff:.4f}")
    return lines


def engine_table(target, drafter, batches, context: int, steps: int, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    lines = [f"the engine: context {context} +- 100, medians of {steps} iterations a cell, ms",
             "batch  attention  decode target  decode wall  spec target  spec wall  spec/decode (wall)"]
    implementations = {"sdpa": lambda: target.set_attn_implementation("sdpa"), "engine": lambda: attention.use(target)}
    for batch in batches:
        lens = [context + int(x) for x in torch.randint(-100, 100, (batch,), generator=gen)]
        prompts = [torch.randint(100, target.config.vocab_size - 100, (n,), generator=gen).tolist() for n in lens]
        engine = Engine(target, drafter, sampling=SamplingParams(temperature=0.7), max_new_tokens=20 * steps + 100,
                        eos_token_id=[], seed=seed)
        engine.add(prompts)
        engine.step("spec_decode", "4_1_4")  # the drafter's state built
        cells = {(name, mode): [] for name in implementations for mode in ("decode", "spec_decode")}
        for _ in range(steps):
            for mode in ("decode", "spec_decode"):
                for name, switch in implementations.items():
                    switch()
                    it = engine.step(mode, "4_1_4" if mode == "spec_decode" else None)
                    cells[name, mode].append((it.target_s, it.wall_s))
        for name in implementations:
            med = {mode: [statistics.median(x[i] for x in cells[name, mode]) * 1000 for i in (0, 1)]
                   for mode in ("decode", "spec_decode")}
            (dt, dw), (st, sw) = med["decode"], med["spec_decode"]
            lines.append(f"{batch:5d}  {name:9s}  {dt:13.1f}  {dw:11.1f}  {st:11.1f}  {sw:9.1f}  {sw / dw:18.2f}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"one thread, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("\n".join(layer_table(8, args.context + 100, dtype)))
    target = load_target(args.model, dtype=args.dtype)
    drafter = drafters.load(DRAFTER, target, args.model)
    print("\n".join(engine_table(target, drafter, [int(b) for b in args.batches.split(",")], args.context,
                                 args.steps, args.seed)))


if __name__ == "__main__":
    main()
