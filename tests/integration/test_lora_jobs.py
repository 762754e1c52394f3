"""LoRA jobs on the platform (real Postgres, Redis, Celery workers): LoRA jobs learn in sync and async, a LoRA sync
ships only the adapter, and the exported adapter (peft) and merged model (transformers) generate greedily
what the platform's engine generates with the last weights; LoRA with 2 trainer ranks; vLLM jobs (LoRA jobs sharing
one process, a full fine-tune updating weights in flight by default)."""

from __future__ import annotations

import importlib.util
import io
import statistics
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from sqlalchemy import select
from transformers import AutoModelForCausalLM

from backend.db import GenerationInstance, JobSample
from backend.services.exports import export_root, tar_stream
from contract.spec import LoraSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.models import lora as lora_io

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DIGITS = {"type": "regex", "params": {"pattern": "[0-9]"}}  # a random model earns some reward: a learning signal
LORA = {"rank": 8, "alpha": 16.0}
ITERATIONS = 8


def learning_job(platform: Any, mode: str, lora: dict[str, Any] | None, **training: Any) -> int:
    return platform.submit(mode=mode, reward=DIGITS, algorithm={"group_size": 4}, checkpoint={"interval": 4},
                           training={"iterations": ITERATIONS, "prompts_per_iteration": 4, "lora": lora,
                                     "lr": 1e-2 if lora else 1e-3, **training})


def model_bytes(model_dir: Path) -> int:
    return (model_dir / "model.safetensors").stat().st_size


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lora_jobs_learn(platform: Any, tiny_model_dir: Path, mode: str) -> None:
    """(Full fine-tuning learning in sync and async, and its full-size syncs: tests/integration/test_runtime_chat.py.)
    LoRA jobs run on shared generation instances by default (tests/integration/test_shared_instances.py)."""
    job_id = learning_job(platform, mode, LORA)
    job = platform.wait_done(job_id, timeout_s=600)
    assert job.error is None
    rows = platform.iterations(job_id)
    rewards = [r["reward_mean"] for r in rows]
    assert len(rows) == ITERATIONS and statistics.mean(rewards[-3:]) > statistics.mean(rewards[:2]), rewards
    synced = rows[-1]["weight_sync_bytes"]
    assert 0 < synced < 0.15 * model_bytes(tiny_model_dir), synced  # the adapter alone: a small fraction


def untar(chunks: Any, out: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        archive.extractall(out, filter="data")
    return out / "export"


def greedy_engine(engine: HFEngine, prompts: list[list[int]]) -> list[list[int]]:
    greedy = SamplingParams(temperature=0, max_tokens=12)
    requests = [GenerationRequest(str(i), p, greedy) for i, p in enumerate(prompts)]
    found = {r.request_id: r.response_ids for r in engine.generate_stream(requests)}
    return [found[str(i)] for i in range(len(prompts))]


def greedy_model(model: Any, prompts: list[list[int]], eos: int) -> list[list[int]]:
    out = []
    for prompt in prompts:
        with torch.no_grad():
            mask = torch.ones(1, len(prompt), dtype=torch.long)
            ids = model.generate(input_ids=torch.tensor([prompt]), attention_mask=mask, max_new_tokens=12,
                                 do_sample=False, eos_token_id=eos, pad_token_id=eos)
        row = ids[0, len(prompt):].tolist()
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def test_exported_adapter_and_merged_model_generate_what_the_engine_does(platform: Any, tiny_model_dir: Path,
                                                                         tmp_path: Path) -> None:
    job_id = learning_job(platform, "sync", LORA, weight_sync="p2p")  # p2p: the adapter over torch.distributed
    assert platform.wait_done(job_id, timeout_s=600).error is None
    job_dir = Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id)
    checkpoint = job_dir / "checkpoints" / f"iter_{ITERATIONS:06d}"
    adapter_root, _ = export_root(checkpoint, "adapter") or pytest.fail("no adapter in the checkpoint")
    adapter_dir = untar(tar_stream(adapter_root, "export"), tmp_path / "adapter")
    merged_root, members = export_root(checkpoint, "merged") or pytest.fail("no merged model")
    merged_dir = untar(tar_stream(merged_root, "export", members), tmp_path / "merged")
    assert not (merged_dir / "trainer_state.pt").exists() and (merged_dir / "model.safetensors").is_file()
    # the platform's engine with the last weights: the base model + the last version's adapter, applied in place
    engine = HFEngine(tiny_model_dir, max_batch_size=4, lora=LoraSpec(**LORA))
    engine.load_tensors(ITERATIONS, lora_io.read_adapter(adapter_dir))
    prompts = [engine.encode(text) for text in ("12+35=", "7*8=", "x", "rep 3 ab:")]
    want = greedy_engine(engine, prompts)
    eos = int(engine.tokenizer.eos_token_id)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    assert greedy_model(PeftModel.from_pretrained(base, adapter_dir).eval(), prompts, eos) == want
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    assert greedy_model(merged, prompts, eos) == want
    assert want != greedy_engine(HFEngine(tiny_model_dir, max_batch_size=4), prompts)  # the adapter changed it


