"""A `tltsim real run` killed as `kill PID` kills it, once its first checkpoint is written: for the resume tests."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_at_first_checkpoint(args: list[str], out: Path) -> int:
    """Run `tltsim ARGS` (writing `out`) in a process of its own, send its launcher SIGTERM once `out`'s checkpoint
    exists, and wait until it and its workers have gone; returns the step the checkpoint holds."""
    proc = subprocess.Popen([sys.executable, "-m", "tltsim", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "checkpoint" / "state.json"
    deadline = time.time() + 120
    while not state.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)  # the launcher alone, as `kill PID` does: it stops its workers first
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.time() + 10  # the forkserver leaves once its launcher has gone; no worker outlives it
    while group_alive(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not group_alive(proc.pid), "a worker outlived its stopped launcher"
    return json.loads(state.read_text())["step"]
