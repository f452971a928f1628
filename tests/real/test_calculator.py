"""The calculator's language (real.engine.calculator), evaluated in this process: what it answers, what it refuses,
and where its sizes stop.

data/calculator_answers.json holds 200 generated expressions (`generated()` below) with the answers Python's own
`eval` gave them in the sandbox's subprocess (a scope of the same functions and `math`): the calculator answers
each the same.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from real.engine.calculator import MAX_CODE, MAX_DIGITS, MAX_RANGE, NOT_ALLOWED, TOO_LARGE, answer

RECORDED = Path(__file__).parent / "data" / "calculator_answers.json"
_FUNCTIONS1 = ["abs", "round", "int", "float", "math.sqrt", "math.floor", "math.ceil", "math.log10", "math.exp"]
_FUNCTIONS2 = ["min", "max", "divmod", "round", "math.gcd", "math.hypot"]


def _number(rng):
    r = rng.random()
    if r < 0.7:
        return str(int(rng.integers(0, 10 ** int(rng.integers(1, 5)))))
    if r < 0.9:
        return f"{rng.random() * 100:.2f}"
    return rng.choice(["math.pi", "math.e", "True"])


def _expression(rng, depth=0):
    r = rng.random()
    if depth >= 3 or r < 0.3:
        return _number(rng)
    if r < 0.65:
        op = rng.choice(["+", "-", "*", "/", "//", "%", "+", "*", "-"])
        return f"{_expression(rng, depth + 1)} {op} {_expression(rng, depth + 1)}"
    if r < 0.72:
        return f"({_expression(rng, depth + 1)})"
    if r < 0.76:
        return f"-{_expression(rng, depth + 1)}"
    if r < 0.8:
        return f"{int(rng.integers(2, 20))} ** {int(rng.integers(0, 12))}"
    if r < 0.86:
        return f"{rng.choice(_FUNCTIONS1)}({_expression(rng, depth + 1)})"
    if r < 0.92:
        return f"{rng.choice(_FUNCTIONS2)}({_expression(rng, depth + 1)}, {_expression(rng, depth + 1)})"
    if r < 0.95:
        return f"sum(range({int(rng.integers(0, 1000))}))"
    op = rng.choice(["<", "<=", "==", "!=", ">", ">="])
    return f"{_expression(rng, depth + 1)} {op} {_expression(rng, depth + 1)}"


def _task_expression(rng):
    """The agentic task's forms: a product and a term, or a sum of three."""
    if rng.random() < 0.75:
        return (f"{int(rng.integers(12, 1000))} * {int(rng.integers(12, 100))} {'+' if rng.random() < 0.5 else '-'} "
                f"{int(rng.integers(100, 1000))}")
    return " + ".join(str(int(rng.integers(100, 10000))) for _ in range(3))


def generated(n: int = 200, seed: int = 0) -> list[str]:
    """`n` distinct calculator calls: the task's forms, random arithmetic with the listed functions, statements."""
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        r = rng.random()
        if r < 0.3:
            out.setdefault(_task_expression(rng))
        elif r < 0.8:
            out.setdefault(_expression(rng))
        elif r < 0.9:
            out.setdefault(f"x = {_expression(rng)}\nprint(x)")
        else:
            out.setdefault(f"a = {_expression(rng)}\nb = {_expression(rng)}\nb += a\nprint(a, b * 2)")
    return list(out)


def test_the_calculator_answers_200_generated_expressions_as_python_did():
    recorded = json.loads(RECORDED.read_text())
    assert list(recorded) == generated()
    assert sum(a.startswith("error:") for a in recorded.values()) < 20  # the corpus is mostly answers, not errors
    assert {code: answer(code) for code in recorded} == recorded


