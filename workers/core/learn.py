"""From complete groups to micro-batches of (sample, advantage): the one place every mode cuts an iteration.

    batcher = MicroBatcher(trainer.algorithm, spec.training)
    batcher.add_group(group)                 # a complete group (all `group_size` samples of one group id)
    for chunk in batcher.take(final):        # chunks of `micro_batch_size` (sample, advantage) pairs
        trainer.micro_step(*unzip(chunk))
    trainer.optimizer_step()

Advantages are computed per complete group (GRPO normalises within a group), never over a micro-batch that could cut
a group in two. While an iteration streams in (`final=False`) full chunks leave in arrival order; once every group
of the iteration is in (`final=True`) the rest is cut in length order (less padding), or handed over whole when a
token budget is set (the trainer cuts it by tokens). The trainer normalises gradients by the iteration's total token
count, so any cut gives the same update up to float summation order: a whole batch generated at once (colocated,
train-local) and a stream (sync, async) agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.sample import Sample
from contract.spec import TrainingSpec
from workers.training.algorithms import Algorithm
from workers.training.batch import length_sorted_chunks, sequence_length

Scored = tuple[Sample, float]  # a sample and its advantage


class MicroBatcher:
    def __init__(self, algorithm: Algorithm, training: TrainingSpec):
        self.algorithm, self.size = algorithm, training.micro_batch_size
        self.budget = training.max_tokens_per_micro_batch or None  # 0: off
        self.buffer: list[Scored] = []

    def add_group(self, group: Sequence[Sample]) -> None:
        assert len({s.group_id for s in group}) == 1, "one complete group at a time"
        self.buffer.extend(zip(group, self.algorithm.advantages(list(group)), strict=True))

    @property
    def full(self) -> bool:
        return len(self.buffer) >= self.size

    def take(self, final: bool) -> list[list[Scored]]:
        """The micro-batches ready now; with `final` every buffered pair (the buffer is then empty)."""
        if not final:
            cut = len(self.buffer) - len(self.buffer) % self.size
            ready, self.buffer = self.buffer[:cut], self.buffer[cut:]
            return [ready[start : start + self.size] for start in range(0, cut, self.size)]
        rest, self.buffer = self.buffer, []
        if not rest:
            return []
        if self.budget is not None:
            return [rest]
        return [[rest[i] for i in chunk] for chunk in length_sorted_chunks([sequence_length(s) for s, _ in rest],
                                                                          self.size)]


def unzip(chunk: Sequence[Scored]) -> tuple[list[Sample], list[float]]:
    return [s for s, _ in chunk], [a for _, a in chunk]
