"""The settings of real/'s commands, with no torch in them: `tltsim real ... --help` and a run's config
check read them without loading torch or transformers.

Each is a frozen dataclass whose fields say why their values, checked where it is built (TltsimError):
the target presets, how the target samples, generation, the GRPO update, supervised pretraining, the engine
profile, the offline drafter warm-up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from real.tasks.gcd import TaskConfig
from tltsim.control.strategy import DEFAULT_STRATEGY
from tltsim.core.errors import TltsimError


@dataclass(frozen=True)
class Preset:
    arch: str  # "llama" or "qwen2"
    hidden: int  # model width
    layers: int  # decoder layers
    heads: int  # query heads; head dim = hidden / heads
    kv_heads: int  # key/value heads (< heads: grouped-query attention)
    ffn: int  # MLP inner width
    max_len: int = 1024  # longest prompt + response the positions are meant for (task cap: ~530)
    note: str = ""  # what the preset is for


PRESETS = {
    # the default target: trains from scratch on 2 CPU cores in about 3 minutes
    "tiny-llama": Preset("llama", 128, 4, 4, 2, 384, note="default target (CPU pretrain)"),
    "tiny-qwen2": Preset("qwen2", 128, 4, 4, 2, 384, note="the default's Qwen2 twin"),
    # for tests: builds and runs in milliseconds
    "test-llama": Preset("llama", 32, 2, 4, 2, 64, note="unit tests"),
    "test-qwen2": Preset("qwen2", 32, 2, 4, 2, 64, note="unit tests"),
    # for a GPU: big enough that a forward is compute-bound at moderate batch sizes
    "small-llama": Preset("llama", 512, 8, 8, 2, 1536, note="GPU benchmarks"),
    "small-qwen2": Preset("qwen2", 512, 8, 8, 2, 1536, note="GPU benchmarks"),
    # Qwen2.5-0.5B's shape (random weights: real ones cannot travel to the GPU machine): scripts/gpu_check.py
    "qwen2.5-0.5b-shape": Preset("qwen2", 896, 24, 14, 2, 4864, max_len=4096, note="GPU check (Qwen2.5-0.5B's shape)"),
}


# `tltsim real pretrain -o real/assets/gcd-tiny-llama`: the default target, pretrained (3.2 MB), so tests,
# notebooks and benchmarks need not spend 3 minutes making it. benchmarks/bench_pretrain.py measures it.
ASSETS = Path(__file__).parent / "assets"  # what real/ ships: the default target, drafters (assets/README.md)
SHIPPED_TARGET = ASSETS / "gcd-tiny-llama"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the directory holding real/: a checkout's root, or site-packages


def recorded(value: str | Path) -> str:
    """A path as a run records it: one into the package's own files relative to the directory that holds the
    package ("real/assets/gcd-tiny-llama", wherever it was given from), so a record made in one checkout reads in
    another or in an installed copy; any other as given."""
    path = Path(value)
    if path.exists() and path.resolve().is_relative_to(PACKAGE_ROOT / "real"):
        return path.resolve().relative_to(PACKAGE_ROOT).as_posix()
    return str(value)


def packaged(value: str | Path) -> str | Path:
    """What a recorded path names: a relative path into the package's own files ("real/...") that is not there from
    the working directory is the package's own, installed or checked out; any other path unchanged."""
    path = Path(value)
    if path.is_absolute() or path.parts[:1] != ("real",) or path.exists() or not (PACKAGE_ROOT / path).exists():
        return value
    return PACKAGE_ROOT / path


def same_path(a, b) -> bool:
    """Whether two recorded paths name one file or directory, each as `packaged` reads it."""
    a, b = Path(packaged(str(a))), Path(packaged(str(b)))
    return a.exists() and b.exists() and a.resolve() == b.resolve()


# the tasks a target can run on by name (`--task`; none given: its own, real.models.targets.load_task)
TASKS = ("gcd", "wordproblems", "longtail", "agentic")
# a task's GRPO defaults where they differ from GRPOConfig's (real/tasks/longtail.py says why these)
TASK_GRPO = {"longtail": {"lora_rank": 16, "skip_zero_advantage": True, "micro_batch_tokens": 2048,
                          "gradient_checkpointing": True},
             "agentic": {"lora_rank": 16, "skip_zero_advantage": True}}  # real/tasks/agentic.py: short, small runs
# a task's prompts per step where it is not 8 (agentic: each prompt carries its few-shot turns, and a step on 2
# CPU cores stays short)
TASK_PROMPTS = {"agentic": 4}
# a task's sampling temperature where it is not 1 (at 1 SmolLM2-135M's long worked answers turn to noise)
TASK_TEMPERATURE = {"longtail": 0.7}


