"""Shared fixtures: real Postgres / SQLite databases migrated with Alembic, real Redis, the API on TestClient, and
factories for teams, users and auth headers.

- `pg_url`: a fresh Postgres database for this test session (server from STREAMRL_TEST_DATABASE_URL, default
  postgres@127.0.0.1:5432), migrated to head, dropped at the end.
- `sqlite_url`: a migrated SQLite file.
- `redis_url`: real Redis (STREAMRL_TEST_REDIS_URL, default 127.0.0.1:6379) on a db number reserved for this session
  (a lock key in db 0), flushed before and after.
- `pg_backend` / `sqlite_backend`: a `Backend` (engine + settings + factories + `client()`); `app_client`,
  `make_team`, `make_user`, `auth_headers` are the Postgres backend's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# One intra-op thread per test process (before anything imports torch): the suite runs an xdist worker per core and
# each test's workers, servers and jobs beside it, so torch's default of a thread per core only oversubscribes the
# host (measured on the 2-core CI kind: in-process training 283 s -> 42 s). Children inherit it; a test that needs
# more sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from backend.db.enums import Role
from backend.db.migrate import upgrade_database
from backend.db.models import Membership, Team, User
from backend.db.session import make_engine, normalize_database_url, session_scope
from backend.main import create_app
from backend.services.auth import hash_password, issue_session_token
from contract.settings import Settings

# The costliest test files first (per-file seconds measured in a full heavy run, loaded 2-core host, 2026-12-05):
# xdist --dist loadfile hands files out in collection order: a costly file that came last alphabetically left one
# worker busy for its whole length while the other idled. The rest keep their order.
COSTLIEST_FIRST = (
    "tests/training/test_micro_batching.py",  # its torch.compile test builds inductor's C++ (~200 s on a fresh machine)
    "tests/integration/test_shared_training.py", "tests/training/test_distill.py",
    "tests/integration/test_agentic_jobs.py", "tests/cli/test_up.py",
    "tests/integration/test_lora_jobs.py", "tests/integration/test_failover.py",
    "tests/integration/test_tinker_parking.py", "tests/integration/test_runtime_ranks.py",
    "tests/engines/test_vllm_engine.py", "tests/integration/test_tinker_sdk.py",
    "tests/integration/test_runtime_elastic.py",
    "tests/integration/test_autoscale.py", "tests/environments/test_openenv_env.py",
    "tests/integration/test_exact_resume.py", "tests/deploy/test_gpu_check.py", "tests/training/test_shared_base.py",
    "tests/integration/test_scheduler_queue.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable sort


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--deselected-files", metavar="PATH",
        help="write the test files that hold deselected tests (-m, -k), one a line, to PATH, and those of deselected "
             "`serial` tests to PATH.serial: scripts/test.sh's fast part names the files of the heavy and serial "
             "tests, so the later parts' processes collect those (~110 files, 1) instead of all ~250",
    )


_deselected_files: dict[str, set[str]] = {"": set(), ".serial": set()}


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        _deselected_files[""].add(path)
        if item.get_closest_marker("serial") is not None:
            _deselected_files[".serial"].add(path)


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.getoption("deselected_files")
    if target:  # every xdist worker collects every file: each writes the same lists, whole files by rename
        for suffix, paths in _deselected_files.items():
            partial = Path(f"{target}{suffix}.{os.getpid()}")
            partial.write_text("".join(f"{path}\n" for path in sorted(paths)))
            partial.replace(f"{target}{suffix}")


PG_SERVER_URL = os.environ.get("STREAMRL_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_SERVER_URL = os.environ.get("STREAMRL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TEST_SECRET = "test-secret-key-0123456789abcdef"
DEFAULT_PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    server = make_url(normalize_database_url(PG_SERVER_URL))
    name = f"streamrl_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        pytest.fail(f"Postgres at {server.render_as_string(hide_password=True)} is not usable: {exc}")
    url = server.set(database=name).render_as_string(hide_password=False)
    upgrade_database(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'streamrl.db'}"
    upgrade_database(url)
    return url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis db number no concurrent test session uses (lock key in db 0, expires after 2 h)."""
    base = redis.Redis.from_url(REDIS_SERVER_URL)
    try:
        base.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_SERVER_URL} is not usable: {exc}")
    for db in range(1, 16):
        lock = f"streamrl:test:db-lock:{db}"
        if _clients_on(base, db):  # a killed session's orphans (Celery workers, drivers) still use it: job ids
            continue               # restart at 1 in every fresh database, so they would write into this session's jobs
        if base.set(lock, os.getpid(), nx=True, ex=7200) or _take_stale_lock(base, lock):
            break
    else:
        pytest.fail("all Redis test dbs 1-15 are locked by other test sessions or still used by the processes of a "
                    "killed one (redis-cli CLIENT LIST shows them by db)")
    url = urlunsplit(urlsplit(REDIS_SERVER_URL)._replace(path=f"/{db}"))
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()
    base.delete(lock)
    base.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of this session's Redis db (redis_url)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _clients_on(base: redis.Redis, db: int) -> bool:
    """Whether any client is connected to Redis db `db` (CLIENT LIST's `db` field: the db it last selected)."""
    return any(str(client.get("db")) == str(db) for client in base.client_list())


