"""The job driver: one lifecycle and one iteration body for every mode, over the mode's `SampleSource`.

    driver = Driver(ctx, StreamSource)   # or LocalRollout (colocated, train-local); workers/runtime/job.py picks
    driver.run()                         # starting -> running -> succeeded | failed | cancelled

`run` resumes from the newest checkpoint, then per iteration: micro-batches of the complete groups the source
produces (core.MicroBatcher), one micro-step each, one optimizer step, publish the weights, let the source settle
(acknowledge / load weights), the held-out evaluation's bookkeeping (workers/runtime/held_out.py), record the row,
checkpoint.
Everything the control plane learns goes through `ctx.reporter`; errors become the job's `error` with a message that
says what went wrong.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from contract import keys
from contract.artifact_store import ArtifactStoreDenied, ArtifactStoreError, ArtifactStoreFull
from contract.artifact_store.checkpoints import checkpoint_mirror
from contract.evaluation import retained
from contract.sample import Sample
from contract.states import TERMINAL_JOB_STATUSES, JobStatus
from workers.core.chat import ChatEncoder
from workers.core.learn import MicroBatcher, Scored, unzip
from workers.core.prompts import PromptSchedule
from workers.generation.engine import GenerationEngine
from workers.runtime import components
from workers.runtime.context import JobContext, JobSetupError
from workers.runtime.dispatching import PromptDispatcher
from workers.runtime.held_out import HeldOut, eval_skipped_reason
from workers.runtime.ranks import rank_handing_back, start_trainer
from workers.runtime.recorder import IterationRecorder, RewardFailed
from workers.runtime.shutdown import HandBack, ShutdownWatch, preemption_due
from workers.runtime.source import Host, SampleSource
from workers.runtime.telemetry import Heartbeat
from workers.stream import PromptQueue, expire_job
from workers.training import checkpoint as ckpt
from workers.training.checkpoint_save import CheckpointSaveFailed, save_retrying
from workers.training.checkpoint_upload import BackgroundUpload, UploadOutcome
from workers.training.defaults import choose_training_defaults, describe
from workers.training.dispatch_record import check_resume, dispatch_record, write_record
from workers.training.faults import RanksLost
from workers.weightsync import setup_weight_sync

log = logging.getLogger(__name__)
PAUSE_POLL_S = 0.5
CHECKPOINT_ATTEMPTS, CHECKPOINT_RETRY_S = 3, 1.0  # tries per checkpoint, first backoff (doubling)
CHECKPOINT_FAILURES_ALLOWED = 3  # checkpoints in a row that may fail before the job does


def failure_message(err: Exception) -> tuple[str, bool]:
    """The failed job's error and whether it was expected: the job's fault (its setup, its reward) or the artifact
    store refusing the credentials or full, mid-run too (a weight version's upload): their sentence is the whole
    story (no traceback); anything else is named by its type and logged with its traceback."""
    expected = isinstance(err, JobSetupError | RewardFailed | ArtifactStoreDenied | ArtifactStoreFull)
    return (str(err) if expected else f"{type(err).__name__}: {err}"), expected


class JobCancelled(Exception):
    pass


class Superseded(Exception):  # noqa: N818 - control flow
    """A newer driver epoch exists (this driver was declared dead and replaced): stop without touching the job."""


@dataclass
class IterationOutcome:
    samples: list[Sample]  # what the optimizer step trained on
    step: dict[str, float]  # the optimizer step's metrics
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific metrics for the row


class Driver:
    def __init__(self, ctx: JobContext, source: Callable[[Host], SampleSource] | type[SampleSource], *,
                 device: str | None = None, warmup_steps: int = 0):
        """`source`: the mode's `SampleSource` class, built once the trainer, transport and dispatcher exist."""
        device = device or components.worker_device()
        ctx.spec, chosen = choose_training_defaults(ctx.spec, ctx.model_dir, device)  # None -> the fast values
        self.ctx, self.spec, self.job_id, self.reporter = ctx, ctx.spec, ctx.job_id, ctx.reporter
        if chosen:
            ctx.reporter.record_event(ctx.job_id, "training_defaults", describe(chosen, torch.get_num_threads()),
                                      chosen)
        lane = getattr(source, "lane", SampleSource.lane)
        self.trainer = start_trainer(ctx, device, warmup_steps=warmup_steps)
        if (mapped := self.trainer.mapped_base) is not None:
            ctx.reporter.record_event(ctx.job_id, "training_sharing", mapped.describe(),
                                      {"file": mapped.path.name, "bytes": mapped.nbytes, "wrote": mapped.written})
        if self.trainer.resident_shared_bytes:
            mib = self.trainer.resident_shared_bytes / 2**20
            ctx.reporter.record_event(ctx.job_id, "training_sharing", f"frozen base weights ({mib:.1f} MiB on "
                                      f"{self.trainer.device}): the same tensors as another driver of this process",
                                      {"resident_bytes": self.trainer.resident_shared_bytes})
        self.transport = setup_weight_sync(ctx.spec, root=ctx.weights_dir, client=ctx.redis, job_id=ctx.job_id,
                                           template_dir=ctx.model_dir, epoch=ctx.epoch,
                                           device=str(self.trainer.device), team_id=ctx.team_id)
        self.mirror = checkpoint_mirror(ctx.team_id, ctx.job_id, ctx.job_dir)  # None: no object store
        if self.mirror is not None:  # denied credentials or a missing bucket: the job's reason, before training
            try:
                self.mirror.names()
            except ArtifactStoreError as err:
                raise JobSetupError(str(err)) from err
        self.uploads = BackgroundUpload(self.mirror, CHECKPOINT_ATTEMPTS, CHECKPOINT_RETRY_S) \
            if self.mirror is not None else None
        self.rec = IterationRecorder(ctx.job_id, lane, ctx.reporter, ctx.spec.telemetry)
        self.device, self.tokenizer = str(self.trainer.device), self.trainer.tokenizer
        self.encode = ChatEncoder(self.trainer.tokenizer, system_prompt=ctx.spec.dataset.system_prompt)
        self.schedule = PromptSchedule(components.load_rows(ctx, **ctx.dataset_params), ctx.spec)
        components.check_chat_template(self.schedule.rows, self.trainer.tokenizer)
        eval_rows = components.load_rows(ctx, "eval", **ctx.dataset_params) if self.spec.training.eval_every else []
        if self.spec.training.eval_every and not eval_rows:  # never silently: say why there is no eval_reward
            rows = len(self.schedule.rows)
            ctx.reporter.record_event(ctx.job_id, "eval_skipped", eval_skipped_reason(self.spec, rows),
                                      {"eval_prompts": self.spec.dataset.eval_prompts, "train_rows": rows})
        queues = (lambda iid: PromptQueue(ctx.require_redis(), ctx.job_id, iid)) if ctx.redis is not None else None
        self.dispatcher = PromptDispatcher(ctx.spec, self.schedule, self.encode, job_id=ctx.job_id,
                                           reporter=ctx.reporter, queues=queues, epoch=ctx.epoch)
        self.held_out = HeldOut(ctx.spec, eval_rows, self.encode, ctx.epoch)
        self.eval_curve = self.held_out.curve  # (iterations trained, held-out reward)
        self.shutdown = ShutdownWatch(ctx.redis, ctx.node)
        self.superseded = False
        self.checkpoint_failures = 0  # checkpoints in a row that could not be written
        self.pause_checkpointed: int | None = None  # the iteration a pause last checkpointed (or tried to)
        self.source = source(self)

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
                self.rec.finish(it, result.samples, result.step, result.extra, trace=self.trainer.token_trace)
                self._collect_upload(block=False)
                last = it + 1 == self.spec.training.iterations
                evaluate = self.evaluation_due(it + 1)
                if (it + 1) % self.spec.checkpoint.interval == 0 or last or evaluate:
                    # the upload runs behind the next iterations unless the checkpoint is read right away
                    self._checkpoint(it + 1, final=last, background=not (last or evaluate))
                    if evaluate:
                        self._request_evaluations(it + 1)
            # a paused job cannot become succeeded (the write is refused): paused during the last iteration, or by a
            # controller pass that commits between the check and the write, the driver waits like any paused driver
            # (the pause's event names the final checkpoint) and writes again once the job runs again
            while True:
                self.check_runnable()
                self.reporter.set_job_status(self.job_id, JobStatus.succeeded)
                if self.ctx.status() not in (JobStatus.paused, JobStatus.running):  # running: resumed meanwhile
                    break
            outcome = "succeeded"
        except JobCancelled:
            outcome = "cancelled"
        except Superseded:  # the controller started a newer driver: it owns the job now
            outcome = None
            self.superseded = True
        except HandBack as handing:
            outcome = None
            self._hand_back(str(handing) or None)
        except RanksLost as err:  # like a dead driver: the controller restarts the job's ranks from the checkpoint
            outcome = None
            log.error("job %s: %s", self.job_id, err)
            self.reporter.record_event(self.job_id, "worker", f"a trainer rank was lost ({err}); the driver stops "
                                       "and is restarted from the newest checkpoint")
        except Exception as err:
            outcome = "failed"
            message, expected = failure_message(err)
            log.error("job %s failed: %s", self.job_id, message if expected else traceback.format_exc())
            try:
                self.reporter.set_job_status(self.job_id, JobStatus.failed, error=message)
            except Exception as write_err:  # never decide the job's state from a write that failed
                log.error("job %s: could not record the failure (%s); leaving it to the controller", self.job_id,
                          write_err)
                outcome = None
        finally:
            self._finish_uploads()
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

    def _hand_back(self, preempted: str | None = None) -> None:
        """The worker is shutting down, or the scheduler preempted the job (`preempted`: why): keep what was trained
        (a checkpoint at the last optimizer step)."""
        with contextlib.suppress(JobSetupError):  # a failed upload removed its checkpoint: written again below
            self._collect_upload(block=True)
        trained, latest = self.trainer.iteration, ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if trained > 0 and (latest is None or ckpt.checkpoint_iteration(latest) != trained):
            with contextlib.suppress(JobSetupError):  # an event; the next driver resumes from the newest that stands
                self._checkpoint(trained)
        if self.ctx.redis is not None:
            self.ctx.redis.set(keys.driver_handback(self.job_id), trained, ex=86400)
        if preempted:
            self.reporter.record_event(self.job_id, "scheduler", f"driver handed the job back after "
                                       f"{self.trainer.iteration} iterations (checkpointed): {preempted}")
            return
        self.reporter.record_event(self.job_id, "worker", f"training worker shutting down: driver handed the job "
                                   f"back after {self.trainer.iteration} iterations (checkpointed)")

    def start(self) -> None:
        self.source.start(self.trainer.iteration)
        if self.trainer.version == 0 and (value := self.held_out.untrained(self.source)) is not None:
            self.reporter.record_event(self.job_id, "eval", f"held-out reward before training: {value:.4f}",
                                       data={"iteration": 0, "eval_reward": value})

    def close(self) -> None:
        self.source.close()

    def iteration(self, it: int) -> IterationOutcome:
        """Train iteration `it` on the groups the source produces: a micro-step per micro-batch as soon as one is
        full, one optimizer step, then weights v(it + 1)."""
        used: list[Sample] = []
        batcher = MicroBatcher(self.trainer.algorithm, self.spec.training)
        for arrival in self.source.arrivals(it):
            for group in arrival.groups:
                batcher.add_group(group)
            if arrival.waited is not None and not batcher.full and not arrival.final:
                self.rec.add("waiting", *arrival.waited)  # nothing to train meanwhile: the trainer idled
            used += self._micro_steps(batcher.take(final=arrival.final))
        used += self._micro_steps(batcher.take(final=True))  # nothing unless the source ended without `final`
        with self.rec.phase("training"):
            step = self.trainer.optimizer_step()
        publish_s = self.publish_weights()
        used.sort(key=lambda s: s.finished_at)  # the iteration's samples in the order they finished
        self.source.trained(it, used, publish_s)
        self.dispatcher.observe(used)
        return IterationOutcome(used, step, {**self.source.metrics(it, used), **self.held_out.after(it, self.source)})

    def _micro_steps(self, chunks: list[list[Scored]]) -> list[Sample]:
        used: list[Sample] = []
        for chunk in chunks:
            samples, advantages = unzip(chunk)
            with self.rec.phase("training"):
                self.trainer.micro_step(samples, advantages)
            used.extend(samples)
        return used

    # -- shared verbs --------------------------------------------------------------------------------------------------
    def publish_weights(self) -> float:
        """Publish the trainer's current version to every instance; returns the seconds it took."""
        with self.rec.phase("weight_sync"):
            state = self.trainer.state_dict_for_sync()  # a LoRA job's: the adapter alone
            seconds = self.transport.publish(self.trainer.version, state)
        self.rec.values["weight_sync_bytes"] = float(sum(t.numel() * t.element_size() for t in state.values()))
        for note in self.transport.take_notes():  # e.g. p2p: an instance joined, was dropped, follows the store
            self.reporter.record_event(self.job_id, "worker", note)
        return seconds

    @property
    def version(self) -> int:
        return self.trainer.version

    def load_weights(self, engine: GenerationEngine) -> float:
        return self.transport.load_into(engine, self.trainer.version)

    def weights_served(self) -> bool:
        return self.trainer.version == self.transport.latest_version() and not self.transport.serves_joiners

    def check_runnable(self) -> None:
        """Raise JobCancelled when the job was cancelled (or failed elsewhere), HandBack when the worker shuts down
        or the scheduler preempted the job (at its next checkpoint, or once the grace period is over); wait while it
        is paused."""
        while True:
            if self.shutdown.requested.is_set() or rank_handing_back(self.ctx):
                raise HandBack()
            if self.reporter.driver_epoch(self.job_id) not in (None, self.ctx.epoch):
                raise Superseded()
            status = self.ctx.status()
            if status in TERMINAL_JOB_STATUSES:
                raise JobCancelled(status)
            if status != JobStatus.paused:
                if (preempted := preemption_due(self.ctx.redis, self.job_id, self.trainer.iteration,
                                                self.spec.checkpoint.interval)) is not None:
                    raise HandBack(preempted)
                return
            self._checkpoint_paused()
            with self.rec.phase("waiting"):
                time.sleep(PAUSE_POLL_S)

    def _checkpoint_paused(self) -> None:
        """A paused job keeps what it trained (it may wait long, e.g. paused by a budget): a checkpoint at the last
        optimizer step, unless the newest already is; either way the event says the pause holds one."""
        trained = self.trainer.iteration
        if trained == 0 or self.pause_checkpointed == trained:
            return
        self.pause_checkpointed = trained  # tried once per trained iteration (a failed save is an event already)
        with contextlib.suppress(JobSetupError):
            self._collect_upload(block=True)
        latest = ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if latest is None or ckpt.checkpoint_iteration(latest) != trained:
            with contextlib.suppress(JobSetupError):
                self._checkpoint(trained)
            latest = ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if latest is not None and ckpt.checkpoint_iteration(latest) == trained:
            self.reporter.record_event(self.job_id, "checkpoint", f"paused: checkpoint at iteration {trained}",
                                       {"iteration": trained, "paused": True})

    def _checkpoint(self, iteration: int, *, final: bool = False, background: bool = False) -> None:
        """Save with retries (workers/training/checkpoint_save.py). A checkpoint that cannot be written is an event
        and training goes on while the newest complete checkpoint stands; the job fails with the reason only when
        the final checkpoint or CHECKPOINT_FAILURES_ALLOWED in a row cannot be written. With an object store the
        checkpoint counts as written once its manifest is in the store: `background` uploads it behind the next
        iterations (workers/training/checkpoint_upload.py), else this waits for the upload."""
        path = self.ctx.checkpoints_dir / f"iter_{iteration:06d}"
        self._collect_upload(block=True)  # one upload in flight per job: the previous one ends first
        try:
            def save() -> None:
                self.trainer.save_checkpoint(path, iteration=iteration)
                self._record_dispatch(path, iteration)

            save_retrying(save, path, attempts=CHECKPOINT_ATTEMPTS, backoff_s=CHECKPOINT_RETRY_S)
        except CheckpointSaveFailed as err:
            self._checkpoint_failed(iteration, err, final)
            return
        if self.uploads is None:
            self._checkpoint_written(iteration, path)
            return
        self.uploads.start(iteration, path)
        if not background:
            self._collect_upload(block=True, final=final)

    def _record_dispatch(self, path: Path, iteration: int) -> None:
        """The async buffer's iterations (dispatched ahead, untrained) with their prompt ids and seeds, next to the
        trainer's state: what a resume dispatches again (workers/training/dispatch_record.py)."""
        ahead = getattr(self.source, "next_dispatch", iteration)  # sources that dispatch nothing ahead have none
        write_record(path, dispatch_record(self.schedule, self.spec.seed, self.spec.algorithm.group_size, iteration,
                                           ahead))

    def _collect_upload(self, *, block: bool, final: bool = False) -> None:
        """Record the finished (with `block`: the in-flight) upload's outcome: the checkpoint's row, or the event."""
        if self.uploads is None:
            return
        done: UploadOutcome | None = self.uploads.wait() if block else self.uploads.poll()
        if done is None:
            return
        if done.error is None:
            log.info("job %s: checkpoint %s uploaded in %.1fs", self.job_id, done.path.name, done.seconds)
            self._checkpoint_written(done.iteration, done.path)
            return
        shutil.rmtree(done.path, ignore_errors=True)  # never resumed from: no other host could
        failed = CheckpointSaveFailed(f"checkpoint upload failed: {done.error}")
        self._checkpoint_failed(done.iteration, failed, final, done.tries)

    def _finish_uploads(self) -> None:
        """Before the driver exits: the in-flight upload completes (or its failure is an event)."""
        try:
            self._collect_upload(block=True)
        except Exception as err:  # the job's outcome is already decided; say what became of the checkpoint
            log.error("job %s: last checkpoint upload: %s", self.job_id, err)

    def _checkpoint_failed(self, iteration: int, err: CheckpointSaveFailed, final: bool,
                           tries: str = f"{CHECKPOINT_ATTEMPTS} attempts") -> None:
        """`tries`: what was tried, for the event (a local save: every attempt; an upload: its outcome says)."""
        self.checkpoint_failures += 1
        standing = ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        fatal = final or self.checkpoint_failures >= CHECKPOINT_FAILURES_ALLOWED
        then = "the job fails" if fatal else \
            f"training goes on; newest complete checkpoint: {standing.name if standing else 'none'}"
        self.reporter.record_event(self.job_id, "checkpoint", f"{err} (iteration {iteration}, "
                                   f"{tries}; {then})",
                                   data={"iteration": iteration, "failures": self.checkpoint_failures})
        if fatal:
            raise JobSetupError(str(err)) from err

    def _checkpoint_written(self, iteration: int, path: Path) -> None:
        self.checkpoint_failures = 0
        self._retain()
        self.reporter.record_checkpoint(self.job_id, iteration, str(path))

    # -- evaluation suites (spec.evaluation; backend/services/evaluations.py runs them on generation slots) ---------
    def evaluation_due(self, trained: int) -> bool:
        every = self.spec.evaluation_every
        return bool(self.spec.evaluation) and ((every > 0 and trained % every == 0)
                                               or trained == self.spec.training.iterations)

    def _request_evaluations(self, trained: int) -> None:
        latest = ckpt.latest_checkpoint(self.ctx.checkpoints_dir)
        if latest is None or ckpt.checkpoint_iteration(latest) != trained:
            return  # the checkpoint could not be written (an event says so): nothing to evaluate
        try:
            queued = self.reporter.request_evaluations(self.job_id, trained, str(latest))
        except Exception as err:  # an evaluation never stops training: say why it was not queued
            self.reporter.record_event(self.job_id, "evaluation", f"evaluations on the checkpoint at iteration "
                                       f"{trained} could not be queued: {err}", {"iteration": trained})
            return
        if queued:
            self.reporter.record_event(self.job_id, "evaluation", f"{queued} evaluation suite(s) queued on the "
                                       f"checkpoint at iteration {trained}", {"iteration": trained, "suites": queued})

    def _retain(self) -> None:
        """checkpoint.select latest: the newest `keep`; best: the top `keep` by checkpoint.metric, the newest, and
        those whose evaluation is still to come (contract/evaluation.py `retained`). The job does not wait for its
        last evaluations: when they finish, the control plane applies the final retention
        (backend/services/evaluations.py `final_retention`)."""
        policy, root = self.spec.checkpoint, self.ctx.checkpoints_dir
        try:
            self._retain_local(policy, root)
        finally:
            if self.mirror is not None:
                kept = {p.name for p in root.glob("iter_*") if p.is_dir() and not p.name.endswith(".tmp")}
                with contextlib.suppress(ArtifactStoreError):  # retried at the next checkpoint
                    self.mirror.retain(kept)

    def _retain_local(self, policy: Any, root: Path) -> None:
        if policy.select != "best":
            ckpt.prune_checkpoints(root, policy.keep)
            return
        found = {ckpt.checkpoint_iteration(p): p for p in root.glob("iter_*") if p.is_dir()
                 and not p.name.endswith(".tmp")}
        scored = self.reporter.checkpoint_metric(self.job_id, policy.metric)
        values = {it: scored.get(it) if scored.get(it) is not None or self.evaluation_due(it) else float("-inf")
                  for it in found}
        keep = retained(list(found), values, keep=policy.keep, select="best")
        for it, path in found.items():
            if it not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def _resume_from_checkpoint(self) -> None:
        """Resume from the newest checkpoint whose iteration's row is recorded: a checkpoint newer than the rows (a
        driver stopped between its optimizer step and its row) would leave that iteration out of the job's history
        for good, so its iterations are trained again. Only when no such checkpoint is left is the newest one used."""
        root, recorded = self.ctx.checkpoints_dir, self.ctx.recorded_through
        if self.mirror is not None:  # this host may lack it (written elsewhere, or its disk was wiped)
            try:
                self.mirror.restore(root, at_most=recorded)
            except (ArtifactStoreError, OSError) as err:
                raise JobSetupError(f"cannot read the job's checkpoints from the artifact store: {err}") from err
        newest = ckpt.latest_checkpoint(root)
        if newest is None:
            return
        found = newest if recorded is None else ckpt.latest_checkpoint(root, at_most=recorded) or newest
        resumed = self.trainer.load_checkpoint(Path(found))
        message = f"driver resumed from checkpoint at iteration {resumed}"
        buffered = check_resume(Path(found), self.schedule, self.spec.seed, self.spec.algorithm.group_size)
        if recorded is not None and ckpt.checkpoint_iteration(newest) > recorded:
            message += (f" (checkpoint {newest.name} is newer than the last recorded iteration, {recorded}: "
                        + ("its iterations are trained again)" if resumed <= recorded else
                           f"iterations {recorded + 1}-{resumed} have no row)"))
        message += f"; {buffered}" if buffered else ""
        self.reporter.record_event(self.job_id, "worker", message, data={"driver": "resumed", "iteration": resumed})

