"""The driver's output-length ranker: the dispatch part's `LengthRanker`, fed with what the instances produced.

`RuntimeRanker` adapts it to the driver's units (dataset rows in, `Sample`s observed once per iteration, then a
refit), so the dispatcher and metrics share one ranker across iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contract.sample import Sample
from workers.dispatch.ranker import LengthRanker, setup_ranker


class RuntimeRanker:
    def __init__(self, ranker: LengthRanker | None = None):
        self.ranker = ranker or setup_ranker("features")

    def predict(self, rows: Sequence[dict[str, Any]]) -> list[float]:
        return self.ranker.predict([str(r["prompt_id"]) for r in rows], [str(r["prompt"]) for r in rows])

    def observe(self, samples: Sequence[Sample]) -> None:
        """One iteration's samples: every response length, then one refit."""
        self.ranker.observe_many([s.prompt_id for s in samples], [s.prompt_text for s in samples],
                                 [len(s.response_ids) for s in samples])
        self.ranker.refit()

    def recent_lengths(self) -> list[float]:
        return self.ranker.recent_lengths()
