"""CLI behaviour that needs no server: config file, local spec validation, one-line errors, the command registry."""

from __future__ import annotations

import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import environ_snapshot

from streamrl.cli.config import CLIConfig, resolve
from streamrl.cli.jobs import distill_overrides, load_spec
from streamrl.cli.main import COMMAND_MODULES, app, command_names

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.json"
    monkeypatch.setenv("STREAMRL_CONFIG", str(path))
    for var in ("STREAMRL_URL", "STREAMRL_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_config_is_private_and_tokens_are_per_server(_isolated_config: Path) -> None:
    config = CLIConfig()
    config.remember("http://a:8000", "token-a")
    config.save()
    assert stat.S_IMODE(_isolated_config.stat().st_mode) == 0o600
    loaded = CLIConfig.load()
    assert resolve(None, None, loaded) == ("http://a:8000", "token-a")
    assert resolve("http://b:9000/", None, loaded) == ("http://b:9000", None)  # a's token never goes to b
    assert resolve(None, "explicit", loaded) == ("http://a:8000", "explicit")


def test_corrupt_config_is_one_clear_line(_isolated_config: Path) -> None:
    _isolated_config.write_text("{not json")
    result = runner.invoke(app, ["jobs", "list"])
    assert result.exit_code == 1
    assert "is not valid JSON" in result.stderr and "Traceback" not in result.output


def test_not_logged_in() -> None:
    result = runner.invoke(app, ["jobs", "list"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: not logged in to http://127.0.0.1:8000: run `streamrl login`, or pass --token / set STREAMRL_TOKEN")


def test_bad_spec_is_refused_locally_naming_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: tiny\ndataset: {builtin: arithmetic}\ngeneration: {batch_size: 0, tempature: 1}\n")
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(spec)])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert line.startswith(f"error: invalid spec in {spec}: ")
    assert "generation.batch_size: Input should be greater than or equal to 1" in line
    assert "generation.tempature: Extra inputs are not permitted" in line
    assert "\n" not in line


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: [unclosed\n")
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(spec)])
    assert result.exit_code == 1 and "is not valid YAML/JSON" in result.stderr
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1 and "no such file" in result.stderr


def test_scale_needs_a_target() -> None:
    result = runner.invoke(app, ["--token", "t", "jobs", "scale", "3"])
    assert result.exit_code == 1
    assert "give a target instance count and/or --auto/--manual" in result.stderr


def test_unreachable_server_via_real_entry_point() -> None:
    """The installed `streamrl` script: one line on stderr, exit 1, no traceback."""
    url = f"http://127.0.0.1:{_free_port()}"
    env = {**environ_snapshot(), "STREAMRL_URL": url, "STREAMRL_TOKEN": "t"}
    proc = subprocess.run([sys.executable, "-m", "streamrl.cli.main", "jobs", "list"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: cannot reach the StreamRL API at {url}")


def test_registry_lists_core_commands() -> None:
    assert {"up", "migrate", "login", "init-admin", "jobs", "keys", "datasets", "models", "team"} <= command_names()
    assert len(COMMAND_MODULES) == len(set(COMMAND_MODULES))


def test_set_overrides_are_applied_and_validated(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: tiny\ndataset: {builtin: arithmetic}\n")
    loaded = load_spec(spec, "renamed", ["generation.instances=3", "mode=async", "dispatch.policy=skew_aware"])
    assert loaded["generation"] == {"instances": 3}
    assert (loaded["mode"], loaded["name"], loaded["dispatch"]["policy"]) == ("async", "renamed", "skew_aware")
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(spec), "--set", "mode=turbo"])
    assert result.exit_code == 1 and "mode: Input should be 'colocated', 'sync' or 'async'" in result.stderr
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(spec), "--set", "generation"])
    assert result.exit_code == 1 and "--set wants KEY=VALUE" in result.stderr


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    result = runner.invoke(app, ["migrate", "--database-url", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"database at head: sqlite:///{db}"
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "teams", "alembic_version"} <= tables


def test_bad_settings_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMRL_DATABASE_URL", "mysql://nope")
    result = runner.invoke(app, ["migrate"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid configuration: STREAMRL_DATABASE_URL: ")


def test_init_admin_direct_writes_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'direct.db'}"
    monkeypatch.setenv("STREAMRL_DATABASE_URL", url)
    monkeypatch.setenv("STREAMRL_DATA_DIR", str(tmp_path))
    assert runner.invoke(app, ["migrate"]).exit_code == 0
    args = ["init-admin", "--direct", "--email", "ops@example.com", "--password", "pw-12345678", "--team", "ops"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "created ops@example.com, owner of team 'ops', in the database" in first.stdout
    again = runner.invoke(app, args)
    assert again.exit_code == 1
    assert again.stderr.startswith("error: could not create ops@example.com: ") and "already registered" in again.stderr


def test_platform_admin_flags_an_account_in_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import select

    from backend.db.models import User
    from backend.db.session import make_engine, session_scope
    from backend.services import sessions, teams

    url = f"sqlite:///{tmp_path / 'ops.db'}"
    monkeypatch.setenv("STREAMRL_DATABASE_URL", url)
    monkeypatch.setenv("STREAMRL_DATA_DIR", str(tmp_path))
    assert runner.invoke(app, ["migrate"]).exit_code == 0
    engine = make_engine(url)
    with session_scope(engine) as session:  # the first account (the operator's), then one registered through the API
        teams.register(session=session, email="first@example.com", password="pw-12345678", team_name="ops")
        teams.register_public(session=session, email="Ops@Example.com", password="pw-12345678", team_name="other")

    def operator_status() -> bool:
        with session_scope(engine) as session:
            user = session.scalar(select(User).where(User.email == "ops@example.com"))
            assert user is not None and user.self_registered
            return sessions.is_platform_admin(user, ["ops@example.com"])

    assert operator_status() is False  # listed, but self-registered: the list alone gives it nothing
    granted = runner.invoke(app, ["platform-admin", "OPS@example.com"])
    assert granted.exit_code == 0 and granted.stdout.strip() == "ops@example.com is a platform admin", granted.output
    assert operator_status() is True
    assert runner.invoke(app, ["platform-admin", "ops@example.com", "--revoke"]).exit_code == 0
    assert operator_status() is False
    missing = runner.invoke(app, ["platform-admin", "nobody@example.com"])
    assert missing.exit_code == 1 and "no account has the email nobody@example.com" in missing.stderr
    engine.dispose()


def test_submit_teacher_makes_a_distillation_spec(tmp_path: Path) -> None:
    """`--teacher NAME` sets algorithm distill with that teacher (checked locally like any spec); a --set after it
    still applies, and a distill spec without a teacher is refused before anything is sent."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: small\ndataset: {builtin: arithmetic}\n")
    loaded = load_spec(spec, None, [*distill_overrides("big"), "algorithm.reward_coef=0.5"])
    assert loaded["algorithm"] == {"name": "distill", "teacher": "big", "reward_coef": 0.5}
    assert distill_overrides(None) == []
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", str(spec), "--set", "algorithm.name=distill"])
    assert result.exit_code == 1 and "algorithm distill needs teacher" in result.stderr
    result = runner.invoke(app, ["--token", "t", "jobs", "submit", "--help"])
    assert "--teacher" in result.stdout
