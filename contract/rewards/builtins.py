"""Built-in reward functions, each registered where it is written with its parameters' defaults (validated when the
reward is built): `@REWARDS.register("name", defaults={...}, required=(...), compiled=(...))` (contract/registry.py).
A new reward type is one function here; docs/jobspec.md lists them with their parameters.

A missing answer in meta raises KeyError; `Reward.score` turns it into a per-sample error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from contract.registry import Registry
from contract.rewards.safe_regex import FLAG_LETTERS, compile_pattern

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# name -> fn(prompt, response, meta, **params) -> float; meta: `defaults`, `required`, `compiled` (params compiled as
# RE2 regular expressions with the `flags` param: contract/rewards/safe_regex.py)
# Graders (contract/rewards/graders.py, model_graders.py) register their binder with meta `grader=True`:
# binder(params, models) -> fn.
REWARDS: Registry[Callable[..., Any]] = Registry("reward type")
# the reward types that are not one function: built by contract/rewards/validate.py and workers/rewards/factory.py
COMPOSED_TYPES = {"composite": "the weighted sum of its `components`",
                  "python": "your `reward(prompt, response, meta)`, run in the sandbox"}


def _answer(meta: Mapping[str, Any], key: str) -> Any:
    if key not in meta:
        raise KeyError(f"sample meta has no {key!r} (needed by the reward)")
    return meta[key]


@REWARDS.register("exact_match", label="exact match",
                  defaults={"answer_key": "answer", "strip": True, "case_sensitive": True})
def exact_match(prompt: str, response: str, meta: Mapping[str, Any], *, answer_key: str = "answer",
                strip: bool = True, case_sensitive: bool = True) -> float:
    """1.0 when the response equals `meta[answer_key]` (optionally stripped and case-folded)."""
    got, want = response, str(_answer(meta, answer_key))
    if strip:
        got, want = got.strip(), want.strip()
    if not case_sensitive:
        got, want = got.casefold(), want.casefold()
    return 1.0 if got == want else 0.0


def extract_number(text: str, position: str = "last") -> float | None:
    """The first or last number in `text` (commas as thousands separators are ignored), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    if not found:
        return None
    return float(found[-1] if position == "last" else found[0])


@REWARDS.register("numeric", defaults={"answer_key": "answer", "tol": 1e-6, "position": "last"})
def numeric(prompt: str, response: str, meta: Mapping[str, Any], *, answer_key: str = "answer", tol: float = 1e-6,
            position: str = "last") -> float:
    """1.0 when the response's first/last number matches the answer's within `tol` (relative)."""
    want = extract_number(str(_answer(meta, answer_key)))
    if want is None:
        raise ValueError(f"meta[{answer_key!r}] = {meta[answer_key]!r} holds no number")
    got = extract_number(response, position)
    return 1.0 if got is not None and abs(got - want) <= tol * max(1.0, abs(want)) else 0.0


@REWARDS.register("regex", defaults={"flags": "", "score_match": 1.0, "score_miss": 0.0}, required=("pattern",),
                  compiled=("pattern",))
def regex(prompt: str, response: str, meta: Mapping[str, Any], *, pattern: Any, flags: str = "",
          score_match: float = 1.0, score_miss: float = 0.0) -> float:
    """`score_match` when `pattern` (RE2 syntax, flags any of imsx) is found in the response, else `score_miss`."""
    return score_match if pattern.search(response) else score_miss


@REWARDS.register("format", defaults={"pattern": r"-?\d+(\.\d+)?", "strip": True}, compiled=("pattern",))
def format_reward(prompt: str, response: str, meta: Mapping[str, Any], *, pattern: Any,
                  strip: bool = True) -> float:
    """1.0 when the whole (stripped) response matches `pattern` (RE2 syntax)."""
    return 1.0 if pattern.fullmatch(response.strip() if strip else response) else 0.0


@REWARDS.register("length_penalty", label="length penalty",
                  defaults={"target": 64, "coef": 0.01, "max_penalty": 1.0})
def length_penalty(prompt: str, response: str, meta: Mapping[str, Any], *, target: int = 64, coef: float = 0.01,
                   max_penalty: float = 1.0) -> float:
    """-min(max_penalty, coef x characters beyond `target`)."""
    return -min(max_penalty, coef * max(0, len(response) - target))


def _check_type(name: str, key: str, value: Any, default: Any) -> None:
    if default is None or key == "pattern":
        return
    expected: tuple[type, ...] = (int, float) if isinstance(default, int | float) and not isinstance(default, bool) \
        else (type(default),)
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        raise ValueError(f"reward {name!r}: param {key!r} must be {expected[0].__name__}, got {value!r}")


def bind_builtin(name: str, params: Mapping[str, Any],
                 models: Any = None) -> Callable[[str, str, Mapping[str, Any]], Any]:
    """Validate `params` for built-in or grader `name` and return fn(prompt, response, meta) (a float, or a dict of
    floats for `multi`). Errors name the bad param. `models`: the model-backed graders' backend
    (contract/rewards/graders.py GraderModels); None checks their params only (they refuse to score)."""
    if name not in REWARDS:
        others = ", ".join(repr(t) for t in COMPOSED_TYPES)
        raise ValueError(f"unknown reward type {name!r}; built-ins: {sorted(REWARDS.names())}, or {others}")
    entry = REWARDS.entry(name)
    if entry.meta.get("grader"):
        return entry.target(params, models)
    fn, defaults = entry.target, dict(entry.meta["defaults"])
    required, compiled = tuple(entry.meta.get("required", ())), tuple(entry.meta.get("compiled", ()))
    allowed = set(defaults) | set(required)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"reward {name!r}: unknown params {unknown}; allowed: {sorted(allowed)}")
    missing = [key for key in required if key not in params]
    if missing:
        raise ValueError(f"reward {name!r}: missing required params {missing}")
    bound: dict[str, Any] = {**defaults, **params}
    for key, value in params.items():
        _check_type(name, key, value, defaults.get(key))
    if "position" in bound and bound["position"] not in ("first", "last"):
        raise ValueError(f"reward {name!r}: param 'position' must be 'first' or 'last', got {bound['position']!r}")
    for key in compiled:  # RE2: linear-time matching of user patterns (contract/rewards/safe_regex.py)
        flags = str(bound.get("flags", ""))
        for letter in flags:
            if letter not in FLAG_LETTERS:
                raise ValueError(f"reward {name!r}: unknown regex flag {letter!r}; use any of {FLAG_LETTERS!r}")
        bound[key] = compile_pattern(str(bound[key]), flags, f"reward {name!r}: param {key!r}")

    def bound_fn(prompt: str, response: str, meta: Mapping[str, Any]) -> float:
        return fn(prompt, response, meta, **bound)

    return bound_fn
