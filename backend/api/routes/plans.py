"""Resource plans (paper Algorithm 1 + simulator) and the device catalog they price."""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response, status
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.api.deps import PlatformAdminAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.db.models import Iteration, JobSample, Team
from backend.planner import catalog_store
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec
from backend.planner.schemas import (
    DevicePublic,
    DevicesPublic,
    DeviceUpdate,
    LengthSpec,
    PlanPublic,
    PlanRequest,
)
from backend.planner.service import make_plan
from backend.services.errors import InvalidInput, NotFound
from backend.services.jobs import get_job

MAX_JOB_LENGTHS = 100_000  # most recent recorded samples used as the empirical distribution
RECENT_ITERATIONS = 20  # iterations whose measured speculative speed-up a plan from a job uses

router = APIRouter(prefix="/plans", tags=["plans"], responses=errors(*AUTHENTICATED))
DeviceName = Annotated[str, Path(min_length=1, max_length=64, description="device name")]


@router.post("")
async def create_plan(body: PlanRequest, auth: ViewerAuth, session: SessionDep, settings: SettingsDep) -> PlanPublic:
    """Split devices between generation and training and predict iteration time, throughput and the timeline."""
    catalog = catalog_store.load_catalog(settings.data_dir)
    if body.from_job_id is not None:
        update: dict[str, Any] = {"lengths": _job_lengths(session, auth.team, body.from_job_id)}
        if body.tail_tokens_per_forward is None:
            update["tail_tokens_per_forward"] = _job_tail_speedup(session, body.from_job_id)
        body = body.model_copy(update=update)
    try:
        plan = await run_in_threadpool(make_plan, body, catalog)  # CPU-bound: keep the event loop free
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if not _all_finite(plan.model_dump()):
        raise InvalidInput("the plan's figures overflow (inf/NaN): use realistic mfu, lengths and device figures")
    return plan


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_all_finite(v) for v in value)
    return True


def _job_lengths(session: Session, team: Team, job_id: int) -> LengthSpec:
    """The job's recorded response lengths (404 for another team's job; 422 when none are recorded yet)."""
    job = get_job(session=session, team=team, job_id=job_id)
    lengths = [float(n) for n in session.scalars(
        select(JobSample.length).where(JobSample.job_id == job.id).order_by(JobSample.id.desc()).limit(MAX_JOB_LENGTHS)
    ) if n > 0]
    if not lengths:
        raise InvalidInput(f"job {job_id} has no recorded samples yet", loc=("body", "from_job_id"))
    return LengthSpec(kind="empirical", values=lengths, max_tokens=int(max(lengths)))


def _job_tail_speedup(session: Session, job_id: int) -> float | None:
    """Median `tail_tokens_per_forward` of the job's last iterations (None: it did not speculate)."""
    rows = session.scalars(select(Iteration.metrics).where(Iteration.job_id == job_id)
                           .order_by(Iteration.iteration.desc()).limit(RECENT_ITERATIONS))
    values = [float(m["tail_tokens_per_forward"]) for m in rows
              if isinstance(m, dict) and isinstance(m.get("tail_tokens_per_forward"), int | float)]
    return max(1.0, statistics.median(values)) if values else None


def _public(spec: DeviceSpec, overridden: set[str]) -> DevicePublic:
    return DevicePublic(**spec.to_dict(), overridden=spec.name in overridden)


@router.get("/devices")
def list_devices(auth: ViewerAuth, settings: SettingsDep) -> DevicesPublic:
    """The device catalog: defaults updated by admin overrides."""
    overridden = set(catalog_store.load_overrides(settings.data_dir))
    devices = [_public(d, overridden) for d in catalog_store.load_catalog(settings.data_dir).values()]
    return DevicesPublic(data=devices, count=len(devices))


@router.put("/devices/{name}")
def put_device(name: DeviceName, body: DeviceUpdate, auth: PlatformAdminAuth, settings: SettingsDep) -> DevicePublic:
    """Override a device's figures or add a device (platform admin: the catalog is shared by every team)."""
    if not name.strip() or len(name) > 64:
        raise InvalidInput("device name must be 1-64 characters", loc=("path", "name"))
    spec = catalog_store.save_override(settings.data_dir, DeviceSpec(name=name.strip(), **body.model_dump()))
    return _public(spec, {spec.name})


@router.delete("/devices/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_device(name: DeviceName, auth: PlatformAdminAuth, settings: SettingsDep) -> Response:
    """Drop an override: a default device reverts to its defaults, an added device disappears (platform admin)."""
    if not catalog_store.delete_override(settings.data_dir, name):
        hint = " (it has its default figures)" if name in DEFAULT_DEVICES else ""
        raise NotFound(f"device {name} has no override{hint}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
