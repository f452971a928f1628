"""The calculator a rollout's tool calls run: arithmetic, and nothing else, checked before anything runs.

`answer(code)` parses the model's text with Python's `ast`, checks every node of it against the calculator's
language, and only then evaluates it, by walking the checked tree (no `eval`, no `exec`, no Python scope). The
language:

- numbers (int, float, complex, True and False), parentheses, the arithmetic operators `+ - * / // % **` and
  unary `+ -`, and the comparisons `== != < <= > >=`;
- calls of the functions in FUNCTIONS by their bare name, and of `math`'s functions and constants in MATH as
  `math.NAME`, with positional arguments only;
- statements: assignment to a plain name (`x = ...`, `x += ...`; not to a function's name), and `print(...)` of
  expressions as a statement of its own; a name is read only after a statement before it assigned it.

Anything else (attribute access but `math.NAME`, subscripts, other names, calls of anything else, keywords,
comprehensions, lambdas, strings, f-strings, imports, loops, conditionals, `print` inside an expression) answers
`error: not allowed`, before anything is evaluated. Sizes are bounded so that no call can take the CPU or the
memory: the code's length (MAX_CODE), the expression's nesting (MAX_DEPTH), an integer's digits (MAX_DIGITS,
checked before a power or a factorial is computed, and on every result), a range's length (MAX_RANGE). Past a
bound the answer is `error: too large`.

A single expression's answer is its value; statements answer what they printed (`x = 6 * 7` then `print(x)`
answers `42`). Python's own errors are answers too (`error: ZeroDivisionError`, `error: SyntaxError`).

This module is the whole program the sandbox's subprocess runs (real.engine.tools sends its source), so it
imports only the standard library and nothing of tltsim.
"""
import ast
import math
import operator

MAX_CODE = 1000  # characters of one call (a call of the agentic task is about 20)
MAX_DEPTH = 60  # nesting of the syntax tree (a chain of 30 additions is 30 deep)
MAX_DIGITS = 4300  # decimal digits of an integer: Python's own limit on writing one as text
MAX_RANGE = 100_000  # elements of a range
_MAX_BITS = int(MAX_DIGITS / math.log10(2))
_MAX_MODULAR = 1 << 22  # a modular power's exponent bits x modulus bits (2048 x 2048 takes about 0.1 s)
NOT_ALLOWED, TOO_LARGE = "error: not allowed", "error: too large"

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_NUMBER = (int, float, complex)  # bool is an int


class NotAllowed(Exception):
    """The code holds something outside the calculator's language."""


class TooLarge(Exception):
    """A value past one of the size bounds."""


def _bounded(value):
    """`value`, or TooLarge for an integer of more than MAX_DIGITS digits or a range of more than MAX_RANGE."""
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise TooLarge
    if isinstance(value, range) and len(value) > MAX_RANGE:
        raise TooLarge
    return value


def _power(base, exponent, modulus=None):
    """`base ** exponent` (`% modulus`), TooLarge before it is computed where the integer would be too large or,
    for a modular power, the work too long (its exponent's bits times its modulus's past _MAX_MODULAR)."""
    if modulus is not None:
        if isinstance(exponent, int) and isinstance(modulus, int) \
                and exponent.bit_length() * modulus.bit_length() > _MAX_MODULAR:
            raise TooLarge
        return pow(base, exponent, modulus)
    if (isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
            and exponent * (abs(base).bit_length() - 1) > _MAX_BITS):
        raise TooLarge
    return pow(base, exponent)


def _factorial(n):
    """math.factorial, TooLarge before it is computed past 5000 (whose 16,326 digits take a millisecond, and are
    then refused as any result past MAX_DIGITS is)."""
    if isinstance(n, int) and n > 5000:
        raise TooLarge
    return math.factorial(n)


def _round(number, ndigits=None):
    """round, TooLarge for an `ndigits` past MAX_DIGITS (a negative one raises 10 to its size)."""
    if isinstance(ndigits, int) and abs(ndigits) > MAX_DIGITS:
        raise TooLarge
    return round(number) if ndigits is None else round(number, ndigits)


def _binomial(function):
    """math.comb or math.perm, TooLarge before it is computed where n is past what MAX_DIGITS digits can hold."""
    def bounded(n, k=None):
        if isinstance(n, int) and n > _MAX_BITS:
            raise TooLarge
        return function(n) if k is None else function(n, k)
    return bounded


def _range(*args):
    """range, TooLarge past MAX_RANGE elements before anything iterates it."""
    return _bounded(range(*args))


FUNCTIONS = {"abs": abs, "min": min, "max": max, "round": _round, "pow": _power, "sum": sum, "range": _range,
             "len": len, "int": int, "float": float, "divmod": divmod}
