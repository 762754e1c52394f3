"""The `training.tinker_session` task body: one Tinker TrainingClient's model, served in seq order (docs/tinker.md).

    session = TinkerSession(job, reporter, client, device)     # base model + a fresh LoRA adapter (peft), AdamW
    serve(...)                                                  # read keys.tinker_requests, run each in seq order,
                                                                # write keys.tinker_result(request_id)

Holds the job's training slot while it runs (the job stays `running`); ends (job `succeeded`, slot free) after
`tinker_idle_timeout_s` without requests, on ServiceClient.close(), or when the job is cancelled. Steps are recorded
as iterations (`loss`, `tokens`, `learning_rate`) and named saves as checkpoints, through the Reporter. Each stored
result carries `timing` {seq, kind, compute_s}: the seconds the session spent on it (not sent to the SDK).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import redis
import torch

from contract import keys
from contract.reporter import JobRecord, Reporter
from contract.states import TERMINAL_JOB_STATUSES, JobStatus
from workers.models import lora
from workers.runtime.telemetry import Heartbeat
from workers.training import checkpoint as ckpt
from workers.training.tinker_losses import datum_loss, target_logprobs
from workers.training.trainer import load_policy

log = logging.getLogger(__name__)
RESULT_TTL_S = 3600
STATUS_CHECK_S = 2.0


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

    # -- requests -------------------------------------------------------------------------------------------------
    def forward_backward(self, payload: dict[str, Any]) -> dict[str, Any]:
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
        for group in self.optimizer.param_groups:
            group.update(lr=payload["learning_rate"], betas=(payload["beta1"], payload["beta2"]), eps=payload["eps"],
                         weight_decay=payload["weight_decay"])
        norm = torch.nn.utils.clip_grad_norm_(self.params, payload["grad_clip_norm"] or float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        metrics = {"loss": self._loss_sum / max(1, self._tokens), "loss_sum": self._loss_sum,
                   "tokens": self._tokens, "learning_rate": payload["learning_rate"], "grad_norm": float(norm)}
        self._loss_sum, self._tokens = 0.0, 0
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


def _run(session: TinkerSession, kind: str, payload: dict[str, Any], job_id: int,
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


def _answer(client: redis.Redis, request_id: str, result: dict[str, Any]) -> None:
    client.set(keys.tinker_result(request_id), json.dumps(result), ex=RESULT_TTL_S)


def run_session(job_id: int, reporter: Reporter, client: redis.Redis, device: str, idle_timeout_s: float) -> str:
    """The task body: serve the job's requests until idle, closed or cancelled."""
    record = reporter.load_job(job_id)
    if record is None or record.status in TERMINAL_JOB_STATUSES:
        return f"tinker session {job_id} already ended"
    beat = Heartbeat(lambda: reporter.beat_driver(job_id), name=f"tinker-{job_id}").start()
    stream, last_id, next_seq = keys.tinker_requests(job_id), "0-0", 1
    pending: dict[int, tuple[str, str, dict[str, Any]]] = {}
    reason = "idle"
    try:
        try:
            session = TinkerSession(record, device)
        except Exception as err:
            reporter.set_job_status(job_id, JobStatus.failed, error=f"cannot load the model: {err}")
            raise
        reporter.set_job_status(job_id, JobStatus.running)
        reporter.record_event(job_id, "tinker", f"training session ready on {device} (LoRA rank "
                                                f"{session.lora.rank}); idle timeout {idle_timeout_s:.0f}s")
        last_request, last_check = time.monotonic(), time.monotonic()
        while True:
            entries: Any = client.xread({stream: last_id}, count=32, block=500) or []
            for _, items in entries:
                for entry_id, fields in items:
                    last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    get = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                           for k, v in fields.items()}
                    seq = int(get["seq"]) if get["seq"] else -1
                    pending[seq] = (get["request_id"], get["kind"], json.loads(get["payload"]))
                    last_request = time.monotonic()
            if -1 in pending and pending[-1][1] == "end":
                reason = "closed by the client"
                break
            if 0 in pending:  # the creation (with a load for create_training_client_from_state)
                request_id, _, payload = pending.pop(0)
                load = payload.get("load")
                if load:  # create_training_client_from_state: the SDK waits for a LoadWeightsResponse
                    session.load_state(Path(load["dir"]), bool(load["optimizer"]))
                    _answer(client, request_id, {"type": "load_weights", "path": load["path"],
                                                 "model_id": payload["model_id"]})
                else:
                    _answer(client, request_id, {"type": "create_model", "model_id": payload["model_id"]})
            while next_seq in pending:
                request_id, kind, payload = pending.pop(next_seq)
                started = time.perf_counter()
                try:
                    result = _run(session, kind, payload, job_id, reporter)
                    # what the request cost here (the API drops it; bench/tinker_api.py reads it from Redis)
                    result["timing"] = {"seq": next_seq, "kind": kind, "compute_s": time.perf_counter() - started}
                except (ValueError, FileNotFoundError) as err:
                    result = {"error": str(err), "category": "user"}
                _answer(client, request_id, result)
                next_seq += 1
                last_request = time.monotonic()
            now = time.monotonic()
            if now - last_request > idle_timeout_s:
                break
            if now - last_check > STATUS_CHECK_S:
                last_check = now
                status = reporter.job_status(job_id)
                if status is None or status in TERMINAL_JOB_STATUSES:
                    reason = f"job {status}"
                    return f"tinker session {job_id} ended: {reason}"
        reporter.record_event(job_id, "tinker", f"training session ended ({reason}) after {session.step} steps; "
                                                "its training slot is free")
        if reporter.job_status(job_id) not in TERMINAL_JOB_STATUSES:
            reporter.set_job_status(job_id, JobStatus.succeeded)
        return f"tinker session {job_id} ended: {reason}"
    finally:
        beat.stop()
        client.set(keys.job_done(job_id), "ended", ex=86400)
