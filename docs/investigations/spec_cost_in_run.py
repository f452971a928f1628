"""What a speculative iteration cost inside a recorded run, against plain decoding and against a profile.

    python docs/investigations/spec_cost_in_run.py SPEC_RUN PLAIN_RUN PROFILE.csv [PROFILE.csv ...]

No timing here: it reads the runs' records. Three tables, medians of iteration seconds:
1. per batch and strategy, SPEC_RUN's speculative iteration over PLAIN_RUN's plain one at the same batch (a pair
   on the same answers, made in turn: the same machine speed), beside each profile's ratio at that batch;
2. SPEC_RUN's speculative iterations by what the other worker did meanwhile (decode, spec_decode,
   drafter_train, ...): does training the drafter on the idle worker slow the busy one here;
3. by the tokens the iteration gained per row: does a speculative iteration cost more when it accepts more.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from tltsim.core.records import Result


def other_state(it: pd.DataFrame, timeline: pd.DataFrame) -> pd.Series:
    """Per iteration, the state the other worker was in at the iteration's midpoint."""
    mid = (it["t_end"] - it["wall_s"] / 2).to_numpy()
    out = pd.Series("none", index=it.index, dtype=object)
    for worker in it["worker"].unique():
        mine = (it["worker"] == worker).to_numpy()
        state = np.full(mine.sum(), "none", dtype=object)
        for row in timeline[timeline["worker"] != worker].itertuples():
            state[(mid[mine] >= row.t_start) & (mid[mine] < row.t_end)] = row.state
        out[mine] = state
    return out


def profile_ratios(path: str) -> pd.DataFrame:
    p = pd.read_csv(path)
    plain = p[p["kind"] == "decode"].groupby("batch")["seconds"].median()
    spec = p[p["kind"] == "spec"].assign(strategy=lambda d: d.depth.astype(str) + "_" + d.topk.astype(str) + "_"
                                         + d.verify.astype(str))
    return spec.groupby(["batch", "strategy"])["seconds"].median().unstack().div(plain, axis=0)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec_run, plain_run = Result.load(argv[0]), Result.load(argv[1])
    it = spec_run.iterations
    spec = it[it["mode"] == "spec_decode"].copy()
    plain = plain_run.iterations
    plain_s = plain[plain["mode"] == "decode"].groupby("batch_size")["wall_s"].median()
    ratio = spec.groupby(["batch_size", "strategy"])["wall_s"].agg(["median", "size"]).reset_index()
    ratio["plain_s"] = ratio["batch_size"].map(plain_s)
    ratio["spec/plain"] = ratio["median"] / ratio["plain_s"]
    for path in argv[2:]:
        prof = profile_ratios(path).stack()
        near = lambda b: max([x for x in prof.index.get_level_values(0).unique() if x <= b], default=1)  # noqa: E731
        ratio[f"profile: {path.rsplit('/', 1)[-1]}"] = [prof.get((near(b), s), np.nan)
                                                       for b, s in zip(ratio["batch_size"], ratio["strategy"])]
    print(f"# {argv[0]} speculative iterations over {argv[1]} plain ones, medians (profile: its ratio at the "
          "largest profiled batch at or below)")
    print(ratio.rename(columns={"median": "spec_s", "size": "n"}).round(3).to_string(index=False))
    spec["other"] = other_state(spec, spec_run.timeline)
    by_other = spec.groupby(["batch_size", "other"])["wall_s"].median().unstack()
    print("\n# speculative iteration seconds (median) by what the other worker did meanwhile; iterations per column:")
    print(by_other.round(3).to_string())
    print(spec["other"].value_counts().to_string())
    spec["gained"] = pd.cut(spec["accepted"], [0, 1.25, 1.75, 2.25, 2.75, 99],
                            labels=["<=1.25", "1.25-1.75", "1.75-2.25", "2.25-2.75", ">2.75"])
    by_gain = spec.groupby(["batch_size", "gained"], observed=True)["wall_s"].median().unstack()
    print("\n# speculative iteration seconds (median) by the tokens it gained per row:")
    print(by_gain.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
