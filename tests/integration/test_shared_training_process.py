"""`SharedTrainingProcess` against a real Redis, without workers: a placement it cannot start (the database out) is
put back and tried again, and with no driver the process exits, removing its state with the empty placement list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from contract import keys
from workers.runtime.shared_training import SharedTrainingProcess

pytestmark = [pytest.mark.integration]


class DatabaseOutOnce:
    """A reporter whose first `load_job` fails as an unreachable database would; the job is gone after that."""

    def __init__(self) -> None:
        self.calls = 0

    def load_job(self, job_id: int) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the database is unreachable")
        return None


def test_a_placement_that_cannot_start_is_tried_again(redis_client: redis.Redis, tmp_path: Path) -> None:
    key = "train-test-retry-0"
    redis_client.rpush(keys.share_joins(key), json.dumps({"job_id": 12345}))
    reporter = DatabaseOutOnce()
    try:
        process = SharedTrainingProcess(redis_client, key, reporter, tmp_path, node=None, idle_s=0.5)  # type: ignore[arg-type]
        outcome = process.serve()
        assert reporter.calls == 2, reporter.calls  # put back after the failure, then read again
        assert redis_client.llen(keys.share_joins(key)) == 0 and not redis_client.exists(keys.share_state(key))
        assert outcome.startswith(f"shared training process {key} stopped"), outcome
    finally:
        redis_client.delete(keys.share_joins(key), keys.share_state(key))
