"""Strict JSON parsing for whatever the API stores and echoes back: no NaN/Infinity, integers of at most
`MAX_INT_DIGITS` digits, nesting at most `MAX_DEPTH`, no NUL and no lone UTF-16 surrogates in any string or key.
Such values could not be stored (Postgres, UTF-8) or serialised back, so they are refused up front with `BadJson`."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
MAX_INT_DIGITS = 200


class BadJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise BadJson(f"{name} is not valid JSON (numbers must be finite)")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BadJson(f"an integer has {len(text)} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def check_text(text: str, where: str) -> None:
    """Raise BadJson when `text` cannot be stored: a NUL character (Postgres text) or a lone surrogate (UTF-8)."""
    if "\x00" in text:
        raise BadJson(f"{where}: contains a NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadJson(f"{where}: contains a lone UTF-16 surrogate (not valid Unicode)") from None


def check_value(value: Any, where: str = "body", depth: int = 0) -> None:
    """Raise BadJson for nesting deeper than MAX_DEPTH or strings that are not valid Unicode."""
    if depth > MAX_DEPTH:
        raise BadJson(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            check_value(item, f"{where}.{key!a}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, f"{where}[{index}]", depth + 1)


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
