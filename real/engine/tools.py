"""Tool calls in a rollout: what a task supplies so that the engine pauses a row at a call, and the sandbox that runs it.

A task that lets its model call a tool gives the engine (real.engine.generate.Engine, `tools=`) an object with the
`ToolUse` interface: `call(turn)` says whether a row's tokens of its current turn end with a complete tool call (a
closing marker such as `</calc>`) and returns the call's code, and `answer_ids(result)` the tokens (the model's own
tokenizer's) that the tool's answer appends to the row before it resumes. The engine runs each call on its
`Sandbox` while the other rows keep decoding.

The sandbox is two walls. The first is the language: the calculator (real.engine.calculator) parses the model's
text, checks that it is arithmetic and nothing else, and only then evaluates it by walking the checked tree; anything
else answers `error: not allowed`, and sizes are bounded (`error: too large`). The second is the process it runs in:
a fresh `python -I -c` subprocess (isolated mode: no user site, no environment variables, no current directory on
the path) of its own session, with an empty environment, a temporary working directory, a wall-clock timeout,
CPU-time, memory and file-size limits, a network namespace of its own where the kernel lets an unprivileged process
make one and, in any case, no socket module; the whole session is killed when the call returns, so nothing it
started outlives it. An expression's value is the answer; statements answer what they print. Errors are answers
too (`error: ZeroDivisionError`, `error: timeout`): the model reads them as it would a tool's. Latency is the
subprocess's wall time (`time.perf_counter` around it), measured, never slept.

A tool that runs arbitrary code (an interpreter, a shell: `ToolUse.runs_code`) gets no such first wall, so it may
only ever run under an OS-level sandbox: `require_os_sandbox()` finds bubblewrap and checks that the kernel lets it
make its namespaces, and refuses in one line (what is missing, what to do) before any worker starts. docs/guarantees.md
says what the sandbox guarantees and which tests hold it.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from real.engine import calculator
from tltsim.core.errors import TltsimError

TIMEOUT_S = 5.0  # a call's wall-clock limit
MAX_OUTPUT = 200  # characters of a tool's answer kept (the rest is cut: the model reads a bounded answer)

# the process wall, first in every tool's subprocess (argv: the code, the CPU-time limit in seconds)
_WALL = r"""
import sys, resource, ctypes
try:  # a network namespace of its own (no interface but loopback, down) where unprivileged user namespaces exist
    ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000)  # CLONE_NEWUSER | CLONE_NEWNET
except Exception:
    pass
for name in ("socket", "_socket", "ssl", "_ssl", "select", "urllib", "http"):
    sys.modules[name] = None  # importing any of them now fails
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))  # SIGXCPU at the limit (SIGKILL a second on)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # and no core file of it
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
"""
# the calculator's program: its module's own source, the wall, then its answer on stdout
_CALCULATOR = f"{Path(calculator.__file__).read_text()}\n{_WALL}\nsys.stdout.write(answer(sys.argv[1]))\n"
# a code-running tool's program, under the OS-level sandbox: the wall, then the code with what it prints as answer
_CODE = _WALL + r"""
try:
    exec(compile(sys.argv[1], "<tool>", "exec"), {"__name__": "__tool__"})
except BaseException as e:
    print("error: " + type(e).__name__)
"""
# what the OS-level sandbox shows a code-running tool: the system's programs and libraries and Python's own
# installation, read-only; a fresh /tmp, /proc and /dev; no home, no working tree, no network, no other process
_SYSTEM = ("/usr", "/bin", "/lib", "/lib64", "/etc/alternatives")


@runtime_checkable
class ToolUse(Protocol):
    """What a task gives the engine so its rows can call a tool (see the module docstring)."""

    def call(self, turn: list[int]) -> str | None:
        """The code of the tool call the row's tokens of this turn end with, or None (no complete call at the end)."""
        ...

    def answer_ids(self, result: str) -> list[int]:
        """The tokens the tool's answer `result` appends to the row (at least one)."""
        ...

    # whether a call runs arbitrary code (an interpreter, a shell) rather than the calculator's arithmetic: such a
    # tool runs only under the OS-level sandbox (require_os_sandbox), and one that does not say is taken to
    runs_code: bool