# math's public functions and constants, with the ones whose cost grows with their argument bounded; math.prod is
# left out (its product over a range grows past any bound before its result can be checked)
MATH = {name: getattr(math, name) for name in dir(math) if not name.startswith("_") and name != "prod"}
MATH.update(factorial=_factorial, comb=_binomial(math.comb), perm=_binomial(math.perm))
_RESERVED = {*FUNCTIONS, "print", "math"}  # names a statement may not assign


def _check(tree: ast.Module) -> None:
    """NotAllowed unless every node of `tree` is in the calculator's language (the module docstring)."""
    assigned: set[str] = set()

    def expression(node, depth):
        if depth > MAX_DEPTH:
            raise TooLarge
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, float, complex, bool):
                raise NotAllowed
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            expression(node.left, depth + 1)
            expression(node.right, depth + 1)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            expression(node.operand, depth + 1)
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            for operand in (node.left, *node.comparators):
                expression(operand, depth + 1)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in assigned:
            pass
        elif isinstance(node, ast.Attribute) and _is_math(node) and not callable(MATH[node.attr]):
            pass  # a constant: math.pi
        elif isinstance(node, ast.Call) and _function(node.func) is not None and not node.keywords:
            for arg in node.args:
                if isinstance(arg, ast.Starred):
                    raise NotAllowed
                expression(arg, depth + 1)
        else:
            raise NotAllowed

    for statement in tree.body:
        if isinstance(statement, ast.Expr):
            printed = _printed(statement.value)
            for value in printed if printed is not None else [statement.value]:
                expression(value, 1)
        elif isinstance(statement, (ast.Assign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if isinstance(statement, ast.AugAssign) and type(statement.op) not in _BINARY:
                raise NotAllowed
            if len(targets) != 1 or not isinstance(targets[0], ast.Name) or targets[0].id in _RESERVED:
                raise NotAllowed
            if isinstance(statement, ast.AugAssign) and targets[0].id not in assigned:
                raise NotAllowed
            expression(statement.value, 1)
            assigned.add(targets[0].id)
        else:
            raise NotAllowed


def _is_math(node) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math"
            and node.attr in MATH)


def _function(node):
    """The function a call's `func` names (a bare name in FUNCTIONS or `math.NAME`), or None."""
    if isinstance(node, ast.Name) and node.id in FUNCTIONS:
        return FUNCTIONS[node.id]
    if _is_math(node) and callable(MATH[node.attr]):
        return MATH[node.attr]
    return None


def _printed(node):
    """The arguments of `print(...)` as a statement of its own, or None for any other expression."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise NotAllowed
        return node.args
    return None


def _arithmetic(op: ast.operator, left, right):
    """`left op right` for numbers; TypeError for a tuple (divmod's) or a range: no repetition, no concatenation."""
    if not (isinstance(left, _NUMBER) and isinstance(right, _NUMBER)):
        raise TypeError
    return _bounded(_power(left, right) if isinstance(op, ast.Pow) else _BINARY[type(op)](left, right))


def _evaluate(node, scope: dict):
    """The value of a checked expression."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        return _arithmetic(node.op, _evaluate(node.left, scope), _evaluate(node.right, scope))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, scope))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, scope)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Name):
        return scope[node.id]
    if isinstance(node, ast.Attribute):
        return MATH[node.attr]
    if isinstance(node, ast.Call):
        return _bounded(_function(node.func)(*(_evaluate(arg, scope) for arg in node.args)))
    raise NotAllowed  # unreachable for a checked tree: a second wall, not a path


def answer(code: str) -> str:
    """The calculator's answer to `code` (the module docstring): a value, what it printed, or `error: ...`."""
    if len(code) > MAX_CODE:
        return TOO_LARGE
    try:
        tree = ast.parse(code, "<tool>")
        _check(tree)
    except SyntaxError:
        return "error: SyntaxError"
    except (RecursionError, MemoryError, TooLarge):
        return TOO_LARGE
    except NotAllowed:
        return NOT_ALLOWED
    scope: dict = {}
    lines: list[str] = []
    try:
        value = None
        for statement in tree.body:
            if isinstance(statement, ast.Expr):
                printed = _printed(statement.value)
                if printed is None:
                    value = _evaluate(statement.value, scope)
                else:
                    lines.append(" ".join(str(_evaluate(arg, scope)) for arg in printed))
                    value = None
            elif isinstance(statement, ast.Assign):
                scope[statement.targets[0].id] = _evaluate(statement.value, scope)
            else:  # AugAssign
                name = statement.target.id
                scope[name] = _arithmetic(statement.op, scope[name], _evaluate(statement.value, scope))
    except (TooLarge, RecursionError, MemoryError):
        return TOO_LARGE
    except Exception as e:
        return f"error: {type(e).__name__}"
    single = len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and value is not None
    return str(value) if single else "\n".join(lines).strip()
