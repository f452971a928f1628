"""`tltsim real run`: an RL run of a policy for real, on N worker processes, recorded in the simulator's schema.

    launch(config, RUN_DIR) --forkserver (real/run/processes.py) / torchrun--> N workers (torch.distributed: gloo on
    CPU, NCCL on GPU)

Every step, on every worker (worker = rank = one rollout engine):
1. rollout: the step's seeded prompts (P prompts x G samples, the same on every rank) are split
   into contiguous chunks of prompt groups, as verl does; each worker generates its chunk on an
   `Engine` driven by the policy layer's `EngineControl` (real/engine/adaptive.py).
2. spot training (policies whose drafter trains: tlt's, das+tlt's trained part): a worker that finishes reports "done"
   through the process group's store; the policy layer's `SpotTrainer`, on rank 0, answers with
   "train" and, when every worker is done, "stop". A training worker trains its drafter copy
   between checks, on what its `DataBuffer` selects from the (tokens, target features) its own
   rollouts kept, and saves the trainable part atomically when stopped (RUN_DIR/spot/rank<r>.pt).
3. reward (rewards + the old log-prob forward), train (GRPO, gradients all-reduced:
   real/run/grpo.py), weight sync (the drafters that trained are averaged, weighted by their
   batches, so every engine starts the next step with the same drafter).
Between steps rank 0 writes the records (real/run/recorder.py, `Recorder`) and every rank its part of a checkpoint
(real/run/checkpoint.py: plain state); `resume` continues from it: the records of steps past the checkpoint
are dropped and those steps run again, so a run killed before its first checkpoint starts again from step 0
(the same seeds give the same run). Randomness: each step's prompts,
sampling and drafter batches come from generators seeded by (seed, step, rank); the tuners carry
their own generators' state in the checkpoint.

An asynchronous run (`--policy async`, alone or with speculation) has no common step: its workers are real/run/async_rl.py's, the last one
training while the others roll out.

Modules: real/run/config.py (RunConfig), real/run/run_dir.py (the -o directory), real/run/worker.py (a worker's
state and step loop), real/run/spot.py (spot training across processes), real/run/checkpoint.py.

Policies: verl (no speculation), tlt, static-sd, sd-always, tlt-auto (no prior: it starts from `threshold`), tlt-base,
das and das+tlt, with the policy layer's decision knobs (tltsim/control/decisions.py); and longest-first, which
speculates not but places each step's rows on the workers, and orders each engine's admissions, longest predicted
first (real/run/placement.py, the simulator's rule: tltsim/control/placement.py), its predictor fed every worker's
lengths after each step and kept in the checkpoint (with --repeat-prompts a prompt comes back every step);
longest-first+tlt places so and speculates as tlt does, each knob to the part that has it. Their `drafter` knob picks what
the engines draft with (real/run/worker.py): the trained drafter (adaptive: spot-trained, static: not), prompt lookup
(tlt-base: real/drafters/ngram.py, each row's own text), history drafting (das: real/drafters/suffix.py; neither has a
model to warm up or train) or the hybrid of history and the trained drafter (das+tlt: real/drafters/hybrid.py, its
trained part spot-trained as tlt's drafter is). A history is fed each worker's own rows as they are generated (the
prompt, the in-flight siblings) and, after every step, every other worker's responses, so a prompt that comes back
finds its earlier responses wherever it lands; its memory is real/drafters/suffix.py's cap, and the checkpoint holds it as
plain data (the responses), from which a resumed run rebuilds the index.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers

from real.engine.tools import require_os_sandbox, runs_code
from real.run.processes import start_workers
from real.run.grpo import free_port
from real.run.async_rl import AsyncWorker
from real.run.config import RunConfig
from real.run.run_dir import check_run_dir
from real.run.worker import Worker
from tltsim.core.errors import TltsimError


def launch(config: RunConfig, out: str | Path, resume: bool = False, command: str = "", bar: bool = False) -> Path:
    """Run `config` into RUN_DIR `out` on `config.workers` processes; returns `out`.

    Under torchrun (RANK and WORLD_SIZE set) this process is one of the workers; otherwise the
    workers are started here (real/run/processes.py). Raises TltsimError for bad input, before any worker starts. Rank 0 reports
    every step on stderr: a progress bar if `bar`, else a line per step (real/run/progress.py).
    """
    config = config.checked()
    out = Path(out)
    resume = check_run_dir(config, out, resume)
    tools = getattr(config.make_task(), "tools", None)
    if tools is not None and runs_code(tools):
        require_os_sandbox()  # a tool that runs arbitrary code never runs outside one: refused before workers start
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        if int(os.environ["WORLD_SIZE"]) != config.workers:
            raise TltsimError(f"--workers {config.workers} but torchrun started {os.environ['WORLD_SIZE']} processes")
        _worker(int(os.environ["RANK"]), config, out, resume, command, bar)
        return out
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    try:
        start_workers(_worker, (config, out, resume, command, bar), config.workers)
    except mp.ProcessRaisedException as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise TltsimError(f"a worker failed: {lines[-1] if lines else e}") from None
    except mp.ProcessExitedException as e:
        raise TltsimError(f"a worker exited: {e}") from None
    return out


def _worker(rank: int, config: RunConfig, out: Path, resume: bool, command: str, bar: bool) -> None:
    transformers.utils.logging.disable_progress_bar()  # a bar per checkpoint load and save, every step
    backend = "gloo"
    if config.device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        if torch.cuda.device_count() >= config.workers:
            backend = "nccl"  # NCCL needs one GPU per rank; several workers sharing a GPU talk through gloo
    dist.init_process_group(backend, rank=rank, world_size=config.workers)
    try:
        if config.asynchronous:
            AsyncWorker(rank, config, out, resume, command, bar).run()
        else:
            Worker(rank, config, out, resume, command, bar).run()
    finally:
        dist.destroy_process_group()
