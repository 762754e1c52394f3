"""Colocated mode, the baseline (verl's default), and train-local: `LocalRollout`, the sample source whose engine
lives in the driver's process. One iteration generates a whole batch, then trains it; after each optimizer step the
new weights go through the job's weight transport (publish + `load_into`, timed) before the next batch is generated,
so nothing overlaps: generation, training and weight sync are strictly sequential.

    requests = dispatcher.requests_for(it)          # the same requests every mode builds (workers/core)
    samples  = rollout(engine, reward, requests)     # generate + score, the whole batch: completions, or one episode
                                                     # each (spec.environment), every Sample by core/sample.py
    arrivals: every group at once, final (the driver micro-batches and trains them)
    trained: load the published weights into the engine;  evaluate: held-out prompts on the engine, at once
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from contract.sample import PromptRequest, Sample
from workers.core import rollout, sampling_params
from workers.core.episode import run_episodes
from workers.core.rollout import flatten
from workers.dispatch.metrics import tail_fraction
from workers.rewards.base import TimedReward
from workers.runtime import components
from workers.runtime.source import Arrival, Host, SampleSource

LANE = "colocated"


class LocalRollout(SampleSource):
    lane = LANE
    evaluates_untrained = True  # the engine is here: the initial weights' held-out reward costs one batch

    def __init__(self, host: Host):
        super().__init__(host)
        ctx = host.ctx
        self.engine = components.make_engine(ctx.spec, ctx.model_dir, device=host.device)
        reward = components.make_reward(ctx)  # None: an environment job rewarded by its steps alone
        self.reward = TimedReward(reward) if reward is not None else None  # its time: the row's reward_seconds
        self.episodes = components.make_episode_runner(ctx, host.tokenizer)  # spec.environment, else None
        self.teacher = components.make_teacher(ctx, device=host.device)  # algorithm.teacher, else None
        self.sampling = sampling_params(ctx.spec.generation)
        self.gen_start = 0.0
        self.sync_seconds = 0.0
        self.evaluations: dict[int, list[Sample]] = {}

    def start(self, first: int) -> None:
        if self.host.version > 0:  # resumed: the engine starts from the checkpoint's weights
            self.host.publish_weights()
            self.host.load_weights(self.engine)

    def close(self) -> None:
        if self.reward is not None:
            self.reward.close()
        if self.episodes is not None:
            self.episodes.env.close()

    def _rollout(self, requests: list[PromptRequest]) -> list[Sample]:
        """Generate and score `requests`: one completion each, or (spec.environment) one episode each."""
        ctx = self.host.ctx
        if self.episodes is not None:
            samples = run_episodes(self.engine, self.episodes, requests, job_id=ctx.job_id, instance_id=LANE,
                                   grader=self.reward)
            for note in self.episodes.env.take_notes():  # e.g. an OpenEnv server lost and its episodes retried
                ctx.reporter.record_event(ctx.job_id, "environment", note)
            return samples
        assert self.reward is not None  # a single-turn job always has its reward (JobSpec.grading)
        return rollout(self.engine, self.reward, requests, self.sampling, job_id=ctx.job_id, instance_id=LANE)

    def arrivals(self, it: int) -> Iterator[Arrival]:
        host = self.host
        requests = flatten(host.dispatcher.requests_for(it, min_version=it))
        with host.rec.phase("generating"):
            self.gen_start = time.time()
            samples = self._rollout(requests)
            if self.teacher is not None:
                self.teacher.score(samples)
        by_group: dict[str, list[Sample]] = {}
        for sample in samples:
            by_group.setdefault(sample.group_id, []).append(sample)
        yield Arrival(list(by_group.values()), final=True)

    def trained(self, it: int, samples: list[Sample], publish_seconds: float) -> None:
        with self.host.rec.phase("weight_sync"):
            self.sync_seconds = publish_seconds + self.host.load_weights(self.engine)

    def metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        return {
            "instances": 1, "stale_dropped": 0, "policy_version": self.host.version,
            "generator_idle_seconds": self.host.rec.seconds.get("training", 0.0) + self.sync_seconds,
            "tail_fraction": tail_fraction(self.gen_start, [s.finished_at for s in samples]),
            # this iteration's scoring (and the last evaluation's)
            "reward_seconds": self.reward.take_seconds() if self.reward is not None else 0.0,
        }

    def evaluate(self, version: int, requests: list[PromptRequest]) -> None:
        """One sample per held-out prompt at the engine's current weights (`version`), generated now."""
        self.evaluations[version] = self._rollout(requests)

    def evaluated(self, version: int, wait: bool) -> list[Sample] | None:
        return self.evaluations.pop(version)
