"""Multi-rank training (`training.devices: N`): N trainer ranks, FSDP2-sharded, driven by rank 0.

    group = RankGroup(store, rank, world, device)              # torch.distributed over a TCPStore rendezvous
    trainer = DistributedTrainer(model_dir, spec, device, group)
    rank 0 (the job driver):  trainer.micro_step(samples) / optimizer_step() / save_checkpoint(dir) / ... / close()
    ranks 1..N-1 (tasks):     serve(trainer)                   # runs the commands rank 0 sends until `stop`

Parameters, gradients and AdamW state are sharded with `fully_shard` (each decoder layer, then the root; the value
head and the frozen reference too); gloo on CPU, NCCL on CUDA. Rank 0 is the only rank that sees the sample stream:
each command (a micro-step's share, an optimizer step, a weights gather, a checkpoint) goes to the other ranks
through the rendezvous TCPStore (`cmd/<seq>/<rank>` keys, JSON), so a rank waits for the next command as long as the
driver needs (a paused job, a slow generation) without a collective timing out, and checks between waits that its
driver is still the job's driver. Collectives run only once every rank has its command, under the process group's
timeout: a rank that died makes rank 0 fail with `RanksLost` instead of hanging.

Exact token-level normalisation across ranks: rank r backpropagates (token-mean loss of its share x its token
count); FSDP reduce-scatters gradients as a SUM (divide factor 1), and `optimizer_step` all-reduces the token and
sample counts and the token-weighted metrics before dividing by the iteration's total tokens. So N ranks compute
the gradient one rank computes on the same samples (up to float summation order). A rank whose share of a
micro-batch is empty still runs forward/backward on a zero-weight dummy sample (FSDP's collectives need every rank).

Checkpoints (see workers/training/checkpoint.py): every rank writes its shards of the policy, value head and AdamW
state with torch.distributed.checkpoint under `<checkpoint>/dcp`, and rank 0 writes the gathered HF weights beside
them, so engines, exports and `from_pretrained` read a multi-rank checkpoint like a single-rank one. DCP reshards on
load: a checkpoint written by N ranks resumes on M ranks (M = 1 included, without a process group), and a single-rank
checkpoint resumes on N ranks (full state, sharded on load).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from contract.sample import Sample
from contract.spec import JobSpec
from workers.models import lora
from workers.models.weights_file import save_weights
from workers.training import checkpoint as ckpt
from workers.training.algorithms import Metrics
from workers.training.batch import PolicyOutputs
from workers.training.checkpoint import bundle, load_sharded
from workers.training.faults import RanksLost
from workers.training.mismatch import MismatchSums
from workers.training.rank_group import RankGroup, rank_timeout_s, split_shares
from workers.training.trainer import TOKEN_WEIGHTED, Trainer, load_policy

log = logging.getLogger(__name__)
__all__ = ["DistributedTrainer", "RankGroup", "RanksLost", "rank_timeout_s", "serve", "shard_module"]


def shard_module(module: nn.Module, mesh: DeviceMesh) -> None:
    """FSDP2: each transformer block (HF `_no_split_modules`) is its own unit, then the root; gradients are
    reduced as a SUM (the trainer normalises by the global token count itself)."""
    blocks = set(getattr(module, "_no_split_modules", None) or [])
    for sub in list(module.modules()):
        if sub is not module and type(sub).__name__ in blocks:
            fully_shard(sub, mesh=mesh)
    fully_shard(module, mesh=mesh)
    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.set_gradient_divide_factor(1.0)
            sub.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)


class DistributedTrainer(Trainer):
    """A `Trainer` whose modules are FSDP2-sharded over `group`; on rank 0 every public step also commands the
    other ranks (which run `serve`)."""

    def __init__(
        self, model_dir: str | Path, spec: JobSpec, device: str | torch.device, group: RankGroup, **kwargs: Any
    ) -> None:
        self.group = group
        super().__init__(model_dir, spec, device, **kwargs)

    @property
    def leads(self) -> bool:
        return self.group.rank == 0

    def _command(self, op: str, arg: Any = None) -> None:
        if self.leads:
            self.group.send(op, [arg] * self.group.world)

    # -- the step ------------------------------------------------------------------------------------------------------
    def micro_step(self, samples: list[Sample], advantages: Sequence[float] | None = None) -> Metrics:
        """Rank 0: the whole micro-batch, dealt to the ranks; other ranks: their share. Returns this rank's
        share's metrics (the iteration's metrics from `optimizer_step` cover every rank)."""
        if self.leads:
            if advantages is None:
                advantages = self.algorithm.batch_advantages(samples)
            shares = split_shares(samples, advantages, self.group.world)
            self.group.send("micro_step", [[[x.to_json() for x in share], adv] for share, adv in shares])
            samples, advantages = shares[0]
        assert advantages is not None
        return self.group._collective(lambda: self._micro_share(samples, list(advantages)))

    def _micro_share(self, samples: list[Sample], advantages: list[float]) -> Metrics:
        if samples:
            return super().micro_step(samples, advantages)
        dummy = Sample(
            job_id=0,
            prompt_id="-",
            group_id="-",
            sample_id="-",
            policy_version=0,
            prompt_ids=[self.pad_id],
            response_ids=[],
            behaviour_logprobs=[],
            finish_reason="stop",
        )
        super().micro_step([dummy], [0.0])  # no tokens: a zero gradient, but every FSDP collective runs
        self._samples -= 1
        return {"tokens": 0.0, "samples": 0.0}

    def optimizer_step(self) -> Metrics:
        self._command("optimizer_step")
        return self.group._collective(super().optimizer_step)

    # -- hooks of Trainer ----------------------------------------------------------------------------------------------
    def _shard_modules(self) -> None:
        shard_module(self.model, self.group.mesh)
        if self.reference is not None:
            shard_module(self.reference, self.group.mesh)
        if self.value_head is not None:
            shard_module(self.value_head, self.group.mesh)

    def _backward(self, loss: torch.Tensor, tokens: int, outputs: PolicyOutputs) -> None:
        if tokens > 0:
            (loss * tokens).backward()
            return
        zero = outputs.logprobs.sum() * 0.0  # every rank must run backward: FSDP reduce-scatters in it
        if outputs.values is not None:
            zero = zero + outputs.values.sum() * 0.0
        zero.backward()

    def _reduce_accumulation(self) -> None:
        present = [1.0 if name in self._weighted else 0.0 for name in TOKEN_WEIGHTED]
        local = [float(self._tokens), float(self._samples), *(self._weighted.get(n, 0.0) for n in TOKEN_WEIGHTED)]
        total = self.group.all_reduce_sum(local + present)
        self._tokens, self._samples = int(round(total[0])), int(round(total[1]))
        names = len(TOKEN_WEIGHTED)
        self._weighted = {name: total[2 + i] for i, name in enumerate(TOKEN_WEIGHTED) if total[2 + names + i] > 0}
        mine = self._mismatch  # sums over every rank's tokens; the max stays this rank's (no max-reduce here)
        tokens, kl, abs_delta, outside = self.group.all_reduce_sum(
            [mine.tokens, mine.kl, mine.abs_delta, mine.outside])
        self._mismatch = MismatchSums(tokens, kl, abs_delta, mine.abs_max, outside)

    def _grad_norm(self, clipped: torch.Tensor) -> float:
        full = getattr(clipped, "full_tensor", None)
        return float(full() if full is not None else clipped)

    # -- weights out ---------------------------------------------------------------------------------------------------
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Rank 0: the full policy gathered from every rank's shards (HF names, CPU), with LoRA only the adapter
        (peft's names); other ranks: {}."""
        self._command("gather")
        if self.lora is not None:
            adapter = self._gather(self.model, trainable_only=True)
            return lora.adapter_state(self.model, adapter) if self.leads else {}
        return self._gather(self.model)

    def _gather(self, module: nn.Module, trainable_only: bool = False) -> dict[str, torch.Tensor]:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
        state: dict[str, torch.Tensor] = self.group._collective(lambda: get_model_state_dict(module, options=options))
        return state

    def export_weights(self, directory: str | Path) -> Path:
        self._command("export", str(directory))
        return self._export(Path(directory))

    def _export(self, path: Path) -> Path:
        """Gather the policy (and value head) to rank 0, which writes the HF directory."""
        weights = self._gather(self.model)
        head = self._gather(self.value_head) if self.value_head is not None else {}
        if self.leads and self.lora is not None:
            path.mkdir(parents=True, exist_ok=True)
            self._write_lora_export(path, weights)
            self.tokenizer.save_pretrained(path)
            if head:
                save_file(head, str(path / ckpt.VALUE_HEAD))
        elif self.leads:
            path.mkdir(parents=True, exist_ok=True)
            save_weights(weights, path / "model.safetensors")
            self.model.config.save_pretrained(path)
            if getattr(self.model, "generation_config", None) is not None:
                self.model.generation_config.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
            if head:
                save_file(head, str(path / ckpt.VALUE_HEAD))
        return path

    # -- checkpoints ---------------------------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path, iteration: int | None = None) -> Path:
        """Every rank writes its shards under `<staging>/dcp`; rank 0 adds the HF weights and the trainer state,
        then publishes the directory."""
        assert self.leads, "rank 0 saves; the other ranks follow its command"
        final = Path(directory)
        staging = ckpt.staging_dir(final)
        self._command("checkpoint", str(staging))
        self._save_shards(staging)
        state = {
            "iteration": self.iteration if iteration is None else iteration,
            "version": self.version,
            "scheduler": self.scheduler.state_dict(),
            "rng": ckpt.capture_rng(),
            "algorithm": self.spec.algorithm.name,
            "world_size": self.group.world,
        }
        ckpt.save_trainer_state(staging, state)
        ckpt.publish_dir(staging, final)
        return final

    def _save_shards(self, staging: Path) -> None:
        model_sd, optim_sd = get_state_dict(bundle(self), self.optimizer)
        self.group._collective(
            lambda: dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(staging / ckpt.SHARDED_DIR))
        )
        self._export(staging)

    def load_checkpoint(self, directory: str | Path) -> int:
        self._command("load", str(directory))
        return int(self.group._collective(lambda: super(DistributedTrainer, self).load_checkpoint(directory)))

    def _load_weights(self, path: Path, state: dict[str, Any]) -> None:
        if (path / ckpt.SHARDED_DIR).is_dir():
            load_sharded(self, path)
            return
        # a single-rank checkpoint: full weights and AdamW state (keyed by parameter index), sharded on load
        options = StateDictOptions(full_state_dict=True)
        if self.lora is not None:  # the adapter under the wrapped model's names; the base weights are the model's
            adapter: dict[str, Any] = lora.wrapped_names(lora.read_adapter(path / lora.ADAPTER_DIR))
            set_model_state_dict(self.model, adapter, options=StateDictOptions(full_state_dict=True, strict=False))
        else:
            full: dict[str, Any] = load_policy(path, torch.device("cpu")).state_dict()
            set_model_state_dict(self.model, full, options=options)
        if self.value_head is not None:
            head: dict[str, Any] = load_file(str(path / ckpt.VALUE_HEAD))
            set_model_state_dict(self.value_head, head, options=options)
        names = [name for name, param in bundle(self).named_parameters() if param.requires_grad]  # the optimizer's
        saved = state["optimizer"]
        by_name: dict[str, Any] = {
            "state": {names[int(i)]: value for i, value in saved["state"].items()},
            "param_groups": [
                {**group, "params": [names[int(i)] for i in group["params"]]} for group in saved["param_groups"]
            ],
        }
        set_optimizer_state_dict(bundle(self), self.optimizer, by_name, options=options)

    # -- lifetime ------------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Rank 0: stop the other ranks; every rank: leave the process group."""
        try:
            self._command("stop")
        except RanksLost as err:
            log.warning("could not stop the trainer ranks: %s", err)
        self.group.close()


def serve(trainer: DistributedTrainer, alive: Callable[[], bool], each: Callable[[], None] | None = None) -> int:
    """Ranks >= 1: run rank 0's commands until `stop` (`each()` after every command); returns the number of
    optimizer steps taken."""
    handlers: dict[str, Callable[[Any], Any]] = {
        "micro_step": lambda share: trainer.micro_step([Sample.from_json(x) for x in share[0]], share[1]),
        "optimizer_step": lambda _: trainer.optimizer_step(),
        "gather": lambda _: trainer.state_dict_for_sync(),
        "export": lambda directory: trainer._export(Path(directory)),
        "checkpoint": lambda staging: trainer._save_shards(Path(staging)),
        "load": lambda directory: trainer.load_checkpoint(directory),
    }
    steps = 0
    while True:
        op, arg = trainer.group.receive(alive)
        if op == "stop":
            return steps
        handlers[op](arg)
        steps += op == "optimizer_step"
        if each is not None:
            each()
