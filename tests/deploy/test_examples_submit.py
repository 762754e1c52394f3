"""Every example is accepted by the real API (server-side checks: registered model, quotas) on real Postgres/Redis.

Each job is cancelled right after submission so no controller of another test ever runs it.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from deploy_support import EXAMPLES
from fastapi.testclient import TestClient
from minimal_model import write_minimal_model

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.integration
def test_examples_submit_through_the_api(app_client: TestClient, pg_backend: Any) -> None:
    team = pg_backend.make_team()
    headers = pg_backend.auth_headers(pg_backend.make_user(team, "member"))
    model_dir = write_minimal_model(pg_backend.settings.artifacts / "models" / f"tiny-llama-team{team.id}")
    models = {yaml.safe_load(path.read_text())["model"] for path in EXAMPLE_FILES}
    for name in models:
        answer = app_client.post("/api/v1/models", json={"name": name, "path": str(model_dir)}, headers=headers)
        assert answer.status_code == 201, answer.text

    for path in EXAMPLE_FILES:
        answer = app_client.post("/api/v1/jobs", json=yaml.safe_load(path.read_text()), headers=headers)
        assert answer.status_code == 201, f"{path.name}: {answer.text}"
        job = answer.json()
        assert job["status"] == "queued"
        cancelled = app_client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers)
        assert cancelled.status_code == 200, cancelled.text
