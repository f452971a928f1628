"""The sandbox a rollout's tool calls run in: a real `python -I` subprocess per call, its answer and latency; the
calculator's wall against known Python sandbox escapes; the OS-level sandbox a code-running tool needs."""
import ctypes
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from real.engine import tools
from real.engine.tools import Sandbox, _run, require_os_sandbox, run_code, run_calculator, runs_code
from tltsim.core.errors import TltsimError

MARK = "tltsim-escaped"  # every escape that writes a file writes one of this name
SUBCLASSES = "().__class__.__base__.__subclasses__()"
WRAP_CLOSE = f"[c for c in {SUBCLASSES} if c.__name__ == '_wrap_close'][0].__init__.__globals__"
OS = "__import__('os')"
# a process left running (its output closed, so the call's pipe ends when the call's own process does)
SLEEP = "if os.fork() == 0:\n    {setsid}\n    os.closerange(0, 64)\n    os.execv('/bin/sleep', ['sleep', '30'])"
# known ways out of a Python sandbox, each aimed at the canary directory (CANARY), the working directory, the home
# directory and the temporary directory: a file named MARK made in one of them, the canary's file removed, a process
# left running, or the CPU and memory taken
ESCAPES = [
    f"{WRAP_CLOSE}['listdir']('/')",
    f"{WRAP_CLOSE}['system']('touch CANARY/{MARK} {MARK} ~/{MARK} /tmp/{MARK}')",
    f"{WRAP_CLOSE}['remove']('CANARY/keep')",
    f"[c for c in {SUBCLASSES} if 'Popen' in c.__name__][0](['sleep', '30'])",
    f"{SUBCLASSES}[0]",
    "().__class__.__mro__[-1].__subclasses__()",
    "int.__subclasses__()",
    "type(1)",
    "__builtins__",
    f"__builtins__['__import__']('os').system('touch CANARY/{MARK}')",
    f"{OS}.system('touch CANARY/{MARK}')",
    f"import os\nos.system('touch CANARY/{MARK}')",
    f"from os import system\nsystem('touch CANARY/{MARK}')",
    f"__import__('subprocess').Popen(['sh', '-c', 'sleep 30 & touch CANARY/{MARK}'])",
    f"exec(\"import os; os.system('touch CANARY/{MARK}')\")",
    f"eval(\"{OS}\")",
    f"open('CANARY/{MARK}', 'w').write('x')",
    "(x for x in ()).gi_frame.f_globals['__builtins__']",
    f"(lambda: 0).__globals__['__builtins__']['open']('CANARY/{MARK}', 'w')",
    "(lambda: 0).__code__",
    f"print.__self__.__import__('os').system('touch CANARY/{MARK}')",
    f"abs.__self__.open('CANARY/{MARK}', 'w')",
    "sum.__self__",
    "'{0.__class__.__base__.__subclasses__}'.format(1)",
    "f'{().__class__.__base__}'",
    "'%s' % math.__loader__",
    f"@__import__\n@lambda _: 'os'\nclass x: pass\nx.system('touch CANARY/{MARK}')",
    f"@exec\n@lambda _: \"__import__('os').system('touch CANARY/{MARK}')\"\ndef f(): pass",
    "math.__loader__.load_module('os')",
    "math.__spec__",
    "math.__dict__",
    "globals()",
    "vars()",
    "breakpoint()",
    "getattr(math, '__loader__')",
    "x = math\nx.__loader__",
    f"__𝘪𝘮𝘱𝘰𝘳𝘵__('os').system('touch CANARY/{MARK}')",  # mathematical italics: NFKC reads __import__
    f"ｅｘｅｃ(\"open('CANARY/{MARK}', 'w')\")",  # fullwidth: NFKC reads exec
    "9 ** 9 ** 9 ** 9",
    "2 ** 10 ** 8",
    "pow(7, 10 ** 7)",
    "pow(3, 2 ** 14000, 2 ** 14000 + 1)",
    "math.factorial(10 ** 6)",
    "math.factorial(99999999999)",
    "math.perm(10 ** 7)",
    "sum(range(10 ** 12))",
    "max(range(10 ** 10))",
    "divmod(1, 2) * 10 ** 9",
    "round(1, -10 ** 4000)",
    "x = 10 ** 4000\ny = x * x * x",
    "-" * 5000 + "1",
    "abs(" * 150 + "1" + ")" * 150,
    "[" * 1000,
    "while True: pass",
    "def f(): f()\nf()",
    "[x for x in range(10 ** 9)]",
    "'a' * 10 ** 10",
    "import socket\nsocket.create_connection(('127.0.0.1', 9))",
]


def test_an_expression_answers_its_value_with_a_measured_latency():
    r = run_calculator("347 * 29 + 1200")
    assert r.output == str(347 * 29 + 1200) and r.code == "347 * 29 + 1200"
    assert 0 < r.latency_s < 5


def test_statements_answer_what_they_print_and_errors_are_answers():
    assert run_calculator("x = 6 * 7\nprint(x)").output == "42"
    assert run_calculator("1 / 0").output == "error: ZeroDivisionError"
    assert run_calculator("1 +").output == "error: SyntaxError"
    assert run_calculator("import os").output == "error: not allowed"


def test_the_subprocess_wall_stops_a_call_at_its_timeout():
    r = run_code("while True: pass", [], timeout_s=1.0)  # code the calculator would refuse, run bare here
    assert r.output == "error: timeout" and 1.0 <= r.latency_s < 3.0


