"""The driver's held-out evaluation bookkeeping (workers/runtime/held_out.py): when evaluations are due and what they
sample; the sources only generate them (tests/training/test_local.py, tests/integration/test_runtime_modes.py)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from contract.spec import JobSpec
from workers.core.chat import ChatEncoder
from workers.core.prompts import eval_iteration_of, is_eval
from workers.datasets import generate_rows
from workers.runtime.held_out import HeldOut, eval_skipped_reason


def _spec(**training: object) -> JobSpec:
    return JobSpec.model_validate({
        "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8, "eval_prompts": 3},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}}, "algorithm": {"name": "grpo", "group_size": 2},
        "training": {"iterations": 5, "prompts_per_iteration": 2, "eval_every": 2, **training}})


def test_evaluations_are_due_every_eval_every_and_after_the_last_iteration(tiny_model_dir: Path) -> None:
    encode = ChatEncoder(AutoTokenizer.from_pretrained(tiny_model_dir))
    rows = generate_rows("arithmetic", 3, 0)
    assert [t for t in range(1, 6) if HeldOut(_spec(), rows, encode, 0).due(t)] == [2, 4, 5]
    assert not any(HeldOut(_spec(), [], encode, 0).due(t) for t in range(1, 6))  # no held-out rows: never
    assert not any(HeldOut(_spec(eval_every=0), rows, encode, 0).due(t) for t in range(1, 6))


def test_every_evaluation_samples_the_same_prompts_with_the_same_seeds(tiny_model_dir: Path) -> None:
    held = HeldOut(_spec(), generate_rows("arithmetic", 3, 0), ChatEncoder(AutoTokenizer.from_pretrained(
        tiny_model_dir)), 0)
    first, later = held.requests(2), held.requests(4)
    assert len(first) == len(later) == 3
    assert all(is_eval(r.group_id) for r in first + later)
    assert {eval_iteration_of(r.group_id) for r in first} == {2} and {r.min_version for r in later} == {4}
    assert [(r.prompt_ids, r.seed) for r in first] == [(r.prompt_ids, r.seed) for r in later]
    assert len({r.seed for r in first}) == 3  # one seed per held-out slot


def test_a_job_without_held_out_rows_says_why() -> None:
    assert "not more than dataset.eval_prompts (3)" in eval_skipped_reason(_spec(), 3)
    no_rows = _spec().model_copy(update={"dataset": _spec().dataset.model_copy(update={"eval_prompts": 0})})
    assert "dataset.eval_prompts is 0" in eval_skipped_reason(no_rows, 8)
