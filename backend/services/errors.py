"""User-facing errors raised by services; each carries the HTTP status the API answers with."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status_code = 400
    headers: dict[str, str] = {}  # extra response headers

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra  # merged into the JSON body next to "detail"

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, **self.extra}


class Unauthorized(ServiceError):
    status_code = 401


class Forbidden(ServiceError):
    status_code = 403


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class InvalidTransition(Conflict):
    """409 with `current_status` in the body."""

    def __init__(self, detail: str, *, current_status: str) -> None:
        super().__init__(detail, current_status=current_status)


class QuotaExceeded(ServiceError):
    """403 (or 429 for the concurrent-jobs quota) naming the quota."""

    def __init__(self, detail: str, *, quota: str, limit: int, status_code: int = 403) -> None:
        super().__init__(detail, quota=quota, limit=limit)
        self.status_code = status_code


class PayloadTooLarge(ServiceError):
    status_code = 413


class TooManyRequests(ServiceError):
    """429 with a Retry-After header of `retry_after_s`."""

    status_code = 429

    def __init__(self, detail: str, *, retry_after_s: int) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after_s)}


class StoreUnavailable(ServiceError):
    """The artifact store (STREAMRL_ARTIFACTS) refused or did not answer; nothing was kept."""

    status_code = 503


class InvalidInput(ServiceError):
    """422 in FastAPI's shape: `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`."""

    status_code = 422

    def __init__(self, msg: str, *, loc: tuple[str | int, ...] = ("body",)) -> None:
        super().__init__(msg)
        self.loc = loc

    def body(self) -> dict[str, Any]:
        return {"detail": [{"loc": list(self.loc), "msg": self.detail, "type": "value_error"}]}


def not_found(kind: str, ident: object) -> NotFound:
    return NotFound(f"{kind} {ident} not found")
