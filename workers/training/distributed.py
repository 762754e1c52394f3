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

import json
import logging
import os
import re
import uuid
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from contract.sample import Sample
from contract.spec import JobSpec
from workers.training import checkpoint as ckpt
from workers.training.algorithms import Metrics
from workers.training.batch import PolicyOutputs
from workers.training.faults import RanksLost
from workers.training.trainer import TOKEN_WEIGHTED, Trainer, load_policy

log = logging.getLogger(__name__)
__all__ = ["DistributedTrainer", "RankGroup", "RanksLost", "load_sharded", "serve", "shard_module"]
LOST_RANK = re.compile(r"gloo|nccl|connection|timed out|timeout|peer", re.IGNORECASE)
WAIT_POLL_S = 30.0  # a rank waiting for its next command re-checks that its driver still runs the job this often
# (a rank 0 that died is noticed at once: its store's connection drops)


def rank_timeout_s() -> float:
    """Seconds a collective (or the rendezvous) may wait for the other ranks: STREAMRL_RANK_TIMEOUT_S, default 300."""
    return float(os.environ.get("STREAMRL_RANK_TIMEOUT_S", "300"))


class RankGroup:
    """The process group of one job's trainer ranks and the command channel from rank 0 to the others."""

    def __init__(
        self, store: dist.Store, rank: int, world: int, device: torch.device, timeout_s: float | None = None
    ) -> None:
        self.store, self.rank, self.world = store, rank, world
        self.timeout = timedelta(seconds=timeout_s if timeout_s is not None else rank_timeout_s())
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device.index or 0)  # one GPU per rank: a worker sees its own (CUDA_VISIBLE_DEVICES)
        if dist.is_initialized():  # a worker process runs one trainer at a time: an earlier job's group is stale
            dist.destroy_process_group()
        try:
            dist.init_process_group(
                backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world, timeout=self.timeout
            )
        except Exception as err:  # a rank never joined (no free training slot, or it died starting up)
            raise RanksLost(
                f"trainer rank {rank}: the {world} ranks did not all join within "
                f"{self.timeout.total_seconds():.0f}s ({type(err).__name__}: {err})"
            ) from err
        # a name of this group's own: DeviceMesh compares by shape and names, and a process that served an earlier
        # (failed) group would otherwise get that group's cached mesh back, with its old coordinate
        if rank == 0:
            store.set("mesh", f"ranks-{uuid.uuid4().hex[:12]}")
        name = store.get("mesh").decode()
        self.mesh: DeviceMesh = init_device_mesh(device.type, (world,), mesh_dim_names=(name,))
        self.seq = 0

    # -- commands (rank 0 -> the others) ------------------------------------------------------------------------------
    def send(self, op: str, shares: Sequence[Any]) -> None:
        """Rank 0: command `op` with argument `shares[r]` for every rank r >= 1."""
        assert self.rank == 0 and len(shares) == self.world
        self.seq += 1
        try:
            for rank in range(1, self.world):
                self.store.set(f"cmd/{self.seq}/{rank}", json.dumps({"op": op, "arg": shares[rank]}))
        except Exception as err:
            raise RanksLost(f"could not reach the trainer ranks' store: {err}") from err

    def receive(self, alive: Callable[[], bool]) -> tuple[str, Any]:
        """Ranks >= 1: the next command; waits as long as `alive()` (this rank's driver still runs the job)."""
        self.seq += 1
        key = f"cmd/{self.seq}/{self.rank}"
        while True:
            try:
                self.store.wait([key], timedelta(seconds=WAIT_POLL_S))
                break
            except Exception as err:
                if "timeout" not in str(err).lower():  # the store (rank 0's process) is gone
                    raise RanksLost(f"rank {self.rank}: lost rank 0 ({err})") from err
                if not alive():
                    raise RanksLost(f"rank {self.rank}: its driver no longer runs the job") from err
        payload = self.store.get(key)
        self.store.delete_key(key)
        command = json.loads(payload)  # JSON, not pickle: a stray peer on the port cannot run code here
        return str(command["op"]), command["arg"]

    # -- collectives ---------------------------------------------------------------------------------------------------
    def all_reduce_sum(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64)
        if dist.get_backend() == "nccl":
            tensor = tensor.cuda()
        self._collective(lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM))
        return [float(v) for v in tensor.cpu()]

    def _collective(self, call: Callable[[], Any]) -> Any:
        """Run `call` (which takes part in collectives); a failure of the transport between ranks is `RanksLost`,
        any other error (a bug, out of memory) propagates as itself."""
        try:
            return call()
        except RanksLost:
            raise
        except RuntimeError as err:  # gloo raises plain RuntimeErrors ("Connection closed by peer", "Timed out")
            if isinstance(err, dist.DistError) or LOST_RANK.search(str(err)):
                raise RanksLost(f"trainer rank {self.rank}: a collective failed ({err})") from err
            raise

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def split_shares(
    samples: Sequence[Sample], advantages: Sequence[float], world: int
) -> list[tuple[list[Sample], list[float]]]:
    """Deal a micro-batch to `world` ranks, longest first to the rank with the fewest tokens (balanced work)."""
    shares: list[tuple[list[Sample], list[float]]] = [([], []) for _ in range(world)]
    load = [0] * world
    order = sorted(range(len(samples)), key=lambda i: -(len(samples[i].prompt_ids) + len(samples[i].response_ids)))
    for index in order:
        rank = min(range(world), key=lambda r: (load[r], r))
        shares[rank][0].append(samples[index])
        shares[rank][1].append(advantages[index])
        load[rank] += len(samples[index].prompt_ids) + len(samples[index].response_ids)
    return shares


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


