"""Cost model: the roofline PTL matches the paper's 7B/H800 profile; shapes, TP and memory checks."""

from __future__ import annotations

import pytest

from backend.planner.costmodel import max_batch_size, ptl_profile, train_cost
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec, default_tp, model_shape

PAPER_7B_H800_MS = {1: 8.3, 32: 10.0, 64: 11.7, 128: 15.0, 256: 21.0, 512: 37.0}


@pytest.mark.parametrize("batch_size", sorted(PAPER_7B_H800_MS))
def test_ptl_matches_paper_profile_within_15_percent(batch_size: int) -> None:
    ptl = ptl_profile(model_shape("7B"), DEFAULT_DEVICES["H800"], tp=1)
    assert ptl(batch_size) * 1e3 == pytest.approx(PAPER_7B_H800_MS[batch_size], rel=0.15)


def test_ptl_grows_with_batch_and_bandwidth_helps() -> None:
    m = model_shape("32B")
    h800 = ptl_profile(m, DEFAULT_DEVICES["H800"], tp=4, context=4000)
    h20 = ptl_profile(m, DEFAULT_DEVICES["H20"], tp=4, context=4000)
    values = [h800(bs) for bs in (1, 8, 64, 512)]
    assert values == sorted(values)
    assert h20(16) < h800(16)  # decode is bandwidth-bound at small batch: H20 (4 TB/s) beats H800 (3.35 TB/s)
    assert h20(1024) > h800(1024)  # and compute-bound at large batch, where H20's 148 TFLOPS lose


def test_model_shapes_by_name_and_size() -> None:
    assert model_shape("72b").layers == 80
    assert model_shape(32).name == "32B"
    odd = model_shape("3B")
    assert odd.params_b == 3 and odd.layers >= 2 and odd.hidden % 128 == 0
    with pytest.raises(ValueError, match="unknown model size"):
        model_shape("huge")
    with pytest.raises(ValueError, match="between 0 and 2000"):
        model_shape(-1)


def test_tp_fits_weights_and_memory_errors_are_clear() -> None:
    h800 = DEFAULT_DEVICES["H800"]
    assert default_tp(model_shape("7B"), h800) == 1
    assert default_tp(model_shape("72B"), h800) == 8
    with pytest.raises(ValueError, match="do not fit"):
        max_batch_size(model_shape("72B"), h800, tp=1, context=1000)
    assert max_batch_size(model_shape("7B"), h800, tp=1, context=8000) < max_batch_size(
        model_shape("7B"), h800, tp=1, context=1000)


def test_training_cost_scales_with_devices_and_algorithm() -> None:
    m, d = model_shape("7B"), DEFAULT_DEVICES["H800"]
    ppo, grpo = train_cost(m, d, algorithm="ppo"), train_cost(m, d, algorithm="grpo")
    assert ppo.seconds_per_token_device > grpo.seconds_per_token_device
    assert grpo.seconds(1e6, 8) < grpo.seconds(1e6, 4) < grpo.seconds(1e6, 1)
    with pytest.raises(ValueError, match="unknown algorithm"):
        train_cost(m, d, algorithm="dpo")


def test_device_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="mem_bandwidth_tbps"):
        DeviceSpec("X", bf16_tflops=1, mem_bandwidth_tbps=0, memory_gb=1, cost_per_hour=1)
