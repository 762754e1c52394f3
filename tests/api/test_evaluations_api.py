"""POST/GET /evaluations without workers: what is refused (422 naming the field, 404 for what is not the team's) and
what a queued evaluation looks like; a checkpoint's `best` and `scores` in GET /jobs/{id}/checkpoints; the
`job:<id>@...` aliases resolve only the team's checkpoints still on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.db.enums import Role
from backend.db.models import Checkpoint, Evaluation, UsageRecord
from backend.services import model_aliases, openai_inference
from backend.services.evaluations import DatabaseEvaluationStore

SUITE = {"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 2}, "reward": {"type": "exact_match"}}


def test_create_refuses_bad_input_and_what_is_not_the_teams(pg_backend: Any, world: Any, other_world: Any) -> None:
    with pg_backend.client() as client:
        member = world.headers(Role.member)
        cases = [({"model": "tiny", "suite": {**SUITE, "k": 3}}, 422, "samples_per_prompt"),
                 ({"suite": SUITE}, 422, "give model, or job_id"),
                 ({"model": "tiny", "suite": {**SUITE, "reward": {"type": "nope"}}}, 422, "nope"),
                 ({"model": "tiny", "suite": {k: v for k, v in SUITE.items() if k != "reward"}}, 422, "reward or"),
                 ({"model": "tiny", "suite": "held"}, 422, "no suite named"),
                 ({"model": "missing", "suite": SUITE}, 404, "not found"),
                 ({"model": "job:999999@best", "suite": SUITE}, 404, "not found")]
        for body, status, text in cases:
            response = client.post("/api/v1/evaluations", json=body, headers=member)
            assert response.status_code == status and text in response.text, (body, response.text)
        viewer = client.post("/api/v1/evaluations", json={"model": "tiny", "suite": SUITE},
                             headers=world.headers(Role.viewer))
        assert viewer.status_code == 403

        job = world.submit(client, evaluation=[SUITE], checkpoint={"select": "best", "metric": "held/mean"})
        with pg_backend.session() as session:
            session.add(Checkpoint(job_id=job["id"], iteration=2, path=str(pg_backend.settings.artifacts)))
        theirs = client.post("/api/v1/evaluations", json={"job_id": job["id"], "checkpoint": 2, "suite": "held"},
                             headers=other_world.headers(Role.member))
        assert theirs.status_code == 404, theirs.text
        created = client.post("/api/v1/evaluations", json={"job_id": job["id"], "checkpoint": 2, "suite": "held"},
                              headers=member)
        assert created.status_code == 202, created.text
        body = created.json()
        assert body["status"] == "queued" and body["model"] == f"job:{job['id']}@2" and body["iteration"] == 2
        assert client.get(f"/api/v1/evaluations/{body['id']}", headers=other_world.headers(Role.viewer)).status_code \
            == 404
        detail = client.get(f"/api/v1/evaluations/{body['id']}", headers=world.headers(Role.viewer)).json()
        assert detail["suite"]["reward"]["type"] == "exact_match" and detail["rows"] == []

        store = DatabaseEvaluationStore(pg_backend.engine)  # as the runner: claim, then finish
        task = store.claim(body["id"])
        assert task is not None and store.claim(body["id"]) is None  # claimed once
        store.finish(body["id"], {"mean": 0.5, "pass@1": 0.5, "pass@k": 0.5, "k": 1.0, "prompts": 2.0,
                                  "samples": 2.0}, [])
        with pg_backend.session() as session:  # the evaluation's generation is the team's usage
            used = session.query(UsageRecord).filter_by(job_id=job["id"], source="evaluation").one()
            assert (used.team_id, used.pool) == (world.team.id, "generation")
        listed = client.get(f"/api/v1/jobs/{job['id']}/checkpoints", headers=member).json()["data"]
        assert listed == [{**listed[0], "best": True, "scores": {"held": {"mean": 0.5, "pass@1": 0.5, "pass@k": 0.5,
                                                                          "k": 1.0, "prompts": 2.0, "samples": 2.0}}}]


def test_aliases_resolve_the_teams_checkpoints_on_disk(pg_backend: Any, world: Any, other_world: Any,
                                                       tmp_path: Path) -> None:
    with pg_backend.client() as client:
        job = world.submit(client)
    (tmp_path / "a").mkdir()
    (tmp_path / "c").mkdir()
    with pg_backend.session() as session:
        session.add_all([Checkpoint(job_id=job["id"], iteration=1, path=str(tmp_path / "a"), best=True),
                         Checkpoint(job_id=job["id"], iteration=2, path=str(tmp_path / "b")),  # deleted from disk
                         Checkpoint(job_id=job["id"], iteration=3, path=str(tmp_path / "c"))])
    with pg_backend.session() as session:
        def iteration(team: Any, name: str) -> int | None:
            found = model_aliases.resolve_alias(session, team, name)
            return found[1].iteration if found else None

        assert iteration(world.team, f"job:{job['id']}@best") == 1
        assert iteration(world.team, f"job:{job['id']}@last") == 3
        assert iteration(world.team, f"job:{job['id']}@3") == 3
        assert iteration(world.team, f"job:{job['id']}@2") is None  # pruned
        assert iteration(other_world.team, f"job:{job['id']}@best") is None
        assert iteration(world.team, f"job:{job['id']}@worst") is None
        assert session.query(Evaluation).filter_by(job_id=job["id"]).count() == 0
        listed = [m["id"] for m in openai_inference.list_models(session, world.team)["data"]]
        assert f"job:{job['id']}@best" in listed
        assert f"job:{job['id']}@best" not in [m["id"] for m in openai_inference.list_models(session, other_world.team)
                                               ["data"]]


def test_final_retention_after_the_last_evaluation(pg_backend: Any, world: Any, tmp_path: Path) -> None:
    """The job does not wait for its last checkpoint's evaluations; when the last one ends, retention keeps the top
    `keep` by the metric plus the newest and deletes the rest (an unscored checkpoint counts as lowest)."""
    from backend.services.evaluations import final_retention

    with pg_backend.client() as client:
        job = world.submit(client, evaluation=[SUITE], training={"iterations": 6},
                           checkpoint={"interval": 2, "keep": 1, "select": "best", "metric": "held/mean"})
    dirs = {it: tmp_path / f"iter_{it}" for it in (2, 4, 6)}
    for path in dirs.values():
        path.mkdir()
    with pg_backend.session() as session:
        session.add_all([Checkpoint(job_id=job["id"], iteration=2, path=str(dirs[2]), scores={"held": {"mean": 0.9}}),
                         Checkpoint(job_id=job["id"], iteration=4, path=str(dirs[4]), scores={"held": {"mean": 0.1}})])
    with pg_backend.session() as session:
        assert final_retention(session, job["id"]) == []  # the final checkpoint is not recorded yet
        session.add(Checkpoint(job_id=job["id"], iteration=6, path=str(dirs[6])))
        session.add(Evaluation(team_id=world.team.id, job_id=job["id"], iteration=6, model="x", model_dir="x",
                               suite_name="held", suite=SUITE, status="running"))
        session.flush()
        assert final_retention(session, job["id"]) == []  # its evaluation still runs
        session.query(Evaluation).filter_by(job_id=job["id"]).update({"status": "failed"})
        assert final_retention(session, job["id"]) == [4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_2", "iter_6"]


def test_submit_refuses_a_bad_suite_naming_its_place(pg_backend: Any, world: Any) -> None:
    with pg_backend.client() as client:
        member = world.headers(Role.member)
        for suite, where, text in [({**SUITE, "reward": {"type": "nope"}}, ["body", "evaluation", 1, "reward"], "nope"),
                                   ({**SUITE, "dataset": {"id": 999999}}, ["body", "evaluation", 1, "dataset", "id"],
                                    "dataset 999999 not found")]:
            body = {"name": "j", "model": "tiny", "dataset": {"builtin": "arithmetic"},
                    "evaluation": [SUITE, {**suite, "name": "second"}]}
            response = client.post("/api/v1/jobs", json=body, headers=member)
            assert response.status_code == 422, response.text
            detail = response.json()["detail"][0]
            assert detail["loc"] == where and text in detail["msg"], detail
