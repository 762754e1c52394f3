"""Notification rules through the REST API: create/edit/delete/test, the write-only webhook secret, validation that
names the field, roles, and another team's rules answering 404."""

from __future__ import annotations

from typing import Any

from backend.db.enums import Role

API = "/api/v1/alerts/rules"


def _team(backend: Any) -> tuple[Any, dict[Role, dict[str, str]]]:
    team = backend.make_team()
    return team, {role: backend.auth_headers(backend.make_user(team, role), team) for role in Role}


def test_webhook_rule_lifecycle_and_write_only_secret(pg_backend: Any) -> None:
    team, headers = _team(pg_backend)
    admin = headers[Role.admin]
    with pg_backend.client() as client:
        created = client.post(API, json={"name": "oncall", "events": ["job_failed", "job_stalled"],
                                         "channel": "webhook", "url": "https://hooks.example.com/x"}, headers=admin)
        assert created.status_code == 201, created.text
        rule = created.json()
        assert rule["secret"].startswith("whsec_") and rule["secret_set"] is True
        listed = client.get(API, headers=headers[Role.viewer]).json()
        assert listed["count"] == 1 and "secret" not in listed["data"][0] and listed["data"][0]["secret_set"]
        assert rule["secret"] not in client.get(f"{API}/{rule['id']}", headers=admin).text

        patched = client.patch(f"{API}/{rule['id']}", json={"events": ["training_signal"], "enabled": False,
                                                            "secret": "a-new-secret-of-enough-length"}, headers=admin)
        assert patched.status_code == 200, patched.text
        assert patched.json()["events"] == ["training_signal"] and patched.json()["enabled"] is False
        assert "a-new-secret" not in patched.text

        tested = client.post(f"{API}/{rule['id']}/test", headers=admin)
        assert tested.status_code == 202 and tested.json()["state"] == "pending" and tested.json()["event"] == "test"
        log = client.get(f"{API}/{rule['id']}/deliveries", headers=headers[Role.viewer]).json()
        assert log["count"] == 1 and log["data"][0]["payload"]["event"] == "test"

        assert client.delete(f"{API}/{rule['id']}", headers=admin).status_code == 204
        assert client.get(f"{API}/{rule['id']}", headers=admin).status_code == 404


def test_bad_rules_are_refused_naming_the_field(pg_backend: Any) -> None:
    _, headers = _team(pg_backend)
    admin = headers[Role.admin]
    base = {"name": "r", "events": ["job_failed"], "channel": "webhook", "url": "https://example.com/h"}
    cases = [
        ({**base, "events": ["job_exploded"]}, 422, "events"),
        ({**base, "events": []}, 422, "events"),
        ({**base, "url": "ftp://example.com/h"}, 422, "url"),
        ({**base, "url": None}, 422, "url"),
        ({**base, "secret": "short"}, 422, "secret"),
        ({**base, "recipients": ["a@example.com"]}, 422, "recipients"),
        ({**base, "channel": "email", "url": None, "recipients": ["not-an-address"]}, 422, "recipients"),
        ({**base, "channel": "email", "url": None, "recipients": ["a@example.com"]}, 422, "channel"),  # no SMTP
    ]
    with pg_backend.client() as client:
        for body, status, field in cases:
            answer = client.post(API, json=body, headers=admin)
            assert answer.status_code == status, (body, answer.text)
            assert field in answer.text, (body, answer.text)
        assert client.get(API, headers=admin).json()["count"] == 0  # nothing half-written


def test_email_rule_needs_smtp_configured(pg_backend: Any) -> None:
    _, headers = _team(pg_backend)
    body = {"name": "mail", "events": ["job_succeeded"], "channel": "email", "recipients": ["ml@example.com"]}
    with pg_backend.client(smtp_host="127.0.0.1") as client:
        created = client.post(API, json=body, headers=headers[Role.admin])
        assert created.status_code == 201, created.text
        assert created.json()["secret"] is None and created.json()["secret_set"] is False


def test_roles_and_other_teams(pg_backend: Any) -> None:
    _, headers = _team(pg_backend)
    _, other = _team(pg_backend)
    body = {"name": "r", "events": ["job_failed"], "channel": "webhook", "url": "https://example.com/h"}
    with pg_backend.client() as client:
        assert client.post(API, json=body, headers=headers[Role.member]).status_code == 403
        rule = client.post(API, json=body, headers=headers[Role.admin]).json()
        for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/test"), ("GET", "/deliveries")):
            kwargs: dict[str, Any] = {"json": {"name": "x"}} if method == "PATCH" else {}
            answer = client.request(method, f"{API}/{rule['id']}{path}", headers=other[Role.owner], **kwargs)
            assert answer.status_code == 404, (method, path, answer.text)
        assert client.get(API, headers=other[Role.owner]).json()["count"] == 0
        assert client.get(f"{API}/{rule['id']}", headers=headers[Role.viewer]).status_code == 200
