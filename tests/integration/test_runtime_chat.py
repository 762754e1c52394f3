"""A BPE chat model (chat-qwen2-1m: byte-level BPE, ChatML template, two EOS ids) trained on an uploaded OpenAI
`messages` dataset in sync and async mode on the real platform: prompts rendered with the model's chat template,
full fine-tuning, reward rising. The reward (`^[0-9]`: the answer starts with a digit) is one a random 1M model hits
~10% of the time and learns within a few steps at lr 0.03."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from backend.db import JobSample, Team, User
from backend.services.datasets import create_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def chat_platform(pg_backend, redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    from runtime_platform import Platform

    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("chat") / "qwen", seed=0)
    with Platform.start(pg_backend, redis_url, model_dir) as running:
        rows = [{"messages": [{"role": "user", "content": f"{i}+{i % 7}="},
                              {"role": "assistant", "content": str(i + i % 7)}], "level": i % 3} for i in range(64)]
        with pg_backend.session() as session:
            team, user = session.get(Team, running.team.id), session.get(User, running.user.id)
            dataset = create_dataset(session=session, team=team, user=user, name="chat",
                                     content="".join(json.dumps(r) + "\n" for r in rows).encode(),
                                     artifact_dir=pg_backend.settings.artifacts, filename="chat.jsonl")
            running.dataset_id = dataset.id  # type: ignore[attr-defined]
        running.model_dir = model_dir  # type: ignore[attr-defined]
        yield running


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_chat_model_learns_in_sync_and_async(chat_platform, mode: str) -> None:
    job_id = chat_platform.submit(
        mode=mode,
        dataset={"id": chat_platform.dataset_id, "builtin": None, "num_prompts": 256, "eval_prompts": 0,
                 "system_prompt": "Answer with digits."},
        reward={"type": "regex", "params": {"pattern": "^[0-9]"}},
        # lr 0.03 moves a 1M model far in one step: async trains on samples one version old, whose ratios the
        # default clip (0.2) would cut off, so the clip is wide; the importance weight stays capped (is_cap 2)
        algorithm={"name": "grpo", "group_size": 8, "clip_eps": 0.8},
        generation={"instances": 1, "batch_size": 32, "max_tokens": 3, "temperature": 1.0},
        training={"iterations": 12, "prompts_per_iteration": 4, "micro_batch_size": 32, "lr": 0.03,
                  "eval_every": 0},
    )
    chat_platform.wait_done(job_id, timeout_s=600)
    rows = chat_platform.iterations(job_id)
    rewards = [row["reward_mean"] for row in rows]
    assert len(rewards) == 12
    assert sum(rewards[-3:]) / 3 >= sum(rewards[:3]) / 3 + 0.3, rewards  # it learns
    model_bytes = (chat_platform.model_dir / "model.safetensors").stat().st_size
    assert rows[-1]["weight_sync_bytes"] >= 0.95 * model_bytes  # full fine-tuning ships every weight
    with chat_platform.backend.session() as session:
        samples = list(session.scalars(select(JobSample).where(JobSample.job_id == job_id)))
    assert samples and all(s.prompt.startswith("<|im_start|>system\nAnswer with digits.<|im_end|>\n<|im_start|>user\n")
                           and s.prompt.endswith("<|im_start|>assistant\n") for s in samples)
    assert all(s.length == 3 for s in samples if s.truncated)  # truncated = ran into max_tokens
    assert "lengths_truncated" in rows[-1] and 0.0 <= rows[-1]["truncated_fraction"] <= 1.0
