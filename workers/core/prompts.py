"""Which prompts an iteration uses, and the requests built from them (ids, seeds, grouping).

Iteration j (0-based) takes `prompts_per_iteration` rows from a per-epoch shuffle of the dataset, seeded by the job
seed, so every mode and train-local see the same prompts. Each prompt becomes `group_size` requests with ids
`<j>:<slot>:<k>` (group id `<j>:<slot>`) and a per-request sampling seed derived from the job seed and the id, so a
sample is the same whichever instance or loop generates it. Evaluation groups are `eval<j>:<slot>`. A restarted
driver (epoch e > 0) tags its groups `<j>:<slot>~<e>`: samples an earlier driver left in flight never pass as its own.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from contract.sample import PromptRequest
from contract.spec import JobSpec

EVAL_PREFIX = "eval"
Encode = Callable[[str], list[int]]
Messages = list[dict[str, str]]


def request_seed(job_seed: int, sample_id: str) -> int:
    return (job_seed * 1_000_003 + zlib.crc32(sample_id.encode())) & 0x7FFFFFFF


def iteration_of(group_or_sample_id: str) -> int:
    """The training iteration of a request/sample id; evaluation ids raise ValueError (they are never trained)."""
    head = group_or_sample_id.split(":", 1)[0]
    if head.startswith(EVAL_PREFIX):
        raise ValueError(f"{group_or_sample_id!r} is an evaluation id")
    return int(head)


def is_eval(group_or_sample_id: str) -> bool:
    return group_or_sample_id.startswith(EVAL_PREFIX)


def eval_iteration_of(group_or_sample_id: str) -> int:
    return int(group_or_sample_id.split(":", 1)[0].removeprefix(EVAL_PREFIX))


def epoch_of(group_or_sample_id: str) -> int:
    parts = group_or_sample_id.split(":")
    slot = parts[1] if len(parts) > 1 else ""
    return int(slot.split("~", 1)[1]) if "~" in slot else 0


class PromptSchedule:
    """Rows of the training set per iteration: epochs over a seeded shuffle (epoch e uses seed `<seed>:epoch:<e>`)."""

    def __init__(self, rows: Sequence[dict[str, Any]], spec: JobSpec):
        assert rows, "a schedule needs at least one row"
        self.rows, self.seed, self.per_iteration = rows, spec.seed, spec.training.prompts_per_iteration
        self._orders: dict[int, list[int]] = {}

    def rows_for(self, iteration: int) -> list[dict[str, Any]]:
        out = []
        for slot in range(self.per_iteration):
            epoch, offset = divmod(iteration * self.per_iteration + slot, len(self.rows))
            out.append(self.rows[self._order(epoch)[offset]])
        return out

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.rows)))
            random.Random(f"{self.seed}:epoch:{epoch}").shuffle(order)
            self._orders = {epoch: order}  # epochs are visited in order: keep one
        return self._orders[epoch]


class TokenCache:
    """Prompt text -> token ids, encoded once per job."""

    def __init__(self, encode: Encode):
        self.encode, self._cache = encode, dict[str, list[int]]()

    def __call__(self, text: str) -> list[int]:
        if text not in self._cache:
            self._cache[text] = list(self.encode(text))
        return self._cache[text]


def render_prompt(prompt: str | Messages, encode: Encode) -> tuple[str, list[int]]:
    """(prompt text, prompt ids): text as is, chat messages through the encoder's chat template
    (workers/core/chat.py `ChatEncoder.chat`)."""
    if isinstance(prompt, str):
        return prompt, list(encode(prompt))
    chat = getattr(encode, "chat", None)
    if chat is None:
        raise ValueError("a chat prompt (list of messages) needs the model's chat template: encode with a ChatEncoder")
    text, ids = chat(prompt)
    return text, ids


def make_requests(rows: Sequence[dict[str, Any]], iteration: int, *, group_size: int, encode: Encode, job_seed: int,
                  min_version: int, predicted: Sequence[float] | None = None, group_prefix: str = "",
                  epoch: int = 0) -> list[list[PromptRequest]]:
    """One list of `group_size` requests per row (slot order). `group_prefix` = EVAL_PREFIX for evaluation."""
    groups, now = [], time.time()
    for slot, row in enumerate(rows):
        if "prompt" not in row:
            raise ValueError(f"dataset row {row.get('prompt_id', slot)!r} has no 'prompt' field")
        text, prompt_ids = render_prompt(row["prompt"], encode)
        group_id = f"{group_prefix}{iteration}:{slot}" + (f"~{epoch}" if epoch else "")
        # the sampling seed leaves the driver epoch out: a restarted driver samples an iteration as the first did
        # (exact resume); the ids keep it, so an earlier driver's in-flight samples are still told apart
        seed_id = f"{group_prefix}{iteration}:{slot}"
        meta = {k: v for k, v in row.items() if k != "prompt"}
        groups.append([
            PromptRequest(sample_id=f"{group_id}:{k}", group_id=group_id, prompt_id=str(row["prompt_id"]),
                          iteration=iteration, prompt_ids=list(prompt_ids), prompt_text=text, meta=meta,
                          predicted_len=float(predicted[slot]) if predicted is not None else 0.0,
                          min_version=min_version, seed=request_seed(job_seed, f"{seed_id}:{k}"), queued_at=now)
            for k in range(group_size)
        ])
    return groups

