"""Accelerator catalog and model shapes: the hardware facts the cost model builds on.

Figures are dense bf16 peak TFLOPS, HBM bandwidth (TB/s), memory (GB) and a relative hourly price (H800 = 1.0).
Admins may override any device or add new ones; `backend.planner.catalog_store` persists those overrides.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    bf16_tflops: float  # dense peak
    mem_bandwidth_tbps: float  # HBM TB/s
    memory_gb: float
    cost_per_hour: float  # relative price, H800 = 1.0
    interconnect_gbps: float = 400.0  # GB/s between devices of one instance (NVLink) for TP collectives

    def __post_init__(self) -> None:
        for name in ("bf16_tflops", "mem_bandwidth_tbps", "memory_gb", "cost_per_hour", "interconnect_gbps"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"device {self.name!r}: {name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


DEFAULT_DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec("H800", bf16_tflops=989, mem_bandwidth_tbps=3.35, memory_gb=80, cost_per_hour=1.0,
                   interconnect_gbps=200),
        DeviceSpec("H20", bf16_tflops=148, mem_bandwidth_tbps=4.0, memory_gb=96, cost_per_hour=0.45,
                   interconnect_gbps=450),
        DeviceSpec("H100", bf16_tflops=989, mem_bandwidth_tbps=3.35, memory_gb=80, cost_per_hour=1.05,
                   interconnect_gbps=450),
        DeviceSpec("H200", bf16_tflops=989, mem_bandwidth_tbps=4.8, memory_gb=141, cost_per_hour=1.3,
                   interconnect_gbps=450),
        DeviceSpec("A100", bf16_tflops=312, mem_bandwidth_tbps=2.04, memory_gb=80, cost_per_hour=0.55,
                   interconnect_gbps=300),
        DeviceSpec("L40S", bf16_tflops=362, mem_bandwidth_tbps=0.864, memory_gb=48, cost_per_hour=0.35,
                   interconnect_gbps=32),
        DeviceSpec("CPU", bf16_tflops=2.0, mem_bandwidth_tbps=0.2, memory_gb=256, cost_per_hour=0.05,
                   interconnect_gbps=20),
    )
}


@dataclass(frozen=True)
class ModelShape:
    """Transformer decoder shape (Qwen2.5-style GQA). `params_b` in billions."""

    name: str
    params_b: float
    layers: int
    hidden: int
    kv_heads: int = 8
    head_dim: int = 128

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * 2  # bf16

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


MODEL_SHAPES: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("7B", params_b=7.6, layers=28, hidden=3584, kv_heads=4),
        ModelShape("14B", params_b=14.7, layers=48, hidden=5120, kv_heads=8),
        ModelShape("32B", params_b=32.5, layers=64, hidden=5120, kv_heads=8),
        ModelShape("72B", params_b=72.7, layers=80, hidden=8192, kv_heads=8),
    )
}


def model_shape(size: str | float) -> ModelShape:
    """A shape by name ('32B', case-insensitive) or by parameter count in billions (known shape within 15%, else a
    synthesised one with ~12 * layers * hidden^2 parameters)."""
    if isinstance(size, str):
        key = size.strip().upper()
        if key in MODEL_SHAPES:
            return MODEL_SHAPES[key]
        try:
            size = float(key.rstrip("B"))
        except ValueError:
            raise ValueError(f"unknown model size {size!r}: use one of {sorted(MODEL_SHAPES)} or a number of "
                             "billions of parameters") from None
    params_b = float(size)
    if not (math.isfinite(params_b) and 0 < params_b <= 2000):
        raise ValueError(f"model size must be between 0 and 2000 billion parameters, got {size!r}")
    for shape in MODEL_SHAPES.values():
        if abs(shape.params_b - params_b) / shape.params_b <= 0.15:
            return shape
    layers = max(2, round(28 * (params_b / 7.6) ** 0.33))
    hidden = max(128, 128 * round(math.sqrt(params_b * 1e9 / (12 * layers)) / 128))
    return ModelShape(f"{params_b:g}B", params_b=params_b, layers=layers, hidden=hidden)


def default_tp(model: ModelShape, device: DeviceSpec, weight_fraction: float = 0.4) -> int:
    """Smallest power-of-two tensor-parallel degree whose memory holds the weights in `weight_fraction` of it (the
    rest is KV cache), capped at 64."""
    tp = 1
    while model.weight_bytes > weight_fraction * tp * device.memory_gb * 1e9 and tp < 64:
        tp *= 2
    return tp
