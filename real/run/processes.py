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
import signal
import threading
from collections.abc import Callable

import torch.multiprocessing as mp


def start_workers(fn: Callable, args: tuple, nprocs: int) -> None:
    """fn(rank, *args) on `nprocs` processes, rank 0..nprocs-1; returns when all have, raising as
    torch.multiprocessing.spawn does (ProcessRaisedException, ProcessExitedException) if one fails."""
    mp.set_forkserver_preload([fn.__module__])  # takes effect where the server is not started yet
    context = mp.start_processes(_in_environment, args=(dict(os.environ), fn, args), nprocs=nprocs,
                                 start_method="forkserver", join=False)
    # the workers are the server's children, not the launcher's: a launcher stopped by SIGTERM (`kill PID`) stops
    # them first, so that none lives on to write into a run directory its user may be reusing
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: _stop(context, signum)) if main else None
    try:
        while not context.join():
            pass
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _stop(context, signum: int) -> None:
    for p in context.processes:
        if p.is_alive():
            p.terminate()
    for p in context.processes:
        p.join()
    raise SystemExit(128 + signum)


def _in_environment(rank: int, environ: dict[str, str], fn: Callable, args: tuple) -> None:
    os.environ.clear()
    os.environ.update(environ)
    fn(rank, *args)
