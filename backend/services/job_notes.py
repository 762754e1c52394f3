"""Run tags and notes: editing them, and the listing filters (by tag, by text over name, tags and notes).

Tags are stored as a sorted JSON list of TAG_PATTERN strings, which hold no quotes: the stored text contains
`"tag"` (quotes included) exactly when the list holds that tag, so one portable LIKE filters on PostgreSQL and SQLite.
"""

from __future__ import annotations

import json

from sqlalchemy import ColumnElement, Text, cast, or_
from sqlalchemy.orm import Session

from backend.db.models import Job, JobEvent
from backend.schemas.jobs import MAX_TAGS, JobAnnotate
from backend.services.errors import InvalidInput


def annotate_job(*, session: Session, job: Job, change: JobAnnotate) -> Job:
    """Apply `change` to the job's tags and notes (422 naming `tags` past MAX_TAGS); records a `notes` event
    saying what changed."""
    before = list(job.tags or [])
    if change.tags is not None:
        tags = set(change.tags)
    else:
        tags = (set(before) | set(change.add_tags)) - set(change.remove_tags)
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a job has at most {MAX_TAGS} tags, this would make {len(tags)}", loc=("body", "tags"))
    said: list[str] = []
    if sorted(tags) != before:
        job.tags = sorted(tags)
        added, removed = sorted(tags - set(before)), sorted(set(before) - tags)
        said.append("tags " + " ".join([*(f"+{t}" for t in added), *(f"-{t}" for t in removed)]))
    if change.notes is not None and change.notes != job.notes:
        job.notes = change.notes
        said.append("notes cleared" if not change.notes else "notes edited")
    if said:
        data = {"tags": job.tags, "notes_changed": any(part.startswith("notes") for part in said)}
        session.add(JobEvent(job_id=job.id, kind="notes", message="; ".join(said), data=data))
    session.flush()
    return job


def has_tag(tag: str) -> ColumnElement[bool]:
    return cast(Job.tags, Text).contains(json.dumps(tag), autoescape=True)


def matches_text(query: str) -> ColumnElement[bool]:
    """Case-insensitive substring of the name, the notes or a tag."""
    return or_(
        Job.name.icontains(query, autoescape=True),
        Job.notes.icontains(query, autoescape=True),
        cast(Job.tags, Text).icontains(query, autoescape=True),
    )