@dataclass(frozen=True)
class ToolResult:
    """One tool call: the code run, its answer and the subprocess's wall time."""

    code: str
    output: str
    latency_s: float


def run_calculator(code: str, timeout_s: float = TIMEOUT_S) -> ToolResult:
    """The calculator's answer to `code`, computed in its sandboxed subprocess (the module docstring), and its
    latency."""
    return _run([sys.executable, "-I", "-c", _CALCULATOR, code, str(max(1, int(timeout_s)))], code, timeout_s)


def run_code(code: str, prefix: list[str], timeout_s: float = TIMEOUT_S) -> ToolResult:
    """Python `code`, any code, run under the OS-level sandbox `prefix` (require_os_sandbox's; an empty one runs it
    behind the process wall alone, as tests of that wall do) and the process wall; its answer is what it printed."""
    return _run([*prefix, sys.executable, "-I", "-c", _CODE, code, str(max(1, int(timeout_s)))], code, timeout_s)


def _run(command: list[str], code: str, timeout_s: float) -> ToolResult:
    """Run a tool's subprocess in a session of its own and a fresh temporary directory; kill the whole session
    when it returns (nothing it started outlives the call)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tltsim-tool-") as cwd:
        child = subprocess.Popen(command, cwd=cwd, env={}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            stdout, _ = child.communicate(timeout=timeout_s)
            # the wall's CPU limit, as long as the timeout, ends the call with SIGXCPU where the machine delays this
            # process's own timer (bubblewrap reports a signal as 128 + its number)
            output = stdout.strip() or ("error: timeout" if child.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)
                                        else f"error: exit {child.returncode}" if child.returncode else "")
        except subprocess.TimeoutExpired:
            output = "error: timeout"
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:  # the session is empty already
                pass
            child.wait()
            child.stdout.close()
    return ToolResult(code, output[:MAX_OUTPUT], time.perf_counter() - start)


def require_os_sandbox() -> list[str]:
    """The command prefix that runs a program under bubblewrap: the system's files and Python's installation
    read-only, a fresh /tmp, no network and no other process in sight. TltsimError, in one line saying what is
    missing and what to do, where bubblewrap is not installed or the kernel does not let it make its namespaces."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise TltsimError("a tool that runs arbitrary code needs an OS-level sandbox, and bubblewrap (bwrap) is not "
                          "on PATH; install it (apt-get install bubblewrap) or give the task a tool that does not "
                          "run code")
    python = Path(os.path.realpath(sys.executable)).parent.parent  # the interpreter's installation
    binds = []
    for path in (*_SYSTEM, str(python), sys.prefix):
        if os.path.islink(path):
            binds += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            binds += ["--ro-bind", path, path]
    prefix = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *binds, "--tmpfs", "/tmp",
              "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp", "--"]
    probe = subprocess.run([*prefix, sys.executable, "-I", "-c", "pass"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        raise TltsimError(f"a tool that runs arbitrary code needs an OS-level sandbox, and bubblewrap cannot make "
                          f"one here ({reason}); allow unprivileged user namespaces (sysctl "
                          f"kernel.unprivileged_userns_clone=1) or run on a machine that does")
    return prefix


def runs_code(tools: ToolUse) -> bool:
    """Whether `tools` runs arbitrary code (ToolUse.runs_code); a tool that does not say is taken to."""
    return getattr(tools, "runs_code", True)


class Sandbox:
    """Runs tool calls concurrently (a thread each, up to `workers`), each in its own sandboxed subprocess: the
    calculator's, or, for a tool that runs code (`runs_code`), the OS-level sandbox's (TltsimError here where
    there is none)."""

    def __init__(self, workers: int = 4, timeout_s: float = TIMEOUT_S, runs_code: bool = False):
        self.timeout_s = timeout_s
        self._prefix = require_os_sandbox() if runs_code else None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool")

    def submit(self, code: str) -> Future:
        """Start running `code`; the future's result is its ToolResult."""
        if self._prefix is None:
            return self._pool.submit(run_calculator, code, self.timeout_s)
        return self._pool.submit(run_code, code, self._prefix, self.timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
