"""Tool calls in a rollout: what a task supplies so that the engine pauses a row at a call, and the sandbox that runs it.

A task that lets its model call a tool gives the engine (real.engine.generate.Engine, `tools=`) an object with the
`ToolUse` interface: `call(turn)` says whether a row's tokens of its current turn end with a complete tool call (a
closing marker such as `</calc>`) and returns the call's code, and `answer_ids(result)` the tokens (the model's own
tokenizer's) that the tool's answer appends to the row before it resumes. The engine runs each call on its
`Sandbox` while the other rows keep decoding.

The sandbox runs the code the model wrote in a fresh `python -I -c` subprocess (isolated mode: no user site, no
environment variables, no current directory on the path), with an empty environment, a temporary working directory,
a wall-clock timeout, CPU-time, memory and file-size limits, a network namespace of its own where the kernel lets an
unprivileged process make one and, in any case, no socket module; the code sees only a few arithmetic builtins and
`math` (no `__import__`). An expression's value is the answer; statements run with what they print as the answer.
Errors are answers too (`error: ZeroDivisionError`, `error: timeout`): the model reads them as it would a tool's.
Latency is the subprocess's wall time (`time.perf_counter` around it), measured, never slept.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

TIMEOUT_S = 5.0  # a call's wall-clock limit
MAX_OUTPUT = 200  # characters of a tool's answer kept (the rest is cut: the model reads a bounded answer)

# run by `python -I -c` with the model's code as argv[1]; prints the answer on stdout
_CHILD = r"""
import sys, resource, ctypes, io, contextlib, math
try:  # a network namespace of its own (no interface but loopback, down) where unprivileged user namespaces exist
    ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000)  # CLONE_NEWUSER | CLONE_NEWNET
except Exception:
    pass
for name in ("socket", "_socket", "ssl", "_ssl", "select", "urllib", "http"):
    sys.modules[name] = None  # importing any of them now fails
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
names = {"abs": abs, "min": min, "max": max, "round": round, "pow": pow, "sum": sum, "range": range, "len": len,
         "int": int, "float": float, "divmod": divmod, "print": print, "str": str, "math": math}
scope = {"__builtins__": names}
code = sys.argv[1]
try:
    try:
        compiled, is_expression = compile(code, "<tool>", "eval"), True
    except SyntaxError:
        compiled, is_expression = compile(code, "<tool>", "exec"), False
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = eval(compiled, scope)
    text = str(value) if is_expression and value is not None else out.getvalue().strip()
except BaseException as e:
    text = "error: " + type(e).__name__
sys.stdout.write(text)
"""


@runtime_checkable
class ToolUse(Protocol):
    """What a task gives the engine so its rows can call a tool (see the module docstring)."""

    def call(self, turn: list[int]) -> str | None:
        """The code of the tool call the row's tokens of this turn end with, or None (no complete call at the end)."""
        ...

    def answer_ids(self, result: str) -> list[int]:
        """The tokens the tool's answer `result` appends to the row (at least one)."""
        ...


@dataclass(frozen=True)
class ToolResult:
    """One tool call: the code run, its answer and the subprocess's wall time."""

    code: str
    output: str
    latency_s: float


def run_python(code: str, timeout_s: float = TIMEOUT_S) -> ToolResult:
    """Run `code` in the sandbox (see the module docstring) and return its answer and latency."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tltsim-tool-") as cwd:
        try:
            done = subprocess.run([sys.executable, "-I", "-c", _CHILD, code, str(max(1, int(timeout_s)))], cwd=cwd,
                                  env={}, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, text=True)
            output = done.stdout.strip() or (f"error: exit {done.returncode}" if done.returncode else "")
        except subprocess.TimeoutExpired:
            output = "error: timeout"
    return ToolResult(code, output[:MAX_OUTPUT], time.perf_counter() - start)


class Sandbox:
    """Runs tool calls concurrently (a thread each, up to `workers`), each in its own sandboxed subprocess."""

    def __init__(self, workers: int = 4, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool")

    def submit(self, code: str) -> Future:
        """Start running `code`; the future's result is its ToolResult."""
        return self._pool.submit(run_python, code, self.timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
