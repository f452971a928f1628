"""The word-problem task: seeded problems with integer answers, a held-out split, chat-template prompts, the reward."""
from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from real.tasks.wordproblems import WordProblem, WordProblemConfig, WordProblemTask
from tltsim.core.errors import TltsimError

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"


def _tokenizer(template=TEMPLATE):
    words = ["[UNK]", "</s>"] + [str(i) for i in range(100)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="</s>")
    tok.chat_template = template
    return tok


def test_answers_follow_the_operations_and_stay_non_negative_integers():
    p = WordProblem("Mia", "pencils", 14, (("add", 6), ("sub", 9), ("mul", 2), ("div", 2)))
    assert p.answer == 11
    assert p.text == ("Mia has 14 pencils. She buys 6 more. Then she gives away 9. Then she doubles the number of "
                      "pencils. Then she gives half of them to a friend. How many pencils does Mia have now?")
    task = WordProblemTask(_tokenizer())
    for q in task.sample(np.random.default_rng(0), 300):
        x = q.start
        for op, n in q.ops:
            assert op != "div" or x % 2 == 0
            x = {"add": x + n, "sub": x - n, "mul": x * n, "div": x // n}[op]
            assert x >= 0
        assert q.answer == x and 1 <= len(q.ops) <= task.config.max_ops


def test_splits_are_disjoint_seeded_and_sized():
    task = WordProblemTask(_tokenizer())
    train = task.sample(np.random.default_rng(1), 400)
    test = task.sample(np.random.default_rng(1), 100, split="test")
    assert not set(train) & set(test) and all(task.is_heldout(p) for p in test)
    assert train == task.sample(np.random.default_rng(1), 400) and train != task.sample(np.random.default_rng(2), 400)
    share = np.mean([task.is_heldout(p) for p in [task._draw(np.random.default_rng(s)) for s in range(2000)]])
    assert 0.05 < share < 0.15  # heldout_percent 10
    with pytest.raises(TltsimError, match="split"):
        task.sample(np.random.default_rng(0), 1, split="dev")


def test_the_prompt_goes_through_the_chat_template():
    tok = _tokenizer()
    task = WordProblemTask(tok)
    p = task.sample(np.random.default_rng(0), 1)[0]
    ids = task.prompt_ids(p)
    assert ids == tok.apply_chat_template([{"role": "user", "content": f"{p.text} Answer with the final number at "
                                            "the end."}], add_generation_prompt=True, tokenize=True)["input_ids"]
    assert str(p.start) in tok.decode(ids).split()
    with pytest.raises(TltsimError, match="chat template"):
        WordProblemTask(_tokenizer(template=None))


@pytest.mark.parametrize("text,number", [("3 + 4 = 7 apples.", 7), ("#### 1,250\nThe answer is 1,250.", 1250),
                                         ("It goes to -3", -3), ("no idea", None), ("between 4 and 5, 6,", 6)])
def test_the_final_number_is_parsed(text, number):
    assert WordProblemTask.final_number(text) == number


def test_reward_is_one_exactly_for_the_right_final_number():
    task = WordProblemTask(_tokenizer())
    p = WordProblem("Tom", "coins", 3, (("add", 4),))
    assert task.reward(p, "3 + 4 = 7. The answer is 7.") == 1.0
    assert task.reward(p, "The answer is 7, no 8") == 0.0
    assert task.reward(p, task.tokenizer.encode("3 4 7")) == 1.0  # token ids are decoded
    with pytest.raises(TltsimError, match="max_ops"):
        WordProblemConfig(max_ops=0)
