"""Shared pieces of the CLI commands: the global options object, the API client, output formatting."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer

from backend.client import StreamRLClient
from streamrl.cli.config import CLIConfig, resolve
from streamrl.cli.errors import CLIError


@dataclass
class Globals:
    """Root options (`--url`, `--token`, `--json`), stored on the root click context as `ctx.obj`."""

    url: str | None = None
    token: str | None = None
    as_json: bool = False


def globals_of(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Globals) else Globals()


def client(ctx: typer.Context, *, need_token: bool = True) -> StreamRLClient:
    """A client for the chosen server; refuses early (one clear line) when no token is known."""
    opts = globals_of(ctx)
    url, token = resolve(opts.url, opts.token, CLIConfig.load())
    if need_token and not token:
        raise CLIError(f"not logged in to {url}: run `streamrl login`, or pass --token / set STREAMRL_TOKEN")
    return StreamRLClient(url, token)


def emit_json(ctx: typer.Context, data: Any) -> bool:
    """With `--json`, print `data` as JSON and return True (the caller then prints nothing else)."""
    if not globals_of(ctx).as_json:
        return False
    typer.echo(json.dumps(data, indent=2, default=str))
    return True


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, empty: str = "(none)") -> None:
    """Left-aligned columns; values rendered compactly (None -> '-')."""
    if not rows:
        typer.echo(empty)
        return
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    typer.echo("  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def print_fields(obj: dict[str, Any], fields: Sequence[str] | None = None) -> None:
    """`key: value` lines for one object."""
    keys = list(fields) if fields else list(obj)
    width = max((len(k) for k in keys), default=0)
    for key in keys:
        if key in obj:
            typer.echo(f"{key.ljust(width)}  {_cell(obj[key])}")


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """`digits=1` -> {"digits": 1}; values are JSON when they parse, strings otherwise (ops=+-)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CLIError(f"--param expects KEY=VALUE (got {pair!r})")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params
