"""The checks of what real/'s commands are given that need neither torch nor transformers.

Importing torch takes seconds, loading a model more: real/cli.py runs these before it imports torch, so bad input
is refused at once, and the code that loads (real.models.targets, real.drafters, real.run.config) calls the same
functions, so each rule is written once. A check raises TltsimError with what is wrong, where, and what to do.

- `check_device`: a --device real/ runs on (cpu, cuda[:N]), and cuda only where torch sees a device;
- `positive_ints`: a comma-separated list of positive integers (--batches, --contexts, --train-rows);
- `check_target`, `check_tokenizer`: a --model that names a save_pretrained directory, a known model (fetched) or a
  preset, and one with a tokenizer of its own;
- `plan_task`, `response_cap`: the task a target runs on and its default response cap, read from the target's
  files (real.models.targets.load_task builds the task from the plan with the target's tokenizer);
- `draftable`: a depth_topk_verify strategy whose verify count drafting can produce;
- `check_kv_memory`: that a batch's KV cache fits in the CPU's free memory, from a model's config.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

from real.models.hub import KNOWN, resolve_model
from real.settings import PRESETS, TASKS
from real.tasks.agentic import AgenticTask
from real.tasks.gcd import TASK_FILE, GcdTask
from real.tasks.longtail import LongTailTask
from real.tasks.wordproblems import WordProblemTask
from tltsim.control.strategy import Strategy
from tltsim.core.errors import TltsimError

# the chat tasks by name (real.settings.TASKS but gcd): each is built with the target's own tokenizer
CHAT_TASKS = {"wordproblems": WordProblemTask, "longtail": LongTailTask, "agentic": AgenticTask}
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2}  # an element's bytes by --dtype


def check_device(device: str) -> None:
    """That `--device` names a device real/ runs on, cpu or cuda (cuda:N), and that this torch sees a CUDA device
    where it names cuda; TltsimError else."""
    kind = re.fullmatch(r"([a-z_]+)(:[0-9]+)?", device)
    if kind is None or kind.group(1) not in ("cpu", "cuda"):
        raise TltsimError(f"--device {device!r}: not a torch device real/ runs on; use cpu or cuda")
    if kind.group(1) == "cuda" and not cuda_available():
        raise TltsimError(f"--device {device}: this torch sees no CUDA device (a CPU build, or no GPU visible); "
                          f"use --device cpu")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device: False without importing torch where the installed torch is built without
    CUDA or ROCm (its torch/version.py says so), else torch.cuda.is_available()."""
    if not _built_for_gpus():
        return False
    import torch  # a GPU build: only torch knows whether a device is visible

    return torch.cuda.is_available()


def _built_for_gpus() -> bool:
    """False where the installed torch's version file says it has neither CUDA nor ROCm; True where it cannot tell."""
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except (AttributeError, TypeError, StopIteration, OSError):
        return True
    found = dict(re.findall(r"^(cuda|hip)\b[^=\n]*=\s*(\S+)", text, re.M))
    return not (found.get("cuda") == "None" and found.get("hip") == "None")


def positive_ints(text: str, flag: str) -> tuple[int, ...]:
    """Comma-separated positive integers (`--batches 1,4,16`), each item one; TltsimError naming `flag` else."""
    items = [x.strip() for x in text.split(",")]
    if not all(re.fullmatch("[0-9]+", x) and int(x) > 0 for x in items):
        raise TltsimError(f"{flag} {text!r}: expected comma-separated positive integers, e.g. 1,4,16")
    return tuple(int(x) for x in items)


def unknown_target(name: str) -> TltsimError:
    return TltsimError(f"target {name!r}: neither a save_pretrained directory, a known model nor a preset; "
                       f"known models: {', '.join(KNOWN)}; presets: {', '.join(PRESETS)}")


def check_target(path_or_preset: str | Path) -> None:
    """That a --model names a save_pretrained directory, a known model that is fetched (else the error says to
    fetch it: real.models.hub.resolve_model) or a preset; TltsimError else."""
    path = Path(resolve_model(path_or_preset))
    if not (path / "config.json").is_file() and str(path_or_preset) not in PRESETS:
        raise unknown_target(str(path_or_preset))


