"""Write the example verl run of this directory: the three files a verl run leaves, in verl's formats.

    python examples/verl/make_examples.py     # from the repository root; rewrites the files below

    tokenizer/                 a small byte-level BPE tokenizer (transformers directory), trained on the texts
    rollout/{1..STEPS}.jsonl   the rollout dump (trainer.rollout_data_dir): one line per sample
    run/.hydra/config.yaml     the run's Hydra config (the verl keys tltsim reads, verl's structure)
    metrics.jsonl              the file logger's JSONL (VERL_FILE_LOGGER_PATH)

No GPU ran here. The response lengths follow the simulator's `dapo` trace family (median MEDIAN tokens,
cap CAP); each text is made of words until the tokenizer counts that many tokens. The lines of a step are
shuffled, as verl's trainer.balance_batch reorders a batch before dumping it. The metrics' timings are the
simulator's verl prediction for the trace read back from the dump, on the config's cluster with GPU,
times FACTOR, with NOISE relative noise per value: a run on a cluster FACTOR times slower than the
roofline model, so calibrating on these files should give back about FACTOR. The response_length
metrics count one more token than the text (verl counts the EOS token) unless the response hit the cap.
Deterministic: the same script writes the same bytes.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tltsim.config import ClusterConfig, CostParams, SimConfig
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth
from tltsim.trace.tokens import token_counter
from tltsim.trace.verl import read_rollout_dump

HERE = Path(__file__).resolve().parent
STEPS, PROMPTS, GROUP, CAP, MEDIAN, SEED = 4, 8, 4, 1024, 200, 0
GPU, GPUS, TP, MEM, MAX_SEQS, MODEL = "h100", 8, 2, 0.6, 256, "Qwen/Qwen2.5-7B-Instruct"
FACTOR, NOISE = 1.3, 0.03
WORDS = ("let the number be x so that twice x plus three equals seven then we check each case "
         "first second because therefore wait maybe answer is compute sum of all digits divide by "
         "remainder prime factor square root of each term and carry one over").split()


def main() -> None:
    rng = np.random.default_rng(SEED)
    prompts = [_prompt(rng, i) for i in range(STEPS * PROMPTS)]
    tok = _tokenizer(prompts + [_words(rng, 400) for _ in range(50)])
    lengths = synth("dapo", STEPS, PROMPTS, GROUP, CAP, seed=SEED, median=MEDIAN).df
    _dump(tok, prompts, lengths, rng)
    _config()
    trace = read_rollout_dump(HERE / "rollout", token_counter(str(HERE / "tokenizer")))
    _metrics(trace, rng)


def _prompt(rng, i: int) -> str:
    a, b = rng.integers(2, 99, size=2)
    return f"Problem {i}: find x such that {a} x + {b} = {a * 7 + b}. Think step by step."


def _words(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n))


def _tokenizer(corpus: list[str]) -> Tokenizer:
    out = HERE / "tokenizer"
    shutil.rmtree(out, ignore_errors=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>").save_pretrained(out)
    return tok


def _response(tok: Tokenizer, rng, n: int) -> str:
    """Words cut where the tokenizer has counted n tokens."""
    text = _words(rng, n)  # at least one token a word
    end = tok.encode(text).offsets[n - 1][1]
    return text[:end]


def _dump(tok, prompts, lengths, rng) -> None:
    out = HERE / "rollout"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for s in range(STEPS):
        rows = lengths[lengths.step == s]
        lines = []
        for r in rows.itertuples():
            response = _response(tok, rng, int(r.response_len))
            score = float(rng.random() < 0.4)
            lines.append({"input": prompts[s * PROMPTS + r.prompt_id], "output": response, "gts": "7",
                          "score": score, "step": s + 1, "acc": bool(score)})
        order = rng.permutation(len(lines))  # trainer.balance_batch reorders the batch before the dump
        (out / f"{s + 1}.jsonl").write_text("".join(json.dumps(lines[i], ensure_ascii=False) + "\n" for i in order),
                                            encoding="utf-8")


def _config() -> None:
    cfg = {
        "data": {"train_batch_size": PROMPTS, "max_prompt_length": 256, "max_response_length": CAP},
        "actor_rollout_ref": {
            "model": {"path": MODEL},
            "rollout": {"name": "vllm", "mode": "async", "n": GROUP, "tensor_model_parallel_size": TP,
                        "gpu_memory_utilization": MEM, "max_num_seqs": MAX_SEQS,
                        "prompt_length": "${oc.select:data.max_prompt_length,512}",
                        "response_length": "${oc.select:data.max_response_length,512}"},
        },
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"n_gpus_per_node": GPUS, "nnodes": 1, "balance_batch": True, "logger": ["console", "file"],
                    "rollout_data_dir": "rollout", "total_training_steps": STEPS},
    }
    path = HERE / "run" / ".hydra" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")


def _metrics(trace, rng) -> None:
    cfg = SimConfig(cluster=ClusterConfig(gpus=GPUS, tp=TP, gpu=GPU, model="qwen2.5-7b", max_running=MAX_SEQS),
                    cost=CostParams(mem_fraction=MEM), policy="verl")
    steps = Simulator(trace, cfg).run().steps.set_index("step")
    lines, elapsed = [{"step": 0, "data": {"val-core/math/acc/mean@1": 0.21}}], 0.0
    for s, r in steps.iterrows():
        noisy = lambda x: round(float(x) * FACTOR * (1 + NOISE * rng.standard_normal()), 4)  # noqa: E731
        gen, reward, old, update = noisy(r.rollout_s), noisy(r.reward_s), 0.0, noisy(r.train_s)
        sync = noisy(r.sync_s)
        step_s = round(gen + reward + update + sync, 4)
        lens = trace.df[trace.df.step == s]["response_len"].to_numpy()
        recorded = np.where(lens >= CAP, lens, lens + 1)  # verl counts the EOS token of a finished response
        elapsed += step_s
        lines.append({"step": int(s), "elapsed_seconds": round(elapsed, 3), "data": {
            "timing_s/gen": gen, "timing_s/reward": reward, "timing_s/old_log_prob": old,
            "timing_s/update_actor": update, "timing_s/update_weights": sync, "timing_s/step": step_s,
            "response_length/mean": float(recorded.mean()), "response_length/max": int(recorded.max()),
            "response_length/min": int(recorded.min()), "response_length/clip_ratio": float((lens >= CAP).mean()),
            "critic/score/mean": float(trace.df[trace.df.step == s]["reward"].mean())}})
    (HERE / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
