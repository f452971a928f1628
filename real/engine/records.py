"""What the rollout engine (real.engine.generate) reports: each iteration, each row that left with its turns, and a
whole generation. Plain records, read by the run's recorder, the profiler and the benchmarks."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from real.engine.tools import ToolResult


@dataclass
class Iteration:
    """What one engine iteration did."""

    index: int  # 0, 1, ... in the engine's life
    mode: str  # "prefill" (rows admitted), "decode" or "spec_decode"
    strategy: str  # depth_topk_verify for "spec_decode", "" otherwise
    batch_size: int  # rows processed
    proposed: int  # draft tokens sent to the target per row (0 unless "spec_decode")
    accepted: list[int]  # per row, draft tokens accepted (a spec row emits accepted + 1 tokens)
    tokens: int  # tokens processed ("prefill") or emitted (decode), over all rows
    wall_s: float  # wall-clock seconds of the iteration
    reprefill: bool = False  # a spec iteration after plain ones (or the first): the drafter built or caught up its state
    catchup_s: float = 0.0  # of wall_s, feeding the drafter what it had not seen (in a reprefill iteration)
    draft_s: float = 0.0  # of wall_s, the drafter's work (catch-up included) in a spec iteration
    target_s: float = 0.0  # of wall_s, the target's forward and lm_head in a decode iteration


@dataclass
class Turn:
    """One turn of a row: from its admission or a tool's answer to its end or its next tool call."""

    context: int  # tokens of the row's context when the turn began (prompt, earlier turns, tools' answers)
    prefilled: int  # of them, tokens the prefill that began the turn fed (the rest but the pending last one were
    # in the row's KV already: context - prefilled - 1 cached tokens)
    start_iteration: int  # index of that prefill's Iteration
    generated: int = 0  # tokens the model generated in the turn
    end_iteration: int = -1  # index of the Iteration that emitted its last token
    tool: ToolResult | None = None  # the tool call that ended the turn (its code, answer and latency), if any
    tool_tokens: int = 0  # tokens the tool's answer appended

    @property
    def cached(self) -> int:
        return self.context - self.prefilled - 1


@dataclass
class Finished:
    """A row that left the batch."""

    request_id: int
    prompt: list[int]
    tokens: list[int]  # generated ids, up to and including EOS (with tools: the tools' answers between the turns)
    features: torch.Tensor | None = None  # [len(prompt + tokens) - 1, H] target features, if collected
    turns: list[Turn] = field(default_factory=list)  # the row's turns, in order

    def generated_mask(self) -> list[bool]:
        """Per token of `tokens`: whether the model generated it (False: a tool's answer)."""
        out = []
        for turn in self.turns:
            out += [True] * turn.generated + [False] * turn.tool_tokens
        return out[: len(self.tokens)] if self.turns else [True] * len(self.tokens)


@dataclass
class Generation:
    """The result of `generate`: per prompt its new tokens, and the iteration records."""

    tokens: list[list[int]]
    iterations: list[Iteration] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)

    def frame(self):
        """The iteration records as a pandas DataFrame (one row per iteration)."""
        return pd.DataFrame([asdict(it) for it in self.iterations])
