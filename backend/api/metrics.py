"""Prometheus: request counts and latency by route template, jobs by status, usage per team and the scheduler's queue
per pool (read from the database at scrape).

GET /metrics answers only a bearer token equal to `settings.metrics_token` (jobs by status span every team); without
that setting it is off (404)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Iterator

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Job, Team, UsageRecord
from backend.services.admission import waiting_demand
from backend.services.usage import team_month_totals
from contract.scheduling import PRIORITIES


class JobStatusCollector(Collector):
    def __init__(self, session_factory: sessionmaker) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("streamrl_jobs", "Jobs by status", labels=["status"])
        instances = GaugeMetricFamily(
            "streamrl_generation_instances", "Generation instances by status", labels=["status"]
        )
        by_instance_status = select(GenerationInstance.status, func.count()).group_by(GenerationInstance.status)
        with self.session_factory() as session:
            job_counts = {s: n for s, n in session.execute(select(Job.status, func.count()).group_by(Job.status))}
            instance_counts = {s: n for s, n in session.execute(by_instance_status)}
        for status in JobStatus:
            jobs.add_metric([status.value], job_counts.get(status, 0))
        for instance_status in InstanceStatus:
            instances.add_metric([instance_status.value], instance_counts.get(instance_status, 0))
        yield jobs
        yield instances


class UsageCollector(Collector):
    """Per team: device-seconds by pool and tokens (all time, counters), and this month's device-hours beside the
    team's monthly budget (gauges; docs/operator.md#usage-and-budgets)."""

    def __init__(self, session_factory: sessionmaker) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        seconds = CounterMetricFamily("streamrl_team_device_seconds", "Device-seconds used, by team and pool",
                                      labels=["team", "pool"])
        tokens = CounterMetricFamily("streamrl_team_tokens", "Tokens generated and trained, by team",
                                     labels=["team", "kind"])
        month = GaugeMetricFamily("streamrl_team_month_device_hours", "Device-hours used this calendar month (UTC)",
                                  labels=["team"])
        budget = GaugeMetricFamily("streamrl_team_budget_device_hours", "The team's max_device_hours_per_month",
                                   labels=["team"])
        totals = select(Team.name, UsageRecord.pool, func.sum(UsageRecord.device_seconds),
                        func.sum(UsageRecord.tokens_generated), func.sum(UsageRecord.tokens_trained)).join(
            Team, Team.id == UsageRecord.team_id).group_by(Team.name, UsageRecord.pool)
        with self.session_factory() as session:
            rows = session.execute(totals).all()
            teams = session.execute(select(Team.id, Team.name, Team.max_device_hours_per_month)).all()
            this_month = team_month_totals(session, [team_id for team_id, _, _ in teams])
        generated: dict[str, int] = {}
        trained: dict[str, int] = {}
        for name, pool, device_seconds, gen, train in rows:
            seconds.add_metric([name, pool], float(device_seconds or 0.0))
            generated[name] = generated.get(name, 0) + int(gen or 0)
            trained[name] = trained.get(name, 0) + int(train or 0)
        for name in generated:
            tokens.add_metric([name, "generated"], generated[name])
            tokens.add_metric([name, "trained"], trained[name])
        for team_id, name, hours in teams:
            used = this_month.get(team_id)
            month.add_metric([name], used.device_seconds / 3600.0 if used else 0.0)
            if hours is not None:
                budget.add_metric([name], float(hours))
        yield from (seconds, tokens, month, budget)


class QueueCollector(Collector):
    """The scheduler's queue per pool, what an autoscaler of the worker Deployments scales on (deploy/k8s-autoscaling):
    waiting items, the device slots they ask for and the slots held now (docs/operator.md, "Scaling the pools from
    the queue")."""

    def __init__(self, session_factory: sessionmaker) -> None:
        self.session_factory = session_factory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("streamrl_queue_depth", "Queued jobs and sessions waiting for a pool's slots, by "
                                  "priority", labels=["pool", "priority"])
        demand = GaugeMetricFamily("streamrl_queue_demand_slots", "Device slots the queued items ask for, by pool",
                                   labels=["pool"])
        held = GaugeMetricFamily("streamrl_pool_slots_held", "Device slots held now, by pool (training: the gangs of "
                                 "starting, running and paused jobs; generation: live instances)", labels=["pool"])
        holding = (JobStatus.starting, JobStatus.running, JobStatus.paused)
        live = (InstanceStatus.starting, InstanceStatus.running)
        with self.session_factory() as session:
            queued = list(session.scalars(select(Job).where(Job.status == JobStatus.queued)))
            holders = list(session.scalars(select(Job).where(Job.status.in_(holding))))
            instances = session.scalar(select(func.count(GenerationInstance.id)).where(
                GenerationInstance.status.in_(live))) or 0
        held.add_metric(["training"], sum(waiting_demand(job)[0] for job in holders))
        held.add_metric(["generation"], int(instances))
        items: dict[tuple[str, str], int] = {}
        slots = {"training": 0, "generation": 0}
        for job in queued:
            priority = str(job.spec.get("priority", "normal"))
            for pool, asked in zip(("training", "generation"), waiting_demand(job), strict=True):
                if asked:
                    items[(pool, priority)] = items.get((pool, priority), 0) + 1
                    slots[pool] += asked
        for pool in ("training", "generation"):
            for priority in PRIORITIES:
                depth.add_metric([pool, priority], items.get((pool, priority), 0))
            demand.add_metric([pool], slots[pool])
        yield from (depth, demand, held)


def route_template(request: Request, api_prefix: str = "/api/v1") -> str:
    """The matched route's path template (FastAPI nests included routers: their route paths lack the API prefix)."""
    template = getattr(request.scope.get("route"), "path", None)
    if template is None:
        return "unmatched"
    if request.url.path.startswith(api_prefix + "/") and not template.startswith(api_prefix):
        template = api_prefix + template
    return str(template)


class _Observe:
    def __init__(self, app: ASGIApp, observe: Callable[[Scope, Receive, Send, ASGIApp], Awaitable[None]]) -> None:
        self.app, self.observe = app, observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.observe(scope, receive, send, self.app)


def install_metrics(app: FastAPI, session_factory: sessionmaker) -> None:
    """Per-app registry (several apps may live in one test process) served at GET /metrics."""
    registry = CollectorRegistry()
    requests = Counter("streamrl_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry)
    latency = Histogram("streamrl_http_request_seconds", "HTTP latency", ["method", "route"], registry=registry)
    registry.register(JobStatusCollector(session_factory))
    registry.register(UsageCollector(session_factory))
    registry.register(QueueCollector(session_factory))

    async def observe(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Count and time every HTTP request (a plain ASGI wrapper: BaseHTTPMiddleware costs a task per request)."""
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, send_status)
        finally:
            request = Request(scope)
            template = route_template(request)
            latency.labels(request.method, template).observe(time.perf_counter() - started)
            requests.labels(request.method, template, str(status)).inc()

    app.add_middleware(_Observe, observe=observe)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        """Only with `Authorization: Bearer <metrics_token>`: the counts span every team."""
        expected = request.app.state.settings.metrics_token
        if not expected:
            return _plain(404, "metrics are off: set STREAMRL_METRICS_TOKEN and scrape with it as a bearer token")
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected.encode()):
            return _plain(401, "GET /metrics needs `Authorization: Bearer <STREAMRL_METRICS_TOKEN>`",
                          {"WWW-Authenticate": 'Bearer realm="metrics"'})
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _plain(status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)
