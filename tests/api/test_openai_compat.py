"""The OpenAI-compatible fine-tuning API (`/openai/v1`) driven by the real `openai` SDK against a real uvicorn server on
the test Postgres: files, reinforcement jobs (mapped onto platform jobs), pagination, pause/resume/cancel, events,
checkpoints, refusals and team isolation. No workers run: job states and records are written through the services
the runtime calls (as tests/e2e/e2e_runs.py does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from sqlalchemy import func, select
from waiting import api_in_thread

from backend.db.enums import JobStatus
from backend.db.models import Dataset, Job, Team, User
from backend.main import create_app
from backend.services.auth import new_api_key
from backend.services.job_data import record_checkpoint, record_iteration
from backend.services.jobs import transition_job

ROWS = [{"messages": [{"role": "user", "content": f"{i}+1="}, {"role": "assistant", "content": str(i + 1)}],
         "answer": str(i + 1), "level": i % 3} for i in range(10)]
STRING_CHECK = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                "reference": "{{ item.answer }}", "operation": "eq"}
JUDGE_INPUT = [{"role": "user", "content": "Grade 0-10: {{ sample.output_text }}", "type": "message"}]
RFT = {"type": "reinforcement", "reinforcement": {"grader": STRING_CHECK, "hyperparameters": {
    "n_epochs": 2, "batch_size": 4, "learning_rate_multiplier": 2.0, "compute_multiplier": 0.5}}}


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


@pytest.fixture(scope="module")
def base_url(pg_backend: Any) -> Iterator[str]:
    with api_in_thread(pg_backend.settings) as url:
        yield f"{url}/openai/v1"


def api_key(backend: Any, team: Team, user: User, scopes: list[str] | None = None) -> str:
    with backend.session() as session:
        return new_api_key(session=session, team=session.get(Team, team.id), creator=session.get(User, user.id),
                           name="openai-sdk", scopes=scopes or ["read", "write"])[1]


@pytest.fixture
def client(pg_backend: Any, world: Any, base_url: str) -> openai.OpenAI:
    """The SDK as a user configures it: base_url and a platform API key (the team's member)."""
    return openai.OpenAI(base_url=base_url, api_key=api_key(pg_backend, world.team, world.users["member"]))


def upload(client: openai.OpenAI, rows: list[dict[str, Any]] = ROWS, name: str = "train.jsonl") -> Any:
    return client.files.create(file=(name, jsonl(rows)), purpose="fine-tune")


def set_status(backend: Any, job_id: str, *statuses: JobStatus) -> None:
    with backend.session() as session:
        job = session.get(Job, int(job_id.removeprefix("ftjob-")))
        for status in statuses:
            transition_job(session=session, job=job, to=status)


def test_files_upload_retrieve_list_content_delete(client: openai.OpenAI, pg_backend: Any, world: Any) -> None:
    first = upload(client)
    assert first.object == "file" and first.id.startswith("file-") and first.purpose == "fine-tune"
    assert first.filename == "train.jsonl" and first.bytes == len(jsonl(ROWS)) and first.status == "processed"
    assert client.files.retrieve(first.id).model_dump() == first.model_dump()
    assert client.files.content(first.id).read() == jsonl(ROWS)
    second, third = upload(client, name="b.jsonl"), upload(client, name="c.jsonl")
    page = client.files.list(limit=2)
    assert [f.id for f in page.data] == [third.id, second.id] and page.has_more
    rest = client.files.list(limit=2, after=second.id)
    assert rest.data[0].id == first.id and not rest.has_more
    assert [f.id for f in client.files.list(limit=1)] == [third.id, second.id, first.id]  # the SDK's auto-paging
    assert [f.id for f in client.files.list(order="asc")] == [first.id, second.id, third.id]
    deleted = client.files.delete(second.id)
    assert deleted.deleted and deleted.id == second.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(second.id)


def test_a_bad_file_names_its_row_and_column_and_stores_nothing(client: openai.OpenAI, pg_backend: Any,
                                                                world: Any) -> None:
    def count() -> int:
        with pg_backend.session() as session:
            return int(session.scalar(select(func.count(Dataset.id)).where(Dataset.team_id == world.team.id)) or 0)

    before = count()
    bad = [ROWS[0], {"messages": [{"role": "robot", "content": "hi"}]}]
    with pytest.raises(openai.BadRequestError) as err:
        upload(client, bad)
    assert "line 2" in err.value.message and "messages" in err.value.message and "robot" in err.value.message
    assert err.value.code is None or isinstance(err.value.code, str)
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("x.jsonl", jsonl(ROWS)), purpose="batch")
    assert count() == before


