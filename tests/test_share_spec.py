"""`generation.share`: which jobs share generation instances, the same answer from a validated spec and from a stored
one (the jobs list reads stored specs without validating them again), and where a refusal is reported."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contract.sharing import stored_spec_shares_generation
from contract.spec import JobSpec

LORA = {"lora": {"rank": 8}}
CASES: list[tuple[dict[str, Any], bool]] = [
    ({"training": LORA}, True),
    ({"training": LORA, "mode": "async"}, True),
    ({"training": {**LORA, "weight_sync": "auto"}}, True),
    ({"training": LORA, "generation": {"share": False}}, False),
    ({"training": LORA, "mode": "colocated"}, False),
    ({"training": {**LORA, "weight_sync": "p2p"}}, False),
    ({"training": LORA, "generation": {"engine": "vllm"}}, False),
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
