"""Fixtures: a tiny model whose logits are sharpened (greedy decisions far from ties) and whose EOS never wins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from contract.spec import LoraSpec
from workers.models import build_tiny_model, lora
from workers.training.trainer import load_policy

LORA = LoraSpec(rank=8, alpha=16.0)
VLLM_ONLY = [  # the pytestmark of the tests that need vLLM
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (run scripts/install_vllm.sh to enable the vllm engine tests)"),
]


def random_adapter(model_dir: Path, seed: int, spec: LoraSpec = LORA) -> dict[str, torch.Tensor]:
    """A trained-looking adapter: B no longer zero, so base + adapter differs from the base model."""
    torch.manual_seed(seed)
    wrapped = lora.wrap(load_policy(model_dir, torch.device("cpu")), spec)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.2)
    return lora.adapter_state(wrapped)

torch.set_num_threads(1)

def sharpen(model_dir: Path, *, scale: float = 8.0) -> Path:
    """Scale the output layer (peaked distributions) and zero the EOS row (outputs run to max_tokens)."""
    path = model_dir / "model.safetensors"
    state = load_file(path)
    head = state["lm_head.weight"] * scale
    head[2] = 0.0  # <eos>
    state["lm_head.weight"] = head
    save_file(state, str(path), metadata={"format": "pt"})
    return model_dir


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sharpen(build_tiny_model("tiny-1m", tmp_path_factory.mktemp("tiny") / "m", seed=1))


@pytest.fixture(scope="session")
def other_weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same architecture, different weights (a 'new policy version')."""
    return sharpen(build_tiny_model("tiny-1m", tmp_path_factory.mktemp("tiny2") / "m", seed=2))
