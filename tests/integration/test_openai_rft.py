"""An OpenAI reinforcement fine-tuning script, unchanged but for `base_url` and `api_key`, run to `succeeded` on the
real platform: the `openai` SDK uploads a chat-format JSONL file and creates a job with a string_check grader through a
live API server; the controller and real Celery workers (tests/integration/runtime_platform.py) train it; the SDK then
lists its events and its checkpoint and gets a chat completion from the fine-tuned model. The model is the tiny
BPE chat model (`messages` rows need a chat template)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from waiting import api_in_thread, wait_until

from backend.db.models import Model, Team, User
from backend.services.auth import new_api_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def base_url(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live API server on the platform's database, Redis and artifact dir, with the chat model registered."""
    from workers.models import build_tiny_model

    backend = platform.backend
    model_dir: Path = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("openai-chat") / "qwen", seed=0)
    with backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="chat-tiny", path=str(model_dir),
                          created_by_id=platform.user.id))
    with api_in_thread(backend.settings) as url:
        yield f"{url}/openai/v1"


def test_an_openai_rft_job_runs_to_succeeded(platform: Any, base_url: str) -> None:
    with platform.backend.session() as session:
        key = new_api_key(session=session, team=session.get(Team, platform.team.id),
                          creator=session.get(User, platform.user.id), name="sdk", scopes=["read", "write"])[1]
    client = openai.OpenAI(base_url=base_url, api_key=key)  # the two lines a user changes

    rows = [{"messages": [{"role": "user", "content": f"{i}+{i}="}], "answer": str(2 * i)} for i in range(8)]
    file = client.files.create(file=("sums.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()),
                               purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="chat-tiny",
        training_file=file.id,
        suffix="sums",
        seed=1,
        method={"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                       "reference": "{{ item.answer }}", "operation": "eq"},
            "hyperparameters": {"n_epochs": 1, "batch_size": 4, "compute_multiplier": 0.5},  # 2 iterations x 4 x 4
        }},
        extra_body={"platform_spec": {"generation": {"instances": 1, "max_tokens": 4, "batch_size": 16},
                                      "training": {"micro_batch_size": 16}}},
    )
    assert job.status == "queued"

    def finished() -> Any:
        current = client.fine_tuning.jobs.retrieve(job.id)
        return current if current.status in ("succeeded", "failed", "cancelled") else None

    done = wait_until(finished, 240, f"{job.id} to finish", poll_s=0.5)
    assert done.status == "succeeded", f"{done.error}\n{platform.logs_tail()}"
    number = job.id.removeprefix("ftjob-")
    assert done.fine_tuned_model is not None and done.fine_tuned_model.endswith(f":sums:{number}")
    assert done.trained_tokens is not None and done.trained_tokens > 0 and done.finished_at is not None

    messages = [event.message for event in client.fine_tuning.jobs.list_events(job.id, limit=100)]
    assert "running -> succeeded" in messages and "queued -> starting" in messages
    checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
    assert checkpoints and checkpoints[0].step_number == 2  # the final iteration is always checkpointed
    assert checkpoints[0].fine_tuned_model_checkpoint == f"{done.fine_tuned_model}:ckpt-step-2"
    assert checkpoints[0].metrics.step == 2 and checkpoints[0].metrics.train_loss is not None

    # the resulting model answers over the chat-completions protocol (served by an on-demand inference instance)
    assert done.fine_tuned_model in [model.id for model in client.models.list()]
    reply = client.chat.completions.create(model=done.fine_tuned_model, temperature=0, max_tokens=4,
                                           messages=[{"role": "user", "content": "3+3="}])
    assert reply.model == done.fine_tuned_model and reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 4
