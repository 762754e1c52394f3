"""The generation instance loop (`generation.run_instance`): engine + prompt queue + stream producer (DESIGN §4).

One long `generate_stream` call (continuous batching) is fed lazily from this instance's prompt stream in the
order the dispatcher wrote it (longest-predicted first); each finished request is rewarded, streamed to the job's
sample stream and only then acknowledged. A request whose sample id was already streamed is acknowledged unseen.

Weights: before admitting a request the feed loads the newest published version. In sync mode a new version is only
published after every sample of the previous iteration was used, so the switch happens between batches; in async
mode it happens while older requests keep decoding (generation never stops). Each sample carries the version its
request was admitted under; a request's `min_version` makes the instance wait for weights at least that new.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db import GenerationInstance, InstanceStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES
from backend.db.session import session_scope
from contract.sample import Sample
from workers.generation.engine import GenerationRequest, GenerationResult, SamplingParams
from workers.runtime import components
from workers.runtime.context import JobContext, load_context
from workers.runtime.telemetry import Heartbeat, SpanRecorder
from workers.stream import PromptQueue, PromptRequest, SampleStream, keys
from workers.weightsync import SharedStoreTransport

log = logging.getLogger(__name__)
POLL_S = 0.02  # how often the feed polls Redis while the engine is busy
IDLE_BLOCK_MS = 200  # blocking read while the engine has nothing to do


@dataclass
class _InFlight:
    entry_id: str
    request: PromptRequest
    version: int


def gen_stats_key(job_id: int) -> str:
    return keys.generator_stats(job_id)


class InstanceRunner:
    def __init__(self, ctx: JobContext, instance_id: str):
        self.ctx, self.instance_id = ctx, instance_id
        self.spec = ctx.spec
        self.queue = PromptQueue(ctx.redis, ctx.job_id, instance_id)
        self.samples = SampleStream(ctx.redis, ctx.job_id)
        self.transport = SharedStoreTransport(ctx.weights_dir, ctx.redis, ctx.job_id, template_dir=ctx.model_dir)
        self.spans = SpanRecorder(ctx.job_id, instance_id, ctx.redis)
        self.stop = threading.Event()
        self.in_flight: dict[str, _InFlight] = {}
        self.local: deque[tuple[str, PromptRequest]] = deque()
        self.produced = 0
        self._busy_since: float | None = None  # the engine has requests in flight since then ("generating")
        self._last_poll = 0.0
        gen = self.spec.generation
        self.sampling = SamplingParams(temperature=gen.temperature, top_p=gen.top_p, max_tokens=gen.max_tokens,
                                       stop=tuple(gen.stop))

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def run(self) -> str:
        heartbeat = Heartbeat(self._beat, name=f"heartbeat-{self.instance_id}").start()
        try:
            with self.spans.span("loading_weights"):
                self.engine = components.make_engine(self.spec, self.ctx.model_dir)
                self._load_latest()
            components.profile_ptl_once(self.ctx, self.engine)
            self._set_status(InstanceStatus.running)
            self.reward = components.make_reward(self.spec)
            try:
                for result in self.engine.generate_stream(self._feed()):
                    self._emit(result)
            finally:
                self.reward.close()
        finally:
            heartbeat.stop()
            self._set_status(InstanceStatus.stopped)
            self.spans.flush()
        return f"instance {self.instance_id} of job {self.ctx.job_id} stopped after {self.produced} samples"

    def _beat(self) -> None:
        self.ctx.redis.set(keys.instance_heartbeat(self.ctx.job_id, self.instance_id),
                           json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                                       "version": getattr(getattr(self, "engine", None), "version", None),
                                       "produced": self.produced}), ex=120)
        if self.ctx.redis.exists(keys.instance_stop(self.ctx.job_id, self.instance_id), keys.job_done(self.ctx.job_id)):
            self.stop.set()
        with session_scope() as session:
            row = self._row(session)
            if row is None or row.status not in LIVE_INSTANCE_STATUSES:
                self.stop.set()
            else:
                row.heartbeat_at, row.hostname = datetime.now(UTC), socket.gethostname()
        busy_since, now = self._busy_since, time.time()
        if busy_since is not None:  # cut long busy periods so the live timeline keeps up
            self.spans.add("generating", busy_since, now)
            self._busy_since = now
        self.spans.flush()

    def _row(self, session: Session) -> GenerationInstance | None:
        return session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == self.ctx.job_id,
                                                               GenerationInstance.instance_id == self.instance_id))

    def _set_status(self, status: InstanceStatus) -> None:
        with session_scope() as session:
            row = self._row(session)
            if row is None:
                return
            if status == InstanceStatus.running and row.status == InstanceStatus.starting:
                row.status = status
            elif status == InstanceStatus.stopped and row.status != InstanceStatus.dead:
                row.status, row.stopped_at = status, datetime.now(UTC)

    # -- weights ------------------------------------------------------------------------------------------------------
    def _load_latest(self, at_least: int = 0) -> None:
        if at_least > self.engine.version:
            self.transport.wait_for(at_least, timeout_s=300)
        latest = self.transport.latest_version()
        if latest > self.engine.version:
            start = time.time()
            self.engine.update_weights(latest, self.transport.path(latest))
            self.spans.add("loading_weights", start, time.time())
            self.ctx.redis.hincrbyfloat(gen_stats_key(self.ctx.job_id), "loading_seconds", time.time() - start)

    # -- the feed the engine pulls from -------------------------------------------------------------------------------
    def _feed(self) -> Iterator[GenerationRequest | None]:
        while not self.stop.is_set():
            if not self.local:
                self._refill()
            if not self.local:
                yield None  # nothing to admit now; the engine keeps decoding what it has
                continue
            entry_id, request = self.local.popleft()
            if entry_id in {f.entry_id for f in self.in_flight.values()}:
                continue  # our own in-flight entry, re-read by XAUTOCLAIM after the idle timeout
            if self.samples.already_produced(request.sample_id):
                self.queue.ack([entry_id])  # reclaimed or re-dispatched, but some instance already streamed it
                continue
            with self.spans.span("loading_weights"):
                self._load_latest(at_least=request.min_version)
            if not self.in_flight:
                self._busy_since = time.time()
            self.in_flight[request.sample_id] = _InFlight(entry_id, request, self.engine.version)
            sampling = dataclasses.replace(self.sampling, seed=request.seed)
            yield GenerationRequest(request_id=request.sample_id, prompt_ids=request.prompt_ids, sampling=sampling,
                                    meta=request.meta)

    def _refill(self) -> None:
        now = time.monotonic()
        idle = not self.in_flight
        if not idle and now - self._last_poll < POLL_S:
            return
        self._last_poll = now
        start = time.time()
        got = self.queue.read(self.instance_id, count=self.spec.generation.batch_size,
                              block_ms=IDLE_BLOCK_MS if idle else 0)
        if idle and not got:
            self.spans.add("idle", start, time.time())
            self.ctx.redis.hincrbyfloat(gen_stats_key(self.ctx.job_id), "idle_seconds", time.time() - start)
        self.local.extend(got)

    # -- results ------------------------------------------------------------------------------------------------------
    def _emit(self, result: GenerationResult) -> None:
        flight = self.in_flight.pop(result.request_id)
        request = flight.request
        outcome = self.reward.score(request.prompt_text, result.text, request.meta)
        sample = Sample(
            job_id=self.ctx.job_id, prompt_id=request.prompt_id, group_id=request.group_id,
            sample_id=request.sample_id, policy_version=flight.version, prompt_ids=list(result.prompt_ids),
            response_ids=list(result.response_ids), behaviour_logprobs=list(result.logprobs),
            finish_reason=result.finish_reason, prompt_text=request.prompt_text, response_text=result.text,
            reward=outcome.value, reward_components=dict(outcome.components), reward_error=outcome.error,
            meta=dict(request.meta), queued_at=request.queued_at, started_at=result.started_at,
            finished_at=result.finished_at, instance_id=self.instance_id,
        )
        self.samples.publish(sample)
        self.queue.ack([flight.entry_id])
        self.produced += 1
        if not self.in_flight and self._busy_since is not None:
            self.spans.add("generating", self._busy_since, time.time())
            self._busy_since = None


def run_instance(job_id: int, instance_id: str) -> str:
    ctx = load_context(job_id)
    with session_scope() as session:
        row = session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == job_id,
                                                              GenerationInstance.instance_id == instance_id))
        if row is not None and row.status == InstanceStatus.stopping and row.heartbeat_at is None:
            row.status, row.stopped_at = InstanceStatus.stopped, datetime.now(UTC)  # scaled away before it ran:
            # it never read its stream, so the driver may re-dispatch all of it now
        if row is None or row.status not in LIVE_INSTANCE_STATUSES:
            return f"instance {instance_id} of job {job_id} is no longer wanted"
    if ctx.job_done():
        return f"job {job_id} has ended"
    return InstanceRunner(ctx, instance_id).run()