@dataclass(frozen=True)
class SamplingParams:
    """How the target's next token is chosen, in plain and in speculative decoding alike."""

    greedy: bool = True  # argmax; temperature and top_p are then ignored
    temperature: float = 1.0  # logits are divided by it before the softmax (> 0)
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]; 1 keeps every token

    def __post_init__(self):
        if not self.greedy and not self.temperature > 0:
            raise TltsimError(f"temperature={self.temperature}: must be > 0 when sampling (or use greedy)")
        if not 0 < self.top_p <= 1:
            raise TltsimError(f"top_p={self.top_p}: must be in (0, 1]")


@dataclass(frozen=True)
class GenerateSettings:
    """How real.engine.generate.generate decodes: every iteration speculative with `strategy` when given a drafter."""

    strategy: str | None = None  # depth_topk_verify of every speculative iteration (None: the default, a chain of 4)
    sampling: SamplingParams = SamplingParams()  # how the next token is chosen (default greedy)
    max_new_tokens: int = 256  # a row ends after this many tokens, or at an end-of-sequence token
    eos_token_id: int | tuple[int, ...] | None = None  # ids a row ends at (None: the model's; (): none)
    seed: int = 0  # the sampling generator's
    collect_features: bool = False  # keep each finished row's target features (real.engine.records.Finished)

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise TltsimError(f"max_new_tokens={self.max_new_tokens}: must be >= 1")


# RunConfig's default sampling (`tltsim real run` samples at temperature 1): what a profile times by default
RUN_SAMPLING = SamplingParams(greedy=False, temperature=1.0)


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 1e-4  # AdamW learning rate of the target
    clip: float = 0.2  # PPO ratio clip epsilon
    kl: float = 0.0  # beta: weight of the KL to the frozen initial target (0 = no reference model)
    mini_batches: int = 1  # optimizer steps per RL step; each takes a contiguous slice of a worker's responses
    max_grad_norm: float = 1.0  # gradient clipping after the all-reduce
    micro_batch_tokens: int = 4096  # padded tokens per forward (a longer sequence gets a micro-batch of its own)
    lora_rank: int = 0  # > 0: train rank-r LoRA adapters on the attention and MLP projections only (real.models.lora)
    skip_zero_advantage: bool = False  # compute neither the old log-probs nor the update of responses whose
    # advantage is zero (a group whose rewards agree): their gradient is exactly zero when kl is 0
    gradient_checkpointing: bool = False  # keep each decoder layer's input only and recompute the layer in the
    # backward pass: a long sequence's attention (heads x length^2 floats a layer) is then held one layer at a time

    def __post_init__(self):
        if not self.lr > 0:
            raise TltsimError(f"grpo lr={self.lr}: must be > 0")
        if not 0 < self.clip < 1:
            raise TltsimError(f"grpo clip={self.clip}: must be in (0, 1)")
        if self.kl < 0:
            raise TltsimError(f"grpo kl={self.kl}: must be >= 0")
        if self.mini_batches < 1:
            raise TltsimError(f"grpo mini_batches={self.mini_batches}: must be >= 1")
        if self.micro_batch_tokens < 1:
            raise TltsimError(f"grpo micro_batch_tokens={self.micro_batch_tokens}: must be >= 1")
        if self.lora_rank < 0:
            raise TltsimError(f"grpo lora_rank={self.lora_rank}: must be >= 0 (0: full fine-tuning)")


# the columns of a profile CSV (real.tools.profile.profile's rows; `tltsim real profile` replaces a CSV of these only)
PROFILE_COLUMNS = ["kind", "batch", "context", "tokens", "sq_tokens", "depth", "topk", "verify", "seconds"]


