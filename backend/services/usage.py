"""Usage: device-seconds and tokens per team, job and API key, recorded as the work is recorded (docs/api.md#usage).

What one iteration row counts (`iteration_usage`, from the keys the driver records; docs/api.md#iteration-metrics):
- training: `iteration_seconds` x `training.devices` (the driver's devices are held for the whole iteration);
- generation: `iteration_seconds` x `instances_live` x devices per instance (each instance holds its slot);
- colocated mode generates on the training devices: `gen_seconds` of the iteration go to generation, the rest to
  training;
- a Tinker session's optimizer step: training, `step_seconds` (the compute time of the calls that made the step);
- tokens: `tokens_generated` (response tokens the policy sampled) and `tokens_trained` (prompt + response tokens
  the trainer processed; a Tinker step's `tokens`).
Rows are written in the transaction that records the iteration, replacing any earlier rows of that (job, iteration):
a job's usage is its recorded iterations'. On-demand inference (the OpenAI chat route, the Tinker API's sample) adds
one generation row per call, without a job, under the caller's team and API key (`inference_meter`): its requests'
shares of the instance's engine steps (backend/services/inference.py) and the tokens it sampled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, case, delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import ApiKey, Job, Team, UsageRecord
from backend.services.inference import CallUsage, Meter

log = logging.getLogger(__name__)
GroupBy = Literal["team", "job", "key", "day"]
GROUPINGS: tuple[GroupBy, ...] = ("team", "job", "key", "day")
TINKER_TAG = "tinker"  # backend/services/tinker.py TAG (imported there from here would make a cycle)


@dataclass(frozen=True)
class UsageShare:
    pool: str  # generation | training
    device_seconds: float
    tokens_generated: int = 0
    tokens_trained: int = 0


@dataclass(frozen=True)
class UsageTotals:
    generation_device_seconds: float = 0.0
    training_device_seconds: float = 0.0
    tokens_generated: int = 0
    tokens_trained: int = 0

    @property
    def device_seconds(self) -> float:
        return self.generation_device_seconds + self.training_device_seconds

    @property
    def tokens(self) -> int:
        return self.tokens_generated + self.tokens_trained


@dataclass(frozen=True)
class UsageRow:
    id: int | None  # the team's, job's or key's id (None: no job / no key; a day)
    name: str  # team name, job name, key name, or the day (YYYY-MM-DD)
    totals: UsageTotals


def _number(metrics: dict[str, Any], key: str) -> float:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def instance_devices(spec: dict[str, Any]) -> int:
    generation = spec.get("generation") or {}
    if generation.get("engine") == "vllm":
        return int((generation.get("vllm") or {}).get("tensor_parallel_size", 1) or 1)
    return 1


def iteration_usage(spec: dict[str, Any], metrics: dict[str, Any]) -> list[UsageShare]:
    """What one recorded iteration used, per pool (the rules in the module docstring); pools with nothing: left out."""
    generated, trained = int(_number(metrics, "tokens_generated")), int(_number(metrics, "tokens_trained"))
    if "step_seconds" in metrics:  # a Tinker session's optimizer step
        shares = [UsageShare("training", _number(metrics, "step_seconds"), 0, int(_number(metrics, "tokens")))]
    else:
        seconds = max(0.0, _number(metrics, "iteration_seconds"))
        devices = int((spec.get("training") or {}).get("devices", 1) or 1)
        if spec.get("mode") == "colocated":
            gen = min(max(0.0, _number(metrics, "gen_seconds")), seconds)
            shares = [UsageShare("generation", gen * devices, generated, 0),
                      UsageShare("training", (seconds - gen) * devices, 0, trained)]
        else:
            instances = max(0.0, _number(metrics, "instances_live"))
            shares = [UsageShare("generation", seconds * instances * instance_devices(spec), generated, 0),
                      UsageShare("training", seconds * devices, 0, trained)]
    return [s for s in shares if s.device_seconds > 0 or s.tokens_generated or s.tokens_trained]


def record_iteration_usage(*, session: Session, job: Job, iteration: int, metrics: dict[str, Any]) -> None:
    """Replace the usage rows of (job, iteration) with what `metrics` says it used."""
    session.execute(delete(UsageRecord).where(UsageRecord.job_id == job.id, UsageRecord.iteration == iteration))
    source = "tinker" if TINKER_TAG in (job.tags or []) else "job"
    session.add_all(UsageRecord(team_id=job.team_id, job_id=job.id, api_key_id=job.created_by_key_id,
                                pool=share.pool, source=source, iteration=iteration,
                                device_seconds=share.device_seconds, tokens_generated=share.tokens_generated,
                                tokens_trained=share.tokens_trained)
                    for share in iteration_usage(job.spec or {}, metrics))


def inference_meter(session_factory: sessionmaker[Session], team_id: int, api_key_id: int | None) -> Meter:
    """A `meter` for backend/services/inference.py that records the call's usage in a session of its own. A failed
    write is logged, never raised: the caller already has its samples."""

    def record(used: CallUsage) -> None:
        try:
            with session_factory() as session:
                session.add(UsageRecord(team_id=team_id, job_id=None, api_key_id=api_key_id, pool="generation",
                                        source="inference", iteration=None,
                                        device_seconds=max(0.0, used.device_seconds),
                                        tokens_generated=max(0, used.tokens_generated), tokens_trained=0))
                session.commit()
        except SQLAlchemyError as err:
            log.warning("usage of an inference call of team %s not recorded: %s", team_id, err)

    return record


# -- reads -------------------------------------------------------------------------------------------------------
def _sums() -> list[Any]:
    generation = UsageRecord.pool == "generation"
    return [
        func.coalesce(func.sum(case((generation, UsageRecord.device_seconds), else_=0.0)), 0.0),
        func.coalesce(func.sum(case((generation, 0.0), else_=UsageRecord.device_seconds)), 0.0),
        func.coalesce(func.sum(UsageRecord.tokens_generated), 0),
        func.coalesce(func.sum(UsageRecord.tokens_trained), 0),
    ]


def _totals(values: Any) -> UsageTotals:
    gen, train, generated, trained = values
    return UsageTotals(float(gen or 0.0), float(train or 0.0), int(generated or 0), int(trained or 0))


def month_start(now: datetime | None = None) -> datetime:
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _day(session: Session) -> ColumnElement[Any]:
    if session.get_bind().dialect.name == "postgresql":
        return func.to_char(func.timezone("UTC", UsageRecord.recorded_at), "YYYY-MM-DD")
    return func.strftime("%Y-%m-%d", UsageRecord.recorded_at)


def usage_rows(*, session: Session, team: Team, group_by: GroupBy, start: datetime, end: datetime,
               job_id: int | None = None, api_key_id: int | None = None) -> list[UsageRow]:
    """The team's usage in [start, end) grouped by `group_by` (optionally one job's or one key's), largest first
    (days: in order)."""
    where = [UsageRecord.team_id == team.id, UsageRecord.recorded_at >= start, UsageRecord.recorded_at < end]
    if job_id is not None:
        where.append(UsageRecord.job_id == job_id)
    if api_key_id is not None:
        where.append(UsageRecord.api_key_id == api_key_id)
    if group_by == "team":
        values = session.execute(select(*_sums()).where(*where)).one()
        return [UsageRow(team.id, team.name, _totals(values))]
    if group_by == "day":
        day = _day(session)
        rows = session.execute(select(day, *_sums()).where(*where).group_by(day).order_by(day)).all()
        return [UsageRow(None, str(row[0]), _totals(row[1:])) for row in rows]
    column, model, label = ((UsageRecord.job_id, Job, Job.name) if group_by == "job" else
                            (UsageRecord.api_key_id, ApiKey, ApiKey.name))
    query = (select(column, label, *_sums()).outerjoin(model, model.id == column).where(*where)
             .group_by(column, label))
    rows = session.execute(query).all()
    none_label = "on-demand inference" if group_by == "job" else "sessions (no API key)"
    out = [UsageRow(row[0], str(row[1]) if row[0] is not None else none_label, _totals(row[2:])) for row in rows]
    return sorted(out, key=lambda r: (-r.totals.device_seconds, -r.totals.tokens, r.id or 0))


def job_totals(session: Session, job_ids: list[int]) -> dict[int, UsageTotals]:
    """Each job's whole usage (every recorded iteration)."""
    if not job_ids:
        return {}
    rows = session.execute(select(UsageRecord.job_id, *_sums()).where(UsageRecord.job_id.in_(job_ids))
                           .group_by(UsageRecord.job_id)).all()
    return {int(row[0]): _totals(row[1:]) for row in rows}


def team_month_totals(session: Session, team_ids: list[int], now: datetime | None = None) -> dict[int, UsageTotals]:
    """Each team's usage since the start of the calendar month (UTC)."""
    if not team_ids:
        return {}
    rows = session.execute(select(UsageRecord.team_id, *_sums()).where(
        UsageRecord.team_id.in_(team_ids), UsageRecord.recorded_at >= month_start(now))
        .group_by(UsageRecord.team_id)).all()
    return {int(row[0]): _totals(row[1:]) for row in rows}
