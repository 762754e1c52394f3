"""Stable names of a job's checkpoints: `job:<id>@best | @last | @<iteration>` (docs/openai.md#model-aliases).

- `@best`: the checkpoint marked best (checkpoint.select best, by checkpoint.metric); none marked yet: 404.
- `@last`: the newest checkpoint still on disk.
- `@<iteration>`: that iteration's checkpoint, while retention keeps it.
Only the team's own jobs resolve; anything else (another team's job included) is "not found".
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Checkpoint, Job, Team

ALIAS = re.compile(r"^job:(?P<job>\d{1,10})@(?P<which>best|last|\d{1,10})$")


def is_alias(name: str) -> bool:
    return name.startswith("job:")


def resolve_alias(session: Session, team: Team, name: str) -> tuple[Job, Checkpoint] | None:
    """The team's job and checkpoint `name` names; None when it names none (or is malformed)."""
    match = ALIAS.match(name)
    if match is None:
        return None
    job = session.scalar(select(Job).where(Job.id == int(match["job"]), Job.team_id == team.id))
    if job is None:
        return None
    rows = [c for c in session.scalars(select(Checkpoint).where(Checkpoint.job_id == job.id)
                                       .order_by(Checkpoint.iteration.desc())) if Path(c.path).is_dir()]
    which = match["which"]
    if which == "best":
        found = next((c for c in rows if c.best), None)
    elif which == "last":
        found = rows[0] if rows else None
    else:
        found = next((c for c in rows if c.iteration == int(which)), None)
    return (job, found) if found is not None else None
