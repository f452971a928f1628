"""The sandbox a rollout's tool calls run in: a real `python -I` subprocess per call, its answer and latency."""
import time

from real.engine.tools import Sandbox, run_python


def test_an_expression_answers_its_value_with_a_measured_latency():
    r = run_python("347 * 29 + 1200")
    assert r.output == str(347 * 29 + 1200) and r.code == "347 * 29 + 1200"
    assert 0 < r.latency_s < 5


def test_statements_answer_what_they_print():
    assert run_python("x = 6 * 7\nprint(x)").output == "42"
    assert run_python("print(2 ** 10)").output == "1024"


def test_errors_are_answers():
    assert run_python("1 / 0").output == "error: ZeroDivisionError"
    assert run_python("1 +").output == "error: SyntaxError"


def test_the_code_cannot_import_open_files_or_reach_the_network():
    assert run_python("import os").output == "error: ImportError"
    assert run_python("__import__('socket')").output == "error: NameError"
    assert run_python("open('f', 'w')").output == "error: NameError"
    # even through the builtins of a module it was given, the socket module is gone
    assert run_python("math.__loader__.load_module('socket')").output.startswith("error:")


def test_a_call_that_runs_too_long_is_stopped_at_its_timeout():
    r = run_python("while True: pass", timeout_s=1.0)
    assert r.output == "error: timeout" and 1.0 <= r.latency_s < 3.0


def test_calls_run_concurrently():
    sandbox = Sandbox(workers=3, timeout_s=1.0)
    start = time.perf_counter()
    futures = [sandbox.submit("while True: pass") for _ in range(3)]
    results = [f.result() for f in futures]
    wall = time.perf_counter() - start
    sandbox.close()
    assert all(r.output == "error: timeout" for r in results)
    assert wall < sum(r.latency_s for r in results) * 0.75  # three one-second calls took well under three seconds
