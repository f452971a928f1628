"""The MoE cost model against its dense equivalent, batch by batch: how much of the experts a decode iteration reads.

    python benchmarks/bench_moe.py | tee benchmarks/results/bench_moe.txt

For each MoE preset on H100 (TP 1 for Qwen3-30B-A3B, TP 8 for Qwen3-235B-A22B): per batch, the expected
distinct experts hit per layer (tltsim.cost.moe), the weight bytes read as a share of the dense equivalent's
(the same model with all experts in one dense MLP, so every iteration reads all of them), and the decode
iteration time of both at 2,000 context tokens a request (docs/design.md#mixture-of-experts-decode).
"""
from __future__ import annotations

from dataclasses import replace

from tltsim.analysis.report.table import format_table
from tltsim.cost import Roofline
from tltsim.cost.moe import expected_experts
from tltsim.hardware import load_gpu, load_model

CASES = {"qwen3-30b-a3b": 1, "qwen3-235b-a22b": 8}  # preset -> TP
BATCHES = [1, 2, 8, 32, 128, 512]
CTX = 2000  # context tokens per request


def main() -> None:
    for name, tp in CASES.items():
        m = load_model(name)
        dense = replace(m, intermediate=m.experts * m.moe_intermediate, experts=0, experts_per_token=0, moe_intermediate=0)
        moe, eq = Roofline(m, load_gpu("h100"), tp), Roofline(dense, load_gpu("h100"), tp)
        rows = [[b, float(expected_experts(b, m.experts, m.experts_per_token)),
                 float(moe.weights_time(b) / eq.weights_time(b)), 1e3 * float(moe.decode_time(b, b * CTX)),
                 1e3 * float(eq.decode_time(b, b * CTX))] for b in BATCHES]
        print(f"{m.name}, H100, TP {tp}: {m.params / 1e9:.2f}B weights, {m.active_params / 1e9:.2f}B active per token")
        print(format_table(["batch", "experts hit", "weights read", "decode_ms", "dense_equiv_ms"], rows))
        print()


if __name__ == "__main__":
    main()
