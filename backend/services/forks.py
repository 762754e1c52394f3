"""Forks: a new job that starts from one of a job's checkpoints with changed settings (POST /jobs/{id}/fork).

The fork is an ordinary queued job whose spec is the parent's with the overrides applied, plus its lineage
(`parent_job_id`, `parent_iteration`). Its checkpoints directory starts with a copy of the parent's checkpoint
(hard links where the file system allows: checkpoint files are never rewritten in place) and its
`current_iteration` is the checkpoint's iteration, so its driver resumes from there exactly as a resumed job does
(workers/runtime/driver.py `_resume_from_checkpoint`) and counts iterations on from it; the trainer then applies
the fork's own learning rate and weight decay over the checkpoint's (workers/training/trainer.py).
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Checkpoint, Job, Team, User
from backend.services.errors import InvalidInput, StoreUnavailable
from backend.services.exports import checkpoint_dir
from backend.services.jobs import create_job, record_event
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.checkpoints import checkpoint_mirror, stored_checkpoint
from contract.spec import JobSpec

# what a checkpoint cannot be carried over to: other weights, another algorithm's optimizer/value-head state
FIXED_FIELDS = ("model", "algorithm.name")


def apply_overrides(spec: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of `spec` with `overrides` applied: a dotted key sets that field (`training.lr`), a plain key holding a
    mapping merges into the field's mapping, any other plain key replaces the field."""
    result = copy.deepcopy(spec)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = result
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidInput(f"{key}: {part!r} is not a mapping in the parent's spec",
                                   loc=("body", "overrides", key))
            node = child
        if "." not in key and isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = _merged(node[leaf], value)
        else:
            node[leaf] = copy.deepcopy(value)
    return result


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _field(spec: dict[str, Any], dotted: str) -> Any:
    node: Any = spec
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def fork_spec(parent: Job, iteration: int, overrides: dict[str, Any]) -> JobSpec:
    """The fork's validated spec (422 at `overrides` naming what is wrong)."""
    raw = apply_overrides(parent.spec, overrides)
    if "name" not in overrides:
        raw["name"] = f"{parent.name}-fork-{iteration}"[:200]
    for dotted in FIXED_FIELDS:
        if _field(raw, dotted) != _field(parent.spec, dotted):
            held = _field(parent.spec, dotted)
            raise InvalidInput(f"{dotted} cannot change in a fork: the checkpoint holds {held!r}'s state",
                               loc=("body", "overrides", dotted))
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where}: {first['msg']}", loc=("body", "overrides", where)) from None


def parent_checkpoint(session: Session, parent: Job, iteration: int, artifacts: Path) -> Path:
    """The parent's checkpoint directory of `iteration` (422 naming the iteration and the ones there are)."""
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == parent.id, Checkpoint.iteration == iteration))
    directory = None if row is None else checkpoint_dir(row.path, artifacts)
    if directory is None and row is not None:  # written on a worker host: from the object store, if there is one
        try:
            directory = stored_checkpoint(parent.team_id, parent.id, iteration, artifacts)
        except ArtifactStoreError as err:
            raise StoreUnavailable(f"job {parent.id}'s checkpoint of iteration {iteration}: {err}") from err
    if directory is None:
        there = session.scalars(select(Checkpoint.iteration).where(Checkpoint.job_id == parent.id)
                                .order_by(Checkpoint.iteration)).all()
        have = ", ".join(str(it) for it in there) or "none"
        why = "has no checkpoint" if row is None else "has no checkpoint files on this server"
        raise InvalidInput(f"job {parent.id} {why} of iteration {iteration} (checkpoints: {have})",
                           loc=("body", "iteration"))
    return directory


def copy_checkpoint(source: Path, job_dir: Path, iteration: int) -> Path:
    """`source` as `<job_dir>/checkpoints/iter_NNNNNN` (the driver's name for it: workers/runtime/driver.py), written
    under `.tmp` and renamed (never seen half-copied)."""
    final = job_dir / "checkpoints" / f"iter_{iteration:06d}"
    staging = final.with_name(final.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(source, staging, copy_function=os.link)
    except OSError:  # another file system: a real copy
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging)
    staging.rename(final)
    return final


def fork_job(*, session: Session, team: Team, user: User, parent: Job, iteration: int, spec: JobSpec, source: Path,
             changed: list[str], artifacts: Path, api_key_id: int | None = None) -> Job:
    """A queued fork of `parent` (one of `team`'s jobs) with `spec` (`fork_spec`), starting from `source`, its
    checkpoint of `iteration` (`parent_checkpoint`); `changed`: the overridden keys, for the event."""
    job = create_job(session=session, team=team, user=user, spec=spec, api_key_id=api_key_id)
    job.parent_job_id, job.parent_iteration, job.current_iteration = parent.id, iteration, iteration
    copied = copy_checkpoint(source, artifacts / "jobs" / str(job.id), iteration)
    try:  # the fork's driver may run on a host that only sees the object store
        mirror = checkpoint_mirror(team.id, job.id, artifacts / "jobs" / str(job.id))
        if mirror is not None:
            mirror.upload(copied)
    except ArtifactStoreError as err:
        shutil.rmtree(copied.parent.parent, ignore_errors=True)
        raise StoreUnavailable(f"the fork's checkpoint could not be stored: {err}") from err
    what = ", ".join(changed) or "nothing"
    record_event(session=session, job_id=job.id, kind="created",
                 message=f"forked from job {parent.id} at iteration {iteration} (changed: {what})",
                 data={"fork": {"parent_job_id": parent.id, "parent_iteration": iteration}})
    record_event(session=session, job_id=parent.id, kind="fork",
                 message=f"forked at iteration {iteration} as job {job.id}", data={"fork": job.id})
    session.flush()
    return job
