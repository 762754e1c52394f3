"""`run_job` keeps the driver's heartbeat going while the driver sets up (model load, rank rendezvous): a setup
longer than the heartbeat TTL must not look like a dead driver to the controller."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from contract.reporter import JobRecord, MemoryReporter
from contract.spec import JobSpec
from contract.states import JobStatus
from workers.runtime import job as driver_module
from workers.runtime.context import JobContext


class BeatLog(MemoryReporter):
    def __init__(self) -> None:
        super().__init__()
        self.beats: list[float] = []

    def beat_driver(self, job_id: int) -> None:
        self.beats.append(time.monotonic())


def test_the_driver_beats_while_it_sets_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reporter = BeatLog()
    spec = JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"}})
    reporter.add_job(JobRecord(job_id=3, team_id=1, spec=spec, status=JobStatus.queued, model_path=None,
                               dataset_path=None))
    ctx = JobContext(job_id=3, team_id=1, spec=spec, model_dir=tmp_path, job_dir=tmp_path, reporter=reporter,
                     redis=None)
    setup: dict[str, Any] = {}

    class Started:
        def run(self) -> str:
            setup["beats_after"] = len(reporter.beats)
            return "ran"

    def slow_setup(_ctx: JobContext) -> Started:
        """A setup that lasts until a beat arrives while it runs (at most 60 s: then the assertions below fail)."""
        started = time.monotonic()
        while not any(t > started for t in reporter.beats) and time.monotonic() - started < 60:
            time.sleep(0.05)
        setup["window"] = (started, time.monotonic())
        return Started()

    monkeypatch.setattr(driver_module, "load_context", lambda *args: ctx)
    monkeypatch.setattr(driver_module, "setup_driver", slow_setup)
    assert driver_module.run_job(3, reporter, None, tmp_path) == "ran"
    start, end = setup["window"]
    during = [t for t in reporter.beats if start < t <= end]
    assert during, reporter.beats  # beats go on during the setup, not only the one before it
    assert setup["beats_after"] == len(reporter.beats)  # the setup heartbeat stopped before `run` (which beats itself)
