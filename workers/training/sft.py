"""Quick supervised warm start: teach a tiny model the task's format (prompt -> answer <eos>) in seconds to a minute.

RL needs a policy that already emits well-formed answers some of the time; a random tiny model never does. This runs
cross-entropy on the answer tokens only (prompt tokens are context), AdamW with a linear decay, for `steps` batches
or until `time_budget_s`, and saves a HF model directory (+ tokenizer) that the engines and the trainer load.
Tokenisation matches generation: prompt = `tokenizer(prompt)["input_ids"]` (with <bos>) for text, the chat template's
rendering (workers/core/chat.py) for chat prompts; target = answer + <eos>.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from workers.core.chat import ChatEncoder
from workers.core.prompts import render_prompt

IGNORE = -100  # label id ignored by the loss


@dataclass
class SFTResult:
    model_dir: Path
    steps: int
    final_loss: float
    seconds: float


def encode_example(tokenizer: Any, prompt: str | list[dict[str, str]], answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids + <eos>) -- the same prompt ids the generation side feeds the engine."""
    _, prompt_ids = render_prompt(prompt, ChatEncoder(tokenizer))
    answer_ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"]) + [int(tokenizer.eos_token_id)]
    return prompt_ids, answer_ids


def make_batch(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input_ids / attention_mask / labels (B, L); labels are IGNORE except on answer tokens."""
    width = max(len(p) + len(a) for p, a in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, (prompt, answer) in enumerate(examples):
        tokens = prompt + answer
        input_ids[row, : len(tokens)] = torch.tensor(tokens)
        attention_mask[row, : len(tokens)] = 1
        labels[row, len(prompt) : len(tokens)] = torch.tensor(answer)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def sft_warm_start(
    model_dir: str | Path,
    out_dir: str | Path,
    rows: Sequence[dict[str, Any]],
    *,
    steps: int = 300,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    device: str = "cpu",
    time_budget_s: float | None = None,
    target_loss: float | None = None,
    log_every: int = 0,
) -> SFTResult:
    """Fine-tune `model_dir` on `rows` ({"prompt", "answer"}) and save the result to `out_dir`.

    Stops after `steps`, after `time_budget_s`, or once the running mean loss (EMA, decay 0.9) falls below
    `target_loss` -- a loss target gives a similar "right format, often wrong" start whatever the initialisation."""
    if not rows:
        raise ValueError("SFT needs at least one row")
    missing = [key for key in ("prompt", "answer") if key not in rows[0]]
    if missing:
        raise ValueError(f"SFT rows need 'prompt' and 'answer' (missing {missing})")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = model.to(device).train()
    pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    examples = [encode_example(tokenizer, row["prompt"], str(row["answer"])) for row in rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.05, 1.0 - step / steps))
    start, loss_value, step, running = time.perf_counter(), float("nan"), 0, float("inf")
    while step < steps and (time_budget_s is None or time.perf_counter() - start < time_budget_s):
        if target_loss is not None and running < target_loss:
            break
        batch = {k: v.to(device) for k, v in make_batch(rng.sample(examples, min(batch_size, len(examples))),
                                                          pad_id).items()}
        loss = model(**batch).loss  # mean cross-entropy over answer tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value, step = float(loss.detach()), step + 1
        running = loss_value if step == 1 else 0.9 * running + 0.1 * loss_value
        if log_every and step % log_every == 0:
            print(f"sft step {step} loss={loss_value:.4f}", flush=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return SFTResult(out, step, loss_value, time.perf_counter() - start)
