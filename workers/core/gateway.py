"""Gateway episodes: an agent's recorded chat calls (workers/runtime/gateway.py) assembled into training sequences.

Every call is recorded as sampled: the conversation and tools it was given, the chat template's rendering of them
(`prompt_text`), its token ids (`prompt_ids`: the rendering tokenised; for a call continuing the previous one, that
call's prompt ids + the sampled ids + the tokenised text the template adds after them), and per choice the sampled
ids, their behaviour logprobs and the policy version.

Assembly (`assemble`): a call whose prompt starts with the previous call's prompt + one of its choices' completion
extends that sequence: the completion is trained (loss mask 1, its logprobs), the rest of the new prompt (the tool
results, the user's next message, the template's markup) is context (mask 0, logprob 0.0). A call whose prompt does
not (the agent rewrote its history) starts a new sequence. The episode trains its last sequence (the one holding
the final answer) as one `Sample`, built by the constructor of built-in episodes (`episode_sample`); the earlier
sequences of a broken episode are counted, not trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.sample import PromptRequest
from workers.core.episode import TOOLS_SYSTEM, Episode, describe_tools


@dataclass
class Choice:
    ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Call:
    messages: list[dict[str, Any]]
    prompt_text: str
    prompt_ids: list[int]
    version: int
    choices: list[Choice] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None

    def record(self, episode_id: str) -> dict[str, Any]:
        """The call as recorded, JSON-able (contract/gateway.py `recorded`)."""
        return {"episode": episode_id, "messages": self.messages, "tools": self.tools, "prompt_ids": self.prompt_ids,
                "prompt_text": self.prompt_text, "version": self.version,
                "choices": [{"ids": c.ids, "logprobs": c.logprobs} for c in self.choices]}


@dataclass
class Sequence:
    calls: list[Call]
    choices: list[int]  # which choice of each call the sequence continues with (the last: 0 unless known)


def _extends(before: Call, choice: Choice, after: Call) -> bool:
    head = before.prompt_ids + choice.ids
    return after.prompt_ids[:len(head)] == head


def assemble(calls: list[Call]) -> list[Sequence]:
    """Consecutive prefix-extending calls as one sequence each, in call order."""
    sequences: list[Sequence] = []
    for call in calls:
        last = sequences[-1] if sequences else None
        if last is not None:
            before = last.calls[-1]
            chosen = next((k for k, c in enumerate(before.choices) if _extends(before, c, call)), None)
            if chosen is not None:
                last.choices[-1] = chosen
                last.calls.append(call)
                last.choices.append(0)
                continue
        sequences.append(Sequence([call], [0]))
    return sequences


def to_episode(request: PromptRequest, sequence: Sequence, *, started_at: float, finished_at: float) -> Episode:
    """The sequence as a finished `Episode` (prompt = its first call's prompt; response = everything after it)."""
    first = sequence.calls[0]
    episode = Episode(request=request, row={"prompt": request.prompt_text, **request.meta},
                      prompt_text=first.prompt_text, prompt_ids=list(first.prompt_ids), started_at=started_at,
                      finished_at=finished_at, end="done")
    for index, (call, k) in enumerate(zip(sequence.calls, sequence.choices, strict=True)):
        if index:  # what this call's prompt adds after the previous completion: context
            episode.add(call.prompt_ids[len(first.prompt_ids) + len(episode.response_ids):], False)
        choice = call.choices[k]
        start = len(episode.response_ids)
        episode.add(list(choice.ids), True, list(choice.logprobs))
        episode.turn_spans.append([start, len(episode.response_ids)])
        episode.turn_rewards.append(None)
        episode.turn_versions.append(call.version)
    last = sequence.calls[-1]
    choice = last.choices[sequence.choices[-1]]
    assistant: dict[str, Any] = {"role": "assistant", "content": choice.text}
    if choice.tool_calls:
        assistant["tool_calls"] = choice.tool_calls
    episode.messages = [*last.messages, assistant]
    return episode


def oldest_version(sequence: Sequence) -> int:
    """The staleness of a sequence is its oldest token's."""
    return min(call.version for call in sequence.calls)


def render_call(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                generation_prompt: bool = True) -> str:
    """A call's prompt as the gateway renders it: the chat template's rendering, the tools passed to the template
    when it takes them, else described in a system note (as built-in episodes describe theirs)."""
    kwargs: dict[str, Any] = {}
    if tools and "tools" in str(tokenizer.chat_template):
        kwargs["tools"] = tools
    elif tools:
        note = TOOLS_SYSTEM.format(tools=describe_tools(tools))
        if messages and messages[0].get("role") == "system":
            messages = [{**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{note}"}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": note}, *messages]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                             **kwargs))