def _take_stale_lock(base: redis.Redis, lock: str) -> bool:
    """Take a db lock whose holder (a test session on this host, killed before it released it) no longer runs."""
    holder = base.get(lock)
    try:
        os.kill(int(holder or 0), 0)
        return False
    except ProcessLookupError:
        pass
    except (ValueError, PermissionError):
        return False
    with base.pipeline() as pipe:  # only if no other session took it meanwhile
        try:
            pipe.watch(lock)
            if pipe.get(lock) != holder:
                return False
            pipe.multi()
            pipe.set(lock, os.getpid(), ex=7200)
            pipe.execute()
            return True
        except redis.WatchError:
            return False


@dataclass
class Backend:
    """One database + settings, with factories that write through real sessions."""

    url: str
    engine: Engine
    settings: Settings

    def session(self) -> AbstractContextManager[Session]:
        return session_scope(self.engine)

    def make_team(
        self, name: str | None = None, *, max_concurrent_jobs: int = 2, max_generation_instances: int = 8
    ) -> Team:
        with self.session() as session:
            team = Team(
                name=name or f"team-{uuid.uuid4().hex[:10]}",
                max_concurrent_jobs=max_concurrent_jobs,
                max_generation_instances=max_generation_instances,
            )
            session.add(team)
        return team

    def make_user(
        self,
        team: Team | None = None,
        role: Role | str = Role.member,
        *,
        email: str | None = None,
        password: str | None = None,
    ) -> User:
        """A user (password optional: hashing is slow), member of `team` with `role` when given."""
        with self.session() as session:
            user = User(
                email=email or f"user-{uuid.uuid4().hex[:10]}@example.com",
                password_hash=hash_password(password) if password else None,
            )
            session.add(user)
            session.flush()
            if team is not None:
                session.add(Membership(team_id=team.id, user_id=user.id, role=Role(role)))
        return user

    def add_membership(self, team: Team, user: User, role: Role | str) -> None:
        with self.session() as session:
            session.add(Membership(team_id=team.id, user_id=user.id, role=Role(role)))

    def auth_headers(self, user: User, team: Team | None = None) -> dict[str, str]:
        """A session token for `user` in `team` (default: their first team)."""
        team_id = team.id if team is not None else None
        if team_id is None:
            with self.session() as session:
                team_id = session.scalar(
                    select(Membership.team_id).where(Membership.user_id == user.id).order_by(Membership.id)
                )
            assert team_id is not None, f"{user.email} belongs to no team"
        token = issue_session_token(user_id=user.id, team_id=team_id, secret_key=TEST_SECRET, ttl_s=3600)
        return {"Authorization": f"Bearer {token}"}

    @contextmanager
    def client(self, **overrides: Any) -> Iterator[TestClient]:
        """The API on this database (lifespan run), with optional settings overrides."""
        settings = self.settings.model_copy(update=overrides)
        with TestClient(create_app(settings)) as client:
            yield client


def _backend(url: str, redis_url: str, data_dir: Path) -> Backend:
    settings = Settings(
        database_url=url,
        redis_url=redis_url,
        data_dir=data_dir,
        secret_key=TEST_SECRET,
        auto_migrate=False,
    )
    return Backend(url=url, engine=make_engine(url), settings=settings)


@pytest.fixture(scope="session")
def make_backend() -> Any:
    """Build a `Backend` on another (already migrated) database, e.g. a disposable server a fault test restarts."""
    return _backend


@pytest.fixture(scope="session")
def pg_backend(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    backend = _backend(pg_url, redis_url, tmp_path_factory.mktemp("pg-data"))
    yield backend
    backend.engine.dispose()


@pytest.fixture(scope="session")
def sqlite_backend(sqlite_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    backend = _backend(sqlite_url, redis_url, tmp_path_factory.mktemp("sqlite-data"))
    yield backend
    backend.engine.dispose()


@pytest.fixture(scope="session")
def _worker_app_client(pg_backend: Backend) -> Iterator[TestClient]:
    with pg_backend.client() as client:
        yield client


@pytest.fixture
def app_client(_worker_app_client: TestClient) -> TestClient:
    """The API on this worker's database, with no cookies. One app per test worker, not per test: FastAPI builds an
    app's routes at its first request (~0.35 s of CPU), which hundreds of tests paid each. Tests isolate by their own
    teams and users (`world`); one that needs other settings or a fresh app uses `pg_backend.client(...)`."""
    _worker_app_client.cookies.clear()
    return _worker_app_client


@pytest.fixture
def make_team(pg_backend: Backend) -> Any:
    return pg_backend.make_team


@pytest.fixture
def make_user(pg_backend: Backend) -> Any:
    return pg_backend.make_user


@pytest.fixture
def auth_headers(pg_backend: Backend) -> Any:
    return pg_backend.auth_headers


@pytest.fixture(scope="session")
def path_without_bwrap(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with every command of this one except `bwrap`: a host without bubblewrap (symlinks in one dir)."""
    farm = tmp_path_factory.mktemp("path-without-bwrap")
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = farm / name
            if name != "bwrap" and not target.exists() and not target.is_symlink():
                target.symlink_to(os.path.join(folder, name))
    return str(farm)
