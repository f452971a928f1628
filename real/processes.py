"""Worker processes on one machine (a run's workers, a profile's ranks), forked from a server that imported their
code once.

torch.multiprocessing.spawn starts every worker as a fresh interpreter, which imports torch and transformers again:
about 7 s of CPU per worker, per launch. Here the workers come from multiprocessing's forkserver: a process started
once per launching process, which imports the workers' module (`fn`'s, on the first start: its imports, torch's
and transformers', are what every worker needs) and forks every worker of this and every later launch from that
state. The server runs nothing of torch's, so no thread pool or device exists yet when it forks. A forked worker
has the server's environment, which is the launcher's of when the server started; each worker is given the
launcher's environment of now (MASTER_PORT is a new port per launch) before `fn` runs.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import torch.multiprocessing as mp


def start_workers(fn: Callable, args: tuple, nprocs: int) -> None:
    """fn(rank, *args) on `nprocs` processes, rank 0..nprocs-1; returns when all have, raising as
    torch.multiprocessing.spawn does (ProcessRaisedException, ProcessExitedException) if one fails."""
    mp.set_forkserver_preload([fn.__module__])  # takes effect where the server is not started yet
    mp.start_processes(_in_environment, args=(dict(os.environ), fn, args), nprocs=nprocs, start_method="forkserver")


def _in_environment(rank: int, environ: dict[str, str], fn: Callable, args: tuple) -> None:
    os.environ.clear()
    os.environ.update(environ)
    fn(rank, *args)
