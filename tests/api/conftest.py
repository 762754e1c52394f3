"""Fixtures of the API tests: `world` (a team with a user per role and a registered model `tiny`), `other_world`,
`make_world(backend)`, `register_model(backend, team, name)`, `job_spec(**overrides)` and `live_server` (the API on
a real uvicorn, for SSE)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from minimal_model import write_minimal_model
from waiting import api_in_thread

from backend.db.enums import Role
from backend.db.models import Model, Team, User


def register_model(backend: Any, team: Team, name: str = "tiny") -> Model:
    """A minimal valid model directory under the artifact dir, registered for `team`."""
    path = write_minimal_model(backend.settings.artifacts / "models" / uuid.uuid4().hex)
    with backend.session() as session:
        model = Model(team_id=team.id, name=name, path=str(path))
        session.add(model)
    return model


def job_spec(model: str = "tiny", **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "test-job", "model": model, "dataset": {"builtin": "arithmetic", "num_prompts": 8}}
    spec.update(overrides)
    return spec


@dataclass
class TeamWorld:
    """A team with one user per role, a registered model `tiny`, and headers for each role."""

    backend: Any
    team: Team
    users: dict[Role, User]

    def headers(self, role: Role | str) -> dict[str, str]:
        return self.backend.auth_headers(self.users[Role(role)], self.team)

    def submit(self, client: TestClient, role: Role | str = Role.member, **spec: Any) -> dict[str, Any]:
        response = client.post("/api/v1/jobs", json=job_spec(**spec), headers=self.headers(role))
        assert response.status_code == 201, response.text
        return response.json()


def make_world(backend: Any, **quotas: int) -> TeamWorld:
    team = backend.make_team(**quotas)
    users = {role: backend.make_user(team, role) for role in Role}
    register_model(backend, team)
    return TeamWorld(backend=backend, team=team, users=users)


@pytest.fixture
def world(pg_backend: Any) -> TeamWorld:
    return make_world(pg_backend)


@pytest.fixture
def other_world(pg_backend: Any) -> TeamWorld:
    return make_world(pg_backend)


@pytest.fixture(name="make_world")
def make_world_fixture() -> Any:
    return make_world


@pytest.fixture(name="register_model")
def register_model_fixture() -> Any:
    return register_model


@pytest.fixture(name="job_spec")
def job_spec_fixture() -> Any:
    return job_spec


@pytest.fixture
def live_server(pg_backend: Any) -> Iterator[str]:
    """The API on a real uvicorn server (SSE needs a real streaming transport)."""
    with api_in_thread(pg_backend.settings) as url:
        yield url
