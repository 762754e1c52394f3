"""Property-based fuzzing of the whole OpenAPI document (schemathesis, positive and negative data) against the ASGI
app on real Postgres + Redis, as an authenticated principal (an owner who is also the platform admin, so every
route's code runs). Every answer must be documented: no 5xx, no status the operation does not list, bodies and
content types as declared. Bounded: `STREAMRL_FUZZ_EXAMPLES` examples per operation (default 25; < 3 min in CI);
`STREAMRL_FUZZ_RANDOM=1` draws new examples each run, `STREAMRL_FUZZ_REPORT=<file>` writes the status counts.

`logout` and `password` get a fresh session token per call (they end the session they are called with); the SSE
route is fuzzed as a principal whose team has no jobs (an existing job's stream would stay open by design).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from backend.db.enums import Role
from backend.main import create_app
from backend.services.auth import issue_session_token
from contract.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # schemathesis' lazy tests are not run by xdist workers
EXAMPLES = int(os.environ.get("STREAMRL_FUZZ_EXAMPLES", "25"))
RANDOM = os.environ.get("STREAMRL_FUZZ_RANDOM") == "1"  # explore beyond CI's fixed (derandomized) examples
FRESH_TOKEN_PATHS = ("/api/v1/auth/logout", "/api/v1/auth/password")
STREAM_SUFFIX = "/stream"
STATS: Counter[str] = Counter()


def not_a_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    return None


def negative_data_rejected(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' negative_data_rejection, with 413 a rejection too: an invalid body over the API's size limit
    (backend/api/guard.py) is refused for its size before any field is validated."""
    if response.status_code == 413:
        return None
    return negative_data_rejection(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejected,
]


class Principal:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        team = backend.make_team(max_concurrent_jobs=1000, max_generation_instances=1000)
        self.user = backend.make_user(team, Role.owner, password="fuzz-owner-password")
        with backend.session() as session:
            session.get(type(self.user), self.user.id).is_platform_admin = True
        self.team = team
        quiet = backend.make_team()
        self.stream_viewer = backend.auth_headers(backend.make_user(quiet, Role.viewer), quiet)

    def headers(self, path: str) -> dict[str, str]:
        if path.endswith(STREAM_SUFFIX):
            return self.stream_viewer
        if path in FRESH_TOKEN_PATHS:
            token = issue_session_token(user_id=self.user.id, team_id=self.team.id,
                                        secret_key=self.backend.settings.secret_key, ttl_s=600)
            return {"Authorization": f"Bearer {token}"}
        return self.backend.auth_headers(self.user, self.team)


@pytest.fixture(scope="module")
def fuzz_app(pg_url: str, redis_url: str, make_backend: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    backend = make_backend(pg_url, redis_url, tmp_path_factory.mktemp("fuzz-data"))
    app = create_app(backend.settings)
    app.state.fuzz_principal = Principal(backend)
    from fastapi.testclient import TestClient

    with TestClient(app):  # run the lifespan (Redis link) once for the module
        yield app
    backend.engine.dispose()


def _document() -> dict[str, Any]:
    """The app's OpenAPI document (building the app touches no database; the requests go to `fuzz_app`)."""
    settings = Settings(database_url="sqlite://", secret_key="openapi-document-only-0123456789",
                        data_dir=tempfile.gettempdir(),
                        redis_url="redis://127.0.0.1:6379/0", auto_migrate=False)
    return create_app(settings).openapi()


schema = schemathesis.openapi.from_dict(_document())


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    report = f"schemathesis: {sum(v for k, v in STATS.items() if k.startswith('status:'))} requests; " + ", ".join(
        f"{k.removeprefix('status:')}: {v}" for k, v in sorted(STATS.items()) if k.startswith("status:")
    )
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(report)
    out = os.environ.get("STREAMRL_FUZZ_REPORT")
    if out:
        with open(out, "w") as handle:
            json.dump(dict(STATS), handle, indent=2, sort_keys=True)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_answers_only_documented_statuses(case: Any, fuzz_app: FastAPI) -> None:
    principal: Principal = fuzz_app.state.fuzz_principal
    headers = {**(case.headers or {}), **principal.headers(case.operation.path)}
    response = case.call(headers=headers, app=fuzz_app)
    STATS[f"status:{response.status_code}"] += 1
    STATS[f"op:{case.method} {case.operation.path}"] += 1
    case.validate_response(response, checks=CHECKS)