def test_a_call_the_cpu_limit_ends_before_the_wall_clock_is_a_timeout_too():
    """On a loaded machine the child can spend its CPU-second before this process's timer fires: the kernel
    kills it at the wall's CPU limit, and the model reads the same answer as at the timeout."""
    r = _run([sys.executable, "-I", "-c", tools._CODE, "while True: pass", "1"], "loop", timeout_s=30.0)
    assert r.output == "error: timeout" and r.latency_s < 25  # the CPU limit ended it, not the 30 s timer


def test_calls_run_concurrently():
    sandbox = Sandbox(workers=3, timeout_s=1.0)
    sandbox._prefix = []  # its subprocess runs code, bare: three one-second loops
    start = time.perf_counter()
    futures = [sandbox.submit("while True: pass") for _ in range(3)]
    results = [f.result() for f in futures]
    wall = time.perf_counter() - start
    sandbox.close()
    assert all(r.output == "error: timeout" for r in results)
    assert wall < sum(r.latency_s for r in results) * 0.75  # three one-second calls took well under three seconds


def _children() -> set[int]:
    """The live processes whose parent is this one."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


@pytest.fixture
def reaper():
    """This process as the child subreaper: a process a call leaves behind, daemonised or not, becomes its child."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    assert prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    yield _children
    prctl(36, 0, 0, 0, 0)


@pytest.fixture
def places(tmp_path, monkeypatch):
    """The canary directory (a file `keep` in it) and the snapshot of every place an escape aims at; the sandbox's
    temporary directories made in a temporary directory of this test's own."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep").write_text("keep")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))

    def snapshot():
        marked = [Path(p) / MARK for p in (os.getcwd(), Path.home(), "/tmp")]
        return ({p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in canary.iterdir()}, sorted(tmp.iterdir()),
                [p.exists() for p in marked])
    return canary, snapshot


def test_the_checks_below_see_what_they_guard(reaper, places):
    """The escape test's checks fail where an escape succeeds: code run bare (no calculator) leaves a file in the
    canary directory and a daemonised process that the reaper sees."""
    canary, snapshot = places
    before = snapshot()
    out = run_code(f"import os\nopen({str(canary / MARK)!r}, 'w')\n{SLEEP.format(setsid='os.setsid()')}", [],
                   timeout_s=5.0)
    assert out.output == "" and snapshot() != before
    time.sleep(0.1)
    left = reaper() - {os.getpid()}
    assert left
    for pid in left:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("escape", ESCAPES, ids=range(len(ESCAPES)))
def test_a_known_escape_answers_an_error_in_time_and_changes_nothing(escape, reaper, places):
    canary, snapshot = places
    code = escape.replace("CANARY", str(canary))
    before, children = snapshot(), reaper()
    r = run_calculator(code, timeout_s=2.0)
    assert r.output.startswith("error:") and r.output != "error: timeout" and r.latency_s < 2.0
    time.sleep(0.05)  # a process started in the background would have been made by now
    assert snapshot() == before
    assert reaper() == children


def test_the_sandbox_kills_what_its_subprocess_leaves_running(reaper):
    """The second wall: a process the tool's code starts in its session is killed when the call returns."""
    children = reaper()
    r = run_code(f"import os\n{SLEEP.format(setsid='0')}\nprint('started')", [], timeout_s=5.0)
    assert r.output == "started"
    time.sleep(0.1)
    assert reaper() == children


def test_a_code_running_tool_is_refused_without_an_os_sandbox(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(TltsimError) as e:
        require_os_sandbox()
    assert "bubblewrap" in str(e.value) and "apt-get install bubblewrap" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TltsimError, match="bubblewrap"):
        Sandbox(runs_code=True)
    Sandbox(runs_code=False).close()  # the calculator needs none


def test_a_code_running_tool_is_refused_where_bubblewrap_cannot_make_its_namespaces(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TltsimError, match="cannot make one here \\(bwrap: No permissions"):
        require_os_sandbox()


def test_a_tool_that_does_not_say_is_taken_to_run_code():
    class Quiet:
        def call(self, turn):
            return None

        def answer_ids(self, result):
            return [0]

    assert runs_code(Quiet()) and not runs_code(type("Calc", (), {"runs_code": False})())


def test_a_run_whose_task_runs_code_is_refused_before_any_worker_starts(monkeypatch, tmp_path):
    from real.run import launch as launching
    from real.run.config import RunConfig

    class CodeTask:
        tools = type("Python", (), {"runs_code": True})()

    monkeypatch.setattr(RunConfig, "make_task", lambda self: CodeTask())
    monkeypatch.setattr(launching, "start_workers", lambda *a: pytest.fail("a worker started"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TltsimError, match="bubblewrap"):
        launching.launch(RunConfig(steps=1, max_new_tokens=8), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_code_under_bubblewrap_sees_none_of_the_machines_files_and_writes_nothing(places):
    try:
        prefix = require_os_sandbox()
    except TltsimError as e:
        pytest.skip(str(e))
    canary, snapshot = places
    before = snapshot()
    hidden = [__file__, str(canary / "keep"), str(Path.home() / ".cache"), "/home", "/etc/passwd"]
    assert run_code(f"import os\nprint([os.path.exists(p) for p in {hidden!r}])", prefix).output == str([False] * 5)
    assert run_code(f"open({str(canary / MARK)!r}, 'w')", prefix).output == "error: FileNotFoundError"
    assert run_code("import socket", prefix).output.startswith("error:")
    assert run_code("print(6 * 7)", prefix).output == "42"
    assert snapshot() == before
