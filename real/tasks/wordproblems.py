"""A task a pretrained instruct model can attempt: short arithmetic word problems through its chat template.

A problem is a person, an item, a starting count and one to `max_ops` operations (gains, losses,
doubling, giving half away), drawn from a seeded generator so that every intermediate
count is a non-negative integer:

    Mia has 14 pencils. She buys 6 more. Then she gives away 9. How many pencils does Mia have now?

The prompt is that text and an instruction to end with the number, sent through the model's own
chat template (`tokenizer.apply_chat_template`, generation prompt added). The reward is 1.0 when the
last number in the response (digits, an optional minus sign and thousands commas) is the answer,
else 0.0: there is no reference derivation, so the model writes whatever it writes, up to the cap.
A fixed share of problems (a hash of the problem, not of the seed) is held out for evaluation and
never drawn for training, as in real.tasks.gcd.GcdTask.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from tltsim.core.errors import TltsimError

NAMES = ("Mia", "Tom", "Ava", "Leo", "Zoe", "Sam", "Ivy", "Max", "Eli", "Ana", "Ben", "Kim")
PRONOUN = {"Mia": "She", "Ava": "She", "Zoe": "She", "Ivy": "She", "Ana": "She", "Kim": "She"}
ITEMS = ("apples", "pencils", "marbles", "stickers", "books", "coins", "cookies", "cards", "shells", "stamps")
INSTRUCTION = "Answer with the final number at the end."
_NUMBER = re.compile(r"-?\d[\d,]*")


@dataclass(frozen=True)
class WordProblem:
    name: str
    item: str
    start: int
    ops: tuple[tuple[str, int], ...]  # ("add" | "sub" | "mul" | "div", operand; mul and div by 2), in order

    @property
    def answer(self) -> int:
        x = self.start
        for op, n in self.ops:
            x = {"add": x + n, "sub": x - n, "mul": x * n, "div": x // n}[op]
        return x

    @property
    def text(self) -> str:
        he = PRONOUN.get(self.name, "He")
        parts = [f"{self.name} has {self.start} {self.item}."]
        for i, (op, n) in enumerate(self.ops):
            then = "Then " if i else ""
            who = he.lower() if then else he
            parts.append({
                "add": f"{then}{who} buys {n} more.",
                "sub": f"{then}{who} gives away {n}.",
                "mul": f"{then}{who} doubles the number of {self.item}.",
                "div": f"{then}{who} gives half of them to a friend.",
            }[op])
        parts.append(f"How many {self.item} does {self.name} have now?")
        return " ".join(parts)


@dataclass(frozen=True)
class WordProblemConfig:
    max_ops: int = 2  # operations per problem: 1 .. max_ops
    max_start: int = 20  # starting count: 2 .. max_start
    heldout_percent: int = 10  # share of problems reserved for evaluation
    max_response_tokens: int = 256  # a run's default cap: an instruct model answers these in well under it,
    # its longest answers run to it (a cap few responses reach, so the tail shows)
    ops_tail: float = 0.0  # P(n operations) proportional to n ** -ops_tail on 1 .. max_ops (0: uniform; 1: Zipf's
    # law, a heavy tail: real.tasks.longtail)

    def __post_init__(self):
        if self.max_ops < 1 or self.max_start < 2:
            raise TltsimError(f"word problems: max_ops {self.max_ops} must be >= 1 and max_start {self.max_start} >= 2")
        if not 0 < self.heldout_percent < 100:
            raise TltsimError(f"word problems: heldout_percent {self.heldout_percent} must be 1..99")
        if self.ops_tail < 0:
            raise TltsimError(f"word problems: ops_tail {self.ops_tail} must be >= 0")


class WordProblemTask:
    """Draws word problems, writes their chat-template prompts with `tokenizer`, and scores responses."""

    instruction = INSTRUCTION  # what the user's message asks after the problem
    default_config = WordProblemConfig()  # the config of a task built without one (its cap: a run's default)

    def __init__(self, tokenizer, config: WordProblemConfig | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise TltsimError("word problems: the tokenizer has no chat template; use an instruct model's tokenizer")
        self.tokenizer = tokenizer
        self.config = self.default_config if config is None else config

    @property
    def max_response_tokens(self) -> int:
        """The response cap a run takes when none is given."""
        return self.config.max_response_tokens

    def save(self, directory) -> None:
        """Write the tokenizer (with its chat template) into `directory`, beside a checkpoint's weights, so
        that real.models.targets.load_task finds this task there again."""
        self.tokenizer.save_pretrained(directory)

    def is_heldout(self, p: WordProblem) -> bool:
        digest = hashlib.sha256(repr((p.name, p.item, p.start, p.ops)).encode()).digest()
        return int.from_bytes(digest[:4], "little") % 100 < self.config.heldout_percent

    def sample(self, rng: np.random.Generator, n: int, split: str = "train") -> list[WordProblem]:
        """`n` problems of `split` ("train" or "test")."""
        if split not in ("train", "test"):
            raise TltsimError(f"split {split!r}: use 'train' or 'test'")
        out: list[WordProblem] = []
        while len(out) < n:
            p = self._draw(rng)
            if self.is_heldout(p) == (split == "test"):
                out.append(p)
        return out

    def _draw(self, rng: np.random.Generator) -> WordProblem:
        x = int(rng.integers(2, self.config.max_start + 1))
        start, ops = x, []
        for _ in range(self._num_ops(rng)):
            choices = ["add", "add"] + (["sub", "sub"] if x > 1 else []) + (["mul"] if x <= 20 else [])
            choices += ["div"] if x % 2 == 0 else []
            op = choices[int(rng.integers(len(choices)))]
            n = {"add": lambda: int(rng.integers(1, 20)), "sub": lambda: int(rng.integers(1, x)),
                 "mul": lambda: 2, "div": lambda: 2}[op]()
            ops.append((op, n))
            x = {"add": x + n, "sub": x - n, "mul": x * n, "div": x // n}[op]
        return WordProblem(NAMES[int(rng.integers(len(NAMES)))], ITEMS[int(rng.integers(len(ITEMS)))], start, tuple(ops))

    def _num_ops(self, rng: np.random.Generator) -> int:
        """Operations of a new problem: 1 .. max_ops, P(n) proportional to n ** -ops_tail."""
        if self.config.ops_tail == 0:
            return int(rng.integers(1, self.config.max_ops + 1))
        n = np.arange(1, self.config.max_ops + 1)
        weights = n ** -self.config.ops_tail
        return int(rng.choice(n, p=weights / weights.sum()))

    def prompt_ids(self, p: WordProblem) -> list[int]:
        """The problem as the user's message through the chat template, with the assistant's turn opened."""
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": f"{p.text} {self.instruction}"}],
                                                 add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def response_text(self, response: str | list[int]) -> str:
        return response if isinstance(response, str) else self.tokenizer.decode(response, skip_special_tokens=True)

    @staticmethod
    def final_number(text: str) -> int | None:
        """The last number written in `text` (thousands commas allowed), or None."""
        found = [m.group().rstrip(",") for m in _NUMBER.finditer(text)]
        return int(found[-1].replace(",", "")) if found else None

    def reward(self, p: WordProblem, response: str | list[int]) -> float:
        """1.0 when the response's last number is the answer, else 0.0."""
        return 1.0 if self.final_number(self.response_text(response)) == p.answer else 0.0
