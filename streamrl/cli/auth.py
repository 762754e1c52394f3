"""`streamrl login | logout | whoami | init-admin | platform-admin`: get a token and keep it in the CLI config; the
operator's account commands (written to the database)."""

from __future__ import annotations

import typer

from backend.client import APIError, StreamRLClient
from streamrl.cli.common import client, emit_json, globals_of, print_fields
from streamrl.cli.config import CLIConfig, config_path, resolve
from streamrl.cli.errors import CLIError


def _server(ctx: typer.Context) -> str:
    return resolve(globals_of(ctx).url, None, CLIConfig.load())[0]


def _save_token(url: str, token: str) -> None:
    config = CLIConfig.load()
    config.remember(url, token)
    config.save()


def login(
    ctx: typer.Context,
    email: str | None = typer.Option(None, "--email", "-e", help="prompted when omitted"),
    password: str | None = typer.Option(None, "--password", "-p", envvar="STREAMRL_PASSWORD",
                                        help="prompted (hidden) when omitted"),
    team_id: int | None = typer.Option(None, "--team-id", help="team to act in (default: your first team)"),
    api_key: str | None = typer.Option(None, "--api-key", help="store this API key instead of a password login"),
) -> None:
    """Log in to the server and remember the token (in ~/.config/streamrl/config.json or $STREAMRL_CONFIG)."""
    url = _server(ctx)
    with StreamRLClient(url, api_key) as api:
        if api_key:
            me = api.me()  # proves the key works before it is stored
            token = api_key
            user, team = me["user"], me["team"]
        else:
            email = email or typer.prompt("email")
            password = password or typer.prompt("password", hide_input=True)
            answer = api.login(email, password, team_id)
            token = answer["token"]
            user, team = answer["user"], answer["team"]
    _save_token(url, token)
    typer.echo(f"logged in to {url} as {user.get('email')} (team {team.get('name')!r}, id {team.get('id')})")


def logout(ctx: typer.Context) -> None:
    """Forget the token stored for the server."""
    url = _server(ctx)
    config = CLIConfig.load()
    if config.forget(url):
        config.save()
        typer.echo(f"logged out of {url}")
    else:
        typer.echo(f"no token stored for {url}")


def whoami(ctx: typer.Context) -> None:
    """Who the current token belongs to, in which team and role."""
    with client(ctx) as api:
        me = api.me()
    if emit_json(ctx, me):
        return
    teams = ", ".join(f"{t.get('name')} ({t.get('id')})" for t in me.get("teams", []))
    print_fields({"server": api.base_url, "email": me["user"].get("email"), "team": me["team"].get("name"),
                  "team_id": me["team"].get("id"), "role": me.get("role"), "teams": teams})


def init_admin(
    ctx: typer.Context,
    email: str = typer.Option(..., "--email", "-e", prompt=True),
    password: str = typer.Option(..., "--password", "-p", envvar="STREAMRL_PASSWORD", prompt=True, hide_input=True,
                                 confirmation_prompt=True),
    team: str = typer.Option("default", "--team", help="name of the team to create"),
    direct: bool = typer.Option(False, "--direct", help="write to the database (STREAMRL_DATABASE_URL) instead of "
                                "calling the API; works when the server has registration turned off"),
) -> None:
    """Create a user who owns a new team, then log in as them (POST /auth/register, or the database with --direct)."""
    url = _server(ctx)
    if direct:
        from contract.settings import ConfigError, load_settings
        from streamrl.cli.bootstrap import create_owner

        try:
            database_url = load_settings().database_url
        except ConfigError as exc:
            raise CLIError(str(exc)) from None
        try:
            create_owner(database_url, email, password, team)
        except Exception as exc:  # e.g. Conflict: the e-mail or team name is taken
            raise CLIError(f"could not create {email}: {exc}") from None
        typer.echo(f"created {email}, owner of team {team!r}, in the database; log in with `streamrl login`")
        return
    with StreamRLClient(url) as api:
        try:
            api.register(email, password, team)
            answer = api.login(email, password)
        except APIError as exc:
            raise CLIError(f"could not create {email}: {exc.message}") from None
    # The server answers a registered e-mail as it answers a new one (no account enumeration); only the caller, who
    # knows the password, learns here that nothing was created: the account it logged in to has no team `team`.
    if team not in {member["name"] for member in answer["teams"]}:
        raise CLIError(f"could not create {email}: the e-mail already has an account (nothing was created; "
                       "`streamrl login` logs in to it)")
    _save_token(url, answer["token"])
    typer.echo(f"created {email}, owner of team {team!r}; logged in to {url} (token saved in {config_path()})")


def platform_admin(
    email: str,
    revoke: bool = typer.Option(False, "--revoke", help="take the platform admin flag away instead"),
) -> None:
    """Make an existing account a platform admin (device catalog), or --revoke it: written to the database
    (STREAMRL_DATABASE_URL), so only whoever runs the installation can. Unlike STREAMRL_PLATFORM_ADMINS, this names a
    self-registered account too: use it once you know the account is the person's."""
    from contract.settings import ConfigError, load_settings
    from streamrl.cli.bootstrap import set_platform_admin

    try:
        database_url = load_settings().database_url
    except ConfigError as exc:
        raise CLIError(str(exc)) from None
    if not set_platform_admin(database_url, email, grant=not revoke):
        raise CLIError(f"no account has the email {email.strip().lower()}")
    typer.echo(f"{email.strip().lower()} is {'no longer ' if revoke else ''}a platform admin")


def register(app: typer.Typer) -> None:
    app.command("login")(login)
    app.command("logout")(logout)
    app.command("whoami")(whoami)
    app.command("init-admin")(init_admin)
    app.command("platform-admin")(platform_admin)
