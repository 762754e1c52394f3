"""Colocated mode, the baseline (verl's default): one process alternates generating a whole batch and training it.

The engine lives in the driver's process; after each optimizer step the new weights go through the same shared store
(publish + `update_weights`, timed) before the next batch is generated, so nothing overlaps: generation, training
and weight sync are strictly sequential. Prompts are served in dataset order (no skew-aware dispatch: one instance).
"""

from __future__ import annotations

import time
from typing import Any

from contract.sample import Sample
from workers.dispatch.metrics import tail_fraction
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.runtime import components
from workers.runtime.context import JobContext
from workers.runtime.driver import Driver
from workers.runtime.metrics import trainer_metrics
from workers.stream import PromptRequest

LANE = "colocated"


class ColocatedDriver(Driver):
    def __init__(self, ctx: JobContext):
        super().__init__(ctx)
        self.engine = components.make_engine(ctx.spec, ctx.model_dir)
        self.reward = components.make_reward(ctx.spec)
        gen = ctx.spec.generation
        self.sampling = SamplingParams(temperature=gen.temperature, top_p=gen.top_p, max_tokens=gen.max_tokens,
                                       stop=tuple(gen.stop))

    def start(self) -> None:
        if self.trainer.version > 0:  # resumed: the engine starts from the checkpoint's weights
            self.publish_weights()
            self.engine.update_weights(self.trainer.version, self.transport.path(self.trainer.version))

    def close(self) -> None:
        self.reward.close()

    def iteration(self, it: int) -> dict[str, Any]:
        requests = [r for group in self.dispatcher.requests_for(it, min_version=it) for r in group]
        gen_start = time.time()
        samples = [self._sample(requests_by_id, result)
                   for requests_by_id in [{r.sample_id: r for r in requests}]
                   for result in self.engine.generate_stream(self._requests(requests))]
        gen_end = time.time()
        self.spans.add("generating", gen_start, gen_end)
        train_start = time.time()
        step = self.trainer.train_iteration(samples)
        train_end = time.time()
        self.spans.add("training", train_start, train_end)
        sync_start = time.time()
        self.publish_weights()
        self.engine.update_weights(self.trainer.version, self.transport.path(self.trainer.version))
        sync_s = time.time() - sync_start
        self.dispatcher.ranker.observe(samples)
        return {
            "gen_seconds": gen_end - gen_start, "train_seconds": train_end - train_start,
            "trainer_idle_seconds": gen_end - gen_start, "generator_idle_seconds": train_end - train_start + sync_s,
            "weight_sync_seconds": sync_s, "instances": 1, "stale_dropped": 0, "policy_version": self.trainer.version,
            "tail_fraction": tail_fraction(gen_start, [s.finished_at for s in samples]),
            **trainer_metrics(step), "_samples": samples,
        }

    def _requests(self, requests: list[PromptRequest]) -> list[GenerationRequest]:
        return [GenerationRequest(request_id=r.sample_id, prompt_ids=r.prompt_ids, meta=r.meta,
                                  sampling=SamplingParams(**{**self.sampling.__dict__, "seed": r.seed}))
                for r in requests]

    def _sample(self, requests: dict[str, PromptRequest], result: Any) -> Sample:
        request = requests[result.request_id]
        outcome = self.reward.score(request.prompt_text, result.text, request.meta)
        return Sample(
            job_id=self.job_id, prompt_id=request.prompt_id, group_id=request.group_id, sample_id=request.sample_id,
            policy_version=self.engine.version, prompt_ids=list(result.prompt_ids),
            response_ids=list(result.response_ids), behaviour_logprobs=list(result.logprobs),
            finish_reason=result.finish_reason, prompt_text=request.prompt_text, response_text=result.text,
            reward=outcome.value, reward_components=dict(outcome.components), reward_error=outcome.error,
            meta=dict(request.meta), queued_at=request.queued_at, started_at=result.started_at,
            finished_at=result.finished_at, instance_id=LANE,
        )
