"""Configuration: embedded defaults derive from data_dir, bad values fail fast with one message naming them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.main import create_app
from contract.settings import ConfigError, load_settings


def test_defaults_derive_from_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    settings = load_settings(data_dir=tmp_path / "data")
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'streamrl.db'}"
    assert settings.artifact_dir == tmp_path / "data" / "artifacts"
    assert settings.redis_url is None and settings.max_upload_bytes == 50 * 1024 * 1024
    again = load_settings(data_dir=tmp_path / "data")
    assert len(settings.secret_key) >= 32 and again.secret_key == settings.secret_key  # persisted once


def test_bad_configuration_names_every_wrong_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMRL_DATABASE_URL", "mysql://db")
    monkeypatch.setenv("STREAMRL_REDIS_URL", "http://redis")
    monkeypatch.setenv("STREAMRL_MAX_UPLOAD_BYTES", "lots")
    with pytest.raises(ConfigError) as caught:
        load_settings(data_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith("invalid configuration:")
    for variable in ("STREAMRL_DATABASE_URL", "STREAMRL_REDIS_URL", "STREAMRL_MAX_UPLOAD_BYTES"):
        assert variable in message
    assert "\n" not in message


def test_registration_can_be_turned_off(pg_backend: object) -> None:
    body = {"email": "nobody@example.com", "password": "long-enough-pw", "team_name": "closed"}
    with pg_backend.client(allow_registration=False) as client:  # type: ignore[attr-defined]
        refused = client.post("/api/v1/auth/register", json=body)
    assert refused.status_code == 403 and "registration is disabled" in refused.json()["detail"]


def test_optional_routers_are_switched_off_by_setting_and_unknown_ones_stop_the_api(pg_backend: Any) -> None:
    """backend/main.py lists every router; STREAMRL_DISABLED_ROUTERS leaves optional ones out of this process."""
    with pg_backend.client(disabled_routers=["plans"]) as client:
        paths = client.get("/openapi.json").json()["paths"]
        assert not any(path.startswith("/api/v1/plans") for path in paths)
        assert "/api/v1/jobs" in paths and any(path.startswith("/api/v1/runs") for path in paths)
        assert client.get("/api/v1/plans/devices").status_code == 404
    with pg_backend.client() as client:  # by default every router is in
        assert any(path.startswith("/api/v1/plans") for path in client.get("/openapi.json").json()["paths"])
    with pytest.raises(ConfigError, match=r"\['planner'\] are not optional routers"):
        create_app(pg_backend.settings.model_copy(update={"disabled_routers": ["planner"]}))
