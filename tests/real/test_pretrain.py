"""Pretraining (batches, loss goes down, determinism, checkpoints), evaluation, and the `tltsim real` CLI."""
import json
import os
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
import torch

from real.tasks.evaluate import EvalResult, evaluate
from real.models.targets import load_target
from real.settings import SHIPPED_TARGET
from real.settings import PretrainConfig
from real.models.pretrain import PRETRAIN_FILE, batches, pretrain, train
from real.tasks.gcd import GcdTask, Problem, TaskConfig
from tltsim.cli import main as tltsim_main
from tltsim.core.errors import TltsimError

SHORT = TaskConfig(max_steps=8)  # short problems: a test pretrain takes seconds


def problem_of(text: str) -> Problem:
    """The problem a default-task prompt ("gcd 480 630\\n", digits least-significant first) states."""
    return Problem(int(text[4:7][::-1]), int(text[8:11][::-1]))


def test_batches_mask_prompt_and_padding_and_respect_the_budget():
    task = GcdTask()
    data = batches(task, np.random.default_rng(0), batch_tokens=2048, pool=64)
    for _ in range(8):
        ids, labels = next(data)
        assert ids.numel() <= 2048 and ids.shape == labels.shape
        for row, lab in zip(ids.tolist(), labels.tolist()):
            p = problem_of(task.tokenizer.decode(row))
            assert row[: len(task.prompt_ids(p))] == task.prompt_ids(p)
            n_prompt, solution = len(task.prompt_ids(p)), task.solution_ids(p)
            assert lab[:n_prompt] == [-100] * n_prompt
            assert lab[n_prompt : n_prompt + len(solution)] == solution
            assert set(lab[n_prompt + len(solution) :]) <= {-100}
            assert set(row[n_prompt + len(solution) :]) <= {task.tokenizer.pad_id}


def _short(**kw):
    return PretrainConfig(**{"preset": "test-llama", "steps": 30, "batch_tokens": 512, "warmup": 5,
                             "task": SHORT, **kw})


def test_short_pretrain_lowers_the_loss():
    _, _, result = train(_short())
    assert result.steps == 30 and len(result.losses) == 30
    assert np.mean(result.losses[-5:]) < 0.8 * np.mean(result.losses[:3])


def test_pretrain_is_deterministic_by_seed():
    model, _, result = train(_short(steps=4))
    model2, _, result2 = train(_short(steps=4))
    assert result2.losses == result.losses
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
    assert train(_short(steps=4, seed=1))[2].losses != result.losses


def test_seconds_budget_stops_early():
    assert train(_short(seconds=1e-6))[2].steps == 1


def test_pretrain_writes_a_loadable_checkpoint_and_replaces_an_old_one(tmp_path):
    out = tmp_path / "target"
    first = pretrain(_short(steps=2), out)
    second = pretrain(_short(steps=3, seed=5), out)
    assert (first.steps, second.steps) == (2, 3)
    record = json.loads((out / PRETRAIN_FILE).read_text())
    assert record["config"]["seed"] == 5 and len(record["losses"]) == 3
    assert GcdTask.load(out).config == SHORT
    model = load_target(out)
    assert model.config.num_hidden_layers == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no temporary directories left
    assert out.stat().st_mode & 0o055 == 0o055 & ~_umask()  # readable by others as a plain mkdir makes it


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_config_validation():
    with pytest.raises(TltsimError, match="steps 0"):
        PretrainConfig(steps=0)
    with pytest.raises(TltsimError, match="batch_tokens 100: must hold the longest problem"):
        PretrainConfig(batch_tokens=100)


class Oracle(torch.nn.Module):
    """Stands in for a model: `generate` appends the reference solution (or a wrong answer), padded after eos."""

    def __init__(self, task, wrong=False):
        super().__init__()
        self.task, self.wrong, self.w = task, wrong, torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **_):
        tok, rows = self.task.tokenizer, []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            assert mask == [int(i != pad_token_id) for i in ids]  # left padding, masked
            p = problem_of(tok.decode(ids))  # pad and bos dropped
            answer = p.answer + 1 if self.wrong else p.answer
            rows.append(tok.encode(self.task.solution_text(p).rsplit("=", 1)[0] + f"={answer:03d}") + [eos_token_id])
        rows = [r[:max_new_tokens] for r in rows]
        width = max(map(len, rows))
        return torch.cat([input_ids, torch.tensor([r + [pad_token_id] * (width - len(r)) for r in rows])], dim=1)


