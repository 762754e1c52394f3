"""What an async resume needs to train the same prompts in the same order: recorded in every checkpoint
(`dispatch.json`), checked when a driver resumes from it.

A checkpoint after iteration t holds the trainer (weights, optimizer, RNG) and the schedule's position (t). It does
not hold the async buffer: iterations t .. next_dispatch - 1 were dispatched ahead (max_staleness) and their samples
were in flight or held. A resumed driver drops whatever the dead driver left in flight (its ids carry the dead
driver's epoch, workers/core/prompts.py) and dispatches those iterations again; they are the same prompts, in the same
slot order, sampled with the same seeds, because both are functions of (job seed, dataset rows, iteration, slot). The
record lists, per iteration in the buffer, its prompt ids in slot order and each request's sampling seed, so a resume
can say whether that still holds (a dataset edited in place or a changed seed would silently break it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workers.core.prompts import PromptSchedule, request_seed

FILE = "dispatch.json"


def dispatch_record(schedule: PromptSchedule, job_seed: int, group_size: int, trained: int, next_dispatch: int
                    ) -> dict[str, Any]:
    """The buffer at a checkpoint after `trained` iterations: every iteration dispatched and not yet trained, keyed
    by its number as the job's rows count them (1-based; the dispatcher's index is one less)."""
    pending = range(trained, max(trained, next_dispatch))
    return {"trained": trained, "next_dispatch": max(trained, next_dispatch),
            "iterations": {str(j + 1): iteration_record(schedule, job_seed, group_size, j) for j in pending}}


def iteration_record(schedule: PromptSchedule, job_seed: int, group_size: int, iteration: int) -> dict[str, Any]:
    rows = schedule.rows_for(iteration)
    return {"prompt_ids": [str(row.get("prompt_id", slot)) for slot, row in enumerate(rows)],
            "seeds": [[request_seed(job_seed, f"{iteration}:{slot}:{k}") for k in range(group_size)]
                      for slot in range(len(rows))]}


def write_record(checkpoint: Path, record: dict[str, Any]) -> None:
    (checkpoint / FILE).write_text(json.dumps(record, sort_keys=True))


def read_record(checkpoint: Path) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads((checkpoint / FILE).read_text())
    except FileNotFoundError:
        return None  # a checkpoint from before the record, or of a job that dispatched nothing ahead
    return loaded


def check_resume(checkpoint: Path, schedule: PromptSchedule, job_seed: int, group_size: int) -> str | None:
    """A sentence for the resume event: the buffered iterations are dispatched again as recorded, or how they
    differ; None when the checkpoint has no record or nothing was buffered."""
    record = read_record(checkpoint)
    if not record or not record.get("iterations"):
        return None
    iterations = sorted(int(n) for n in record["iterations"])
    differ = [n for n in iterations
              if iteration_record(schedule, job_seed, group_size, n - 1) != record["iterations"][str(n)]]
    span = f"{iterations[0]}" if len(iterations) == 1 else f"{iterations[0]}-{iterations[-1]}"
    if not differ:
        return f"buffered iteration(s) {span} dispatched again with the recorded prompts and sampling seeds"
    return (f"resume is not exact: iteration(s) {', '.join(map(str, differ))} now take other prompts or "
            "seeds than the checkpoint recorded (the dataset, seed or prompts_per_iteration changed)")
