"""The gcd task: tokenizer, problem generator and its length distribution, reward, persistence."""
import math

import numpy as np
import pytest

from real.tasks.gcd import TASK_FILE, GcdTask, Problem, TaskConfig, Tokenizer
from tltsim.core.errors import TltsimError


@pytest.fixture(scope="module")
def task():
    return GcdTask()


def test_tokenizer_round_trip_and_specials():
    tok = Tokenizer()
    rng = np.random.default_rng(0)
    for _ in range(50):
        text = "".join(rng.choice(list(Tokenizer.ALPHABET), size=rng.integers(0, 40)))
        ids = tok.encode(text)
        assert all(len(Tokenizer.SPECIALS) <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text
    ids = tok.encode("12\n=3")
    # bos and pad are dropped; decoding stops at the first eos
    assert tok.decode([tok.bos_id, *ids, tok.pad_id, tok.eos_id, *tok.encode("99")]) == "12\n=3"
    assert len({tok.pad_id, tok.bos_id, tok.eos_id}) == 3


def test_tokenizer_rejects_unknown_characters():
    with pytest.raises(TltsimError, match="'x' is not in the alphabet"):
        Tokenizer().encode("12x")


def test_solution_is_subtractive_euclid(task):
    p = Problem(84, 36)
    assert task.prompt_text(p) == "gcd 480 630\n"  # least-significant digit first
    assert task.solution_text(p) == "840 630\n210 630\n210 420\n210 210\n=012"
    assert task.num_steps(p) == 4
    assert task.solution_text(Problem(7, 7)) == "=007"
    assert task.prompt_ids(p)[0] == task.tokenizer.bos_id
    assert task.solution_ids(p)[-1] == task.tokenizer.eos_id


def test_num_steps_counts_solution_lines(task):
    for p in task.sample(np.random.default_rng(1), 300):
        text = task.solution_text(p)
        assert text.count("\n") == task.num_steps(p) <= task.config.max_steps
        assert text.endswith(f"={p.answer:03d}")
        assert len(task.solution_ids(p)) <= task.max_response_tokens


def test_plain_digit_order():
    t = GcdTask(TaskConfig(lsb_first=False))
    assert t.prompt_text(Problem(84, 36)) == "gcd 084 036\n"
    assert t.solution_text(Problem(84, 36)) == "048 036\n012 036\n012 024\n012 012\n=012"


def test_response_lengths_are_long_tailed(task):
    """The reference response lengths of the default generator: ~10 to ~500 tokens, median ~100, p99 >= 3x median."""
    lengths = np.array([len(task.solution_ids(p)) for p in task.sample(np.random.default_rng(2), 4000)])
    median, p99 = np.median(lengths), np.percentile(lengths, 99)
    assert lengths.min() <= 15
    assert 85 <= median <= 140
    assert 350 <= p99 <= task.max_response_tokens
    assert p99 / median >= 3
    assert lengths.max() <= task.max_response_tokens == 517


def test_splits_are_disjoint_and_deterministic(task):
    train = task.sample(np.random.default_rng(3), 500, "train")
    test = task.sample(np.random.default_rng(3), 500, "test")
    assert not any(task.is_heldout(p) for p in train)
    assert all(task.is_heldout(p) for p in test)
    assert task.sample(np.random.default_rng(3), 500, "train") == train
    pairs = [Problem(a, b) for a in range(1, 200) for b in range(1, 200)]
    assert 0.07 < np.mean([task.is_heldout(p) for p in pairs]) < 0.13
    with pytest.raises(TltsimError, match="split 'val'"):
        task.sample(np.random.default_rng(0), 1, "val")


def test_reward_hand_cases(task):
    p = Problem(84, 36)
    assert math.gcd(84, 36) == p.answer == 12
    right = task.solution_text(p)
    assert task.reward(p, right) == 1.0
    assert task.reward(p, task.solution_ids(p) + [task.tokenizer.pad_id] * 3) == 1.0  # ids, eos, padding
    assert task.reward(Problem(5, 5), "=005") == 1.0
    assert task.reward(p, right[:-1] + "3") == 0.0  # wrong answer after a right chain
    assert task.reward(p, "=012") == 0.0  # right answer, chain skipped
    assert task.reward(p, right.replace("210 420", "210 520")) == 0.0  # a wrong step
    assert task.reward(p, right.replace("=012", "=12")) == 0.0  # answer not zero-padded
    # malformed: no answer line, trailing text, truncated, empty, garbage
    assert task.reward(p, "840 630\n210 630\n") == 0.0
    assert task.reward(p, right + "\n210 210") == 0.0
    assert task.reward(p, task.solution_ids(p)[:-4]) == 0.0
    assert task.reward(p, "") == 0.0
    assert task.reward(p, "gcd\n=") == 0.0


def test_answer_only_reward_would_pay_guessing(task):
    """Why the reward checks the derivation: most pairs are coprime, so `=001` alone would often be right."""
    problems = task.sample(np.random.default_rng(4), 1000)
    assert np.mean([p.answer == 1 for p in problems]) > 0.5
    assert np.mean([task.reward(p, "=001") for p in problems]) == np.mean([p.a == p.b == 1 for p in problems])


def test_config_validation():
    with pytest.raises(TltsimError, match="width 0"):
        TaskConfig(width=0)
    with pytest.raises(TltsimError, match="heldout_percent 100"):
        TaskConfig(heldout_percent=100)


def test_save_and_load(tmp_path):
    t = GcdTask(TaskConfig(max_steps=20))
    t.save(tmp_path)
    assert GcdTask.load(tmp_path).config == t.config
    with pytest.raises(TltsimError, match="not found"):
        GcdTask.load(tmp_path / "nowhere")
    (tmp_path / TASK_FILE).write_text('{"task": "sort", "config": {}, "alphabet": ""}')
    with pytest.raises(TltsimError, match="another task"):
        GcdTask.load(tmp_path)
