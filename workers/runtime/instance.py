"""The generation instance loop (`generation.run_instance`): engine + prompt queue + stream producer.

One long `generate_stream` call (continuous batching) is fed lazily from this instance's prompt stream in the
order the dispatcher wrote it (longest-predicted first); each finished request is rewarded, streamed to the job's
sample stream and acknowledged in the same atomic step, batched: samples that finish within POLL_S of each other go
in one round trip (at once when the engine runs dry) and are scored together (`Reward.score_many`: a judge or reward
model grades the batch on this instance's device; the time goes to the job's `reward_seconds`). A request whose
sample id was already streamed is acknowledged unseen. Redis round trips are per batch of samples and per batch of
requests read, not per sample.

Weights: before admitting a request the feed loads the newest published version. In sync mode a new version is only
published after every sample of the previous iteration was used, so the switch happens between batches. In async
mode with `generation.partial_rollouts` (and an engine that `records_versions`) it happens between decode steps while
older requests keep decoding on the new weights: each sample's version marks say which version sampled which token,
and its `policy_version` is the oldest (contract/version_marks.py). Otherwise async mode drains (workers/runtime/
inflight.py): a newer version waits until no request is in flight. A request's `min_version` makes the instance wait
for weights at least that new.

Episodes (spec.environment, workers/core/episode.py): a request is a multi-turn episode. Its first turn is admitted
like any request; when a turn finishes, the environment's step runs (synchronously, between decode steps) and the
next turn goes to the front of the feed, so the episode's turns share the continuous batch with other requests. The
finished episode is one sample, streamed and acknowledged like any other; a failing environment fails that episode.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from transformers import AutoTokenizer

from contract import keys
from contract.artifact_store import ArtifactStoreDenied, ArtifactStoreFull
from contract.environments import THROUGH_GATEWAY
from contract.reporter import Reporter
from contract.reward_window import RewardTally
from contract.sample import PromptRequest, Sample
from contract.states import InstanceStatus, JobStatus
from workers.core import generation_request, sampling_params, to_sample
from workers.core.episode import Episode, EpisodeRunner, episode_sample, grade_episodes
from workers.generation.engine import GenerationRequest, GenerationResult
from workers.rewards.base import RewardOutcome
from workers.runtime import components
from workers.runtime.context import HostMissing, JobContext, JobSetupError, load_context
from workers.runtime.gateway import GatewayEpisodes
from workers.runtime.inflight import DrainGate, EpisodeVersions, in_flight_updates
from workers.runtime.remote_agent import agent_runs
from workers.runtime.shutdown import ShutdownWatch
from workers.runtime.telemetry import Heartbeat, SpanRecorder
from workers.stream import PromptQueue, SampleStream
from workers.weightsync import setup_weight_sync

log = logging.getLogger(__name__)
POLL_S = 0.02  # how often the feed polls Redis (prompts, weight version) while the engine is busy
IDLE_BLOCK_MS = 200  # blocking read while the engine has nothing to do
PUBLISH_BATCH = 32  # finished samples streamed in one round trip at most
REWARD_EVENT_EVERY_S = 10.0  # reward_error events of one instance: at most one per this many seconds
REWARD_TIME_EVERY_S = 1.0  # scoring time goes to the job's generator stats this often, and when the engine runs dry


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
                                           device=components.worker_device(), team_id=ctx.team_id)
        self.spans = SpanRecorder(ctx.job_id, instance_id, ctx.reporter)
        self.stop = threading.Event()
        self.job_over = threading.Event()  # the job ended (succeeded, failed, cancelled): scoring stops too
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
        self.outbox: list[tuple[_InFlight, GenerationResult | None, Episode | None]] = []
        self._outbox_since = 0.0
        self.sampling = sampling_params(self.spec.generation)
        self.engine: Any = None
        self.reward: Any = None
        self.teacher: Any = None  # algorithm.teacher (workers/runtime/teacher.py), set by open()
        self.episodes: EpisodeRunner | None = None  # spec.environment: each request is a multi-turn episode
        self.live: dict[str, Episode] = {}  # episodes between their first and last turn
        self.gateway: GatewayEpisodes | None = None  # environment.type gateway, verifiers: an agent's calls are turns
        self.gateway_versions: dict[str, int] = {}  # sample id -> its gateway episode's oldest version
        self.turns: deque[GenerationRequest] = deque()  # next turns of live episodes, admitted before new prompts
        self.episode_versions = EpisodeVersions()
        self.gate: DrainGate | None = None  # async without in-flight updates: new weights wait for the batch to drain
        self.reward_tally = RewardTally(self.redis, ctx.job_id)
        self._error_reported_at = 0.0  # monotonic time of this instance's newest reward_error event
        self._errors_unreported = 0
        self._reward_seconds, self._reward_seconds_at = 0.0, 0.0  # scoring time not yet added; when last added
        # on a shared instance (workers/runtime/shared.py): its key, and whether a read may block while this job has
        # nothing in flight (not while other jobs' rows decode)
        self.shared: str | None = None
        self.may_block: Callable[[], bool] = lambda: True
        self.idle_block_ms = IDLE_BLOCK_MS

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def run(self) -> str:
        heartbeat = self.start_heartbeat()
        try:
            self.open(lambda: components.make_engine(self.spec, self.ctx.model_dir))
            components.profile_ptl_once(self.ctx, self.engine)
            self.ctx.reporter.set_instance_status(self.ctx.job_id, self.instance_id, InstanceStatus.running)
            for result in self.engine.generate_stream(self._feed()):
                self._emit(result)
            self._flush(final=True)
        finally:
            self.close(heartbeat)
        return f"instance {self.instance_id} of job {self.ctx.job_id} stopped after {self.produced} samples"

    def start_heartbeat(self) -> Heartbeat:
        return Heartbeat(self._beat, name=f"heartbeat-{self.instance_id}").start()

    def open(self, make_engine: Callable[[], Any]) -> None:
        """The reward (first: a reward this host cannot run fails in a moment), the environment, the engine (a
        private one, or this job's adapter on a shared instance) with the newest weights."""
        self.reward = components.make_reward(self.ctx)
        self.teacher = components.make_teacher(self.ctx)  # algorithm.teacher (distill), else None
        if self.spec.environment is not None and self.spec.environment.type in THROUGH_GATEWAY:
            self.gateway = GatewayEpisodes(self.redis, self.ctx.job_id, self.instance_id, self._tokenizer(),
                                           self.spec.environment, self.sampling,
                                           agents=agent_runs(self.spec, self.ctx.job_id))
        elif self.spec.environment is not None:  # one environment (one jailed process) for every episode
            self.episodes = components.make_episode_runner(self.ctx, self._tokenizer())
        with self.spans.span("loading_weights"):
            self.engine = make_engine()
            in_flight = in_flight_updates(self.spec.generation, self.engine)
            self.gate = DrainGate(self.spec.mode == "async" and not in_flight, self.engine, self.transport)
            self._load_latest()
        if self.spec.mode == "async" and self.spec.generation.partial_rollouts is None:
            self._say_in_flight_default(in_flight)

    def _say_in_flight_default(self, in_flight: bool) -> None:
        """The job's event for an unset `generation.partial_rollouts`: what this instance chose, and why."""
        why = "" if self.engine.records_versions else " (this engine cannot swap weights under running rows)"
        if in_flight and self.spec.max_staleness == 1:
            why = (": with max_staleness 1 generation runs one iteration ahead of the trainer, where in-flight "
                   "updates gained 1.05-1.28x over draining, against 1.33x with max_staleness 2 (bench/modes.py "
                   "--partial-rollouts, docs/user-guide.md)")
        self.ctx.reporter.record_event(
            self.ctx.job_id, "generation_defaults",
            f"instance {self.instance_id}: in-flight weight updates {'on' if in_flight else 'off (draining)'}: "
            f"generation.partial_rollouts unset, the {self.spec.generation.engine} engine's measured default{why}",
            {"instance": self.instance_id, "partial_rollouts": in_flight})

    def close(self, heartbeat: Heartbeat, error: str | None = None, *, say: bool = True) -> None:
        """Release what `open` made (whatever part of it was made) and say the instance stopped (dead with
        `error`; `say=False`: the caller says it)."""
        try:
            if self.reward is not None:
                self.reward.close()
            if self.episodes is not None:
                self.episodes.env.close()
            if self.gateway is not None:
                self.gateway.close()  # the job's agents (agent.url, agent.code) stop with the instance
        finally:
            heartbeat.stop()
            self.transport.close()
            if say:
                self.ctx.reporter.set_instance_status(self.ctx.job_id, self.instance_id,
                                                      InstanceStatus.stopped if error is None else InstanceStatus.dead,
                                                      error=error)
            self.spans.flush()

    def _beat(self) -> None:
        self.redis.set(keys.instance_heartbeat(self.ctx.job_id, self.instance_id),
                       json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                                   "version": getattr(self.engine, "version", None), "produced": self.produced,
                                   "shared": self.shared}),
                       ex=120)
        if self.redis.exists(keys.job_done(self.ctx.job_id)):
            self.job_over.set()
        if self.redis.exists(keys.instance_stop(self.ctx.job_id, self.instance_id)) or self.job_over.is_set():
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
        if self.gate is not None:
            self.gate.loaded()

    # -- the feed the engine pulls from -------------------------------------------------------------------------------
    def _feed(self) -> Iterator[GenerationRequest | None]:
        while not self.stop.is_set():
            self.flush_if_due()  # the engine asks between decode steps: finished samples wait at most POLL_S
            if self.gateway is not None:
                self._gateway_poll()
            if self.turns:  # a live episode's next turn: on the weights its episode started with (or newer)
                yield self.turns.popleft()
                continue
            if not self.local:
                self._refill()
            if not self.local or (self.gate is not None and self.gate.closed(self.local[0][1].min_version,
                                                                              bool(self.in_flight))):
                yield None  # nothing to admit now; the engine keeps decoding what it has
                continue
            entry_id, request = self.local.popleft()
            if entry_id in {f.entry_id for f in self.in_flight.values()}:
                continue  # our own in-flight entry, re-read by XAUTOCLAIM after the idle timeout
            if request.sample_id in self.in_flight:
                self.queue.ack([entry_id])  # re-sent (driver resync) while we still generate it: one sample comes
                continue
            now = time.monotonic()
            if (request.min_version > self.engine.version or now - self._version_checked >= POLL_S
                    or (self.gate is not None and self.gate.pending)):
                self._version_checked = now  # newer weights are looked for at most every POLL_S, or when required
                with self.spans.span("loading_weights"):
                    self._load_latest(at_least=request.min_version)
            if not self.in_flight:
                self._busy_since = time.time()
            self.in_flight[request.sample_id] = _InFlight(entry_id, request, self.engine.version)
            if self.gateway is not None:  # the agent's calls come through the gateway (polled above)
                self.gateway.open(request)
                continue
            if self.episodes is None:
                yield generation_request(request, self.sampling)
                continue
            episode, first = self.episodes.start(request)  # env.reset: the opening conversation
            if first is None:  # the environment failed at reset: the episode is its error
                self._finish(self.in_flight.pop(request.sample_id), episode=episode)
                continue
            self.live[request.sample_id] = episode
            yield first

    def _gateway_poll(self) -> None:
        """Gateway calls join the turns of live episodes; an ended gateway episode finishes like any episode."""
        assert self.gateway is not None
        calls, finished = self.gateway.poll(self.engine.version)
        self.turns.extend(calls)
        for note in self.gateway.take_notes():  # an episode retried after its agent's jail died
            self.ctx.reporter.record_event(self.ctx.job_id, "environment", f"{self.instance_id}: {note}",
                                           data={"instance_id": self.instance_id})
        for sample_id, done in ((f.episode.request.sample_id, f) for f in finished):
            self.gateway_versions[sample_id] = done.version
            stats = keys.generator_stats(self.ctx.job_id)  # the job's counts: sequences, and calls that broke one
            self.redis.hincrby(stats, "gateway_sequences", done.sequences)
            self.redis.hincrby(stats, "gateway_broken_prefix", max(0, done.sequences - 1))
            self._finish(self.in_flight.pop(sample_id), episode=done.episode)

    def flush_if_due(self) -> None:
        if self.outbox and time.monotonic() - self._outbox_since >= POLL_S:
            self._flush()

    def _refill(self) -> None:
        now = time.monotonic()
        block = not self.in_flight and self.may_block()
        if not block and now - self._last_poll < POLL_S:
            return
        self._last_poll = now
        start = time.time()
        got = self.queue.read(self.instance_id, count=self.spec.generation.batch_size,
                              block_ms=self.idle_block_ms if block else 0)
        if block and not got:
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
        if self.gateway is not None and self.gateway.complete(result):
            return
        if self.episodes is not None:
            episode = self.live[result.request_id]
            self.episode_versions.turn(result.request_id, len(episode.response_ids), result.version_marks)
            retries = episode.retries
            following = self.episodes.advance(episode, result)  # env.step, synchronously between decode steps
            if episode.retries != retries:  # its environment was lost: the episode started over, its turns are gone
                self.episode_versions.turns.pop(result.request_id, None)
                self._environment_notes()
            if following is not None:
                self.turns.append(following)
                return
            del self.live[result.request_id]
            self._finish(self.in_flight.pop(result.request_id), episode=episode)
            return
        self._finish(self.in_flight.pop(result.request_id), result=result)

    def _finish(self, flight: _InFlight, *, result: GenerationResult | None = None,
                episode: Episode | None = None) -> None:
        """A finished request (one completion, or a whole episode) goes to the outbox; `_flush` makes its sample."""
        if not self.outbox:
            self._outbox_since = time.monotonic()
        self.outbox.append((flight, result, episode))
        if (not self.in_flight or len(self.outbox) >= PUBLISH_BATCH
                or time.monotonic() - self._outbox_since >= POLL_S):
            self._flush()
        if not self.in_flight and self._busy_since is not None:
            self.spans.add("generating", self._busy_since, time.time())
            self._busy_since = None

    def _flush(self, *, final: bool = False) -> None:
        """Stream the finished samples and acknowledge their prompts: one atomic Redis round trip for the batch; then
        the reward tally (at once after an error, else at most once a second). Once the job is over the outbox is
        dropped unscored (its prompts stay unacknowledged: nobody reads them any more)."""
        if self.outbox:
            samples = self._samples(self.outbox)
            if samples is not None:
                self.samples.publish_finished(self.queue, samples)
                self.produced += len(samples)
            self.outbox = []
        self.reward_tally.flush(force=final)
        now = time.monotonic()
        due = final or not self.in_flight or now - self._reward_seconds_at >= REWARD_TIME_EVERY_S
        if self._reward_seconds and due:
            self.redis.hincrbyfloat(keys.generator_stats(self.ctx.job_id), "reward_seconds", self._reward_seconds)
            self._reward_seconds, self._reward_seconds_at = 0.0, now

    def _samples(self, finished: list[tuple[_InFlight, GenerationResult | None, Episode | None]]) -> list[
            tuple[Sample, str]] | None:
        """The outbox's samples with their prompt entries: completions scored as one batch (`score_each`: a judge
        grades it together, python rewards several at once), each reward error tallied and reported as it happens;
        episodes carrying their environment's reward (plus their grader's, scored in one batch too). None: the job
        ended while scoring (the running reward calls are killed: a failed job's instance stops within a beat)."""
        if self.job_over.is_set():
            return None
        completions = [(flight.request, result) for flight, result, _ in finished if result is not None]
        episodes = [episode for _, _, episode in finished if episode is not None]
        start = time.monotonic()
        scored: dict[int, RewardOutcome] = {}
        try:
            if completions:
                for index, outcome in self.reward.score_each(
                        [(r.prompt_text, res.text, r.meta) for r, res in completions], self.job_over):
                    scored[index] = outcome
                    if outcome.error is not None:
                        self._count_reward(outcome.error)
            if self.job_over.is_set():
                return None
            graded = iter(grade_episodes(self.reward, episodes))
        finally:
            self._reward_seconds += time.monotonic() - start
        outcomes = iter(scored[index] for index in range(len(completions)))
        out: list[tuple[Sample, str]] = []
        for flight, result, episode in finished:
            if episode is not None and self.gateway is not None:
                sample = episode_sample(episode, self.gateway.tokenizer, job_id=self.ctx.job_id,
                                        version=self.gateway_versions.pop(flight.request.sample_id, flight.version),
                                        instance_id=self.instance_id, graded=next(graded))
                self._count_reward(sample.reward_error)
            elif episode is not None:
                assert self.episodes is not None
                sample = self.episode_versions.stamp(flight.request.sample_id, self.episodes.to_sample(
                    episode, job_id=self.ctx.job_id, version=flight.version, instance_id=self.instance_id,
                    graded=next(graded)))
                self._count_reward(sample.reward_error)
            else:
                assert result is not None
                outcome = next(outcomes)
                sample = to_sample(flight.request, result, outcome, job_id=self.ctx.job_id,
                                   version=flight.version, instance_id=self.instance_id)
                if outcome.error is None:  # errors were counted as they came
                    self._count_reward(None)
            out.append((sample, flight.entry_id))
        if self.teacher is not None:  # one batched teacher pass over the outbox (its time counts as scoring's)
            start = time.monotonic()
            self.teacher.score([sample for sample, _ in out])
            self._reward_seconds += time.monotonic() - start
        return out

    def _count_reward(self, error: str | None) -> None:
        self.reward_tally.add(error)
        if error:
            self.reward_tally.flush()  # at once: the controller's error rate sees it now, not after the batch
            self._report_reward_error(error)

    def _tokenizer(self) -> Any:
        return AutoTokenizer.from_pretrained(str(self.ctx.model_dir))

    def _environment_notes(self) -> None:
        """What the environment has to say (an OpenEnv server lost and its episodes retried) as job events."""
        assert self.episodes is not None
        for note in self.episodes.env.take_notes():
            self.ctx.reporter.record_event(self.ctx.job_id, "environment", f"{self.instance_id}: {note}",
                                           data={"instance_id": self.instance_id})

    def _report_reward_error(self, error: str) -> None:
        """A reward_error event as errors happen: the first at once, then at most one per REWARD_EVENT_EVERY_S with
        the count since the last."""
        self._errors_unreported += 1
        now = time.monotonic()
        if now - self._error_reported_at < REWARD_EVENT_EVERY_S and self._error_reported_at:
            return
        count = self._errors_unreported
        more = f" ({count} reward errors on this instance since its last report)" if count > 1 else ""
        self.ctx.reporter.record_event(self.ctx.job_id, "reward_error",
                                       f"reward failed on {self.instance_id}: {error}{more}",
                                       data={"instance_id": self.instance_id, "errors": count})
        self._error_reported_at, self._errors_unreported = now, 0


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
    except JobSetupError as err:
        return report_setup_error(reporter, client, job_id, instance_id, err)
    except (ArtifactStoreDenied, ArtifactStoreFull) as err:  # a weight version the store refuses: no instance of
        # this job gets further (the credentials are the host's, a full store stays full): the job fails with the
        # store's sentence at once instead of instances restarting until the crash loop ends it
        return report_setup_error(reporter, client, job_id, instance_id, HostMissing(str(err)))
    except Exception as err:  # recorded on the instance row: the controller detects instances that keep failing
        log.exception("instance %s of job %s failed", instance_id, job_id)
        reporter.set_instance_status(job_id, instance_id, InstanceStatus.dead, error=f"{type(err).__name__}: {err}")
        raise


def report_setup_error(reporter: Reporter, client: redis.Redis, job_id: int, instance_id: str,
                       err: JobSetupError) -> str:
    """The job's (or this host's) fault, said once in the job's events, no traceback: the instance is dead with the
    error; a missing host piece (HostMissing) fails the job at once, with one line."""
    log.warning("instance %s of job %s: %s", instance_id, job_id, err)
    if not isinstance(err, HostMissing):
        reporter.set_instance_status(job_id, instance_id, InstanceStatus.dead, error=str(err))
        return f"instance {instance_id} of job {job_id} failed: {err}"
    reporter.set_instance_status(job_id, instance_id, InstanceStatus.dead)
    reporter.set_job_status(job_id, JobStatus.failed, error=str(err))  # the one event line (the first instance)
    client.set(keys.job_done(job_id), "failed", ex=86400)
    return f"job {job_id} failed: {err}"