def test_an_expression_answers_its_value_and_statements_what_they_print():
    assert answer("347 * 29 + 1200") == "11263"
    assert answer("x = 6 * 7\nprint(x)") == "42"
    assert answer("print(2 ** 10)") == "1024"
    assert answer("a = 7\na += 3\nb = a * 2\nprint(a, b)\nprint(b - a)") == "10 20\n10"
    assert answer("divmod(17, 5)") == "(3, 2)"
    assert answer("math.sqrt(2) * math.pi") == str(math.sqrt(2) * math.pi)
    assert answer("3 < 4 <= 4 != 5") == "True" and answer("1 < 0 < 2") == "False"
    assert answer("x = 1\nx") == ""  # an expression among statements prints nothing, as Python's exec
    assert answer("sum(range(10)) + len(range(3)) + max(1, 2) + abs(-4)") == "54"


def test_errors_are_answers():
    assert answer("1 / 0") == "error: ZeroDivisionError"
    assert answer("1 +") == "error: SyntaxError"
    assert answer("math.sqrt(-1)") == "error: ValueError"
    assert answer("divmod(7, 2) + 1") == "error: TypeError"
    assert answer("max(range(0))") == "error: ValueError"


@pytest.mark.parametrize("code", [
    "math.__loader__", "().__class__", "x = 1\nx.real", "(1).real", "math", "abs", "print", "y", "x = y",
    "foo(1)", "eval('1')", "'text'", "b'x'", "f'{1}'", "[1, 2]", "(1, 2)", "{1: 2}", "[x for x in range(3)]",
    "lambda: 1", "1 if 1 else 2", "1 and 2", "not 1", "1 << 2", "1 in range(3)", "1 is 1", "None", "import math",
    "def f(): pass", "for i in range(3): pass", "while 0: pass", "x, y = 1, 2", "math.x = 1", "print = 1",
    "abs = 1", "math = 1", "x += 1", "print(1) + 1", "print(print(1))", "round(2.5, ndigits=1)", "print(*range(3))",
    "abs(*range(1))", "range(3)[0]", "x = 1\ndel x", "assert 1", "pass",
])
def test_anything_but_arithmetic_is_not_allowed(code):
    assert answer(code) == NOT_ALLOWED


def test_a_refused_call_runs_nothing_of_itself():
    """The whole text is checked before anything runs: a print before a refused line prints nothing."""
    assert answer("print(1)\nmath.__loader__") == NOT_ALLOWED
    assert answer("print(1 / 0)\nimport os") == NOT_ALLOWED


def test_sizes_are_bounded_before_the_work():
    assert answer("9 ** 9 ** 9") == TOO_LARGE  # refused before it is computed
    assert answer("pow(10, 10 ** 9)") == TOO_LARGE
    assert answer("pow(3, 10 ** 4000, 10 ** 4000 + 7)") == TOO_LARGE and answer("pow(3, 4, 5)") == "1"
    assert answer(f"10 ** {MAX_DIGITS - 1}") == str(10 ** (MAX_DIGITS - 1))
    assert answer(f"10 ** {MAX_DIGITS - 1} * 100") == TOO_LARGE  # refused as a result
    assert answer("math.factorial(10 ** 8)") == TOO_LARGE
    assert answer("math.factorial(2000)") == TOO_LARGE and answer("math.factorial(20)") == str(math.factorial(20))
    assert answer("math.comb(10 ** 9, 10 ** 8)") == TOO_LARGE and answer("math.comb(10, 3)") == "120"
    assert answer("round(5, -10 ** 4000)") == TOO_LARGE
    assert answer(f"sum(range({MAX_RANGE + 1}))") == TOO_LARGE
    assert answer(f"sum(range({MAX_RANGE}))") == str(sum(range(MAX_RANGE)))
    assert answer("-" * 100 + "1") == TOO_LARGE  # nesting
    assert answer("1" + " + 1" * 40) == "41"
    assert answer("1" * (MAX_CODE + 1)) == TOO_LARGE
    assert answer("2.0 ** 10 ** 4") == "error: OverflowError"


def test_unicode_look_alikes_are_the_names_they_normalise_to_or_none():
    assert answer("ｍａｔｈ.ｓｑｒｔ(4)") == "2.0"  # Python reads identifiers in NFKC: these are math and sqrt
    assert answer("ｅｘｅｃ('1')") == NOT_ALLOWED
    assert answer("mаth.sqrt(4)") == NOT_ALLOWED  # a Cyrillic а: another name, and no name of the calculator's
