"""`streamrl deployments create | list | show | update | delete` against a real API server (no generation worker:
nothing is served here; tests/integration/test_openai_inference.py serves one): a base-model deployment created,
listed with its metrics columns, its replicas bounds changed, refused bounds (422 naming the field), deleted, and a
missing id (404)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from .conftest import Invoke

pytestmark = pytest.mark.integration


def test_deployments_create_list_update_delete(cli: Invoke, owner: str, api_server: Any) -> None:
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    name = f"dep-{uuid.uuid4().hex[:6]}"
    created = cli("--json", "deployments", "create", name, "--base", model, "--max", "2", "--idle", "60")
    assert created.exit_code == 0, created.stderr
    body = created.json()
    assert body["name"] == name and body["min_replicas"] == 0 and body["max_replicas"] == 2  # type: ignore[index]
    deployment_id = str(body["id"])  # type: ignore[index]
    listed = cli("deployments", "list")
    assert listed.exit_code == 0 and name in listed.stdout and "P99" in listed.stdout, listed.stdout
    updated = cli("--json", "deployments", "update", deployment_id, "--min", "1")
    assert updated.exit_code == 0 and updated.json()["min_replicas"] == 1, updated.stderr  # type: ignore[index]
    refused = cli("deployments", "update", deployment_id, "--min", "3")
    assert refused.exit_code == 1 and "422" in refused.stderr and "min_replicas" in refused.stderr, refused.stderr
    shown = cli("deployments", "show", deployment_id)
    assert shown.exit_code == 0 and name in shown.stdout
    assert cli("deployments", "delete", deployment_id).exit_code == 0
    missing = cli("deployments", "show", deployment_id)
    assert missing.exit_code == 1 and "404" in missing.stderr, missing.stderr
