"""The job driver (`training.run_job`): the lifecycle shared by every mode, and the entry point.

    driver = setup_driver(ctx)       # colocated | sync | async
    driver.run()                     # starting -> running -> succeeded | failed | cancelled

`run` resumes from the newest checkpoint, then for each iteration calls the mode's `iteration(it)` (generate or
consume the stream, train, publish weights), records the row and checkpoints. Everything the control plane learns
goes through `ctx.reporter`; errors become the job's `error` with a message that says what went wrong.
"""

from __future__ import annotations

import logging
import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from contract import keys
from contract.reporter import Reporter
from contract.sample import Sample
from contract.states import TERMINAL_JOB_STATUSES, JobStatus
from workers.core.prompts import EVAL_PREFIX, PromptSchedule, TokenCache, make_requests, request_seed
from workers.runtime import components
from workers.runtime.context import JobContext, JobSetupError, load_context
from workers.runtime.dispatching import PromptDispatcher
from workers.runtime.recorder import IterationRecorder
from workers.runtime.telemetry import Heartbeat
from workers.stream import PromptQueue, expire_job
from workers.training import checkpoint as ckpt
from workers.training.trainer import Trainer
from workers.weightsync import setup_weight_sync

log = logging.getLogger(__name__)
PAUSE_POLL_S = 0.5


class JobCancelled(Exception):
    pass


@dataclass
class IterationOutcome:
    samples: list[Sample]  # what the optimizer step trained on
    step: dict[str, float]  # the optimizer step's metrics
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific metrics for the row


