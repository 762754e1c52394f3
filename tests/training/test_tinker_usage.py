"""A Tinker session's optimizer step carries its usage: `step_seconds` (the compute time of the forward_backward
calls since the previous step, and the step itself) and `tokens`, which backend/services/usage.py turns into one
training usage row."""

from __future__ import annotations

import time
from pathlib import Path

from backend.services.usage import iteration_usage
from contract.reporter import JobRecord, MemoryReporter
from contract.spec import JobSpec
from contract.states import JobStatus
from workers.runtime.tinker_session import TinkerSession, run_request

ROWS = [[5, 9, 12, 7, 3, 11], [4, 8, 15, 16, 23, 42]]
ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0, "grad_clip_norm": 0.0}


def test_a_step_records_its_compute_time_and_tokens(tiny_model_dir: Path) -> None:
    spec = JobSpec.model_validate({
        "name": "t", "model": str(tiny_model_dir), "mode": "colocated",
        "dataset": {"builtin": "arithmetic", "num_prompts": 1, "eval_prompts": 0},
        "training": {"iterations": 100, "lora": {"rank": 4, "alpha": 32.0}}})
    record = JobRecord(job_id=1, team_id=1, spec=spec, status=JobStatus.running, model_path=str(tiny_model_dir),
                       dataset_path=None)
    session, reporter = TinkerSession(record, "cpu"), MemoryReporter()
    data = [{"tokens": row[:-1], "inputs": {"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)}}
            for row in ROWS]
    started = time.monotonic()
    for _ in range(2):  # two forward_backward calls accumulate into one step
        run_request(session, "forward_backward", {"data": data, "loss_fn": "cross_entropy", "config": None,
                                                  "forward_only": False}, 1, reporter)
    time.sleep(0.2)  # idle time between calls is not the session's compute
    run_request(session, "optim_step", ADAM, 1, reporter)
    wall = time.monotonic() - started
    (iteration, metrics), = reporter.iterations[1].items()
    assert iteration == 1 and metrics["tokens"] == 2 * sum(len(row) - 1 for row in ROWS)
    assert 0 < metrics["step_seconds"] < wall - 0.2
    shares = iteration_usage(spec.model_dump(mode="json"), metrics)
    assert [(s.pool, s.device_seconds, s.tokens_trained) for s in shares] == [
        ("training", metrics["step_seconds"], metrics["tokens"])]
    run_request(session, "optim_step", ADAM, 1, reporter)  # nothing since the last step: only the step's own time
    assert reporter.iterations[1][2]["step_seconds"] < metrics["step_seconds"]
