"""`streamrl up`: the whole platform on this machine, one command; `streamrl migrate`: upgrade the database.

`up` starts the embedded Redis (unless STREAMRL_REDIS_URL names a server), runs the migrations, then supervises the
API (uvicorn) and — when those commands exist — `streamrl controller` and one `streamrl worker --pool generation`
and `--pool training`, all sharing STREAMRL_DATA_DIR / STREAMRL_DATABASE_URL / STREAMRL_REDIS_URL. On the first run
it creates an owner account (credentials in <data_dir>/admin.json) and logs the CLI in. Ctrl-C or SIGTERM stops
everything it started.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from backend.api.proxies import uvicorn_proxy_args
from backend.supervisor import ChildSpec, Supervisor
from contract.settings import ConfigError, Settings, load_settings
from streamrl.cli.bootstrap import bootstrap_admin, wait_for_health
from streamrl.cli.errors import CLIError
from streamrl.cli.host_checks import redact, running_as_root, startup_checks
from streamrl.cli.preflight import check_port_free, lock_data_dir

API_APP = "backend.main:create_app"  # uvicorn factory
DEMO_MODULE = "streamrl.cli.runtime_cmds"  # hook: `submit_demo(api: StreamRLClient, settings: Settings) -> None`
WORKER_NICE = 10  # workers run this much below the API's CPU priority: requests keep their turn on a busy host


def settings_for(data_dir: Path | None) -> Settings:
    if data_dir is not None:
        os.environ["STREAMRL_DATA_DIR"] = str(data_dir.expanduser().resolve())
    try:
        return load_settings()
    except ConfigError as exc:
        raise CLIError(str(exc)) from None


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streamrl.cli.main", *args]


def _child_env(settings: Settings, redis_url: str, api_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "STREAMRL_DATA_DIR": str(settings.data_dir),
        "STREAMRL_DATABASE_URL": settings.database_url,
        "STREAMRL_REDIS_URL": redis_url,
        "STREAMRL_ARTIFACT_DIR": str(settings.artifacts),
        "STREAMRL_URL": api_url,
        "PYTHONUNBUFFERED": "1",
        "STREAMRL_SUPERVISED": "up",  # the workers leave the one line about running as root to `up`
    }


def _runtime_children(env: dict[str, str], devices: dict[str, str] | None = None) -> list[ChildSpec]:
    """`devices`: pool -> `--devices` of that pool's worker (device sets, pinned processes); absent: unpinned."""
    from streamrl.cli.main import command_names

    names = command_names()
    children = []
    if "controller" in names:
        children.append(ChildSpec("controller", _cli("controller"), env))
    if "worker" in names:
        # SIGTERM: Celery's warm shutdown. Running tasks see the worker's shutdown flag within a heartbeat and hand
        # their work back (a driver checkpoints, an instance finishes what it admitted), so the job continues when
        # `up` starts again (workers/runtime/shutdown.py); the supervisor's timeout bounds the wait.
        for pool in ("generation", "training"):
            sets = (devices or {}).get(pool)
            args = ("worker", "--pool", pool, *(("--devices", sets) if sets else ()))
            children.append(ChildSpec(f"worker-{pool}", _cli(*args), env, stop_signal=signal.SIGTERM,
                                      nice=WORKER_NICE))
    return children


