"""p2p weight sync without processes: the bucket layout round-trips bit for bit, and `training.weight_sync` validates
(old `broadcast` specs run as auto; p2p is refused for colocated jobs)."""

from __future__ import annotations

import pydantic
import pytest
import torch

from contract.spec import JobSpec
from workers.weightsync.p2p import bucket_views, flatten_into, layout_json, parse_layout, plan_buckets


def test_buckets_are_bounded_single_dtype_and_round_trip() -> None:
    state = {f"layer{i}.weight": torch.randn(64, 64) for i in range(10)}  # 16 KiB each
    state["norm.weight"] = torch.randn(64).to(torch.bfloat16)
    state["huge.weight"] = torch.randn(256, 256)  # 256 KiB: larger than a bucket, gets its own
    buckets = plan_buckets(state, bucket_bytes=64 * 1024)
    assert parse_layout(layout_json(buckets)) == buckets
    assert {b.dtype for b in buckets} == {"float32", "bfloat16"}
    assert all(b.numel * 4 <= 64 * 1024 for b in buckets if b.dtype == "float32" and len(b.slots) > 1)
    assert sorted(s.name for b in buckets for s in b.slots) == sorted(state)
    received: dict[str, torch.Tensor] = {}
    for bucket in buckets:
        flat = flatten_into(bucket, state, torch.empty(bucket.numel * 2, dtype=bucket.torch_dtype)).clone()
        received.update(bucket_views(bucket, flat))
    assert all(torch.equal(received[k].view(torch.uint8), state[k].view(torch.uint8)) for k in state)


def _spec(**training: object) -> dict[str, object]:
    return {"model": "m", "dataset": {"builtin": "arithmetic"}, "training": training}


def test_weight_sync_choices() -> None:
    for choice in ("p2p", "shared_store", "auto"):
        assert JobSpec.model_validate(_spec(weight_sync=choice)).training.weight_sync == choice
    assert JobSpec.model_validate(_spec()).training.weight_sync == "shared_store"
    assert JobSpec.model_validate(_spec(weight_sync="broadcast")).training.weight_sync == "auto"  # stored specs
    with pytest.raises(pydantic.ValidationError, match="colocated mode generates in the trainer's process"):
        JobSpec.model_validate({**_spec(weight_sync="p2p"), "mode": "colocated"})
    with pytest.raises(pydantic.ValidationError, match="weight_sync"):
        JobSpec.model_validate(_spec(weight_sync="rdma"))
