"""Browser tests: a real API server (uvicorn subprocess, real Postgres and Redis) serving the built dashboard,
driven by Debian's chromium through Playwright. Screenshots go to test-artifacts/e2e/.

Needs: frontend/dist (scripts/setup.sh builds it), /usr/bin/chromium (`apt-get install -y chromium`), and the
Postgres database / Redis db of tests/conftest.py (`pg_url`, `redis_url`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_support import ARTIFACTS, REPO, Api, MakeApi, Server
from hub_server import HubServer
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine
from waiting import environ_snapshot

from backend.db.session import make_engine

CHROMIUM = os.environ.get("STREAMRL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The machine is shared and slow at times (password hashing, a busy CPU): wait up to 20 s for the page.
expect.set_options(timeout=60_000)  # a condition waited on, generous: CI machines are loaded
API_FACTORIES = ("backend.main:create_app", "backend.api.app:create_app")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _app_factory() -> str:
    for factory in API_FACTORIES:
        module = factory.split(":")[0]
        if (REPO / (module.replace(".", "/") + ".py")).exists():
            return factory
    raise RuntimeError(f"no API app factory found (looked for {', '.join(API_FACTORIES)})")


@pytest.fixture(scope="session")
def api_server(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """uvicorn running the API (and the built dashboard at `/`) on a free port; a tiny model under the artifact dir."""
    if not (REPO / "frontend" / "dist" / "index.html").exists():
        pytest.fail("frontend/dist is missing: run scripts/setup.sh or (cd frontend && npm run build)")
    from workers.models.tiny import build_tiny_model

    data_dir = tmp_path_factory.mktemp("e2e-data")
    artifacts = data_dir / "artifacts"
    tiny = build_tiny_model("tiny-1m", artifacts / "models" / "tiny-1m")
    hub_repo = tmp_path_factory.mktemp("e2e-hub") / "chats"  # the Hub endpoint: one dataset repo, split `train`
    (hub_repo / "data").mkdir(parents=True)
    (hub_repo / "data" / "train.jsonl").write_text("".join(
        f'{{"messages": [{{"role": "user", "content": "{n}+1="}}, {{"role": "assistant", "content": "{n + 1}"}}]}}\n'
        for n in range(3)))
    hub = HubServer({}, datasets={"acme/e2e-chats": hub_repo}).__enter__()
    port = _free_port()
    env = {
        **environ_snapshot(),
        "STREAMRL_DATA_DIR": str(data_dir),
        "STREAMRL_ARTIFACT_DIR": str(artifacts),
        "STREAMRL_DATABASE_URL": pg_url,
        "STREAMRL_REDIS_URL": redis_url,
        "STREAMRL_SECRET_KEY": "e2e-secret-key-0123456789",
        "OMP_NUM_THREADS": "1",
        "STREAMRL_HUB_ENDPOINT": hub.url,
        "STREAMRL_EGRESS_ALLOW": "127.0.0.1",  # the Hub, webhook receivers and tracker servers of the tests
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = (ARTIFACTS / "api-server.log").open("wb")
    argv = [sys.executable, "-m", "uvicorn", "--factory", _app_factory(), "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"API server exited with {process.returncode}; see {ARTIFACTS / 'api-server.log'}")
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("API server did not become healthy within 180 s")
            time.sleep(0.3)
        yield Server(url=url, data_dir=data_dir, env=env, tiny_model_dir=tiny)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        hub.__exit__(None, None, None)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (never `playwright install`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context (no shared localStorage) with a 1400x1000 viewport (the screenshot width); console
    errors are logged to test-artifacts/e2e/console.log (expected ones too, e.g. the 422 and 404 answers the tests
    provoke)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    tab = context.new_page()
    console_errors: list[str] = []
    tab.on("console", lambda msg: console_errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: console_errors.append(f"uncaught: {exc}"))
    yield tab
    context.close()
    with (ARTIFACTS / "console.log").open("a") as log:
        log.writelines(f"{request.node.name}: {line}\n" for line in console_errors)
    assert not [e for e in console_errors if e.startswith("uncaught")], f"uncaught errors in the page: {console_errors}"


@pytest.fixture
def make_api(api_server: Server) -> Iterator[MakeApi]:
    clients: list[Api] = []

    def make() -> Api:
        clients.append(Api(api_server.url))
        return clients[-1]

    yield make
    for client in clients:
        client.http.close()


@pytest.fixture(scope="module")
def engine(pg_url: str) -> Iterator[Engine]:
    """A SQLAlchemy engine on the session's database, for tests that record rows directly."""
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()
