"""Fast defaults (workers/training/defaults.py): a spec that leaves the token budget and the precision to the platform
gets a memory-sized budget and float32 on CPUs, recorded as an event; what the user set is kept; the budget is off
where it would change the loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from contract.spec import JobSpec
from workers.local.run import train_local
from workers.training.defaults import (
    BUDGET_CAP,
    BUDGET_FLOOR,
    choose_training_defaults,
    model_shape,
    token_budget,
)

CPU = torch.device("cpu")


def spec_of(model: Path | str, **training: Any) -> JobSpec:
    return JobSpec.model_validate({"model": str(model), "dataset": {"builtin": "arithmetic", "num_prompts": 8,
                                                                     "eval_prompts": 0},
                                   "algorithm": {"group_size": 2}, "generation": {"max_tokens": 6},
                                   "training": {"iterations": 1, "prompts_per_iteration": 2, **training},
                                   "checkpoint": {"interval": 100}})


def test_left_to_the_platform_the_budget_fits_memory_and_cpus_train_in_float32(tiny_model_dir: Path) -> None:
    spec, chosen = choose_training_defaults(spec_of(tiny_model_dir), tiny_model_dir, CPU)
    budget = spec.training.max_tokens_per_micro_batch
    assert budget is not None and BUDGET_FLOOR <= budget <= BUDGET_CAP["cpu"] and budget & (budget - 1) == 0
    assert spec.training.bf16_autocast is False
    assert chosen["max_tokens_per_micro_batch"]["value"] == budget and "parameters" in \
        chosen["max_tokens_per_micro_batch"]["reason"]
    assert chosen["bf16_autocast"] == {"value": False, "reason": "cpu: bfloat16 matmuls are slower than float32 here"}


def test_what_the_user_set_is_kept(tiny_model_dir: Path) -> None:
    given = spec_of(tiny_model_dir, max_tokens_per_micro_batch=0, bf16_autocast=True)
    spec, chosen = choose_training_defaults(given, tiny_model_dir, CPU)
    assert spec == given and chosen == {}


def test_off_where_the_budget_would_change_the_loss(tiny_model_dir: Path) -> None:
    whitening = JobSpec.model_validate({**spec_of(tiny_model_dir).model_dump(), "algorithm": {"name": "reinforce_pp"}})
    spec, chosen = choose_training_defaults(whitening, tiny_model_dir, CPU)
    assert spec.training.max_tokens_per_micro_batch == 0 and "reinforce_pp" in \
        chosen["max_tokens_per_micro_batch"]["reason"]
    ranks = spec_of(tiny_model_dir, devices=2)
    spec, chosen = choose_training_defaults(ranks, tiny_model_dir, CPU)
    assert spec.training.max_tokens_per_micro_batch == 0 and "rank" in chosen["max_tokens_per_micro_batch"]["reason"]


def test_the_budget_follows_free_memory_and_model_size(tiny_model_dir: Path) -> None:
    spec, shape = spec_of(tiny_model_dir), model_shape(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert shape["params"] == sum(p.numel() for p in model.parameters())  # read from the safetensors headers
    budgets = [token_budget(spec, shape, CPU, free)[0] for free in (0, 1 << 26, 1 << 28, 1 << 40)]
    assert budgets == sorted(budgets) and budgets[0] == BUDGET_FLOOR and budgets[-1] == BUDGET_CAP["cpu"]
    big = {**shape, "layers": shape["layers"] * 40, "hidden": shape["hidden"] * 16, "params": shape["params"] * 2000}
    assert token_budget(spec, big, CPU, 1 << 33)[0] < token_budget(spec, shape, CPU, 1 << 33)[0]
    with pytest.raises(ValueError):  # the spec still refuses a budget the algorithm cannot use
        JobSpec.model_validate({**spec.model_dump(), "algorithm": {"name": "reinforce_pp"},
                                "training": {"max_tokens_per_micro_batch": 512}})


def test_a_job_with_defaults_records_its_budget_and_precision(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = train_local(spec_of(tiny_model_dir), tmp_path / "run", eval_every=0)
    [event] = [e for e in result.events if e["kind"] == "training_defaults"]
    assert event["message"].startswith("training defaults: token budget ") and "precision float32" in event["message"]
    assert event["data"]["max_tokens_per_micro_batch"]["value"] >= BUDGET_FLOOR
    assert len(result.records) == 1 and result.records[0].metrics["samples"] == 4
