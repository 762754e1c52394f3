"""`Formula`: the safe arithmetic evaluator behind the `multi` grader's `calculate_output` (no `eval`, no `exec`).

Allowed, as OpenAI's grader docs list them: numbers, the sub-graders' names, + - * / and powers (`**`, or `^` as in
OpenAI's examples), unary + and -, parentheses, and calls of min, max, abs, floor, ceil, exp, sqrt, log.
Anything else (attribute access, subscripts, other names or calls, keywords, lambdas, strings, comparisons) is a
ValueError when the formula is parsed, so a spec that validates can only compute arithmetic.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

MAX_FORMULA_CHARS = 1000
MAX_POWER_EXPONENT = 100.0  # keeps `x ** huge` from taking memory or time
MAX_NESTING = 200  # operators and calls inside one another (`- - - ... 1`): checking and evaluating recurse this deep
FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min, "max": max, "abs": abs, "floor": math.floor, "ceil": math.ceil,
    "exp": math.exp, "sqrt": math.sqrt, "log": math.log,
}
_ARITY = {"min": (1, 64), "max": (1, 64), "log": (1, 2)}  # others take exactly one argument


def _power(base: float, exponent: float) -> float:
    if abs(exponent) > MAX_POWER_EXPONENT:
        raise ValueError(f"exponent {exponent:g} is beyond +-{MAX_POWER_EXPONENT:g}")
    result = base ** exponent
    if isinstance(result, complex):
        raise ValueError(f"{base:g} ** {exponent:g} is not a real number")
    return float(result)


_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: _power,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class Formula:
    """A parsed formula over `names`; `evaluate(values)` computes it. ValueError names what is not allowed."""

    def __init__(self, text: str, names: set[str]):
        if not text.strip():
            raise ValueError("formula is empty")
        if len(text) > MAX_FORMULA_CHARS:
            raise ValueError(f"formula is {len(text)} characters; at most {MAX_FORMULA_CHARS}")
        try:
            # `^` is power in OpenAI's formulas: rewritten to `**` so it binds like a power (strings are refused)
            tree = ast.parse(text.strip().replace("^", "**"), mode="eval")
        except SyntaxError as exc:
            raise ValueError(f"formula is not an expression (column {exc.offset}): {exc.msg}") from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise ValueError(f"formula is not an expression: {type(exc).__name__}") from None
        self.text, self.names, self.tree = text, set(names), tree.body
        self.used: set[str] = set()
        self._check(self.tree, 0)

    def _check(self, node: ast.AST, depth: int) -> None:
        if depth > MAX_NESTING:
            raise ValueError(f"formula: nested more than {MAX_NESTING} operators or calls deep")
        depth += 1
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ValueError(f"formula: only numbers are allowed as constants, got {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id not in self.names:
                raise ValueError(f"formula: unknown name {node.id!r}; use the graders' names {sorted(self.names)}")
            self.used.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            self._check(node.left, depth)
            self._check(node.right, depth)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            self._check(node.operand, depth)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                called = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ValueError(f"formula: calling {called!r} is not allowed; functions: {sorted(FUNCTIONS)}")
            low, high = _ARITY.get(node.func.id, (1, 1))
            if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args) \
                    or not low <= len(node.args) <= high:
                raise ValueError(f"formula: {node.func.id}() takes {low}" + (f" to {high}" if high > low else "")
                                 + " plain argument(s)")
            for arg in node.args:
                self._check(arg, depth)
        else:
            raise ValueError(f"formula: {type(node).__name__} ({ast.unparse(node)!r}) is not allowed; use numbers, "
                             f"names, + - * / ** ^, parentheses and {sorted(FUNCTIONS)}")

    def evaluate(self, values: Mapping[str, float]) -> float:
        """The formula's value; ValueError for a math domain error, division by zero or a non-finite result."""
        try:
            result = float(self._eval(self.tree, values))
        except ZeroDivisionError:
            raise ValueError(f"formula {self.text!r}: division by zero") from None
        except OverflowError:
            raise ValueError(f"formula {self.text!r}: result too large") from None
        except ValueError as exc:
            raise ValueError(f"formula {self.text!r}: {exc}") from None
        if not math.isfinite(result):
            raise ValueError(f"formula {self.text!r} gave {result}")
        return result

    def _eval(self, node: ast.AST, values: Mapping[str, float]) -> float:
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, int | float)  # _check admitted numbers only
            return float(node.value)
        if isinstance(node, ast.Name):
            return float(values[node.id])
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, values), self._eval(node.right, values))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self._eval(node.operand, values))
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)  # _check admitted nothing else
        return float(FUNCTIONS[node.func.id](*(self._eval(arg, values) for arg in node.args)))
