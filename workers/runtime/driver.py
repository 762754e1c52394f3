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
from workers.runtime.ranks import rank_handing_back, start_trainer
from workers.runtime.recorder import IterationRecorder, RewardFailed
from workers.runtime.shutdown import HandBack, ShutdownWatch
from workers.runtime.telemetry import Heartbeat
from workers.stream import PromptQueue, expire_job
from workers.training import checkpoint as ckpt
from workers.training.faults import RanksLost
from workers.weightsync import setup_weight_sync

log = logging.getLogger(__name__)
PAUSE_POLL_S = 0.5
CHECKPOINT_ATTEMPTS, CHECKPOINT_RETRY_S = 3, 1.0


class JobCancelled(Exception):
    pass


class Superseded(Exception):  # noqa: N818 - control flow
    """A newer driver epoch exists (this driver was declared dead and replaced): stop without touching the job."""


@dataclass
class IterationOutcome:
    samples: list[Sample]  # what the optimizer step trained on
    step: dict[str, float]  # the optimizer step's metrics
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific metrics for the row


class Driver(ABC):
    lane = "trainer"

    def __init__(self, ctx: JobContext, *, device: str | None = None, warmup_steps: int = 0):
        self.ctx, self.spec, self.job_id, self.reporter = ctx, ctx.spec, ctx.job_id, ctx.reporter
        self.trainer = start_trainer(ctx, device or components.worker_device(), warmup_steps=warmup_steps)
        self.transport = setup_weight_sync(ctx.spec, root=ctx.weights_dir, client=ctx.redis, job_id=ctx.job_id,
                                           template_dir=ctx.model_dir, epoch=ctx.epoch,
                                           device=str(self.trainer.device))
        self.rec = IterationRecorder(ctx.job_id, self.lane, ctx.reporter, ctx.spec.telemetry)
        self.encode = TokenCache(lambda text: self.trainer.tokenizer(text)["input_ids"])
        self.schedule = PromptSchedule(components.load_rows(ctx, **ctx.dataset_params), ctx.spec)
        self.eval_rows = components.load_rows(ctx, "eval", **ctx.dataset_params) if self.spec.training.eval_every \
            else []
        queues = (lambda iid: PromptQueue(ctx.require_redis(), ctx.job_id, iid)) if ctx.redis is not None else None
        self.dispatcher = PromptDispatcher(ctx.spec, self.schedule, self.encode, job_id=ctx.job_id,
                                           reporter=ctx.reporter, queues=queues, epoch=ctx.epoch)
        self.eval_curve: list[tuple[int, float]] = []  # (iterations trained, held-out reward)
        self.shutdown = ShutdownWatch(ctx.redis, ctx.node)
        self.superseded = False

    # -- the loop ------------------------------------------------------------------------------------------------------
    def run(self) -> str:
        """Train to the end. The job's status is written only when this driver knows the outcome and the write
        succeeds; otherwise (hand-back, or the database unreachable) it removes its heartbeat and leaves the job to
        the controller, the one place that declares a driver dead and restarts it from the newest checkpoint."""
        heartbeat = Heartbeat(self._beat, name=f"driver-{self.job_id}").start()
        outcome: str | None = None  # stays None when the process is torn down (SystemExit of a cold shutdown)
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
            outcome = "succeeded"
        except JobCancelled:
            outcome = "cancelled"
        except Superseded:  # the controller started a newer driver: it owns the job now
            outcome = None
            self.superseded = True
        except HandBack:
            outcome = None
            self._hand_back()
        except RanksLost as err:  # like a dead driver: the controller restarts the job's ranks from the checkpoint
            outcome = None
            log.error("job %s: %s", self.job_id, err)
            self.reporter.record_event(self.job_id, "worker", f"a trainer rank was lost ({err}); the driver stops "
                                       "and is restarted from the newest checkpoint")
        except Exception as err:
            outcome = "failed"
            message = str(err) if isinstance(err, JobSetupError | RewardFailed) else f"{type(err).__name__}: {err}"
            log.error("job %s failed: %s", self.job_id, traceback.format_exc())
            try:
                self.reporter.set_job_status(self.job_id, JobStatus.failed, error=message)
            except Exception as write_err:  # never decide the job's state from a write that failed
                log.error("job %s: could not record the failure (%s); leaving it to the controller", self.job_id,
                          write_err)
                outcome = None
        finally:
            heartbeat.stop()
            self._release(outcome)
            self.close()
            self.transport.close()
            self.trainer.close()
        return f"job {self.job_id} {outcome or 'handed back'} after {self.trainer.iteration} iterations"

    def _release(self, outcome: str | None) -> None:
        try:
            self.rec.spans.flush()
        except Exception as err:
            log.warning("job %s: timeline spans lost: %s", self.job_id, err)
        if self.ctx.redis is None:
            return
        if self.superseded:
            return  # every key belongs to the newer driver
        if outcome is None:  # the controller sees the driver gone at its next pass
            self.ctx.redis.delete(keys.driver_heartbeat(self.job_id))
        else:
            self.ctx.redis.set(keys.job_done(self.job_id), outcome, ex=86400)
            expire_job(self.ctx.redis, self.job_id)

    def _beat(self) -> None:
        if not self.superseded:
            self.reporter.beat_driver(self.job_id)
        self.shutdown.check()

    def _hand_back(self) -> None:
        """The worker is shutting down: keep what was trained (a checkpoint at the last optimizer step)."""
        trained, latest = self.trainer.iteration, ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if trained > 0 and (latest is None or ckpt.checkpoint_iteration(latest) != trained):
            self._checkpoint(trained)
        if self.ctx.redis is not None:
            self.ctx.redis.set(keys.driver_handback(self.job_id), trained, ex=86400)
        self.reporter.record_event(self.job_id, "worker", f"training worker shutting down: driver handed the job "
                                   f"back after {self.trainer.iteration} iterations (checkpointed)")

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
            seconds = self.transport.publish(self.trainer.version, self.trainer.state_dict_for_sync())
        for note in self.transport.take_notes():  # e.g. p2p: an instance joined, was dropped, follows the store
            self.reporter.record_event(self.job_id, "worker", note)
        return seconds

    def eval_due(self, trained: int) -> bool:
        every = self.spec.training.eval_every
        return bool(every and self.eval_rows) and (trained % every == 0 or trained == self.spec.training.iterations)

    def eval_requests(self, trained: int) -> list:
        """One request per held-out prompt at weights >= `trained`; the same sampling seeds every evaluation, so
        successive evaluations differ only by the weights."""
        groups = make_requests(self.eval_rows, trained, group_size=1, encode=self.encode, job_seed=self.spec.seed,
                               min_version=trained, group_prefix=EVAL_PREFIX, epoch=self.ctx.epoch)
        for slot, (request,) in enumerate(groups):
            request.seed = request_seed(self.spec.seed, f"{EVAL_PREFIX}:{slot}")
        return [r for group in groups for r in group]

    def check_runnable(self) -> None:
        """Raise JobCancelled when the job was cancelled (or failed elsewhere), HandBack when the worker shuts down;
        wait while it is paused."""
        while True:
            if self.shutdown.requested.is_set() or rank_handing_back(self.ctx):
                raise HandBack()
            if self.reporter.driver_epoch(self.job_id) not in (None, self.ctx.epoch):
                raise Superseded()
            status = self.ctx.status()
            if status in TERMINAL_JOB_STATUSES:
                raise JobCancelled(status)
            if status != JobStatus.paused:
                return
            with self.rec.phase("waiting"):
                time.sleep(PAUSE_POLL_S)

    def _checkpoint(self, iteration: int) -> None:
        """Save, retrying transient failures; a checkpoint that cannot be written fails the job with the reason and
        keeps the last good one (a checkpoint directory is published whole or not at all)."""
        path = self.ctx.checkpoints_dir / f"iter_{iteration:06d}"
        for attempt in range(CHECKPOINT_ATTEMPTS):
            try:
                self.trainer.save_checkpoint(path, iteration=iteration)
                break
            except OSError as err:
                if attempt + 1 == CHECKPOINT_ATTEMPTS:
                    raise JobSetupError(f"checkpoint save failed: {err.strerror or err} ({path})") from err
                log.warning("job %s: checkpoint %s failed (%s); retrying", self.job_id, path.name, err)
                time.sleep(CHECKPOINT_RETRY_S * (attempt + 1))
        ckpt.prune_checkpoints(self.ctx.checkpoints_dir, self.spec.checkpoint.keep)
        self.reporter.record_checkpoint(self.job_id, iteration, str(path))

    def _resume_from_checkpoint(self) -> None:
        """Resume from the newest checkpoint whose iteration's row is recorded: a checkpoint newer than the rows (a
        driver stopped between its optimizer step and its row) would leave that iteration out of the job's history
        for good, so its iterations are trained again. Only when no such checkpoint is left is the newest one used."""
        root, recorded = self.ctx.checkpoints_dir, self.ctx.recorded_through
        newest = ckpt.latest_checkpoint(root)
        if newest is None:
            return
        found = newest if recorded is None else ckpt.latest_checkpoint(root, at_most=recorded) or newest
        resumed = self.trainer.load_checkpoint(Path(found))
        message = f"driver resumed from checkpoint at iteration {resumed}"
        if recorded is not None and ckpt.checkpoint_iteration(newest) > recorded:
            message += (f" (checkpoint {newest.name} is newer than the last recorded iteration, {recorded}: "
                        + ("its iterations are trained again)" if resumed <= recorded else
                           f"iterations {recorded + 1}-{resumed} have no row)"))
        self.reporter.record_event(self.job_id, "worker", message)


