"""`generation.share`: which jobs share generation instances, the same answer from a validated spec and from a stored
one (the jobs list reads stored specs without validating them again), and where a refusal is reported."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contract.sharing import stored_spec_shares_generation, stored_spec_shares_training
from contract.spec import JobSpec

LORA = {"lora": {"rank": 8}}
CASES: list[tuple[dict[str, Any], bool]] = [
    ({"training": LORA}, True),
    ({"training": LORA, "mode": "async"}, True),
    ({"training": {**LORA, "weight_sync": "auto"}}, True),
    ({"training": LORA, "generation": {"share": False}}, False),
    ({"training": LORA, "mode": "colocated"}, False),
    ({"training": {**LORA, "weight_sync": "p2p"}}, False),
    ({"training": LORA, "generation": {"engine": "vllm"}}, True),
    ({"generation": {"engine": "vllm"}}, False),
    ({}, False),
]


def _spec(**overrides: Any) -> JobSpec:
    return JobSpec.model_validate({"model": "m", "dataset": {"builtin": "arithmetic"}, **overrides})


@pytest.mark.parametrize(("overrides", "shares"), CASES)
def test_stored_specs_share_exactly_when_validated_ones_do(overrides: dict[str, Any], shares: bool) -> None:
    spec = _spec(**overrides)
    assert spec.shares_generation is shares
    assert stored_spec_shares_generation(spec.model_dump(mode="json")) is shares


def test_share_true_on_a_job_that_cannot_share_is_an_error_at_generation_share() -> None:
    with pytest.raises(ValidationError) as caught:
        _spec(mode="colocated", training=LORA, generation={"share": True})
    (error,) = caught.value.errors()
    assert error["loc"] == ("generation", "share") and "colocated mode" in error["msg"]
    assert _spec(training=LORA, generation={"share": True}).shares_generation


def test_jobs_meet_on_a_process_only_with_the_same_engine_settings() -> None:
    """The shared instance's key holds `share_settings`: hf jobs meet unless one turned speculation off; vLLM jobs
    meet when their vLLM settings agree and their adapters fit the same LoRA slot size (vLLM's ranks 1, 8, 16, ...)."""
    def vllm(rank: int, **settings: Any) -> str:
        return _spec(training={"lora": {"rank": rank}}, generation={"engine": "vllm", "vllm": settings}).share_settings

    assert _spec(training={"lora": {"rank": 4}}).share_settings == _spec(training=LORA).share_settings == "hf"
    group = _spec(training=LORA, generation={"speculative": "group"}).share_settings
    off = _spec(training=LORA, generation={"speculative": "off"}).share_settings
    assert group == "hf" != off  # auto (group on hf) and group meet; off only off
    assert vllm(4) == vllm(8) != vllm(16)
    assert vllm(8) != vllm(8, max_model_len=256) and vllm(8, max_model_len=256) == vllm(8, max_model_len=256)
    assert vllm(8).startswith("vllm|") and vllm(8) != _spec(training=LORA).share_settings
    with pytest.raises(ValidationError, match="above the largest LoRA rank the vllm engine serves"):
        vllm(1024)


SHARE = {**LORA, "share": True}
TRAINING_CASES: list[tuple[dict[str, Any], bool]] = [
    ({"training": SHARE}, True),
    ({"training": SHARE, "mode": "async"}, True),
    ({"training": {**SHARE, "weight_sync": "auto"}}, True),
    ({"training": SHARE, "generation": {"share": False}}, True),  # training and generation share independently
    ({"training": LORA}, False),  # off unless asked: the jobs of a shared process split its slot's cores
]


@pytest.mark.parametrize(("overrides", "shares"), TRAINING_CASES)
def test_training_shares_when_asked_from_stored_and_validated_specs(overrides: dict[str, Any], shares: bool) -> None:
    spec = _spec(**overrides)
    assert spec.shares_training is shares
    assert stored_spec_shares_training(spec.model_dump(mode="json")) is shares


@pytest.mark.parametrize(("overrides", "why"), [
    ({"training": {"share": True}}, "only LoRA jobs share a training process"),
    ({"training": SHARE, "mode": "colocated"}, "colocated mode"),
    ({"training": {**SHARE, "devices": 2}}, "multi-device trainer"),
    ({"training": {**SHARE, "weight_sync": "p2p"}}, "'p2p' opens a process group per trainer"),
])
def test_training_share_on_a_job_that_cannot_is_an_error_at_training_share(overrides: dict[str, Any],
                                                                           why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _spec(**overrides)
    (error,) = caught.value.errors()
    assert error["loc"] == ("training", "share") and "cannot share a training process" in error["msg"], error
    assert why in error["msg"], error
