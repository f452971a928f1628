"""The agentic task: its problems, its call syntax in SmolLM2's own tokenizer, its prompt and its reward."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from real.engine.tools import ToolUse, run_calculator
from real.models import hub
from real.models.targets import load_task
from real.tasks.agentic import CLOSE, OPEN, AgenticTask, tool_answer
from tltsim.core.errors import TltsimError

NAME = "smollm2-135m"


@pytest.fixture(scope="module")
def task() -> AgenticTask:
    hub.fetch(NAME, log=lambda _: None)  # reused when cached
    return load_task(NAME, "agentic")


def test_load_task_gives_the_agentic_task_its_tools(task):
    assert isinstance(task, AgenticTask) and isinstance(task.tools, ToolUse)


def test_problems_are_seeded_split_and_need_a_calculator(task):
    train = task.sample(np.random.default_rng(0), 200)
    assert train == task.sample(np.random.default_rng(0), 200)
    test = task.sample(np.random.default_rng(0), 20, split="test")
    assert not {p.expression for p in train} & {p.expression for p in test}
    assert not {p.expression for p in task.examples} & {p.expression for p in train + test}
    assert min(abs(p.answer) for p in train) >= 100 and np.mean([p.answer > 9999 for p in train]) > 0.5
    with pytest.raises(TltsimError, match="split"):
        task.sample(np.random.default_rng(0), 1, split="dev")


def test_a_call_is_found_where_a_turn_ends_with_the_closing_marker(task):
    tok, tools = task.tokenizer, task.tools
    text = f"Let me see. {OPEN}347 * 29 + 1200{CLOSE}"
    ids = tok.encode(text, add_special_tokens=False)
    assert tools.call(ids) == "347 * 29 + 1200"
    assert all(tools.call(ids[:n]) is None for n in range(len(ids)))  # not before the marker closes
    assert tools.call(tok.encode(f"{CLOSE} alone", add_special_tokens=False)) is None
    assert tools.call(tok.encode(f"no call{CLOSE}", add_special_tokens=False)) is None
    result = run_calculator(tools.call(ids)).output
    assert result == str(347 * 29 + 1200)
    assert tok.decode(tools.answer_ids(result)) == tool_answer(result) == f" = {result}\n"


def test_the_prompt_teaches_the_syntax_by_solved_examples(task):
    p = task.sample(np.random.default_rng(1), 1)[0]
    text = task.tokenizer.decode(task.prompt_ids(p))
    assert text.count(OPEN) == len(task.examples) + 1  # each example's call, and the instruction's
    for ex in task.examples:
        assert task.solution_text(ex) in text
    assert text.rstrip().endswith("assistant") and p.text in text


def test_the_reward_is_the_last_number_the_response_gives(task):
    p = task.sample(np.random.default_rng(2), 1)[0]
    assert task.reward(p, task.solution_text(p)) == 1.0
    assert task.reward(p, f"{OPEN}{p.expression}{CLOSE}{tool_answer(str(p.answer))}Answer: {p.answer + 1}") == 0.0
    assert task.reward(p, "I do not know.") == 0.0
    ids = task.tokenizer.encode(task.solution_text(p), add_special_tokens=False) + [task.tokenizer.eos_token_id]
    assert task.reward(p, ids) == 1.0


def test_every_call_the_model_wrote_in_the_shipped_pair_answers_as_it_was_recorded(task):
    """The calls SmolLM2 wrote in the shipped agentic runs (traces/runs/real_*_smollm2_agentic), found in each
    response's tokens turn by turn, get the calculator's answer the run recorded after them; and each solved
    example's expression its answer."""
    calls = 0
    for run in ("real_verl_smollm2_agentic", "real_tlt_smollm2_agentic"):
        where = Path(__file__).parents[2] / "traces" / "runs" / run
        rows = pd.read_parquet(where / "answers.parquet").merge(pd.read_parquet(where / "trace.parquet"))
        for row in rows.itertuples():
            at = 0
            for generated, tool in zip(row.turn_response_len, row.tool_tokens):
                at += generated
                if tool:
                    code = task.tools.call(list(row.tokens[:at]))
                    assert task.tools.answer_ids(run_calculator(code).output) == list(row.tokens[at: at + tool]), code
                    calls += 1
                at += tool
    assert calls >= 30
    assert all(run_calculator(ex.expression).output == str(ex.answer) for ex in task.examples)
