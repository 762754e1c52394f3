"""Team membership by invitation only: a team admin can neither attach an existing account (the takeover of issue 36
finding 1) nor create one with a password of their choosing; the invited account accepts or declines from its own
session; admins revoke; invitations expire; a plain login lands in the account's own (or last used) team."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from backend.db.base import utcnow
from backend.db.models import Invitation

API = "/api/v1"
PASSWORD = "correct-horse-battery"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _register(client: TestClient, label: str) -> tuple[str, str]:
    """A self-registered account owning its own team; returns (email, team name)."""
    tag = uuid.uuid4().hex[:8]
    email, team = f"{label}-{tag}@example.com", f"{label}-team-{tag}"
    answer = client.post(f"{API}/auth/register", json={"email": email, "password": PASSWORD, "team_name": team})
    assert answer.status_code == 201, answer.text
    return email, team


def _login(client: TestClient, email: str, password: str = PASSWORD, team_id: int | None = None) -> Any:
    body: dict[str, Any] = {"email": email, "password": password}
    if team_id is not None:
        body["team_id"] = team_id
    return client.post(f"{API}/auth/login", json=body)


def _session(client: TestClient, email: str, team_id: int | None = None, password: str = PASSWORD) -> dict[str, Any]:
    answer = _login(client, email, password, team_id=team_id)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _invite(client: TestClient, headers: dict[str, str], email: str, role: str = "member",
            path: str = "/teams/current/invitations") -> Any:
    return client.post(f"{API}{path}", json={"email": email, "role": role}, headers=headers)


def _received(client: TestClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    answer = client.get(f"{API}/auth/invitations", headers=headers)
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def test_an_admin_cannot_take_over_another_teams_account(app_client: TestClient) -> None:
    attacker_email, _ = _register(app_client, "mallory")  # registered first: the lower team id
    victim_email, victim_team = _register(app_client, "victor")
    attacker = _bearer(_session(app_client, attacker_email)["token"])
    victim = _bearer(_session(app_client, victim_email)["token"])
    upload = app_client.post(f"{API}/datasets", data={"name": "private"}, headers=victim,
                             files={"file": ("d.jsonl", io.BytesIO(b'{"prompt": "secret"}\n'))})
    assert upload.status_code == 201, upload.text

    added = _invite(app_client, attacker, victim_email.upper(), role="owner", path="/teams/current/members")
    assert added.status_code == 201, added.text
    assert "user_id" not in added.json() and added.json()["status"] == "pending"
    members = app_client.get(f"{API}/teams/current/members", headers=attacker).json()
    assert victim_email not in {m["email"] for m in members}  # not attached

    landed = _session(app_client, victim_email)  # the dashboard's plain login
    assert landed["team"]["name"] == victim_team and [t["name"] for t in landed["teams"]] == [victim_team]
    hidden = app_client.get(f"{API}/datasets/{upload.json()['id']}", headers=attacker)
    assert hidden.status_code == 404
    assert _received(app_client, victim)[0]["role"] == "owner"  # the victim sees it and may decline it

    # An unknown email: no account is made, with the caller's password or any other.
    ghost = f"ghost-{uuid.uuid4().hex[:8]}@example.com"
    with_password = app_client.post(f"{API}/teams/current/members", headers=attacker,
                                    json={"email": ghost, "role": "viewer", "password": "attacker-chosen-99"})
    assert with_password.status_code == 422 and with_password.json()["detail"][0]["loc"] == ["body", "password"]
    unknown = _invite(app_client, attacker, ghost, role="owner", path="/teams/current/members")
    assert unknown.status_code == 201
    assert _login(app_client, ghost, "attacker-chosen-99").status_code == 401
    # The same answer for an existing and an unknown email (no account enumeration).
    shape = {k: v for k, v in added.json().items() if k not in ("id", "email", "created_at", "expires_at")}
    assert shape == {k: v for k, v in unknown.json().items() if k not in ("id", "email", "created_at", "expires_at")}
    assert set(added.json()) == set(unknown.json())

    # The real person registers later with their own password: it works, and the invitation waits for them.
    registered = app_client.post(f"{API}/auth/register",
                                 json={"email": ghost, "password": "ghosts-own-secret", "team_name": ghost})
    assert registered.status_code == 201
    ghost_session = _session(app_client, ghost, password="ghosts-own-secret")
    assert ghost_session["team"]["name"] == ghost
    attacker_team = app_client.get(f"{API}/teams/current", headers=attacker).json()["id"]
    assert [i["team_id"] for i in _received(app_client, _bearer(ghost_session["token"]))] == [attacker_team]


def test_accept_decline_revoke_and_expiry(pg_backend: Any, app_client: TestClient, world: Any) -> None:
    admin, owner = world.headers("admin"), world.headers("owner")
    emails = {label: _register(app_client, label)[0] for label in ("ada", "bob", "cy", "dee")}
    own = {label: _bearer(_session(app_client, email)["token"]) for label, email in emails.items()}

    assert _invite(app_client, admin, emails["ada"], role="owner").status_code == 403  # only an owner makes owners
    sent = _invite(app_client, admin, emails["ada"], role="admin")
    assert sent.status_code == 201 and sent.json()["invited_by"] == world.users["admin"].email
    again = _invite(app_client, admin, emails["ada"], role="member")  # renewed, not duplicated
    assert again.json()["id"] == sent.json()["id"] and again.json()["role"] == "member"
    mine = _received(app_client, own["ada"])
    assert [(i["id"], i["team_name"], i["role"]) for i in mine] == [(sent.json()["id"], world.team.name, "member")]
    for stranger in (own["bob"], admin):  # addressed to ada only
        refused = app_client.post(f"{API}/auth/invitations/{sent.json()['id']}/accept", headers=stranger)
        assert refused.status_code == 404
    accepted = app_client.post(f"{API}/auth/invitations/{sent.json()['id']}/accept", headers=own["ada"])
    assert accepted.status_code == 200 and accepted.json()["status"] == "accepted", accepted.text
    members = {m["email"]: m["role"] for m in app_client.get(f"{API}/teams/current/members", headers=admin).json()}
    assert members[emails["ada"]] == "member"
    assert app_client.post(f"{API}/auth/invitations/{sent.json()['id']}/accept", headers=own["ada"]).status_code == 409
    assert _invite(app_client, admin, emails["ada"]).status_code == 409  # already a member
    me = app_client.get(f"{API}/auth/me", headers=own["ada"]).json()
    assert world.team.id in {t["id"] for t in me["teams"]}

    declined_id = _invite(app_client, admin, emails["bob"]).json()["id"]
    declined = app_client.post(f"{API}/auth/invitations/{declined_id}/decline", headers=own["bob"])
    assert declined.status_code == 200 and declined.json()["status"] == "declined"
    assert emails["bob"] not in {m["email"] for m in app_client.get(f"{API}/teams/current/members",
                                                                     headers=admin).json()}

    revoked_id = _invite(app_client, owner, emails["cy"], role="owner").json()["id"]
    assert app_client.delete(f"{API}/teams/current/invitations/{revoked_id}", headers=world.headers("member")
                             ).status_code == 403
    assert app_client.delete(f"{API}/teams/current/invitations/{revoked_id}", headers=admin).status_code == 204
    assert app_client.delete(f"{API}/teams/current/invitations/{revoked_id}", headers=admin).status_code == 409
    assert _received(app_client, own["cy"]) == []
    late = app_client.post(f"{API}/auth/invitations/{revoked_id}/accept", headers=own["cy"])
    assert late.status_code == 409 and "revoked" in late.json()["detail"]

    expiring_id = _invite(app_client, admin, emails["dee"]).json()["id"]
    with pg_backend.session() as session:
        session.execute(update(Invitation).where(Invitation.id == expiring_id)
                        .values(expires_at=utcnow() - timedelta(seconds=1)))
    listed = {i["id"]: i["status"] for i in app_client.get(f"{API}/teams/current/invitations", headers=admin).json()}
    assert listed == {expiring_id: "expired"}  # answered and revoked ones are gone from the team's list
    assert _received(app_client, own["dee"]) == []
    expired = app_client.post(f"{API}/auth/invitations/{expiring_id}/accept", headers=own["dee"])
    assert expired.status_code == 409 and "expired" in expired.json()["detail"]
    assert world.team.id not in {t["id"] for t in app_client.get(f"{API}/auth/me", headers=own["dee"]).json()["teams"]}


def test_a_removed_admins_invitations_die_and_keys_cannot_accept(
    pg_backend: Any, app_client: TestClient, world: Any
) -> None:
    sender = pg_backend.make_user(world.team, "admin")
    email = _register(app_client, "eve")[0]
    headers = _bearer(_session(app_client, email)["token"])
    invitation = _invite(app_client, pg_backend.auth_headers(sender, world.team), email).json()
    key = app_client.post(f"{API}/keys", json={"name": "k", "scopes": ["read", "write", "admin"]}, headers=headers)
    by_key = app_client.post(f"{API}/auth/invitations/{invitation['id']}/accept",
                             headers=_bearer(key.json()["secret"]))
    assert by_key.status_code == 422 and "API key" in by_key.json()["detail"][0]["msg"]
    removed = app_client.delete(f"{API}/teams/current/members/{sender.id}", headers=world.headers("owner"))
    assert removed.status_code == 204
    stale = app_client.post(f"{API}/auth/invitations/{invitation['id']}/accept", headers=headers)
    assert stale.status_code == 409 and "no longer valid" in stale.json()["detail"]


def test_plain_login_lands_in_the_last_used_team_never_one_not_accepted(
    app_client: TestClient, world: Any
) -> None:
    email, own_team = _register(app_client, "fay")
    first = _session(app_client, email)
    invitation = _invite(app_client, world.headers("admin"), email, role="viewer").json()
    assert _session(app_client, email)["team"]["name"] == own_team  # invited, not accepted: not a team of hers
    accepted = app_client.post(f"{API}/auth/invitations/{invitation['id']}/accept", headers=_bearer(first["token"]))
    assert accepted.status_code == 200
    assert _session(app_client, email)["team"]["name"] == own_team  # the account's own first team
    switched = app_client.post(f"{API}/auth/switch-team", json={"team_id": world.team.id},
                               headers=_bearer(first["token"]))
    assert switched.status_code == 200 and switched.json()["team"]["role"] == "viewer"
    assert _session(app_client, email)["team"]["id"] == world.team.id  # the team used last
    assert _session(app_client, email, first["team"]["id"])["team"]["name"] == own_team
    assert _session(app_client, email)["team"]["name"] == own_team


def test_with_registration_off_only_an_invited_email_registers_and_joins(pg_backend: Any, world: Any) -> None:
    invited = f"gil-{uuid.uuid4().hex[:8]}@example.com"
    with pg_backend.client(allow_registration=False) as client:
        body = {"email": invited, "password": PASSWORD, "team_name": f"gil-{uuid.uuid4().hex[:8]}"}
        refused = client.post(f"{API}/auth/register", json=body)
        assert refused.status_code == 403 and "invite" in refused.json()["detail"]
        assert _invite(client, world.headers("admin"), invited).status_code == 201
        assert client.post(f"{API}/auth/register", json=body).status_code == 201
        landed = _session(client, invited)
        assert [(t["id"], t["role"]) for t in landed["teams"]] == [(world.team.id, "member")]  # no team of its own
        again = client.post(f"{API}/auth/register", json={**body, "password": "another-secret-42"})
        assert again.status_code == 403  # nothing open any more; the account is unchanged
        assert _login(client, invited, "another-secret-42").status_code == 401


def test_a_listed_operator_email_registered_by_anyone_is_not_an_operator(pg_backend: Any, world: Any) -> None:
    squatted = f"ops-{uuid.uuid4().hex[:8]}@example.com"
    device = {"bf16_tflops": 1300, "mem_bandwidth_tbps": 5.3, "memory_gb": 192, "cost_per_hour": 1.1}
    with pg_backend.client(platform_admins=[squatted]) as client:
        _register_as(client, squatted)
        squatter = _bearer(_session(client, squatted)["token"])
        assert client.get(f"{API}/auth/me", headers=squatter).json()["platform_admin"] is False
        assert client.put(f"{API}/plans/devices/SquatChip", json=device, headers=squatter).status_code == 403
    made_by_operator = pg_backend.make_user(world.team, "viewer")  # e.g. `streamrl init-admin --direct`
    with pg_backend.client(platform_admins=[made_by_operator.email]) as client:
        operator = pg_backend.auth_headers(made_by_operator, world.team)
        assert client.get(f"{API}/auth/me", headers=operator).json()["platform_admin"] is True


def _register_as(client: TestClient, email: str) -> str:
    team = f"t-{uuid.uuid4().hex[:8]}"
    answer = client.post(f"{API}/auth/register", json={"email": email, "password": PASSWORD, "team_name": team})
    assert answer.status_code == 201, answer.text
    return team


def test_a_team_holds_a_bounded_number_of_open_invitations(
    app_client: TestClient, world: Any, monkeypatch: Any
) -> None:
    from backend.services import invitations

    monkeypatch.setattr(invitations, "MAX_OPEN_PER_TEAM", 2)
    admin = world.headers("admin")
    sent = [_invite(app_client, admin, f"many-{n}-{uuid.uuid4().hex[:6]}@example.com") for n in range(3)]
    assert [answer.status_code for answer in sent] == [201, 201, 409]
    assert "2 open invitations" in sent[2].json()["detail"]
    assert _invite(app_client, admin, sent[0].json()["email"], role="viewer").status_code == 201  # renewing is fine
    revoked = app_client.delete(f"{API}/teams/current/invitations/{sent[0].json()['id']}", headers=admin)
    assert revoked.status_code == 204
    assert _invite(app_client, admin, f"more-{uuid.uuid4().hex[:6]}@example.com").status_code == 201
