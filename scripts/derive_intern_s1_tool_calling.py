"""Derive tltsim/trace/data/intern_s1_tool_calling.json, the parameters of `tltsim trace synth agentic`.

    python scripts/derive_intern_s1_tool_calling.py [PolyTrace data directory] [-o FILE]

The directory (default ../shared/data/polytrace beside the repository) holds two files of PolyTrace
(github.com/Zhou-jiecheng/PolyTrace, commit 4246156; "RL in the Wild", arXiv 2509.25279):

- `enhanced_task_distribution_parameters.json`: fits to 241,546 Intern-S1 production tool-calling sessions. Kept:
  `tool_calling_task.call_count_distribution` (sessions per call count k) and, per k, the marginal of
  `sequence_models[k]`'s Gaussian (`mean_vector`, `covariance_matrix`) over its first 2k features
  (input_1..k, output_1..k); the summary features (totals, means, extremes) are dropped.
- `multiturn_workload_sample.jsonl`: 24 trajectories of PolyTrace's Search-R1 multi-turn log. The Intern-S1 data
  has no tool latencies; a lognormal fitted (scipy.stats.lognorm, location 0) to these trajectories' tool calls'
  `latency_s` stands in: its median (the fit's scale) and sigma (its shape).

tests/trace/test_agentic_synth.py checks that the shipped file is this script's output where the directory exists.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "../shared/data/polytrace"
OUT = ROOT / "tltsim" / "trace" / "data" / "intern_s1_tool_calling.json"
FITS = "enhanced_task_distribution_parameters.json"
SAMPLE = "multiturn_workload_sample.jsonl"
SOURCE = {"repository": "github.com/Zhou-jiecheng/PolyTrace", "commit": "4246156",
          "paper": "Zhou et al., RL in the Wild, arXiv 2509.25279"}


def derive(data_dir: Path) -> dict:
    """The shipped parameters from the two PolyTrace files in `data_dir`."""
    fits = json.loads((data_dir / FITS).read_text(encoding="utf-8"))["tool_calling_task"]
    calls = {}
    for k_text, sessions in sorted(fits["call_count_distribution"].items(), key=lambda kv: int(kv[0])):
        k = int(k_text)
        model = fits["sequence_models"][k_text]
        names = [f"input_{i}" for i in range(1, k + 1)] + [f"output_{i}" for i in range(1, k + 1)]
        if model["feature_names"][:2 * k] != names:
            raise SystemExit(f"{FITS}: sequence_models[{k}] does not begin with {names}")
        calls[k_text] = {"sessions": int(sessions), "features": names,
                         "mean": [float(v) for v in model["mean_vector"][:2 * k]],
                         "covariance": [[float(v) for v in row[:2 * k]] for row in model["covariance_matrix"][:2 * k]]}
    latencies = np.array([c["latency_s"] for line in (data_dir / SAMPLE).read_text(encoding="utf-8").splitlines()
                          if line.strip() for c in json.loads(line)["tool_calls"]], dtype=float)
    sigma, _, scale = stats.lognorm.fit(latencies, floc=0)
    return {
        "provenance": {
            **SOURCE,
            "call_counts": f"{FITS} (dataset/workloads/ in the repository): tool_calling_task.call_count_distribution "
                           f"(sessions per call count) and, per call count k, the marginal of sequence_models[k]'s "
                           f"Gaussian (mean_vector, covariance_matrix) over input_1..k and output_1..k; fitted there "
                           f"to {fits['total_sessions']} Intern-S1 production tool-calling sessions",
            "interpretation": "a session with k calls is k model turns: turn i reads input_i new tokens (input_1 the "
                              "prompt, input_i for i > 1 the tool's answer appended before turn i) and generates "
                              "output_i tokens, so k - 1 tool calls lie between the turns",
            "tool_latency_s": f"a lognormal fitted (scipy.stats.lognorm, location 0, maximum likelihood) to the "
                              f"latency_s of the {len(latencies)} tool calls of {SAMPLE} (the first 24 trajectories "
                              f"of step 0 of PolyTrace's Search-R1 multi-turn workload log, "
                              f"search_r1/profile/multiturn_workload_log/0617_0223/multiturn_workload_step_0.jsonl); "
                              f"the Intern-S1 fits have no tool latencies",
            "made_by": "scripts/derive_intern_s1_tool_calling.py",
        },
        "call_counts": calls,
        "tool_latency_s": {"distribution": "lognormal", "median": float(scale), "sigma": float(sigma),
                           "calls": int(len(latencies))},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tltsim.core.io import write_json

    write_json(args.output, derive(Path(args.data_dir)))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
