"""A drafter's two names, beneath every part that speaks of drafters: its *method* (how it drafts) and its
*training* (how it keeps up with the policy during RL). tltsim.drafter.methods holds what each method costs.

    METHOD_NAMES, TRAINING_NAMES        every method, every training
    TRAINED, MODEL_FREE                 the methods with weights of their own, and those with none
    RUN_METHODS                         the methods a run drafts with alone (all but tltsim's hybrid)
    method_name(text), training_name(text) -> the name, an older spelling read as the name it became (None: neither)

Methods go by vLLM's `speculative_config.method` names where vLLM has one (eagle, eagle3, mtp, draft_model, ngram,
suffix), by verl-SpeCo's for its block drafters (dflash, dspark), plus tltsim's hybrid (suffix where its match is
long and confident, else a trained method). Trainings: spot (on GPUs idle in the rollout's tail, or kept for it),
cotrain (inside the actor update), periodic (every few RL steps, verl-SpeCo), frozen (never).
"""
from __future__ import annotations

METHOD_NAMES = ("eagle", "eagle3", "mtp", "draft_model", "dflash", "dspark", "ngram", "suffix", "hybrid")
MODEL_FREE = ("ngram", "suffix")
RUN_METHODS = tuple(n for n in METHOD_NAMES if n != "hybrid")  # what a run drafts with alone (hybrid: tltsim's)
TRAINED = tuple(n for n in RUN_METHODS if n not in MODEL_FREE)
TRAINING_NAMES = ("spot", "cotrain", "periodic", "frozen")
# older spellings, as recorded runs, saved calibrations and configs carry them -> the name
METHOD_ALIASES = {"draft-model": "draft_model", "block": "dflash", "history": "suffix"}
TRAINING_ALIASES = {"actor-update": "cotrain", "co-train": "cotrain", "spot-train": "spot", "never": "frozen",
                    "freeze": "frozen"}


def method_name(text) -> str | None:
    """`text` as a method's name (an older spelling read as the name it became); None when it names none."""
    name = METHOD_ALIASES.get(text, text) if isinstance(text, str) else None
    return name if name in METHOD_NAMES else None


def training_name(text) -> str | None:
    """`text` as a training's name (an older spelling read as the name it became); None when it names none."""
    name = TRAINING_ALIASES.get(text, text) if isinstance(text, str) else None
    return name if name in TRAINING_NAMES else None