def setup_driver(ctx: JobContext, **kwargs: Any) -> Driver:
    if ctx.spec.mode == "colocated":
        from workers.runtime.colocated import ColocatedDriver

        return ColocatedDriver(ctx, **kwargs)
    from workers.runtime.streaming import StreamDriver

    return StreamDriver(ctx, **kwargs)


def run_job(job_id: int, reporter: Reporter, client: redis.Redis | None, artifacts: Path,
            node: str | None = None) -> str:
    """The `training.run_job` task body (`node`: the Celery worker running it)."""
    ctx: JobContext | None = None
    try:
        ctx = load_context(job_id, reporter, client, artifacts, node)
        if ctx.status() in TERMINAL_JOB_STATUSES:
            return f"job {job_id} already ended"
        # the driver beats from here on: loading a large model (or waiting for its ranks) can outlast the heartbeat
        # TTL, and the controller would restart a driver that is only starting; `run` beats with its own
        setup_beat = Heartbeat(lambda: reporter.beat_driver(job_id), name=f"driver-setup-{job_id}").start()
        try:
            driver = setup_driver(ctx)
        finally:
            setup_beat.stop()
    except Exception as err:
        message = str(err) if isinstance(err, JobSetupError) else f"cannot start the job: {type(err).__name__}: {err}"
        reporter.set_job_status(job_id, JobStatus.failed, error=message)
        if client is not None:
            client.set(keys.job_done(job_id), "failed", ex=86400)
        return f"job {job_id} failed: {message}"
    return driver.run()
