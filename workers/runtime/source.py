"""`SampleSource`: a producer of scored groups. One driver body (workers/runtime/driver.py) trains on whatever source
the job's mode picks (workers/runtime/job.py):

    source        modes                  samples come from
    LocalRollout  colocated, train-local the driver's own engine: the whole batch generated, then trained
    StreamSource  sync, async            generation instances through the job's sample stream, as groups complete

What a source produces, single-turn completions, built-in multi-turn episodes (environment steps in the reward jail)
or rollout-gateway episodes (an agent's recorded chat calls), is one `Sample` each, built by the one constructor
(workers/core/sample.py `build_sample`); the source only decides where the engine runs. The driver does the rest,
the same for every source:

    for arrival in source.arrivals(it):           # complete scored groups of iteration `it` as they come
        micro-batch them (core.MicroBatcher), trainer.micro_step per full chunk
    trainer.optimizer_step(); publish weights
    source.trained(it, samples, publish_s)        # acknowledge the samples / load the new weights into the engine
    dispatcher.observe(samples)                   # the length ranker learns what was produced
    row extra = source.metrics(it, samples)       # the producer's fields of the metrics row
    held-out evaluation (workers/runtime/held_out.py): source.evaluate(version, requests), source.evaluated(version)

A new way of producing samples is a new source (or a new `Sample` producer inside one), not a new loop. A source
talks to the driver only through `Host` (below): the job's context, the requests of each iteration, the clock, and
the trainer's weights; it never imports the driver and the driver never imports a source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from contract.sample import PromptRequest, Sample
from workers.generation.engine import GenerationEngine
from workers.runtime.context import JobContext
from workers.runtime.dispatching import PromptDispatcher
from workers.runtime.recorder import IterationRecorder


class Host(Protocol):
    """What a producer may use of its driver."""

    ctx: JobContext  # the job: spec, ids, reporter, Redis
    dispatcher: PromptDispatcher  # the requests of each iteration (streaming: where they were sent)
    rec: IterationRecorder  # the phases the source spends: generating, waiting, weight_sync
    device: str  # the trainer's device (a colocated engine and teacher share it)
    tokenizer: Any  # the trainer's tokenizer (a colocated episode loop renders with it)

    @property
    def version(self) -> int:
        """The trainer's weights version (0: the initial weights, +1 per optimizer step)."""
        ...

    def publish_weights(self) -> float: ...

    def load_weights(self, engine: GenerationEngine) -> float:
        """Load the published current version into an engine of this process; returns the seconds it took."""
        ...

    def weights_served(self) -> bool:
        """Instances can load the current version without a new publish (False: resumed to another version, or a
        transport that serves joiners only what this driver published)."""
        ...

    def check_runnable(self) -> None: ...


@dataclass
class Arrival:
    """Complete groups of an iteration, scored (each the `group_size` samples of one group id)."""

    groups: list[list[Sample]]
    final: bool  # every group of the iteration has arrived
    waited: tuple[float, float] | None = None  # the source waited for these: the trainer idled unless they fill a
    #                                            micro-batch


class SampleSource(ABC):
    lane: ClassVar[str] = "trainer"  # the driver's lane on the job's timeline
    evaluates_untrained: ClassVar[bool] = False  # a held-out evaluation of the initial weights before training

    def __init__(self, host: Host):
        self.host = host

    def start(self, first: int) -> None:  # noqa: B027 - optional hook
        """Before iteration `first` (> 0 after a resume): e.g. publish the checkpoint's weights, dispatch ahead."""

    @abstractmethod
    def arrivals(self, it: int) -> Iterator[Arrival]:
        """Iteration `it`'s complete groups, scored, as they become available (the last arrival is `final`); the
        source times its own generating/waiting phases (the driver times training)."""

    @abstractmethod
    def trained(self, it: int, samples: list[Sample], publish_seconds: float) -> None:
        """Iteration `it`'s optimizer step is taken and its weights published."""

    @abstractmethod
    def metrics(self, it: int, samples: list[Sample]) -> dict[str, Any]:
        """The producer's fields of iteration `it`'s metrics row."""

    @abstractmethod
    def evaluate(self, version: int, requests: list[PromptRequest]) -> None:
        """Generate and score one sample per held-out request at weights `version` (or newer)."""

    @abstractmethod
    def evaluated(self, version: int, wait: bool) -> list[Sample] | None:
        """Evaluation `version`'s samples once every one is in (None: not yet; `wait`: until they are)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """After the last iteration or an error."""
