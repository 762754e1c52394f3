"""The API's Redis: the configured URL, else an embedded Redis (backend.embedded_redis); absent is tolerated."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from contract.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class RedisLink:
    url: str | None
    client: redis.Redis | None
    embedded: Any = None  # handle with .stop() when this process started the server

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.embedded is not None:
            self.embedded.stop()


def open_redis(settings: Settings) -> RedisLink:
    url, embedded = settings.redis_url, None
    if url is None:
        try:
            from backend.embedded_redis import start_embedded_redis

            embedded = start_embedded_redis(settings.data_dir)
            url = embedded.url
        except Exception as exc:  # the API still serves; /ready reports Redis as down
            log.warning("embedded Redis did not start (%s); live features are off", exc)
            return RedisLink(url=None, client=None)
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
    return RedisLink(url=url, client=client, embedded=embedded)
