"""real/run/processes.py: every launch's workers come from one forkserver of this process, each in the launcher's
environment of its launch (not the server's, which is the launcher's of the first launch)."""
import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from real.run.processes import start_workers


def _report(rank: int, out: str) -> None:
    (Path(out) / f"rank{rank}.json").write_text(json.dumps({"env": os.environ.get("TLTSIM_TEST_LAUNCH"),
                                                            "parent": os.getppid(), "pid": os.getpid()}))


def _fail(rank: int) -> None:
    if rank == 1:
        raise ValueError("rank 1 failed")


def test_launches_fork_from_one_server_in_the_launchers_environment(tmp_path, monkeypatch):
    seen = []
    for launch in ("first", "second"):
        monkeypatch.setenv("TLTSIM_TEST_LAUNCH", launch)
        out = tmp_path / launch
        out.mkdir()
        start_workers(_report, (str(out),), 2)
        seen.append([json.loads((out / f"rank{r}.json").read_text()) for r in range(2)])
    assert [[w["env"] for w in ws] for ws in seen] == [["first", "first"], ["second", "second"]]
    parents = {w["parent"] for ws in seen for w in ws}
    assert len(parents) == 1 and os.getpid() not in parents  # one server, not this process, forked them all
    assert len({w["pid"] for ws in seen for w in ws}) == 4


def test_a_failing_worker_raises_as_spawn_would():
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed"):
        start_workers(_fail, (), 2)
