r"""Built-in reward functions, registered by name with their parameters (validated when the reward is built).

- exact_match: answer_key="answer", strip=True, case_sensitive=True -> 1.0 if response == meta[answer_key]
- numeric: answer_key="answer", tol=1e-6 (relative), position="last" -> 1.0 if the first/last number matches
- regex: pattern (required), flags="" (any of imsx), score_match=1.0, score_miss=0.0 -> re.search decides
- format: pattern=r"-?\d+(\.\d+)?", strip=True -> 1.0 if the whole response matches the pattern
- length_penalty: target=64, coef=0.01, max_penalty=1.0 -> -min(max_penalty, coef * chars beyond target)

A missing answer in meta raises KeyError; `Reward.score` turns it into a per-sample error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


def _answer(meta: Mapping[str, Any], key: str) -> Any:
    if key not in meta:
        raise KeyError(f"sample meta has no {key!r} (needed by the reward)")
    return meta[key]


def exact_match(prompt: str, response: str, meta: Mapping[str, Any], *, answer_key: str = "answer",
                strip: bool = True, case_sensitive: bool = True) -> float:
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


def numeric(prompt: str, response: str, meta: Mapping[str, Any], *, answer_key: str = "answer", tol: float = 1e-6,
            position: str = "last") -> float:
    want = extract_number(str(_answer(meta, answer_key)))
    if want is None:
        raise ValueError(f"meta[{answer_key!r}] = {meta[answer_key]!r} holds no number")
    got = extract_number(response, position)
    return 1.0 if got is not None and abs(got - want) <= tol * max(1.0, abs(want)) else 0.0


def regex(prompt: str, response: str, meta: Mapping[str, Any], *, pattern: re.Pattern[str], flags: str = "",
          score_match: float = 1.0, score_miss: float = 0.0) -> float:
    return score_match if pattern.search(response) else score_miss


def format_reward(prompt: str, response: str, meta: Mapping[str, Any], *, pattern: re.Pattern[str],
                  strip: bool = True) -> float:
    return 1.0 if pattern.fullmatch(response.strip() if strip else response) else 0.0


def length_penalty(prompt: str, response: str, meta: Mapping[str, Any], *, target: int = 64, coef: float = 0.01,
                   max_penalty: float = 1.0) -> float:
    return -min(max_penalty, coef * max(0, len(response) - target))


@dataclass(frozen=True)
class Builtin:
    fn: Callable[..., float]
    defaults: dict[str, Any]
    required: tuple[str, ...] = ()
    compiled: tuple[str, ...] = ()  # params compiled as regular expressions (with the `flags` param)


REGISTRY: dict[str, Builtin] = {
    "exact_match": Builtin(exact_match, {"answer_key": "answer", "strip": True, "case_sensitive": True}),
    "numeric": Builtin(numeric, {"answer_key": "answer", "tol": 1e-6, "position": "last"}),
    "regex": Builtin(regex, {"flags": "", "score_match": 1.0, "score_miss": 0.0}, ("pattern",), ("pattern",)),
    "format": Builtin(format_reward, {"pattern": r"-?\d+(\.\d+)?", "strip": True}, (), ("pattern",)),
    "length_penalty": Builtin(length_penalty, {"target": 64, "coef": 0.01, "max_penalty": 1.0}),
}


def _check_type(name: str, key: str, value: Any, default: Any) -> None:
    if default is None or key == "pattern":
        return
    expected: tuple[type, ...] = (int, float) if isinstance(default, int | float) and not isinstance(default, bool) \
        else (type(default),)
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        raise ValueError(f"reward {name!r}: param {key!r} must be {expected[0].__name__}, got {value!r}")


def bind_builtin(name: str, params: Mapping[str, Any]) -> Callable[[str, str, Mapping[str, Any]], float]:
    """Validate `params` for built-in `name` and return fn(prompt, response, meta). Errors name the bad param."""
    if name not in REGISTRY:
        raise ValueError(f"unknown reward type {name!r}; built-ins: {sorted(REGISTRY)}, or 'composite', 'python'")
    spec = REGISTRY[name]
    allowed = set(spec.defaults) | set(spec.required)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"reward {name!r}: unknown params {unknown}; allowed: {sorted(allowed)}")
    missing = [key for key in spec.required if key not in params]
    if missing:
        raise ValueError(f"reward {name!r}: missing required params {missing}")
    bound: dict[str, Any] = {**spec.defaults, **params}
    for key, value in params.items():
        _check_type(name, key, value, spec.defaults.get(key))
    if "position" in bound and bound["position"] not in ("first", "last"):
        raise ValueError(f"reward {name!r}: param 'position' must be 'first' or 'last', got {bound['position']!r}")
    for key in spec.compiled:
        flags = 0
        for letter in str(bound.get("flags", "")):
            if letter not in _FLAG_LETTERS:
                raise ValueError(f"reward {name!r}: unknown regex flag {letter!r}; use any of 'imsx'")
            flags |= _FLAG_LETTERS[letter]
        try:
            bound[key] = re.compile(str(bound[key]), flags)
        except re.error as exc:
            raise ValueError(f"reward {name!r}: param {key!r} is not a valid regular expression: {exc}") from exc

    def bound_fn(prompt: str, response: str, meta: Mapping[str, Any]) -> float:
        return spec.fn(prompt, response, meta, **bound)

    return bound_fn
