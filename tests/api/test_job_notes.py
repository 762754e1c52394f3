"""Run tags and notes: PATCH /jobs/{id} edits them (member), GET /jobs and GET /runs filter by tag and search text in
the name, tags and notes, bad input is 422 naming the field, another team's job is 404, a viewer is 403."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"


def _patch(client: TestClient, world: Any, job_id: int, body: dict[str, Any], role: str = "member") -> Any:
    return client.patch(f"{API}/jobs/{job_id}", json=body, headers=world.headers(role))


def _names(client: TestClient, world: Any, path: str, **params: str) -> list[str]:
    answer = client.get(f"{API}/{path}", params=params, headers=world.headers("viewer"))
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert page["count"] == len(page["data"])
    return sorted(job["name"] for job in page["data"])


def test_tags_and_notes_are_edited_and_shown(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="lr-sweep-a")
    assert job["tags"] == [] and job["notes"] == ""
    tagged = _patch(app_client, world, job["id"], {"tags": ["sweep", "baseline", "sweep"], "notes": "lr 1e-4"})
    assert tagged.status_code == 200, tagged.text
    assert tagged.json()["tags"] == ["baseline", "sweep"] and tagged.json()["notes"] == "lr 1e-4"
    changed = _patch(app_client, world, job["id"], {"add_tags": ["best"], "remove_tags": ["baseline"]}).json()
    assert changed["tags"] == ["best", "sweep"] and changed["notes"] == "lr 1e-4"  # notes untouched
    cleared = _patch(app_client, world, job["id"], {"notes": ""}).json()
    assert cleared["notes"] == "" and cleared["tags"] == ["best", "sweep"]
    fetched = app_client.get(f"{API}/jobs/{job['id']}", headers=world.headers("viewer")).json()
    assert fetched["tags"] == ["best", "sweep"]
    events = app_client.get(f"{API}/jobs/{job['id']}/events", headers=world.headers("viewer")).json()["data"]
    assert [e["message"] for e in events if e["kind"] == "notes"] == [
        "tags +baseline +sweep; notes edited", "tags +best -baseline", "notes cleared"]


def test_list_filters_by_tag_and_searches_name_tags_and_notes(app_client: TestClient, world: Any) -> None:
    a = world.submit(app_client, name="alpha")
    b = world.submit(app_client, name="beta")
    world.submit(app_client, name="gamma-sweep")
    _patch(app_client, world, a["id"], {"tags": ["sweep", "lr:1e-4"], "notes": "Diverged at iteration 40"})
    _patch(app_client, world, b["id"], {"tags": ["sweeps"], "notes": "fine"})
    for path in ("jobs", "runs"):
        assert _names(app_client, world, path, tag="sweep") == ["alpha"]  # the whole tag, not a prefix of "sweeps"
        assert _names(app_client, world, path, tag="lr:1e-4") == ["alpha"]
        assert _names(app_client, world, path, q="sweep") == ["alpha", "beta", "gamma-sweep"]  # tag, tag, name
        assert _names(app_client, world, path, q="diverged") == ["alpha"]  # notes, any case
        assert _names(app_client, world, path, q="%") == []  # a literal percent sign, not a wildcard
        assert _names(app_client, world, path, tag="sweeps", q="fine") == ["beta"]
        assert _names(app_client, world, path, tag="absent") == []


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"tags": ["has space"]}, ["body", "tags", 0]),
        ({"tags": ['quo"te']}, ["body", "tags", 0]),
        ({"add_tags": ["x" * 41]}, ["body", "add_tags", 0]),
        ({"tags": [f"t{i}" for i in range(21)]}, ["body", "tags"]),
        ({"notes": "x" * 10_001}, ["body", "notes"]),
        ({}, ["body"]),
        ({"tags": ["a"], "add_tags": ["b"]}, ["body"]),
        ({"tag": ["a"]}, ["body", "tag"]),
        ({"notes": 5}, ["body", "notes"]),
    ],
)
def test_bad_edits_are_422_naming_the_field(app_client: TestClient, world: Any, body: Any, loc: list[Any]) -> None:
    job = world.submit(app_client, name="strict")
    answer = _patch(app_client, world, job["id"], body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == loc
    assert app_client.get(f"{API}/jobs/{job['id']}", headers=world.headers("viewer")).json()["tags"] == []


def test_too_many_tags_after_adding_is_422_and_nothing_changes(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="crowded")
    _patch(app_client, world, job["id"], {"tags": [f"t{i}" for i in range(20)]})
    answer = _patch(app_client, world, job["id"], {"add_tags": ["one-more"], "notes": "n"})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "tags"]
    assert "at most 20 tags" in answer.json()["detail"][0]["msg"]
    after = app_client.get(f"{API}/jobs/{job['id']}", headers=world.headers("viewer")).json()
    assert len(after["tags"]) == 20 and after["notes"] == ""


def test_bad_filters_are_422(app_client: TestClient, world: Any) -> None:
    for path in ("jobs", "runs"):
        bad_tag = app_client.get(f"{API}/{path}", params={"tag": "a b"}, headers=world.headers("viewer"))
        assert bad_tag.status_code == 422 and bad_tag.json()["detail"][0]["loc"] == ["query", "tag"]
        empty = app_client.get(f"{API}/{path}", params={"q": ""}, headers=world.headers("viewer"))
        assert empty.status_code == 422 and empty.json()["detail"][0]["loc"] == ["query", "q"]


def test_other_teams_job_is_404_and_viewers_cannot_edit(
    app_client: TestClient, world: Any, other_world: Any
) -> None:
    theirs = other_world.submit(app_client, name="theirs")
    _patch(app_client, other_world, theirs["id"], {"tags": ["secret"], "notes": "private"})
    answer = _patch(app_client, world, theirs["id"], {"tags": ["mine"]})
    assert answer.status_code == 404
    assert _names(app_client, world, "jobs", tag="secret") == []
    assert _names(app_client, world, "runs", q="private") == []
    ours = world.submit(app_client, name="ours")
    assert _patch(app_client, world, ours["id"], {"notes": "x"}, role="viewer").status_code == 403
    after = app_client.get(f"{API}/jobs/{theirs['id']}", headers=other_world.headers("viewer")).json()
    assert after["tags"] == ["secret"] and after["notes"] == "private"
