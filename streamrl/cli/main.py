"""The `streamrl` command (Typer). Root options: `--url`, `--token` (env STREAMRL_URL, STREAMRL_TOKEN), `--json`.

Adding commands: write a module that defines `register(app: typer.Typer) -> None` (add a command with
`app.command("name")(fn)` or a group with `app.add_typer(sub_app, name="group")`) and append its dotted path to
`COMMAND_MODULES`.
"""

from __future__ import annotations

import importlib

import typer

from backend.private_files import restrict_umask
from streamrl.cli.common import Globals
from streamrl.cli.errors import StreamRLGroup

COMMAND_MODULES = [
    "streamrl.cli.up",  # up, migrate
    "streamrl.cli.doctor",  # doctor
    "streamrl.cli.auth",  # login, logout, whoami, init-admin
    "streamrl.cli.teams",  # team show|quotas|members|invite|invitations|accept|decline|set-role|remove-member
    "streamrl.cli.keys",  # keys create|list|revoke
    "streamrl.cli.model_registry",  # models register|list
    "streamrl.cli.datasets",  # datasets upload|list|rows
    "streamrl.cli.jobs",  # jobs submit|list|get|cancel|pause|resume|scale|logs|iterations
    "streamrl.cli.notes_cmds",  # jobs tag|note (on the jobs group)
    "streamrl.cli.fork_cmd",  # jobs fork (on the jobs group)
    "streamrl.cli.sample_cmds",  # samples prompts|compare (the same prompt across runs and checkpoints)
    "streamrl.cli.runtime_cmds",  # worker --pool generation|training|control, controller (+ the `up --demo` hook)
    "streamrl.cli.plan_cmds",  # plan
    "streamrl.cli.make_cmds",  # make-model, make-dataset (tiny local models, built-in task files)
    "streamrl.cli.train_cmds",  # train-local, sft (single-process RL and SFT warm start)
    "streamrl.cli.checkpoints",  # checkpoints list|download
    "streamrl.cli.eval_cmds",  # eval run|get|list (evaluation suites on demand)
    "streamrl.cli.deployment_cmds",  # deployments create|list|show|update|promote|delete
    "streamrl.cli.alerts",  # alerts list|create|update|delete|test|log
    "streamrl.cli.trackers",  # trackers list|set|delete|runs
    "streamrl.cli.cluster",  # cluster (workers, slots, queues, pending instances)
    "streamrl.cli.graders",  # graders run (score a sample with a grader spec)
    "streamrl.cli.chat_cmds",  # chat MODEL MESSAGE (OpenAI chat completion on the generation pool)
    "streamrl.cli.usage_cmds",  # usage, jobs limits, team budget
    "streamrl.cli.queue_cmds",  # queue (the scheduler's queue: position, priority, why, ETA)
    "streamrl.cli.tinker_cmds",  # tinker sessions|session (Tinker training clients)
]

app = typer.Typer(
    cls=StreamRLGroup,
    name="streamrl",
    help="StreamRL: self-hosted RL post-training for LLMs (disaggregated stream generation).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    url: str | None = typer.Option(None, "--url", envvar="STREAMRL_URL", help="API server, e.g. http://127.0.0.1:8000"),
    token: str | None = typer.Option(None, "--token", envvar="STREAMRL_TOKEN", help="session token or API key"),
    as_json: bool = typer.Option(False, "--json", help="print raw JSON answers"),
) -> None:
    restrict_umask()  # every file a command (or a process it starts) writes is private to the platform user
    ctx.obj = Globals(url=url, token=token, as_json=as_json)


def _register_all() -> None:
    for dotted in COMMAND_MODULES:
        importlib.import_module(dotted).register(app)


_register_all()


def command_names() -> set[str]:
    """Top-level command and group names (e.g. `up` asks whether `controller` and `worker` exist)."""
    names = {info.name or (info.callback.__name__ if info.callback else "") for info in app.registered_commands}
    names |= {info.name or "" for info in app.registered_groups}
    return names - {""}


if __name__ == "__main__":
    app()
