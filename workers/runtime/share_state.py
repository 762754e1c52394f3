"""The heartbeat of a shared process (a shared generation instance or training process): `keys.share_state(key)`,
JSON {pid, host, node, at, members}, refreshed every BEAT_S and expiring after STATE_TTL_S.

Invariant: the state is removed only together with an empty joins list, in one atomic step (`exit_if_no_joins`), so
a placement is either seen by this process or finds no state, and the controller then starts a new process
(backend/controller/sharing.py `ensure_shared`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from contract import keys

log = logging.getLogger(__name__)
STATE_TTL_S = 10  # the state lives this long without a refresh
BEAT_S = 2.0
_EXIT_IF_NO_JOINS = """
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) return 1 end
return 0
"""


class ShareState:
    def __init__(self, client: redis.Redis, key: str, node: str | None, members: Callable[[], list[Any]],
                 extra: Callable[[], dict[str, Any]] = dict) -> None:
        """`extra`: more fields of the state, computed at each beat (a shared training process's memory `room`)."""
        self.client, self.key, self.node, self.members, self.extra = client, key, node, members, extra
        self._stop = threading.Event()

    def start(self) -> ShareState:
        """Beat now (the controller's start marker is then no longer needed) and every BEAT_S from a thread."""
        self.beat()
        self.client.delete(keys.share_starting(self.key))
        self._start_thread()
        return self

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> None:
        self.client.set(keys.share_state(self.key), json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(), "node": self.node, "at": time.time(),
            "members": self.members(), **self.extra()}), ex=STATE_TTL_S)

    def exit_if_no_joins(self) -> bool:
        """Stop beating and remove the state, unless a placement arrived meanwhile (then go on beating)."""
        self._stop.set()
        if self.client.eval(_EXIT_IF_NO_JOINS, 2, keys.share_joins(self.key), keys.share_state(self.key)):
            return True
        self._stop = threading.Event()
        self.beat()
        self._start_thread()
        return False

    def _start_thread(self) -> None:
        threading.Thread(target=self._loop, args=(self._stop,), name=f"share-state-{self.key}", daemon=True).start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_S):
            try:
                self.beat()
            except redis.RedisError as exc:  # retried at the next tick; the members' own beats are separate
                log.warning("shared process %s: heartbeat failed: %s", self.key, exc)
