"""Fast training defaults, chosen at job start for what the spec leaves to the platform (`None`).

    spec, chosen = choose_training_defaults(spec, model_dir, device)   # the driver, before it builds the trainer

- `training.max_tokens_per_micro_batch: None` -> the largest padded-token budget whose activations fit in a share of
  the device's free memory (after the weights, gradients and AdamW state), capped where bigger passes stop being
  faster. The trainer's cut (`batch.token_budget_batches`) then weighs padding against passes, so a generous budget
  never adds padding. Off (0) where it cannot keep the loss exact: an algorithm that normalises per micro-batch, or
  several ranks (each must run the same number of passes).
- `training.bf16_autocast: None` -> on for a GPU that computes in bfloat16 natively, off on CPUs (where bf16 matmuls
  run at about half the float32 speed: bench/peer_trl.py --bf16).

The chosen values and why are returned for the job's events; a value the user set is kept as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import torch

from contract.catalog import ALGORITHMS
from contract.spec import JobSpec

MEMORY_SHARE = 0.5  # of the free memory left after the model state, for one pass's activations
BUDGET_FLOOR = 256  # tokens: below it a pass is all overhead; a longer sequence still runs alone
BUDGET_CAP = {"cpu": 4096, "cuda": 65536}  # past these a bigger pass is no faster on that device
ACTIVATION_BYTES_PER_HIDDEN = 34  # fp32 bytes saved for backward per token, per layer, per hidden unit (approx.)
LOGIT_COPIES = 3  # logits, their log-softmax and its gradient, fp32, per token per vocabulary entry


def model_shape(model_dir: Path) -> dict[str, int]:
    """Layers, hidden size, vocabulary and parameter count from config.json (+ the safetensors headers)."""
    config = json.loads((model_dir / "config.json").read_text())
    config = config.get("text_config", config) if "num_hidden_layers" not in config else config
    shape = {"layers": int(config.get("num_hidden_layers") or config.get("n_layer") or 1),
             "hidden": int(config.get("hidden_size") or config.get("n_embd") or 1),
             "vocab": int(config.get("vocab_size") or 1)}
    shape["params"] = _parameter_count(model_dir) or 12 * shape["layers"] * shape["hidden"] ** 2
    return shape


def _parameter_count(model_dir: Path) -> int:
    total = 0
    for path in model_dir.glob("*.safetensors"):
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= int(dim)
                total += count
    return total


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return int(psutil.virtual_memory().available)


def token_budget(spec: JobSpec, shape: dict[str, int], device: torch.device, free_bytes: int) -> tuple[int, str]:
    """(budget, reason) for one process training `shape` on `device` with `free_bytes` free."""
    lora = spec.training.lora is not None
    state_bytes = shape["params"] * (4 if lora else 16)  # fp32 weights (+ grads and two AdamW moments when full)
    if spec.algorithm.kl_coef > 0 and not lora:
        state_bytes += shape["params"] * 4  # the frozen reference copy
    per_token = shape["layers"] * shape["hidden"] * ACTIVATION_BYTES_PER_HIDDEN + shape["vocab"] * 4 * LOGIT_COPIES
    room = max(0, free_bytes - state_bytes)
    cap = BUDGET_CAP.get(device.type, BUDGET_CAP["cpu"])
    fits = int(room * MEMORY_SHARE // per_token)
    budget = max(BUDGET_FLOOR, min(cap, fits))
    budget = 1 << (budget.bit_length() - 1)  # a power of two: stable across small changes in free memory
    reason = (f"{shape['params'] / 1e6:.1f}M parameters, {per_token / 1024:.0f} KiB of activations per token, "
              f"{free_bytes / 2**30:.1f} GiB free on {device.type}; capped at {cap}")
    return budget, reason


def prefers_bf16(device: torch.device) -> tuple[bool, str]:
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return True, f"{torch.cuda.get_device_name(device)} computes bfloat16 natively"
    return False, f"{device.type}: bfloat16 matmuls are slower than float32 here"


def choose_training_defaults(spec: JobSpec, model_dir: Path,
                             device: torch.device | str) -> tuple[JobSpec, dict[str, Any]]:
    """`spec` with `None` training defaults resolved, and what was chosen ({setting: {"value", "reason"}})."""
    device = torch.device(device)
    training = spec.training
    update: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    if training.max_tokens_per_micro_batch is None:
        conflict = ALGORITHMS[spec.algorithm.name].get("token_budget_conflict")
        if conflict:
            value, reason = 0, f"off: {spec.algorithm.name} {conflict}"
        elif training.devices > 1:
            value, reason = 0, "off: every rank of a multi-device trainer must run the same number of passes"
        else:
            value, reason = token_budget(spec, model_shape(model_dir), device, free_memory_bytes(device))
        update["max_tokens_per_micro_batch"] = value
        chosen["max_tokens_per_micro_batch"] = {"value": value, "reason": reason}
    if training.bf16_autocast is None:
        bf16, reason = prefers_bf16(device)
        update["bf16_autocast"] = bf16
        chosen["bf16_autocast"] = {"value": bf16, "reason": reason}
    if not update:
        return spec, chosen
    resolved = spec.model_copy(update={"training": training.model_copy(update=update)})
    return resolved, chosen


def describe(chosen: dict[str, Any], threads: int) -> str:
    """One line for the job's events."""
    parts = []
    if "max_tokens_per_micro_batch" in chosen:
        entry = chosen["max_tokens_per_micro_batch"]
        parts.append(f"token budget {entry['value'] or 'off'} ({entry['reason']})")
    if "bf16_autocast" in chosen:
        entry = chosen["bf16_autocast"]
        parts.append(f"precision {'bf16 autocast' if entry['value'] else 'float32'} ({entry['reason']})")
    parts.append(f"{threads} CPU thread(s)")
    return "training defaults: " + "; ".join(parts)
