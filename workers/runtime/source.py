"""`SampleSource`: where a driver's iterations get their samples. One driver body (workers/runtime/driver.py) trains
on whatever source the job's mode picks (workers/runtime/job.py):

    source        modes                  samples come from
    LocalRollout  colocated, train-local the driver's own engine: the whole batch generated, then trained
    StreamSource  sync, async            generation instances through the job's sample stream, micro-step by micro-step

The driver's iteration, for every source:

    for chunk in source.micro_batches(it):       # (sample, advantage) pairs of complete groups (core.MicroBatcher)
        trainer.micro_step(chunk)
    trainer.optimizer_step(); publish weights
    source.trained(it, samples, publish_s)       # acknowledge the samples / load the new weights into the engine
    dispatcher.observe(samples)                  # the length ranker learns what was produced
    row extra = source.metrics(it, samples)      # mode-specific fields of the metrics row (and held-out reward)

A new way of producing samples is a new source, not a new loop: multi-turn episodes, for example, become a source
whose `micro_batches` runs each episode's turns (environment steps in the reward jail) and yields one `Sample` per
episode with its loss mask; the driver, the trainer and the records stay as they are. A source talks to the driver
only through `Host` (below), so it never imports the driver and the driver never imports a source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

from contract.reporter import Reporter
from contract.sample import PromptRequest, Sample
from contract.spec import JobSpec
from workers.core.learn import Scored
from workers.runtime.context import JobContext
from workers.runtime.dispatching import PromptDispatcher
from workers.runtime.recorder import IterationRecorder
from workers.training.trainer import Trainer
from workers.weightsync import WeightTransport


class Host(Protocol):
    """What a source may use of its driver (the parts every mode shares)."""

    ctx: JobContext
    spec: JobSpec
    job_id: int
    reporter: Reporter
    trainer: Trainer
    transport: WeightTransport
    dispatcher: PromptDispatcher
    rec: IterationRecorder
    eval_rows: list[dict[str, Any]]
    eval_curve: list[tuple[int, float]]

    def publish_weights(self) -> float: ...

    def check_runnable(self) -> None: ...

    def eval_due(self, trained: int) -> bool: ...

    def eval_requests(self, trained: int) -> list[PromptRequest]: ...


class SampleSource(ABC):
    lane: ClassVar[str] = "trainer"  # the driver's lane on the job's timeline

    def __init__(self, host: Host):
        self.host = host

    def start(self) -> None:  # noqa: B027 - optional hook
        """Before the first iteration (after a resume): e.g. publish the checkpoint's weights, dispatch ahead."""

    @abstractmethod
    def micro_batches(self, it: int) -> Iterator[list[Scored]]:
        """Iteration `it`'s samples as micro-batches of complete groups, scored; the source times its own
        generating/waiting phases (the driver times training)."""

    @abstractmethod
    def trained(self, it: int, samples: list[Sample], publish_seconds: float) -> None:
        """Iteration `it`'s optimizer step is taken and its weights published."""

    @abstractmethod
    def metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        """Mode-specific fields of iteration `it`'s metrics row, including a finished held-out evaluation."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """After the last iteration or an error."""
