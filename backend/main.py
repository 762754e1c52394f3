"""App factory: `create_app(settings)`; `app` is the default instance (`uvicorn backend.main:app`)."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from backend.api.admission import AdmissionLimit, admission_slots, pool_capacity
from backend.api.auth_cache import AuthCache
from backend.api.deps import reject_unknown_query
from backend.api.errors import install_error_handlers
from backend.api.guard import BodyGuard, SecurityHeaders
from backend.api.metrics import install_metrics
from backend.api.redis_link import open_redis
from backend.api.routes import (
    alerts,
    auth,
    cluster,
    datasets,
    deployments,
    evaluations,
    exports,
    graders,
    health,
    job_data,
    jobs,
    keys,
    models,
    openai_compat,
    openai_inference,
    plans,
    queue,
    rollouts,
    runs,
    samples,
    stream,
    teams,
    tinker,
    tinker_sessions,
    trackers,
    usage,
)
from backend.api.static import install_frontend
from backend.db.migrate import upgrade_database
from backend.db.session import make_engine
from backend.services import dataset_hub, model_hub
from backend.services.rollout_gateway import CALL_TIMEOUT_S
from contract.settings import ConfigError, Settings, get_settings

API_PREFIX = "/api/v1"
# the API itself: always included
ROUTERS = (health, auth, teams, keys, models, datasets, jobs, job_data, stream, alerts, trackers, usage, queue,
           evaluations, deployments, tinker_sessions)
# features an operator may leave out of an API process (settings.disabled_routers): the planner's simulations,
# run comparison, exports, the sample browser, the cluster view, the grader test bench
OPTIONAL_ROUTERS = {"plans": plans, "runs": runs, "exports": exports, "samples": samples, "cluster": cluster,
                    "graders": graders}
# multipart uploads: capped by max_upload_bytes, not max_request_bytes
UPLOAD_PATHS = (f"{API_PREFIX}/datasets", f"{API_PREFIX}/models/upload", f"{openai_compat.PREFIX}/files")
UPLOAD_OVERHEAD_BYTES = 64 * 1024
log = logging.getLogger(__name__)


def api_router(disabled: list[str] | tuple[str, ...] = ()) -> APIRouter:
    """Every route of `ROUTERS` and `OPTIONAL_ROUTERS` but the `disabled` optional ones (a name that is not an
    optional router is a ConfigError: the API does not start with a setting it cannot honour), in one router. The
    resource routers' routes (their prefixes, tags and responses are applied when a route is declared) are added to
    it as they are, not nested with `include_router`: FastAPI matches a request by walking included routers level by
    level on the event loop (`python bench/api_routing.py`; docs/operator.md, "API latency")."""
    unknown = sorted(set(disabled) - set(OPTIONAL_ROUTERS))
    if unknown:
        raise ConfigError(f"STREAMRL_DISABLED_ROUTERS: {unknown} are not optional routers; choose from "
                          f"{sorted(OPTIONAL_ROUTERS)}")
    router = APIRouter()
    for module in ROUTERS:
        router.routes.extend(module.router.routes)
    for name, module in OPTIONAL_ROUTERS.items():
        if name not in disabled:
            router.routes.extend(module.router.routes)
    return router


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """The API on `settings` (default: the environment); `engine` (default: one made from the settings) is the
    database it serves from, e.g. one with a smaller pool."""
    settings = settings or get_settings()
    engine = engine or make_engine(settings.database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.auto_migrate:
            upgrade_database(settings.database_url)
        link = open_redis(settings)
        app.state.redis, app.state.redis_url = link.client, link.url
        # the event loop's own client: the rollout gateway's calls wait on it without holding a thread
        if link.url is not None:
            app.state.async_redis = aioredis.Redis.from_url(  # reads outlast a call's BLPOP (redis-py's default: 5 s)
                link.url, socket_connect_timeout=2, socket_timeout=CALL_TIMEOUT_S + 30)
        auth_cache.start(link.url, link.client)
        model_hub.resume_downloads(app.state.session_factory, settings)  # a restarted API finishes its downloads
        dataset_hub.resume_imports(app.state.session_factory, settings)
        gc.freeze()  # the app's long-lived objects leave the collector's generations: shorter GC pauses per request
        try:
            yield
        finally:
            if app.state.async_redis is not None:
                await app.state.async_redis.aclose()
            auth_cache.close()
            link.close()
            engine.dispose()

    # Swagger UI and ReDoc from assets shipped in the fastapi-offline wheel (/static-offline-docs): /docs works offline
    app = FastAPIOffline(
        title="StreamRL",
        version="0.1.0",
        description="Multi-tenant RL post-training for LLMs (StreamRL architecture)",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = sessionmaker(bind=engine, autoflush=False, expire_on_commit=False)
    # reads (GET/HEAD) run in autocommit: no BEGIN and no ROLLBACK round trip around each request's queries
    app.state.read_session_factory = sessionmaker(
        bind=engine.execution_options(isolation_level="AUTOCOMMIT"), autoflush=False, expire_on_commit=False
    )
    app.state.redis, app.state.redis_url, app.state.async_redis = None, None, None
    auth_cache = AuthCache(settings.auth_cache_s)
    auth_cache.watch(app.state.session_factory)
    auth_cache.watch(app.state.read_session_factory)
    app.state.auth_cache = auth_cache
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(
        BodyGuard,
        limits=lambda: (settings.max_request_bytes, settings.max_upload_bytes + UPLOAD_OVERHEAD_BYTES),
        upload_paths=UPLOAD_PATHS,
    )
    # requests run a few at a time in arrival order, and never wait for a connection holding a thread
    slots = admission_slots(settings.api_concurrency, pool_capacity(engine))
    app.add_middleware(AdmissionLimit, limit=slots.limit, upload_limit=slots.upload_limit, upload_paths=UPLOAD_PATHS,
                       unbounded_paths=(f"{API_PREFIX}/rollouts/",))  # gateway calls wait on an instance, async
    app.add_middleware(SecurityHeaders)  # outermost: also on answers the guard gives
    install_error_handlers(app)
    install_metrics(app, app.state.session_factory)
    # the rollout gateway (OpenAI errors, not in the schema) first: an agent's calls are the API's hottest path, and a
    # request is matched by walking the routes in order (no other route matches its paths)
    app.include_router(rollouts.router, prefix=API_PREFIX)
    rollouts.redact_access_log()  # a keyed gateway base URL carries the episode's token in its path
    app.include_router(api_router(settings.disabled_routers), prefix=API_PREFIX,
                       dependencies=[Depends(reject_unknown_query)])
    # OpenAI's fine-tuning API (docs/openai.md), kept out of the OpenAPI schema
    app.include_router(openai_compat.router, prefix=openai_compat.PREFIX)
    # OpenAI's models and chat completions, served on the generation pool (docs/openai.md), also out of the schema
    app.include_router(openai_inference.router, prefix=openai_compat.PREFIX)
    # Thinking Machines' Tinker training API (docs/tinker.md), kept out of the OpenAPI schema
    app.include_router(tinker.router, prefix=tinker.PREFIX)
    install_frontend(app)  # last: its catch-all route must not shadow the API
    return app


app: FastAPI  # built lazily by __getattr__ below


def __getattr__(name: str) -> FastAPI:
    """`backend.main.app` is built on first access, so importing this module never reads the environment."""
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)
