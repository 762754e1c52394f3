"""Strict JSON parsing for whatever the API stores and echoes back: no NaN/Infinity, integers of at most
`MAX_INT_DIGITS` digits, nesting at most `MAX_DEPTH`, no NUL and no lone UTF-16 surrogates in any string or key.
Such values could not be stored (Postgres, UTF-8) or serialised back, so they are refused up front with `BadJson`."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64
MAX_INT_DIGITS = 200


class BadJson(ValueError):
    """`loc`: keys/indices of the offending value inside the document (empty when unknown)."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc


def _reject_constant(name: str) -> Any:
    raise BadJson(f"{name} is not valid JSON (numbers must be finite)")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BadJson(f"an integer has {len(text)} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def check_text(text: str, loc: tuple[str | int, ...] = ()) -> None:
    """Raise BadJson when `text` cannot be stored: a NUL character (Postgres text) or a lone surrogate (UTF-8)."""
    if "\x00" in text:
        raise BadJson("contains a NUL character (\\u0000)", loc)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadJson("contains a lone UTF-16 surrogate (not valid Unicode)", loc) from None


def _safe_key(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")[:100]


def check_value(value: Any, loc: tuple[str | int, ...] = (), depth: int = 0) -> None:
    """Raise BadJson for nesting deeper than MAX_DEPTH or strings that cannot be stored (see `check_text`)."""
    if depth > MAX_DEPTH:
        raise BadJson(f"nesting deeper than {MAX_DEPTH} levels", loc)
    if isinstance(value, str):
        check_text(value, loc)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, (*loc, _safe_key(key)))
            check_value(item, (*loc, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, (*loc, index), depth + 1)


def strict_json_loads(raw: bytes | str) -> Any:
    """json.loads that refuses what the API cannot store or echo back (see the module docstring)."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant, parse_int=_parse_int)
    except RecursionError:
        raise BadJson(f"nesting deeper than {MAX_DEPTH} levels") from None
    except BadJson:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadJson(f"not valid JSON ({exc})") from None
    check_value(value)
    return value


def finite_or_null(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (null), at any depth: what pydantic serializes them as,
    and the only form PostgreSQL's json type accepts (runtime metrics such as KL can be NaN or inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_null(item) for item in value]
    return value