def test_evaluate_scores_and_measures_responses():
    task = GcdTask()
    problems = task.sample(np.random.default_rng(0), 30, "test")
    right = evaluate(Oracle(task), task, problems, batch_size=7)
    assert right.accuracy == 1.0 and right.rewards.shape == (30, 1)
    assert right.lengths[:, 0].tolist() == [len(task.solution_ids(p)) for p in problems]
    wrong = evaluate(Oracle(task, wrong=True), task, problems, greedy=False, samples=2, batch_size=16)
    assert wrong.rewards.shape == (30, 2)
    assert wrong.accuracy == 0.0
    cut = evaluate(Oracle(task), task, problems, max_new_tokens=20)
    assert cut.lengths.max() == 20
    assert cut.accuracy == np.mean([len(task.solution_ids(p)) <= 20 for p in problems])


def test_eval_result_statistics():
    r = EvalResult(rewards=np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.0, 1.0]]),
                   lengths=np.array([[10, 20], [30, 40], [50, 60], [70, 800]]))
    assert r.accuracy == 0.5 and r.mixed_fraction == 0.5
    assert r.length_stats()["median"] == 45.0 and r.length_stats()["max"] == 800


def test_evaluate_sampling_repeats_by_seed():
    task = GcdTask(SHORT)
    model = load_target("test-qwen2")
    problems = task.sample(np.random.default_rng(0), 4, "test")
    a = evaluate(model, task, problems, greedy=False, samples=2, max_new_tokens=12, seed=3)
    b = evaluate(model, task, problems, greedy=False, samples=2, max_new_tokens=12, seed=3)
    assert np.array_equal(a.lengths, b.lengths) and np.array_equal(a.rewards, b.rewards)


def test_cli_pretrain_and_evaluate(tmp_path, capsys):
    out = str(tmp_path / "t")
    threads = str(torch.get_num_threads())  # the option is taken; the process keeps its setting
    assert tltsim_main(["real", "pretrain", "--preset", "test-llama", "--steps", "3", "-o", out, "--threads", threads]) == 0
    assert "wrote" in capsys.readouterr().out
    assert tltsim_main(["real", "evaluate", out, "--problems", "2", "--samples", "2", "--max-new-tokens", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("greedy ") and json.loads(lines[1][len("sampled "):])["samples"] == 2


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:  # the argument parser's error, before torch is imported
        tltsim_main(["real", "pretrain", "--steps", "0", "-o", str(tmp_path / "x")])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip() == ("tltsim real pretrain: error: argument --steps: 0 is out of range; "
                                               "give a whole number >= 1; see `tltsim real pretrain --help`")
    assert tltsim_main(["real", "evaluate", str(tmp_path)]) == 2
    assert "neither a save_pretrained directory, a known model nor a preset" in capsys.readouterr().err


def test_real_commands_without_torch_say_what_to_install():
    code = ("import sys; sys.modules['torch'] = None; from tltsim.cli import main; "
            "sys.exit(main(['real', 'pretrain', '-o', 'never-written']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tltsim: error: `tltsim real` needs torch and transformers: pip install tltsim[real]"


def test_tltsim_help_does_not_import_torch():
    code = ("import sys; from tltsim.cli import build_parser; build_parser().format_help(); "
            "assert 'torch' not in sys.modules and 'real' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)



@pytest.mark.slow
def test_shipped_target_is_the_default_pretrain_and_well_short_of_perfect():
    """real/assets/gcd-tiny-llama was made by the current default config (so it is not stale), and leaves RL
    room. benchmarks/results/bench_pretrain.txt measured 62% greedy on 200 held-out problems and 51% mixed
    groups of 8 at temperature 1; here a smaller sample must land in a band around those."""
    record = json.loads((SHIPPED_TARGET / PRETRAIN_FILE).read_text())
    assert record["config"] == json.loads(json.dumps(asdict(PretrainConfig())))
    model, task = load_target(SHIPPED_TARGET), GcdTask.load(SHIPPED_TARGET)
    problems = task.sample(np.random.default_rng(7), 32, "test")  # one generate batch each: 32, and 8 x 8
    assert 0.3 <= evaluate(model, task, problems).accuracy <= 0.85
    assert evaluate(model, task, problems[:8], greedy=False, samples=8, seed=0).mixed_fraction >= 0.25


def test_token_kl_is_zero_for_the_same_target_and_grows_as_it_moves():
    import torch

    from real.tasks.evaluate import token_kl

    start, moved = load_target("test-qwen2"), load_target("test-qwen2")
    sequences = [([1, 5, 9], [4, 4, 7, 2]), ([3], [8, 6])]
    assert token_kl(start, moved, sequences) == pytest.approx(0.0, abs=1e-9)
    kls = []
    for scale in (0.01, 0.1):
        with torch.no_grad():
            for p, q in zip(start.parameters(), moved.parameters()):
                q.copy_(p + scale * torch.randn_like(p, generator=torch.Generator().manual_seed(0)))
        kls.append(token_kl(start, moved, sequences))
    assert 0 < kls[0] < kls[1]
