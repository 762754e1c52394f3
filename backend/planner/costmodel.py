"""Cost model: decode per-token latency PTL(BS) from a roofline, and training time per token.

Decode step time (one token for each of BS running sequences of one TP instance):

    step(BS) = overhead + max(memory, compute) + tp_comm
    memory   = weights / (tp * bandwidth * MEM_EFF) + BS * context * kv_bytes_per_token / (tp * bandwidth * KV_EFF)
    compute  = BS * 2 * params / (tp * tflops * COMPUTE_EFF)

Calibrated on the paper's 7B/H800 profile (8.3 ms at BS 1, 10 at 32, 11.7 at 64, 15 at 128, 21 at 256, 37 at 512)
with the reference context `CALIBRATION_CONTEXT`. Training: FLOPs per token (6*P per trained model plus 2*P per
forward-only model and attention) over devices * tflops * MFU. Both can be replaced by measured profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backend.planner.devices import DeviceSpec, ModelShape
from contract.catalog import ALGORITHMS
from contract.skew import PTLProfile

MEM_EFF = 0.6  # achieved fraction of HBM bandwidth reading weights (GEMV)
KV_EFF = 0.34  # achieved fraction of HBM bandwidth reading the paged KV cache (attention kernels)
COMPUTE_EFF = 0.22  # achieved fraction of peak FLOPS in decode GEMMs
OVERHEAD_PER_LAYER_S = 25e-6  # kernel launches, sampling, scheduler
TP_COLLECTIVE_LATENCY_S = 8e-6  # per all-reduce
CALIBRATION_CONTEXT = 1000  # tokens of KV read per sequence in the paper's profile
PROFILE_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
KV_MEMORY_FRACTION = 0.9  # of device memory usable for weights + KV cache

# FLOPs per token per parameter over all models an iteration runs: (trained models * 6 + forward-only models * 2)
# per algorithm, declared on its implementation (`train_flops_per_param`, workers/training/algorithms/)
TRAIN_FLOPS_PER_PARAM = {name: int(facts["train_flops_per_param"]) for name, facts in ALGORITHMS.items()}
DEFAULT_MFU = 0.35


def decode_step_seconds(model: ModelShape, device: DeviceSpec, tp: int, batch_size: int, context: float) -> float:
    """Seconds for one decode step of `batch_size` sequences with `context` tokens of KV each."""
    if tp < 1 or batch_size < 1:
        raise ValueError(f"tp and batch_size must be >= 1, got tp={tp}, batch_size={batch_size}")
    bandwidth = tp * device.mem_bandwidth_tbps * 1e12
    memory = model.weight_bytes / (bandwidth * MEM_EFF) + batch_size * context * model.kv_bytes_per_token / (
        bandwidth * KV_EFF)
    compute = batch_size * 2 * model.params_b * 1e9 / (tp * device.bf16_tflops * 1e12 * COMPUTE_EFF)
    comm = 0.0
    if tp > 1:  # two all-reduces of (BS, hidden) bf16 activations per layer
        ring_bytes = batch_size * model.hidden * 2 * 2 * (tp - 1) / tp
        comm = model.layers * 2 * (TP_COLLECTIVE_LATENCY_S + ring_bytes / (device.interconnect_gbps * 1e9))
    return model.layers * OVERHEAD_PER_LAYER_S + max(memory, compute) + comm


def ptl_profile(model: ModelShape, device: DeviceSpec, tp: int, context: float = CALIBRATION_CONTEXT) -> PTLProfile:
    """PTL(BS) sampled at powers of two (the same shape a profiling run of a real engine produces)."""
    return PTLProfile(tuple((bs, decode_step_seconds(model, device, tp, bs, context)) for bs in PROFILE_BATCH_SIZES))


def max_batch_size(
    model: ModelShape, device: DeviceSpec, tp: int, context: float, memory_fraction: float = KV_MEMORY_FRACTION
) -> int:
    """Sequences whose KV cache (at `context` tokens each) fits next to the weights in `memory_fraction` of the
    memory of one instance."""
    free = tp * device.memory_gb * 1e9 * memory_fraction - model.weight_bytes
    if free <= 0:
        raise ValueError(f"{model.name} weights ({model.weight_bytes / 1e9:.0f} GB) do not fit on {tp} x "
                         f"{device.name} ({device.memory_gb:g} GB each): raise tensor parallelism")
    return max(1, math.floor(free / (max(context, 1.0) * model.kv_bytes_per_token)))


@dataclass(frozen=True)
class TrainCost:
    """Seconds to train one token on ONE device (divide by the device count; `comm_fraction` models scaling loss)."""

    seconds_per_token_device: float
    comm_fraction_per_doubling: float = 0.02

    def seconds(self, tokens: float, devices: int) -> float:
        if devices < 1:
            raise ValueError(f"training needs at least one device, got {devices}")
        efficiency = 1.0 / (1.0 + self.comm_fraction_per_doubling * math.log2(devices))
        return tokens * self.seconds_per_token_device / devices / efficiency


def train_cost(
    model: ModelShape,
    device: DeviceSpec,
    *,
    algorithm: str = "ppo",
    context: float = CALIBRATION_CONTEXT,
    mfu: float = DEFAULT_MFU,
) -> TrainCost:
    """Roofline training cost of one token (all models of the algorithm: actor, critic, reference, reward)."""
    if algorithm not in TRAIN_FLOPS_PER_PARAM:
        raise ValueError(f"unknown algorithm {algorithm!r}: use one of {sorted(TRAIN_FLOPS_PER_PARAM)}")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    per_param = TRAIN_FLOPS_PER_PARAM[algorithm]
    attention = 4 * model.layers * model.hidden * context / 2  # forward QK^T and AV over the causal half
    flops = per_param * model.params_b * 1e9 + per_param / 2 * attention
    return TrainCost(seconds_per_token_device=flops / (device.bf16_tflops * 1e12 * mfu))


def weight_sync_seconds(model: ModelShape, link_gbps: float = 25.0) -> float:
    """Broadcast of bf16 weights from trainer to generation over a `link_gbps` GB/s path (pipelined broadcast: the
    time of one transfer, independent of the number of receivers)."""
    return model.weight_bytes / (link_gbps * 1e9)
