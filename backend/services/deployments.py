"""Deployments (docs/openai.md#deployments): a registered base model pinned with any number of the team's LoRA
adapters, served on /openai/v1 under stable names by replicas of one multi-LoRA instance.

    row = create(session, client, team, name="support", base_model="qwen", adapters=["job:7@best"],
                 min_replicas=0, max_replicas=2, idle_s=300)
    route = route_for(session_factory, row.id, "job:7@best")   # backend/services/inference.py `Route`

- Names: `model=<name>` generates with the deployment's first adapter (the base model when it has none);
  `model=<adapter id>` (an `ft:` id or `job:<id>@best|@last|@<N>`, exactly as given) with that adapter. The adapter
  ids are resolved to checkpoint directories when the deployment is created or updated (update it, or Promote
  again, to follow a newer `@best`). Each must be a LoRA adapter over the deployment's base model.
- Replicas (workers/runtime/deployment.py): all pop from one request list and every replica holds every adapter,
  so requests for different adapters decode in one batch. A replica takes a generation slot through a lease
  (backend/services/generation_leases.py: the scheduler counts it; none is granted while the pool is full or the
  team's max_generation_instances is used up). Scale up: the first request when none runs (it waits, within its
  timeout, for the replica to load), and another replica when the live ones are busy (rows in flight plus waiting
  requests over 3/4 of their batch capacity), up to max_replicas. The controller keeps min_replicas running
  (`reconcile`). Scale down: a replica at index >= min_replicas stops after `idle_s` without requests.
- What the replicas serve lives in Redis (`keys.deployment_config`), rewritten on every change and by the controller
  each pass; a change of base model or adapters bumps `version`, which retires the running replicas (they stop once
  idle; the next request starts replicas with the new adapters).
- Metrics (backend/services/deployment_metrics.py) and usage: each call is recorded (latency, tokens) and metered as
  the team's inference usage (usage_records), like any /openai/v1 call.
Another team's deployment ids and names: 404.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Deployment, Model, Team
from backend.services import generation_leases
from backend.services.errors import Conflict, InvalidInput, not_found
from backend.services.inference import START_MARKER_S, Route, generation_workers, redis_url_of
from contract import keys, tasks

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_REPLICAS = 16
BUSY = 0.75  # scale up when the live replicas' rows in flight plus waiting requests pass this share of capacity
_apps: dict[str, Any] = {}


# -- rows ------------------------------------------------------------------------------------------------------------
def _base(session: Session, team: Team, name: str) -> Model:
    model = session.scalar(select(Model).where(Model.team_id == team.id, Model.name == name, Model.state == "ready")
                           .order_by(Model.id.desc()).limit(1))  # a name's newest ready row
    if model is None:
        raise InvalidInput(f"no ready registered model named {name[:200]!r} in this team",
                           loc=("body", "base_model"))
    return model


def _adapters(session: Session, team: Team, base: Model, ids: list[str]) -> dict[str, str]:
    """Adapter id -> its adapter directory; 422 naming `adapters[i]` for one that is not the team's LoRA adapter
    over `base`."""
    from backend.services import openai_inference  # model ids as /openai/v1 resolves them
    from backend.services.openai_compat import OpenAIError

    out: dict[str, str] = {}
    for index, model_id in enumerate(ids):
        where = ("body", "adapters", index)
        if model_id in out:
            raise InvalidInput(f"{model_id[:200]!r} is listed twice", loc=where)
        try:
            served = openai_inference.resolve(session, team, model_id, deployed=False)
        except OpenAIError:
            raise InvalidInput(f"{model_id[:200]!r}: no such model of this team", loc=where) from None
        if served.adapter_dir is None or served.model_dir != base.path:
            raise InvalidInput(f"{model_id[:200]!r} is not a LoRA adapter over the base model {base.name!r}",
                               loc=where)
        out[model_id] = served.adapter_dir
    return out


def _check_name(session: Session, team: Team, name: str, own_id: int | None = None) -> None:
    if not NAME.match(name):
        raise InvalidInput("letters, digits, '.', '_' and '-' (up to 64, starting with a letter or digit)",
                           loc=("body", "name"))
    taken = session.scalar(select(Deployment).where(Deployment.team_id == team.id, Deployment.name == name))
    if taken is not None and taken.id != own_id:
        raise Conflict(f"a deployment named {name!r} exists already in this team")
    if session.scalar(select(Model.id).where(Model.team_id == team.id, Model.name == name)) is not None:
        raise Conflict(f"{name!r} names a registered model of this team: choose another deployment name")


def _check_replicas(min_replicas: int, max_replicas: int) -> None:
    if not 0 <= min_replicas <= MAX_REPLICAS:
        raise InvalidInput(f"must be between 0 and {MAX_REPLICAS}", loc=("body", "min_replicas"))
    if not 1 <= max_replicas <= MAX_REPLICAS:
        raise InvalidInput(f"must be between 1 and {MAX_REPLICAS}", loc=("body", "max_replicas"))
    if min_replicas > max_replicas:
        raise InvalidInput(f"min_replicas ({min_replicas}) exceeds max_replicas ({max_replicas})",
                           loc=("body", "min_replicas"))


def create(session: Session, client: redis.Redis, team: Team, *, name: str, base_model: str, adapters: list[str],
           min_replicas: int = 0, max_replicas: int = 1, idle_s: float = 300.0) -> Deployment:
    _check_name(session, team, name)
    _check_replicas(min_replicas, max_replicas)
    base = _base(session, team, base_model)
    _adapters(session, team, base, adapters)
    row = Deployment(team_id=team.id, name=name, base_model=base_model, adapters=list(adapters),
                     min_replicas=min_replicas, max_replicas=max_replicas, idle_s=float(idle_s), version=1)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # a concurrent create took the name
        session.rollback()
        raise Conflict(f"a deployment named {name!r} exists already in this team") from None
    write_config(session, client, row)
    session.commit()
    return row


def get(session: Session, team: Team, deployment_id: int) -> Deployment:
    row = session.get(Deployment, deployment_id)
    if row is None or row.team_id != team.id:
        raise not_found("deployment", deployment_id)
    return row


def list_for(session: Session, team: Team) -> list[Deployment]:
    return list(session.scalars(select(Deployment).where(Deployment.team_id == team.id).order_by(Deployment.id)))


def update(session: Session, client: redis.Redis, team: Team, deployment_id: int, changes: dict[str, Any]
           ) -> Deployment:
    """Apply the given fields; a new base model or adapter list bumps the version (running replicas retire)."""
    row = get(session, team, deployment_id)
    if "name" in changes and changes["name"] != row.name:
        _check_name(session, team, changes["name"], own_id=row.id)
        row.name = changes["name"]
    min_replicas = changes.get("min_replicas", row.min_replicas)
    max_replicas = changes.get("max_replicas", row.max_replicas)
    _check_replicas(min_replicas, max_replicas)
    base_model = changes.get("base_model", row.base_model)
    adapters = list(changes.get("adapters", row.adapters))
    if base_model != row.base_model or adapters != list(row.adapters):
        _adapters(session, team, _base(session, team, base_model), adapters)
        row.base_model, row.adapters, row.version = base_model, adapters, row.version + 1
    row.min_replicas, row.max_replicas = min_replicas, max_replicas
    row.idle_s = float(changes.get("idle_s", row.idle_s))
    row.updated_at = datetime.now(UTC)
    session.flush()
    write_config(session, client, row)
    session.commit()
    return row


def delete(session: Session, client: redis.Redis, team: Team, deployment_id: int) -> None:
    """The row goes; its replicas see their config gone and stop once idle."""
    row = get(session, team, deployment_id)
    client.delete(keys.deployment_config(row.id), keys.deployment_calls(row.id), keys.deployment_batches(row.id))
    session.delete(row)
    session.commit()


def promote(session: Session, client: redis.Redis, team: Team, *, adapter: str, name: str,
            base_model: str | None = None) -> Deployment:
    """Put `adapter` first in the deployment `name` (created, with the adapter's base model, if the team has none
    so named), so `model=<name>` answers with it."""
    row = session.scalar(select(Deployment).where(Deployment.team_id == team.id, Deployment.name == name))
    if row is None:
        if base_model is None:
            raise InvalidInput("give base_model for a new deployment", loc=("body", "base_model"))
        return create(session, client, team, name=name, base_model=base_model, adapters=[adapter])
    adapters = [adapter, *[a for a in row.adapters if a != adapter]]
    return update(session, client, team, row.id, {"adapters": adapters})


# -- what the replicas serve -----------------------------------------------------------------------------------------
def config_of(session: Session, row: Deployment) -> dict[str, Any] | None:
    team = session.get(Team, row.team_id)
    base = session.scalar(select(Model).where(Model.team_id == row.team_id, Model.name == row.base_model,
                                              Model.state == "ready").order_by(Model.id.desc()).limit(1))
    if team is None or base is None:
        return None
    try:
        adapters = _adapters(session, team, base, list(row.adapters))
    except InvalidInput:  # an adapter's checkpoint went away: serve the ones that remain
        adapters = {}
        for model_id in row.adapters:
            try:
                adapters.update(_adapters(session, team, base, [model_id]))
            except InvalidInput:
                continue
    return {"version": row.version, "team_id": row.team_id, "model_dir": base.path, "adapters": adapters,
            "idle_s": row.idle_s, "min_replicas": row.min_replicas, "max_replicas": row.max_replicas}


def write_config(session: Session, client: redis.Redis, row: Deployment) -> None:
    config = config_of(session, row)
    if config is None:
        client.delete(keys.deployment_config(row.id))
    else:
        client.set(keys.deployment_config(row.id), json.dumps(config))


# -- replicas --------------------------------------------------------------------------------------------------------
def replicas(client: redis.Redis, deployment_id: int) -> list[dict[str, Any]]:
    """The states of the deployment's live (or just failed) replicas, by index."""
    names = [keys.inference_state(keys.replica_key(deployment_id, k)) for k in range(MAX_REPLICAS)]
    out = []
    for k, raw in enumerate(client.mget(names)):
        if raw:
            state = json.loads(raw)
            out.append({"id": keys.replica_key(deployment_id, k), "replica": k, **state})
    return out


