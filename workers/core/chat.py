"""Chat prompts through the model's own tokenizer: `ChatEncoder` renders messages with its chat template.

    encode = ChatEncoder(tokenizer, system_prompt=spec.dataset.system_prompt)
    encode("12+35=")                      # plain text: tokenizer(text) (special tokens as the tokenizer adds them)
    encode.chat([{"role": "user", ...}])  # (text, ids): apply_chat_template(add_generation_prompt=True), the
                                          # template's own BOS and markup, no special tokens added a second time

The control plane's dataset preview renders the same template with the same tokenizer file
(backend/services/chat_preview.py), so its token counts equal these.
"""

from __future__ import annotations

import json
from typing import Any

from contract.prompt_rows import with_system_prompt
from workers.core.prompts import Messages, TokenCache


class ChatEncoder(TokenCache):
    def __init__(self, tokenizer: Any, system_prompt: str | None = None):
        super().__init__(lambda text: list(tokenizer(text)["input_ids"]))
        self.tokenizer, self.system_prompt = tokenizer, system_prompt
        self._chats: dict[str, tuple[str, list[int]]] = {}

    def chat(self, messages: Messages) -> tuple[str, list[int]]:
        key = json.dumps(messages, sort_keys=True)
        if key not in self._chats:
            self._chats[key] = render_chat(self.tokenizer, with_system_prompt(messages, self.system_prompt))
        text, ids = self._chats[key]
        return text, list(ids)


def render_chat(tokenizer: Any, messages: Messages) -> tuple[str, list[int]]:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the model's tokenizer has no chat template, so it cannot render chat prompts: use "
                         "plain-text `prompt` rows or a model whose tokenizer_config.json has a chat_template")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text, list(tokenizer(text, add_special_tokens=False)["input_ids"])
