"""The agentic task (`--task agentic`): arithmetic a small model gets right by calling a calculator, a real tool.

A problem is a product of two numbers of two or three digits with a third number added or taken away, or a sum of
three numbers of three or four digits, asked as `What is 347 * 29 + 1200?`: more than a 135M model computes in
its head, nothing a calculator does not. SmolLM2's chat template has no tool-call format, so the call syntax is a
plain marker the prompt teaches: the model writes the expression between `<calc>` and `</calc>`, the engine pauses
the row there (real.engine.generate, tool calls) and runs the expression in the sandbox (real.engine.tools: a
`python -I` subprocess), appends ` = RESULT` and a line break (tokenized with the model's own tokenizer), and the
row resumes and ends with the answer line:

    <calc>347 * 29 + 1200</calc> = 11263
    Answer: 11263

The prompt teaches the syntax the way the word problems teach their format, in the chat itself: the instruction as
the system message, FEW_SHOT solved problems (fixed, drawn apart from the task's) as earlier user and assistant
turns, the tool's answers written in the assistant's turns where the tool put them, then the problem. SmolLM2-135M
then calls the tool in nearly every response (24 training problems at temperature 1: 22 called it, 17 were right).
The reward is 1.0 when the response's last number (what the model wrote after the tool answered) is the answer,
else 0.0. Responses are short: CAP tokens.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from real.tasks.wordproblems import WordProblemTask
from tltsim.core.errors import TltsimError

OPEN, CLOSE = "<calc>", "</calc>"
CAP = 48  # generated tokens at most: a call and the answer line take about 25
FEW_SHOT = 3  # solved problems in the prompt
INSTRUCTION = (f"Use the calculator: write the expression between {OPEN} and {CLOSE}, read its result, then give the "
               f"final line 'Answer: N'.")
_NUMBER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Arithmetic:
    """`a op1 b op2 c` with op1 in (*, +) and op2 in (+, -)."""

    a: int
    op1: str
    b: int
    op2: str
    c: int

    @property
    def expression(self) -> str:
        return f"{self.a} {self.op1} {self.b} {self.op2} {self.c}"

    @property
    def answer(self) -> int:
        x = self.a * self.b if self.op1 == "*" else self.a + self.b
        return x + self.c if self.op2 == "+" else x - self.c

    @property
    def text(self) -> str:
        return f"What is {self.expression}?"


@dataclass(frozen=True)
class AgenticConfig:
    heldout_percent: int = 10  # share of problems reserved for evaluation
    max_response_tokens: int = CAP  # a run's default cap
    max_tool_calls: int = 2  # calls a response may make

    def __post_init__(self):
        if not 0 < self.heldout_percent < 100:
            raise TltsimError(f"agentic: heldout_percent {self.heldout_percent} must be 1..99")
        if self.max_tool_calls < 1:
            raise TltsimError(f"agentic: max_tool_calls {self.max_tool_calls} must be >= 1")


class CalculatorCalls:
    """The task's call syntax for the engine (real.engine.tools.ToolUse), in the model's own tokenizer."""

    runs_code = False  # the calculator evaluates arithmetic, nothing else (real.engine.calculator)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def call(self, turn: list[int]) -> str | None:
        """The expression of the `<calc>...</calc>` the turn's tokens end with, or None."""
        if not turn or not self.tokenizer.decode(turn[-4:]).endswith(CLOSE):
            return None
        text = self.tokenizer.decode(turn)
        start = text.rfind(OPEN, 0, len(text) - len(CLOSE))
        return None if start < 0 else text[start + len(OPEN): len(text) - len(CLOSE)].strip()

    def answer_ids(self, result: str) -> list[int]:
        return self.tokenizer.encode(tool_answer(result), add_special_tokens=False)


def tool_answer(result: str) -> str:
    """The text the tool's answer appends after the call."""
    return f" = {result}\n"


class AgenticTask(WordProblemTask):
    """Arithmetic through a calculator tool (see the module docstring)."""

    instruction = INSTRUCTION
    default_config = AgenticConfig()

    def __init__(self, tokenizer, config: AgenticConfig | None = None):
        super().__init__(tokenizer, config)
        self.tools = CalculatorCalls(tokenizer)  # what a run's engine pauses rows with
        rng = np.random.default_rng(20260)
        self.examples = []
        while len(self.examples) < FEW_SHOT:  # fixed, and never a problem the task poses
            p = self._draw(rng)
            if self.is_heldout(p) is None:
                self.examples.append(p)

    @property
    def max_tool_calls(self) -> int:
        return self.config.max_tool_calls

    def is_heldout(self, p: Arithmetic) -> bool | None:
        """True for the held-out share, False for the training problems, None for the few-shot examples' share (a
        fixed 1% of all problems)."""
        h = int.from_bytes(hashlib.sha256(p.expression.encode()).digest()[:4], "little") % 100
        return None if h == 99 else h < self.config.heldout_percent

    def sample(self, rng: np.random.Generator, n: int, split: str = "train") -> list[Arithmetic]:
        if split not in ("train", "test"):
            raise TltsimError(f"split {split!r}: use 'train' or 'test'")
        out: list[Arithmetic] = []
        while len(out) < n:
            p = self._draw(rng)
            if self.is_heldout(p) is (split == "test"):
                out.append(p)
        return out

    def _draw(self, rng: np.random.Generator) -> Arithmetic:
        if rng.random() < 0.75:  # a product and a term
            return Arithmetic(int(rng.integers(12, 1000)), "*", int(rng.integers(12, 100)),
                              "+" if rng.random() < 0.5 else "-", int(rng.integers(100, 1000)))
        return Arithmetic(int(rng.integers(100, 10000)), "+", int(rng.integers(100, 10000)), "+",
                          int(rng.integers(100, 10000)))

    @staticmethod
    def solution_text(p: Arithmetic) -> str:
        """The worked response, the tool's answer included where the tool puts it."""
        return f"{OPEN}{p.expression}{CLOSE}{tool_answer(str(p.answer))}Answer: {p.answer}"

    def prompt_ids(self, p: Arithmetic) -> list[int]:
        """The instruction, the few-shot turns, then the problem, through the chat template, the assistant's turn
        opened."""
        chat = [{"role": "system", "content": self.instruction}]
        for ex in self.examples:
            chat += [{"role": "user", "content": ex.text}, {"role": "assistant", "content": self.solution_text(ex)}]
        chat.append({"role": "user", "content": p.text})
        ids = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def reward(self, p: Arithmetic, response: str | list[int]) -> float:
        """1.0 when the response's last number is the answer, else 0.0."""
        found = _NUMBER.findall(self.response_text(response))
        return 1.0 if found and int(found[-1]) == p.answer else 0.0