def bundle(trainer: Trainer) -> nn.Module:
    """The trained modules under one root, the key space of sharded checkpoints (`policy.*`, `value_head.*`)."""
    modules = nn.ModuleDict({"policy": trainer.model})
    if trainer.value_head is not None:
        modules["value_head"] = trainer.value_head
    return modules


def load_sharded(trainer: Trainer, path: Path) -> None:
    """Policy, value head and AdamW state from `<path>/dcp`, resharded to this trainer's ranks (or to one process
    without a process group)."""
    model_sd, optim_sd = get_state_dict(bundle(trainer), trainer.optimizer)
    with warnings.catch_warnings():  # one process without a process group (resume on 1 rank): what DCP expects
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / ckpt.SHARDED_DIR))
    set_state_dict(bundle(trainer), trainer.optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)


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

    def _grad_norm(self, clipped: torch.Tensor) -> float:
        full = getattr(clipped, "full_tensor", None)
        return float(full() if full is not None else clipped)

    # -- weights out ---------------------------------------------------------------------------------------------------
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Rank 0: the full policy gathered from every rank's shards (HF names, CPU); other ranks: {}."""
        self._command("gather")
        return self._gather(self.model)

    def _gather(self, module: nn.Module) -> dict[str, torch.Tensor]:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state: dict[str, torch.Tensor] = self.group._collective(lambda: get_model_state_dict(module, options=options))
        return state

    def export_weights(self, directory: str | Path) -> Path:
        self._command("export", str(directory))
        return self._export(Path(directory))

    def _export(self, path: Path) -> Path:
        """Gather the policy (and value head) to rank 0, which writes the HF directory."""
        weights = self._gather(self.model)
        head = self._gather(self.value_head) if self.value_head is not None else {}
        if self.leads:
            path.mkdir(parents=True, exist_ok=True)
            save_file(
                {k: v.contiguous() for k, v in weights.items()},
                str(path / "model.safetensors"),
                metadata={"format": "pt"},
            )
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
        full: dict[str, Any] = load_policy(path, torch.device("cpu")).state_dict()
        set_model_state_dict(self.model, full, options=options)
        if self.value_head is not None:
            head: dict[str, Any] = load_file(str(path / ckpt.VALUE_HEAD))
            set_model_state_dict(self.value_head, head, options=options)
        names = [name for name, _ in bundle(self).named_parameters()]
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
