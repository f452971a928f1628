"""The configuration of a `tltsim real run` (what config.json holds), checked before any worker starts."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from real.settings import SHIPPED_TARGET, TASK_TEMPERATURE, TASKS, GRPOConfig, SamplingParams, task_grpo
from tltsim.control.decisions import VARIANTS, DecisionKnobs
from tltsim.control.knobs import build
from tltsim.control.strategy import parse_arms
from tltsim.errors import TltsimError

POLICIES = ("verl", "tlt", "static-sd", "sd-always", "tlt-auto", "das", "das+tlt")
SPOT_KNOBS = ("min_idle", "cadence", "buffer_steps", "keep_long_prev")  # what spot training alone reads
ANSWERS_FILE = "answers.parquet"  # in a run directory: every response's token ids (real.run.recorder writes it)
DTYPES = ("float32", "float64", "bfloat16")  # torch dtypes by name (torch.float32 ...), resolved in the worker
# spot training's learning rate from a converged warm start: the shipped SmolLM2 drafter, spot-trained 30 batches on
# a step's 8 answers with the target fixed, went 2.72 -> 2.38 tokens per call at 1e-3, 2.61 at 1e-4, 2.81 at 1e-5
# (benchmarks/results/NOTES.md, "Why the spot-trained drafter fell behind")
WARM_SPOT_LR = 1e-5


@dataclass(frozen=True)
class RunConfig:
    policy: str = "tlt"  # one of POLICIES
    workers: int = 2  # worker processes (one rollout engine each)
    steps: int = 3  # RL steps in all (a resumed run may raise it)
    model: str = str(SHIPPED_TARGET)  # save_pretrained directory (with the task file) or a preset (random weights)
    task: str | None = None  # one of real.settings.TASKS, e.g. longtail (None: the model's own, real.models.targets.load_task)
    drafter: str | None = None  # trained drafter checkpoint to start from (das+tlt: the hybrid's trained part); None:
    # a known model's shipped one, else warm one up (das: none, it drafts from the rollout's history alone)
    device: str = "cpu"  # cpu or cuda (rank r uses cuda:r mod device count; NCCL when every rank has its own GPU)
    dtype: str = "float32"  # target and drafter dtype (float64 makes greedy ties impossible in tests)
    prompts: int = 8  # prompts per step
    group: int = 4  # samples per prompt (GRPO group size)
    seed: int = 0  # prompts, sampling, tuners, drafter init and batches
    greedy: bool = False  # argmax decoding (every sample of a group is then the same)
    temperature: float | None = None  # sampling temperature when not greedy (None: the task's, real.settings)
    max_new_tokens: int | None = None  # response cap (None: the task's default, max_response_tokens; validate sets it)
    max_running: int | None = None  # rows an engine runs at once (None: its whole share)
    knobs: dict = field(default_factory=dict)  # DecisionKnobs overrides (see tltsim/control/decisions.py)
    grpo: GRPOConfig | None = None  # the target's update (None: the task's defaults, real.settings.task_grpo)
    warmup_prompts: int = 32  # drafter warm-up (no --drafter): responses of the initial target to train on
    warmup_steps: int = 40  # ... and AdamW steps on them (short: the run's own training should matter)
    drafter_batch: int = 8  # sequences per drafter training batch (warm-up and spot training)
    drafter_lr: float = 1e-3  # drafter AdamW learning rate of the warm-up (no --drafter)
    spot_lr: float | None = None  # ... and of spot training (None: WARM_SPOT_LR from a drafter warmed up before the
    # run, --drafter or a shipped one; drafter_lr after the run's own short warm-up, which is far from converged)
    probe: int = 8  # held-out prompts the drafter's accepted length is measured on before each step (0: off)
    probe_static: bool = False  # also probe the starting drafter, never trained (steps column static_drafter_accepted)
    speed_probe: int = 8  # plain decode iterations that time the machine before each step (0: off; validate --speed)
    answers: str | None = None  # a recorded run directory whose responses this run emits token for token (None: its own)

    def checked(self) -> "RunConfig":
        """This config, checked (TltsimError for a bad value), with max_new_tokens set if it was None."""
        if self.policy not in POLICIES:
            extra = " (tlt-base's n-gram drafter is the simulator's; the real engine's drafter without a model is " \
                    "history drafting: das)" \
                if self.policy == "tlt-base" else ""
            raise TltsimError(f"policy {self.policy!r}: real runs offer {', '.join(POLICIES)}{extra}")
        if self.task is not None and self.task not in TASKS:
            raise TltsimError(f"task {self.task!r}: use one of {', '.join(TASKS)}")
        if self.grpo is None:
            return replace(self, grpo=task_grpo(self.task)).checked()
        if self.temperature is None:
            return replace(self, temperature=TASK_TEMPERATURE.get(self.task or "", 1.0)).checked()
        if self.max_new_tokens is None:
            return replace(self, max_new_tokens=self.make_task().max_response_tokens).checked()
        for name in ("workers", "steps", "prompts", "group", "max_new_tokens", "drafter_batch"):
            if getattr(self, name) < 1:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 1")
        if self.spot_lr is not None and not self.spot_lr > 0:
            raise TltsimError(f"spot_lr={self.spot_lr}: must be > 0")
        for name in ("probe", "speed_probe"):
            if getattr(self, name) < 0:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 0 (0 turns it off)")
        if self.prompts < self.workers:
            raise TltsimError(f"prompts={self.prompts} < workers={self.workers}: every worker needs a prompt group")
        if self.device not in ("cpu", "cuda"):
            raise TltsimError(f"device {self.device!r}: use cpu or cuda")
        if self.device == "cuda" and not _cuda_available():
            raise TltsimError("device cuda: no CUDA device is visible; use --device cpu")
        if self.dtype not in DTYPES:
            raise TltsimError(f"dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.max_running is not None and self.max_running < 1:
            raise TltsimError(f"max_running={self.max_running}: must be >= 1")
        SamplingParams(self.greedy, self.temperature)
        knobs = self.tlt_knobs()
        if self.drafter is not None:
            self._check_drafter(knobs)
        if self.answers is not None:
            self._check_answers()
        if self.probe_static and not (knobs and knobs.spot):
            raise TltsimError(f"--probe-static: policy {self.policy!r} trains no drafter, so there is no starting "
                              f"drafter to probe beside it; drop --probe-static")
        return self

    def _check_drafter(self, knobs: DecisionKnobs | None) -> None:
        """That `drafter` is a trained drafter's checkpoint the policy starts from; TltsimError else."""
        from real.drafters import DRAFTERS, SHIPPED  # no torch: the registry's names

        if knobs is None:  # verl: the baseline of a pair takes the pair's arguments and loads no drafter
            return
        if knobs.drafter == "history":
            raise TltsimError(f"--drafter {self.drafter}: policy {self.policy!r} loads no trained drafter (it drafts "
                              f"from the rollout history alone); drop --drafter")
        if self.drafter in DRAFTERS or self.drafter == SHIPPED:
            raise TltsimError(f"--drafter {self.drafter}: a run's --drafter is a trained drafter's checkpoint; the "
                              f"policy picks the kind (das: suffix, das+tlt: hybrid) and a known model's shipped "
                              f"drafter is the default")

    def _check_answers(self) -> None:
        """That `answers` is a run directory holding every response this run will generate: the same target, task,
        prompts, groups, cap, sampling and seed, and at least `steps` steps; TltsimError else."""
        where = Path(self.answers)
        if not (where / "config.json").is_file():
            raise TltsimError(f"--answers {where}: not a run directory (no config.json); give one `tltsim real run -o` wrote")
        if not (where / ANSWERS_FILE).is_file():
            raise TltsimError(f"--answers {where}: no {ANSWERS_FILE} (a run recorded before runs kept their answers); "
                              f"record the run again")
        recorded, mine = json.loads((where / "config.json").read_text()), asdict(self)
        for name in ("model", "task", "seed", "prompts", "group", "max_new_tokens", "greedy", "temperature", "grpo"):
            if recorded.get(name) != mine[name]:  # the same prompts, answers drawn alike, the target trained alike
                raise TltsimError(f"--answers {where}: its {name} is {recorded.get(name)!r}, this run's {mine[name]!r}; "
                                  f"a run replays the answers of a run of the same prompts, sampling and training")
        per_step = pd.read_parquet(where / ANSWERS_FILE, columns=["step"])["step"].value_counts()
        whole = next((s for s in range(self.steps) if per_step.get(s, 0) < self.prompts * self.group), self.steps)
        if whole < self.steps:  # a run stopped early holds fewer steps than its config.json asked for
            raise TltsimError(f"--answers {where}: holds the answers of {whole} whole steps, this run asks for "
                              f"{self.steps}; run at most {whole} steps")

    def make_task(self):
        """The run's task: `task` by name, or the target's own (real.models.targets.load_task: its checkpoint's task
        file, word problems through a chat model's own template, the default task for a preset)."""
        from real.models.targets import load_task  # transformers: only when a run is set up

        return load_task(self.model, self.task)

    def tlt_knobs(self) -> DecisionKnobs | None:
        """The policy's decision knobs (None for verl); TltsimError for unknown ones (the simulator's models of
        the drafter and of training, which a real run measures instead, are not knobs here)."""
        if self.policy == "verl":
            if self.knobs:
                raise TltsimError(f"policy 'verl' has no knobs; drop {', '.join(sorted(self.knobs))}")
            return None
        k = build(DecisionKnobs, self.policy, {**VARIANTS[self.policy], **self.knobs})
        if k.drafter == "ngram":
            raise TltsimError(f"policy {self.policy!r}: drafter 'ngram' is not available in the real engine (its drafter "
                              f"without a model is 'history')")
        if k.drafter == "history" and (given := sorted(set(SPOT_KNOBS) & set(self.knobs))):
            raise TltsimError(f"policy {self.policy!r} drafts from the rollout history and trains no drafter; drop the "
                              f"spot-training knobs {', '.join(given)}")
        if k.tuner == "oracle":
            raise TltsimError("tuner 'oracle' needs the simulator's models; use beg, egreedy, ucb or fixed")
        return replace(k, arms=tuple(str(a) for a in parse_arms(k.arms)))

    def to_dict(self) -> dict:
        """What config.json holds (knobs resolved in full)."""
        d = asdict(self)
        k = self.tlt_knobs()
        d["knobs"] = asdict(k) if k else {}
        return d


def _cuda_available() -> bool:
    import torch  # only when a run asks for cuda

    return torch.cuda.is_available()
