"""Dataset rows as every part reads them: the upload validator (control plane) and the runtime's loader alike.

A row is either
- `{"prompt": "text"}` (a raw completion prompt), or `{"prompt": [messages]}` (a chat prompt), or
- `{"messages": [{"role": ..., "content": ...}, ...]}` (OpenAI chat format): the prompt is the conversation up to
  the final assistant turn; that turn, when the conversation ends with one, is the reference answer and becomes
  `answer` unless the row has an `answer` column.
A `system` column (string) is the system prompt of a chat row that has no system turn. Every other column reaches
the reward as `meta`. `normalize_row` returns `{"prompt": str | list[message], ...other columns}` or raises
`RowError` naming the column and the reason; it never changes its input.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant", "tool")
MAX_MESSAGES = 1000


class RowError(ValueError):
    def __init__(self, column: str, reason: str):
        super().__init__(f"column `{column}`: {reason}")
        self.column, self.reason = column, reason


def check_messages(messages: Any, column: str) -> list[dict[str, str]]:
    """A list of `{"role", "content"}` objects with known roles and string content (extra keys are kept)."""
    if not isinstance(messages, list) or not messages:
        raise RowError(column, "must be a non-empty list of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise RowError(column, f"has {len(messages)} messages; at most {MAX_MESSAGES}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RowError(column, f"message {index} is not an object")
        if message.get("role") not in ROLES:
            raise RowError(column, f"message {index} has role {message.get('role')!r}; one of {', '.join(ROLES)}")
        if not isinstance(message.get("content"), str):
            raise RowError(column, f"message {index} ({message['role']}) needs string `content`")
    return messages


def split_conversation(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], str | None]:
    """(prompt turns, reference answer): a final assistant turn is the reference, everything before it the prompt."""
    if messages[-1]["role"] == "assistant":
        return messages[:-1], messages[-1]["content"]
    return messages, None


def normalize_row(row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise RowError("(row)", "each row must be a JSON object")
    if "messages" in row and "prompt" in row:
        raise RowError("messages", "a row has either `messages` or `prompt`, not both")
    out = {k: v for k, v in row.items() if k not in ("messages", "prompt", "system")}
    system = row.get("system")
    if system is not None and not isinstance(system, str):
        raise RowError("system", "must be a string")
    if "messages" in row:
        prompt, reference = split_conversation(check_messages(row["messages"], "messages"))
        column = "messages"
        if reference is not None and "answer" not in out:
            out["answer"] = reference
    elif "prompt" in row:
        prompt, column = row["prompt"], "prompt"
        if isinstance(prompt, str):
            if not prompt.strip():
                raise RowError("prompt", "must be a non-empty string (or a list of chat messages)")
            if system is not None:
                raise RowError("system", "applies to chat prompts only (`messages`, or `prompt` as a list)")
            out["prompt"] = prompt
            return out
        prompt = check_messages(prompt, "prompt")
    else:
        raise RowError("prompt", "a row needs `prompt` (text or chat messages) or `messages` (OpenAI chat format)")
    if not any(m["role"] == "user" for m in prompt):
        raise RowError(column, "the prompt has no user turn")
    if system is not None and not any(m["role"] == "system" for m in prompt):
        prompt = [{"role": "system", "content": system}, *prompt]
    out["prompt"] = prompt
    return out


def with_system_prompt(messages: list[dict[str, str]], system_prompt: str | None) -> list[dict[str, str]]:
    """The job spec's system prompt in front of a chat prompt that has none of its own."""
    if system_prompt is None or any(m["role"] == "system" for m in messages):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def prompt_display(prompt: str | list[dict[str, str]]) -> str:
    """A one-string view of a prompt (for features and logs): the text, or the last user turn of a chat."""
    if isinstance(prompt, str):
        return prompt
    return next((m["content"] for m in reversed(prompt) if m["role"] == "user"), "")
