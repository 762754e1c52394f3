"""Colocated mode, the baseline (verl's default), and train-local: `LocalRollout`, the sample source whose engine
lives in the driver's process. One iteration generates a whole batch, then trains it; after each optimizer step the
new weights go through the job's weight transport (publish + `load_into`, timed) before the next batch is generated,
so nothing overlaps: generation, training and weight sync are strictly sequential.

    requests = dispatcher.requests_for(it)          # the same requests every mode builds (workers/core)
    samples  = rollout(engine, reward, requests)     # generate + score, the whole batch
    micro-batches: every group scored, cut by length (core.MicroBatcher), trained by the driver
    trained: load the published weights into the engine;  every eval_every: evaluate held-out prompts
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

from contract.sample import Sample
from workers.core import MicroBatcher, Scored, rollout, sampling_params
from workers.core.episode import run_episodes
from workers.core.rollout import flatten
from workers.dispatch.metrics import tail_fraction
from workers.rewards.base import TimedReward
from workers.runtime import components
from workers.runtime.source import Host, SampleSource

LANE = "colocated"


class LocalRollout(SampleSource):
    lane = LANE

    def __init__(self, host: Host):
        super().__init__(host)
        ctx, trainer = host.ctx, host.trainer
        self.engine = components.make_engine(ctx.spec, ctx.model_dir, device=str(trainer.device))
        reward = components.make_reward(ctx)  # None: an environment job rewarded by its steps alone
        self.reward = TimedReward(reward) if reward is not None else None  # its time: the row's reward_seconds
        self.episodes = components.make_episode_runner(ctx, trainer.tokenizer)  # spec.environment, else None
        self.teacher = components.make_teacher(ctx, device=str(trainer.device))  # algorithm.teacher, else None
        self.sampling = sampling_params(ctx.spec.generation)
        self.gen_start = 0.0
        self.sync_seconds = 0.0

    def start(self) -> None:
        host = self.host
        if host.trainer.version > 0:  # resumed: the engine starts from the checkpoint's weights
            host.publish_weights()
            host.transport.load_into(self.engine, host.trainer.version)
        elif host.spec.training.eval_every and host.eval_rows:
            value = self.evaluate()
            host.reporter.record_event(host.job_id, "eval", f"held-out reward before training: {value:.4f}",
                                       data={"iteration": 0, "eval_reward": value})

    def close(self) -> None:
        if self.reward is not None:
            self.reward.close()
        if self.episodes is not None:
            self.episodes.env.close()

    def _rollout(self, requests: list[Any]) -> list[Sample]:
        """Generate and score `requests`: one completion each, or (spec.environment) one episode each."""
        if self.episodes is not None:
            samples = run_episodes(self.engine, self.episodes, requests, job_id=self.host.job_id, instance_id=LANE,
                                   grader=self.reward)
            for note in self.episodes.env.take_notes():  # e.g. an OpenEnv server lost and its episodes retried
                self.host.reporter.record_event(self.host.job_id, "environment", note)
            return samples
        assert self.reward is not None  # a single-turn job always has its reward (JobSpec.grading)
        return rollout(self.engine, self.reward, requests, self.sampling, job_id=self.host.job_id, instance_id=LANE)

    def micro_batches(self, it: int) -> Iterator[list[Scored]]:
        host = self.host
        requests = flatten(host.dispatcher.requests_for(it, min_version=it))
        with host.rec.phase("generating"):
            self.gen_start = time.time()
            samples = self._rollout(requests)
            if self.teacher is not None:
                self.teacher.score(samples)
        batcher = MicroBatcher(host.trainer.algorithm, host.spec.training)
        by_group: dict[str, list[Sample]] = {}
        for sample in samples:
            by_group.setdefault(sample.group_id, []).append(sample)
        for group in by_group.values():
            batcher.add_group(group)
        yield from batcher.take(final=True)

    def trained(self, it: int, samples: list[Sample], publish_seconds: float) -> None:
        with self.host.rec.phase("weight_sync"):
            self.sync_seconds = publish_seconds + self.host.transport.load_into(self.engine, self.host.trainer.version)

    def metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        host = self.host
        extra: dict[str, Any] = {
            "instances": 1, "stale_dropped": 0, "policy_version": host.trainer.version,
            "generator_idle_seconds": host.rec.seconds.get("training", 0.0) + self.sync_seconds,
            "tail_fraction": tail_fraction(self.gen_start, [s.finished_at for s in samples]),
            # this iteration's scoring (and the last evaluation's)
            "reward_seconds": self.reward.take_seconds() if self.reward is not None else 0.0,
        }
        if host.eval_due(it + 1):
            extra["eval_reward"] = self.evaluate()
        return extra

    def evaluate(self) -> float:
        """Mean reward of one sample per held-out prompt at the engine's current weights."""
        host = self.host
        samples = self._rollout(host.eval_requests(host.trainer.version))
        value = statistics.fmean(s.reward for s in samples)
        host.eval_curve.append((host.trainer.version, value))
        return value
