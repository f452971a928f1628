"""The long-tail workload (real/tasks/longtail.py) and the update sized for it: Zipf-distributed steps, worked answers
that the reward pays, answers whose lengths have reasoning RL's shape, the task by name, LoRA adapters
(real/models/lora.py) and log-probs in chunks (real/run/grpo.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from test_wordproblems import _tokenizer

from real.models import lora
from real.run.grpo import GRPO, response_logprobs, token_logprobs
from real.tasks.longtail import CAP, INSTRUCTION, MAX_OPS, LongTailTask
from real.models.targets import build_target, load_target
from real.run.config import RunConfig
from real.settings import TASK_GRPO, GRPOConfig, task_grpo
from real.tasks.wordproblems import WordProblem
from tltsim.core.errors import TltsimError


def test_steps_follow_zipfs_law_up_to_the_most():
    task = LongTailTask(_tokenizer())
    ops = np.array([len(p.ops) for p in task.sample(np.random.default_rng(0), 4000)])
    assert ops.min() == 1 and ops.max() <= MAX_OPS and (ops > MAX_OPS // 2).any()
    counts = np.bincount(ops, minlength=MAX_OPS + 1)
    assert counts[1] / counts[2] == pytest.approx(2.0, rel=0.15) and counts[1] / counts[4] == pytest.approx(4.0, rel=0.2)
    harmonic = np.cumsum(1.0 / np.arange(1, MAX_OPS + 1))
    assert np.mean(ops >= 20) == pytest.approx((harmonic[-1] - harmonic[18]) / harmonic[-1], abs=0.02)
    assert task.sample(np.random.default_rng(3), 50) == task.sample(np.random.default_rng(3), 50)
    assert task.max_response_tokens == CAP


def test_the_worked_answer_is_rewarded_and_a_wrong_final_number_is_not():
    task = LongTailTask(_tokenizer())
    p = WordProblem("Mia", "pencils", 14, (("add", 6), ("sub", 9), ("mul", 2), ("div", 2)))
    assert task.solution_text(p) == ("Step 1: 14 + 6 = 20.\nStep 2: 20 - 9 = 11.\nStep 3: 11 x 2 = 22.\n"
                                     "Step 4: 22 / 2 = 11.\nAnswer: 11")
    assert task.reward(p, task.solution_text(p)) == 1.0
    assert task.reward(p, task.solution_text(p).replace("Answer: 11", "Answer: 12")) == 0.0
    assert task.reward(p, "Step 1: 14 + 6 = 20.") == 0.0  # stopped early: its last number is not the answer
    for q in task.sample(np.random.default_rng(1), 200):
        assert task.reward(q, task.solution_text(q)) == 1.0 and task.solution_text(q).count("\n") == len(q.ops)
    ids = task.solution_ids(p)  # the answer line's number is a word of the test tokenizer (0..99)
    assert task.reward(p, ids) == 1.0 and ids[-1] == task.tokenizer.eos_token_id
    assert task.prompt_ids(p) == task.tokenizer.apply_chat_template(
        [{"role": "user", "content": f"{p.text} {INSTRUCTION}"}], add_generation_prompt=True, tokenize=True)["input_ids"]


def test_worked_answers_have_reasoning_rls_shape_within_a_step():
    """A run's step (8 prompts x 4 samples): the worked answers' lengths, longest over median, as tokens of the
    word-level test tokenizer (a line is 6 of them; SmolLM2's tokenizer gives 16; benchmarks/bench_longtail.py
    --reference-only measures the answers in SmolLM2's tokens)."""
    task = LongTailTask(_tokenizer())
    ratios, longest = [], []
    for step in range(100):
        lengths = [len(task.solution_ids(p)) for p in task.sample(np.random.default_rng(step), 8) for _ in range(4)]
        ratios.append(max(lengths) / np.median(lengths))
        longest.append(max(lengths))
    assert np.median(ratios) >= 4 and np.mean(np.array(ratios) >= 2) > 0.9
    assert np.median(longest) >= 6 * 15  # the longest of a step has 15 or more steps in most steps


def test_the_task_by_name_and_its_update():
    with pytest.raises(TltsimError, match="task 'nope'"):
        RunConfig(task="nope", model="test-llama").checked()
    with pytest.raises(TltsimError, match="spot_lr"):
        RunConfig(spot_lr=0.0, model="test-llama").checked()
    cfg = RunConfig(task="gcd", model="test-llama").checked()
    assert cfg.grpo == GRPOConfig()  # a task without defaults of its own gets GRPOConfig's
    assert task_grpo("longtail") == GRPOConfig(**TASK_GRPO["longtail"]) and task_grpo("longtail").lora_rank > 0
    assert task_grpo("longtail", lora_rank=0, lr=None).lora_rank == 0  # an option given wins; None is not given


def test_chunked_logprobs_are_the_full_log_softmax_and_its_gradient():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(37, 8, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    full = torch.log_softmax(head(hidden), dim=-1).gather(1, targets[:, None])[:, 0]
    (g_full,) = torch.autograd.grad(full.sum(), hidden)
    chunked = token_logprobs(head, hidden, targets, chunk=5)
    (g_chunked,) = torch.autograd.grad(chunked.sum(), hidden)
    assert torch.allclose(full, chunked, atol=1e-6) and torch.allclose(g_full, g_chunked, atol=1e-6)


PROMPTS, RESPONSES = [[1, 5, 6], [1, 5], [1, 5, 6, 7], [1]], [[7, 8, 9, 2], [10], [11, 12], [13, 14, 15, 16, 17]]


def _params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_lora_trains_only_the_adapters_and_decodes_with_them_merged(tmp_path):
    model = build_target("test-llama", seed=0).double()
    plain = build_target("test-llama", seed=0).double()
    grpo = GRPO(model, GRPOConfig(lr=5e-2, lora_rank=4))
    assert lora.has_lora(model) and all("lora_" in k for k, p in model.named_parameters() if p.requires_grad)
    before = response_logprobs(plain, PROMPTS, RESPONSES)[0]
    assert torch.allclose(response_logprobs(model, PROMPTS, RESPONSES)[0], before)  # B starts at zero
    frozen = {k: v for k, v in _params(model).items() if "lora_" not in k}
    adv = np.array([1.0, -1.0, 0.5, -0.5])
    for _ in range(2):
        grpo.update(PROMPTS, RESPONSES, adv, *grpo.old_logprobs(PROMPTS, RESPONSES))
    after = response_logprobs(model, PROMPTS, RESPONSES)[0]
    assert after[0].sum() > before[0].sum() and after[1].sum() < before[1].sum()
    with lora.unmerged(model):  # the base weights come back (to rounding) once the adapters are taken out
        assert all(torch.allclose(_params(model)[k], v) for k, v in frozen.items() if "base_layer" in k)
    assert any(not torch.allclose(_params(model)[k], v) for k, v in frozen.items() if "base_layer" in k)  # merged
    grpo.save_target(tmp_path / "t")
    merged = load_target(tmp_path / "t").double()  # a plain model: the merged weights under its own names
    assert not lora.has_lora(merged) and torch.allclose(response_logprobs(merged, PROMPTS, RESPONSES)[0], after)
    again = GRPO(merged, GRPOConfig(lr=5e-2, lora_rank=4))
    again.resume(tmp_path / "t")
    assert torch.allclose(response_logprobs(merged, PROMPTS, RESPONSES)[0], after)
    assert all(torch.equal(p, _params(model)[k]) for k, p in _params(merged).items() if "lora_" in k)
    with pytest.raises(TltsimError, match="adapters of another shape"):
        GRPO(load_target(tmp_path / "t").double(), GRPOConfig(lora_rank=2)).resume(tmp_path / "t")


def test_gradient_checkpointing_gives_the_same_update():
    out = []
    for checkpointing in (False, True):
        model = build_target("test-llama", seed=0).double()
        grpo = GRPO(model, GRPOConfig(lr=1e-2, lora_rank=4, gradient_checkpointing=checkpointing))
        adv = np.array([1.0, -1.0, 0.5, -0.5])
        grpo.update(PROMPTS, RESPONSES, adv, *grpo.old_logprobs(PROMPTS, RESPONSES))
        out.append(torch.cat([p.detach().ravel() for p in model.parameters()]))
    assert torch.allclose(out[0], out[1], atol=1e-12) and not torch.equal(out[0], _params_flat_start())


def _params_flat_start() -> torch.Tensor:
    model = build_target("test-llama", seed=0).double()
    GRPO(model, GRPOConfig(lora_rank=4))  # the same adapters, untrained
    return torch.cat([p.detach().ravel() for p in model.parameters()])


def test_skipping_zero_advantage_groups_gives_the_same_update():
    adv = np.array([0.0, 1.0, 0.0, -1.0])
    out = []
    for skip in (False, True):
        model = build_target("test-llama", seed=0).double()
        grpo = GRPO(model, GRPOConfig(lr=1e-2, skip_zero_advantage=skip))
        assert grpo.trained_rows(adv) == ([1, 3] if skip else [0, 1, 2, 3])
        old, ref = grpo.old_logprobs(PROMPTS, RESPONSES, adv)
        stats = grpo.update(PROMPTS, RESPONSES, adv, old, ref)
        out.append((torch.cat([p.detach().ravel() for p in model.parameters()]), stats))
    (p0, s0), (p1, s1) = out
    assert torch.allclose(p0, p1, atol=1e-12) and s0["loss"] == pytest.approx(s1["loss"])
    kl = GRPO(build_target("test-llama", seed=0), replace(GRPOConfig(skip_zero_advantage=True), kl=0.1),
              reference=build_target("test-llama", seed=0))
    assert kl.trained_rows(adv) == [0, 1, 2, 3]  # with a KL term every response has a gradient


@pytest.mark.slow
def test_a_longtail_run_trains_adapters_and_resumes_them(tmp_path):
    """`--task longtail` on a tiny chat model: the task's update (LoRA, skipped agreeing groups) and temperature
    are the run's config, its checkpoint's target is a plain model with the adapters beside it, and --resume
    continues from them."""
    from test_run_chat import CAP as TINY_CAP, chat_tokenizer

    from real.run.launch import launch
    from tltsim.core.records import Result

    tok = chat_tokenizer()
    model = build_target("test-llama", seed=0, vocab_size=len(tok))
    model.generation_config.eos_token_id = 2
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = RunConfig(policy="verl", workers=2, steps=1, model=str(tmp_path / "model"), task="longtail", prompts=2,
                    group=2, max_new_tokens=TINY_CAP, probe=0, speed_probe=0)
    launch(cfg, tmp_path / "run")
    saved = Result.load(tmp_path / "run").config
    assert saved["task"] == "longtail" and saved["temperature"] == 0.7
    assert saved["grpo"]["lora_rank"] == TASK_GRPO["longtail"]["lora_rank"] and saved["grpo"]["skip_zero_advantage"]
    target = tmp_path / "run" / "checkpoint" / "target"
    assert (target / lora.ADAPTER_FILE).is_file() and not lora.has_lora(load_target(target))
    launch(replace(cfg, steps=2), tmp_path / "run", resume=True)
    assert Result.load(tmp_path / "run").steps["step"].tolist() == [0, 1]