def _stop_requested() -> threading.Event:
    """SIGINT/SIGTERM set the event instead of raising, so shutdown always runs to the end."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _run_demo(api_url: str, settings: Settings, token: str | None) -> None:
    import importlib

    try:
        demo = importlib.import_module(DEMO_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != DEMO_MODULE:
            raise
        typer.echo("--demo: the demo job is not available yet (the RL runtime's demo hook is not installed); "
                   "the platform runs without it.")
        return
    from backend.client import StreamRLClient
    from streamrl.cli.errors import translate

    try:
        with StreamRLClient(api_url, token) as api:
            demo.submit_demo(api, settings)
    except Exception as exc:  # the platform stays up; the user sees why the demo did not start
        typer.echo(f"up: --demo failed: {translate(exc).message}", err=True)


def report_host(settings: Settings) -> None:
    """One line per missing host piece with its fix (streamrl/cli/host_checks.py); CLIError when one blocks `up`."""
    missing = [check for check in startup_checks(settings) if not check.ok]
    for check in missing:
        typer.echo(f"up: {check.line()}", err=True)
    blocking = [check.name for check in missing if check.blocking]
    if blocking:
        raise CLIError(f"cannot start: {', '.join(blocking)} missing (see above; `streamrl doctor` checks again)")
    if os.geteuid() == 0:
        typer.echo(f"up: {running_as_root().detail}")


def _check_device_sets(options: dict[str, str | None]) -> None:
    from contract.devices import DeviceSetError, parse_device_sets

    for option, text in options.items():
        try:
            if text is not None:
                parse_device_sets(text)
        except DeviceSetError as err:
            raise CLIError(f"{option}: {err}") from None


def up(
    host: str = typer.Option("127.0.0.1", "--host", help="interface the API listens on"),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="default: $STREAMRL_DATA_DIR or ./data"),
    no_workers: bool = typer.Option(False, "--no-workers", help="only the API (and Redis): no controller, workers"),
    demo: bool = typer.Option(False, "--demo", help="submit a small demo RL job once the platform is up"),
    api_workers: int = typer.Option(min(4, os.cpu_count() or 1), "--api-workers", min=1, max=64,
                                    help="API server processes (uvicorn workers)"),
    generation_devices: str | None = typer.Option(
        None, "--generation-devices", help="device sets of the generation worker, one instance per set: `0;1`"
    ),
    training_devices: str | None = typer.Option(
        None, "--training-devices", help="device sets of the training worker, one job driver per set: `2-3`"
    ),
) -> None:
    """Run the platform on this machine: embedded Redis + API + controller + workers. Ctrl-C stops everything."""
    from backend.db.migrate import upgrade_database
    from backend.embedded_redis import EmbeddedRedis, start_embedded_redis

    settings = settings_for(data_dir)
    _check_device_sets({"--generation-devices": generation_devices, "--training-devices": training_devices})
    check_port_free(host, port)
    lock = lock_data_dir(settings.data_dir)
    try:
        report_host(settings)
    except BaseException:
        lock.close()
        raise
    stop = _stop_requested()
    supervisor = Supervisor(echo=lambda line: typer.echo(f"up: {line}"))
    embedded: EmbeddedRedis | None = None
    local_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    api_url = f"http://{local_host}:{port}"
    try:
        if settings.redis_url:
            redis_url = settings.redis_url
        else:
            embedded = start_embedded_redis(settings.data_dir)
            redis_url = embedded.url
            typer.echo(f"up: embedded redis at {embedded.socket_path} (pid {embedded.pid})")
        typer.echo(f"up: migrating {redact(settings.database_url)}")
        upgrade_database(settings.database_url)
        env = _child_env(settings, redis_url, api_url)
        api_argv = [sys.executable, "-m", "uvicorn", API_APP, "--factory", "--host", host, "--port", str(port),
                    "--workers", str(api_workers), *uvicorn_proxy_args(settings)]
        # migrated above: the API processes must not race each other migrating
        supervisor.start(ChildSpec("api", api_argv, {**env, "STREAMRL_AUTO_MIGRATE": "false"}, critical=True))
        wait_for_health(api_url, stop, alive=lambda: supervisor.is_alive("api"))
        if stop.is_set():
            return
        token = bootstrap_admin(api_url, settings.data_dir, settings.database_url)
        if no_workers:
            typer.echo("up: --no-workers: controller and workers not started")
        else:
            children = _runtime_children(env, {"generation": generation_devices or "",
                                                "training": training_devices or ""})
            for child in children:
                supervisor.start(child)
            if not children:
                typer.echo("up: the controller and workers are not installed yet: jobs will stay queued")
        if demo:
            _run_demo(api_url, settings, token)
        typer.echo(f"up: StreamRL is running: {api_url} (dashboard), {api_url}/docs (REST API). Ctrl-C stops it.")
        supervisor.wait(stop.is_set)
    finally:
        supervisor.stop_all()
        if embedded is not None:
            embedded.stop()
        lock.close()
        typer.echo("up: stopped")


def migrate(
    database_url: str | None = typer.Option(None, "--database-url", help="default: STREAMRL_DATABASE_URL / settings"),
) -> None:
    """Upgrade the database schema to the newest migration (alembic upgrade head)."""
    from backend.db.migrate import upgrade_database

    url = database_url or settings_for(None).database_url
    upgrade_database(url)
    typer.echo(f"database at head: {redact(url)}")


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("migrate")(migrate)
