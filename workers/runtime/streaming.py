"""Disaggregated modes: `StreamSource`, the sample source fed by generation instances through the job's sample stream.

sync  (dynamic-batch pipelining, on-policy): iteration i's prompts are dispatched once weights version i is
      published; a micro-step runs as soon as complete groups fill `micro_batch_size`; one optimizer step per
      iteration; samples must come from version i (anything else is over-stale).
async (fully asynchronous pipelining, max_staleness k): iterations up to i + k are dispatched ahead, each request
      requiring weights >= its iteration - k, so instances generate iteration i + 1 on older weights while the
      trainer trains iteration i; weight publication overlaps generation. Samples older than k versions are dropped
      and regenerated; the loss corrects the rest with importance ratios against the behaviour logprobs.

    dispatch ahead -> arrivals(it): complete groups as they stream in -> (driver: micro-steps, optimizer step,
    publish weights) -> trained: acknowledge the samples used
    evaluate(version): the held-out requests dispatched like any others; evaluated: once the stream brought them all

What an instance streams is one `Sample` per request, a completion or an episode (built-in or gateway), all built by
workers/core/sample.py; this source only collects, bounds staleness and groups them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from contract import keys
from contract.environments import GATEWAY, OPENENV, VERIFIERS
from contract.liveness import Timeouts
from contract.sample import PromptRequest, Sample
from contract.states import LIVE_INSTANCE_STATUSES, InstanceStatus
from workers.dispatch.metrics import recall_top, tail_fraction
from workers.runtime.collector import Held, SampleCollector
from workers.runtime.context import JobSetupError
from workers.runtime.metrics import generation_window, producing_instances
from workers.runtime.source import Arrival, Host, SampleSource
from workers.stream import SampleStream

MAINTAIN_EVERY_S = 1.0
LIVE_OR_STOPPING = LIVE_INSTANCE_STATUSES | {InstanceStatus.stopping}
STALL_TIMEOUT_S = 900.0  # no sample for this long while instances exist: the job cannot progress


class StreamSource(SampleSource):
    @property
    def evaluates_untrained(self) -> bool:  # type: ignore[override]
        """Episodes from an agent or a remote environment (environment.type gateway: agent.code, agent.url or agents
        that claim; verifiers; openenv): the initial weights' held-out reward (the curve's point 0, a job event),
        dispatched to the instances once they serve v0 and collected before iteration 0 is trained, so every sample
        of it is v0's. Such jobs have no other start figure (their episodes run outside the driver). Other streaming
        jobs keep starting at iteration 0 without it."""
        environment = self.spec.environment
        return environment is not None and environment.type in (GATEWAY, VERIFIERS, OPENENV)

    def __init__(self, host: Host):
        super().__init__(host)
        ctx = host.ctx
        self.ctx, self.spec, self.job_id, self.reporter = ctx, ctx.spec, ctx.job_id, ctx.reporter
        self.dispatcher, self.rec = host.dispatcher, host.rec
        self.redis = ctx.require_redis()
        # async dispatches (and tolerates samples) up to max_staleness versions ahead; sync trains on-policy only
        self.max_staleness = ctx.spec.max_staleness if ctx.spec.mode == "async" else 0
        self.stream = SampleStream(self.redis, ctx.job_id)
        self.collector = SampleCollector(self.stream, ctx.spec.algorithm.group_size, self.max_staleness, ctx.epoch)
        self.next_dispatch = 0
        self.dispatched_at: dict[int, float] = {}
        self.orphans: list[PromptRequest] = []
        self.evals_pending: dict[int, list[PromptRequest]] = {}  # held-out evaluations dispatched, by version
        self.iteration = 0  # the iteration being produced
        self.held: dict[str, Held] = {}  # this iteration's samples handed to the driver, by sample id
        self.timeouts = Timeouts.from_env()
        self._last_maintain = 0.0
        self._gen_stats_seen = {"idle_seconds": 0.0, "loading_seconds": 0.0, "reward_seconds": 0.0}
        self._last_gen_end: float | None = None  # end of the previous iteration's generation (samples' finished_at)

    def start(self, first: int) -> None:
        self.next_dispatch = self.iteration = first
        if self.ctx.epoch > 0:  # a restarted driver: what earlier drivers queued is not ours to train on
            for instance in self.reporter.instance_states(self.job_id):
                self.dispatcher.drain(instance)
        if not self.host.weights_served():
            self.host.publish_weights()  # resumed: instances go back (or forward) to the checkpoint's weights; p2p:
            # the trainer holds its current version for instances that join
        self.redis.set(keys.driver_marker(self.job_id), self.ctx.epoch)

    # -- one iteration ------------------------------------------------------------------------------------------------
    def arrivals(self, it: int) -> Iterator[Arrival]:
        """Iteration `it`'s complete groups as they stream in, one arrival per read of the stream."""
        self.iteration = it
        self.dispatch_through(it + self.max_staleness)
        self.held = {}
        n_groups, done_groups = self.spec.training.prompts_per_iteration, 0
        while done_groups < n_groups:
            start = time.time()
            self.collector.poll(block_ms=100, min_version=self.host.version)
            groups = self.collector.pop_complete(it)
            for group in groups:
                self.held.update((h.sample.sample_id, h) for h in group)
            done_groups += len(groups)
            waited = (start, time.time())
            self.maintain(it)
            yield Arrival([[h.sample for h in group] for group in groups], done_groups == n_groups, waited)

    def trained(self, it: int, samples: list[Sample], publish_seconds: float) -> None:
        self.collector.commit([self.held[s.sample_id] for s in samples], it)

    def metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        return self.stream_metrics(it, samples)

    def evaluate(self, version: int, requests: list[PromptRequest]) -> None:
        self.dispatcher.send(requests, self.wait_for_instances())
        self.evals_pending[version] = requests

    def evaluated(self, version: int, wait: bool) -> list[Sample] | None:
        while len(self.collector.evals.get(version, {})) < len(self.evals_pending[version]):
            if not wait:
                return None
            self.collector.poll(block_ms=100, min_version=self.host.version)
            self.maintain(self.iteration)
        del self.evals_pending[version]
        return list(self.collector.evals.pop(version, {}).values())

    # -- dispatch and upkeep ------------------------------------------------------------------------------------------
    def dispatch_through(self, last: int) -> None:
        last = min(last, self.spec.training.iterations - 1)
        while self.next_dispatch <= last:
            j = self.next_dispatch
            self.dispatcher.dispatch(j, self.wait_for_instances(), max(0, j - self.max_staleness))
            self.dispatched_at[j] = time.time()
            self.next_dispatch += 1

    def live_instances(self) -> list[str]:
        """Instances that are producing: a `starting` one may wait for a free worker slot for a long time, so
        prompts never go to it (they would sit in its stream)."""
        return [iid for iid, status in self.reporter.instance_states(self.job_id).items()
                if status == InstanceStatus.running]

    def wait_for_instances(self) -> list[str]:
        deadline = time.time() + self.timeouts.instance_start_s
        while True:
            live = self.live_instances()
            if live:
                return live
            if time.time() > deadline:
                raise JobSetupError(f"no generation instance came up within {self.timeouts.instance_start_s:.0f}s; "
                                    "start one with `streamrl worker --pool generation`")
            self.host.check_runnable()
            with self.rec.phase("waiting"):
                time.sleep(0.5)

    def maintain(self, it: int) -> None:
        """Every second: honour cancel/pause, move requests off gone instances, resend over-stale samples."""
        now = time.time()
        if now - self._last_maintain < MAINTAIN_EVERY_S:
            return
        self._last_maintain = now
        self.host.check_runnable()
        if not self.redis.exists(keys.driver_marker(self.job_id)):
            self.resync(it)
        states = self.reporter.instance_states(self.job_id)
        live = [iid for iid, status in states.items() if status == InstanceStatus.running]
        # a `stopping` instance still finishes and acknowledges what it admitted: drain it only once it is gone
        gone = sorted(iid for iid in self.dispatcher.touched - set(live) if states.get(iid) not in LIVE_OR_STOPPING)
        for instance in gone:
            drained = self.dispatcher.drain(instance)
            if drained:
                self.orphans.extend(drained)
                self.reporter.record_event(self.job_id, "worker", f"re-dispatching {len(drained)} requests of "
                                           f"stopped instance {instance}",
                                           data={"instance_id": instance, "requests": len(drained)})
        self.orphans.extend(self.collector.take_regenerations())
        if self.orphans and live:
            produced = self.stream.produced_among([r.sample_id for r in self.orphans])  # one round trip
            wanted = [r for r in self.orphans if r.sample_id not in produced]
            if wanted:
                self.dispatcher.send(wanted, live)
            self.orphans = []
        if now - self.collector.last_arrival > STALL_TIMEOUT_S and self.collector.held_count(it) == 0:
            raise JobSetupError(
                f"no samples arrived for {STALL_TIMEOUT_S:.0f}s: the generation instances are stuck")

    def resync(self, it: int) -> None:
        """Redis restarted without its data: prompt streams, the latest-weights key and in-flight samples are gone.
        Publish the current weights again and re-send every request of the dispatched iterations not held here."""
        self.redis.set(keys.driver_marker(self.job_id), self.ctx.epoch)
        self.host.publish_weights()
        resend: list[PromptRequest] = []
        for j in range(it, self.next_dispatch):
            held = self.collector.have_ids(j) | self.collector.taken
            resend += [r for g in self.dispatcher.requests_for(j, max(0, j - self.max_staleness)) for r in g
                       if r.sample_id not in held]
        for version, requests in self.evals_pending.items():
            held = set(self.collector.evals.get(version, {}))
            resend += [r for r in requests if r.sample_id not in held]
        live = self.wait_for_instances()
        self.dispatcher.touched.clear()
        self.dispatcher.send(resend, live)
        self.reporter.record_event(self.job_id, "worker", f"Redis lost the job's runtime state (restarted?): "
                                   f"weights v{self.host.version} republished, {len(resend)} requests re-sent",
                                   data={"requests": len(resend)})

    # -- metrics ------------------------------------------------------------------------------------------------------
    def stream_metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        gen_start, gen_end = generation_window(samples, self.dispatched_at.pop(it, time.time()), self._last_gen_end)
        self._last_gen_end = gen_end if self._last_gen_end is None else max(self._last_gen_end, gen_end)
        return {
            "gen_seconds": gen_end - gen_start, "stale_dropped": self.collector.stats.stale_dropped,
            "duplicates": self.collector.stats.duplicates, "instances": producing_instances(samples),
            "instances_live": len(self.live_instances()), "policy_version": self.host.version,
            "tail_fraction": tail_fraction(gen_start, [s.finished_at for s in samples if s.finished_at > 0]),
            "long_tail_instances": self.dispatcher.long_tail_instances.pop(it, 0),
            **self.generator_stats(), **self.recall(it, samples),
        }

    def generator_stats(self) -> dict[str, float]:
        raw: Any = self.redis.hgetall(keys.generator_stats(self.job_id))
        now = {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in (raw or {}).items()}
        delta = {}
        for name in ("idle_seconds", "loading_seconds", "reward_seconds"):
            total = now.get(name, 0.0)
            delta[name], self._gen_stats_seen[name] = total - self._gen_stats_seen[name], total
        gateway = {f"{name}_total": now[name] for name in ("gateway_sequences", "gateway_broken_prefix") if name in now}
        return {"generator_idle_seconds": delta["idle_seconds"], "weight_load_seconds": delta["loading_seconds"],
                "reward_seconds": delta["reward_seconds"], **gateway}

    def recall(self, it: int, samples: list[Sample]) -> dict[str, float]:
        by_group: dict[str, list[int]] = {}
        for s in samples:
            by_group.setdefault(s.group_id, []).append(len(s.response_ids))
        predicted = self.dispatcher.predictions.pop(it, {})
        groups = sorted(by_group)
        actual = [sum(by_group[g]) / len(by_group[g]) for g in groups]
        pred = [predicted.get(g, 0.0) for g in groups]
        return {f"recall_top{int(share * 100)}": recall_top(pred, actual, share) for share in (0.2, 0.1, 0.05)}
