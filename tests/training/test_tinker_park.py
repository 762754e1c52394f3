"""A Tinker session's park state (workers/runtime/tinker_park.py): a session parked at any point between calls and
restored in a new process's model goes on exactly as the uninterrupted session does, the gradients accumulated
before its optim_step included; the state file is replaced atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.reporter import JobRecord
from contract.spec import JobSpec
from contract.states import JobStatus
from workers.runtime import tinker_park
from workers.runtime.tinker_session import TinkerSession

ROWS = [[5, 9, 12, 7, 3, 11], [4, 8, 15, 16, 23, 42], [1, 2, 3, 4, 5, 6]]
ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0, "grad_clip_norm": 0.0}


def _record(model_dir: Path) -> JobRecord:
    spec = JobSpec.model_validate({
        "name": "t", "model": str(model_dir), "mode": "colocated", "seed": 3,
        "dataset": {"builtin": "arithmetic", "num_prompts": 1, "eval_prompts": 0}, "generation": {"instances": 1},
        "training": {"iterations": 100, "lora": {"rank": 4, "alpha": 32.0}}})
    return JobRecord(job_id=1, team_id=1, spec=spec, status=JobStatus.running, model_path=str(model_dir),
                     dataset_path=None)


def _forward_backward(session: TinkerSession, forward_only: bool = False) -> float:
    data = [{"tokens": row[:-1], "inputs": {"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)}}
            for row in ROWS]
    out: dict[str, Any] = session.forward_backward({"data": data, "loss_fn": "cross_entropy", "config": None,
                                                    "forward_only": forward_only})
    return float(out["metrics"]["loss:sum"])


def _calls(session: TinkerSession, count: int) -> list[float]:
    """`count` calls alternating forward_backward and optim_step (odd counts end between the two)."""
    losses = []
    for call in range(count):
        if call % 2 == 0:
            losses.append(_forward_backward(session))
        else:
            session.optim_step(ADAM)
    return losses


@pytest.mark.parametrize("parked_after", [4, 5])  # after an optim_step, and between forward_backward and optim_step
def test_a_restored_session_goes_on_as_the_uninterrupted_one(tiny_model_dir: Path, tmp_path: Path,
                                                             parked_after: int) -> None:
    record = _record(tiny_model_dir)
    expected = _calls(TinkerSession(record, "cpu"), 12)

    first = TinkerSession(record, "cpu")
    losses = _calls(first, parked_after)
    path = tinker_park.park_path(tmp_path, 1, 1)
    tinker_park.save(path, {**first.snapshot(), "next_seq": parked_after + 1, "created": True})
    assert not path.with_name(path.name + ".tmp").exists()

    restored = TinkerSession(record, "cpu")  # a fresh adapter and optimizer, as a new worker process builds them
    state = tinker_park.load(path)
    assert state is not None and state["next_seq"] == parked_after + 1
    restored.restore(state)
    assert restored.step == first.step
    if parked_after % 2:  # the pending gradients came along: the step in progress completes as it would have
        restored.optim_step(ADAM)
        losses += _calls(restored, 12 - parked_after - 1)
    else:
        losses += _calls(restored, 12 - parked_after)
    assert losses == pytest.approx(expected, rel=1e-6)
    assert losses[-1] < losses[0]


def test_no_park_state_and_a_foreign_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = tinker_park.park_path(tmp_path, 1, 2)
    assert tinker_park.load(path) is None
    session = TinkerSession(_record(tiny_model_dir), "cpu")
    state = session.snapshot()
    state["params"] = {"other.lora_A.weight": next(iter(state["params"].values()))}
    with pytest.raises(ValueError, match="does not match this session's model"):
        session.restore(state)
    tinker_park.save(path, {**session.snapshot(), "next_seq": 1, "created": True})
    tinker_park.discard(path)
    assert not path.exists()
