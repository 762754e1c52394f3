"""Training verbs: advantages per complete group, micro-steps, and a whole-batch iteration.

The trainer normalises gradients by the iteration's total token count, so any split of an iteration's samples into
micro-batches gives the same update (up to float summation order): streaming micro-steps (sync/async) and one batch
(colocated/train-local) agree. Advantages are computed per complete group (GRPO normalises within a group), never
over a micro-batch that could cut a group in two.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.sample import Sample
from workers.training.algorithms import Metrics
from workers.training.trainer import Trainer


def group_advantages(trainer: Trainer, group: Sequence[Sample]) -> list[float]:
    """One advantage per sample of one complete group (all `group_size` samples of one group id)."""
    assert len({s.group_id for s in group}) == 1, "one group at a time"
    return list(trainer.algorithm.advantages(list(group)))


def micro_step(trainer: Trainer, scored: Sequence[tuple[Sample, float]]) -> Metrics:
    """Forward + backward of (sample, advantage) pairs; gradients accumulate until `trainer.optimizer_step()`."""
    return trainer.micro_step([s for s, _ in scored], [a for _, a in scored])


def train_batch(trainer: Trainer, samples: Sequence[Sample]) -> Metrics:
    """One iteration on complete groups: length-sorted micro-batches of `micro_batch_size`, then one optimizer step."""
    return trainer.train_iteration(list(samples))
