"""OpenAI chat completions and models on the real platform: the unchanged `openai` SDK against a live API server, the
completions sampled by on-demand inference instances on a real Celery generation worker
(tests/integration/runtime_platform.py). Greedy answers equal what `HFEngine` generates for the prompt rendered with
the model's chat template (transformers' apply_chat_template, the runtime's rendering); a LoRA job's checkpoint is
served as base model + adapter; every instance stops by itself after its idle timeout."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest
from waiting import api_in_thread, wait_until

from backend.db import JobStatus
from backend.db.models import Checkpoint, Model, Team, User
from backend.services.auth import new_api_key
from backend.services.jobs import create_job
from contract.spec import JobSpec, LoraSpec

pytestmark = pytest.mark.integration
IDLE_S = 8
MESSAGES = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "12+35="}]
SPEC = LoraSpec(rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[Any]:
    """The integration platform, its generation workers stopping idle inference instances after IDLE_S."""
    from runtime_platform import Platform

    with Platform.start(pg_backend, redis_url, tiny_model_dir, generation_slots=2,
                        extra_env={"STREAMRL_INFERENCE_IDLE_S": str(IDLE_S)}) as running:
        yield running


@dataclass
class Setup:
    url: str
    key: str
    other_key: str
    model_dir: Path
    adapter_dir: Path


@pytest.fixture(scope="module")
def setup(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    import torch

    from workers.models import build_tiny_model, lora
    from workers.training.trainer import load_policy

    root = tmp_path_factory.mktemp("openai-inference")
    model_dir = build_tiny_model("chat-qwen2-1m", root / "qwen", seed=0)
    torch.manual_seed(3)  # a trained-looking adapter: B != 0, so base + adapter differs from the base
    wrapped = lora.wrap(load_policy(model_dir, torch.device("cpu")), SPEC)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.5)
    adapter = lora.adapter_state(wrapped)
    checkpoint = root / "job-ckpt" / "iter-1"
    lora.write_adapter(checkpoint / lora.ADAPTER_DIR, adapter, lora.adapter_config_json(SPEC, adapter))

    backend = platform.backend
    with backend.session() as session:
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        assert team is not None and user is not None
        session.add(Model(team_id=team.id, name="chat-tiny", path=str(model_dir), created_by_id=user.id))
        session.flush()
        spec = JobSpec.model_validate({  # a LoRA job's record as its run leaves it: succeeded, one checkpoint
            "name": "lora-sums", "model": "chat-tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            "reward": {"type": "exact_match"}, "training": {"iterations": 1, "lora": SPEC.model_dump()}})
        job = create_job(session=session, team=team, user=user, spec=spec)
        job.status, job.finished_at = JobStatus.succeeded, datetime.now(UTC)
        session.add(Checkpoint(job_id=job.id, iteration=1, path=str(checkpoint)))
        key = new_api_key(session=session, team=team, creator=user, name="sdk", scopes=["read", "write"])[1]
        other_team = backend.make_team()
    other_user = backend.make_user(other_team)
    with backend.session() as session:
        other_key = new_api_key(session=session, team=session.get(Team, other_team.id),
                                creator=session.get(User, other_user.id), name="other", scopes=["read", "write"])[1]
    with api_in_thread(backend.settings) as url:
        yield Setup(f"{url}/openai/v1", key, other_key, model_dir, checkpoint / lora.ADAPTER_DIR)


def engine_greedy(model_dir: Path, adapter_dir: Path | None, max_tokens: int) -> Any:
    """What the runtime's hf engine generates greedily for MESSAGES rendered with the model's chat template."""
    from backend.services.chat_preview import ChatRenderer
    from workers.core.chat import render_chat
    from workers.generation.engine import GenerationRequest, SamplingParams
    from workers.generation.engines.hf import HFEngine

    engine = HFEngine(model_dir, max_batch_size=2, lora=SPEC if adapter_dir else None)
    if adapter_dir is not None:
        engine.update_weights(1, adapter_dir)
    text, _ = render_chat(engine.tokenizer, MESSAGES)
    renderer = ChatRenderer.for_model(model_dir)  # the control plane renders the same text (without torch) ...
    assert renderer.render(MESSAGES)[0] == text
    ids = renderer.tokenizer.encode(text, add_special_tokens=False).ids  # ... and tokenises it with tokenizer.json
    request = GenerationRequest("0", ids, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return next(iter(engine.generate_stream([request])))


def test_models_and_chat_completions(platform: Any, setup: Setup) -> None:
    client = openai.OpenAI(base_url=setup.url, api_key=setup.key, max_retries=0)
    ids = [model.id for model in client.models.list()]
    assert "chat-tiny" in ids
    fine_tuned = next(i for i in ids if i.startswith("ft:chat-tiny:") and not i.endswith(":ckpt-step-1"))
    assert f"{fine_tuned}:ckpt-step-1" in ids
    assert client.models.retrieve(fine_tuned).id == fine_tuned

    want = engine_greedy(setup.model_dir, None, max_tokens=8)
    done = client.chat.completions.create(model="chat-tiny", messages=MESSAGES, temperature=0, max_tokens=8)
    assert done.choices[0].message.content == want.text and done.choices[0].finish_reason == want.finish_reason
    assert done.usage is not None and done.usage.prompt_tokens == len(want.prompt_ids)
    assert done.usage.completion_tokens == len(want.response_ids)

    two = client.chat.completions.create(model="chat-tiny", messages=MESSAGES, n=2, seed=7, max_completion_tokens=6)
    assert [c.index for c in two.choices] == [0, 1] and all(c.message.content is not None for c in two.choices)

    assert len(want.text) >= 4, want.text
    stop = want.text[len(want.text) // 2:][:2]
    cut = client.chat.completions.create(model="chat-tiny", messages=MESSAGES, temperature=0, max_tokens=8, stop=[stop])
    assert cut.choices[0].message.content == want.text[: want.text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"

    chunks = list(client.chat.completions.create(model="chat-tiny", messages=MESSAGES, temperature=0, max_tokens=8,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] \
        == [want.finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(want.response_ids)

    scored = client.chat.completions.create(model="chat-tiny", messages=MESSAGES, temperature=0, max_tokens=8,
                                            logprobs=True)
    content = scored.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and [round(t.logprob, 4) for t in content] == [round(v, 4) for v in want.logprobs]

    lora_want = engine_greedy(setup.model_dir, setup.adapter_dir, max_tokens=8)
    assert lora_want.response_ids != want.response_ids  # the adapter changes the answer
    adapted = client.chat.completions.create(model=f"{fine_tuned}:ckpt-step-1", messages=MESSAGES, temperature=0,
                                             max_tokens=8)
    assert adapted.choices[0].message.content == lora_want.text

    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model="chat-tiny", messages=MESSAGES, tools=[
            {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}])
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):  # supported, but not when streaming
        client.chat.completions.create(model="chat-tiny", messages=MESSAGES, logprobs=True, top_logprobs=3,
                                       stream=True)

    other = openai.OpenAI(base_url=setup.url, api_key=setup.other_key, max_retries=0)
    assert "chat-tiny" not in [model.id for model in other.models.list()]
    for model_id in ("chat-tiny", fine_tuned):
        with pytest.raises(openai.NotFoundError):
            other.models.retrieve(model_id)
        with pytest.raises(openai.NotFoundError):
            other.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=2)

    from typer.testing import CliRunner

    from streamrl.cli.main import app

    printed = CliRunner().invoke(app, ["--url", setup.url.removesuffix("/openai/v1"), "--token", setup.key, "chat",
                                       "chat-tiny", "12+35=", "--system", "You add numbers.", "-t", "0",
                                       "--max-tokens", "8"])
    assert printed.exit_code == 0 and printed.stdout == want.text + "\n", printed.output

    # nothing more to serve: both instances (base, base + adapter) stop by themselves after their idle timeout
    wait_until(lambda: not list(platform.client.scan_iter(match="streamrl:inference:*:state")), IDLE_S + 30,
               "the idle inference instances to stop")


def test_inference_calls_are_metered_under_the_callers_key(platform: Any, setup: Setup) -> None:
    import httpx

    api = httpx.Client(base_url=setup.url.removesuffix("/openai/v1") + "/api/v1",
                       headers={"Authorization": f"Bearer {setup.key}"}, timeout=30)

    def by_key() -> dict[str, Any]:
        rows = api.get("/usage", params={"group_by": "key"}).json()["rows"]
        return next((r for r in rows if r["name"] == "sdk"), {"tokens_generated": 0, "device_seconds": 0.0})

    before = by_key()
    client = openai.OpenAI(base_url=setup.url, api_key=setup.key, max_retries=0)
    plain = client.chat.completions.create(model="chat-tiny", messages=MESSAGES, n=2, seed=1, max_tokens=5)
    chunks = list(client.chat.completions.create(model="chat-tiny", messages=MESSAGES, seed=2, max_tokens=4,
                                                 stream=True, stream_options={"include_usage": True}))
    assert plain.usage is not None and chunks[-1].usage is not None
    sampled = plain.usage.completion_tokens + chunks[-1].usage.completion_tokens
    # each call's row is written when it ends (the stream's once the server closed it)
    after = wait_until(lambda: (now := by_key())["tokens_generated"] - before["tokens_generated"] >= sampled and now,
                       30, "both calls' usage rows")
    assert after["tokens_generated"] - before["tokens_generated"] == sampled
    assert after["generation_device_seconds"] > before.get("generation_device_seconds", 0.0)
    assert after["training_device_seconds"] == before.get("training_device_seconds", 0.0)
    jobs = api.get("/usage", params={"group_by": "job"}).json()["rows"]
    assert any(r["id"] is None and r["name"] == "on-demand inference" for r in jobs)
    other = httpx.get(setup.url.removesuffix("/openai/v1") + "/api/v1/usage", params={"group_by": "key"},
                      headers={"Authorization": f"Bearer {setup.other_key}"}).json()
    assert all(r["name"] != "sdk" for r in other["rows"])  # another team sees none of it


def _second_adapter(platform: Any, root: Path) -> str:
    """Another LoRA job of the team over chat-tiny with a checkpoint of its own adapter; its `job:<id>@1` id."""
    import torch

    from workers.models import lora
    from workers.training.trainer import load_policy

    with platform.backend.session() as session:
        base = session.query(Model).filter_by(team_id=platform.team.id, name="chat-tiny").one()
        torch.manual_seed(11)
        wrapped = lora.wrap(load_policy(Path(base.path), torch.device("cpu")), SPEC)
        with torch.no_grad():
            for name, param in wrapped.named_parameters():
                if ".lora_B." in name:
                    param.normal_(0.0, 0.5)
        adapter = lora.adapter_state(wrapped)
        checkpoint = root / "iter-1"
        lora.write_adapter(checkpoint / lora.ADAPTER_DIR, adapter, lora.adapter_config_json(SPEC, adapter))
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        spec = JobSpec.model_validate({
            "name": "lora-two", "model": "chat-tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            "reward": {"type": "exact_match"}, "training": {"iterations": 1, "lora": SPEC.model_dump()}})
        job = create_job(session=session, team=team, user=user, spec=spec)
        job.status, job.finished_at = JobStatus.succeeded, datetime.now(UTC)
        session.add(Checkpoint(job_id=job.id, iteration=1, path=str(checkpoint)))
        session.flush()
        return f"job:{job.id}@1"


def test_deployment_scales_from_zero_batches_two_adapters_and_back(platform: Any, setup: Setup,
                                                                  tmp_path: Path) -> None:
    """A deployment with min_replicas 0: the first requests (two adapters, at once) start one replica and wait for
    it; it generates both in one batch (the same replica, a step with both adapters), each with its own adapter's
    greedy tokens; then, idle, it scales back to zero and gives its generation slot back."""
    import threading

    import httpx

    from contract import keys
    from contract.leases import live

    second = _second_adapter(platform, tmp_path)
    api = httpx.Client(base_url=setup.url.removesuffix("/openai/v1") + "/api/v1",
                       headers={"Authorization": f"Bearer {setup.key}"}, timeout=30)
    client = openai.OpenAI(base_url=setup.url, api_key=setup.key, max_retries=0)
    second_job = second.removeprefix("job:").removesuffix("@1")
    first = next(m.id for m in client.models.list()  # the setup's LoRA checkpoint, by its ft: id
                 if m.id.endswith(":ckpt-step-1") and not m.id.endswith(f":{second_job}:ckpt-step-1"))
    created = api.post("/deployments", json={"name": "sums-live", "base_model": "chat-tiny", "adapters": [
        first, second], "min_replicas": 0, "max_replicas": 1, "idle_s": 2})
    assert created.status_code == 201, created.text
    deployment = created.json()
    assert deployment["replicas"] == []

    answers: dict[str, Any] = {}
    barrier = threading.Barrier(2)

    def ask(model: str) -> None:
        barrier.wait()
        answers[model] = client.chat.completions.create(model=model, messages=MESSAGES, temperature=0, max_tokens=8)

    threads = [threading.Thread(target=ask, args=(model,)) for model in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
    assert set(answers) == {first, second}
    replica = keys.replica_key(deployment["id"], 0)
    assert answers[first].system_fingerprint == answers[second].system_fingerprint == replica
    want_first = engine_greedy(setup.model_dir, setup.adapter_dir, max_tokens=8)
    want_second = engine_greedy(setup.model_dir, tmp_path / "iter-1" / "adapter", max_tokens=8)
    assert want_first.text != want_second.text  # two different adapters ...
    assert answers[first].choices[0].message.content == want_first.text  # ... each answering with its own
    assert answers[second].choices[0].message.content == want_second.text

    shown = api.get(f"/deployments/{deployment['id']}").json()
    assert shown["metrics"]["batches"]["max_adapters"] == 2 and shown["metrics"]["batches"]["replica"] == replica
    assert shown["metrics"]["requests"] == 2 and shown["metrics"]["p99_latency_s"] > 0
    assert shown["metrics"]["tokens_per_s"] > 0
    named = client.chat.completions.create(model="sums-live", messages=MESSAGES, temperature=0, max_tokens=8)
    assert named.choices[0].message.content == want_first.text  # the name serves its first adapter

    wait_until(lambda: api.get(f"/deployments/{deployment['id']}").json()["replicas"] == [], 40,
               "the idle replica to stop (scale to zero)")
    assert all(lease.id != replica for lease in live(platform.client))
    assert api.delete(f"/deployments/{deployment['id']}").status_code == 204


def test_a_busy_deployment_scales_out_to_a_second_replica(platform: Any, setup: Setup) -> None:
    """max_replicas 2 under a steady load of more rows than 3/4 of a replica's batch (6 callers asking n=8 each, 48
    rows against 32): a request that finds replica 0 that busy starts replica 1, which answers from the shared request
    list; every call is metered as the team's usage under the caller's key; once the load stops both scale back to
    zero and give their generation slots back."""
    import threading

    import httpx

    from contract import keys
    from contract.leases import live

    api = httpx.Client(base_url=setup.url.removesuffix("/openai/v1") + "/api/v1",
                       headers={"Authorization": f"Bearer {setup.key}"}, timeout=30)
    client = openai.OpenAI(base_url=setup.url, api_key=setup.key, max_retries=0)
    adapter = next(m.id for m in client.models.list() if m.id.endswith(":ckpt-step-1"))
    created = api.post("/deployments", json={"name": "sums-busy", "base_model": "chat-tiny", "adapters": [adapter],
                                             "min_replicas": 0, "max_replicas": 2, "idle_s": 2})
    assert created.status_code == 201, created.text
    deployment = created.json()
    replica0, replica1 = (keys.replica_key(deployment["id"], k) for k in (0, 1))

    def tokens_of_key() -> int:
        rows = api.get("/usage", params={"group_by": "key"}).json()["rows"]
        return int(next((r["tokens_generated"] for r in rows if r["name"] == "sdk"), 0))

    before = tokens_of_key()
    served: set[str] = set()
    sampled: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            try:
                answer = client.chat.completions.create(model="sums-busy", messages=MESSAGES, temperature=1.0,
                                                        max_tokens=32, n=8)
            except Exception as err:  # noqa: BLE001 - reported by the assertion below
                errors.append(err)
                return
            served.add(str(answer.system_fingerprint))
            sampled.append(answer.usage.completion_tokens if answer.usage else 0)

    callers = [threading.Thread(target=keep_asking) for _ in range(6)]
    for caller in callers:
        caller.start()
    try:
        wait_until(lambda: replica1 in served or bool(errors), 120, "replica 1 to start under load and answer")
    except AssertionError as timeout:
        shown = api.get(f"/deployments/{deployment['id']}").json()
        raise AssertionError(f"{timeout}; served by {served}; replicas {shown['replicas']}; leases "
                             f"{live(platform.client)}\n{platform.logs_tail()}") from None
    finally:
        stop.set()
        for caller in callers:
            caller.join(timeout=60)
    assert not errors, errors
    assert served == {replica0, replica1}
    wait_until(lambda: tokens_of_key() - before >= sum(sampled), 30, "every call's usage row")
    assert tokens_of_key() - before == sum(sampled) > 0
    wait_until(lambda: api.get(f"/deployments/{deployment['id']}").json()["replicas"] == [], 60,
               "both idle replicas to stop (scale to zero)")
    assert not {replica0, replica1} & {lease.id for lease in live(platform.client)}
    assert api.delete(f"/deployments/{deployment['id']}").status_code == 204
