"""A Tinker TrainingClient's model (docs/tinker.md): the base model + a LoRA adapter (peft) and its AdamW, and what
each SDK call does to it. The loop that serves a session's calls, parks it when idle and restores it is
workers/runtime/tinker_serve.py.

    session = TinkerSession(record, device)   # base model + a fresh LoRA adapter (peft), AdamW
    run_request(session, kind, payload, ...)  # forward_backward, optim_step, save/load state, save for a sampler
    session.snapshot() / session.restore(s)   # the park state (workers/runtime/tinker_park.py)

Steps are recorded as iterations (`loss`, `tokens`, `learning_rate`) and named saves as checkpoints, through the
Reporter; recording is idempotent per step, so a step run again after a restore is recorded once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis
import torch

from contract import keys
from contract.reporter import JobRecord, Reporter
from workers.models import lora
from workers.training import checkpoint as ckpt
from workers.training.tinker_losses import datum_loss, target_logprobs
from workers.training.trainer import load_policy

RESULT_TTL_S = 3600


class TinkerSession:
    def __init__(self, record: JobRecord, device: str) -> None:
        assert record.model_path is not None and record.spec.training.lora is not None
        self.record, self.spec, self.lora = record, record.spec, record.spec.training.lora
        torch.manual_seed(record.spec.seed)
        self.model = lora.wrap(load_policy(record.model_path, torch.device(device)), self.lora)
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
        self.step = 0
        self._loss_sum, self._tokens = 0.0, 0
        self._seconds = 0.0  # compute time of the calls since the last optim_step (usage: the step's `step_seconds`)

    # -- requests -------------------------------------------------------------------------------------------------
    def forward_backward(self, payload: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        try:
            return self._forward_backward(payload)
        finally:
            self._seconds += time.monotonic() - started

    def _forward_backward(self, payload: dict[str, Any]) -> dict[str, Any]:
        data, forward_only = payload["data"], bool(payload["forward_only"])
        with torch.set_grad_enabled(not forward_only):
            logprobs = target_logprobs(self.model, data)
            losses = [datum_loss(payload["loss_fn"], lp, d["inputs"], payload["config"])
                      for lp, d in zip(logprobs, data, strict=True)]
            total = torch.stack(losses).sum()
            if not forward_only:
                total.backward()
        tokens = sum(len(d["tokens"]) for d in data)
        if not forward_only:
            self._loss_sum, self._tokens = self._loss_sum + float(total), self._tokens + tokens
        return {"proto": "forward_backward", "outputs": [{"logprobs": lp.detach().cpu().tolist()} for lp in logprobs],
                "metrics": {"loss:sum": float(total)}}

    def optim_step(self, payload: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        for group in self.optimizer.param_groups:
            group.update(lr=payload["learning_rate"], betas=(payload["beta1"], payload["beta2"]), eps=payload["eps"],
                         weight_decay=payload["weight_decay"])
        norm = torch.nn.utils.clip_grad_norm_(self.params, payload["grad_clip_norm"] or float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        metrics = {"loss": self._loss_sum / max(1, self._tokens), "loss_sum": self._loss_sum,
                   "tokens": self._tokens, "learning_rate": payload["learning_rate"], "grad_norm": float(norm),
                   "step_seconds": self._seconds + time.monotonic() - started}
        self._loss_sum, self._tokens, self._seconds = 0.0, 0, 0.0
        return {"metrics": metrics}

    def save_state(self, directory: Path) -> None:
        staging = ckpt.staging_dir(directory)
        adapter = lora.adapter_state(self.model)
        lora.write_adapter(staging / lora.ADAPTER_DIR, adapter, lora.adapter_config_json(self.lora, adapter))
        ckpt.save_trainer_state(staging, {"step": self.step, "optimizer": self.optimizer.state_dict()})
        ckpt.publish_dir(staging, directory)

    def save_sampler(self, directory: Path) -> None:
        staging = ckpt.staging_dir(directory)
        adapter = lora.adapter_state(self.model)
        lora.write_adapter(staging, adapter, lora.adapter_config_json(self.lora, adapter))
        ckpt.publish_dir(staging, directory)

    def load_state(self, directory: Path, optimizer: bool) -> None:
        lora.load_adapter(self.model, lora.read_adapter(directory / lora.ADAPTER_DIR))
        if optimizer:
            state = ckpt.load_trainer_state(directory)
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])
        self.optimizer.zero_grad(set_to_none=True)

    # -- parking --------------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What parking keeps: the adapter, the gradients accumulated since the last optim_step, the optimizer."""
        named = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]
        return {"step": self.step, "loss_sum": self._loss_sum, "tokens": self._tokens,
                "params": {name: p.detach().to("cpu", copy=True) for name, p in named},
                "grads": {name: p.grad.detach().to("cpu", copy=True) for name, p in named if p.grad is not None},
                "optimizer": self.optimizer.state_dict()}

    def restore(self, state: dict[str, Any]) -> None:
        named = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        if set(named) != set(state["params"]):
            raise ValueError("the park state's adapter does not match this session's model (another LoRA layout)")
        with torch.no_grad():
            for name, p in named.items():
                p.copy_(state["params"][name])
                grad = state["grads"].get(name)
                p.grad = grad.to(p.device) if grad is not None else None
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self._loss_sum, self._tokens = int(state["step"]), float(state["loss_sum"]), int(state["tokens"])


def run_request(session: TinkerSession, kind: str, payload: dict[str, Any], job_id: int,
                reporter: Reporter) -> dict[str, Any]:
    if kind == "forward_backward":
        return session.forward_backward(payload)
    if kind == "optim_step":
        result = session.optim_step(payload)
        reporter.record_iteration(job_id, session.step, result["metrics"], [])
        return result
    if kind == "save_state":
        session.save_state(Path(payload["dir"]))
        reporter.record_checkpoint(job_id, session.step, payload["dir"])
        return {"type": "save_weights", "path": payload["path"]}
    if kind == "save_sampler":
        session.save_sampler(Path(payload["dir"]))
        if payload.get("path"):
            reporter.record_checkpoint(job_id, session.step, payload["dir"])
        return {"type": "save_weights_for_sampler", "path": payload.get("path"),
                "sampling_session_id": payload.get("sampling_session_id")}
    if kind == "load_state":
        session.load_state(Path(payload["dir"]), bool(payload["optimizer"]))
        return {"type": "load_weights", "path": payload["path"]}
    raise ValueError(f"unknown request kind {kind!r}")


def answer(client: redis.Redis, request_id: str, result: dict[str, Any]) -> None:
    client.set(keys.tinker_result(request_id), json.dumps(result), ex=RESULT_TTL_S)
