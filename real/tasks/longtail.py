"""The long-tail workload (`--task longtail`): word problems with a heavy-tailed number of steps, answered with
worked steps, so that response lengths have reasoning RL's shape.

A problem is one of real.tasks.wordproblems' (a person, an item, a starting count, operations that keep every count a
non-negative integer), with n operations drawn from Zipf's law on 1 .. MAX_OPS: P(n) proportional to 1 / n,
so most problems take a few steps and a few take dozens. The user's message asks for one line per operation
with its calculation and the answer last:

    Mia has 14 pencils. She buys 6 more. Then she gives away 9. How many pencils does Mia have now?
    Work it out step by step: ...
    ->  Step 1: 14 + 6 = 20.
        Step 2: 20 - 9 = 11.
        Answer: 11

so an answer grows with its problem's steps (and with whatever the sampled model adds: a 135M model at
temperature 1 repeats itself and wanders in the long ones, and some run to the cap), and the reward is the
word problems' own: 1.0 when the response's last number is the answer. The cap is CAP tokens.

The workload's GRPO update (real.settings.TASK_GRPO["longtail"]) is sized as a run of a pretrained model on
small hardware sizes it: LoRA adapters (real.models.lora) rather than all 135M weights, micro-batches of at most
`micro_batch_tokens` padded tokens with activation checkpointing (a 1024-token answer's attention, kept for
every layer, would hold GBs), and no computation for groups whose rewards agree (their gradient is exactly
zero without a KL term; DAPO drops them from the batch for the same reason). benchmarks/bench_longtail.py
measures a run's shape, share and memory.
"""
from __future__ import annotations

from real.tasks.wordproblems import WordProblem, WordProblemConfig, WordProblemTask

MAX_OPS = 40  # operations per problem at most
CAP = 1024  # response tokens at most: the longest problems' worked answers reach it
SYMBOL = {"add": "+", "sub": "-", "mul": "x", "div": "/"}
INSTRUCTION = ("Work it out step by step: one line per sentence after the first, each line 'Step N:' with its "
               "calculation (for example 'Step 1: 14 + 6 = 20.'), then a last line 'Answer:' with the final number.")


class LongTailTask(WordProblemTask):
    """Word problems with Zipf-distributed steps and worked answers (see the module docstring)."""

    instruction = INSTRUCTION
    default_config = WordProblemConfig(max_ops=MAX_OPS, ops_tail=1.0, max_response_tokens=CAP)

    @staticmethod
    def solution_text(p: WordProblem) -> str:
        """The worked answer the instruction asks for: a line per operation, then the answer line."""
        x, lines = p.start, []
        for i, (op, n) in enumerate(p.ops):
            y = {"add": x + n, "sub": x - n, "mul": x * n, "div": x // n}[op]
            lines.append(f"Step {i + 1}: {x} {SYMBOL[op]} {n} = {y}.")
            x = y
        return "\n".join(lines + [f"Answer: {x}"])

    def solution_ids(self, p: WordProblem) -> list[int]:
        """The worked answer's tokens and the end of the assistant's turn: what real.tools.profile times training on
        (the lengths of a run's answers, without decoding them first)."""
        eos = self.tokenizer.eos_token_id
        return self.tokenizer.encode(self.solution_text(p), add_special_tokens=False) + ([eos] if eos is not None else [])
