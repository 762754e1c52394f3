"""The job driver (`training.run_job`): lifecycle shared by every mode, and the entry point.

    driver = setup_driver(ctx)       # colocated | sync | async
    driver.run()                     # starting -> running -> succeeded | failed | cancelled

The loop reads as verbs: for each iteration, `iteration(it)` generates (or consumes the stream) and trains; then
the base publishes weights, records metrics, samples and spans, and checkpoints. Errors become the job's `error`
(status failed) with a message that says what went wrong; a cancelled job stops at the next check.
"""

from __future__ import annotations

import logging
import time
import traceback
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from backend.db import Job, JobStatus
from backend.db.session import session_scope
from backend.services.job_data import record_checkpoint, record_iteration, record_samples
from backend.services.jobs import record_event, transition_job
from backend.services.live import publish_live
from contract.liveness import beat_driver
from contract.sample import Sample
from workers.runtime import components, metrics
from workers.runtime.context import JobContext, JobSetupError, load_context
from workers.runtime.dispatching import PromptDispatcher
from workers.runtime.telemetry import Heartbeat, SpanRecorder
from workers.stream import expire_job, keys
from workers.training import checkpoint as ckpt
from workers.training.trainer import Trainer
from workers.weightsync import SharedStoreTransport

log = logging.getLogger(__name__)
SAMPLES_KEPT_PER_ITERATION = 8
PAUSE_POLL_S = 0.5


class JobCancelled(Exception):
    pass


