"""Configuration: embedded defaults derive from data_dir, bad values fail fast with one message naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

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
