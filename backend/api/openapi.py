"""Documented error answers: `errors(*codes)` is a `responses=` mapping using the shared `ErrorBody` schema, and
`ERRORS_EVERY_ROUTE` the statuses any route may answer (auth, body cap, validation)."""

from __future__ import annotations

from typing import Any

from backend.schemas.common import ErrorBody

DESCRIPTIONS = {
    400: "Bad request",
    401: "Missing, invalid, expired or revoked credentials (WWW-Authenticate: Bearer)",
    403: "Role, scope or quota does not allow it",
    404: "No such object in the caller's team",
    405: "Method not allowed (see the Allow header)",
    409: "Conflicts with the object's state or an existing object",
    413: "Request body too large",
    422: "Invalid input; `detail` names the field",
    429: "Too many requests or no free job slot (Retry-After header)",
    503: "The database or Redis is unavailable (Retry-After header)",
}
ERRORS_EVERY_ROUTE = (413, 422, 503)
AUTHENTICATED = (401, 403, 404)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": DESCRIPTIONS[code]} for code in (*codes, *ERRORS_EVERY_ROUTE)}
