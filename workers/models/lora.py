"""LoRA adapters (peft): what the trainer, the engines, weight sync and checkpoints agree on.

    model = wrap(load_policy(...), spec.training.lora)    # the trainer (and the hf engine) wrap the base model
    adapter = adapter_state(model)                         # the adapter alone, peft's saved names: what is shipped
    write_adapter(directory, adapter, config)              # PEFT layout (config + safetensors)
    load_adapter(model, adapter)                           # into a wrapped model, in place (the base is untouched)
    merged = merge_state(model.state_dict(), lora)         # base + (alpha / r) * B @ A under the HF names

Names: the adapter's tensors travel and are stored under peft's saved names (`base_model.model.<hf module>.lora_A.
weight`, no adapter name), the layout `PeftModel.from_pretrained` and vLLM's `LoRARequest` read. A wrapped model's
own state dict adds the adapter name (`...lora_A.default.weight`) and moves each adapted weight under `base_layer`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from contract.spec import LoraSpec
from workers.models.weights_file import save_weights

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"  # inside a checkpoint: the adapter beside the merged model
_PREFIX = "base_model.model."
ADAPTER_NAME = "default"


def lora_config(spec: LoraSpec) -> LoraConfig:
    """The peft config of `spec`; no `target_modules` means every linear layer except the output head."""
    alpha: Any = spec.alpha  # peft annotates an int; a float scales the same
    return LoraConfig(r=spec.rank, lora_alpha=alpha, lora_dropout=spec.dropout, bias="none",
                      target_modules=list(spec.target_modules) if spec.target_modules else "all-linear",
                      task_type="CAUSAL_LM")


def wrap(model: Any, spec: LoraSpec) -> Any:
    """`model` with a fresh adapter (A random, B zero: the wrapped model computes exactly what `model` did); only
    the adapter's parameters require gradients. Unknown target modules are a ValueError naming them."""
    try:
        return get_peft_model(model, lora_config(spec))
    except ValueError as err:
        raise ValueError(f"training.lora.target_modules: {err}") from err


def scaling(spec: LoraSpec) -> float:
    return spec.alpha / spec.rank


def is_adapter(state: dict[str, Any]) -> bool:
    return bool(state) and all(".lora_" in name for name in state)


def adapter_state(model: Any, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names, detached CPU copies; `state`: take them from that state dict
    of the wrapped model (a multi-rank trainer's gathered one) instead of the model's own parameters."""
    # the adapter alone: peft would add the whole output head when `lm_head` is a target ("auto" embedding saving)
    found = get_peft_model_state_dict(model, state_dict=state, adapter_name=ADAPTER_NAME, save_embedding_layers=False)
    return {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in found.items()}


def load_adapter(model: Any, adapter: dict[str, torch.Tensor], name: str = ADAPTER_NAME) -> None:
    """Copy an adapter (peft's saved names) into a wrapped model's adapter `name` in place; a mismatch is a
    ValueError."""
    result = set_peft_model_state_dict(model, adapter, adapter_name=name)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    missing = [key for key in getattr(result, "missing_keys", []) or []
               if f".lora_A.{name}." in key or f".lora_B.{name}." in key]  # other adapters' keys are not ours
    if unexpected or missing:
        raise ValueError(f"the adapter does not match the model: missing={sorted(missing)[:5]} "
                         f"unexpected={sorted(unexpected)[:5]}")


def adapter_config_json(spec: LoraSpec, adapter: dict[str, torch.Tensor]) -> dict[str, Any]:
    """adapter_config.json for `adapter`: `spec` with the target modules it adapts named one by one (what peft
    resolved "all-linear" to), which every reader (peft, vLLM) understands."""
    modules = sorted({name.split(".lora_")[0].rsplit(".", 1)[-1] for name in adapter})
    config = lora_config(spec.model_copy(update={"target_modules": modules or None}))
    data: dict[str, Any] = config.to_dict()
    for key, value in list(data.items()):
        if isinstance(value, set):
            data[key] = sorted(value)
    return data


def write_adapter(directory: str | Path, adapter: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """The PEFT layout: adapter_config.json + adapter_model.safetensors (`PeftModel.from_pretrained` loads it)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_weights(adapter, path / ADAPTER_WEIGHTS)
    (path / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, default=str))
    return path


def read_adapter(directory: str | Path) -> dict[str, torch.Tensor]:
    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.exists():
        raise FileNotFoundError(f"{directory} holds no LoRA adapter ({ADAPTER_WEIGHTS})")
    return load_file(str(path))


def merge_state(state: dict[str, torch.Tensor], spec: LoraSpec) -> dict[str, torch.Tensor]:
    """The merged model's weights under the HF names, from a wrapped model's (full, gathered) state dict:
    W + (alpha / r) * B @ A for each adapted linear layer, every other tensor as it is."""
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if ".lora_" not in name:
            merged[name.removeprefix(_PREFIX).replace(".base_layer.", ".")] = tensor
    suffix = f".lora_A.{ADAPTER_NAME}.weight"
    for name, a in state.items():
        if name.endswith(suffix):
            module = name[: -len(suffix)]
            b = state[f"{module}.lora_B.{ADAPTER_NAME}.weight"]
            target = module.removeprefix(_PREFIX) + ".weight"
            base = merged[target]
            merged[target] = (base.float() + scaling(spec) * (b.float() @ a.float())).to(base.dtype)
    return merged


def wrapped_names(adapter: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An adapter under a wrapped model's own state-dict names (`...lora_A.default.weight`)."""
    return {name.replace(".lora_A.", f".lora_A.{ADAPTER_NAME}.").replace(".lora_B.", f".lora_B.{ADAPTER_NAME}."): t
            for name, t in adapter.items()}
