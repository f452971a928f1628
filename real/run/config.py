"""The configuration of a `tltsim real run` (what config.json holds), checked before any worker starts."""
from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from real.checks import check_target, cuda_available, plan_task, response_cap
from real.settings import (SHIPPED_TARGET, TASK_PROMPTS, TASK_TEMPERATURE, TASKS, GRPOConfig, SamplingParams, packaged,
                           recorded, same_path, task_grpo)
from tltsim.control.async_rl import AsyncKnobs
from tltsim.control.decisions import VARIANTS, DecisionKnobs
from tltsim.control.groups import streamed
from tltsim.control.partial import PartialKnobs
from tltsim.control.migration import MigrateKnobs
from tltsim.control.placement import LongestFirstKnobs
from tltsim.control.tail import TailBatchingKnobs
from tltsim.control.knobs import acts, build, check_known, knob_names
from tltsim.control.strategy import parse_arms
from tltsim.core.errors import TltsimError, TltsimWarning

# the policies a real run executes: verl, every TLT variant of the one registry (tltsim.control.decisions.VARIANTS), and
# the step loop's other answers, each alone or +tlt (the same step, speculating as tlt does), with their knobs:
# longest-first (tltsim.control.placement: groups' rows placed and admitted longest predicted first), partial
# (tltsim.control.partial: over-provisioned groups, the step stopped at its quota, unfinished rows carried),
# tail-batching (tltsim.control.tail: the same stop in short rounds, unfinished prompts parked for a long round) and
# migrate (tltsim.control.migration: the step's tail moved onto fewer workers, the others released)
STEP_POLICIES = {"longest-first": LongestFirstKnobs, "partial": PartialKnobs, "tail-batching": TailBatchingKnobs,
                 "migrate": MigrateKnobs}
COMBINED = tuple(name for base in STEP_POLICIES for name in (base, f"{base}+tlt"))
ASYNC = "async"  # asynchronous RL (tltsim.control.async_rl): the last worker trains, the others roll out
# ... and inside it, the TLT variants whose drafter a rollout worker keeps to itself (no history of every worker's)
ASYNC_POLICIES = (ASYNC, *(f"{ASYNC}+{v}" for v in ("tlt", "sd-always", "tlt-auto", "static-sd", "tlt-base")))
POLICIES = ("verl", *VARIANTS, *COMBINED, *ASYNC_POLICIES)
MODEL_FREE = {"suffix": "from the rollout history", "ngram": "from each row's own text"}  # drafters with no weights
SPOT_KNOBS = ("min_idle", "cadence", "buffer_steps", "keep_long_prev")  # what spot training alone reads
ANSWERS_FILE = "answers.parquet"  # in a run directory: every response's token ids (real.run.recorder writes it)
DTYPES = ("float32", "float64", "bfloat16")  # torch dtypes by name (torch.float32 ...), resolved in the worker
# spot training's learning rate from a converged warm start: the shipped SmolLM2 drafter, spot-trained 30 batches on
# a step's 8 answers with the target fixed, went 2.72 -> 2.38 tokens per call at 1e-3, 2.61 at 1e-4, 2.81 at 1e-5
# (docs/investigations/spot_lr.md)
WARM_SPOT_LR = 1e-5


