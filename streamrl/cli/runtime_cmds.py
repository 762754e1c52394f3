"""Runtime commands: `streamrl worker --pool generation|training`, `streamrl controller`; and the `up --demo` job.

    streamrl worker --pool generation [--concurrency 2]   # a Celery worker of one pool (one process per slot)
    streamrl controller [--interval 1.0] [--once]          # the reconcile loop (one leader)

`submit_demo(api, settings)` is the hook `streamrl up --demo` calls: it builds a tiny model under the artifact dir,
registers it and submits an async job on the long-tail task whose reward rises within a minute or two while its
outputs learn to end (most at EOS, lengths with a long tail).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import typer

from streamrl.cli.errors import CLIError

POOLS = ("generation", "training", "control")
SUPERVISED_ENV = "STREAMRL_SUPERVISED"  # `up` sets it to "up" in its children's environment
DEMO_MODEL = "demo-tiny"
# Dense per-character shaping for `rep K abc:` -> `abcabc...`: lowercase output, the prompt's letters, closeness to the
# exact string, and a length that fits the answer's (so the model learns to stop: outputs end at EOS, not at
# max_tokens, and their lengths keep the task's long tail). A tiny random model climbs from ~0.15 to ~0.5 within
# a minute or two on a laptop CPU, while the share of outputs cut at max_tokens falls.
DEMO_REWARD = '''
import difflib

def reward(prompt, response, meta):
    answer, text = meta["answer"], response.strip()
    if not text:
        return 0.0
    letters = set(meta.get("pattern") or answer)
    lower = sum(ch.islower() for ch in text) / len(text)
    on_pattern = sum(ch in letters for ch in text) / len(text)
    similar = difflib.SequenceMatcher(None, text, answer).ratio()
    fits = min(len(text), len(answer)) / max(len(text), len(answer))
    return {"lowercase": 0.3 * lower, "pattern": 0.3 * on_pattern, "similarity": 0.2 * similar, "length": 0.2 * fits}
'''


def demo_spec(model: str = DEMO_MODEL) -> dict[str, Any]:
    return {
        "name": "demo-long-tail", "model": model, "mode": "async", "max_staleness": 1, "seed": 0,
        "dataset": {"builtin": "long_tail", "num_prompts": 256, "eval_prompts": 0},
        "reward": {"type": "python", "code": DEMO_REWARD},
        "algorithm": {"name": "grpo", "group_size": 8},
        "generation": {"instances": 2, "batch_size": 64, "max_tokens": 48},
        "training": {"iterations": 60, "prompts_per_iteration": 8, "micro_batch_size": 32, "lr": 3e-3},
        "dispatch": {"policy": "skew_aware"},
        "checkpoint": {"interval": 20},
    }


def worker(
    pool: str = typer.Option(..., "--pool", help="generation | training | control"),
    concurrency: int | None = typer.Option(
        None, "--concurrency", "-c", min=1, help="tasks run at once (processes); default 2, or one per device set"
    ),
    devices: str | None = typer.Option(
        None, "--devices", help="device sets, one per process: `0-3;4-7` (CPU cores, or GPU ids on CUDA); each task "
        "process runs pinned to its set. Default: STREAMRL_DEVICES, else no pinning",
    ),
    loglevel: str = typer.Option("INFO", "--loglevel"),
) -> None:
    """Run a Celery worker for one pool (generation instances, job drivers, or control tasks)."""
    if pool not in POOLS:
        raise CLIError(f"--pool must be one of {', '.join(POOLS)} (got {pool!r})")
    from contract.devices import DeviceSetError, parse_device_sets

    devices = devices if devices is not None else os.environ.get("STREAMRL_DEVICES", "")
    try:
        sets = parse_device_sets(devices) if devices.strip() else []
    except DeviceSetError as err:
        raise CLIError(f"--devices: {err}") from None
    if sets and concurrency is not None and concurrency != len(sets):
        raise CLIError(f"--concurrency {concurrency} does not match the {len(sets)} device sets of --devices "
                       "(one process per set; leave --concurrency out)")
    processes = len(sets) or concurrency or 2
    os.environ["STREAMRL_DEVICES"] = devices.strip()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # pinned processes set it to their set's size
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no progress bar per model load in the log
    node = f"{pool}-{os.getpid()}@{socket.gethostname()}"
    os.environ["STREAMRL_WORKER_NODE"] = node
    _quiet_about_root()
    from streamrl.worker import app

    app.worker_main(["--quiet", "worker", "-Q", pool, "--concurrency", str(processes), "--pool", "prefork", "-n",
                     node, "--without-gossip", "--without-mingle", "--loglevel", loglevel])


def _quiet_about_root() -> None:
    """Celery prints a superuser warning banner on every start as root; say it once, in one line (`streamrl up`
    says it for the workers it starts). Celery still refuses root with pickle, which the platform never accepts."""
    import warnings

    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", category=SecurityWarning)
    if os.geteuid() == 0 and os.environ.get(SUPERVISED_ENV) != "up":
        typer.echo("worker: running as root; reward code still runs as uid 65534 in the reward jail "
                   "(run the worker as an unprivileged user where the data dir allows it)", err=True)


def controller(
    interval: float = typer.Option(1.0, "--interval", min=0.05, help="seconds between reconcile passes"),
    idle_interval: float = typer.Option(
        10.0, "--idle-interval", min=0.05, help="seconds between passes while no job is queued or active"
    ),
    once: bool = typer.Option(False, "--once", help="run one pass and exit"),
) -> None:
    """Run the reconcile loop: admit jobs, keep each job's generation instances at target, notice dead workers.

    A submitted or cancelled job wakes it at once; otherwise a pass comes every `--interval`, or `--idle-interval`
    while no job is queued or active (backend/controller/loop.py)."""
    from backend.controller.loop import run_controller

    logging.basicConfig(level=logging.INFO, format="%(asctime)s controller %(message)s")
    run_controller(interval=interval, idle_interval=idle_interval, once=once)


def submit_demo(api: Any, settings: Any) -> None:
    """`streamrl up --demo`: a tiny model + an async long-tail job; prints where to watch it."""
    from transformers.utils import logging as hf_logging

    from workers.models import build_tiny_model

    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in `up`'s output

    path = settings.artifacts / "models" / DEMO_MODEL
    if not (path / "config.json").exists():
        build_tiny_model("tiny-1m", path, seed=0)
    if not any(m["name"] == DEMO_MODEL for m in api.list_models()["data"]):
        api.register_model(DEMO_MODEL, str(path))
    job = api.submit_job(demo_spec())
    typer.echo(f"demo: submitted job {job['id']} ({job['name']}): async mode, 2 generation instances, long-tail "
               f"task; watch the reward rise and the outputs' long tail with `streamrl jobs logs {job['id']}` or in "
               "the dashboard")


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.command("controller")(controller)
