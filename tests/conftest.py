"""Suite-wide: how `make test`'s two workers (pytest-xdist, `-n 2`) share the suite's two cores.

Each worker computes with one thread (torch's, and its subprocesses': OMP_NUM_THREADS=1), and a thread with
nothing to do sleeps (OMP_WAIT_POLICY=passive): where a test or a notebook asks for two threads beside the other
worker, their pools' idle threads otherwise spin for cores the other worker holds, which took several times as
long as the same tests one after the other.

A test file is one unit of work, so a module's fixtures are made once; except two groups of files, each one unit:
the tests that run SmolLM2 (a real 135M-parameter model: its own tests, its speed and hub tests, notebook 06): on two
cores, two workers decoding it at once took several times as long as one after the other, beside the other
worker's short tests; and the tests on tests/real/tiny_lm.py's trained tiny targets, which one process trains once
(they are cached) rather than once a file. The SmolLM2 unit is collected and handed out first, so the short files
fill the other worker beside it instead of waiting behind it at the end.
"""
import os
import sys

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # set by xdist before this file is imported, so before torch is
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OMP_WAIT_POLICY"] = "passive"

SMOLLM2 = ("tests/real/test_real_model.py", "tests/real/test_speed.py", "tests/real/test_hub.py",
           "tests/real/test_run_agentic.py",
           "tests/notebooks/test_notebooks.py::test_notebook_runs_top_to_bottom[06_real_model]")


TINY_TRAINED = ("tests/real/test_spec.py", "tests/real/test_suffix.py", "tests/real/test_ngram.py",
                "tests/real/test_tool_calls.py", "tests/real/test_warmup.py", "tests/real/test_sampling.py")


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: "smollm2", "tiny-trained", or its file."""
    if nodeid.startswith(SMOLLM2):
        return "smollm2"
    return "tiny-trained" if nodeid.startswith(TINY_TRAINED) else nodeid.split("::", 1)[0]


@pytest.fixture(autouse=True)
def _one_thread_a_worker():
    """A test that sets torch's threads for itself (a profile, a pretrain) gives the worker back its one thread."""
    yield
    if os.environ.get("PYTEST_XDIST_WORKER") and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: unit(item.nodeid) != "smollm2")  # stable: the rest as collected


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # without pytest-xdist the suite runs in one process, in collection order
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class UnitScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduling with `unit` as the scope, the units handed out in collection order."""

        def __init__(self, config, log=None):
            config.option.loadscopereorder = False  # keep the order collected: the long unit first
            super().__init__(config, log)

        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return UnitScheduling(config, log)
