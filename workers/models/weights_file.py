"""Writing a state dict as `model.safetensors`: the one place that knows safetensors refuses tensors that share
storage (tied input/output embeddings: Gemma, Qwen2-0.5B, Llama-3.2-1B tie them) and wants contiguous CPU tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


def storable(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous, detached CPU tensors; a tensor whose storage an earlier one already holds is copied."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        t = tensor.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        out[name] = t.clone() if ptr in seen else t
        seen.add(ptr)
    return out


def save_weights(state_dict: dict[str, torch.Tensor], path: str | Path) -> Path:
    """`state_dict` as a safetensors file at `path` (pt format metadata, as `save_pretrained` writes)."""
    save_file(storable(state_dict), str(path), metadata={"format": "pt"})
    return Path(path)
