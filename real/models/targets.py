"""Target models: named config presets (Llama and Qwen2), loading from a local directory, and the task a
target runs on (`load_task`).

A preset builds a transformers config in code and a randomly initialised model
from it; a directory is one written by `save_pretrained` (e.g. by `tltsim real
pretrain`); a known pretrained model's name (real.models.hub.KNOWN, e.g. smollm2-135m)
is its directory in the user's cache, made by `tltsim real model fetch`. Every preset uses grouped-query attention
(fewer key/value heads than query heads), as the models TLT targets do.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from real.checks import check_target, check_tokenizer, plan_task, unknown_target
from real.models.hub import resolve_model
from real.settings import PRESETS
from real.tasks.gcd import GcdTask, Tokenizer
from real.tasks.wordproblems import WordProblemTask
from tltsim.core.errors import TltsimError


def target_config(preset: str, vocab_size: int | None = None):
    """The transformers config of preset `preset`, for the task tokenizer's vocabulary by default."""
    if preset not in PRESETS:
        raise unknown_target(preset)
    p = PRESETS[preset]
    tok = Tokenizer()
    common = dict(
        vocab_size=vocab_size or tok.vocab_size, hidden_size=p.hidden, intermediate_size=p.ffn,
        num_hidden_layers=p.layers, num_attention_heads=p.heads, num_key_value_heads=p.kv_heads,
        max_position_embeddings=p.max_len, tie_word_embeddings=True,
        pad_token_id=tok.pad_id, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
    )
    if p.arch == "llama":
        return LlamaConfig(**common)
    return Qwen2Config(**common, use_sliding_window=False)


def build_target(preset: str, seed: int = 0, vocab_size: int | None = None) -> torch.nn.Module:
    """A randomly initialised model of `preset`; the same seed gives the same weights.

    The global torch RNG is forked, so building a model leaves it as it was.
    """
    config = target_config(preset, vocab_size)
    cls = LlamaForCausalLM if isinstance(config, LlamaConfig) else Qwen2ForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    return model.eval()


def load_target(path_or_preset: str | Path, device: str | torch.device = "cpu", seed: int = 0,
                dtype: str | None = None) -> torch.nn.Module:
    """A model from a `save_pretrained` directory or a known model's name (real.models.hub.resolve_model), or a
    fresh one of a named preset (weights from `seed`).

    A directory wins over a preset of the same name. Returned in eval mode on `device`, in `dtype` (a torch
    dtype's name, as a run's --dtype; default: as stored).
    """
    path = Path(resolve_model(path_or_preset))
    check_target(path)
    if (path / "config.json").is_file():
        model = AutoModelForCausalLM.from_pretrained(path)
    else:
        model = build_target(str(path_or_preset), seed)
    return model.to(device=device, dtype=getattr(torch, dtype) if dtype else None).eval()


def load_tokenizer(path_or_name: str | Path):
    """The transformers tokenizer (with its chat template) of a save_pretrained directory or a known model."""
    from transformers import AutoTokenizer

    path = check_tokenizer(path_or_name)
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise TltsimError(f"{path}: its tokenizer does not load ({e}); save the tokenizer beside the model") from None


def load_task(path_or_name: str | Path, task: str | None = None) -> GcdTask | WordProblemTask:
    """The task a target runs on: `task` by name (real.settings.TASKS) or, without one, its own: the GcdTask
    of a `tltsim real pretrain` directory (its task file); word problems through the chat template of a
    save_pretrained directory's (or a known model's) own tokenizer; the default GcdTask for a preset.
    TltsimError for a directory with neither a task file nor a tokenizer, or a task the target cannot run
    (real.checks.plan_task decides, without loading anything)."""
    plan = plan_task(path_or_name, task)
    return plan if isinstance(plan, GcdTask) else plan(load_tokenizer(path_or_name))


def default_eos(target) -> int | list[int] | None:
    """The end-of-sequence id(s) a model stops at, as transformers' `generate` takes them: its generation
    config's (an instruct model's end of turn, e.g. ChatML's <|im_end|>), else its model config's."""
    eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
    return target.config.eos_token_id if eos is None else eos
