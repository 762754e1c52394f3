"""A dataset as a model will see it: rows rendered with the model's chat template and prompt lengths in its tokens.

Rendering follows transformers' `apply_chat_template(..., add_generation_prompt=True)` (a sandboxed Jinja
environment with trim_blocks and lstrip_blocks, `raise_exception`, the tokenizer's special tokens as variables), in a
child process bounded in time, memory and output (backend/services/chat_render.py: the template is tenant code), and
counting follows workers/core/chat.py: a chat prompt is tokenised without adding special tokens (the template has
them), a plain prompt as the tokenizer does by default. Only `tokenizers` and `jinja2`: no torch in the control plane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backend.services.chat_render import render_many
from backend.services.errors import InvalidInput
from backend.services.model_card import chat_template
from contract.prompt_rows import normalize_row, with_system_prompt

MAX_HISTOGRAM_ROWS = 5000
BINS = 20


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class ChatRenderer:
    template: str | None
    tokenizer: Any  # tokenizers.Tokenizer
    special: dict[str, str | None]

    @classmethod
    def for_model(cls, model_dir: Path) -> ChatRenderer:
        from tokenizers import Tokenizer

        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise InvalidInput("the model has no tokenizer.json to count tokens with", loc=("query", "model"))
        config_path = model_dir / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        special = {key: _token_text(config.get(key)) for key in ("bos_token", "eos_token", "pad_token", "unk_token")}
        return cls(template=chat_template(model_dir), tokenizer=Tokenizer.from_file(str(path)), special=special)

    def render(self, prompt: str | list[dict[str, str]], system_prompt: str | None = None) -> tuple[str, int]:
        """(text the engine sees, its length in tokens)."""
        return self.render_many([prompt], system_prompt)[0]

    def render_many(self, prompts: list[Any], system_prompt: str | None = None) -> list[tuple[str, int]]:
        """`render` of each prompt; the chat ones rendered together in one bounded child process."""
        chats = [with_system_prompt(p, system_prompt) for p in prompts if not isinstance(p, str)]
        if chats and self.template is None:
            raise InvalidInput("the model's tokenizer has no chat template, so it cannot render chat rows",
                               loc=("query", "model"))
        rendered = iter(render_many(self.template or "", chats, self.special))
        out = []
        for prompt in prompts:
            if isinstance(prompt, str):
                out.append((prompt, len(self.tokenizer.encode(prompt, add_special_tokens=True).ids)))
            else:
                text = next(rendered)
                out.append((text, len(self.tokenizer.encode(text, add_special_tokens=False).ids)))
        return out


def histogram(lengths: list[int]) -> dict[str, Any]:
    if not lengths:
        return {"count": 0, "p50": 0, "p90": 0, "max": 0, "bins": []}
    array = np.asarray(lengths)
    edges = np.histogram_bin_edges(array, bins=min(BINS, max(1, int(array.max() - array.min()) + 1)))
    counts, _ = np.histogram(array, bins=edges)
    return {"count": len(lengths), "p50": float(np.percentile(array, 50)), "p90": float(np.percentile(array, 90)),
            "max": int(array.max()),
            "bins": [{"lo": float(lo), "hi": float(hi), "count": int(c)}
                     for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)]}


def preview(rows: list[dict[str, Any]], model_dir: Path, *, shown: int,
            system_prompt: str | None = None) -> dict[str, Any]:
    """The first `shown` rows rendered, and the histogram of every row's prompt length (up to MAX_HISTOGRAM_ROWS)."""
    renderer = ChatRenderer.for_model(model_dir)
    out, lengths = [], []
    normalized = [normalize_row(raw) for raw in rows[:MAX_HISTOGRAM_ROWS]]
    rendered = renderer.render_many([row.pop("prompt") for row in normalized], system_prompt)
    for index, (raw, row, (text, tokens)) in enumerate(zip(rows, normalized, rendered, strict=False)):
        lengths.append(tokens)
        if index < shown:
            out.append({"text": text, "tokens": tokens, "chat": not isinstance(raw.get("prompt", ""), str)
                        or "messages" in raw, "meta": row})
    return {"chat_template": renderer.template is not None, "rows": out, "prompt_tokens": histogram(lengths)}
