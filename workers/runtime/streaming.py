"""Disaggregated modes: the driver dispatches prompts to generation instances and trains on the sample stream.

sync  (dynamic-batch pipelining, on-policy): iteration i's prompts are dispatched once weights version i is
      published; a micro-step runs as soon as complete groups fill `micro_batch_size`; one optimizer step per
      iteration; samples must come from version i (anything else is over-stale).
async (fully asynchronous pipelining, max_staleness k): iterations up to i + k are dispatched ahead, each request
      requiring weights >= its iteration - k, so instances generate iteration i + 1 on older weights while the
      trainer trains iteration i; weight publication overlaps generation. Samples older than k versions are dropped
      and regenerated; the loss corrects the rest with importance ratios against the behaviour logprobs.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select

from backend.db import GenerationInstance, InstanceStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES
from backend.db.session import session_scope
from backend.services.jobs import record_event
from contract.liveness import Timeouts
from workers.dispatch.metrics import recall_top, tail_fraction
from workers.runtime import components
from workers.runtime.collector import Held, SampleCollector
from workers.runtime.context import JobContext, JobSetupError
from workers.runtime.driver import Driver
from workers.runtime.instance import gen_stats_key
from workers.runtime.metrics import generation_window, producing_instances, trainer_metrics
from workers.stream import PromptRequest, SampleStream

MAINTAIN_EVERY_S = 1.0
LIVE_OR_STOPPING = {str(s) for s in LIVE_INSTANCE_STATUSES} | {str(InstanceStatus.stopping)}
STALL_TIMEOUT_S = 900.0  # no sample for this long while instances exist: the job cannot progress


class StreamDriver(Driver):
    def __init__(self, ctx: JobContext):
        super().__init__(ctx)
        self.lookahead = ctx.spec.max_staleness if ctx.spec.mode == "async" else 0
        self.stream = SampleStream(ctx.redis, ctx.job_id)
        self.collector = SampleCollector(self.stream, ctx.spec.algorithm.group_size, self.lookahead)
        self.next_dispatch = 0
        self.dispatched_at: dict[int, float] = {}
        self.orphans: list[PromptRequest] = []
        self.timeouts = Timeouts.from_env()
        self._last_maintain = 0.0
        self._gen_stats_seen = {"idle_seconds": 0.0, "loading_seconds": 0.0}
        self._last_gen_end: float | None = None  # end of the previous iteration's generation (samples' finished_at)

    def start(self) -> None:
        self.next_dispatch = self.trainer.iteration
        if self.spec.training.weight_sync == "broadcast":
            with session_scope() as session:
                record_event(session=session, job_id=self.job_id, kind="worker",
                             message="weight_sync 'broadcast' needs a fixed process group; this job's instances are "
                                     "elastic, so weights go through the shared store (every sync is still timed)")
        if self.trainer.version > self.transport.latest_version():
            self.publish_weights()  # resumed from a checkpoint newer than the published weights

    # -- one iteration ------------------------------------------------------------------------------------------------
    def iteration(self, it: int) -> dict[str, Any]:
        self._dispatch_through(it + self.lookahead)
        mbs = self.spec.training.micro_batch_size
        n_groups, done_groups = self.spec.training.prompts_per_iteration, 0
        buffer: list[Held] = []
        used: list[Held] = []
        train_s = wait_s = 0.0
        while done_groups < n_groups or buffer:
            if done_groups < n_groups:
                start = time.time()
                self.collector.poll(block_ms=0 if len(buffer) >= mbs else 100, min_version=self.trainer.version)
                for group in self.collector.pop_complete(it):
                    buffer.extend(group)
                    done_groups += 1
                if len(buffer) < mbs and done_groups < n_groups:
                    wait_s += time.time() - start
                    self.spans.add("waiting", start, time.time())
                self._maintain(it)
            while len(buffer) >= mbs or (done_groups == n_groups and buffer):
                chunk, buffer = buffer[:mbs], buffer[mbs:]
                start = time.time()
                self._micro_step(chunk)
                train_s += time.time() - start
                self.spans.add("training", start, time.time())
                used.extend(chunk)
        start = time.time()
        step = self.trainer.optimizer_step()
        sync_s = self.publish_weights()  # version it + 1
        train_s += time.time() - start - sync_s
        self.spans.add("training", start, time.time() - sync_s)
        self.collector.commit(used, it)
        samples = [h.sample for h in used]
        self.dispatcher.ranker.observe(samples)
        gen_start, gen_end = generation_window(samples, self.dispatched_at.get(it, time.time()), self._last_gen_end)
        self._last_gen_end = gen_end if self._last_gen_end is None else max(self._last_gen_end, gen_end)
        row: dict[str, Any] = {
            "gen_seconds": gen_end - gen_start, "train_seconds": train_s,
            "trainer_idle_seconds": wait_s, "weight_sync_seconds": sync_s,
            "stale_dropped": self.collector.stats.stale_dropped, "duplicates": self.collector.stats.duplicates,
            "instances": producing_instances(samples), "instances_live": len(self._live_instances()),
            "policy_version": self.trainer.version,
            "tail_fraction": tail_fraction(gen_start, [s.finished_at for s in samples if s.finished_at > 0]),
            **self._generator_stats(), **self._recall(it, samples), **trainer_metrics(step), "_samples": samples,
        }
        self.dispatched_at.pop(it, None)
        return row

    def _micro_step(self, chunk: list[Held]) -> None:
        samples = [h.sample for h in chunk]
        self.trainer.micro_step(samples, self.trainer.algorithm.batch_advantages(samples))

    # -- dispatch and upkeep ------------------------------------------------------------------------------------------
    def _dispatch_through(self, last: int) -> None:
        last = min(last, self.spec.training.iterations - 1)
        while self.next_dispatch <= last:
            j = self.next_dispatch
            instances = self._wait_for_instances()
            self.dispatcher.dispatch(j, instances, max(0, j - self.lookahead), components.load_ptl(self.job_id))
            self.dispatched_at[j] = time.time()
            self.next_dispatch += 1

    def _live_instances(self) -> list[str]:
        with session_scope() as session:
            return list(session.scalars(select(GenerationInstance.instance_id).where(
                GenerationInstance.job_id == self.job_id, GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES))
                .order_by(GenerationInstance.id)))

    def _gone_instances(self, candidates: set[str]) -> list[str]:
        """Of `candidates`, the instances that have exited (stopped or dead). A `stopping` instance still finishes
        what it admitted and acknowledges it: its stream is drained only once it is gone, so nothing is lost and no
        stream disappears under a running instance."""
        if not candidates:
            return []
        with session_scope() as session:
            present = {iid: str(status) for iid, status in session.execute(
                select(GenerationInstance.instance_id, GenerationInstance.status).where(
                    GenerationInstance.job_id == self.job_id, GenerationInstance.instance_id.in_(candidates)))}
        return sorted(iid for iid in candidates if present.get(iid) not in LIVE_OR_STOPPING)

    def _wait_for_instances(self) -> list[str]:
        deadline = time.time() + self.timeouts.instance_start_s
        while True:
            live = self._live_instances()
            if live:
                return live
            if time.time() > deadline:
                raise JobSetupError(f"no generation instance came up within {self.timeouts.instance_start_s:.0f}s; "
                                    "start one with `streamrl worker --pool generation`")
            self.check_runnable()
            with self.spans.span("waiting"):
                time.sleep(0.5)

    def _maintain(self, it: int) -> None:
        """Every second: honour cancel/pause, move requests off gone instances, resend over-stale samples."""
        now = time.time()
        if now - self._last_maintain < MAINTAIN_EVERY_S:
            return
        self._last_maintain = now
        self.check_runnable()
        live = self._live_instances()
        for gone in self._gone_instances(self.dispatcher.touched - set(live)):
            drained = self.dispatcher.drain(gone)
            if drained:
                self.orphans.extend(drained)
                with session_scope() as session:
                    record_event(session=session, job_id=self.job_id, kind="worker",
                                 message=f"re-dispatching {len(drained)} requests of stopped instance {gone}",
                                 data={"instance_id": gone, "requests": len(drained)})
        self.orphans.extend(self.collector.take_regenerations())
        if self.orphans and live:
            wanted = [r for r in self.orphans if not self.stream.already_produced(r.sample_id)]
            if wanted:
                self.dispatcher.send(wanted, live)
            self.orphans = []
        if now - self.collector.last_arrival > STALL_TIMEOUT_S and self.collector.held_count(it) == 0:
            raise JobSetupError(f"no samples arrived for {STALL_TIMEOUT_S:.0f}s; the generation instances are stuck")

    def _generator_stats(self) -> dict[str, float]:
        raw: Any = self.ctx.redis.hgetall(gen_stats_key(self.job_id))
        now = {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in (raw or {}).items()}
        delta = {}
        for name in ("idle_seconds", "loading_seconds"):
            total = now.get(name, 0.0)
            delta[name], self._gen_stats_seen[name] = total - self._gen_stats_seen[name], total
        return {"generator_idle_seconds": delta["idle_seconds"], "weight_load_seconds": delta["loading_seconds"]}

    def _recall(self, it: int, samples: list[Any]) -> dict[str, float]:
        by_group: dict[str, list[int]] = {}
        for s in samples:
            by_group.setdefault(s.group_id, []).append(len(s.response_ids))
        predicted = self.dispatcher.predictions.pop(it, {})
        groups = sorted(by_group)
        actual = [sum(by_group[g]) / len(by_group[g]) for g in groups]
        pred = [predicted.get(g, 0.0) for g in groups]
        return {f"recall_top{int(share * 100)}": recall_top(pred, actual, share) for share in (0.2, 0.1, 0.05)}

