"""`validate_reward_spec(spec)`: the submit-time check of a reward, a pure function (no processes, no torch).

The control plane calls it on submit and answers 422 with the message; `build_reward` calls it too, so a spec that
passes here builds. Raises ValueError naming what is wrong:
- an unknown `type` (built-ins: contract/rewards/builtins.py, or 'composite', 'python');
- unknown, missing or mistyped params of a built-in, or an invalid regular expression;
- grader params (contract/rewards/graders.py): templates, operations, metrics, multi's sub-graders and formula;
- python: code that does not compile (with its line), code that defines no top-level `reward`, params other than
  timeout_s (0 < t <= MAX_TIMEOUT_S) and memory_mb (MIN_MEMORY_MB <= m <= MAX_MEMORY_MB);
- composites nested deeper than MAX_DEPTH, non-finite weights.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

from contract.rewards.builtins import bind_builtin
from contract.spec import RewardSpec

MAX_TIMEOUT_S = 60.0
MIN_MEMORY_MB, MAX_MEMORY_MB = 64, 4096
PYTHON_PARAMS = {"timeout_s": 2.0, "memory_mb": 256}
MAX_DEPTH = 8


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"reward 'python': param {name!r} must be a finite number, got {value!r}")
    return float(value)


def python_params(params: Mapping[str, Any]) -> tuple[float, int]:
    """(timeout_s, memory_mb) of a python reward, defaults filled in; ValueError naming a bad param."""
    unknown = sorted(set(params) - set(PYTHON_PARAMS))
    if unknown:
        raise ValueError(f"reward 'python': unknown params {unknown}; allowed: {sorted(PYTHON_PARAMS)}")
    timeout_s = _number("timeout_s", params.get("timeout_s", PYTHON_PARAMS["timeout_s"]))
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"reward 'python': param 'timeout_s' must be in (0, {MAX_TIMEOUT_S:g}], got {timeout_s:g}")
    memory_mb = _number("memory_mb", params.get("memory_mb", PYTHON_PARAMS["memory_mb"]))
    if not memory_mb.is_integer() or not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
        raise ValueError(f"reward 'python': param 'memory_mb' must be an integer in [{MIN_MEMORY_MB}, "
                         f"{MAX_MEMORY_MB}], got {memory_mb:g}")
    return timeout_s, int(memory_mb)


def _defines_reward(body: list[ast.stmt]) -> bool:
    """A top-level binding of `reward` (also inside top-level if/try/with blocks)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == "reward":
            return True
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "reward" for t in targets):
            return True
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
                (alias.asname or alias.name) == "reward" for alias in node.names):
            return True
        nested = [*getattr(node, "body", []), *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
        for handler in getattr(node, "handlers", []):
            nested += handler.body
        if isinstance(node, ast.If | ast.Try | ast.With) and _defines_reward(nested):
            return True
    return False


def check_python_code(code: str) -> None:
    """ValueError unless `code` compiles and defines a top-level `reward` (a def, class, assignment or import)."""
    try:
        tree = ast.parse(code, filename="<reward>")
        compile(tree, "<reward>", "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise ValueError(f"reward 'python': code does not compile ({where}): {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise ValueError(f"reward 'python': code does not compile: {type(exc).__name__}") from None
    if not _defines_reward(tree.body):
        last = max((getattr(node, "end_lineno", 1) or 1 for node in tree.body), default=1)
        raise ValueError(f"reward 'python': code defines no function `reward(prompt, response, meta)` "
                         f"(checked lines 1-{last})")


def validate_reward_spec(spec: RewardSpec | Mapping[str, Any], *, _depth: int = 0) -> RewardSpec:
    """The validated spec; ValueError (pydantic's ValidationError is one) naming what is wrong."""
    if not isinstance(spec, RewardSpec):
        spec = RewardSpec.model_validate(spec)
    if _depth > MAX_DEPTH:
        raise ValueError(f"reward composites nest at most {MAX_DEPTH} deep")
    if not math.isfinite(spec.weight):
        raise ValueError(f"reward {spec.type!r}: weight must be finite, got {spec.weight}")
    if spec.type == "python":
        assert spec.code is not None  # RewardSpec's validator guarantees it
        python_params(spec.params)
        check_python_code(spec.code)
    elif spec.type == "composite":
        if spec.params:
            raise ValueError("reward 'composite' takes no params; put them on its components")
        for child in spec.components:
            validate_reward_spec(child, _depth=_depth + 1)
    else:
        if spec.components:
            raise ValueError(f"reward {spec.type!r}: only 'composite' takes components")
        bind_builtin(spec.type, spec.params)
    return spec
