"""Fixtures of the runtime's integration tests: real Postgres, Redis and Celery worker processes.

`redis_client` / `job_id`: a Redis db reserved for this session (root conftest `redis_url`) and a fresh job id.
`platform`: a `Platform` (tests/integration/runtime_platform.py) with a tiny model registered for a team, Celery workers
for the generation and training pools started as subprocesses, and a controller loop in a thread.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from workers.stream import clear_job


@pytest.fixture
def job_id(redis_client: redis.Redis) -> Iterator[int]:
    """A job id no other test uses; its Redis keys are removed afterwards."""
    jid = random.randint(10**8, 10**9)
    yield jid
    clear_job(redis_client, jid)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.models import build_tiny_model

    return build_tiny_model("tiny-1m", tmp_path_factory.mktemp("models") / "tiny-1m", seed=0)


@pytest.fixture(scope="module")
def platform(pg_backend, redis_url: str, tiny_model_dir: Path):
    from runtime_platform import Platform

    with Platform.start(pg_backend, redis_url, tiny_model_dir) as running:
        yield running
