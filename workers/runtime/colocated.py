"""Colocated mode, the baseline (verl's default): one process alternates generating a whole batch and training it.

The engine lives in the driver's process; after each optimizer step the new weights go through the job's weight
transport (publish + `load_into`, timed) before the next batch is generated, so nothing overlaps: generation,
training and weight sync are strictly sequential. train-local is this driver with an in-memory reporter.

    requests = dispatcher.requests_for(it)          # the same requests every mode builds (workers/core)
    samples  = rollout(engine, reward, requests)     # generate + score
    step     = train_batch(trainer, samples)         # micro-steps + one optimizer step
    publish weights; load them into the engine;  every eval_every: evaluate held-out prompts
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from workers.core import rollout, sampling_params, train_batch
from workers.core.rollout import flatten
from workers.dispatch.metrics import tail_fraction
from workers.runtime import components
from workers.runtime.context import JobContext
from workers.runtime.driver import Driver, IterationOutcome

LANE = "colocated"


class ColocatedDriver(Driver):
    lane = LANE

    def __init__(self, ctx: JobContext, **kwargs: Any):
        super().__init__(ctx, **kwargs)
        self.engine = components.make_engine(ctx.spec, ctx.model_dir, device=str(self.trainer.device))
        self.reward = components.make_reward(ctx)
        self.sampling = sampling_params(ctx.spec.generation)

    def start(self) -> None:
        if self.trainer.version > 0:  # resumed: the engine starts from the checkpoint's weights
            self.publish_weights()
            self.transport.load_into(self.engine, self.trainer.version)
        elif self.spec.training.eval_every and self.eval_rows:
            value = self.evaluate()
            self.reporter.record_event(self.job_id, "eval", f"held-out reward before training: {value:.4f}",
                                       data={"iteration": 0, "eval_reward": value})

    def close(self) -> None:
        self.reward.close()

    def iteration(self, it: int) -> IterationOutcome:
        requests = flatten(self.dispatcher.requests_for(it, min_version=it))
        with self.rec.phase("generating"):
            gen_start = time.time()
            samples = rollout(self.engine, self.reward, requests, self.sampling, job_id=self.job_id,
                              instance_id=LANE)
        with self.rec.phase("training"):
            step = train_batch(self.trainer, samples)
        sync_s = self.publish_weights()
        with self.rec.phase("weight_sync"):
            sync_s += self.transport.load_into(self.engine, self.trainer.version)
        self.dispatcher.observe(samples)
        extra: dict[str, Any] = {
            "instances": 1, "stale_dropped": 0, "policy_version": self.trainer.version,
            "generator_idle_seconds": self.rec.seconds.get("training", 0.0) + sync_s,
            "tail_fraction": tail_fraction(gen_start, [s.finished_at for s in samples]),
        }
        if self.eval_due(it + 1):
            extra["eval_reward"] = self.evaluate()
        return IterationOutcome(samples, step, extra)

    def evaluate(self) -> float:
        """Mean reward of one sample per held-out prompt at the engine's current weights."""
        samples = rollout(self.engine, self.reward, self.eval_requests(self.trainer.version), self.sampling,
                          job_id=self.job_id, instance_id=LANE)
        value = statistics.fmean(s.reward for s in samples)
        self.eval_curve.append((self.trainer.version, value))
        return value
