"""Tool-use demonstrations of the calculator environment, for a supervised warm start (workers/training/sft.py).

A random tiny model never writes a well-formed `<tool_call>`, so RL on the calculator sees no reward; a short SFT on
these demonstrations gives a policy with the right format that is right part of the time, which RL then improves
(tests/integration/test_agentic_jobs.py, bench/agentic.py). Each problem gives SFT rows for both policy turns:

    opening                                      -> <tool_call>{"name": "calculate", "arguments": {...}}</tool_call>
    opening + that call + the tool's result      -> the result (the final answer)

The opening is exactly what the episode loop renders (`EpisodeRunner.opening`: the environment's reset, the job's
system prompt, the tools note), so the demonstrations match what the policy sees in an episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.environments import Calculator, Message, bind_builtin

Opening = Callable[[Mapping[str, Any]], list[Message]]


def tool_call_text(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculate", "arguments": {"expression": expression}}) + "</tool_call>"


def calculator_demonstrations(rows: Sequence[Mapping[str, Any]], opening: Opening,
                              params: Mapping[str, Any] | None = None, *,
                              answer_weight: int = 3) -> list[dict[str, Any]]:
    """SFT rows ({"prompt": messages, "answer": text}) of the calculator with `params`: per dataset row its tool call
    and `answer_weight` copies of its final answer (a few tokens against the call's ~70: SFT averages the loss over
    tokens, so without the copies the answer turn is barely trained)."""
    env = bind_builtin("calculator", dict(params or {}))
    assert isinstance(env, Calculator)
    out: list[dict[str, Any]] = []
    for row in rows:
        expression, value = env.problem(row)
        result = str(int(value)) if float(value).is_integer() else f"{value:g}"
        first = opening(row)
        call = tool_call_text(expression)
        out.append({"prompt": first, "answer": call})
        answer = {"prompt": [*first, {"role": "assistant", "content": call},
                             {"role": "tool", "content": result, "name": "calculate", "tool_call_id": "call_1_0"}],
                  "answer": result}
        out += [answer] * answer_weight
    return out
