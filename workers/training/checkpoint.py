"""Checkpoint files: a Hugging Face model directory plus the trainer's resumable state.

Layout of a checkpoint directory (written to `<dir>.tmp` then renamed, so a crash never leaves half a checkpoint):
    config.json, model.safetensors, generation_config.json   policy weights (`AutoModelForCausalLM.from_pretrained`)
    tokenizer.json, tokenizer_config.json, ...                the tokenizer
    value_head.safetensors                                    PPO only
    trainer_state.pt                                          optimizer, scheduler, RNG states, iteration, version
    dcp/                                                      multi-rank only: the ranks' shards of policy, value
                                                              head and AdamW state (torch.distributed.checkpoint);
                                                              trainer_state.pt then holds no optimizer state

`bundle` / `load_sharded` read the `dcp/` shards into anything shaped like a trainer (`Trainable`): the single-rank
`Trainer` (resuming a multi-rank checkpoint on one device) and `DistributedTrainer` (resharding on load) both use them.
"""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

TRAINER_STATE = "trainer_state.pt"
VALUE_HEAD = "value_head.safetensors"
SHARDED_DIR = "dcp"


class Trainable(Protocol):
    """What sharded checkpoints are made of: the policy, the optional value head and their optimizer."""

    @property
    def model(self) -> Any: ...  # the HF policy (an nn.Module; typed Any like `trainer.load_policy`)

    @property
    def value_head(self) -> nn.Linear | None: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...


def bundle(trainer: Trainable) -> nn.Module:
    """The trained modules under one root, the key space of sharded checkpoints (`policy.*`, `value_head.*`)."""
    modules = nn.ModuleDict({"policy": trainer.model})
    if trainer.value_head is not None:
        modules["value_head"] = trainer.value_head
    return modules


def load_sharded(trainer: Trainable, path: Path) -> None:
    """Policy, value head and AdamW state from `<path>/dcp`, resharded to this trainer's ranks (or to one process
    without a process group)."""
    import torch.distributed.checkpoint as dcp  # only multi-rank checkpoints load torch.distributed's DCP
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(bundle(trainer), trainer.optimizer)
    with warnings.catch_warnings():  # one process without a process group (resume on 1 rank): what DCP expects
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / SHARDED_DIR))
    set_state_dict(bundle(trainer), trainer.optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)


def capture_rng() -> dict[str, Any]:
    """RNG states as tensors/lists so `torch.load(weights_only=True)` can read them back."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_kind, torch.from_numpy(np.asarray(np_keys, dtype=np.int64)), np_pos, np_has_gauss, np_gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_kind, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def staging_dir(final: Path) -> Path:
    """A fresh `<final>.tmp` directory to write into before `publish_dir`."""
    staging = final.with_name(final.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def publish_dir(staging: Path, final: Path) -> None:
    """Replace `final` by `staging` (rename; the old checkpoint is removed first if present)."""
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)


def save_trainer_state(directory: Path, state: dict[str, Any]) -> None:
    torch.save(state, directory / TRAINER_STATE)


def load_trainer_state(directory: Path) -> dict[str, Any]:
    path = directory / TRAINER_STATE
    if not path.exists():
        raise FileNotFoundError(f"{directory} is not a trainer checkpoint (no {TRAINER_STATE})")
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def prune_checkpoints(root: Path, keep: int, prefix: str = "iter_") -> None:
    """Keep the `keep` newest `<root>/<prefix>NNNNNN` checkpoints, delete older ones."""
    found = sorted(p for p in root.glob(f"{prefix}*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in found[:-keep] if keep > 0 else found:
        shutil.rmtree(old)


def latest_checkpoint(root: Path, prefix: str = "iter_", at_most: int | None = None) -> Path | None:
    """The newest complete checkpoint under `root` (staging directories end in `.tmp` and are never complete),
    of iteration `at_most` or older when given."""
    if not root.exists():
        return None
    found = sorted(p for p in root.glob(f"{prefix}*") if p.is_dir() and not p.name.endswith(".tmp"))
    if at_most is not None:
        found = [p for p in found if checkpoint_iteration(p, prefix) <= at_most]
    return found[-1] if found else None


def checkpoint_iteration(path: Path, prefix: str = "iter_") -> int:
    """The iteration in a checkpoint directory's name (`iter_000010` -> 10)."""
    return int(path.name.removeprefix(prefix))
