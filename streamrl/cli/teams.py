"""`streamrl team ...`: the current team, its quotas, members and invitations (sent and received)."""

from __future__ import annotations

import typer

from streamrl.cli.common import client, emit_json, print_fields, print_table
from streamrl.cli.errors import CLIError

team_app = typer.Typer(help="The current team: quotas, members and invitations.", no_args_is_help=True)

ROLES = ("owner", "admin", "member", "viewer")


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise CLIError(f"role must be one of {', '.join(ROLES)} (got {role!r})")
    return role


@team_app.command("show")
def show(ctx: typer.Context) -> None:
    """The current team and its quotas."""
    with client(ctx) as api:
        team = api.current_team()
    if not emit_json(ctx, team):
        print_fields({"id": team.get("id"), "name": team.get("name"), **(team.get("quotas") or {})})


@team_app.command("switch")
def switch(ctx: typer.Context, team_id: int) -> None:
    """Act in another of your teams from now on (a new session token is saved)."""
    from streamrl.cli.config import CLIConfig

    with client(ctx) as api:
        answer = api.switch_team(team_id)
    config = CLIConfig.load()
    config.remember(api.base_url, answer["token"])
    config.save()
    if not emit_json(ctx, answer["team"]):
        typer.echo(f"now acting in team {answer['team'].get('name')!r} (id {team_id})")


@team_app.command("quotas")
def quotas(
    ctx: typer.Context,
    max_concurrent_jobs: int | None = typer.Option(None, "--max-concurrent-jobs", min=0),
    max_generation_instances: int | None = typer.Option(None, "--max-generation-instances", min=0),
    share: float | None = typer.Option(None, "--share", min=0.001, help="fair-share weight (default 1)"),
    max_priority: str | None = typer.Option(None, "--max-priority", help="low | normal | high: the highest "
                                            "priority the team's jobs may ask for"),
    max_device_hours_per_month: float | None = typer.Option(None, "--max-device-hours-per-month", min=0,
                                                            help="the monthly budget (`team budget --remove` lifts "
                                                            "it)"),
    team_id: int | None = typer.Option(None, "--team", help="another team's id (platform admin)"),
) -> None:
    """Show the team's quotas, or change them (admin; --share and --max-priority: a platform admin)."""
    with client(ctx) as api:
        if max_concurrent_jobs is None and max_generation_instances is None and share is None and \
                max_priority is None and max_device_hours_per_month is None and team_id is None:
            team = api.current_team()
        else:
            team = api.update_quotas(max_concurrent_jobs=max_concurrent_jobs,
                                     max_generation_instances=max_generation_instances, share=share,
                                     max_priority=max_priority, max_device_hours_per_month=max_device_hours_per_month,
                                     team_id=team_id)
    if not emit_json(ctx, team):
        print_fields(team.get("quotas") or {})


@team_app.command("members")
def members(ctx: typer.Context) -> None:
    """Members of the current team and their roles."""
    with client(ctx) as api:
        rows = api.list_members()
    if not emit_json(ctx, rows):
        print_table(rows, ["user_id", "email", "role"])


def _invite(ctx: typer.Context, email: str, role: str) -> None:
    with client(ctx) as api:
        invitation = api.invite(email, _check_role(role))
    if not emit_json(ctx, invitation):
        typer.echo(f"invited {invitation.get('email')} as {invitation.get('role')} (invitation "
                   f"{invitation.get('id')}, expires {invitation.get('expires_at')}); they join once they accept it "
                   f"(`streamrl team accept {invitation.get('id')}`, after registering if they have no account)")


@team_app.command("invite")
def invite(
    ctx: typer.Context,
    email: str,
    role: str = typer.Option("member", "--role", help="owner|admin|member|viewer (owner: owners only)"),
) -> None:
    """Invite an email to the team (admin). Nobody is added until the account with that email accepts."""
    _invite(ctx, email, role)


@team_app.command("add-member")
def add_member(
    ctx: typer.Context,
    email: str,
    role: str = typer.Option("member", "--role", help="owner|admin|member|viewer"),
) -> None:
    """Same as `team invite` (the older name): nobody is added until they accept."""
    _invite(ctx, email, role)


@team_app.command("invitations")
def invitations(
    ctx: typer.Context,
    sent: bool = typer.Option(False, "--sent", help="the current team's pending invitations instead of yours"),
) -> None:
    """Invitations addressed to you (accept with `team accept ID`), or with --sent those the team sent."""
    with client(ctx) as api:
        rows = api.list_invitations() if sent else api.my_invitations()
    if emit_json(ctx, rows):
        return
    if sent:
        print_table(rows, ["id", "email", "role", "status", "invited_by", "expires_at"])
    else:
        print_table(rows, ["id", "team_id", "team_name", "role", "invited_by", "expires_at"])


@team_app.command("accept")
def accept(ctx: typer.Context, invitation_id: int) -> None:
    """Accept an invitation addressed to you: you join its team with its role."""
    with client(ctx) as api:
        answer = api.accept_invitation(invitation_id)
    if not emit_json(ctx, answer):
        typer.echo(f"joined team {answer.get('team_name')!r} as {answer.get('role')}; act in it with "
                   f"`streamrl team switch {answer.get('team_id')}`")


@team_app.command("decline")
def decline(ctx: typer.Context, invitation_id: int) -> None:
    """Decline an invitation addressed to you."""
    with client(ctx) as api:
        answer = api.decline_invitation(invitation_id)
    if not emit_json(ctx, answer):
        typer.echo(f"declined the invitation to team {answer.get('team_name')!r}")


@team_app.command("revoke-invitation")
def revoke_invitation(ctx: typer.Context, invitation_id: int) -> None:
    """Revoke a pending invitation of the current team (admin)."""
    with client(ctx) as api:
        api.revoke_invitation(invitation_id)
    typer.echo(f"revoked invitation {invitation_id}")


@team_app.command("set-role")
def set_role(ctx: typer.Context, user_id: int, role: str) -> None:
    """Change a member's role (admin)."""
    with client(ctx) as api:
        member = api.update_member(user_id, _check_role(role))
    if not emit_json(ctx, member):
        typer.echo(f"{member.get('email')} is now {member.get('role')}")


@team_app.command("remove-member")
def remove_member(ctx: typer.Context, user_id: int) -> None:
    """Remove a member from the team (admin)."""
    with client(ctx) as api:
        api.remove_member(user_id)
    typer.echo(f"removed user {user_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(team_app, name="team")