class Driver(ABC):
    lane = "trainer"

    def __init__(self, ctx: JobContext, *, device: str | None = None, warmup_steps: int = 0):
        self.ctx, self.spec, self.job_id, self.reporter = ctx, ctx.spec, ctx.job_id, ctx.reporter
        self.trainer = Trainer(ctx.model_dir, ctx.spec, device or components.worker_device(),
                               warmup_steps=warmup_steps)
        self.transport = setup_weight_sync(ctx.spec, root=ctx.weights_dir, client=ctx.redis, job_id=ctx.job_id,
                                           template_dir=ctx.model_dir)
        self.rec = IterationRecorder(ctx.job_id, self.lane, ctx.reporter)
        self.encode = TokenCache(lambda text: self.trainer.tokenizer(text)["input_ids"])
        self.schedule = PromptSchedule(components.load_rows(ctx, **ctx.dataset_params), ctx.spec)
        self.eval_rows = components.load_rows(ctx, "eval", **ctx.dataset_params) if self.spec.training.eval_every \
            else []
        queues = (lambda iid: PromptQueue(ctx.require_redis(), ctx.job_id, iid)) if ctx.redis is not None else None
        self.dispatcher = PromptDispatcher(ctx.spec, self.schedule, self.encode, job_id=ctx.job_id,
                                           reporter=ctx.reporter, queues=queues)
        self.eval_curve: list[tuple[int, float]] = []  # (iterations trained, held-out reward)

    # -- the loop ------------------------------------------------------------------------------------------------------
    def run(self) -> str:
        heartbeat = Heartbeat(lambda: self.reporter.beat_driver(self.job_id), name=f"driver-{self.job_id}").start()
        outcome = "succeeded"
        try:
            self._resume_from_checkpoint()
            self.reporter.set_job_status(self.job_id, JobStatus.running)
            self.start()
            for it in range(self.trainer.iteration, self.spec.training.iterations):
                self.check_runnable()
                result = self.iteration(it)
                self.rec.finish(it, result.samples, result.step, result.extra)
                if (it + 1) % self.spec.checkpoint.interval == 0 or it + 1 == self.spec.training.iterations:
                    self._checkpoint(it + 1)
            self.reporter.set_job_status(self.job_id, JobStatus.succeeded)
        except JobCancelled:
            outcome = "cancelled"
        except Exception as err:
            outcome = "failed"
            message = str(err) if isinstance(err, JobSetupError) else f"{type(err).__name__}: {err}"
            log.error("job %s failed: %s", self.job_id, traceback.format_exc())
            self.reporter.set_job_status(self.job_id, JobStatus.failed, error=message)
        finally:
            if self.ctx.redis is not None:
                self.ctx.redis.set(keys.job_done(self.job_id), outcome, ex=86400)
                expire_job(self.ctx.redis, self.job_id)
            heartbeat.stop()
            self.close()
            self.rec.spans.flush()
        return f"job {self.job_id} {outcome} after {self.trainer.iteration} iterations"

    def start(self) -> None:  # noqa: B027 - optional hook
        """Before the first iteration (load an engine, dispatch ahead)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """After the last iteration or an error."""

    @abstractmethod
    def iteration(self, it: int) -> IterationOutcome:
        """Generate/consume and train iteration `it` (one optimizer step, then publish its weights)."""

    # -- shared verbs --------------------------------------------------------------------------------------------------
    def publish_weights(self) -> float:
        """Publish the trainer's current version to every instance; returns the seconds it took."""
        with self.rec.phase("weight_sync"):
            return self.transport.publish(self.trainer.version, self.trainer.state_dict_for_sync())

    def eval_due(self, trained: int) -> bool:
        every = self.spec.training.eval_every
        return bool(every and self.eval_rows) and (trained % every == 0 or trained == self.spec.training.iterations)

    def eval_requests(self, trained: int) -> list:
        """One request per held-out prompt at weights >= `trained`; the same sampling seeds every evaluation, so
        successive evaluations differ only by the weights."""
        groups = make_requests(self.eval_rows, trained, group_size=1, encode=self.encode, job_seed=self.spec.seed,
                               min_version=trained, group_prefix=EVAL_PREFIX)
        for slot, (request,) in enumerate(groups):
            request.seed = request_seed(self.spec.seed, f"{EVAL_PREFIX}:{slot}")
        return [r for group in groups for r in group]

    def check_runnable(self) -> None:
        """Raise JobCancelled when the job was cancelled (or failed elsewhere); wait while it is paused."""
        while True:
            status = self.ctx.status()
            if status in TERMINAL_JOB_STATUSES:
                raise JobCancelled(status)
            if status != JobStatus.paused:
                return
            with self.rec.phase("waiting"):
                time.sleep(PAUSE_POLL_S)

    def _checkpoint(self, iteration: int) -> None:
        path = self.ctx.checkpoints_dir / f"iter_{iteration:06d}"
        self.trainer.save_checkpoint(path, iteration=iteration)
        ckpt.prune_checkpoints(self.ctx.checkpoints_dir, self.spec.checkpoint.keep)
        self.reporter.record_checkpoint(self.job_id, iteration, str(path))

    def _resume_from_checkpoint(self) -> None:
        found = ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if found is not None:
            resumed = self.trainer.load_checkpoint(Path(found))
            self.reporter.record_event(self.job_id, "worker", f"driver resumed from checkpoint at iteration {resumed}")


def setup_driver(ctx: JobContext, **kwargs: Any) -> Driver:
    if ctx.spec.mode == "colocated":
        from workers.runtime.colocated import ColocatedDriver

        return ColocatedDriver(ctx, **kwargs)
    from workers.runtime.streaming import StreamDriver

    return StreamDriver(ctx, **kwargs)


def run_job(job_id: int, reporter: Reporter, client: redis.Redis | None, artifacts: Path) -> str:
    """The `training.run_job` task body."""
    ctx: JobContext | None = None
    try:
        ctx = load_context(job_id, reporter, client, artifacts)
        if ctx.status() in TERMINAL_JOB_STATUSES:
            return f"job {job_id} already ended"
        reporter.beat_driver(job_id)
        driver = setup_driver(ctx)
    except Exception as err:
        message = str(err) if isinstance(err, JobSetupError) else f"cannot start the job: {type(err).__name__}: {err}"
        reporter.set_job_status(job_id, JobStatus.failed, error=message)
        if client is not None:
            client.set(keys.job_done(job_id), "failed", ex=86400)
        return f"job {job_id} failed: {message}"
    return driver.run()
