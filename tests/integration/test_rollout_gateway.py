"""The rollout gateway on the real platform (Celery workers, Postgres, Redis, a live uvicorn API): an agent written
as a plain `openai` client loop (only `base_url` and `api_key` set) claims the episodes of an `environment.type:
gateway` job and drives each one over two chat calls (tools given; a tool call answered with a tool message, else a
follow-up user message), then posts its reward. The job trains to `succeeded`, and for every stored episode:
the trained tokens are exactly the tokens the client was sent (`token_ids`), the loss mask covers completions only,
an episode's two calls are one sequence (the second prompt holds the first call's sampled ids), and re-rendering an
opening call's messages reproduces its `prompt_token_ids` (token fidelity). Another episode's token, a team key and
an unknown episode are refused, and so are an unsupported parameter and a non-number reward, each named."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from runtime_platform import Platform, base_spec
from transformers import AutoTokenizer
from waiting import api_in_thread

from backend.db.models import Team, User
from backend.services.auth import new_api_key
from contract import keys
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "evaluate arithmetic",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}}]
ITERATIONS, PROMPTS, GROUP = 2, 2, 2


@dataclass
class Recorded:
    episode: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {messages, prompt_token_ids, token_ids}


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("gateway") / "chat", seed=0)
    with Platform.start(pg_backend, redis_url, model_dir, generation_slots=2) as running:
        yield running


def _agent_episode(claimed: dict[str, Any], url: str) -> Recorded:
    """The agent: a plain openai loop, two calls, then its reward."""
    client = openai.OpenAI(base_url=claimed["base_url"], api_key=claimed["api_key"], max_retries=0)
    recorded = Recorded(claimed["episode"])
    messages: list[dict[str, Any]] = [{"role": "user", "content": str(claimed["task"]["prompt"])}]
    for turn in range(2):
        sent = json.loads(json.dumps(messages))
        answer = client.chat.completions.create(model="any-name", messages=sent, tools=TOOLS,  # type: ignore[arg-type]
                                                max_tokens=12, temperature=1.0, seed=turn)
        choice = answer.choices[0]
        recorded.calls.append({"messages": sent, "prompt_token_ids": (answer.model_extra or {})["prompt_token_ids"],
                               "token_ids": (choice.model_extra or {})["token_ids"]})
        message: dict[str, Any] = {"role": "assistant", "content": choice.message.content}
        if choice.message.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in choice.message.tool_calls]
        messages.append(message)
        if choice.message.tool_calls:
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "4"} for c in choice.message.tool_calls]
        else:
            messages.append({"role": "user", "content": "Check it."})
    with pytest.raises(openai.BadRequestError, match="response_format"):  # named, and never reaches the instance
        client.chat.completions.create(model="m", messages=messages,  # type: ignore[call-overload]
                                       response_format={"type": "json_object"})
    bad = httpx.post(f"{url}/api/v1/rollouts/{claimed['episode']}/reward", json={"reward": "high"},
                     headers={"Authorization": f"Bearer {claimed['api_key']}"}, timeout=30)
    assert bad.status_code == 400 and "reward must be a finite number" in bad.text, bad.text
    final = messages[-2]["content"] or ""
    reward = httpx.post(f"{url}/api/v1/rollouts/{claimed['episode']}/reward", json={"reward": float(len(final) % 3)},
                        headers={"Authorization": f"Bearer {claimed['api_key']}"}, timeout=30)
    assert reward.status_code == 200, reward.text
    return recorded


def _agents(platform: Platform, job_id: int, url: str, key: str, out: list[Recorded], errors: list[str]) -> None:
    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                claim = httpx.post(f"{url}/api/v1/jobs/{job_id}/rollouts/claim",
                                   headers={"Authorization": f"Bearer {key}"}, timeout=30)
                assert claim.status_code in (200, 204), claim.text
                if claim.status_code == 204:
                    if platform.job(job_id).status in (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled):
                        return
                    stop.wait(0.2)
                    continue
                out.append(_agent_episode(claim.json(), url))
        except Exception as exc:  # noqa: BLE001 - surfaced by the test's assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        platform.wait_done(job_id, timeout_s=600)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def _render_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """What the gateway renders for these messages and TOOLS (the tools in the template, or a system note)."""
    from workers.core.episode import TOOLS_SYSTEM, describe_tools

    if "tools" in str(tokenizer.chat_template):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, tools=TOOLS)
    else:
        note = {"role": "system", "content": TOOLS_SYSTEM.format(tools=describe_tools(TOOLS))}
        text = tokenizer.apply_chat_template([note, *messages], tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_plain_openai_agent_trains_through_the_gateway(platform: Platform) -> None:
    backend = platform.backend
    with backend.session() as session:
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        key = new_api_key(session=session, team=team, creator=user, name="agent", scopes=["read", "write"])[1]
    spec = base_spec(environment={"type": "gateway", "max_turns": 4, "max_episode_tokens": 200},
                     algorithm={"name": "grpo", "group_size": GROUP},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS, "micro_batch_size": 8,
                               "lr": 1e-3})
    del spec["reward"]  # an environment job's reward: the agent's (and environment.grader's, if any)
    job_id = platform.submit_as(platform.team, platform.user, spec)
    recorded: list[Recorded] = []
    errors: list[str] = []
    with api_in_thread(backend.settings) as url:
        _agents(platform, job_id, url, key, recorded, errors)
        # an episode's routes take its own token only
        other = recorded[0]
        refused = httpx.get(f"{url}/api/v1/rollouts/{other.episode}/v1/models",
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert refused.status_code == 401, refused.text
        missing = httpx.get(f"{url}/api/v1/rollouts/ep-nope/v1/models", headers={"Authorization": "Bearer x"},
                            timeout=30)
        assert missing.status_code == 404, missing.text
    assert not errors, errors
    assert len(recorded) >= ITERATIONS * PROMPTS * GROUP

    tokenizer = AutoTokenizer.from_pretrained(_model_dir(platform))
    # token fidelity: an opening call's prompt ids are the template's rendering of its messages, tokenised; a
    # continuing call's are the previous prompt + the sampled ids + the tokenised rest, whose text is the rendering's
    openings = [episode.calls[0] for episode in recorded]
    assert all(_render_ids(tokenizer, c["messages"]) == c["prompt_token_ids"] for c in openings)
    same_text = exact_ids = 0
    for episode in recorded:
        first, second = episode.calls
        head = first["prompt_token_ids"] + first["token_ids"]
        assert second["prompt_token_ids"][:len(head)] == head  # the agent kept its history: one sequence
        rendered = tokenizer.decode(_render_ids(tokenizer, second["messages"]), skip_special_tokens=False)
        same_text += tokenizer.decode(second["prompt_token_ids"], skip_special_tokens=False) == rendered
        exact_ids += _render_ids(tokenizer, second["messages"]) == second["prompt_token_ids"]
    print(f"token fidelity: openings {len(openings)}/{len(openings)} ids re-rendered exactly; continuing calls "
          f"{same_text}/{len(recorded)} decode to the template's rendering ({exact_ids} also re-tokenise to the "
          "same ids: the rest keep the sampled tokens instead)")

    headers = backend.auth_headers(platform.user, platform.team)
    with backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        by_episode = {f"ep-{s['sample_id']}": s for s in samples}
        checked = merged = 0
        for episode in recorded:
            sample = by_episode.get(episode.episode)
            if sample is None:
                continue  # not among the stored samples
            tokens = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers)
            assert tokens.status_code == 200, tokens.text
            record = tokens.json()
            first, second = episode.calls
            head = first["prompt_token_ids"] + first["token_ids"]
            if second["prompt_token_ids"][:len(head)] == head:  # one sequence: both completions trained
                merged += 1
                context = second["prompt_token_ids"][len(head):]
                trained = [*first["token_ids"], *context, *second["token_ids"]]
                mask = [1] * len(first["token_ids"]) + [0] * len(context) + [1] * len(second["token_ids"])
            else:  # the prefix broke: the last call's sequence is trained
                trained, mask = second["token_ids"], [1] * len(second["token_ids"])
            assert record["pieces"] == [tokenizer.decode([t], skip_special_tokens=False) for t in trained]
            assert record["loss_mask"] == mask
            checked += 1
    assert checked >= 1 and merged == checked, (len(samples), checked, merged)
    print(f"episodes checked {checked}, merged into one sequence {merged}")
    stats: dict[bytes, bytes] = platform.client.hgetall(keys.generator_stats(job_id))  # type: ignore[assignment]
    print({k.decode(): v.decode() for k, v in stats.items() if k.startswith(b"gateway")})


def _model_dir(platform: Platform) -> str:
    from sqlalchemy import select

    from backend.db.models import Model

    with platform.backend.session() as session:
        return str(session.scalar(select(Model.path).where(Model.team_id == platform.team.id, Model.name == "tiny")))
