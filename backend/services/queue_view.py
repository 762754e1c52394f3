"""The queue as a caller sees it: each waiting item's position, reason, ETA and who holds what it waits for.

The controller's last scheduling pass stored every waiting item's entry (backend/services/admission.py); here the
API adds the holders. For the caller's own team they are named (job id and name); another team's jobs, items and
team are counts and anonymous labels, never ids or names.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import redis
from sqlalchemy import distinct, select
from sqlalchemy.orm import Session

from backend.db.enums import LIVE_INSTANCE_STATUSES, JobStatus
from backend.db.models import GenerationInstance, Job, Team
from backend.schemas.queue import JobRef, QueueGroup, QueueItemPublic, QueueListing, QueuePublic
from backend.services.admission import HOLDING, stored_queue

Holders = dict[str, tuple[list[JobRef], int]]  # waiting_for -> (own holders, other teams' holders)


def _holders(session: Session, team: Team, pools: set[str]) -> Holders:
    out: Holders = {}
    for pool in pools:
        if pool == "generation_slots":
            rows = session.execute(select(distinct(Job.id), Job.name, Job.team_id).join(
                GenerationInstance, GenerationInstance.job_id == Job.id).where(
                GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES))).all()
        elif pool.startswith("quota:"):
            rows = session.execute(select(Job.id, Job.name, Job.team_id).where(
                Job.team_id == team.id, Job.status.in_([JobStatus.starting, JobStatus.running]))).all()
        else:
            rows = session.execute(select(Job.id, Job.name, Job.team_id).where(Job.status.in_(HOLDING))).all()
        own = [JobRef(id=job_id, name=name) for job_id, name, team_id in sorted(rows) if team_id == team.id]
        out[pool] = (own, sum(1 for _, _, team_id in rows if team_id != team.id))
    return out


def _described(entry: dict[str, Any], holders: Holders) -> QueuePublic:
    own, others = holders.get(entry["waiting_for"], ([], 0))
    named = ", ".join(f"#{ref.id} {ref.name!r}" for ref in own[:5]) + (f" and {len(own) - 5} more" if len(own) > 5
                                                                       else "")
    parts = ([f"your jobs {named}"] if own else []) + ([f"{others} job(s) of other teams"] if others else [])
    reason = entry["reason"] + (f"; held by {' and '.join(parts)}" if parts else "")
    return QueuePublic(position=entry["position"], reason=reason, waiting_for=entry["waiting_for"],
                       eta_s=entry.get("eta_s"), needs=entry.get("needs") or {}, held_by=own,
                       held_by_other_teams=others)


def queue_entries(*, session: Session, client: redis.Redis | None, team: Team,
                  job_ids: list[int]) -> dict[int, QueuePublic]:
    """The queue entries of the team's waiting jobs among `job_ids` (an empty dict when none waits)."""
    _, stored = stored_queue(client)
    mine = {job_id: stored[job_id] for job_id in job_ids if job_id in stored}
    if not mine:
        return {}
    holders = _holders(session, team, {entry["waiting_for"] for entry in mine.values()})
    return {job_id: _described(entry, holders) for job_id, entry in mine.items()}


def queue_listing(*, session: Session, client: redis.Redis | None, team: Team) -> QueueListing:
    """The whole queue in order: the team's own items in full, another team's without ids or names."""
    at, stored = stored_queue(client)
    rows = session.execute(select(Job.id, Job.name, Job.team_id, Job.spec["priority"].as_string()).where(
        Job.id.in_(list(stored)), Job.status == JobStatus.queued)).all() if stored else []
    holders = _holders(session, team, {stored[job_id]["waiting_for"] for job_id, _, team_id, _ in rows
                                       if team_id == team.id})
    labels: dict[int, str] = {}
    items: list[QueueItemPublic] = []
    for job_id, name, team_id, priority in sorted(rows, key=lambda row: stored[row[0]]["position"]):
        entry, own = stored[job_id], team_id == team.id
        if not own:
            labels.setdefault(team_id, f"other team {len(labels) + 1}")
        described = _described(entry, holders) if own else None
        items.append(QueueItemPublic(
            position=entry["position"], priority=priority or "normal", team=team.name if own else labels[team_id],
            own=own, job_id=job_id if own else None, job_name=name if own else None,
            waiting_for=entry["waiting_for"], reason=described.reason if described else entry["reason"],
            eta_s=entry.get("eta_s"), needs=entry.get("needs") or {}))
    updated = None if at is None else round(time.time() - at, 1)
    return QueueListing(items=items, groups=_groups(items), updated_s=updated)


def _groups(items: list[QueueItemPublic]) -> list[QueueGroup]:
    count: Counter[tuple[str, bool, str]] = Counter()
    training: Counter[tuple[str, bool, str]] = Counter()
    generation: Counter[tuple[str, bool, str]] = Counter()
    for item in items:
        key = (item.team, item.own, item.priority)
        count[key] += 1
        training[key] += item.needs.get("training", 0)
        generation[key] += item.needs.get("generation", 0)
    order = {"high": 0, "normal": 1, "low": 2}

    def rank(key: tuple[str, bool, str]) -> tuple[int, bool, str]:
        return order.get(key[2], 3), not key[1], key[0]

    return [QueueGroup(team=key[0], own=key[1], priority=key[2], waiting=count[key], training_slots=training[key],
                       generation_slots=generation[key]) for key in sorted(count, key=rank)]


def with_queue(page: bytes, *, session: Session, client: redis.Redis | None, team: Team) -> bytes:
    """A `JobPublic` or `JobsPublic` JSON page (backend/services/json_pages.py) with the queue entries of its queued
    jobs filled in; the page as it is when none of the team's jobs waits (what dashboards poll most)."""
    _, stored = stored_queue(client)
    if not stored:
        return page
    waiting = list(session.scalars(select(Job.id).where(Job.id.in_(list(stored)), Job.team_id == team.id,
                                                        Job.status == JobStatus.queued)))
    if not waiting:
        return page
    entries = queue_entries(session=session, client=client, team=team, job_ids=waiting)
    data = json.loads(page)
    for job in data.get("data", [data]):
        if job["id"] in entries:
            job["queue"] = entries[job["id"]].model_dump(mode="json")
    return json.dumps(data).encode()
