"""`IterationRecorder`: the timing, spans and metrics of one driver, kept beside the RL loop instead of inside it.

    with rec.phase("training"): ...            # seconds per phase for the metrics row + a span on the timeline
    row = rec.finish(it, samples, step, extra) # the iteration's metrics row, recorded through the reporter

Phases: generating, training, waiting (trainer starved), weight_sync. Rows use the keys of docs/api.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from contract.reporter import Reporter
from contract.sample import Sample
from contract.spec_operations import TelemetrySpec
from workers.core.episode import episode_record
from workers.runtime import metrics
from workers.runtime.telemetry import SpanRecorder

SPAN_KIND = {"generating": "generating", "training": "training", "waiting": "waiting", "weight_sync": "loading_weights"}
ROW_KEY = {"generating": "gen_seconds", "training": "train_seconds", "waiting": "trainer_idle_seconds",
           "weight_sync": "weight_sync_seconds"}


class IterationRecorder:
    def __init__(self, job_id: int, lane: str, reporter: Reporter, telemetry: TelemetrySpec):
        self.job_id, self.reporter, self.telemetry = job_id, reporter, telemetry
        self.reward_errors_seen: set[str] = set()  # first message of each kind goes to the events
        self.spans = SpanRecorder(job_id, lane, reporter)
        self.seconds: dict[str, float] = {}
        self.values: dict[str, float] = {}  # figures of this iteration for its row (weight_sync_bytes)
        self.started = time.time()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.add(name, start, time.time())

    def add(self, name: str, start: float, end: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, end - start)
        self.spans.add(SPAN_KIND[name], start, end)

    def finish(self, it: int, samples: list[Sample], step: dict[str, float], extra: dict[str, Any],
               trace: Callable[[Sample], dict[str, Any] | None] | None = None) -> dict[str, Any]:
        """Iteration `it` (0-based) is trained: assemble its row, record it (1-based) and start the next clock.
        `trace`: each kept sample's per-token record (the trainer's `token_trace`) for the trajectory explorer."""
        now = time.time()
        row: dict[str, Any] = {ROW_KEY[name]: seconds for name, seconds in self.seconds.items()}
        row.update(self.values)
        row.update(extra)
        row["iteration_seconds"] = now - self.started
        row.update(metrics.sample_metrics(samples, train_version=it))
        row.update(metrics.rates(samples, row["iteration_seconds"]))
        row.update(metrics.token_counts(samples))
        row.update(metrics.trainer_metrics(step))
        row["samples"] = len(samples)
        if row.get("weight_sync_seconds") is not None:
            row["weight_sync_fraction"] = row["weight_sync_seconds"] / max(row["iteration_seconds"], 1e-9)
        row["lengths"] = [len(s.response_ids) for s in samples[: self.telemetry.lengths_per_iteration]]
        row["lengths_truncated"] = [int(metrics.cut(s)) for s in samples[: self.telemetry.lengths_per_iteration]]
        if any(s.loss_mask is not None for s in samples):  # episodes: turns beside each length (long-tail views)
            row["turns"] = [s.turns for s in samples[: self.telemetry.lengths_per_iteration]]
        row = metrics.finite(row)
        kept = [sample_row(s, it, trace(s) if trace is not None else None)
                for s in samples[: self.telemetry.samples_per_iteration]]
        self.reporter.record_iteration(self.job_id, it + 1, row, kept)
        self.report_reward_errors(it, samples)
        self.spans.flush()  # the trainer lane reaches the live timeline every iteration, like the instances' lanes
        self.seconds, self.values, self.started = {}, {}, now
        return row


    def report_reward_errors(self, it: int, samples: list[Sample]) -> None:
        """The first error of each kind becomes an event; an iteration in which every reward failed ends the job (its
        update would be computed from zeros)."""
        errors = [s.reward_error for s in samples if s.reward_error]
        for error in errors:
            kind = error.split(":", 1)[0]
            if kind not in self.reward_errors_seen:
                self.reward_errors_seen.add(kind)
                self.reporter.record_event(self.job_id, "reward_error", f"reward failed: {error}",
                                           {"iteration": it + 1, "error": error})
        if samples and len(errors) == len(samples):
            raise RewardFailed(f"every reward of iteration {it + 1} failed: {errors[0]}")


class RewardFailed(RuntimeError):
    """Every sample of an iteration has a reward error: the job fails with the first message."""


def sample_row(sample: Sample, iteration: int, tokens: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"tokens": tokens, "mismatch": None if tokens is None else tokens.get("mismatch"),
            "iteration": iteration + 1, "sample_id": sample.sample_id, "prompt": sample.prompt_text,
            "response": sample.response_text, "reward": float(sample.reward), "length": len(sample.response_ids),
            "policy_version": sample.policy_version, "instance_id": sample.instance_id,
            "reward_components": dict(sample.reward_components) or None, "reward_error": sample.reward_error,
            "truncated": metrics.cut(sample), "episode": episode_record(sample)}
