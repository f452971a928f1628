"""`tltsim real run` and `tltsim real profile` on a chat model: a save_pretrained directory with its own
ChatML tokenizer runs word problems through its chat template (real.models.targets.load_task), stops at the
generation config's end of turn, and is recorded in the simulator's schema."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from real.engine.generate import Engine
from real.models.targets import build_target, load_target, load_task
from real.tools.profile import profile, train_lengths
from real.run.launch import RunConfig, launch
from real.settings import ProfileSettings, SamplingParams
from real.tasks.gcd import GcdTask
from real.tasks.wordproblems import INSTRUCTION, WordProblemTask
from real.run.recorder import recorded_answers
from real.run.problems import recorded_prompts, step_problems
from tltsim.core.records import REQUEST_COLUMNS, STEP_COLUMNS, TIMELINE_COLUMNS, Result
from tltsim.trace import load as load_trace

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
CAP = 24


def chat_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE (300 tokens) trained here on word-problem text, with ChatML's specials and template."""
    drawer = WordProblemTask(SimpleNamespace(chat_template=""))  # problems only: no prompts through it
    rng = np.random.default_rng(0)
    texts = [f"{drawer._draw(rng).text} {INSTRUCTION}" for _ in range(400)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    """test-llama with random weights over that tokenizer; its model config ends at <|endoftext|> and its
    generation config at <|im_end|> (as Qwen2.5-Instruct's do)."""
    tok = chat_tokenizer()
    model = build_target("test-llama", seed=0, vocab_size=len(tok))
    model.config.eos_token_id = model.config.pad_token_id = 0
    model.config.bos_token_id = None
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = 2, 0
    model.generation_config.bos_token_id = None
    out = tmp_path_factory.mktemp("chat") / "model"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_a_chat_model_runs_word_problems_and_stops_at_its_end_of_turn(chat_model):
    task = load_task(chat_model)
    assert isinstance(task, WordProblemTask)
    p = task.sample(np.random.default_rng(0), 1)[0]
    assert task.tokenizer.decode(task.prompt_ids(p)) == f"<|im_start|>user\n{p.text} {INSTRUCTION}<|im_end|>\n" \
                                                       "<|im_start|>assistant\n"
    assert Engine(load_target(chat_model)).eos == {2}  # the generation config's, not the model config's 0
    assert isinstance(load_task("test-llama"), GcdTask)  # a preset keeps the gcd task


@pytest.fixture(scope="module")
def runs(chat_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("chat_runs")
    cfg = RunConfig(workers=2, steps=1, model=str(chat_model), prompts=2, group=2, max_new_tokens=CAP, seed=3,
                    warmup_prompts=4, warmup_steps=3, probe=2, speed_probe=2,
                    knobs={"threshold": 4, "patience": 1, "arms": "4_1_4"})
    launch(cfg, out / "tlt")
    launch(replace(cfg, policy="verl", knobs={}), out / "verl")
    return out, cfg


@pytest.mark.slow
def test_runs_on_a_chat_model_are_recorded_in_the_schema(runs, chat_model):
    out, cfg = runs
    task = load_task(chat_model)
    problems = step_problems(task, cfg.seed, 0, cfg.prompts)
    for policy in ("tlt", "verl"):
        res = Result.load(out / policy)
        assert list(res.timeline.columns) == TIMELINE_COLUMNS and set(STEP_COLUMNS) <= set(res.steps.columns)
        assert set(REQUEST_COLUMNS) <= set(res.requests.columns)
        trace = load_trace(out / policy / "trace.parquet").df
        assert len(trace) == cfg.prompts * cfg.group
        assert trace["reward"].between(0, 1).all()
        assert (trace["response_len"] >= 1).all() and (trace["response_len"] <= CAP).all()
        # the prompts are the step's word problems through the chat template, not gcd prompts
        assert trace["prompt_len"].tolist() == [len(task.prompt_ids(problems[i])) for i in trace["prompt_id"]]
        # recorded_prompts (what benchmarks read a run's answers with) puts each answer behind that prompt
        rows = pd.read_parquet(out / policy / "answers.parquet").merge(trace, on=["step", "prompt_id", "sample"])
        assert [len(p) for p in recorded_prompts(out / policy, task, rows)] == rows["prompt_len"].tolist()
        # and each recorded answer, under the problem step_problems gives it, earns the reward the run recorded
        answers = recorded_answers(out / policy)
        assert [task.reward(problems[r.prompt_id], answers[(r.step, r.prompt_id, r.sample)]) for r in trace.itertuples()] \
            == trace["reward"].tolist()
    assert (Result.load(out / "tlt").timeline["state"] == "spec_decode").any()
    # the checkpoint's target carries the tokenizer, so the task is found there again
    assert isinstance(load_task(out / "tlt" / "checkpoint" / "target"), WordProblemTask)


def test_profile_times_training_on_the_models_own_answer_lengths(chat_model):
    target, task = load_target(chat_model), load_task(chat_model)
    rng = np.random.default_rng(0)
    lengths = train_lengths(target, task, rng, SamplingParams(greedy=False), max_new_tokens=CAP)
    prompts = [len(task.prompt_ids(p)) for p in task.sample(np.random.default_rng(0), len(lengths))]
    assert [p for p, _ in lengths] == prompts
    assert all(1 <= r <= CAP for _, r in lengths)
    df = profile(target, settings=ProfileSettings(batches=(1,), contexts=(8,), strategies=("4_1_4",), repeats=1,
                                                  train_rows=(2,), max_new_tokens=CAP), task=task)
    train = df[df["kind"] == "drafter_train"]
    assert len(train) == 1 and 2 * min(prompts) + 2 <= train["tokens"].iloc[0] <= 2 * (max(prompts) + CAP)


def test_drafter_cli_warms_up_on_the_models_own_answers_and_records_how(chat_model, tmp_path, capsys):
    """`tltsim real drafter` on a chat model: collects, fits with the training-time test, measures on held-out
    problems and writes a drafter that loads onto the target, its provenance the command and settings;
    a bad --unroll is one line and exit 2, before any work."""
    import torch

    from real.drafters.eagle import Drafter
    from tltsim.cli import main

    out, data = tmp_path / "d.pt", tmp_path / "answers.pt"
    args = ["real", "drafter", "--model", str(chat_model), "--problems", "4", "--max-new-tokens", "8", "--steps", "3",
            "--unroll", "2", "--heldout", "2", "--vocab", "40", "--data", str(data), "-o", str(out)]
    assert main(args) == 0
    meta = torch.load(out, weights_only=True)["meta"]
    assert meta["unroll"] == 2 and meta["steps"] == 3 and meta["problems"] == 4 and "--unroll 2" in meta["command"]
    assert meta["draft_vocab"] <= 40 and meta["heldout_tokens_per_call_4_1_4"] >= 1 and data.is_file()
    drafter = Drafter.load(out, load_target(chat_model))
    assert len(drafter.draft_vocab) == meta["draft_vocab"] and meta["dtype"] == "float32"
    # in bfloat16 (a bf16 run's features): the float32 answers in --data are not reused, they are collected again
    bf16 = tmp_path / "d16.pt"
    assert main(args[:-1] + [str(bf16), "--dtype", "bfloat16"]) == 0
    meta16 = torch.load(bf16, weights_only=True)["meta"]
    assert meta16["dtype"] == "bfloat16" and "--dtype bfloat16" in meta16["command"]
    assert torch.load(data, weights_only=True)["meta"]["dtype"] == "bfloat16"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # refused by the parser, before any work
        main(args[:-2] + ["--unroll", "0", "-o", str(tmp_path / "bad.pt")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "argument --unroll: 0 is out of range" in err[0]
    assert not (tmp_path / "bad.pt").exists()


def test_drafter_cli_can_warm_up_on_sampled_answers_and_continue_a_drafter(chat_model, tmp_path, capsys):
    """--temperature samples the answers (seeded: the same seed, the same answers) and records it; greedy answers
    kept in --data are not reused for sampled ones. --init continues a drafter's trained weights under the new
    answers' draft vocabulary."""
    import torch

    from real.drafters.eagle import Drafter
    from tltsim.cli import main

    common = ["real", "drafter", "--model", str(chat_model), "--problems", "4", "--max-new-tokens", "8",
              "--heldout", "1", "--vocab", "40"]
    runs = {}
    for name, extra in (("greedy", ["--steps", "20", "--lr", "0.01"]), ("hot", ["--temperature", "5", "--steps", "1"]),
                        ("hot_again", ["--temperature", "5", "--steps", "1"])):
        data = tmp_path / f"{name}.answers"
        assert main(common + extra + ["--data", str(data), "-o", str(tmp_path / f"{name}.pt")]) == 0
        runs[name] = torch.load(data, weights_only=True)
    meta = torch.load(tmp_path / "greedy.pt", weights_only=True)["meta"]
    assert meta["lr"] == 0.01 and "--lr 0.01" in meta["command"] and meta["init"] is None
    meta = torch.load(tmp_path / "hot.pt", weights_only=True)["meta"]
    assert meta["temperature"] == 5 and "--temperature 5" in meta["command"]
    assert "temperature" not in runs["greedy"]["meta"] and runs["hot"]["meta"]["temperature"] == 5
    tokens = {k: [t.tolist() for t, _ in v["pairs"]] for k, v in runs.items()}
    assert tokens["hot"] == tokens["hot_again"] and tokens["hot"] != tokens["greedy"]

    cont = tmp_path / "cont.pt"  # one step at a vanishing rate: the greedy drafter's weights, the hot vocabulary
    assert main(common + ["--temperature", "5", "--steps", "1", "--lr", "1e-12", "--data", str(tmp_path / "hot.answers"),
                          "--init", str(tmp_path / "greedy.pt"), "-o", str(cont)]) == 0
    target = load_target(chat_model)
    greedy, hot, continued = (Drafter.load(tmp_path / f"{n}.pt", target) for n in ("greedy", "hot", "cont"))
    assert torch.load(cont, weights_only=True)["meta"]["init"] == str(tmp_path / "greedy.pt")
    assert continued.draft_vocab.tolist() == hot.draft_vocab.tolist() != greedy.draft_vocab.tolist()
    assert torch.equal(continued.fc.weight, greedy.fc.weight) and not torch.equal(hot.fc.weight, greedy.fc.weight)
    capsys.readouterr()  # a bad --init: one line and exit 2, before any answer is collected
    assert main(common + ["--init", str(tmp_path / "hot.answers"), "-o", str(tmp_path / "bad.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hot.answers: not a drafter checkpoint" in err[0] and "collected" not in err[0]
    assert not (tmp_path / "bad.pt").exists()
