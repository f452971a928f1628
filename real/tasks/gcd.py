"""The default small reasoning task: greatest common divisor by repeated subtraction.

A problem is a pair (a, b). The solution is Euclid's subtractive algorithm written
out one step per line: the larger number loses the smaller until both are equal,
then the answer line `=g`. Every number is zero-padded to `width` digits, so a
digit of a new line sits a fixed number of tokens after the same digit of the line
before it, and is written least-significant digit first (by default), so a borrow
comes before the digit it changes: both are what let a small model learn the step.
gcd(84, 36):

    prompt:    gcd 480 630\\n
    response:  840 630\\n210 630\\n210 420\\n210 210\\n=012<eos>

The number of lines is the sum of the partial quotients of a/b minus one, so it is
heavy-tailed for mathematical reasons (Gauss-Kuzmin), not by construction. With
both operands log-uniform on 1..999 and chains over 64 steps redrawn, the response
is 5 to 517 tokens, median about 117, p99 about 490 (tests/real/test_task.py holds
the bands). Every step is a chance of error, so long problems are the hard ones.

Reward: 1.0 when the whole derivation is right, every line the subtraction step from
the line before and the last line `=g` with g the gcd, else 0.0 (no format credit).
The algorithm is deterministic, so that is the reference solution exactly. The
derivation is checked, not only the answer, because about 60% of these pairs are
coprime: an answer-only reward would pay a policy that skips the chain and says `=001`,
and RL would collapse the very response lengths this task exists to produce.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.core.io import write_json

TASK_FILE = "tltsim_task.json"  # beside a checkpoint's config.json: the task and tokenizer it was trained on


@dataclass(frozen=True)
class TaskConfig:
    width: int = 3  # digits per number: operands are 1 .. 10**width - 1, zero-padded to this width
    max_steps: int = 64  # problems whose chain is longer are redrawn: caps the response at 8*64+5 tokens
    # numbers in the prompt and the chain are written least-significant digit first (the answer line is not):
    # borrows then flow in writing order. Default tiny-llama pretrain, 100 held-out problems, greedy: 65% right
    # this way, 18% with plain most-significant-first numbers.
    lsb_first: bool = True
    heldout_percent: int = 10  # share of (a, b) pairs reserved for evaluation, never drawn for training

    def __post_init__(self):
        if not 1 <= self.width <= 6:
            raise TltsimError(f"task width {self.width}: must be 1..6 digits")
        if self.max_steps < 0:
            raise TltsimError(f"task max_steps {self.max_steps}: must be >= 0")
        if not 0 < self.heldout_percent < 100:
            raise TltsimError(f"task heldout_percent {self.heldout_percent}: must be 1..99")


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def answer(self) -> int:
        return math.gcd(self.a, self.b)


class Tokenizer:
    """Character-level tokenizer over a fixed alphabet, with pad, bos and eos ids.

    `encode` raises TltsimError on a character outside the alphabet; `decode`
    drops special ids and stops at the first eos.
    """

    SPECIALS = ("<pad>", "<bos>", "<eos>")
    ALPHABET = "0123456789 \n=gcd"

    def __init__(self):
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self._ids = {ch: i + len(self.SPECIALS) for i, ch in enumerate(self.ALPHABET)}
        self._chars = {i: ch for ch, i in self._ids.items()}

    @property
    def vocab_size(self) -> int:
        return len(self.SPECIALS) + len(self.ALPHABET)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[ch] for ch in text]
        except KeyError as e:
            raise TltsimError(f"tokenizer: character {e.args[0]!r} is not in the alphabet {self.ALPHABET!r}") from None

    def decode(self, ids) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i in self._chars:
                out.append(self._chars[i])
        return "".join(out)


class GcdTask:
    """Draws problems, writes their prompts and reference solutions, and scores responses."""

    def __init__(self, config: TaskConfig = TaskConfig()):
        self.config = config
        self.tokenizer = Tokenizer()

    # -- problems ---------------------------------------------------------------------------

    def is_heldout(self, p: Problem) -> bool:
        """True for the fixed ~heldout_percent of pairs kept for evaluation (a hash of the pair)."""
        return (p.a * 2654435761 + p.b * 40503) % 100 < self.config.heldout_percent

    def sample(self, rng: np.random.Generator, n: int, split: str = "train") -> list[Problem]:
        """`n` problems of `split` ("train" or "test"), both operands log-uniform on 1..10**width-1."""
        if split not in ("train", "test"):
            raise TltsimError(f"split {split!r}: use 'train' or 'test'")
        hi = 10**self.config.width - 1
        out: list[Problem] = []
        while len(out) < n:
            a, b = np.exp(rng.uniform(0.0, math.log(hi + 1), size=2)).astype(int).clip(1, hi)
            p = Problem(int(a), int(b))
            if self.num_steps(p) <= self.config.max_steps and self.is_heldout(p) == (split == "test"):
                out.append(p)
        return out

    @staticmethod
    def num_steps(p: Problem) -> int:
        """Lines of the solution before the answer: the partial quotients of a/b summed, minus one."""
        a, b, steps = p.a, p.b, 0
        while b:
            steps += a // b
            a, b = b, a % b
        return steps - 1

    @property
    def max_response_tokens(self) -> int:
        """Tokens of the longest reference response: max_steps lines, the answer line and eos."""
        w = self.config.width
        return self.config.max_steps * (2 * w + 2) + w + 2

    # -- text -------------------------------------------------------------------------------

    def _num(self, x: int) -> str:
        return f"{x:0{self.config.width}d}"

    def _chain_num(self, x: int) -> str:
        return self._num(x)[::-1] if self.config.lsb_first else self._num(x)

    def prompt_text(self, p: Problem) -> str:
        return f"gcd {self._chain_num(p.a)} {self._chain_num(p.b)}\n"

    def solution_text(self, p: Problem) -> str:
        a, b, lines = p.a, p.b, []
        while a != b:
            a, b = (a - b, b) if a > b else (a, b - a)
            lines.append(f"{self._chain_num(a)} {self._chain_num(b)}\n")
        return "".join(lines) + f"={self._num(a)}"

    def prompt_ids(self, p: Problem) -> list[int]:
        """bos + the prompt: what generation starts from."""
        return [self.tokenizer.bos_id] + self.tokenizer.encode(self.prompt_text(p))

    def solution_ids(self, p: Problem) -> list[int]:
        """The reference response, eos included."""
        return self.tokenizer.encode(self.solution_text(p)) + [self.tokenizer.eos_id]

    # -- reward -----------------------------------------------------------------------------

    def reward(self, p: Problem, response: str | list[int]) -> float:
        """1.0 when the response (text, or token ids up to eos) is the full derivation and answer, else 0.0."""
        text = response if isinstance(response, str) else self.tokenizer.decode(response)
        return 1.0 if text == self.solution_text(p) else 0.0

    # -- persistence ------------------------------------------------------------------------

    def save(self, directory: str | Path) -> None:
        """Write TASK_FILE into `directory` (atomically), beside a checkpoint."""
        write_json(Path(directory) / TASK_FILE, {"task": "gcd", "config": asdict(self.config),
                                                 "alphabet": Tokenizer.ALPHABET})

    @classmethod
    def load(cls, directory: str | Path) -> "GcdTask":
        """The task a checkpoint directory was trained on; TltsimError if its TASK_FILE is missing or foreign."""
        path = Path(directory) / TASK_FILE
        if not path.is_file():
            raise TltsimError(f"{path}: not found; a checkpoint made by `tltsim real pretrain` has one")
        data = json.loads(path.read_text())
        if data.get("task") != "gcd" or data.get("alphabet") != Tokenizer.ALPHABET:
            raise TltsimError(f"{path}: written for another task or tokenizer; pretrain the target again")
        return cls(TaskConfig(**data["config"]))
