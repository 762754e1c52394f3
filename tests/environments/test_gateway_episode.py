"""Gateway episodes on the instance's side (workers/runtime/gateway.py, workers/core/gateway.py) with real Redis, the
tiny BPE chat model and the hf engine: calls are rendered with the chat template and sampled; a call that extends the
previous prompt + completion joins its sequence (completions trained, the rest context; a continuing call's prompt
holds the sampled ids, not their re-tokenised text), one that rewrites history starts a new sequence; the agent's
reward and the episode's oldest version make the sample; bad calls get their own error reply, and the spec refuses
a gateway job that has no generation instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
import redis
from transformers import AutoTokenizer

from contract import gateway as keys
from contract.sample import PromptRequest
from contract.spec import EnvironmentSpec, JobSpec
from workers.core.episode import episode_record, episode_sample
from workers.core.gateway import Call, Choice, assemble, oldest_version, to_episode
from workers.core.rollout import sampling_params
from workers.generation.engines.hf import HFEngine
from workers.models import build_tiny_model
from workers.runtime.gateway import GatewayEpisodes

JOB = 987_654


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("gw") / "model")


@pytest.fixture
def client(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    yield client
    for key in client.scan_iter(f"streamrl:job:{JOB}:*"):
        client.delete(key)
    client.close()


def _ask(client: Any, gateway: GatewayEpisodes, engine: HFEngine, episode: str, call_id: str,
         body: dict[str, Any]) -> dict[str, Any]:
    client.lpush(keys.calls(JOB, "i0"), json.dumps({"call": call_id, "episode": episode, "body": body}))
    requests, _ = gateway.poll(engine.version, force=True)
    for result in engine.generate_stream(iter(requests)):
        assert gateway.complete(result)
    answer = client.blpop([keys.reply(call_id)], timeout=5)
    assert answer is not None
    return dict(json.loads(answer[1]))


def test_calls_assemble_into_sequences_and_one_sample(chat_model: Path, client: Any) -> None:
    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    spec = EnvironmentSpec(type="gateway", max_turns=3, max_episode_tokens=300)
    job = JobSpec(model=str(chat_model), dataset={"builtin": "arithmetic"}, environment=spec.model_dump(),
                  generation={"max_tokens": 8})
    gateway = GatewayEpisodes(client, JOB, "i0", tokenizer, spec, sampling_params(job.generation))
    engine = HFEngine(str(chat_model), max_batch_size=4, device="cpu")
    request = PromptRequest(sample_id="0:1:0", group_id="0:1", prompt_id="1", iteration=0, prompt_ids=[1],
                            prompt_text="What is 2 + 2?", meta={"prompt_id": "1"}, seed=1)
    episode = gateway.open(request)
    assert client.rpop(keys.open_episodes(JOB)).decode() == episode

    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 2?"}]
    first = _ask(client, gateway, engine, episode, "c1", {"messages": messages, "seed": 3, "n": 2})
    assert len(first["choices"]) == 2
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert first["prompt_token_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]  # fidelity
    # the agent continues with choice 1: its prompt extends prompt + that completion (tokens, not re-tokenised text)
    chosen = first["choices"][1]
    messages.append({"role": "assistant", "content": chosen["text"]})
    messages.append({"role": "user", "content": "Check it."})
    second = _ask(client, gateway, engine, episode, "c2", {"messages": messages, "max_tokens": 6})
    head = first["prompt_token_ids"] + chosen["token_ids"]
    assert second["prompt_token_ids"][:len(head)] == head  # the sampled tokens, never their re-tokenised text
    added = tokenizer.decode(second["prompt_token_ids"][len(head):], skip_special_tokens=False)
    assert added.endswith("<|im_start|>user\nCheck it.<|im_end|>\n<|im_start|>assistant\n"), added
    rewritten = [{"role": "user", "content": "Forget that. What is 3 + 3?"}]
    third = _ask(client, gateway, engine, episode, "c3", {"messages": rewritten})
    bad = _ask(client, gateway, engine, episode, "c4", {"messages": [{"role": "user", "content": "x"}]})
    assert "max_turns=3" in bad["error"] and bad["status"] == 400  # its own reply; the episode goes on

    client.hset(keys.episode(episode), "reward", json.dumps(0.5))
    client.lpush(keys.ended(JOB, "i0"), episode)
    _, finished = gateway.poll(engine.version, force=True)
    assert len(finished) == 1
    done = finished[0]
    assert done.sequences == 2  # c1 + c2 merged; the rewrite c3 alone
    sample = episode_sample(done.episode, tokenizer, job_id=JOB, version=done.version, instance_id="i0")
    # the trained sequence is the last one: the rewritten call alone, its completion trained
    assert sample.prompt_ids == third["prompt_token_ids"]
    assert sample.response_ids == third["choices"][0]["token_ids"]
    assert sample.loss_mask == [1] * len(sample.response_ids)
    assert sample.behaviour_logprobs == pytest.approx(third["choices"][0]["logprobs"])
    assert sample.reward == 0.5 and sample.reward_error is None
    record = episode_record(sample)
    assert record is not None and record["turn_versions"] == [engine.version] and record["turn_spans"] == [
        [0, len(sample.response_ids)]]


def test_assembly_merges_prefix_extending_calls_and_splits_at_a_rewrite() -> None:
    request = PromptRequest(sample_id="0:2:0", group_id="0:2", prompt_id="2", iteration=0, prompt_ids=[1],
                            prompt_text="p", meta={}, seed=0)
    one = Call([{"role": "user", "content": "a"}], "A", [1, 2], version=3,
               choices=[Choice([7, 8], [-0.1, -0.2], "x", "stop"), Choice([9], [-0.3], "y", "stop")])
    two = Call([], "B", [1, 2, 9, 5, 6], version=4, choices=[Choice([10, 11], [-0.4, -0.5], "z", "stop")])
    three = Call([], "C", [1, 2, 9, 5, 6, 10, 11, 12], version=5, choices=[Choice([13], [-0.6], "w", "stop")])
    rewrite = Call([], "D", [1, 4], version=6, choices=[Choice([14], [-0.7], "v", "stop")])
    sequences = assemble([one, two, three])
    assert len(sequences) == 1 and sequences[0].choices == [1, 0, 0]  # the agent went on with choice 1
    episode = to_episode(request, sequences[0], started_at=0.0, finished_at=1.0)
    assert episode.prompt_ids == [1, 2]
    assert episode.response_ids == [9, 5, 6, 10, 11, 12, 13]
    assert episode.loss_mask == [1, 0, 0, 1, 1, 0, 1]  # completions only
    assert episode.logprobs == [-0.3, 0.0, 0.0, -0.4, -0.5, 0.0, -0.6]
    assert oldest_version(sequences[0]) == 3
    assert episode.turn_versions == [3, 4, 5]  # each call's version, shown per call in the sample browser
    split = assemble([one, two, rewrite])
    assert [len(s.calls) for s in split] == [2, 1]
    assert to_episode(request, split[-1], started_at=0.0, finished_at=1.0).response_ids == [14]


def test_a_gateway_job_needs_generation_instances(chat_model: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match="mode must be sync or async"):
        JobSpec(model=str(chat_model), dataset={"builtin": "arithmetic"}, mode="colocated",
                environment={"type": "gateway"})
    with pytest.raises(pydantic.ValidationError, match="takes no `params`"):
        EnvironmentSpec(type="gateway", params={"x": 1})


def test_episode_ids_are_unique_across_jobs_and_a_reopened_one_starts_clean(chat_model: Path, client: Any) -> None:
    """Sample ids (`0:0:1`) repeat in every job: an episode keyed by them alone found another job's hash, with its
    posted reward (seen in CI: a gateway episode trained with a stale reward 1.0 its agent never returned)."""
    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    spec = EnvironmentSpec(type="gateway", max_turns=3, max_episode_tokens=300)
    job = JobSpec(model=str(chat_model), dataset={"builtin": "arithmetic"}, environment=spec.model_dump(),
                  generation={"max_tokens": 8})
    request = PromptRequest(sample_id="0:0:1", group_id="0:0", prompt_id="0", iteration=0, prompt_ids=[1],
                            prompt_text="What is 1 + 1?", meta={"prompt_id": "0"}, seed=1)
    first = GatewayEpisodes(client, JOB, "i0", tokenizer, spec, sampling_params(job.generation)).open(request)
    client.hset(keys.episode(first), "reward", json.dumps(1.0))  # that job's agent posted its reward
    second = GatewayEpisodes(client, JOB + 1, "i0", tokenizer, spec, sampling_params(job.generation)).open(request)
    assert second != first and client.hget(keys.episode(second), "reward") is None
    again = GatewayEpisodes(client, JOB, "i1", tokenizer, spec, sampling_params(job.generation)).open(request)
    assert again == first and client.hget(keys.episode(again), "reward") is None  # dispatched again: a clean episode
