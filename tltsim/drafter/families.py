"""Drafter families: what one speculative iteration's drafting costs, and how each kind of drafter trains during RL.

    FAMILIES[name]                       -> Family (the table below)
    family.drafting_time(cost, b, s)     -> seconds of drafting in one speculative iteration of batch b, strategy s

One row per family, with where its shape comes from. Costs are in the cost model's unit of drafting, one forward of
the EAGLE-style drafter (`cost.draft_time`: one decoder layer and the target's lm_head, docs/design.md#the-drafter);
a family that drafts otherwise says how many such forwards, of what size, it runs.

| family | drafts with | forwards per iteration | trains during RL |
|---|---|---|---|
| mtp | the target's own multi-token-prediction heads (verl `actor_rollout_ref.model.mtp`) | depth, one head each | inside the actor update (`enable_train`, a loss on the same batch) or never |
| eagle | EAGLE-1/2: one decoder layer on the target's last hidden state | depth | on idle GPUs (TLT's spot trainer), periodically (verl-SpeCo), or never |
| eagle3 | EAGLE-3: one decoder layer on three of the target's layers | depth | as eagle |
| draft-model | a small model of the target's family | depth, each a whole small model | never (a separate model verl does not train) |
| block | a block drafter (DFlash, DSpark in verl-SpeCo): one forward proposes the whole block | one, over depth positions | periodically (verl-SpeCo) or never |
| history | the prompt, its siblings and earlier responses (tltsim.drafter.history_quality) | none: a lookup | never |
| ngram | prompt lookup | none | never |

Sizes: an MTP head is one decoder layer plus the target's shared lm_head, as the EAGLE drafter (DeepSeek-V3's
MTP module: one Transformer block and the shared output head); EAGLE-3's wider input (three hidden states, not
one) and its reduced draft vocabulary are left out (the lm_head's read dominates the forward); a draft model is
the smallest preset of the Qwen3 family (`qwen3-0.6b`), its forward sized by its parameters against the EAGLE
forward's, so on a cost model that has no model (a profiled one) it counts as one EAGLE forward; a block
drafter's one forward reads its weights once and computes over depth positions, as one EAGLE forward of a
batch depth times as large.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

TRAINING = ("actor-update", "spot", "periodic", "never")
DRAFT_MODEL_PRESET = "qwen3-0.6b"


@dataclass(frozen=True)
class Family:
    name: str
    drafts_with: str
    forwards: str  # per speculative iteration: "depth", "one" (a block) or "none"
    trains: tuple  # the ways it trains during RL (TRAINING), the first its usual one
    source: str  # where the shape comes from

    @property
    def model_free(self) -> bool:
        return self.forwards == "none"

    def drafting_time(self, cost, batch, strategy) -> float:
        """Seconds of drafting in one speculative iteration at `batch` with `strategy` (depth_topk_verify)."""
        if self.forwards == "none":
            return 0.0
        if self.forwards == "one":
            return float(cost.draft_time(batch * strategy.depth, strategy.topk))
        return strategy.depth * _scale(self.name, cost) * float(cost.draft_time(batch, strategy.topk))


FAMILIES = {f.name: f for f in (
    Family("mtp", "the target's multi-token-prediction heads", "depth", ("actor-update", "never"),
           "verl actor_rollout_ref.model.mtp (verl/workers/config/model.py, MtpConfig); DeepSeek-V3 report, MTP "
           "modules"),
    Family("eagle", "EAGLE-1/2 head on the last hidden state", "depth", ("spot", "periodic", "never"),
           "EAGLE (Li et al., 2024), EAGLE-2 dynamic trees; TLT's drafter; verl-SpeCo EAGLE1/EAGLE2"),
    Family("eagle3", "EAGLE-3 head on three fused hidden states", "depth", ("spot", "periodic", "never"),
           "EAGLE-3 (Li et al., 2025); verl-SpeCo EAGLE3; vLLM method eagle3"),
    Family("draft-model", "a small model of the target's family", "depth", ("never",),
           "vLLM method draft_model, SGLang STANDALONE; sized as the qwen3-0.6b preset"),
    Family("block", "a block drafter: one forward proposes the block", "one", ("periodic", "never"),
           "verl-SpeCo DFLASH, DSPARK (verl_speco/config/speco_base.yaml)"),
    Family("history", "the prompt, its siblings and earlier responses", "none", ("never",),
           "SuffixDecoding, DAS; tltsim.drafter.history_quality"),
    Family("ngram", "prompt lookup", "none", ("never",), "vLLM method ngram; tltsim.drafter.quality.NgramDrafter"),
)}


def _scale(name: str, cost) -> float:
    """One forward of `name`'s drafter in EAGLE forwards: 1, but a draft model's by parameters where the cost model
    knows the target."""
    model = getattr(cost, "model", None) or getattr(getattr(cost, "base", None), "model", None)
    if name != "draft-model" or model is None:
        return 1.0
    return _draft_model_scale(model.drafter_params + model.vocab * model.hidden)


@lru_cache(maxsize=64)
def _draft_model_scale(eagle_params: int) -> float:
    from tltsim.hardware import load_model

    return load_model(DRAFT_MODEL_PRESET).params / eagle_params