def _starting(client: redis.Redis, deployment_id: int) -> set[int]:
    names = [keys.inference_starting(keys.replica_key(deployment_id, k)) for k in range(MAX_REPLICAS)]
    return {k for k, raw in enumerate(client.mget(names)) if raw}


def _alive(client: redis.Redis, replica_key: str) -> bool:
    """The replica's task runs (its state says so, failed aside)."""
    raw = client.get(keys.inference_state(replica_key))
    if not raw:
        return False
    return bool(json.loads(raw).get("state") != "failed")


def _send(client: redis.Redis, deployment_id: int, replica: int) -> None:
    url = redis_url_of(client)
    if url not in _apps:
        _apps[url] = tasks.make_celery(url)
    _apps[url].send_task(tasks.RUN_DEPLOYMENT, args=[deployment_id, replica])


def start_replica(session: Session, client: redis.Redis, row: Deployment, replica: int) -> str | None:
    """Send replica `replica`'s task once its generation lease is granted; None when sent (or on its way), else why
    not. The start marker is claimed first and the replica's state read after: a replica's task writes its state
    before it deletes the marker, so the one caller that claims it sees a replica already starting. (Checked the
    other way round, a caller held up behind another's lease lock claimed the marker its replica had just deleted
    and sent a second task for the same replica: two processes served replica 0 on one lease, and none was left
    for replica 1.)"""
    replica_key = keys.replica_key(row.id, replica)
    marker = keys.inference_starting(replica_key)
    if not client.set(marker, json.dumps({"at": time.time()}), nx=True, ex=START_MARKER_S):
        return None  # on its way
    if _alive(client, replica_key):
        client.delete(marker)
        return None
    if not client.exists(keys.deployment_config(row.id)):
        write_config(session, client, row)
    grant = generation_leases.try_acquire(session, client, team_id=row.team_id, lease=replica_key,
                                          kind="deployment", ttl_s=START_MARKER_S)
    if not grant.granted:
        client.delete(marker)
        return grant.reason
    _send(client, row.id, replica)
    return None


