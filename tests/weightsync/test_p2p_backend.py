"""Which backend p2p weight sync uses between a trainer and an instance: NCCL only between two different GPUs."""

from __future__ import annotations

import pytest
import torch

from workers.weightsync.p2p.groups import gpu_identity, pick_backend

GPU_A, GPU_B = "GPU-aaaa", "GPU-bbbb"


@pytest.mark.parametrize(
    ("trainer", "instance", "expected"),
    [
        ((True, GPU_A), (True, GPU_B), "nccl"),  # two GPUs
        ((True, GPU_A), (True, GPU_A), "gloo"),  # one GPU shared: NCCL refuses two ranks on it
        ((True, GPU_A), (True, None), "gloo"),  # an instance that does not say which GPU it holds
        ((True, GPU_A), (False, None), "gloo"),  # a CPU instance
        ((False, None), (False, None), "gloo"),
    ],
)
def test_auto_uses_nccl_only_between_two_different_gpus(
    trainer: tuple[bool, str | None], instance: tuple[bool, str | None], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMRL_P2P_BACKEND", raising=False)
    assert pick_backend(trainer[0], instance[0], trainer[1], instance[1]) == expected


def test_forced_backends_and_their_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMRL_P2P_BACKEND", "gloo")
    assert pick_backend(True, True, GPU_A, GPU_B) == "gloo"
    monkeypatch.setenv("STREAMRL_P2P_BACKEND", "nccl")
    assert pick_backend(True, True, GPU_A, GPU_B) == "nccl"
    with pytest.raises(ValueError, match="share one GPU \\(GPU-aaaa\\).*use auto or gloo"):
        pick_backend(True, True, GPU_A, GPU_A)
    with pytest.raises(ValueError, match="needs CUDA on the trainer and on the instance"):
        pick_backend(True, False, GPU_A, None)
    monkeypatch.setenv("STREAMRL_P2P_BACKEND", "mpi")
    with pytest.raises(ValueError, match="must be auto, gloo or nccl, not 'mpi'"):
        pick_backend(False, False, None, None)


def test_a_cpu_device_has_no_gpu_identity() -> None:
    assert gpu_identity(torch.device("cpu")) is None
