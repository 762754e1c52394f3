"""Held-out evaluation during training (`training.eval_every`): the driver's bookkeeping over any source.

    held = HeldOut(spec, rows, encode, epoch)   # rows: the dataset's held-out rows (dataset.eval_prompts)
    held.untrained(source)                       # sources that can: the initial weights' reward (curve point 0)
    row.update(held.after(it, source))           # evaluation due after iteration `it` started on the source; the
                                                 # oldest started one, once all its samples are in, as eval_reward

An evaluation is one sample per held-out row at weights >= the iterations trained, with the same sampling seeds
every time, so successive evaluations differ only by the weights. The source generates and scores them (colocated:
at once on its engine; streaming: dispatched to the instances and collected from the stream); after the last
iteration the driver waits for the oldest one still out.
"""

from __future__ import annotations

import statistics
from typing import Any

from contract.sample import PromptRequest, Sample
from contract.spec import JobSpec
from workers.core.chat import ChatEncoder
from workers.core.prompts import EVAL_PREFIX, make_requests, request_seed
from workers.runtime.source import SampleSource


class HeldOut:
    def __init__(self, spec: JobSpec, rows: list[dict[str, Any]], encode: ChatEncoder, epoch: int):
        self.spec, self.rows, self.encode, self.epoch = spec, rows, encode, epoch
        self.curve: list[tuple[int, float]] = []  # (iterations trained, held-out reward)
        self.pending: list[int] = []  # versions whose evaluation was started and not yet recorded

    def due(self, trained: int) -> bool:
        every = self.spec.training.eval_every
        return bool(every and self.rows) and (trained % every == 0 or trained == self.spec.training.iterations)

    def requests(self, trained: int) -> list[PromptRequest]:
        """One request per held-out prompt at weights >= `trained`; the same sampling seeds every evaluation."""
        groups = make_requests(self.rows, trained, group_size=1, encode=self.encode, job_seed=self.spec.seed,
                               min_version=trained, group_prefix=EVAL_PREFIX, epoch=self.epoch)
        for slot, (request,) in enumerate(groups):
            request.seed = request_seed(self.spec.seed, f"{EVAL_PREFIX}:{slot}")
        return [r for group in groups for r in group]

    def untrained(self, source: SampleSource) -> float | None:
        """The initial weights' held-out reward, for a source that evaluates before training; None: not measured."""
        if not (source.evaluates_untrained and self.spec.training.eval_every and self.rows):
            return None
        source.evaluate(0, self.requests(0))
        samples = source.evaluated(0, wait=True)
        assert samples is not None
        return self._record(0, samples)

    def after(self, it: int, source: SampleSource) -> dict[str, float]:
        """Start the evaluation due after iteration `it`; the oldest started one's reward once all its samples are in
        (after the last iteration: waiting for it)."""
        if self.due(it + 1):
            source.evaluate(it + 1, self.requests(it + 1))
            self.pending.append(it + 1)
        if not self.pending:
            return {}
        version = self.pending[0]
        samples = source.evaluated(version, wait=it + 1 == self.spec.training.iterations)
        if samples is None:
            return {}
        self.pending.pop(0)
        return {"eval_reward": self._record(version, samples), "eval_version": float(version)}

    def _record(self, version: int, samples: list[Sample]) -> float:
        value = statistics.fmean(s.reward for s in samples)
        self.curve.append((version, value))
        return value


def eval_skipped_reason(spec: JobSpec, train_rows: int) -> str:
    """Why a job with training.eval_every has no held-out rows: a file's last dataset.eval_prompts rows are held out
    only when it has more rows than that."""
    n = spec.dataset.eval_prompts
    if n == 0:
        return "held-out evaluation skipped: dataset.eval_prompts is 0 (no held-out rows); eval_reward is not recorded"
    return (f"held-out evaluation skipped: the dataset has {train_rows} row(s), not more than dataset.eval_prompts "
            f"({n}), so none is held out and eval_reward is not recorded; add rows or lower dataset.eval_prompts")
