"""The generation instance loop (`generation.run_instance`): engine + prompt queue + stream producer.

One long `generate_stream` call (continuous batching) is fed lazily from this instance's prompt stream in the
order the dispatcher wrote it (longest-predicted first); each finished request is rewarded, streamed to the job's
sample stream and acknowledged in the same atomic step, batched: samples that finish within POLL_S of each other go
in one round trip (at once when the engine runs dry). A request whose sample id was already streamed is acknowledged
unseen. Redis round trips are per batch of samples and per batch of requests read, not per sample.

Weights: before admitting a request the feed loads the newest published version. In sync mode a new version is only
published after every sample of the previous iteration was used, so the switch happens between batches; in async
mode it happens while older requests keep decoding (generation never stops). Each sample carries the version its
request was admitted under; a request's `min_version` makes the instance wait for weights at least that new.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from contract import keys
from contract.reporter import Reporter
from contract.sample import PromptRequest, Sample
from contract.states import InstanceStatus
from workers.core import generation_request, sampling_params, to_sample
from workers.generation.engine import GenerationRequest, GenerationResult
from workers.runtime import components
from workers.runtime.context import JobContext, load_context
from workers.runtime.shutdown import ShutdownWatch
from workers.runtime.telemetry import Heartbeat, SpanRecorder
from workers.stream import PromptQueue, SampleStream
from workers.weightsync import setup_weight_sync

log = logging.getLogger(__name__)
POLL_S = 0.02  # how often the feed polls Redis (prompts, weight version) while the engine is busy
IDLE_BLOCK_MS = 200  # blocking read while the engine has nothing to do
PUBLISH_BATCH = 32  # finished samples streamed in one round trip at most


@dataclass
class _InFlight:
    entry_id: str
    request: PromptRequest
    version: int


class InstanceRunner:
    def __init__(self, ctx: JobContext, instance_id: str):
        self.ctx, self.instance_id = ctx, instance_id
        self.spec = ctx.spec
        self.redis = ctx.require_redis()
        self.queue = PromptQueue(self.redis, ctx.job_id, instance_id)
        self.samples = SampleStream(self.redis, ctx.job_id)
        self.transport = setup_weight_sync(ctx.spec, root=ctx.weights_dir, client=self.redis, job_id=ctx.job_id,
                                           template_dir=ctx.model_dir, instance_id=instance_id,
                                           device=components.worker_device())
        self.spans = SpanRecorder(ctx.job_id, instance_id, ctx.reporter)
        self.stop = threading.Event()
        self.shutdown = ShutdownWatch(self.redis, ctx.node)
        self.in_flight: dict[str, _InFlight] = {}
        self.local: deque[tuple[str, PromptRequest]] = deque()
        self.produced = 0
        self._busy_since: float | None = None  # the engine has requests in flight since then ("generating")
        self._last_poll = 0.0
        self._version_checked = 0.0  # monotonic time the newest published weights version was last read
        # finished samples not yet streamed (their prompts stay unacknowledged until then, so a crash loses nothing:
        # the entries are reclaimed and generated again); streamed when the engine runs dry, PUBLISH_BATCH are
        # waiting, or the oldest has waited POLL_S
        self.outbox: list[tuple[Sample, str]] = []
        self._outbox_since = 0.0
        self.sampling = sampling_params(self.spec.generation)
        self.engine: Any = None
        self.reward: Any = None

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def run(self) -> str:
        heartbeat = Heartbeat(self._beat, name=f"heartbeat-{self.instance_id}").start()
        try:
            with self.spans.span("loading_weights"):
                self.engine = components.make_engine(self.spec, self.ctx.model_dir)
                self._load_latest()
            components.profile_ptl_once(self.ctx, self.engine)
            self.ctx.reporter.set_instance_status(self.ctx.job_id, self.instance_id, InstanceStatus.running)
            self.reward = components.make_reward(self.ctx)
            try:
                for result in self.engine.generate_stream(self._feed()):
                    self._emit(result)
                self._flush()
            finally:
                self.reward.close()
        finally:
            heartbeat.stop()
            self.transport.close()
            self.ctx.reporter.set_instance_status(self.ctx.job_id, self.instance_id, InstanceStatus.stopped)
            self.spans.flush()
        return f"instance {self.instance_id} of job {self.ctx.job_id} stopped after {self.produced} samples"

    def _beat(self) -> None:
        self.redis.set(keys.instance_heartbeat(self.ctx.job_id, self.instance_id),
                       json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                                   "version": getattr(self.engine, "version", None), "produced": self.produced}),
                       ex=120)
        if self.redis.exists(keys.instance_stop(self.ctx.job_id, self.instance_id), keys.job_done(self.ctx.job_id)):
            self.stop.set()
        if not self.ctx.reporter.beat_instance(self.ctx.job_id, self.instance_id, socket.gethostname()):
            self.stop.set()
        if self.shutdown.check():
            self.stop.set()  # the worker is shutting down: the controller replaces this instance elsewhere
        busy_since, now = self._busy_since, time.time()
        if busy_since is not None:  # cut long busy periods so the live timeline keeps up
            self.spans.add("generating", busy_since, now)
            self._busy_since = now
        self.spans.flush()

    # -- weights ------------------------------------------------------------------------------------------------------
    def _load_latest(self, at_least: int = 0) -> None:
        if at_least > self.engine.version:
            self.transport.wait_for(at_least, timeout_s=300)
        latest = self.transport.latest_version()
        if latest != self.engine.version:  # older: a restarted driver rolled back to its checkpoint
            start = time.time()
            self.transport.load_into(self.engine, latest)
            self.spans.add("loading_weights", start, time.time())
            self.redis.hincrbyfloat(keys.generator_stats(self.ctx.job_id), "loading_seconds", time.time() - start)

    # -- the feed the engine pulls from -------------------------------------------------------------------------------
    def _feed(self) -> Iterator[GenerationRequest | None]:
        while not self.stop.is_set():
            if self.outbox and time.monotonic() - self._outbox_since >= POLL_S:
                self._flush()  # the engine asks between decode steps: finished samples wait at most POLL_S
            if not self.local:
                self._refill()
            if not self.local:
                yield None  # nothing to admit now; the engine keeps decoding what it has
                continue
            entry_id, request = self.local.popleft()
            if entry_id in {f.entry_id for f in self.in_flight.values()}:
                continue  # our own in-flight entry, re-read by XAUTOCLAIM after the idle timeout
            if request.sample_id in self.in_flight:
                self.queue.ack([entry_id])  # re-sent (driver resync) while we still generate it: one sample comes
                continue
            now = time.monotonic()
            if request.min_version > self.engine.version or now - self._version_checked >= POLL_S:
                self._version_checked = now  # newer weights are looked for at most every POLL_S, or when required
                with self.spans.span("loading_weights"):
                    self._load_latest(at_least=request.min_version)
            if not self.in_flight:
                self._busy_since = time.time()
            self.in_flight[request.sample_id] = _InFlight(entry_id, request, self.engine.version)
            yield generation_request(request, self.sampling)

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
            self.redis.hincrbyfloat(keys.generator_stats(self.ctx.job_id), "idle_seconds", time.time() - start)
        # reclaimed or re-dispatched entries some instance already streamed: acknowledged unseen (one round trip for
        # the batch; a sample streamed after this check is still streamed once: publishing is once per sample id)
        done = self.samples.produced_among([request.sample_id for _, request in got])
        if done:
            self.queue.ack([entry_id for entry_id, request in got if request.sample_id in done])
        self.local.extend((entry_id, request) for entry_id, request in got if request.sample_id not in done)

    # -- results ------------------------------------------------------------------------------------------------------
    def _emit(self, result: GenerationResult) -> None:
        flight = self.in_flight.pop(result.request_id)
        request = flight.request
        outcome = self.reward.score(request.prompt_text, result.text, request.meta)
        sample = to_sample(request, result, outcome, job_id=self.ctx.job_id, version=flight.version,
                           instance_id=self.instance_id)
        if not self.outbox:
            self._outbox_since = time.monotonic()
        self.outbox.append((sample, flight.entry_id))
        if (not self.in_flight or len(self.outbox) >= PUBLISH_BATCH
                or time.monotonic() - self._outbox_since >= POLL_S):
            self._flush()
        if not self.in_flight and self._busy_since is not None:
            self.spans.add("generating", self._busy_since, time.time())
            self._busy_since = None

    def _flush(self) -> None:
        """Stream the finished samples and acknowledge their prompts: one atomic Redis round trip for the batch."""
        if self.outbox:
            self.samples.publish_finished(self.queue, self.outbox)
            self.produced += len(self.outbox)
            self.outbox = []


def run_instance(job_id: int, instance_id: str, reporter: Reporter, client: redis.Redis, artifacts: Path,
                 node: str | None = None) -> str:
    """The `generation.run_instance` task body (`node`: the Celery worker running it)."""
    if not reporter.claim_instance(job_id, instance_id):
        return f"instance {instance_id} of job {job_id} is no longer wanted"
    ctx = load_context(job_id, reporter, client, artifacts, node)
    if ctx.job_done():
        return f"job {job_id} has ended"
    try:
        return InstanceRunner(ctx, instance_id).run()
    except Exception as err:  # recorded on the instance row: the controller detects instances that keep failing
        log.exception("instance %s of job %s failed", instance_id, job_id)
        reporter.set_instance_status(job_id, instance_id, InstanceStatus.dead, error=f"{type(err).__name__}: {err}")
        raise
