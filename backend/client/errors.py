"""`APIError`: a non-2xx answer from the StreamRL API, with the server's `detail` turned into one readable line."""

from __future__ import annotations

from typing import Any


def _format_validation_errors(errors: list[Any]) -> str:
    """FastAPI 422 bodies: `[{"loc": ["body", "spec", "generation", "batch_size"], "msg": "..."}]` -> 'field: msg'."""
    parts = []
    for err in errors:
        if not isinstance(err, dict):
            parts.append(str(err))
            continue
        loc = [str(p) for p in err.get("loc", []) if p not in ("body", "query", "path")]
        field = ".".join(loc)
        msg = err.get("msg", "invalid")
        parts.append(f"{field}: {msg}" if field else str(msg))
    return "; ".join(parts)


def format_detail(detail: Any) -> str:
    if isinstance(detail, list):
        return _format_validation_errors(detail)
    if isinstance(detail, dict):
        return str(detail.get("msg") or detail.get("message") or detail)
    return str(detail)


class APIError(Exception):
    """The API refused a request. `status` is the HTTP status, `detail` the body's `detail` (str or 422 list),
    `body` the whole decoded body (e.g. it carries `current_status` on a 409)."""

    def __init__(self, status: int, detail: Any, *, method: str = "", path: str = "", body: Any = None) -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        self.body = body
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = f" ({self.method} {self.path})" if self.method else ""
        return f"{self.status} {format_detail(self.detail)}{where}"


class ConnectionFailed(Exception):
    """The API could not be reached at all (server down, wrong URL)."""

    def __init__(self, base_url: str, reason: str) -> None:
        self.base_url = base_url
        super().__init__(f"cannot reach the StreamRL API at {base_url}: {reason}")
