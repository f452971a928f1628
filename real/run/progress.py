"""What `tltsim real run` says on stderr as it goes (rank 0): a line per step, or a progress bar on a terminal.

    step 2/3  total 14.2 s  rollout 9.8 s  mean length 131  reward 0.41  sd share 0.62  accepted 2.35

`sd share` (the engines' time in speculative decoding) and `accepted` (mean accepted length per speculative
call) are shown only for a step that speculated.
"""
from __future__ import annotations

import math
import sys

from tqdm import tqdm


def describe(row: dict) -> str:
    """The figures of a step's record row (real.run.recorder.Recorder.add), in a few words."""
    parts = [f"total {row['total_s']:.1f} s", f"rollout {row['rollout_s']:.1f} s",
             f"mean length {row['response_tokens'] / max(row['responses'], 1):.0f}",
             f"reward {row['mean_reward']:.2f}"]
    if not math.isnan(row["mean_accepted"]):
        parts += [f"sd share {row['sd_share']:.2f}", f"accepted {row['mean_accepted']:.2f}"]
    return "  ".join(parts)


class StepProgress:
    """Reports steps first..total-1 of a run: a bar if `bar`, else a line each on stderr."""

    def __init__(self, first: int, total: int, bar: bool, desc: str):
        self.total, self.desc = total, desc
        self.bar = tqdm(total=total, initial=first, desc=desc, unit="step", file=sys.stderr) if bar else None

    def note(self, text: str) -> None:
        """A one-off line (the drafter warm-up), above the bar if there is one."""
        (self.bar.write if self.bar else _line)(f"{self.desc}: {text}")

    def step(self, step: int, row: dict) -> None:
        if self.bar is None:
            _line(f"{self.desc}: step {step + 1}/{self.total}  {describe(row)}")
            return
        self.bar.set_postfix_str(describe(row), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
