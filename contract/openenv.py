"""`environment.type: openenv`'s own checks (contract/spec.py EnvironmentSpec calls `openenv_error`): the server is
either at `url` (http(s), a host, no user-info) or served by the platform in the jail from `code` (Python defining
`app`, the ASGI app of the environment, e.g. openenv-core's `create_app(...)` or `from my_env.server.app import app`)
with its packages from `requirements` (installed like `agent.requirements`, workers/environments/openenv_jail.py)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from contract.environments import OPENENV_PARAMS


def code_error(code: str, what: str) -> str | None:
    """Why `code` does not compile (None: it does)."""
    try:
        compile(code, f"<{what}>", "exec")
    except (SyntaxError, ValueError) as exc:
        return f"code does not compile: {exc}"
    except (RecursionError, MemoryError):  # the parser's answer to code nested thousands deep
        return "code does not compile: it is nested too deeply"
    return None


def openenv_error(url: str | None, code: str | None, requirements: list[str], params: dict[str, Any]) -> str | None:
    """Why an openenv environment is malformed (None: it is fine)."""
    if (url is None) == (code is None):
        return ("type 'openenv' needs `url` (the environment server's base URL) or `code` (defining `app`, served in "
                "the jail), one of them")
    if url is not None:
        if requirements:
            return "`requirements` are installed for `code`; a server at `url` brings its own"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            return f"url {url!r} is not an http(s) URL with a host (and no user-info)"
    if code is not None:
        why = code_error(code, "environment")
        if why is not None:
            return why
        if not re.search(r"^(app\s*(:[^=\n]*)?=|from\s+\S+\s+import\s+.*\bapp\b|def\s+app\s*\(|async\s+def\s+app\s*\()",
                         code, re.MULTILINE):
            return "code must define `app`, the environment server's ASGI app (e.g. app = create_app(...))"
    for name, value in params.items():
        if name not in OPENENV_PARAMS:
            return f"type 'openenv' has no param {name!r} (it takes {', '.join(OPENENV_PARAMS)})"
        if not isinstance(value, OPENENV_PARAMS[name]) or not value:
            return f"param {name!r} must be a non-empty string"
    return None