@dataclass(frozen=True)
class ProfileSettings:
    """The grid real.tools.profile.profile times (`tltsim real profile`)."""

    batches: tuple[int, ...] = (1, 2, 4, 8, 16)  # running rows
    contexts: tuple[int, ...] = (32, 128, 256)  # prompt tokens per row
    strategies: tuple[str, ...] | None = None  # depth_topk_verify timed (None: TLT's arms and 4_1_4)
    repeats: int = 3  # timed iterations per cell (and training batches per size)
    train_rows: tuple[int, ...] = (4, 16, 64)  # sequences per timed training batch
    seed: int = 0  # prompts and sampling
    sampling: SamplingParams = RUN_SAMPLING  # profile with the sampling of the runs you will validate
    train_seed: int | None = None  # the training batches' draws (None: `seed`)
    max_new_tokens: int = 128  # response cap of the target's own answers the training rows are as long as
    grpo: GRPOConfig = GRPOConfig()  # the target's update timed (a task's own: task_grpo)

    def __post_init__(self):
        for name in ("batches", "contexts", "train_rows"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise TltsimError(f"profile {name} {values}: expected positive integers")
        if self.repeats < 1 or self.max_new_tokens < 1:
            raise TltsimError(f"profile repeats {self.repeats}, max_new_tokens {self.max_new_tokens}: must be >= 1")


@dataclass(frozen=True)
class WarmupSettings:
    """The offline drafter warm-up of real.drafters.warmup.make_drafter (`tltsim real drafter`)."""

    problems: int = 160  # training word problems the target answers
    temperature: float | None = None  # sample the answers at this temperature, as a run's rollouts (None: greedy)
    max_new_tokens: int = 128  # answer cap
    vocab: int = 2048  # draft vocabulary size (the most frequent tokens of the answers)
    steps: int = 400  # AdamW steps
    batch_size: int = 8  # pairs per step
    lr: float = 3e-3  # AdamW learning rate
    unroll: int = 1  # forward passes per step (EAGLE-3's training-time test; 1: off)
    heldout: int = 16  # held-out problems tokens per call is measured on
    seed: int = 0  # problem draws and the drafter's init
    collect_batch: int = 16  # prompts decoded together while collecting
    task: str = "wordproblems"  # the chat task whose problems the target answers (longtail: real/tasks/longtail.py)
    dtype: str = "float32"  # the target's dtype while collecting, fitting and measuring (a run's --dtype)
    init: str | None = None  # a drafter checkpoint whose trained weights the fit starts from (None: a fresh drafter)

    def __post_init__(self):
        if self.unroll < 1:
            raise TltsimError(f"--unroll {self.unroll}: must be >= 1")
        if self.temperature is not None and not self.temperature > 0:
            raise TltsimError(f"--temperature {self.temperature}: must be > 0 (omit it for greedy answers)")
        if not self.lr > 0:
            raise TltsimError(f"--lr {self.lr}: must be > 0")


@dataclass(frozen=True)
class SpeedSettings:
    """What real.tools.speed.measure decodes (`tltsim real speed`)."""

    batches: tuple[int, ...] = (1, 4, 16)  # rows decoded at once
    strategy: str = str(DEFAULT_STRATEGY)  # depth_topk_verify of every speculative iteration (a chain of 4)
    max_new_tokens: int = 64  # answer cap
    rounds: int = 3  # timed generations of each mode per batch size, interleaved
    group: int = 1  # siblings of each prompt (GRPO's group): a batch decodes ceil(batch / group) prompts' groups
    temperature: float | None = None  # sample at this temperature (None: greedy, and outputs are compared)
    eos_token_id: int | tuple[int, ...] | None = None  # as in GenerateSettings

    def __post_init__(self):
        if not self.batches or min(self.batches) < 1:
            raise TltsimError(f"--batches {self.batches}: expected positive integers, e.g. 1,4,16")
        if self.rounds < 1:
            raise TltsimError(f"--rounds {self.rounds}: must be >= 1")
        if self.group < 1:
            raise TltsimError(f"--group {self.group}: must be >= 1")
        if self.max_new_tokens < 1:
            raise TltsimError(f"--max-new-tokens {self.max_new_tokens}: must be >= 1")
        SamplingParams(self.temperature is None, 1.0 if self.temperature is None else self.temperature)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams() if self.temperature is None else SamplingParams(False, self.temperature)


@dataclass(frozen=True)
class PretrainConfig:
    preset: str = "tiny-llama"  # model architecture and size (real.models.targets.PRESETS)
    steps: int = 600  # optimizer steps; the default takes about 3 minutes on 2 CPU cores
    seconds: float | None = None  # stop after this much training time even if steps remain (not deterministic)
    batch_tokens: int = 4096  # padded tokens per batch; similar lengths are batched together (more, smaller steps learn faster)
    lr: float = 3e-3  # peak AdamW learning rate, reached after `warmup` steps, cosine-decayed to 10%
    warmup: int = 30  # linear warm-up steps
    weight_decay: float = 0.0  # AdamW weight decay
    seed: int = 0  # model init and problem draws
    task: TaskConfig = field(default_factory=TaskConfig)  # the problems trained on

    def __post_init__(self):
        if self.steps < 1:
            raise TltsimError(f"pretrain steps {self.steps}: must be >= 1")
        if self.seconds is not None and self.seconds <= 0:
            raise TltsimError(f"pretrain seconds {self.seconds}: must be > 0")
        if self.batch_tokens < 8 * self.task.max_steps + 32:
            raise TltsimError(f"batch_tokens {self.batch_tokens}: must hold the longest problem, "
                              f">= {8 * self.task.max_steps + 32}")


def task_grpo(task: str | None, **overrides) -> GRPOConfig:
    """The GRPO update of a run on `task`: its TASK_GRPO defaults, then `overrides` (those not None)."""
    return GRPOConfig(**{**TASK_GRPO.get(task or "", {}), **{k: v for k, v in overrides.items() if v is not None}})
