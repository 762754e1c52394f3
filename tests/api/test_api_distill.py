"""Distillation jobs at submit (algorithm distill, backend/services/distill.py): the teacher must be the team's
registered model (another team's is a 404) and share the student's tokenizer (a 422 naming both), and the spec's
own rules (distill needs a teacher; teacher is distill's option; teacher_topk within 0-64 and used) are 422s at the
field."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient
from minimal_model import write_minimal_model

from backend.db.models import Model

API = "/api/v1"


def _register(world: Any, name: str, vocab: dict[str, int] | None = None) -> None:
    from tokenizers import Tokenizer, models

    path = write_minimal_model(world.backend.settings.artifacts / "models" / uuid.uuid4().hex)
    if vocab is not None:  # another tokenizer: a different token -> id map
        Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(path / "tokenizer.json"))
    with world.backend.session() as session:
        session.add(Model(team_id=world.team.id, name=name, path=str(path)))


def _submit(client: TestClient, world: Any, algorithm: dict[str, Any]) -> Any:
    spec = {"name": "distilled", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            "algorithm": algorithm}
    return client.post(f"{API}/jobs", json=spec, headers=world.headers("member"))


def test_a_teacher_with_the_students_tokenizer_is_accepted(app_client: TestClient, world: Any) -> None:
    _register(world, "big")
    answer = _submit(app_client, world, {"name": "distill", "teacher": "big", "kl_discount": 0.5, "reward_coef": 1,
                                         "teacher_topk": 8, "topk_coef": 0.5})
    assert answer.status_code == 201, answer.text
    algorithm = answer.json()["spec"]["algorithm"]
    assert (algorithm["name"], algorithm["teacher"], algorithm["kl_discount"]) == ("distill", "big", 0.5)
    assert (algorithm["teacher_topk"], algorithm["topk_coef"]) == (8, 0.5)


def test_a_teacher_with_another_tokenizer_is_a_422_naming_both(app_client: TestClient, world: Any) -> None:
    _register(world, "other-vocab", {"<unk>": 0, "a": 1, "c": 2, "b": 3})  # same tokens, other ids
    answer = _submit(app_client, world, {"name": "distill", "teacher": "other-vocab"})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "algorithm", "teacher"]
    assert "'other-vocab'" in detail["msg"] and "'tiny'" in detail["msg"] and "tokenizer" in detail["msg"]


def test_another_teams_teacher_is_a_404(app_client: TestClient, world: Any, other_world: Any) -> None:
    _register(other_world, "their-teacher")
    answer = _submit(app_client, world, {"name": "distill", "teacher": "their-teacher"})
    assert answer.status_code == 404, answer.text
    assert "their-teacher" in answer.json()["detail"]
    unknown = _submit(app_client, world, {"name": "distill", "teacher": "nobody"})
    assert unknown.status_code == 404, unknown.text  # the same answer as a name no team has


def test_the_specs_teacher_rules_are_422s(app_client: TestClient, world: Any) -> None:
    missing = _submit(app_client, world, {"name": "distill"})
    assert missing.status_code == 422 and "needs teacher" in missing.text, missing.text
    _register(world, "big")
    misplaced = _submit(app_client, world, {"name": "grpo", "teacher": "big"})
    assert misplaced.status_code == 422 and "option of algorithm distill" in misplaced.text, misplaced.text
    unused = _submit(app_client, world, {"name": "distill", "teacher": "big", "teacher_topk": 8, "topk_coef": 0})
    assert unused.status_code == 422 and "topk_coef 0" in unused.text, unused.text
    too_many = _submit(app_client, world, {"name": "distill", "teacher": "big", "teacher_topk": 65})
    assert too_many.status_code == 422, too_many.text
    assert too_many.json()["detail"][0]["loc"][-2:] == ["algorithm", "teacher_topk"], too_many.text
