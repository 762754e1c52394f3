"""Every failure of a CLI command ends as one line on stderr and exit status 1, never a traceback.

`StreamRLGroup` (the root command's class) translates exceptions raised anywhere below it. Set `STREAMRL_DEBUG=1`
to get the traceback of an unexpected error instead.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from backend.client import APIError, ConnectionFailed


class CLIError(Exception):
    """A user-facing failure: printed as `error: <message>`, exit status 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def validation_message(exc: ValidationError, what: str = "spec") -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        problems.append(f"{field}: {err['msg']}" if field else err["msg"])
    return f"invalid {what}: " + "; ".join(problems)


def translate(exc: Exception) -> CLIError:
    """One readable line for an exception a command let escape."""
    if isinstance(exc, CLIError):
        return exc
    if isinstance(exc, APIError):
        hint = ""
        if exc.status == 401:
            hint = " (run `streamrl login`, or pass --token / set STREAMRL_TOKEN)"
        return CLIError(f"{exc.message}{hint}")
    if isinstance(exc, ConnectionFailed):
        return CLIError(f"{exc} (is `streamrl up` running? pass --url or set STREAMRL_URL)")
    if isinstance(exc, httpx.HTTPError):
        return CLIError(f"HTTP error: {exc}")
    if isinstance(exc, ValidationError):
        return CLIError(validation_message(exc))
    if isinstance(exc, FileNotFoundError):
        return CLIError(f"no such file: {exc.filename or exc}")
    if isinstance(exc, (OSError, ValueError, RuntimeError)):
        return CLIError(str(exc) or type(exc).__name__)
    return CLIError(f"{type(exc).__name__}: {exc} (set STREAMRL_DEBUG=1 for the traceback)")


class StreamRLGroup(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exits and usage errors: typer reports them
            raise
        except Exception as exc:
            if os.environ.get("STREAMRL_DEBUG"):
                raise
            typer.echo(f"error: {translate(exc).message}", err=True)
            raise typer.Exit(1) from None
