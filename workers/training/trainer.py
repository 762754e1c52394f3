"""`Trainer`: the policy (+ value head, + frozen reference), AdamW and the two-phase step the runtime drives.

    trainer = Trainer(model_dir, spec, device="cpu")
    trainer.micro_step(samples)        # as streamed samples arrive: forward, loss, backward (grads accumulate)
    trainer.micro_step(more_samples)
    trainer.optimizer_step()           # once per iteration: normalise, clip, AdamW, version += 1
    trainer.export_weights(dir)        # HF directory the engines load (`update_weights(version, dir)`)

Gradient accumulation is exact token-level aggregation over the whole iteration, whatever the micro-batch split:
each micro-step backpropagates (token-mean loss x its token count) and `optimizer_step` divides the accumulated
gradients by the iteration's total token count before clipping. So the runtime may cut micro-batches wherever the
stream allows and still get the gradient of one big batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from contract.sample import Sample
from contract.spec import JobSpec
from workers.models import lora
from workers.models.shared_base import MappedBase, map_frozen_weights, share_resident_weights
from workers.models.weights_file import save_weights
from workers.training import checkpoint as ckpt
from workers.training.algorithms import LossInputs, Metrics, setup_algorithm
from workers.training.algorithms.distill import teacher_matrix, teacher_topk_tensors
from workers.training.batch import (
    PolicyOutputs,
    collate,
    length_sorted_chunks,
    policy_forward,
    sequence_length,
    token_budget_batches,
)
from workers.training.mismatch import MismatchSums, mismatch_sums, on_policy_mask, sample_mismatch, token_deltas

# metrics averaged over tokens across the micro-steps of one iteration
TOKEN_WEIGHTED = ("loss", "policy_loss", "value_loss", "entropy", "kl", "clip_frac", "ratio", "is_weight",
                  "is_masked_fraction", "reverse_kl", "topk_kl")


def load_policy(model_dir: str | Path, device: torch.device) -> Any:
    """A HF causal LM in float32 on `device` (typed Any: transformers' own annotations confuse mypy)."""
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return model.to(device)


class Trainer:
    def __init__(
        self,
        model_dir: str | Path,
        spec: JobSpec,
        device: str | torch.device = "cpu",
        *,
        use_trainer_old_logprobs: bool = False,
        warmup_steps: int = 0,
        base_cache: Path | None = None,
    ) -> None:
        """`use_trainer_old_logprobs`: ratio against the trainer's own logprobs with a truncated IS weight against
        the behaviour logprobs (see `algorithms.base`); default: ratio directly against the behaviour logprobs.
        `warmup_steps`: linear lr warmup over the first optimizer steps, then constant `training.lr`.
        `base_cache`: a directory where the frozen weights (a LoRA job's base model, a full fine-tune's reference)
        are mapped from one file per base model, shared by every training process of the host
        (`workers/models/shared_base.py`); None: private copies."""
        self.spec = spec
        self.device = torch.device(device)
        self.model_dir = Path(model_dir)
        self.algorithm = setup_algorithm(spec.algorithm)
        # decoupled PPO (ratio vs the trainer's own logprobs, IS weight vs the behaviour's): asked for, or implied by
        # a sequence-level or masked importance weight (algorithms/importance.py)
        self.use_trainer_old_logprobs = use_trainer_old_logprobs or spec.algorithm.is_level == "sequence" \
            or spec.algorithm.is_mask is not None
        torch.manual_seed(spec.seed)
        self.lora = spec.training.lora
        self.model = load_policy(model_dir, self.device)
        if self.lora is not None:  # only the adapter trains; the base model with it disabled is the KL reference
            self.model = lora.wrap(self.model, self.lora)
        self.model.train()
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.pad_id = self._pad_id()
        self.reference: Any = None
        if self.algorithm.needs_reference and self.lora is None:
            self.reference = load_policy(model_dir, self.device).eval().requires_grad_(False)
        self.mapped_base: MappedBase | None = None
        frozen = [m for m in (self.model, self.reference) if m is not None]
        if base_cache is not None:  # before compile: compiled graphs then read the mapped tensors
            self.mapped_base = map_frozen_weights(frozen, self.model_dir, base_cache)
        # what no host file holds (a GPU's weights; no cache) is shared with the process's other trainers of this base
        self.resident_shared_bytes = 0 if self.mapped_base is not None else \
            share_resident_weights(frozen, self.model_dir, self.device)
        self.value_head: nn.Linear | None = None
        if self.algorithm.uses_value_head:
            self.value_head = self._make_value_head(self.model_dir)
        if spec.training.torch_compile:  # in place: parameter names and state_dict keys stay the HF ones
            for module in (self.model, self.reference):
                if module is not None:
                    module.compile(dynamic=True)
        self._shard_modules()  # multi-rank trainers shard here (after compile, as TorchTitan orders them)
        training = spec.training
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=training.lr, weight_decay=training.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / (warmup_steps + 1))
        )
        self.iteration = 0  # optimizer steps taken
        self.traces: dict[str, SampleTrace] = {}  # the last optimizer step's samples, by sample_id
        self.traced_version = 0  # the version those samples were trained at
        self.version = 0  # weights version: the initial weights are 0, +1 per optimizer step
        self._reset_accumulation()

    # -- the step ---------------------------------------------------------------------------------------------------
    def micro_step(self, samples: list[Sample], advantages: Sequence[float] | None = None) -> Metrics:
        """Forward + backward of one micro-batch; gradients accumulate until `optimizer_step`.

        `advantages`: one per sample; None computes them with the algorithm, so `samples` must then hold complete
        groups (every sample of each group_id in it). With `training.max_tokens_per_micro_batch` the samples are cut
        further into length-sorted micro-batches within that padded-token budget (`batch.token_budget_batches`):
        same gradient, less compute on padding."""
        if advantages is None:
            advantages = self.algorithm.batch_advantages(samples)
        assert len(advantages) == len(samples), "one advantage per sample"
        budget = self.spec.training.max_tokens_per_micro_batch
        if not budget:  # 0 (off), or None where no driver chose one (workers/training/defaults.py)
            return self._forward_backward(samples, advantages)
        cuts = token_budget_batches([sequence_length(s) for s in samples], budget, self.spec.training.micro_batch_size)
        return merge_metrics(
            [self._forward_backward([samples[i] for i in cut], [advantages[i] for i in cut]) for cut in cuts]
        )

    def _forward_backward(self, samples: list[Sample], advantages: Sequence[float]) -> Metrics:
        batch = collate(samples, self.pad_id).to(self.device)
        temperature = self.spec.generation.temperature
        topk = self._teacher_topk(samples, batch.mask.shape[1])  # distill with teacher_topk: (ids, logprobs)
        with self._autocast():
            outputs = policy_forward(self.model, batch, temperature, self.value_head,
                                     at_ids=topk[0] if topk is not None else None)
            ref_logprobs = self._reference_logprobs(batch, temperature)
        inputs = LossInputs(
            logprobs=outputs.logprobs,
            behaviour_logprobs=batch.behaviour_logprobs,
            mask=batch.mask,
            scores=torch.tensor(list(advantages), dtype=torch.float32, device=self.device),
            old_logprobs=outputs.logprobs.detach() if self.use_trainer_old_logprobs else None,
            ref_logprobs=ref_logprobs,
            entropy=outputs.entropy if self.spec.algorithm.entropy_coef > 0 else outputs.entropy.detach(),
            values=outputs.values,
            old_values=outputs.values.detach() if outputs.values is not None else None,
            teacher_logprobs=self._teacher_logprobs(samples, batch.mask.shape[1]),
            teacher_topk_ids=topk[0] if topk is not None else None,
            teacher_topk_logprobs=topk[1] if topk is not None else None,
            topk_logprobs=outputs.at_ids,
        )
        loss, metrics = self.algorithm.loss(self.algorithm.prepare(inputs))
        self._observe_mismatch(samples, advantages, outputs.logprobs, batch.behaviour_logprobs, batch.mask)
        tokens = batch.num_tokens
        self._backward(loss, tokens, outputs)
        self._tokens += tokens
        self._samples += len(samples)
        for name in TOKEN_WEIGHTED:
            if name in metrics:
                self._weighted[name] = self._weighted.get(name, 0.0) + metrics[name] * tokens
        return {**metrics, "tokens": float(tokens), "samples": float(len(samples))}

    def optimizer_step(self) -> Metrics:
        """Normalise accumulated gradients to a token-level mean, clip, AdamW step; returns the iteration's metrics."""
        lr = float(self.scheduler.get_last_lr()[0])
        self._reduce_accumulation()
        grad_norm = 0.0
        if self._tokens > 0:
            for param in self.parameters():
                if param.grad is not None:
                    param.grad.div_(self._tokens)
            grad_norm = self._grad_norm(torch.nn.utils.clip_grad_norm_(self.parameters(), self.spec.training.grad_clip))
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.iteration += 1
        self.version += 1
        metrics = {name: total / max(self._tokens, 1) for name, total in self._weighted.items()}
        metrics.setdefault("kl", 0.0)  # k3 KL to the reference; 0.0 when no reference is loaded (kl_coef == 0)
        metrics.update(grad_norm=grad_norm, lr=lr, tokens=float(self._tokens), samples=float(self._samples))
        metrics.update(self._mismatch.metrics())
        self.traces, self.traced_version = self._traces, self.version - 1
        self._reset_accumulation()
        return metrics

    def train_iteration(self, samples: list[Sample], advantages: Sequence[float] | None = None) -> Metrics:
        """One iteration on a whole batch of complete groups: length-sorted micro-steps of `micro_batch_size`
        samples (cut further by the token budget when set), then one optimizer step."""
        if advantages is None:
            advantages = self.algorithm.batch_advantages(samples)
        if self.spec.training.max_tokens_per_micro_batch:
            self.micro_step(samples, advantages)  # cut by the token budget (and micro_batch_size rows)
            return self.optimizer_step()
        for chunk in length_sorted_chunks([sequence_length(s) for s in samples], self.spec.training.micro_batch_size):
            self.micro_step([samples[i] for i in chunk], [advantages[i] for i in chunk])
        return self.optimizer_step()

    # -- weights out ------------------------------------------------------------------------------------------------
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """What the engines need for the current version, detached CPU copies (safe to ship while training
        continues): the policy's weights under their HF names, or with LoRA the adapter alone (peft's names)."""
        if self.lora is not None:
            return lora.adapter_state(self.model)
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.model.state_dict().items()}

    def export_weights(self, directory: str | Path) -> Path:
        """Write the policy as a HF model directory (config + safetensors + tokenizer) for `update_weights`; with
        LoRA the merged model, and the adapter in PEFT layout under `adapter/`."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if self.lora is None:
            self.model.save_pretrained(path)
        else:
            self._write_lora_export(path, self.model.state_dict())
        self.tokenizer.save_pretrained(path)
        return path

    def _write_lora_export(self, path: Path, state: dict[str, torch.Tensor]) -> None:
        """The merged model (HF layout) and the adapter (`adapter/`, PEFT layout) from the wrapped model's state."""
        assert self.lora is not None
        merged = lora.merge_state(state, self.lora)
        save_weights(merged, path / "model.safetensors")
        base = self.model.get_base_model()
        base.config.save_pretrained(path)
        if getattr(base, "generation_config", None) is not None:
            base.generation_config.save_pretrained(path)
        adapter = lora.adapter_state(self.model, state)
        lora.write_adapter(path / lora.ADAPTER_DIR, adapter, lora.adapter_config_json(self.lora, adapter))

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path, iteration: int | None = None) -> Path:
        final = Path(directory)
        staging = ckpt.staging_dir(final)
        self.export_weights(staging)
        if self.value_head is not None:
            save_file({k: v.detach().cpu() for k, v in self.value_head.state_dict().items()}, staging / ckpt.VALUE_HEAD)
        state = {
            "iteration": self.iteration if iteration is None else iteration,
            "version": self.version,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": ckpt.capture_rng(),
            "algorithm": self.spec.algorithm.name,
        }
        ckpt.save_trainer_state(staging, state)
        ckpt.publish_dir(staging, final)
        return final

    def load_checkpoint(self, directory: str | Path) -> int:
        """Restore policy, value head, optimizer, scheduler and RNG state; returns the checkpoint's iteration."""
        path = Path(directory)
        state = ckpt.load_trainer_state(path)
        if state["algorithm"] != self.spec.algorithm.name:
            raise ValueError(
                f"checkpoint {path} was written by {state['algorithm']!r}, not {self.spec.algorithm.name!r}"
            )
        self._load_weights(path, state)
        self.scheduler.load_state_dict(state["scheduler"])
        self._apply_spec_hyperparameters()
        ckpt.restore_rng(state["rng"])
        self.iteration, self.version = int(state["iteration"]), int(state["version"])
        self._reset_accumulation()
        return self.iteration

    def _apply_spec_hyperparameters(self) -> None:
        """The spec's learning rate and weight decay over a loaded checkpoint's (a fork may change them,
        backend/services/forks.py): the warm-up factor reached so far is kept. A plain resume has the same values,
        so this changes nothing there."""
        training = self.spec.training
        self.scheduler.base_lrs = [training.lr for _ in self.optimizer.param_groups]
        factors = [float(schedule(self.scheduler.last_epoch)) for schedule in self.scheduler.lr_lambdas]
        for group, factor in zip(self.optimizer.param_groups, factors, strict=True):
            group["initial_lr"], group["lr"] = training.lr, training.lr * factor
            group["weight_decay"] = training.weight_decay
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]  # what get_last_lr reports

    def close(self) -> None:
        """Release what the trainer holds beyond memory (multi-rank: stops the other ranks)."""

    # -- hooks (workers/training/distributed.py overrides them for multi-rank training) -------------------------------
    def _shard_modules(self) -> None:
        """Before the optimizer is built: nothing on one rank."""

    def _backward(self, loss: torch.Tensor, tokens: int, outputs: PolicyOutputs) -> None:
        if tokens > 0:
            (loss * tokens).backward()  # sum over tokens; `optimizer_step` divides by the iteration's total

    def _reduce_accumulation(self) -> None:
        """Before normalising: the iteration's token/sample counts and weighted metrics are this process's."""

    def _grad_norm(self, clipped: torch.Tensor) -> float:
        return float(clipped)

    def _load_weights(self, path: Path, state: dict[str, Any]) -> None:
        """Policy, value head and optimizer state of a checkpoint (a multi-rank one: from its DCP shards)."""
        if (path / ckpt.SHARDED_DIR).is_dir():
            ckpt.load_sharded(self, path)
            return
        if self.lora is not None:
            lora.load_adapter(self.model, lora.read_adapter(path / lora.ADAPTER_DIR))
        else:
            self.model.load_state_dict(load_policy(path, torch.device("cpu")).state_dict())
        if self.value_head is not None:
            self.value_head.load_state_dict(load_file(str(path / ckpt.VALUE_HEAD)))
        self.optimizer.load_state_dict(state["optimizer"])

    # -- internals --------------------------------------------------------------------------------------------------
    def parameters(self) -> list[nn.Parameter]:
        """What the optimizer holds: every weight, or with LoRA only the adapter (plus the value head)."""
        params = [param for param in self.model.parameters() if param.requires_grad]
        if self.value_head is not None:
            params += list(self.value_head.parameters())
        return params

    def _teacher_logprobs(self, samples: list[Sample], columns: int) -> torch.Tensor | None:
        """The samples' teacher logprobs (B, T) on this device (distill), None when they carry none."""
        matrix = teacher_matrix(samples, columns)
        return matrix.to(self.device) if matrix is not None else None

    def _teacher_topk(self, samples: list[Sample], columns: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The teacher's top-k ids and logprobs (B, T, K) on this device (distill with teacher_topk), else None."""
        if not self.spec.algorithm.teacher_topk:
            return None
        tensors = teacher_topk_tensors(samples, columns)
        return (tensors[0].to(self.device), tensors[1].to(self.device)) if tensors is not None else None

    def _reference_logprobs(self, batch: Any, temperature: float) -> torch.Tensor | None:
        """Logprobs under the frozen reference (kl_coef > 0): its own copy, or with LoRA the base model itself,
        the adapter disabled for this forward (no second copy of the weights)."""
        if not self.algorithm.needs_reference:
            return None
        with torch.no_grad():
            if self.lora is None:
                return policy_forward(self.reference, batch, temperature).logprobs
            with self.model.disable_adapter():
                return policy_forward(self.model, batch, temperature).logprobs

    def _make_value_head(self, model_dir: Path) -> nn.Linear:
        head = nn.Linear(self.model.config.hidden_size, 1).to(self.device)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        if (model_dir / ckpt.VALUE_HEAD).exists():
            head.load_state_dict(load_file(str(model_dir / ckpt.VALUE_HEAD)))
        return head

    def _pad_id(self) -> int:
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0

    def _autocast(self) -> torch.autocast:
        """bf16 autocast of the forward passes when `training.bf16_autocast` (weights, grads and AdamW stay fp32)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bool(self.spec.training.bf16_autocast))

    def _reset_accumulation(self) -> None:
        self._tokens = 0
        self._samples = 0
        self._weighted: dict[str, float] = {}
        self._mismatch = MismatchSums()
        self._traces: dict[str, SampleTrace] = {}

    def _observe_mismatch(self, samples: list[Sample], advantages: Sequence[float], logprobs: torch.Tensor,
                          behaviour: torch.Tensor, mask: torch.Tensor) -> None:
        """Add this micro-batch's on-policy tokens to the iteration's mismatch sums and keep each sample's trainer
        logprobs (the trajectory explorer's `current`)."""
        on_policy = on_policy_mask(samples, self.version, mask.cpu())  # (B, T)
        current, behaviour = logprobs.detach().float().cpu(), behaviour.float().cpu()
        self._mismatch = self._mismatch.add(mismatch_sums(current, behaviour, on_policy,
                                                          self.spec.algorithm.mismatch_ratio))
        per_sample = sample_mismatch(token_deltas(current, behaviour), on_policy)
        for row, (sample, advantage) in enumerate(zip(samples, advantages, strict=True)):
            self._traces[sample.sample_id] = SampleTrace(current[row, : len(sample.response_ids)].tolist(),
                                                         float(advantage), per_sample[row])

    def token_trace(self, sample: Sample) -> dict[str, Any] | None:
        """The trajectory explorer's per-token record of a sample the last optimizer step trained (None if it did
        not): token pieces, behaviour and trainer logprobs (4 decimals), version marks, advantage, loss mask."""
        trace = self.traces.get(sample.sample_id)
        if trace is None:
            return None
        return {"pieces": [self.tokenizer.decode([t]) for t in sample.response_ids],
                "behaviour": [round(v, 4) for v in sample.behaviour_logprobs],
                "current": [round(v, 4) for v in trace.current],
                "versions": sample.version_marks or [[0, sample.policy_version]],
                "trained_version": self.traced_version, "advantage": round(trace.advantage, 4),
                "loss_mask": sample.loss_mask, "mismatch": trace.mismatch}


@dataclass
class SampleTrace:
    current: list[float]  # the trainer's logprob of each response token, at the version before the step
    advantage: float
    mismatch: float | None  # mean k3 over the sample's on-policy tokens (workers/training/mismatch.py)


def merge_metrics(parts: list[Metrics]) -> Metrics:
    """One micro-step's metrics from its token-budget parts: counts add up, everything else is token-weighted."""
    if len(parts) == 1:
        return parts[0]
    tokens = sum(part["tokens"] for part in parts)
    merged: Metrics = {}
    for name in parts[0]:
        if name in ("tokens", "samples"):
            merged[name] = sum(part[name] for part in parts)
        elif tokens > 0:
            merged[name] = sum(part.get(name, 0.0) * part["tokens"] for part in parts) / tokens
        else:
            merged[name] = parts[0][name]
    return merged