def _wanted(client: redis.Redis, row: Deployment, live: list[dict[str, Any]], starting: set[int]) -> int | None:
    """The replica index to start now for a waiting request, or None."""
    running = {r["replica"] for r in live if r.get("state") != "failed"}
    if running | starting:
        ready = [r for r in live if r.get("state") == "ready"]
        if not ready or starting or len(running | starting) >= row.max_replicas:
            return None
        load = sum(int(r.get("in_flight", 0)) for r in ready) + int(
            client.llen(keys.inference_requests(keys.deployment_key(row.id))))
        if load <= BUSY * sum(int(r.get("capacity", 1)) for r in ready):
            return None
    free = [k for k in range(row.max_replicas) if k not in running and k not in starting]
    return free[0] if free else None


def route_for(session_factory: sessionmaker[Session], deployment_id: int, adapter: str | None) -> Route:

    def state(c: redis.Redis) -> dict[str, Any] | None:
        live = replicas(c, deployment_id)
        for wanted in ("ready", "starting"):
            found = next((r for r in live if r.get("state") == wanted), None)
            if found is not None:
                return found
        return live[0] if live else None  # failed

    def ensure(c: redis.Redis) -> None:
        with session_factory() as session:
            current = session.get(Deployment, deployment_id)
            if current is None:
                return
            wanted = _wanted(c, current, replicas(c, deployment_id), _starting(c, deployment_id))
            if wanted is not None and generation_workers(c) > 0:
                start_replica(session, c, current, wanted)
                session.commit()

    return Route(key=keys.deployment_key(deployment_id), adapter=adapter, state=state, ensure=ensure)


def reconcile(session: Session, client: redis.Redis) -> list[str]:
    """The controller's pass: every deployment's config rewritten, and its first min_replicas replicas running (or
    asked for). Returns the replica ids it asked for."""
    asked = []
    for row in session.scalars(select(Deployment).order_by(Deployment.id)):
        write_config(session, client, row)
        live = {r["replica"] for r in replicas(client, row.id) if r.get("state") != "failed"}
        for k in range(row.min_replicas):
            if k not in live and start_replica(session, client, row, k) is None:
                asked.append(keys.replica_key(row.id, k))
    return asked

