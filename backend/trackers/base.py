"""`TrackerSink`: one job's run in one tracker, as the sync loop drives it (start, params, rows, finish)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


class TrackerDown(RuntimeError):
    """The tracker could not take the call now (unreachable, timeout, 5xx, refused credentials): retry later."""


class TrackerUnavailable(RuntimeError):
    """The tracker can never work on this control plane (its SDK is not installed): give up on the run."""


@dataclass
class Row:
    iteration: int
    metrics: dict[str, float]
    at: datetime


@dataclass
class JobInfo:
    id: int
    name: str
    spec: dict[str, Any]
    team: str
    artifacts: Path  # the job's directory in the artifact store


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of an iteration row (lists such as `lengths`, flags and None are left out)."""
    return {key: float(value) for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}


def flat_params(spec: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The spec as `a.b.c -> value` strings (lists and long code shortened: the whole spec is logged too)."""
    params: dict[str, str] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            params.update(flat_params(value, f"{name}."))
        else:
            text = str(value)
            params[name] = text if len(text) <= 250 else text[:247] + "..."
    return params


class TrackerSink(ABC):
    @abstractmethod
    def start(self, run_ref: str | None) -> str:
        """Open the job's run (a new one when `run_ref` is None, with the spec as params) and return its id."""

    @abstractmethod
    def log_rows(self, rows: list[Row]) -> None:
        """Each row's scalar metrics at step = its iteration."""

    @abstractmethod
    def finish(self, status: str, checkpoint: Path | None) -> None:
        """Close the run with the job's final status (and upload the final checkpoint where the tracker keeps
        artifacts)."""

    def close(self) -> None:  # noqa: B027 - optional: most sinks hold nothing between calls
        """Release what this process holds for the run (it may be resumed by another process)."""
