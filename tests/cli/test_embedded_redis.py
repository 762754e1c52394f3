"""The embedded Redis: redis-py and Celery (kombu) clients work on its socket; stop() leaves no process."""

from __future__ import annotations

from pathlib import Path

import psutil
import redis
from celery import Celery

from backend.embedded_redis import EmbeddedRedis, start_embedded_redis


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_redis_py_and_celery_clients_then_stop(tmp_path: Path) -> None:
    server = start_embedded_redis(tmp_path)
    try:
        assert server.url == f"unix://{server.socket_path}"
        assert server.celery_url == f"redis+socket://{server.socket_path}"
        client = redis.Redis.from_url(server.url)
        client.xadd("samples", {"sample_id": "s1"})
        assert client.xlen("samples") == 1

        app = Celery("embedded-test", broker=server.celery_url)
        with app.connection_for_write() as conn:
            queue = conn.SimpleQueue("embedded-test")
            queue.put({"job_id": 7})
            message = queue.get(timeout=5)
            message.ack()
            assert message.payload == {"job_id": 7}
            queue.close()
        client.close()
    finally:
        server.stop()
    assert _gone(server.pid)
    assert not server.socket_path.exists()


def test_data_survives_restart_and_orphan_is_replaced(tmp_path: Path) -> None:
    first = start_embedded_redis(tmp_path)
    first.client().set("kept", "yes")
    first.client().save()
    # A second start on the same data dir (e.g. after a killed `streamrl up`) replaces the orphaned server.
    second: EmbeddedRedis = start_embedded_redis(tmp_path)
    try:
        assert _gone(first.pid)
        assert second.client().get("kept") == b"yes"
    finally:
        second.stop()
    assert _gone(second.pid)


def test_long_data_dir_falls_back_to_short_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = start_embedded_redis(deep)
    try:
        assert len(str(server.socket_path)) <= 107
        assert server.client().ping()
        assert (deep / "redis").is_dir()  # the snapshot still lives under the data dir
    finally:
        server.stop()
    assert _gone(server.pid)
