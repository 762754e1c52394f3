"""The base of every JobSpec section (contract/spec.py, contract/spec_operations.py): strict models and the helpers
their validators share."""

from __future__ import annotations

import math
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in a spec must not be silently ignored. NaN/Infinity are refused in every
    float field, and a boolean is never accepted where a number is expected (`true` is not 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation is not bool and annotation is not Any and bool not in get_args(annotation):
                raise ValueError("true/false is not accepted here: give a number")
        return value


def choice_list(table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI extension the dashboard reads its choice lists from (frontend/scripts/gen-choices.mjs): each
    name with its label, in the table's order (contract/catalog.py)."""
    return {"x-choices": [{"value": name, "label": facts["label"]} for name, facts in table.items()]}


def check_json_value(value: Any, where: str) -> None:
    """`value` is plain JSON with finite numbers only (raises ValueError naming the place otherwise)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: NaN and Infinity are not allowed")
    if isinstance(value, dict):
        for key, item in value.items():
            check_json_value(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_value(item, f"{where}[{index}]")