def create_job(client: openai.OpenAI, file_id: str, **kwargs: Any) -> Any:
    return client.fine_tuning.jobs.create(model="tiny", training_file=file_id, method=RFT, **kwargs)


def test_a_reinforcement_job_maps_onto_a_platform_job(client: openai.OpenAI, pg_backend: Any, world: Any) -> None:
    file = upload(client)
    job = create_job(client, file.id, suffix="adder", seed=7, metadata={"project": "sums"})
    assert job.object == "fine_tuning.job" and job.id.startswith("ftjob-") and job.status == "queued"
    assert job.model == "tiny" and job.training_file == file.id and job.seed == 7 and job.fine_tuned_model is None
    assert job.method is not None and job.method.type == "reinforcement" and job.method.reinforcement is not None
    assert job.method.reinforcement.grader.type == "string_check"
    assert job.hyperparameters.n_epochs == 2 and job.hyperparameters.batch_size == 4
    assert job.metadata == {"project": "sums"}
    with pg_backend.session() as session:
        stored = session.get(Job, int(job.id.removeprefix("ftjob-")))
        assert stored is not None and stored.team_id == world.team.id and "openai" in stored.tags
        spec = stored.spec
    assert spec["dataset"]["id"] == int(file.id.removeprefix("file-"))
    assert spec["training"]["iterations"] == 5 and spec["training"]["prompts_per_iteration"] == 4  # 2 x 10 rows / 4
    assert spec["training"]["lr"] == pytest.approx(2e-4) and spec["algorithm"]["group_size"] == 4
    assert spec["reward"] == {"type": "string_check", "params": {k: v for k, v in STRING_CHECK.items() if k != "type"},
                              "weight": 1.0, "components": [], "code": None}
    assert spec["seed"] == 7 and spec["name"] == "adder"
    assert client.fine_tuning.jobs.retrieve(job.id).model_dump() == job.model_dump()


def test_list_paginates_newest_first(client: openai.OpenAI) -> None:
    file = upload(client)
    made = [create_job(client, file.id, suffix=f"p{i}").id for i in range(3)]
    first = client.fine_tuning.jobs.list(limit=2)
    assert [j.id for j in first.data] == made[::-1][:2] and first.has_more
    second = client.fine_tuning.jobs.list(limit=2, after=first.data[-1].id)
    assert [j.id for j in second.data] == [made[0]] and not second.has_more
    assert [j.id for j in client.fine_tuning.jobs.list(limit=1)] == made[::-1]  # auto-paging follows `after`


