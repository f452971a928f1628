"""A drafter in two words: its *method* (how it drafts, and so what one speculative iteration's drafting costs) and
its *training* (how it keeps up with the policy during RL). The one vocabulary of the simulator's knobs and cost
rows, real/'s drafters, verl configs, calibrations and the glossary.

    METHODS[name]                        -> Method (the table below)
    method.drafting_time(cost, b, s)     -> seconds of drafting in one speculative iteration of batch b, strategy s

The names themselves (a row for each of tltsim.core.drafter_names.METHOD_NAMES), their older spellings and
which method has weights are tltsim.core.drafter_names'.

Methods go by vLLM's `speculative_config.method` names where vLLM has one, by verl-SpeCo's for its block drafters,
plus tltsim's `hybrid`. Costs are in the cost model's unit of drafting, one forward of the EAGLE-style drafter
(`cost.draft_time`: one decoder layer and the target's lm_head, docs/design.md#the-drafter); a method that drafts
otherwise says how many such forwards, of what size, it runs.

| method | drafts with | forwards per iteration | trains during RL |
|---|---|---|---|
| eagle | EAGLE-1/2: one decoder layer on the target's last hidden state | depth | spot (TLT), periodic (verl-SpeCo) or frozen |
| eagle3 | EAGLE-3: one decoder layer on three of the target's layers | depth | as eagle |
| mtp | the target's own multi-token-prediction heads (verl `actor_rollout_ref.model.mtp`) | depth, one head each | cotrain (`enable_train`) or frozen |
| draft_model | a small model of the target's family | depth, each a whole small model | frozen (a separate model verl does not train) |
| dflash, dspark | a block drafter (verl-SpeCo): one forward proposes the whole block | one, over depth positions | periodic or frozen |
| ngram | prompt lookup: what followed the row's last tokens where they appeared before | none | nothing to train |
| suffix | the prompt, its siblings and earlier responses (SuffixDecoding, DAS; tltsim.drafter.history_quality) | none: a lookup | nothing to train |
| hybrid | per request suffix where its match is long and confident, else a trained method (the config's) | the trained method's | as the trained method |

| training | how the drafter keeps up with the policy |
|---|---|
| spot | trained on GPUs idle in the rollout's tail (TLT), or on GPUs kept for it (tlt-dedicated) |
| cotrain | trained inside the actor update, on the step's batch (verl MTP `enable_train`) |
| periodic | trained every few RL steps (verl-SpeCo's `training_interval_steps`); read from verl configs and calibrations, not simulated |
| frozen | never trained during RL: it goes stale as the policy moves (a model-free method has nothing to go stale) |

Sizes: an MTP head is one decoder layer plus the target's shared lm_head, as the EAGLE drafter (DeepSeek-V3's
MTP module: one Transformer block and the shared output head); EAGLE-3's head proposes among its own draft
vocabulary (EAGLE3_DRAFT_VOCAB entries, where the target's lm_head has its whole vocabulary: the head's read is most
of the forward), its wider input (three hidden states, not one) left out; a draft model is
the smallest preset of the Qwen3 family (`qwen3-0.6b`), its forward sized by its parameters against the EAGLE
forward's, so on a cost model that has no model (a profiled one) it counts as one EAGLE forward; a block
drafter's one forward reads its weights once and computes over depth positions, as one EAGLE forward of a
batch depth times as large.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


DRAFT_MODEL_PRESET = "qwen3-0.6b"
EAGLE3_DRAFT_VOCAB = 32000  # the draft_vocab_size of EAGLE-3's released drafters and SpecForge's configs


@dataclass(frozen=True)
class Method:
    name: str
    drafts_with: str
    forwards: str  # per speculative iteration: "depth", "one" (a block) or "none"
    trains: tuple  # the ways it trains during RL (TRAINING_NAMES), the first its usual one
    source: str  # where the shape comes from
    vocab: int | None = None  # entries of its own output head (EAGLE-3's draft vocabulary); None: the target's

    @property
    def model_free(self) -> bool:
        return self.forwards == "none"

    def drafting_time(self, cost, batch, strategy) -> float:
        """Seconds of drafting in one speculative iteration at `batch` with `strategy` (depth_topk_verify)."""
        if self.forwards == "none":
            return 0.0
        if self.forwards == "one":
            return float(cost.draft_time(batch * strategy.depth, strategy.topk))
        if self.vocab is not None:
            return strategy.depth * float(cost.draft_time(batch, strategy.topk, self.vocab))
        return strategy.depth * _scale(self.name, cost) * float(cost.draft_time(batch, strategy.topk))


METHODS = {m.name: m for m in (
    Method("eagle", "EAGLE-1/2 head on the last hidden state", "depth", ("spot", "periodic", "frozen"),
           "EAGLE (Li et al., 2024), EAGLE-2 dynamic trees; TLT's drafter; verl-SpeCo EAGLE1/EAGLE2; vLLM method eagle"),
    Method("eagle3", "EAGLE-3 head on three fused hidden states", "depth", ("spot", "periodic", "frozen"),
           "EAGLE-3 (Li et al., 2025); verl-SpeCo EAGLE3; vLLM method eagle3", vocab=EAGLE3_DRAFT_VOCAB),
    Method("mtp", "the target's multi-token-prediction heads", "depth", ("cotrain", "frozen"),
           "verl actor_rollout_ref.model.mtp (verl/workers/config/model.py, MtpConfig); DeepSeek-V3 report, MTP "
           "modules; vLLM method mtp"),
    Method("draft_model", "a small model of the target's family", "depth", ("frozen",),
           "vLLM method draft_model, SGLang STANDALONE; sized as the qwen3-0.6b preset"),
    Method("dflash", "a block drafter: one forward proposes the block", "one", ("periodic", "frozen"),
           "verl-SpeCo DFLASH (verl_speco/config/speco_base.yaml)"),
    Method("dspark", "a block drafter: one forward proposes the block", "one", ("periodic", "frozen"),
           "verl-SpeCo DSPARK (verl_speco/config/speco_base.yaml)"),
    Method("ngram", "prompt lookup", "none", ("frozen",), "vLLM method ngram; tltsim.drafter.quality.NgramDrafter"),
    Method("suffix", "the prompt, its siblings and earlier responses", "none", ("frozen",),
           "vLLM method suffix (SuffixDecoding), DAS; tltsim.drafter.history_quality"),
    Method("hybrid", "suffix where its match is long and confident, else a trained method", "depth",
           ("spot", "frozen"), "tltsim: DAS's retrieval beside TLT's drafter (tltsim.drafter.history_quality.hybrid)"),
)}
def _scale(name: str, cost) -> float:
    """One forward of method `name`'s drafter in EAGLE forwards: 1, but a draft model's by parameters where the cost model
    knows the target."""
    model = getattr(cost, "model", None) or getattr(getattr(cost, "base", None), "model", None)
    if name != "draft_model" or model is None:
        return 1.0
    return _draft_model_scale(model.drafter_params + model.vocab * model.hidden)


@lru_cache(maxsize=64)
def _draft_model_scale(eagle_params: int) -> float:
    from tltsim.hardware import load_model

    return load_model(DRAFT_MODEL_PRESET).params / eagle_params
