"""A real API server for the CLI tests: uvicorn in a subprocess on a free port, on the session's Postgres database
(`pg_url` from tests/conftest.py) and an embedded Redis (a real redis-server on a private socket, so live channels
never mix with other tests'). Its Hub endpoint is a local file server (tests/hub_server.py) serving one dataset repo,
`acme/cli-prompts` (split `train`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hub_server import HubServer
from minimal_model import write_minimal_model
from typer.testing import CliRunner
from waiting import environ_snapshot

from backend.embedded_redis import start_embedded_redis
from streamrl.cli.main import app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    model_root: Path
    database_url: str
    redis_url: str
    data_dir: Path  # the server's (its secret_key file is there)

    def model_dir(self, name: str) -> Path:
        """A directory the server accepts as a model (under the allow-listed root, minimal but valid)."""
        return write_minimal_model(self.model_root / name)


@pytest.fixture(scope="session")
def api_server(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("api-data")
    model_root = tmp_path_factory.mktemp("model-root")
    hub_repo = tmp_path_factory.mktemp("hub-prompts")
    (hub_repo / "train.jsonl").write_text('{"prompt": "3+4=", "answer": "7"}\n{"prompt": "5+5=", "answer": "10"}\n')
    hub = HubServer({}, datasets={"acme/cli-prompts": hub_repo}).__enter__()
    redis_server = start_embedded_redis(data_dir)
    port = free_port()
    env = {
        **environ_snapshot(),
        "STREAMRL_DATA_DIR": str(data_dir),
        "STREAMRL_DATABASE_URL": pg_url,
        "STREAMRL_REDIS_URL": redis_server.url,
        "STREAMRL_ALLOWED_MODEL_ROOTS": json.dumps([str(model_root)]),
        "STREAMRL_MAX_UPLOAD_BYTES": str(64 * 1024),
        "STREAMRL_HUB_ENDPOINT": hub.url,
        "STREAMRL_EGRESS_ALLOW": "127.0.0.1",  # the Hub, webhook receivers and tracker servers of the tests
    }
    log = (data_dir / "api.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "backend.main:create_app", "--factory", "--port", str(port),
         "--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"API did not start:\n{(data_dir / 'api.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield Server(url=url, model_root=model_root, database_url=pg_url, redis_url=redis_server.url, data_dir=data_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        redis_server.stop()
        hub.__exit__(None, None, None)


Invoke = Callable[..., "CliResult"]


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        return json.loads(self.stdout)


@pytest.fixture
def cli(api_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """Run `streamrl ARGS...` in-process against the test server, with a private config file."""
    monkeypatch.setenv("STREAMRL_CONFIG", str(tmp_path / "cli-config.json"))
    monkeypatch.setenv("STREAMRL_URL", api_server.url)
    monkeypatch.delenv("STREAMRL_TOKEN", raising=False)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> CliResult:
        result = runner.invoke(app, list(args), input=input)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def owner(cli: Invoke) -> str:
    """A fresh user owning a fresh team; the CLI is logged in as them. Returns the email."""
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    result = cli("init-admin", "--email", email, "--password", "pw-12345678", "--team", f"team-{email[6:14]}")
    assert result.exit_code == 0, result.stderr
    return email
