"""Rows pause at tool calls and resume with the tool's answer on their kept KV: lossless across turns.

The tool is real (real.engine.tools: a sandboxed `python -I` subprocess per call); the call syntax is token ids: a
turn that ends with STOP calls `first * last + length` of its tokens, whose answer's digits come back as tokens
DIGIT0 + d. The reference decodes every row alone, turn by turn, recomputing the whole context at every token (no
cache at all), and appends the same answers.
"""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from tiny_lm import MAX_NEW, PROMPTS, VOCAB, target, trained_drafter

from real.drafters.eagle import Drafter
from real.drafters.suffix import SuffixDrafter
from real.engine.generate import Engine, generate
from real.engine.tools import run_calculator
from real.settings import GenerateSettings
from tltsim.core.errors import TltsimError

ARCH, KIND = "llama", "trained"
DIGIT0 = 10  # the answer's digit d is token DIGIT0 + d
MAX_CALLS = 3


class CallAtStop:
    """A turn that ends with `stop` (after at least one other token) calls `first * last + length` of its tokens."""

    runs_code = False

    def __init__(self, stop: int):
        self.stop = stop

    def call(self, turn):
        return f"{turn[0]} * {turn[-2]} + {len(turn)}" if len(turn) >= 2 and turn[-1] == self.stop else None

    def answer_ids(self, result):
        return [DIGIT0 + int(c) for c in result if c.isdigit()]


@lru_cache(maxsize=None)
def stop_token() -> int:
    """A token the greedy rows emit mid-response, some rows and not all: those rows call the tool."""
    free = generate(target(ARCH, KIND), PROMPTS[KIND], settings=GenerateSettings(max_new_tokens=MAX_NEW, eos_token_id=())).tokens
    for tok in range(VOCAB):
        hits = sum(tok in row[1:-4] for row in free)
        if 2 <= hits < len(free):
            return tok
    raise AssertionError("no token some rows emit mid-response")


def reference(prompt: list[int], tools: CallAtStop) -> tuple[list[int], list[int]]:
    """Greedy decoding of one row with no cache, turn by turn; returns its tokens after the prompt and the length of
    each tool answer appended."""
    model, ctx, generated, answers, start = target(ARCH, KIND), list(prompt), 0, [], len(prompt)
    with torch.no_grad():
        while True:
            tok = int(model(torch.tensor([ctx])).logits[0, -1].argmax())
            ctx.append(tok)
            generated += 1
            if generated >= MAX_NEW:
                break
            if len(answers) < MAX_CALLS and (code := tools.call(ctx[start:])) is not None:
                answer = tools.answer_ids(run_calculator(code).output)
                ctx += answer
                answers.append(len(answer))
                start = len(ctx)
    return ctx[len(prompt):], answers


@lru_cache(maxsize=None)
def references():
    tools = CallAtStop(stop_token())
    return [reference(p, tools) for p in PROMPTS[KIND]]


def _run(drafter=None, strategy=None):
    tools = CallAtStop(stop_token())
    engine = Engine(target(ARCH, KIND), drafter, max_new_tokens=MAX_NEW, eos_token_id=(), tools=tools,
                    max_tool_calls=MAX_CALLS)
    ids = engine.add(PROMPTS[KIND])
    mode = "decode" if drafter is None else "spec_decode"
    states = []
    while engine.running or engine.paused:
        if engine.paused:
            if not engine.running:
                engine.wait_tools()
            engine.resume()
        if engine.running:
            states.append((engine.running, engine.paused))
            engine.step(mode, strategy)
    return engine, [engine.finished[i] for i in ids], states


DRAFTERS = {"plain": lambda: None, "eagle-random": lambda: Drafter.for_target(target(ARCH, KIND), seed=3),
            "eagle-trained": lambda: trained_drafter(ARCH, KIND), "suffix": lambda: SuffixDrafter()}


@pytest.mark.parametrize("drafter,strategy", [("plain", None), ("eagle-random", "4_1_4"), ("eagle-trained", "4_1_4"),
                                              ("eagle-trained", "3_3_8"), ("suffix", "4_1_4")])
def test_greedy_output_with_tool_calls_is_turn_by_turn_decoding(drafter, strategy):
    refs = references()
    calls = [len(answers) for _, answers in refs]
    assert sum(c > 0 for c in calls) >= 2 and min(calls) == 0  # some rows call tools (some more than once), some not
    engine, finished, _ = _run(DRAFTERS[drafter](), strategy)
    assert [f.tokens for f in finished] == [tokens for tokens, _ in refs]
    for f, (_, answers) in zip(finished, refs):
        assert [t.tool_tokens for t in f.turns if t.tool is not None] == answers
        assert len(f.turns) == len(answers) + 1
        assert sum(t.generated for t in f.turns) == MAX_NEW  # the cap counts the model's tokens, not the answers
        assert sum(f.generated_mask()) == MAX_NEW and len(f.generated_mask()) == len(f.tokens)
    if drafter == "eagle-trained":
        assert max(a for it in engine.iterations if it.mode == "spec_decode" for a in it.accepted) >= 2


def test_a_resumed_row_prefills_only_the_tools_answer_onto_its_kept_cache(monkeypatch):
    fed = []  # (iteration index, tokens per row) of every prefill forward
    original = Engine._prefill

    def spy(self, cache, feeds):
        fed.append((len(self.iterations), [len(f) for f in feeds], cache.lens.tolist()))
        return original(self, cache, feeds)

    monkeypatch.setattr(Engine, "_prefill", spy)
    engine, finished, _ = _run()
    prefills = [it for it in engine.iterations if it.mode == "prefill"]
    resumes = prefills[1:]
    turns = [t for f in finished for t in f.turns]
    called = [t for t in turns if t.tool is not None]
    assert resumes and sum(it.tokens for it in resumes) == sum(t.tool_tokens for t in called)
    assert sorted(n for _, feeds, _ in fed[1:] for n in feeds) == sorted(t.prefilled for f in finished for t in f.turns[1:])
    for f in finished:
        for before, after in zip(f.turns, f.turns[1:]):
            assert after.prefilled == before.tool_tokens  # the pending token and the answer but its last
            assert after.cached == before.context + before.generated - 1  # the whole context before was kept
            assert after.context == before.context + before.generated + before.tool_tokens
    # the cache the resume prefilled onto held each row's whole context before the answer
    kept = sorted(lens for _, _, rows in fed[1:] for lens in rows)
    assert kept == sorted(t.cached for f in finished for t in f.turns[1:])
    for t in called:
        assert t.tool.latency_s > 0 and t.tool.output.isdigit()


def test_other_rows_decode_while_a_row_waits_on_its_tool():
    _, finished, states = _run()
    assert any(running > 0 and paused > 0 for running, paused in states)
    assert all(t.end_iteration > t.start_iteration for f in finished for t in f.turns)


def test_tools_and_replayed_answers_do_not_mix():
    engine = Engine(target(ARCH, KIND), max_new_tokens=MAX_NEW, tools=CallAtStop(1))
    with pytest.raises(TltsimError, match="does not replay"):
        engine.add([[1, 2]], answers=[[3] * MAX_NEW])
    with pytest.raises(TltsimError, match="max_tool_calls"):
        Engine(target(ARCH, KIND), max_tool_calls=-1)