def test_lora_with_two_trainer_ranks(platform: Any) -> None:
    job_id = platform.submit(mode="sync", reward=DIGITS, training={"iterations": 3, "prompts_per_iteration": 4,
                                                                  "devices": 2, "lora": LORA, "lr": 1e-2})
    job = platform.wait_done(job_id, timeout_s=600)
    assert job.error is None
    rows = platform.iterations(job_id)
    assert len(rows) == 3 and all(r["weight_sync_bytes"] > 0 for r in rows)


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_lora_jobs_on_the_vllm_engine_share_one_vllm_process(platform: Any) -> None:
    """Two vLLM LoRA jobs run on one shared vLLM process (one base model; each weight version of each job is its own
    LoRARequest of the adapter its trainer published) and both train every iteration on their own samples."""
    vllm = {"engine": "vllm", "instances": 1, "vllm": {"max_model_len": 128}}
    jobs = [platform.submit(mode="async", reward=DIGITS, seed=seed, generation=vllm,
                            training={"iterations": 3, "prompts_per_iteration": 4, "lora": LORA, "lr": 1e-2})
            for seed in (0, 1)]
    for job_id in jobs:
        assert platform.wait_done(job_id, timeout_s=600).error is None
        rows = platform.iterations(job_id)
        assert len(rows) == 3 and all(0 < r["weight_sync_bytes"] < 1_000_000 for r in rows)
        assert max(r["staleness_mean"] for r in rows) <= 1
        assert any("shared generation instance" in e for e in platform.events(job_id))
        with platform.backend.session() as session:
            samples = session.scalars(select(JobSample).where(JobSample.job_id == job_id)).all()
        assert samples and {s.instance_id for s in samples} <= set(platform.statuses(job_id))
    with platform.backend.session() as session:  # both instances named the same shared process in their rows
        tasks = set(session.scalars(select(GenerationInstance.celery_task_id).where(
            GenerationInstance.job_id.in_(jobs))).all())
    assert len(tasks) == 1 and next(iter(tasks)).startswith("shared:"), tasks


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_an_async_vllm_job_with_defaults_updates_weights_in_flight(platform: Any) -> None:
    """Full fine-tuning on vLLM with generation.partial_rollouts unset: the instance takes vLLM's measured default
    (in-flight weight updates) and says so, and every trained token is within max_staleness (1) of its iteration."""
    generation = {"engine": "vllm", "instances": 1, "max_tokens": 48, "vllm": {"max_model_len": 128}}
    job_id = platform.submit(mode="async", reward=DIGITS, generation=generation,
                             training={"iterations": 3, "prompts_per_iteration": 4, "lr": 1e-3})
    assert platform.wait_done(job_id, timeout_s=600).error is None
    [chosen] = [e for e in platform.events(job_id) if "in-flight weight updates" in e]
    assert "gen-0: in-flight weight updates on" in chosen and "vllm engine's measured default" in chosen
    assert "with max_staleness 1 generation runs one iteration ahead" in chosen  # where the gain is smaller
    rows = platform.iterations(job_id)
    assert len(rows) == 3 and all(r["weight_sync_bytes"] > 1_000_000 for r in rows)  # full weights, not an adapter
    assert all(0 <= r["token_staleness_max"] <= 1 for r in rows)


def test_lora_job_on_a_bpe_chat_model(platform: Any, tmp_path: Path) -> None:
    """A Qwen2 chat model with a BPE tokenizer (a chat-* preset) trains its adapter through the platform."""
    from backend.db import Model
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path / "chat-qwen2-1m", seed=0)
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="chat-qwen2-lora", path=str(model_dir),
                          created_by_id=platform.user.id))
    job_id = platform.submit(model="chat-qwen2-lora", mode="sync", reward=DIGITS,
                             training={"iterations": 3, "prompts_per_iteration": 4, "lora": LORA, "lr": 1e-2})
    assert platform.wait_done(job_id, timeout_s=600).error is None
    rows = platform.iterations(job_id)
    assert len(rows) == 3 and all(0 < r["weight_sync_bytes"] < 0.15 * model_bytes(model_dir) for r in rows)