def test_pause_resume_cancel_events_and_checkpoints(client: openai.OpenAI, pg_backend: Any) -> None:
    job = create_job(client, upload(client).id, suffix="life")
    with pytest.raises(openai.ConflictError, match="queued"):
        client.fine_tuning.jobs.pause(job.id)
    set_status(pg_backend, job.id, JobStatus.starting)
    assert client.fine_tuning.jobs.retrieve(job.id).status == "queued"  # admitted, not training yet
    set_status(pg_backend, job.id, JobStatus.running)
    assert client.fine_tuning.jobs.retrieve(job.id).status == "running"
    assert client.fine_tuning.jobs.pause(job.id).status == "paused"
    assert client.fine_tuning.jobs.resume(job.id).status == "running"
    number = int(job.id.removeprefix("ftjob-"))
    with pg_backend.session() as session:
        record_iteration(session=session, job_id=number, iteration=1,
                         metrics={"loss": 0.5, "reward_mean": 0.25, "tokens_per_s": 10.0, "iteration_seconds": 2.0})
        record_checkpoint(session=session, job_id=number, iteration=1, path="/artifacts/jobs/x/iter_000001")
    checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id)
    assert len(checkpoints.data) == 1 and not checkpoints.has_more
    ckpt = checkpoints.data[0]
    assert ckpt.object == "fine_tuning.job.checkpoint" and ckpt.id.startswith("ftckpt-") and ckpt.step_number == 1
    assert ckpt.fine_tuning_job_id == job.id and ckpt.fine_tuned_model_checkpoint.endswith(f":{number}:ckpt-step-1")
    assert ckpt.fine_tuned_model_checkpoint.startswith("ft:tiny:") and ckpt.metrics.train_loss == 0.5
    cancelled = client.fine_tuning.jobs.cancel(job.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None and cancelled.trained_tokens == 20
    with pytest.raises(openai.ConflictError):
        client.fine_tuning.jobs.cancel(job.id)
    events = client.fine_tuning.jobs.list_events(job.id, limit=3)
    assert len(events.data) == 3 and events.has_more and all(e.object == "fine_tuning.job.event" for e in events.data)
    assert events.data[0].message == "running -> cancelled" and events.data[0].data["kind"] == "status"
    everything = list(client.fine_tuning.jobs.list_events(job.id, limit=2))  # auto-paging through the cursor
    messages = [e.message for e in everything]
    assert messages[-2] == "created through the OpenAI-compatible API (/openai/v1)"
    assert messages[-1].startswith("job submitted by") and "queued -> starting" in messages
    assert len({e.id for e in everything}) == len(everything) >= 7


def test_a_succeeded_job_names_its_fine_tuned_model(client: openai.OpenAI, pg_backend: Any, world: Any) -> None:
    job = create_job(client, upload(client).id, suffix="done")
    set_status(pg_backend, job.id, JobStatus.starting, JobStatus.running, JobStatus.succeeded)
    done = client.fine_tuning.jobs.retrieve(job.id)
    number = job.id.removeprefix("ftjob-")
    assert done.status == "succeeded" and done.fine_tuned_model == f"ft:tiny:{world.team.name}:done:{number}"
    assert done.trained_tokens == 0 and done.finished_at is not None and done.error is None


@pytest.mark.parametrize(("method", "param", "words"), [
    ({"type": "supervised", "supervised": {}}, "method.type", "supervised"),
    ({"type": "dpo", "dpo": {}}, "method.type", "DPO"),
    (None, "method.type", "supervised"),
    ({"type": "reinforcement", "reinforcement": {"grader": {**STRING_CHECK, "operation": "sounds_like"}}},
     "method.reinforcement.grader", "operation"),
    ({"type": "reinforcement", "reinforcement": {"grader": {"type": "score_model", "name": "judge", "model": "x",
                                                            "input": []}}}, "method.reinforcement.grader",
     "param 'input'"),
    ({"type": "reinforcement", "reinforcement": {"grader": {"type": "score_model", "model": "x", "input": JUDGE_INPUT,
                                                            "range": [0, 10]}}}, "method.reinforcement.grader.model",
     "'x' is not registered"),
    ({"type": "reinforcement", "reinforcement": {"grader": {"type": "multi", "calculate_output": "j", "graders": {
        "j": {"type": "score_model", "model": "x", "input": JUDGE_INPUT, "sampling_params": {"temperature": 1}}}}}},
     "method.reinforcement.grader.graders.j.sampling_params", "greedily"),
    ({"type": "reinforcement", "reinforcement": {"grader": {"type": "label_model", "model": "x", "input": []}}},
     "method.reinforcement.grader.type", "label_model"),
    ({"type": "reinforcement", "reinforcement": {"grader": STRING_CHECK, "hyperparameters": {"n_epochs": "many"}}},
     "method.reinforcement.hyperparameters.n_epochs", "n_epochs"),
])
def test_refused_methods_and_bad_graders_are_400(client: openai.OpenAI, method: Any, param: str, words: str) -> None:
    file = upload(client)
    kwargs = {} if method is None else {"method": method}
    with pytest.raises(openai.BadRequestError) as err:
        client.fine_tuning.jobs.create(model="tiny", training_file=file.id, **kwargs)
    assert words in err.value.message and err.value.param is not None and err.value.param.startswith(param)


def test_other_refusals(client: openai.OpenAI) -> None:
    file = upload(client)
    with pytest.raises(openai.BadRequestError) as err:
        client.fine_tuning.jobs.create(model="no-such-model", training_file=file.id, method=RFT)
    assert err.value.param == "model" and "not registered" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        create_job(client, file.id, validation_file=file.id)
    assert err.value.param == "validation_file"
    with pytest.raises(openai.BadRequestError) as err:
        create_job(client, file.id, extra_body={"platform_spec": {"training": {"iterations": 3}}})
    assert err.value.param == "platform_spec.training.iterations" and "n_epochs" in err.value.message
    with pytest.raises(openai.NotFoundError):
        create_job(client, "file-2147483647")
    with pytest.raises(openai.NotFoundError):
        client.fine_tuning.jobs.retrieve("ftjob-nope")
    python = {"type": "python", "name": "p", "source": "def grade(sample, item):\n    return 1.0\n"}
    job = client.fine_tuning.jobs.create(model="tiny", training_file=file.id, method={
        "type": "reinforcement", "reinforcement": {"grader": python}},
        extra_body={"platform_spec": {"generation": {"max_tokens": 4}}})
    assert job.method is not None and job.method.reinforcement is not None
    assert job.method.reinforcement.grader.type == "python"


def test_teams_are_isolated_and_keys_checked(client: openai.OpenAI, pg_backend: Any, world: Any, other_world: Any,
                                             base_url: str) -> None:
    file = upload(client)
    job = create_job(client, file.id)
    other = openai.OpenAI(base_url=base_url, api_key=api_key(pg_backend, other_world.team,
                                                             other_world.users["member"]))
    for call in (lambda: other.files.retrieve(file.id), lambda: other.files.content(file.id),
                 lambda: other.files.delete(file.id), lambda: other.fine_tuning.jobs.retrieve(job.id),
                 lambda: other.fine_tuning.jobs.cancel(job.id), lambda: other.fine_tuning.jobs.list_events(job.id),
                 lambda: create_job(other, file.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert job.id not in [j.id for j in other.fine_tuning.jobs.list()]
    wrong = openai.OpenAI(base_url=base_url, api_key="srl_000000000000_wrong")
    with pytest.raises(openai.AuthenticationError):
        wrong.files.list()
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="sk-not-a-platform-key").fine_tuning.jobs.list()
    reader = openai.OpenAI(base_url=base_url, api_key=api_key(pg_backend, world.team, world.users["member"],
                                                              scopes=["read"]))
    assert reader.fine_tuning.jobs.retrieve(job.id).id == job.id
    with pytest.raises(openai.PermissionDeniedError):
        reader.fine_tuning.jobs.cancel(job.id)
    with pytest.raises(openai.ConflictError, match="unfinished"):
        client.files.delete(file.id)  # the job still reads it


def test_compat_routes_stay_out_of_the_openapi_schema(pg_backend: Any) -> None:
    assert not [path for path in create_app(pg_backend.settings).openapi()["paths"] if "openai" in path]


def test_uploads_get_the_upload_limit_not_the_request_limit(client: openai.OpenAI, pg_backend: Any) -> None:
    rows = [{**ROWS[0], "pad": "x" * 1000} for _ in range(1500)]  # ~1.6 MB: over max_request_bytes (1 MiB)
    assert len(jsonl(rows)) > pg_backend.settings.max_request_bytes
    assert upload(client, rows).bytes == len(jsonl(rows))
