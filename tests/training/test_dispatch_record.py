"""The async buffer recorded in a checkpoint (workers/training/dispatch_record.py): the iterations dispatched ahead
with the prompt ids and sampling seeds the dispatcher really sends, and the resume's check of them."""

from __future__ import annotations

from pathlib import Path

from contract.spec import JobSpec
from workers.core.prompts import PromptSchedule, make_requests
from workers.training.dispatch_record import check_resume, dispatch_record, read_record, write_record


def _spec(seed: int = 7) -> JobSpec:
    return JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"}, "seed": seed,
                                   "algorithm": {"group_size": 3}, "training": {"prompts_per_iteration": 4}})


ROWS = [{"prompt_id": f"p{i}", "prompt": f"{i}+{i}="} for i in range(10)]


def test_the_record_holds_what_the_dispatcher_sends(tmp_path: Path) -> None:
    spec = _spec()
    schedule = PromptSchedule(ROWS, spec)
    record = dispatch_record(schedule, spec.seed, 3, trained=4, next_dispatch=6)  # max_staleness 2: 5 and 6 ahead
    assert record["trained"] == 4 and sorted(record["iterations"]) == ["5", "6"]
    for j in (4, 5):  # the dispatcher's 0-based index of iterations 5 and 6
        groups = make_requests(schedule.rows_for(j), j, group_size=3, encode=lambda t: [len(t)], job_seed=spec.seed,
                               min_version=0, epoch=2)  # a restarted driver's requests: the epoch leaves seeds alone
        recorded = record["iterations"][str(j + 1)]
        assert recorded["prompt_ids"] == [g[0].prompt_id for g in groups]
        assert recorded["seeds"] == [[r.seed for r in g] for g in groups]
    assert dispatch_record(schedule, spec.seed, 3, trained=4, next_dispatch=4)["iterations"] == {}  # sync: none

    write_record(tmp_path, record)
    assert read_record(tmp_path) == record
    same = check_resume(tmp_path, PromptSchedule(ROWS, spec), spec.seed, 3)
    assert same == "buffered iteration(s) 5-6 dispatched again with the recorded prompts and sampling seeds"
    edited = check_resume(tmp_path, PromptSchedule(ROWS[::-1], spec), spec.seed, 3)  # the dataset changed
    assert edited is not None and edited.startswith("resume is not exact: iteration(s) 5, 6")
    reseeded = check_resume(tmp_path, PromptSchedule(ROWS, _spec(seed=8)), 8, 3)
    assert reseeded is not None and "not exact" in reseeded
    assert check_resume(tmp_path / "missing", schedule, spec.seed, 3) is None  # an older checkpoint: no record