@dataclass(frozen=True)
class RunConfig:
    """A run's settings. Each field's comment is its help: `tltsim real run` makes a flag of every field but
    knobs and grpo (real/cli.py), and `--help` prints the comment."""

    policy: str = "tlt"  # the policy the run executes: verl (no speculation), tlt (a spot-trained drafter),
    # static-sd, sd-always, tlt-auto, tlt-base (prompt lookup, real/drafters/ngram.py: no drafter model or
    # training), das (history drafting, real/drafters/suffix.py: none either), das+tlt (the hybrid of both,
    # real/drafters/hybrid.py), longest-first (no speculation; rows placed and admitted longest predicted first:
    # real/run/placement.py), partial (no speculation; ratio x the groups launched, every engine stopped once the
    # step's groups have finished, unfinished rows carried into the next step: real/run/stream.py), tail-batching
    # (no speculation; eta x the groups launched in a short round, stopped so, the unfinished prompts parked and run
    # anew in a long round every long_every short rounds: real/run/stream.py), migrate (no speculation; once the
    # step's unfinished rows fall to `remaining` of them, they move onto `to_engines` workers, the others released:
    # real/run/migration.py), and longest-first+tlt, partial+tlt, tail-batching+tlt, migrate+tlt (each so,
    # speculating as tlt); async (asynchronous RL: the last worker trains on the oldest finished groups, the others
    # generate the prompt stream's groups as the staleness gate lets them start, each weight update interrupting
    # them: real/run/async_rl.py), and async+tlt, async+sd-always, async+tlt-auto, async+static-sd, async+tlt-base
    # (its rollout workers speculating as the variant does, each its own drafter spot-trained while the gate keeps
    # it waiting)
    workers: int = 2  # worker processes, one rollout engine each
    steps: int = 3  # RL steps in all (a resumed run may raise it)
    model: str = recorded(SHIPPED_TARGET)  # target: a `tltsim real pretrain` directory (gcd task), a known model (e.g.
    # smollm2-135m) or save_pretrained directory with a chat-template tokenizer (word problems), or a preset
    # (random weights) (default: the shipped real/assets/gcd-tiny-llama)
    task: str | None = None  # the task: gcd, wordproblems, longtail (the long-tail workload, real/tasks/longtail.py)
    # or agentic (arithmetic through a calculator tool the model calls, real/tasks/agentic.py)
    # (default: the model's own: gcd for a `tltsim real pretrain` directory, wordproblems for a chat model)
    drafter_checkpoint: str | None = None  # trained drafter checkpoint to start from (das+tlt: the hybrid's trained
    # part; das has none) (default: the one shipped for a known --model, else warm one up on the target's own
    # answers)
    device: str = "cpu"  # torch device of every worker: cpu or cuda (rank r uses cuda:r mod the device count)
    dtype: str = "float32"  # target and drafter dtype (float64 makes greedy ties impossible in tests)
    prompts: int | None = None  # prompts per step (default: the task's: 4 for agentic, else 8)
    group: int = 4  # samples per prompt (the GRPO group)
    seed: int = 0  # seeds the prompts, sampling, tuners, drafter init and batches
    repeat_prompts: bool = False  # every step poses the same problems (a dataset of one batch, an epoch a step), so
    # a prompt's earlier response lengths predict its next ones (longest-first's history predictor)
    greedy: bool = False  # argmax decoding, every sample of a group then the same (default: sample at
    # --temperature)
    temperature: float | None = None  # sampling temperature (default: the task's: 0.7 for longtail, else 1.0)
    max_new_tokens: int | None = None  # response cap (default: the task's longest reference response)
    max_running: int | None = None  # rows an engine runs at once (default: its whole share)
    knobs: dict = field(default_factory=dict)  # the policy's knobs: --knob (DecisionKnobs, tltsim/control/
    # decisions.py; longest-first: LongestFirstKnobs, tltsim/control/placement.py; partial: PartialKnobs,
    # tltsim/control/partial.py; tail-batching: TailBatchingKnobs, tltsim/control/tail.py; migrate: MigrateKnobs,
    # tltsim/control/migration.py; async: max_staleness, tltsim/control/async_rl.py; a +tlt combination: both
    # parts', each by its name)
    grpo: GRPOConfig | None = None  # the target's update (None: the task's, real.settings.task_grpo): --lr, ...
    warmup_prompts: int = 32  # without --drafter-checkpoint: responses of the initial target the drafter warms up on
    warmup_steps: int = 40  # without --drafter-checkpoint: the warm-up's AdamW steps (short: the run's own training
    # should matter)
    drafter_batch: int = 8  # sequences per drafter training batch (warm-up and spot training)
    drafter_lr: float = 1e-3  # the drafter warm-up's AdamW learning rate
    spot_lr: float | None = None  # spot training's drafter learning rate (default: 1e-5 from a drafter warmed up
    # before the run, --drafter-checkpoint or a shipped one, else --drafter-lr after the run's own short warm-up)
    probe: int = 8  # held-out prompts the policy's drafter's accepted length is measured on before each step, each
    # decoded alone (das, das+tlt: with a history of its own, empty: the prompt and the row's own tokens; 0: off;
    # an asynchronous run has no step between its rollouts to probe in)
    probe_static: bool = False  # also probe the starting drafter, never trained, with the current target (steps
    # column static_drafter_accepted; a spot-training policy only)
    speed_probe: int = 8  # plain decode iterations that time the machine before each step, for `tltsim validate
    # --speed` (0: off; an asynchronous run's trainer times it at the start of each step, beside the rollout)
    answers: str | None = None  # emit a recorded run's responses token for token instead of drawing new ones (its
    # answers.parquet; the same prompts, sampling and training): a pair of runs on the same answers differs only in
    # how fast each produced them

    def checked(self) -> "RunConfig":
        """This config, checked (TltsimError for a bad value), with max_new_tokens set if it was None; reads the
        target's and --answers' files, loads neither torch nor a model."""
        if self.policy not in POLICIES:
            raise TltsimError(f"policy {self.policy!r}: real runs offer {', '.join(POLICIES)}")
        if self.task is not None and self.task not in TASKS:
            raise TltsimError(f"task {self.task!r}: use one of {', '.join(TASKS)}")
        if (renamed := DecisionKnobs.renamed(self.policy, self.knobs, self._variant())) != self.knobs:  # older knobs
            return replace(self, knobs=renamed).checked()
        if self.grpo is None:
            return replace(self, grpo=task_grpo(self.task)).checked()
        if self.prompts is None:
            return replace(self, prompts=TASK_PROMPTS.get(self.task or "", 8)).checked()
        if self.temperature is None:
            return replace(self, temperature=TASK_TEMPERATURE.get(self.task or "", 1.0)).checked()
        if self.max_new_tokens is None:
            return replace(self, max_new_tokens=response_cap(self.model, self.task)).checked()
        check_target(self.model)
        plan_task(self.model, self.task)  # a task the target can run (a chat task: its tokenizer)
        for name in ("workers", "steps", "prompts", "group", "max_new_tokens", "drafter_batch"):
            if getattr(self, name) < 1:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 1")
        if self.spot_lr is not None and not self.spot_lr > 0:
            raise TltsimError(f"spot_lr={self.spot_lr}: must be > 0")
        for name in ("probe", "speed_probe"):
            if getattr(self, name) < 0:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 0 (0 turns it off)")
        if self.asynchronous:
            self._check_async()
        elif self.prompts < self.workers:
            raise TltsimError(f"prompts={self.prompts} < workers={self.workers}: every worker needs a prompt group")
        if self.device not in ("cpu", "cuda"):
            raise TltsimError(f"device {self.device!r}: use cpu or cuda")
        if self.device == "cuda" and not cuda_available():
            raise TltsimError("device cuda: no CUDA device is visible; use --device cpu")
        if self.dtype not in DTYPES:
            raise TltsimError(f"dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.max_running is not None and self.max_running < 1:
            raise TltsimError(f"max_running={self.max_running}: must be >= 1")
        SamplingParams(self.greedy, self.temperature)
        knobs = self.tlt_knobs()
        if self.policy in COMBINED and self.drafter_checkpoint is not None and knobs is None:
            raise TltsimError(f"--drafter-checkpoint {self.drafter_checkpoint}: policy {self.policy!r} does not "
                              f"speculate; drop --drafter-checkpoint")
        if streamed(self.policy):
            self._step_knobs(self.policy.removesuffix("+tlt"))  # its knobs, checked
            if self.task == "agentic":
                raise TltsimError(f"policy {self.policy!r} stops a step with rows unfinished, which a trajectory in a "
                                  f"tool call cannot be yet; use another task")
            if self.answers is not None:
                raise TltsimError(f"--answers: policy {self.policy!r} draws its own groups from the prompt stream, "
                                  f"which another run's answers do not cover; drop --answers")
        if (migration := self.migration()) is not None:
            if self.task == "agentic" or self.answers is not None:
                raise TltsimError(f"policy {self.policy!r} moves rows between workers mid-step, which a trajectory in "
                                  f"a tool call or a replayed answer cannot be yet; use another task, drop --answers")
            if migration.release == "drafter" and knobs is None:
                raise TltsimError(f"policy {self.policy!r}: release = 'drafter' needs a drafter to train; use "
                                  f"migrate+tlt, or release = 'next-stage' or 'idle'")
        if self.placement() is not None:
            if not self.repeat_prompts:
                warnings.warn(f"policy {self.policy!r} with new prompts every step predicts every response alike (no "
                              f"prompt has a history), so it places rows as they come; --repeat-prompts gives its "
                              f"predictor one", TltsimWarning, stacklevel=2)
        if self.drafter_checkpoint is not None:
            self._check_drafter(knobs)
        if self.answers is not None:
            if self.task == "agentic":
                raise TltsimError("--answers: an agentic run's tools answer anew, so it replays no recorded answers; "
                                  "drop --answers")
            self._check_answers()
        if self.probe_static and not (knobs and knobs.spot):
            raise TltsimError(f"--probe-static: policy {self.policy!r} trains no drafter, so there is no starting "
                              f"drafter to probe beside it; drop --probe-static")
        return self

    def _check_async(self) -> None:
        """What an asynchronous run cannot take; TltsimError for it."""
        self.async_knobs()  # its knobs, checked
        if self.workers < 2:
            raise TltsimError(f"policy 'async' needs at least 2 workers (the last trains, the others roll out); "
                              f"workers={self.workers}")
        if self.task == "agentic" or self.answers is not None:
            raise TltsimError("policy 'async' interrupts rows at every weight update and draws its own groups from "
                              "the prompt stream, which a trajectory in a tool call or a replayed answer cannot "
                              "follow yet; use another task, drop --answers")
        if self.drafter_checkpoint is not None and self.policy == ASYNC:
            raise TltsimError(f"--drafter-checkpoint {self.drafter_checkpoint}: policy 'async' does not speculate; "
                              f"drop --drafter-checkpoint")
        if self.probe_static:
            raise TltsimError(f"--probe-static: policy {self.policy!r} has no step between its rollouts to probe a "
                              f"drafter in; drop --probe-static")

    @property
    def asynchronous(self) -> bool:
        """Whether the run is asynchronous RL (async, alone or with speculation)."""
        return self.policy in ASYNC_POLICIES

    def async_knobs(self) -> AsyncKnobs | None:
        """async's knobs (None for every other policy); TltsimError for unknown ones. Its split is the run's: every
        worker but the last rolls out (`rollout_share` (workers - 1) / workers, as the simulator replays it)."""
        if not self.asynchronous:
            return None
        speculates = knob_names(DecisionKnobs) if self.policy != ASYNC else ()
        check_known(f"policy {self.policy!r}", self.knobs, ("max_staleness", *speculates))
        return build(AsyncKnobs, self.policy, {**{k: v for k, v in self.knobs.items() if k == "max_staleness"},
                                               "rollout_share": (self.workers - 1) / self.workers})

    def _check_drafter(self, knobs: DecisionKnobs | None) -> None:
        """That `drafter_checkpoint` is a trained drafter's checkpoint the policy starts from; TltsimError else."""
        from real.drafters import DRAFTERS, SHIPPED, check_checkpoint  # no torch: the registry's names

        if knobs is None:  # verl: the baseline of a pair takes the pair's arguments and loads no drafter
            return
        given = self.drafter_checkpoint
        if knobs.drafter in MODEL_FREE:
            raise TltsimError(f"--drafter-checkpoint {given}: policy {self.policy!r} loads no trained drafter (it "
                              f"drafts {MODEL_FREE[knobs.drafter]} alone); drop --drafter-checkpoint")
        if given in DRAFTERS or given == SHIPPED:
            raise TltsimError(f"--drafter-checkpoint {given}: a trained drafter's checkpoint file; the policy picks "
                              f"the method (--knob drafter=..., das: suffix, das+tlt: hybrid) and a known model's "
                              f"shipped drafter is the default")
        check_checkpoint(packaged(given))  # here, not in every worker after they start

    def _check_answers(self) -> None:
        """That `answers` is a run directory holding every response this run will generate: the same target, task,
        prompts, groups, cap, sampling and seed, and at least `steps` steps; TltsimError else."""
        where = Path(self.answers)
        if not (where / "config.json").is_file():
            raise TltsimError(f"--answers {where}: not a run directory (no config.json); give one `tltsim real run -o` wrote")
        if not (where / ANSWERS_FILE).is_file():
            raise TltsimError(f"--answers {where}: no {ANSWERS_FILE} (a run recorded before runs kept their answers); "
                              f"record the run again")
        record, mine = json.loads((where / "config.json").read_text()), asdict(self)
        for name in ("model", "task", "seed", "prompts", "group", "max_new_tokens", "greedy", "temperature", "grpo",
                     "repeat_prompts"):
            theirs = record.get(name, False if name == "repeat_prompts" else None)
            if theirs != mine[name] and not (name == "model" and same_path(theirs, mine[name])):  # the same
                # prompts, answers drawn alike, the target trained alike
                raise TltsimError(f"--answers {where}: its {name} is {theirs!r}, this run's {mine[name]!r}; "
                                  f"a run replays the answers of a run of the same prompts, sampling and training")
        import pandas as pd  # here: `tltsim real` builds its parser from this module, and most runs have no --answers

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

    def placement(self) -> LongestFirstKnobs | None:
        """longest-first's knobs (None for every other policy); TltsimError for unknown ones or the oracle predictor."""
        k = self._step_knobs("longest-first")
        if k is not None and k.predictor != "history":
            raise TltsimError(f"policy {self.policy!r}: predictor {k.predictor!r} knows each response's length before "
                              f"it is generated, which only a simulator can; a real run predicts from history")
        return k

    def partial(self) -> PartialKnobs | None:
        """partial's knobs (None for every other policy); TltsimError for unknown ones."""
        return self._step_knobs("partial")

    def tail_batching(self) -> TailBatchingKnobs | None:
        """tail-batching's knobs (None for every other policy); TltsimError for unknown ones."""
        return self._step_knobs("tail-batching")

    def migration(self) -> MigrateKnobs | None:
        """migrate's knobs (None for every other policy); TltsimError for unknown ones."""
        return self._step_knobs("migrate")

    def _step_knobs(self, base: str):
        """The knobs of step policy `base` (STEP_POLICIES) when the run's policy is it, alone or +tlt (None
        otherwise). A +tlt combination's knobs go, each by its name, to this part or to tlt's decisions (as the
        simulator dispatches a combination's knobs)."""
        if self.policy.removesuffix("+tlt") != base or self.policy not in COMBINED:
            return None
        cls = STEP_POLICIES[base]
        check_known(f"policy {self.policy!r}", self.knobs, (*knob_names(cls),
                                                            *(knob_names(DecisionKnobs) if self._speculates() else ())))
        return build(cls, self.policy, self._knobs_of(cls))

    def tlt_knobs(self) -> DecisionKnobs | None:
        """The policy's decision knobs (None for verl and longest-first); TltsimError for unknown ones (the
        simulator's models of the drafter and of training, which a real run measures instead, are not knobs here)."""
        if self.policy in COMBINED and not self._speculates():
            return None
        if self.policy == ASYNC:
            return None
        if self.asynchronous:
            self.async_knobs()  # every knob is one of the two parts'
            return self._decisions(self._variant(), self._knobs_of(DecisionKnobs))
        if self.policy == "verl":
            if self.knobs:
                raise TltsimError(f"policy 'verl' has no knobs; drop {', '.join(sorted(self.knobs))}")
            return None
        if self.policy in COMBINED:
            self._step_knobs(self.policy.removesuffix("+tlt"))  # every knob is one of the two parts'
            return self._decisions(self._variant(), self._knobs_of(DecisionKnobs))
        return self._decisions(self._variant(), self.knobs)

    def _variant(self) -> dict:
        """The knob defaults of the TLT variant the policy speculates as (tltsim.control.decisions.VARIANTS): its
        own, a +tlt combination's tlt, an asynchronous run's part after `async+`; {} for one that does not."""
        if self.asynchronous:
            return VARIANTS.get(self.policy.partition("+")[2], {})
        return VARIANTS["tlt"] if self.policy in COMBINED else VARIANTS.get(self.policy, {})

    def _decisions(self, variant: dict, given: dict) -> DecisionKnobs:
        """The decision knobs of a TLT `variant` (its defaults) with those `given`, checked."""
        from real.drafters import DRAFTERS  # no torch: the registry's names, the methods real/drafters has

        k = build(DecisionKnobs, self.policy, {**variant, **given})
        if k.drafter not in DRAFTERS:
            raise TltsimError(f"policy {self.policy!r}: drafter = {k.drafter!r} is simulated only; a real run drafts "
                              f"with {', '.join(DRAFTERS)}")
        if k.training not in ("spot", "frozen"):
            raise TltsimError(f"policy {self.policy!r}: training = {k.training!r} is simulated only; a real run's "
                              f"drafter trains spot or stays frozen")
        if k.drafter in MODEL_FREE and (given := sorted(set(SPOT_KNOBS) & set(self.knobs))):
            raise TltsimError(f"policy {self.policy!r} drafts {MODEL_FREE[k.drafter]} and trains no drafter; drop the "
                              f"spot-training knobs {', '.join(given)}")
        if k.tuner == "oracle":
            raise TltsimError("tuner 'oracle' needs the simulator's models; use beg, egreedy, ucb or fixed")
        return replace(k, arms=tuple(str(a) for a in parse_arms(k.arms)))

    def _speculates(self) -> bool:
        """A step policy combined with tlt's speculation."""
        return self.policy in COMBINED and self.policy.endswith("+tlt")

    def _knobs_of(self, cls) -> dict:
        """The knobs given that are `cls`'s (a combination's knobs, each to its part)."""
        return {k: v for k, v in self.knobs.items() if k in knob_names(cls)}

    def to_dict(self) -> dict:
        """What config.json holds (knobs resolved in full; a combination's both parts', by name)."""
        d = asdict(self)
        step = self.placement() or self.partial() or self.tail_batching() or self.migration() or self.async_knobs()
        decisions = self.tlt_knobs()
        d["knobs"] = {**({f.name: getattr(step, f.name) for f in fields(step) if acts(step, f)} if step else {}),
                      **(asdict(decisions) if decisions else {})}
        return d
