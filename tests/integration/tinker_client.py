"""What the Tinker SDK integration tests share (test_tinker_sdk.py, test_tinker_parking.py): a platform key the
SDK accepts, the supervised batch they train on, and the tiny chat models they register (a sharpened one, and a
teacher made from it for distillation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tinker import types

from backend.db.models import Team, User
from backend.services.auth import new_api_key

ROWS = [[5, 9, 12, 7, 3, 11], [4, 8, 15, 16, 23, 42], [1, 2, 3, 4, 5, 6]]
QUESTION = [{"role": "user", "content": "What is 12+35?"}]


def api_key(backend: Any, team_id: int, user_id: int) -> str:
    """A new `tml-` key of the user with read and write scopes."""
    with backend.session() as session:
        return new_api_key(session=session, team=session.get(Team, team_id), creator=session.get(User, user_id),
                           name="tinker", scopes=["read", "write"])[1]


def sft_batch() -> list[types.Datum]:
    """Three next-token rows: 5 targets each, weights 1."""
    return [types.Datum(model_input=types.ModelInput.from_ints(row[:-1]),
                        loss_fn_inputs={"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)})
            for row in ROWS]


def sharpened(out: Path) -> Path:
    """The tiny BPE chat model with its output layer scaled up: a random model's next-token distribution is nearly
    uniform over 1024 tokens, which no few-step RL moves; scaled, a few tokens share most of the mass (like a
    pretrained model's), and the LoRA's changes to the hidden states move it fast."""
    from transformers import AutoModelForCausalLM

    from workers.models import build_tiny_model

    build_tiny_model("chat-qwen2-1m", out, seed=0)
    model = AutoModelForCausalLM.from_pretrained(out)
    model.lm_head.weight.data.mul_(10.0)
    model.save_pretrained(out, safe_serialization=True)
    return out


def distillation_teacher(student_dir: Path, out: Path) -> tuple[Path, int]:
    """A teacher for `student_dir` (same tokenizer): the student fine-tuned (2 full steps) to answer QUESTION with
    the token that was its third most likely first answer token; returns its directory and that token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    prompt = tokenizer.encode(tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    model = AutoModelForCausalLM.from_pretrained(student_dir)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        target = int(model(input_ids=ids).logits[0, -1].topk(3).indices[2])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    full = torch.tensor([prompt + [target]])
    for _ in range(2):
        loss = -model(input_ids=full).logits[0, -2].float().log_softmax(-1)[target]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out, target
