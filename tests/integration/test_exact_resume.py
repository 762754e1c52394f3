"""Exact resume: a job whose driver is killed (kill -9) mid-run resumes from its checkpoint and trains, for every
iteration after the checkpoint, the same prompts as an uninterrupted twin with the same seed (CPU).

Sync: the same prompts with the same responses and the same loss. The sampling seed of a request leaves the driver
epoch out (workers/core/prompts.py); the prompt schedule, the trainer's RNG and optimizer state come from the
checkpoint. The platform keeps its artifacts in S3-compatible object storage (a SeaweedFS server, tests/object_store.py)
and the killed jobs' local checkpoints are deleted with their drivers: the resume reads the checkpoint from the store.

Async: every checkpoint records the buffer dispatched ahead (workers/training/dispatch_record.py: the iterations with
their prompt ids in slot order and sampling seeds); after the restart the same prompts are dispatched again, so every
iteration trains the twin's prompts in the twin's slot order (responses may differ: which weights version generated
a buffered sample depends on timing), and the resume says the recorded buffer was dispatched again. The prompt
schedule is the same in every mode (workers/core/prompts.py), so the sync twin is the async job's twin too.

CI cost: three short jobs (one twin, two killed) one after the other on one platform (at once, on a loaded 2-core
machine, a starting driver's 5 s heartbeat lapsed and the controller failed the job)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from runtime_platform import Platform, wait_until
from sqlalchemy import select

from backend.db import JobSample
from contract.artifact_store import ArtifactStore
from contract.artifact_store.checkpoints import PREFIX, CheckpointMirror
from contract.artifact_store.config import open_store
from contract.liveness import Timeouts
from contract.spec import JobSpec
from workers.core.prompts import epoch_of
from workers.datasets import load_dataset
from workers.training.dispatch_record import FILE as DISPATCH_RECORD

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import shared_server  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAST = Timeouts(instance_heartbeat_s=8.0, instance_start_s=120.0, driver_start_s=120.0, driver_heartbeat_ttl_s=5.0)
ITERATIONS, CHECKPOINT, STALENESS = 5, 2, 2
SHAPE = {"training": {"iterations": ITERATIONS, "prompts_per_iteration": 2, "micro_batch_size": 4, "lr": 1e-3},
         "generation": {"instances": 1, "batch_size": 16, "max_tokens": 8}, "checkpoint": {"interval": CHECKPOINT},
         "reward": {"type": "regex", "params": {"pattern": "[0-5]"}},  # rewards that differ: real gradients
         "failover": {"max_restarts": 3, "backoff_s": 1.0}}


@pytest.fixture(scope="module")
def resume_platform(pg_backend, redis_url: str, tiny_model_dir: Path):
    store = shared_server()
    with Platform.start(pg_backend, redis_url, tiny_model_dir, timeouts=FAST,
                        extra_env={"STREAMRL_DRIVER_HEARTBEAT_TTL_S": "5", **store.env("streamrl/resume")}
                        ) as platform:
        yield platform


def _trained(platform: Platform, job_id: int) -> dict[int, list[tuple[str, str]]]:
    """Per iteration: the (prompt, response) pairs of its samples from the newest driver epoch that trained it (an
    iteration the killed driver trained after the checkpoint is trained again by the next one), sorted."""
    out: dict[int, dict[int, list[tuple[str, str]]]] = {}
    with platform.backend.session() as session:
        for row in session.scalars(select(JobSample).where(JobSample.job_id == job_id)):
            by_epoch = out.setdefault(row.iteration, {})
            by_epoch.setdefault(epoch_of(row.sample_id), []).append((row.prompt, row.response))
    return {it: sorted(by_epoch[max(by_epoch)]) for it, by_epoch in out.items()}


def _slot_prompts(platform: Platform, job_id: int) -> dict[int, list[str]]:
    """Per iteration: its prompts in slot order, from the newest driver epoch that trained it."""
    out: dict[int, dict[int, dict[int, str]]] = {}
    with platform.backend.session() as session:
        for row in session.scalars(select(JobSample).where(JobSample.job_id == job_id)):
            slot = int(row.sample_id.split(":")[1].split("~")[0])
            out.setdefault(row.iteration, {}).setdefault(epoch_of(row.sample_id), {})[slot] = row.prompt
    return {it: [by_slot[k] for k in sorted(by_slot)] for it, epochs in out.items()
            for by_slot in [epochs[max(epochs)]]}


def _kill_after_checkpoint(platform: Platform, job_id: int, store: ArtifactStore) -> None:
    """Kill the driver once the job is past the checkpoint and the checkpoint is complete in the store: its upload
    runs behind training (a host lost before it ends costs the job the time since the previous stored checkpoint)."""
    mirror = CheckpointMirror(store, platform.job(job_id).team_id, job_id)
    stored = f"{PREFIX}{CHECKPOINT:06d}"
    wait_until(lambda: platform.job(job_id).current_iteration >= CHECKPOINT + 1 and stored in mirror.names(), 240,
               "past the checkpoint, and the checkpoint in the store", platform.logs_tail)
    pid = platform.driver_pid(job_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # the host's disk is lost: the checkpoint comes from the object store (the content cache is shared with the
    # jobs still running here; tests/integration/test_object_store_hosts.py wipes a whole host)
    shutil.rmtree(Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id) / "checkpoints")


def test_kill_9_and_resume_trains_as_the_uninterrupted_twin(resume_platform: Platform, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    platform = resume_platform
    for name, value in shared_server().env().items():  # the platform's credentials, to read its store as a host
        monkeypatch.setenv(name, value)
    store = open_store(platform.env["STREAMRL_ARTIFACTS"], tmp_path / "cache")
    twin = platform.submit(name="twin", mode="sync", **SHAPE)
    platform.wait_done(twin, timeout_s=300)
    killed = platform.submit(name="killed", mode="sync", **SHAPE)
    _kill_after_checkpoint(platform, killed, store)
    platform.wait_done(killed, timeout_s=300)
    async_killed = platform.submit(name="async-killed", mode="async", max_staleness=STALENESS, **SHAPE)
    _kill_after_checkpoint(platform, async_killed, store)
    platform.wait_done(async_killed, timeout_s=300)

    # sync: the same prompts, answered the same way, with the same loss
    job = platform.job(killed)
    assert job.driver_epoch >= 1 and job.driver_failures >= 1  # it really was restarted
    assert any("driver resumed from checkpoint at iteration" in e for e in platform.events(killed))
    twin_rows, killed_rows = platform.iterations(twin), platform.iterations(killed)
    assert len(killed_rows) == len(twin_rows) == ITERATIONS
    twin_samples, killed_samples = _trained(platform, twin), _trained(platform, killed)
    for it in range(CHECKPOINT + 1, ITERATIONS + 1):
        assert killed_samples[it] == twin_samples[it], it
        assert killed_rows[it - 1]["loss"] == pytest.approx(twin_rows[it - 1]["loss"], rel=1e-5, abs=1e-6), it
    assert any(row["grad_norm"] > 0 for row in twin_rows)  # the weights moved: the comparison means something

    # async: the twin's prompts in the same slots, every iteration; the recorded buffer dispatched again
    job = platform.job(async_killed)
    assert job.driver_epoch >= 1 and job.driver_failures >= 1
    resumed = [e for e in platform.events(async_killed) if "driver resumed from checkpoint" in e]
    assert resumed and "dispatched again with the recorded prompts and sampling seeds" in resumed[-1], resumed
    twin_prompts, killed_prompts = _slot_prompts(platform, twin), _slot_prompts(platform, async_killed)
    assert sorted(killed_prompts) == sorted(twin_prompts) == list(range(1, ITERATIONS + 1))
    for it in range(1, ITERATIONS + 1):
        assert killed_prompts[it] == twin_prompts[it], it
    spec = JobSpec.model_validate(job.spec)
    text = {str(row["prompt_id"]): row["prompt"] for row in load_dataset(spec.dataset, seed=spec.seed)}
    checkpoints = Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(async_killed) / "checkpoints"
    records = [json.loads(p.read_text()) for p in sorted(checkpoints.glob(f"iter_*/{DISPATCH_RECORD}"))]
    buffered = {int(n): r["prompt_ids"] for record in records for n, r in record["iterations"].items()}
    assert buffered and all(len(r["iterations"]) == min(STALENESS, ITERATIONS - r["trained"]) for r in records)
    for it, prompt_ids in buffered.items():  # what each checkpoint recorded is what the twin trained
        assert [text[p] for p in prompt_ids] == twin_prompts[it], it
