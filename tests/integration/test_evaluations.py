"""Evaluation suites, the best checkpoint and its stable name on the real platform (Celery generation and training
workers, Postgres, Redis, the API on uvicorn, the official `openai` client).

A job rewarded for short answers, with a learning rate high enough to change (and wreck) the policy every iteration,
is evaluated every 2 iterations on its checkpoints by a suite (greedy, the same length reward): `checkpoint.select:
best` keeps the highest-scoring checkpoint (and the newest) and deletes the rest, marks it `best`, and
`job:<id>@best` answers through the `openai` client with exactly what the hf engine generates greedily from that
checkpoint. On-demand evaluations: a registered base model (pass@k from its rows equals the estimator), another
team's job (404)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from waiting import api_in_thread, wait_until

from backend.db.models import Checkpoint, Model, Team, User
from backend.services.auth import new_api_key
from contract.evaluation import pass_at_k

pytestmark = pytest.mark.integration
MESSAGES = [{"role": "user", "content": "12+35="}]
SHORT = {"type": "length_penalty", "params": {"target": 0, "coef": 0.02, "max_penalty": 10.0}}  # shorter is better
SUITE = {"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 4}, "reward": SHORT,
         "samples_per_prompt": 1, "sampling": {"temperature": 0.0, "max_tokens": 8}}


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[Any]:
    from runtime_platform import Platform

    with Platform.start(pg_backend, redis_url, tiny_model_dir, generation_slots=2) as running:
        yield running


@dataclass
class Setup:
    url: str
    key: str
    other_key: str
    model_dir: Path


@pytest.fixture(scope="module")
def setup(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("eval-model") / "qwen", seed=0)
    backend = platform.backend
    with backend.session() as session:
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        assert team is not None and user is not None
        session.add(Model(team_id=team.id, name="chat-tiny", path=str(model_dir), created_by_id=user.id))
        key = new_api_key(session=session, team=team, creator=user, name="eval", scopes=["read", "write"])[1]
        other_team = backend.make_team()
    other_user = backend.make_user(other_team)
    with backend.session() as session:
        other_key = new_api_key(session=session, team=session.get(Team, other_team.id),
                                creator=session.get(User, other_user.id), name="other", scopes=["read", "write"])[1]
    with api_in_thread(backend.settings) as url:
        yield Setup(url, key, other_key, model_dir)


def engine_greedy(model_dir: str, max_tokens: int) -> str:
    """What the runtime's hf engine generates greedily from `model_dir` for MESSAGES (the model's chat template)."""
    from backend.services.chat_preview import ChatRenderer
    from workers.generation.engine import GenerationRequest, SamplingParams
    from workers.generation.engines.hf import HFEngine

    engine = HFEngine(model_dir, max_batch_size=1)
    renderer = ChatRenderer.for_model(Path(model_dir))
    ids = renderer.tokenizer.encode(renderer.render(MESSAGES)[0], add_special_tokens=False).ids
    request = GenerationRequest("0", ids, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return str(next(iter(engine.generate_stream([request]))).text)


def api(setup: Setup, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=f"{setup.url}/api/v1", headers={"Authorization": f"Bearer {key or setup.key}"},
                        timeout=60)


def wait_evaluation(client: httpx.Client, evaluation_id: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = client.get(f"/evaluations/{evaluation_id}").json()
        return body if body["status"] in ("succeeded", "failed") else None

    body = wait_until(done, 300, f"evaluation {evaluation_id}")
    assert body["status"] == "succeeded", body
    return body


def test_best_checkpoint_kept_marked_and_served(platform: Any, setup: Setup) -> None:
    job_id = platform.submit(
        model="chat-tiny", mode="colocated", generation={"instances": 1, "max_tokens": 8}, reward=SHORT,
        training={"iterations": 6, "prompts_per_iteration": 4, "micro_batch_size": 8, "lr": 0.05},
        evaluation=[SUITE], evaluation_every=2, checkpoint={"interval": 2, "keep": 1, "select": "best",
                                                            "metric": "held/mean"})
    job = platform.wait_done(job_id, timeout_s=600)
    assert job.status.value == "succeeded", (job.error, platform.events(job_id), platform.logs_tail())
    with api(setup) as client:  # the job does not wait for its last evaluation: its result comes after
        def finished() -> list[dict[str, Any]] | None:
            found = client.get("/evaluations", params={"job_id": job_id}).json()
            return found if len(found) == 3 and all(e["status"] not in ("queued", "running") for e in found) else None

        evaluations = wait_until(finished, 300, "the job's evaluations")
        assert sorted(e["iteration"] for e in evaluations) == [2, 4, 6], evaluations
        assert all(e["status"] == "succeeded" for e in evaluations), evaluations
        means = {e["iteration"]: e["summary"]["mean"] for e in evaluations}
        assert len(set(means.values())) > 1, means  # the checkpoints differ: choosing the best is not trivial
        best = max(means, key=lambda it: (means[it], it))
    with platform.backend.session() as session:
        paths = {c.iteration: Path(c.path) for c in session.query(Checkpoint).filter_by(job_id=job_id)}
    on_disk = wait_until(lambda: (found := {it for it, path in paths.items() if path.is_dir()}) == {best, 6} and found,
                         30, f"retention to keep the best ({best}) and the newest (6) of {means}")
    with api(setup) as client:  # the listing shows the checkpoints on disk, each with its suite's scores
        listed = client.get(f"/jobs/{job_id}/checkpoints").json()["data"]
        assert [c["iteration"] for c in listed if c["best"]] == [best], (listed, means)
        assert {c["iteration"]: c["scores"]["held"]["mean"] for c in listed} == {it: means[it] for it in on_disk}

    sdk = openai.OpenAI(base_url=f"{setup.url}/openai/v1", api_key=setup.key, max_retries=0)
    answer = sdk.chat.completions.create(model=f"job:{job_id}@best", messages=MESSAGES, temperature=0, max_tokens=8)
    assert answer.choices[0].message.content == engine_greedy(str(paths[best]), 8)
    last = sdk.chat.completions.create(model=f"job:{job_id}@last", messages=MESSAGES, temperature=0, max_tokens=8)
    assert last.choices[0].message.content == engine_greedy(str(paths[6]), 8)
    for gone in sorted(set(paths) - on_disk)[:1]:
        with pytest.raises(openai.NotFoundError):
            sdk.chat.completions.create(model=f"job:{job_id}@{gone}", messages=MESSAGES, max_tokens=2)
    other = openai.OpenAI(base_url=f"{setup.url}/openai/v1", api_key=setup.other_key, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.chat.completions.create(model=f"job:{job_id}@best", messages=MESSAGES, max_tokens=2)

    with api(setup, setup.other_key) as client:  # another team's checkpoint cannot be evaluated: 404
        refused = client.post("/evaluations", json={"job_id": job_id, "checkpoint": "best", "suite": SUITE})
        assert refused.status_code == 404, refused.text
        assert client.post("/evaluations", json={"model": f"job:{job_id}@last", "suite": SUITE}).status_code == 404
    with api(setup) as client:  # the job's own suite by name, on its best checkpoint, on demand
        again = client.post("/evaluations", json={"job_id": job_id, "checkpoint": "best", "suite": "held"})
        assert again.status_code == 202, again.text
        assert wait_evaluation(client, again.json()["id"])["summary"]["mean"] == pytest.approx(means[best])


def test_on_demand_evaluation_of_a_base_model(platform: Any, setup: Setup) -> None:
    suite = {"name": "sampled", "dataset": SUITE["dataset"], "samples_per_prompt": 4, "k": 2,
             "grader": {"type": "string_check", "params": {"input": "{{ sample.output_text }}",
                                                          "reference": "", "operation": "ne"}},
             "sampling": {"temperature": 1.0, "max_tokens": 3}}
    with api(setup) as client:
        bad = client.post("/evaluations", json={"model": "chat-tiny", "suite": {**suite, "k": 9}})
        assert bad.status_code == 422 and "k (9)" in bad.text, bad.text
        assert client.post("/evaluations", json={"model": "no-such", "suite": suite}).status_code == 404
        created = client.post("/evaluations", json={"model": "chat-tiny", "suite": suite})
        assert created.status_code == 202, created.text
        assert created.json()["status"] == "queued"
        body = wait_evaluation(client, created.json()["id"])
    rows = body["rows"]
    assert len(rows) == 4 and all(len(r["outputs"]) == 4 and len(r["scores"]) == 4 for r in rows)
    passes = [sum(1 for s in r["scores"] if s >= 1.0) for r in rows]
    assert body["summary"]["pass@k"] == pytest.approx(sum(pass_at_k(4, c, 2) for c in passes) / 4)
    assert body["summary"]["pass@1"] == pytest.approx(sum(c / 4 for c in passes) / 4)
    with api(setup, setup.other_key) as client:
        assert client.get(f"/evaluations/{created.json()['id']}").status_code == 404
