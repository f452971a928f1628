"""The real backend: torch + transformers models, generation and training.

The folders are its concepts: `engine/` (the batched, lossless speculative rollout engine), `drafters/` (the
drafter interface and one module per drafter), `models/` (targets, the model hub, LoRA, pretraining),
`tasks/` (the reasoning tasks and their rewards), `run/` (`tltsim real run`: workers, GRPO, spot training,
recording), `tools/` (profile, speed); `settings.py` holds every command's settings, torch-free.

Importing the package loads nothing: `tltsim real ... --help` reads only `real.settings` and
`real.models.hub`. The public API below resolves on first use (and then imports torch); scripts and notebooks
use it rather than module paths:

    import real
    target = real.load_target("smollm2-135m")  # after `tltsim real model fetch smollm2-135m`
    drafter = real.load_drafter("shipped", target, "smollm2-135m")
    out = real.generate(target, prompts, drafter, real.GenerateSettings(max_new_tokens=64))
"""
from __future__ import annotations

import importlib

# public name -> the module that defines it
API = {
    "generate": "real.engine.generate",  # generate(target, prompts, drafter=None, settings=...): the rows out
    "Engine": "real.engine.generate",  # the batched rollout engine generate() drives
    "GenerateSettings": "real.settings",
    "SamplingParams": "real.settings",
    "Drafter": "real.drafters.eagle",  # the trained (EAGLE-style) drafter: Drafter.load(path, target)
    "load_drafter": "real.drafters",  # any drafter by kind name, "shipped" or checkpoint path
    "load_target": "real.models.targets",  # a preset, a model directory or a known model's cached copy
    "load_task": "real.models.targets",
    "resolve_model": "real.models.hub",  # a known model's name -> its cached directory; a path as it is
    "fetch_model": "real.models.hub",
}
_ALIASES = {"load_drafter": "load", "fetch_model": "fetch"}

__all__ = sorted(API)


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'real' has no attribute {name!r}")
    value = getattr(importlib.import_module(API[name]), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API))
