"""`streamrl alerts list | create | update | delete | test | log`: the team's notification rules.

    streamrl alerts create oncall --event job_failed --event job_stalled --webhook https://hooks.example.com/x
    streamrl alerts create mail --event job_succeeded --email ml@example.com
    streamrl alerts test 3 --wait          # queue a test delivery and wait for its outcome
    streamrl alerts log 3                  # the delivery log: state, attempts, status codes and errors
"""

from __future__ import annotations

import time
from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_fields, print_table
from streamrl.cli.errors import CLIError

alerts_app = typer.Typer(help="Notification rules of the current team (webhook or e-mail).", no_args_is_help=True)
RULE_COLUMNS = ["id", "name", "channel", "events", "url", "recipients", "enabled", "secret_set"]
LOG_COLUMNS = ["id", "event", "state", "attempts", "last_status_code", "last_error", "created_at", "job_id"]
EVENT_HELP = "repeatable: job_failed, job_succeeded, job_stalled, training_signal, training_mismatch, budget"


@alerts_app.command("list")
def list_rules(ctx: typer.Context) -> None:
    """The team's rules (webhook secrets are never shown: SECRET_SET says whether one is stored)."""
    with client(ctx) as api:
        page = api.list_alert_rules()
    if not emit_json(ctx, page):
        print_table(page.get("data", []), RULE_COLUMNS)


@alerts_app.command("create")
def create(
    ctx: typer.Context,
    name: str,
    event: list[str] = typer.Option(..., "--event", help=EVENT_HELP),
    webhook: str | None = typer.Option(None, "--webhook", help="POST signed JSON to this URL"),
    secret: str | None = typer.Option(None, "--secret", help="webhook HMAC key (default: one is generated)"),
    email: list[str] | None = typer.Option(None, "--email", help="repeatable: send e-mail to these addresses"),
    disabled: bool = typer.Option(False, "--disabled", help="create it switched off"),
) -> None:
    """Create a rule (admin): --webhook URL or --email ADDRESS (one channel per rule)."""
    if (webhook is None) == (not email):
        raise CLIError("give either --webhook URL or --email ADDRESS (one channel per rule)")
    body: dict[str, Any] = {"name": name, "events": event, "enabled": not disabled}
    if webhook is not None:
        body.update(channel="webhook", url=webhook, **({"secret": secret} if secret else {}))
    else:
        body.update(channel="email", recipients=email)
    with client(ctx) as api:
        rule = api.create_alert_rule(body)
    if emit_json(ctx, rule):
        return
    typer.echo(f"created alert rule {rule['id']} {rule['name']!r} ({rule['channel']}: {', '.join(rule['events'])})")
    if rule.get("secret"):
        typer.echo(f"signing secret (shown once, store it now): {rule['secret']}")
        typer.echo("webhooks carry X-StreamRL-Signature: sha256=<hex HMAC-SHA256 of the body under this secret>")


@alerts_app.command("update")
def update(
    ctx: typer.Context,
    rule_id: int,
    name: str | None = typer.Option(None, "--name"),
    event: list[str] | None = typer.Option(None, "--event", help=f"replaces the events; {EVENT_HELP}"),
    url: str | None = typer.Option(None, "--url", help="webhook: a new URL"),
    secret: str | None = typer.Option(None, "--secret", help="webhook: a new signing secret"),
    email: list[str] | None = typer.Option(None, "--email", help="email: replaces the recipients"),
    enabled: bool | None = typer.Option(None, "--enable/--disable"),
) -> None:
    """Change a rule (admin); only the options given change."""
    changes = {key: value for key, value in {"name": name, "events": event or None, "url": url, "secret": secret,
                                              "recipients": email or None, "enabled": enabled}.items()
               if value is not None}
    if not changes:
        raise CLIError("nothing to change: give at least one option (see --help)")
    with client(ctx) as api:
        rule = api.update_alert_rule(rule_id, changes)
    if not emit_json(ctx, rule):
        print_fields(rule, RULE_COLUMNS)


@alerts_app.command("delete")
def delete(ctx: typer.Context, rule_id: int) -> None:
    """Delete a rule and its delivery log (admin)."""
    with client(ctx) as api:
        api.delete_alert_rule(rule_id)
    typer.echo(f"deleted alert rule {rule_id}")


@alerts_app.command("test")
def test(
    ctx: typer.Context,
    rule_id: int,
    wait: bool = typer.Option(False, "--wait", help="wait until the controller has sent it (or given up)"),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds --wait waits"),
) -> None:
    """Queue a test delivery of a rule (admin); the controller sends it off the request path."""
    with client(ctx) as api:
        delivery = api.test_alert_rule(rule_id)
        deadline = time.monotonic() + timeout
        while wait and delivery["state"] == "pending" and time.monotonic() < deadline:
            time.sleep(1.0)
            page = api.alert_deliveries(rule_id, limit=50)
            delivery = next((d for d in page["data"] if d["id"] == delivery["id"]), delivery)
    if emit_json(ctx, delivery):
        return
    print_fields(delivery, ["id", "event", "state", "attempts", "last_status_code", "last_error"])
    if wait and delivery["state"] != "succeeded":
        raise CLIError(f"test delivery {delivery['id']} is {delivery['state']}"
                       + (" (is `streamrl controller` running?)" if delivery["state"] == "pending" else ""))


@alerts_app.command("log")
def log(ctx: typer.Context, rule_id: int, limit: int = typer.Option(20, "--limit", min=1, max=500)) -> None:
    """The rule's deliveries, newest first: state, attempts, the last status code or error."""
    with client(ctx) as api:
        page = api.alert_deliveries(rule_id, limit=limit)
    if not emit_json(ctx, page):
        print_table(page.get("data", []), LOG_COLUMNS)


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts")