def has_tokenizer(directory: Path) -> bool:
    """Whether a save_pretrained directory holds a tokenizer of its own."""
    return (directory / "tokenizer.json").is_file() or (directory / "tokenizer_config.json").is_file()


def check_tokenizer(path_or_name: str | Path) -> Path:
    """The directory of a target that has a tokenizer of its own (a save_pretrained directory or a fetched known
    model, with its tokenizer saved beside the weights); TltsimError else."""
    path = Path(resolve_model(path_or_name))
    if not (path / "config.json").is_file():
        raise TltsimError(f"{path_or_name}: no save_pretrained directory, so no tokenizer of its own; "
                          f"pass a model directory or a known model ({', '.join(KNOWN)})")
    if not has_tokenizer(path):
        raise TltsimError(f"{path_or_name}: no tokenizer saved beside the model (no tokenizer.json or "
                          f"tokenizer_config.json), so no chat template for a chat task; pass a chat model's "
                          f"directory or a known model ({', '.join(KNOWN)})")
    return path


def plan_task(path_or_name: str | Path, task: str | None = None) -> GcdTask | type:
    """The task a target runs on, decided from its files: `task` by name (real.settings.TASKS) or, without one, its
    own (the GcdTask of a `tltsim real pretrain` directory's task file; word problems for a save_pretrained
    directory with a tokenizer of its own, a chat model; the default GcdTask for a preset). A GcdTask is returned
    built; a chat task as its class, which real.models.targets.load_task builds with the target's tokenizer.
    TltsimError for an unknown task, a chat task on a target without a tokenizer, or a directory with neither a
    task file nor a tokenizer."""
    path = Path(resolve_model(path_or_name))
    if task is not None:
        if task not in TASKS:
            raise TltsimError(f"--task {task!r}: use one of {', '.join(TASKS)}")
        if task == "gcd":
            return GcdTask.load(path) if (path / TASK_FILE).is_file() else GcdTask()
        check_tokenizer(path_or_name)
        return CHAT_TASKS[task]
    if not (path / "config.json").is_file():
        return GcdTask()
    if (path / TASK_FILE).is_file() or not has_tokenizer(path):
        return GcdTask.load(path)
    return WordProblemTask


def response_cap(path_or_name: str | Path, task: str | None = None) -> int:
    """The response cap a run on the target takes when none is given: its task's max_response_tokens."""
    plan = plan_task(path_or_name, task)
    return plan.max_response_tokens if isinstance(plan, GcdTask) else plan.default_config.max_response_tokens


def draftable(strategy: str | Strategy) -> Strategy:
    """The strategy (a "depth_topk_verify" string or a Strategy), checked against what drafting can produce."""
    strategy = Strategy.parse(strategy)
    most = strategy.topk + (strategy.depth - 1) * strategy.topk**2
    if strategy.verify > most:
        raise TltsimError(f"strategy {strategy}: verify={strategy.verify} exceeds the {most} nodes that depth "
                          f"{strategy.depth} and top-k {strategy.topk} draft; lower verify")
    return strategy


def saved_config(path_or_name: str | Path) -> SimpleNamespace | None:
    """The config.json of a save_pretrained directory or a fetched known model (its fields as attributes), or None
    where there is none to read."""
    try:
        return SimpleNamespace(**json.loads((Path(resolve_model(path_or_name)) / "config.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def check_kv_memory(config, batch: int, tokens: int, element: int, device: str) -> None:
    """That `batch` rows of `tokens` tokens of the KV cache of a model of `config` (a transformers config, or
    `saved_config`'s), `element` bytes a value, fit in the CPU's free memory; TltsimError else."""
    if device != "cpu":
        return
    try:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        need = batch * tokens * 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * element
    except (AttributeError, TypeError):  # a config of another shape: the engine's own allocation will tell
        return
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > free:
        raise TltsimError(f"--batches {batch}: its KV cache ({batch} rows x {tokens} tokens) needs {need / 2**30:.1f} GiB, "
                          f"the machine has {free / 2**30:.1f} GiB free; give smaller batch sizes")


def replaceable_checkpoint(path: Path) -> bool:
    """Whether an existing directory may be replaced by a new `tltsim real pretrain` checkpoint: it is empty or a
    checkpoint (the task file)."""
    return (path / TASK_FILE).is_file() or not any(path.iterdir())