class Driver(ABC):
    def __init__(self, ctx: JobContext):
        self.ctx, self.spec, self.job_id = ctx, ctx.spec, ctx.job_id
        self.trainer = Trainer(ctx.model_dir, ctx.spec, components.worker_device())
        self.transport = SharedStoreTransport(ctx.weights_dir, ctx.redis, ctx.job_id, template_dir=ctx.model_dir)
        self.spans = SpanRecorder(ctx.job_id, "trainer", ctx.redis)
        self.rows = components.load_rows(ctx)
        tokenizer = self.trainer.tokenizer
        self.dispatcher = PromptDispatcher(ctx.redis, ctx.job_id, ctx.spec, self.rows,
                                           encode=lambda text: tokenizer(text)["input_ids"])
        self.iteration_started = time.time()

    # -- the loop -----------------------------------------------------------------------------------------------------
    def run(self) -> str:
        heartbeat = Heartbeat(self._beat, name=f"driver-{self.job_id}").start()  # before `running`: see controller
        outcome = "succeeded"
        try:
            self._resume_from_checkpoint()
            self._set_status(JobStatus.running)
            self.start()
            self.iteration_started = time.time()
            for it in range(self.trainer.iteration, self.spec.training.iterations):
                self.check_runnable()
                row = self.iteration(it)
                self._finish_iteration(it, row)
            self._set_status(JobStatus.succeeded)
        except JobCancelled:
            outcome = "cancelled"
        except Exception as err:
            outcome = "failed"
            message = str(err) if isinstance(err, JobSetupError) else f"{type(err).__name__}: {err}"
            log.error("job %s failed: %s", self.job_id, traceback.format_exc())
            self._set_status(JobStatus.failed, error=message)
        finally:
            self.ctx.redis.set(keys.job_done(self.job_id), outcome, ex=86400)
            expire_job(self.ctx.redis, self.job_id)
            heartbeat.stop()
            self.close()
            self.spans.flush()
        return f"job {self.job_id} {outcome} after {self.trainer.iteration} iterations"

    def start(self) -> None:  # noqa: B027 - optional hook
        """Before the first iteration (load an engine, dispatch ahead)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """After the last iteration or an error."""

    @abstractmethod
    def iteration(self, it: int) -> dict[str, Any]:
        """Generate/consume and train iteration `it` (ends with one optimizer step); returns its metrics so far,
        with `_samples` (the samples trained on) under that key."""

    # -- shared verbs -------------------------------------------------------------------------------------------------
    def publish_weights(self) -> float:
        """Publish the trainer's current version to every instance; returns the seconds it took."""
        start = time.time()
        seconds = self.transport.publish(self.trainer.version, self.trainer.state_dict_for_sync())
        self.spans.add("loading_weights", start, time.time())
        return seconds

    def check_runnable(self) -> None:
        """Raise JobCancelled when the job was cancelled (or failed elsewhere); wait while it is paused."""
        while True:
            status = self.ctx.status()
            if status in (JobStatus.cancelled, JobStatus.failed):
                raise JobCancelled(status)
            if status != JobStatus.paused:
                return
            with self.spans.span("waiting"):
                time.sleep(PAUSE_POLL_S)
            beat_driver(self.ctx.redis, self.job_id)

    def _finish_iteration(self, it: int, row: dict[str, Any]) -> None:
        samples: list[Sample] = row.pop("_samples")
        now = time.time()
        row["iteration_seconds"] = now - self.iteration_started
        self.iteration_started = now
        row.update(metrics.sample_metrics(samples, train_version=it))
        row.update(metrics.rates(samples, row["iteration_seconds"]))
        row["samples"] = len(samples)
        if row.get("weight_sync_seconds") is not None:
            row["weight_sync_fraction"] = row["weight_sync_seconds"] / max(row["iteration_seconds"], 1e-9)
        row = metrics.finite(row)
        kept = [_sample_row(s, it) for s in samples[:SAMPLES_KEPT_PER_ITERATION]]
        with session_scope() as session:
            record_iteration(session=session, job_id=self.job_id, iteration=it + 1, metrics=row)
            record_samples(session=session, job_id=self.job_id, samples=kept)
        publish_live(self.ctx.redis, self.job_id, "metrics", {"iteration": it + 1, "metrics": row})
        publish_live(self.ctx.redis, self.job_id, "samples", kept)
        self.spans.flush()  # the trainer lane reaches the live timeline every iteration, like the instances' lanes
        if (it + 1) % self.spec.checkpoint.interval == 0 or it + 1 == self.spec.training.iterations:
            self._checkpoint(it + 1)

    def _checkpoint(self, iteration: int) -> None:
        path = self.ctx.checkpoints_dir / f"iter_{iteration:06d}"
        self.trainer.save_checkpoint(path, iteration=iteration)
        ckpt.prune_checkpoints(self.ctx.checkpoints_dir, self.spec.checkpoint.keep)
        with session_scope() as session:
            record_checkpoint(session=session, job_id=self.job_id, iteration=iteration, path=str(path))

    def _resume_from_checkpoint(self) -> None:
        found = sorted(p for p in self.ctx.checkpoints_dir.glob("iter_*") if not p.name.endswith(".tmp")) \
            if self.ctx.checkpoints_dir.exists() else []
        if found:
            resumed = self.trainer.load_checkpoint(Path(found[-1]))
            with session_scope() as session:
                record_event(session=session, job_id=self.job_id, kind="worker",
                             message=f"driver resumed from checkpoint at iteration {resumed}")

    def _beat(self) -> None:
        beat_driver(self.ctx.redis, self.job_id)
        self.spans.flush()

    def _set_status(self, to: JobStatus, error: str | None = None) -> None:
        with session_scope() as session:
            job = session.get(Job, self.job_id)
            if job is None or job.status == to:
                return
            if to == JobStatus.running and job.status not in (JobStatus.starting, JobStatus.queued):
                return  # already running (resumed driver) or paused/cancelled by a user meanwhile
            if job.status in (JobStatus.cancelled, JobStatus.failed, JobStatus.succeeded):
                return
            if to == JobStatus.running and job.status == JobStatus.queued:
                transition_job(session=session, job=job, to=JobStatus.starting)
            transition_job(session=session, job=job, to=to, error=error)
            publish_live(self.ctx.redis, self.job_id, "status", {"id": job.id, "status": str(to), "error": error})


def _sample_row(sample: Sample, iteration: int) -> dict[str, Any]:
    return {"iteration": iteration + 1, "sample_id": sample.sample_id, "prompt": sample.prompt_text,
            "response": sample.response_text, "reward": float(sample.reward), "length": len(sample.response_ids),
            "policy_version": sample.policy_version, "instance_id": sample.instance_id}


def setup_driver(ctx: JobContext) -> Driver:
    if ctx.spec.mode == "colocated":
        from workers.runtime.colocated import ColocatedDriver

        return ColocatedDriver(ctx)
    from workers.runtime.streaming import StreamDriver

    return StreamDriver(ctx)


def run_job(job_id: int) -> str:
    ctx: JobContext | None = None
    try:
        ctx = load_context(job_id)
        if ctx.status() in (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled):
            return f"job {job_id} already ended"
        beat_driver(ctx.redis, job_id)
        driver = setup_driver(ctx)
    except Exception as err:
        message = str(err) if isinstance(err, JobSetupError) else f"cannot start the job: {type(err).__name__}: {err}"
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is not None and job.status in (JobStatus.queued, JobStatus.starting, JobStatus.running):
                transition_job(session=session, job=job, to=JobStatus.failed, error=message)
        if ctx is not None:
            ctx.redis.set(keys.job_done(job_id), "failed", ex=86400)
        return f"job {job_id} failed: {message}"
    return driver.run()
