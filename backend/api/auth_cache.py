"""A per-process cache of resolved bearer tokens, for reads (GET/HEAD) only.

Resolving a token costs a database round trip and ORM loading: about a third of a polled page's server CPU. A
dashboard polls the same pages with the same token many times a second across a team, so reads reuse what an
earlier request of this process resolved.

Invariants (what keeps "a revocation takes effect at once"):
- An entry is served only while this process's subscription to `REVOCATIONS_CHANNEL` has been live since the entry
  was filled: any message on the channel, a lost connection, or a subscriber that has not checked in for
  `LIVENESS_S` empties the cache and bumps its generation. With no Redis, nothing is cached.
- A commit of this process that changed a user, team, membership, API key (other than its `last_used_at`) or a
  session revocation empties the cache at once and publishes on the channel, so every other API process does too, and
  open live streams re-check their credentials (backend/api/routes/stream.py). This hook is the one place the API
  announces such changes: routes only commit.
- A request fills the cache only if the generation did not change while it read the database: a read that raced
  with a change is used once and never stored.
- Entries live at most `ttl_s` (`STREAMRL_AUTH_CACHE_S`), the bound for changes made without the API (direct SQL).
- Writes always resolve from the database: their AuthContext objects belong to the request's own session.
Session expiry is checked on every request (it is in the signed token, not the cache).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TypeVar

import redis
from sqlalchemy import event, inspect
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from backend.db.models import ApiKey, Membership, RevokedSession, Team, User
from backend.services.auth import AuthContext
from backend.services.live import REVOCATIONS_CHANNEL, publish_revocation

log = logging.getLogger(__name__)
T = TypeVar("T")

LIVENESS_S = 3.0  # the subscriber checks in at least every second; older than this counts as dead
MAX_ENTRIES = 10_000
_WATCHED = (User, Team, Membership, ApiKey, RevokedSession)
_WATCHED_TABLES = frozenset(model.__tablename__ for model in _WATCHED)
_CHANGED_TABLES = "streamrl_auth_changed_tables"


@dataclass(frozen=True)
class _Entry:
    auth: AuthContext  # detached ORM objects: never handed out, only merged into a request's session
    filled: float  # time.monotonic()


class AuthCache:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0
        self._live_since: float | None = None  # monotonic time the current subscription was confirmed
        self._checked_in = 0.0
        self._publisher: redis.Redis | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, redis_url: str | None, publisher: redis.Redis | None) -> None:
        """Serve from the cache while subscribed to `redis_url` (nothing is cached without Redis or with ttl 0)."""
        self._publisher = publisher
        if self.ttl_s > 0 and redis_url is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._subscribe, args=(redis_url,), name="auth-cache", daemon=True)
            self._thread.start()

    # -- serving ---------------------------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def live(self) -> bool:
        """Serving from the cache: subscribed to revocations, and the subscriber checked in recently."""
        return self._live_since is not None and time.monotonic() - self._checked_in < LIVENESS_S

    def get(self, token: str, session: Session) -> AuthContext | None:
        """The cached caller of `token`, its objects merged into `session` (no query); None on a miss."""
        entry = self._entries.get(token)
        if entry is None or not self.live:
            return None
        if time.monotonic() - entry.filled > self.ttl_s:
            self._entries.pop(token, None)
            return None
        cached = entry.auth
        if cached.session_expires is not None and cached.session_expires < time.time():
            return None  # resolve_token names the reason
        return replace(
            cached,
            user=session.merge(cached.user, load=False),
            team=session.merge(cached.team, load=False),
            api_key=session.merge(cached.api_key, load=False) if cached.api_key is not None else None,
        )

    def put(self, token: str, auth: AuthContext, generation: int) -> None:
        """Store what a request resolved while the generation was `generation` (skipped if it changed since)."""
        if not self.live or generation != self._generation:
            return
        detached = replace(
            auth,
            user=_detached_copy(auth.user),
            team=_detached_copy(auth.team),
            api_key=_detached_copy(auth.api_key) if auth.api_key is not None else None,
        )
        with self._lock:
            if generation != self._generation:
                return
            self._entries[token] = _Entry(detached, time.monotonic())
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)

    # -- invalidation ----------------------------------------------------------------------------------------------

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def changed(self, reason: str) -> None:
        """This process committed an auth-relevant change: forget everything here, and tell the other processes."""
        self.clear()
        publish_revocation(self._publisher, reason)

    def watch(self, factory: sessionmaker[Session]) -> None:
        """Call `changed` after every commit of `factory`'s sessions that touched users, teams, memberships, keys or
        revocations (ORM flushes and bulk statements alike)."""
        event.listen(factory, "after_flush", _note_flushed_changes)
        event.listen(factory, "do_orm_execute", _note_bulk_changes)
        event.listen(factory, "after_commit", self._after_commit)
        event.listen(factory, "after_soft_rollback", lambda session, _tx: session.info.pop(_CHANGED_TABLES, None))

    def _after_commit(self, session: Session) -> None:
        tables = session.info.pop(_CHANGED_TABLES, None)
        if tables:
            self.changed(f"{', '.join(sorted(tables))} changed")

    def _subscribe(self, url: str) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=2)
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(REVOCATIONS_CHANNEL)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    self._checked_in = time.monotonic()
                    if message is None:
                        continue
                    self.clear()  # a confirmation starts a fresh live period; a message is a change
                    if message["type"] == "subscribe":
                        self._live_since = self._checked_in
                        backoff = 0.5
            except (redis.RedisError, OSError) as exc:
                log.warning("auth cache off until Redis is back (%s)", exc)
            finally:
                self._live_since = None
                self.clear()
                pubsub.close()
                client.close()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 10.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _detached_copy(obj: T) -> T:
    """A copy of `obj`'s loaded state that belongs to no session (the request keeps its own instance)."""
    holder = Session()  # a throwaway session: the copy is persistent there, then detached
    copy = holder.merge(obj, load=False)
    holder.expunge(copy)
    return copy


def _note(session: Session, table: str) -> None:
    """Remember until the commit (or rollback) that `table`'s rows changed in this session."""
    session.info.setdefault(_CHANGED_TABLES, set()).add(table)


def _note_flushed_changes(session: Session, _context: object) -> None:
    for obj in (*session.new, *session.deleted):
        if isinstance(obj, _WATCHED):
            _note(session, obj.__tablename__)
    for obj in session.dirty:
        if isinstance(obj, _WATCHED) and _really_changed(obj):
            _note(session, obj.__tablename__)


def _really_changed(obj: object) -> bool:
    """Any attribute changed, an API key's throttled `last_used_at` excepted (it changes nobody's access)."""
    ignored = "last_used_at" if isinstance(obj, ApiKey) else None
    return any(attr.history.has_changes() for attr in inspect(obj).attrs if attr.key != ignored)


def _note_bulk_changes(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete or state.is_insert):
        return
    name = getattr(getattr(state.statement, "table", None), "name", None)
    if name in _WATCHED_TABLES:
        _note(state.session, name)
