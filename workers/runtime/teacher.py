"""`TeacherScorer`: on-policy distillation's teacher (algorithm.teacher) on the process that generates the samples.

The teacher is loaded once per (directory, device) and kept for the life of the process (as the model graders are,
workers/rewards/grader_models.py), then scores each finished batch of samples: one no-grad forward pass over prompt +
response per micro-batch, the log-probabilities of the sampled response tokens under softmax(logits / temperature)
(the generation temperature, as the behaviour logprobs are taken), written to `Sample.teacher_logprobs`. The
control plane checked at submit that teacher and student share a tokenizer, so the student's token ids are the
teacher's. Positions the loss does not train (an episode's environment tokens) are scored 0.0.

With `topk` = k (algorithm.teacher_topk) the same pass also writes `Sample.teacher_topk`: at each response position
the teacher's k most likely ids and their logprobs (same temperature), [[ids], [logprobs]] ([[], []] where the loss
does not train): k ids and logprobs per position cross to the trainer, never the vocabulary's distribution.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from contract.sample import Sample
from workers.training.batch import collate, policy_forward

BATCH_ROWS = 16  # samples per teacher forward pass
_LOADED: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def load_teacher(directory: Path, device: str) -> Any:
    key = (str(directory), device)
    with _LOCK:
        if key not in _LOADED:
            dtype = "auto" if device.startswith("cuda") else torch.float32
            model: Any = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype)
            _LOADED[key] = model.to(device).eval()
        return _LOADED[key]


class TeacherScorer:
    """Fills `teacher_logprobs` of samples with the teacher at `directory`."""

    def __init__(self, directory: Path, temperature: float, device: str = "cpu", pad_id: int = 0, topk: int = 0):
        self.directory, self.temperature, self.device, self.pad_id = directory, temperature, device, pad_id
        self.topk = topk
        self.model: Any = None

    @torch.no_grad()
    def score(self, samples: list[Sample]) -> None:
        """Set each sample's teacher_logprobs (and, with `topk`, teacher_topk) in place (samples with an empty
        response get [])."""
        if self.model is None:
            self.model = load_teacher(self.directory, self.device)
        scored = [s for s in samples if s.response_ids and s.prompt_ids]
        for sample in samples:
            if not sample.response_ids:
                sample.teacher_logprobs = []
                if self.topk > 0:
                    sample.teacher_topk = []
        for start in range(0, len(scored), BATCH_ROWS):
            rows = scored[start:start + BATCH_ROWS]
            batch = collate(rows, self.pad_id).to(self.device)
            outputs = policy_forward(self.model, batch, self.temperature, topk=self.topk)
            logprobs = outputs.logprobs.float().cpu()
            for row, sample in enumerate(rows):
                sample.teacher_logprobs = [round(v, 6) for v in logprobs[row, : len(sample.response_ids)].tolist()]
            if outputs.topk_ids is not None and outputs.topk_logprobs is not None:
                self._write_topk(rows, outputs.topk_ids.cpu(), outputs.topk_logprobs.float().cpu(), batch.mask.cpu())

    @staticmethod
    def _write_topk(rows: list[Sample], ids: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor) -> None:
        """teacher_topk of each row from the (B, T, k) top-k of one pass; [[], []] where the loss does not train."""
        for row, sample in enumerate(rows):
            n = len(sample.response_ids)
            row_ids, row_values, trained = ids[row, :n].tolist(), logprobs[row, :n].tolist(), mask[row, :n].tolist()
            sample.teacher_topk = [[i, [round(v, 5) for v in values]] if keep else [[], []]
                                   for i, values, keep in zip(row_ids, row_values, trained, strict=True)]
