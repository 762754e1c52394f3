"""Multi-turn environments: the built-ins (`calculator`, `guess_number`), their registry, and the step-result checks
every environment's answers pass through (built-in or user code in the jail). Torch-free and pure.

An environment is two stateless functions of the dataset row (docs/user-guide.md#environments-and-tools):

    reset(row) -> messages                        # the opening conversation (system/user turns)
    step(messages, row) -> {"messages": [...], "reward": float | None, "done": bool}

`messages` is the whole conversation so far, ending with the policy's latest assistant turn, whose `tool_calls`
(parsed by the episode loop from `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`) are
`[{"id", "type": "function", "function": {"name", "arguments"}}]`. The environment answers with the messages to
append (e.g. `{"role": "tool", "tool_call_id": ..., "name": ..., "content": ...}`), a reward for this step (the
episode's reward is the sum of the steps' rewards; None counts as 0) and whether the episode is over. Being stateless
(all state is in the conversation and the row) an environment serves any number of interleaved episodes and survives
a restarted jail. `TOOLS` of an environment: JSON-schema tool definitions passed to the chat template.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Mapping
from typing import Any

from contract.registry import Registry

Message = dict[str, Any]
ROLES = ("system", "user", "assistant", "tool")
MAX_STEP_MESSAGES = 16
MAX_MESSAGE_CHARS = 20_000
MAX_TOOLS = 32


class StepResultError(ValueError):
    """An environment returned something that is not a valid reset/step result (names what is wrong)."""


class BuiltinEnvironment:
    """A built-in: `reset`/`step` bound to its params, and its tools."""

    tools: list[dict[str, Any]] = []

    def __init__(self, **params: Any) -> None:
        self.params = params

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        raise NotImplementedError

    def step(self, messages: list[Message], row: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


# name -> BuiltinEnvironment subclass (`@ENVIRONMENTS.register(name, label=..., defaults={...})`)
ENVIRONMENTS: Registry[type[BuiltinEnvironment]] = Registry("environment")
PYTHON = "python"  # user code in the jail: the spec's `code`
GATEWAY = "gateway"  # the turns come from an agent through the rollout gateway (workers/runtime/gateway.py)
OPENENV = "openenv"  # an OpenEnv environment server at the spec's `url` (workers/environments/openenv_env.py)
OPENENV_PARAMS = {"action_field": str, "observation_field": str}  # the params of type openenv
VERIFIERS = "verifiers"  # a verifiers environment: its own episode loop in the jail, through the gateway
THROUGH_GATEWAY = (GATEWAY, VERIFIERS)  # the types whose turns are chat calls through the rollout gateway


def _evaluate(expression: str) -> float:
    """The safe arithmetic evaluator of the graders (contract/rewards/formula.py: an AST walk, no eval); imported
    here because contract.rewards' package imports contract.spec, which imports this module."""
    from contract.rewards.formula import Formula

    return Formula(expression, set()).evaluate({})


def _row_seed(row: Mapping[str, Any], salt: str) -> int:
    key = str(row.get("prompt_id", "")) + "\x00" + str(row.get("prompt", ""))
    return zlib.crc32(f"{salt}:{key}".encode())


def _calls(message: Message) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]


def _last_assistant(messages: list[Message]) -> Message:
    if not messages or messages[-1].get("role") != "assistant":
        raise StepResultError("step() is called after an assistant turn")
    return messages[-1]


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@ENVIRONMENTS.register("calculator", label="Calculator (tool use)", defaults={"operands": 3, "max_operand": 99})
class Calculator(BuiltinEnvironment):
    """Multi-step arithmetic with a `calculate` tool: tool calls are evaluated safely, the final answer is rewarded."""

    tools = [{
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression (+ - * / ** and parentheses).",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                           "required": ["expression"]},
        },
    }]

    def problem(self, row: Mapping[str, Any]) -> tuple[str, float]:
        """(expression, value): the row's `expression` when it has one, else one drawn from the row (seeded)."""
        if isinstance(row.get("expression"), str):
            text = row["expression"]
        else:
            rng = random.Random(_row_seed(row, "calculator"))
            count = max(2, int(self.params.get("operands", 3)))
            top = max(2, int(self.params.get("max_operand", 99)))
            text = str(rng.randint(2, top))
            for _ in range(count - 1):
                text += f" {rng.choice('+-*')} {rng.randint(2, top)}"
        return text, _evaluate(text)

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        expression, _ = self.problem(row)
        return [
            {"role": "system", "content": "Use the calculate tool for arithmetic, then reply with the final answer "
                                          "only."},
            {"role": "user", "content": f"What is {expression}?"},
        ]

    def step(self, messages: list[Message], row: Mapping[str, Any]) -> dict[str, Any]:
        last = _last_assistant(messages)
        calls = _calls(last)
        if calls:
            out = []
            for call in calls:
                fn = call["function"]
                args = fn.get("arguments") if isinstance(fn.get("arguments"), dict) else {}
                if fn.get("name") != "calculate":
                    result = f"error: unknown tool {fn.get('name')!r}; the tool is calculate"
                else:
                    try:
                        value = _evaluate(str(args.get("expression", "")))
                        result = f"{value:g}" if not float(value).is_integer() else str(int(value))
                    except ValueError as exc:
                        result = f"error: {exc}"
                out.append({"role": "tool", "tool_call_id": str(call.get("id", "")), "name": "calculate",
                            "content": result})
            return {"messages": out, "reward": None, "done": False}
        _, want = self.problem(row)
        found = _NUMBER.findall(str(last.get("content", "")).replace(",", ""))
        correct = bool(found) and math.isclose(float(found[-1]), want, rel_tol=1e-6, abs_tol=1e-6)
        return {"messages": [], "reward": 1.0 if correct else 0.0, "done": True}


@ENVIRONMENTS.register("guess_number", label="Guess the number", defaults={"low": 1, "high": 16})
class GuessNumber(BuiltinEnvironment):
    """Guess a secret integer with higher/lower feedback; reward 1.0 on the first guess, less for each further one."""

    tools = [{
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the secret number.",
            "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
        },
    }]

    def bounds(self) -> tuple[int, int]:
        low, high = int(self.params.get("low", 1)), int(self.params.get("high", 16))
        return low, max(low, high)

    def secret(self, row: Mapping[str, Any]) -> int:
        low, high = self.bounds()
        if isinstance(row.get("secret"), int) and not isinstance(row.get("secret"), bool):
            return int(row["secret"])
        return random.Random(_row_seed(row, "guess_number")).randint(low, high)

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        low, high = self.bounds()
        return [{"role": "user", "content": f"I picked a number from {low} to {high}. Guess it: reply with a number "
                                            "and I say higher or lower."}]

    def step(self, messages: list[Message], row: Mapping[str, Any]) -> dict[str, Any]:
        last = _last_assistant(messages)
        guesses = sum(1 for m in messages if m.get("role") == "assistant")
        calls = _calls(last)
        if calls and isinstance(calls[0]["function"].get("arguments"), dict):
            raw = str(calls[0]["function"]["arguments"].get("number", ""))
        else:
            raw = str(last.get("content", ""))
        found = re.findall(r"-?\d+", raw)
        reply = {"role": "tool", "name": "guess", "tool_call_id": str(calls[0].get("id", ""))} if calls else \
            {"role": "user"}
        if not found:
            return {"messages": [{**reply, "content": "Reply with a number."}], "reward": None, "done": False}
        guess, secret = int(found[0]), self.secret(row)
        if guess == secret:
            return {"messages": [], "reward": max(0.1, 1.0 - 0.1 * (guesses - 1)), "done": True}
        hint = "higher" if secret > guess else "lower"
        return {"messages": [{**reply, "content": f"{guess} is wrong: the number is {hint}."}], "reward": None,
                "done": False}


def defaults_of(name: str) -> dict[str, Any]:
    return dict(ENVIRONMENTS.entry(name).meta.get("defaults", {}))


def bind_builtin(name: str, params: Mapping[str, Any]) -> BuiltinEnvironment:
    """The built-in `name` with `params` (unknown params, or values of another type than the default's, raise)."""
    defaults = defaults_of(name)
    for key, value in params.items():
        if key not in defaults:
            raise ValueError(f"environment {name!r} has no param {key!r}; params: {sorted(defaults)}")
        if isinstance(value, bool) or not isinstance(value, type(defaults[key])):
            raise ValueError(f"environment {name!r} param {key!r} must be {type(defaults[key]).__name__}")
    return ENVIRONMENTS.get(name)(**{**defaults, **params})


# -- checks of what any environment answers ---------------------------------------------------------------------------
def check_messages(raw: Any, where: str) -> list[Message]:
    if not isinstance(raw, list):
        raise StepResultError(f"{where} must be a list of messages, got {type(raw).__name__}")
    if len(raw) > MAX_STEP_MESSAGES:
        raise StepResultError(f"{where} has {len(raw)} messages; at most {MAX_STEP_MESSAGES}")
    out: list[Message] = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise StepResultError(f"{where}[{index}] must be a dict with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise StepResultError(f"{where}[{index}].role must be one of {list(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise StepResultError(f"{where}[{index}].content must be a string")
        if len(content) > MAX_MESSAGE_CHARS:
            raise StepResultError(f"{where}[{index}].content is {len(content)} characters; at most "
                                  f"{MAX_MESSAGE_CHARS}")
        clean: Message = {"role": role, "content": content}
        for key in ("name", "tool_call_id"):
            if isinstance(message.get(key), str):
                clean[key] = message[key][:200]
        out.append(clean)
    return out


def check_reset(raw: Any) -> list[Message]:
    messages = check_messages(raw, "reset()")
    if not messages:
        raise StepResultError("reset() returned no messages")
    return messages


def check_step(raw: Any) -> tuple[list[Message], float | None, bool]:
    """(messages, reward, done) of a step result; StepResultError names what is malformed."""
    if not isinstance(raw, dict):
        raise StepResultError(f"step() must return a dict with messages, reward, done; got {type(raw).__name__}")
    unknown = set(raw) - {"messages", "reward", "done"}
    if unknown:
        raise StepResultError(f"step() result has unknown keys {sorted(unknown)}")
    messages = check_messages(raw.get("messages", []), "step()['messages']")
    reward = raw.get("reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise StepResultError(f"step()['reward'] must be a number or None, got {type(reward).__name__}")
        try:
            reward = float(reward)
        except OverflowError:
            raise StepResultError("step()['reward'] is too large for a float") from None
        if not math.isfinite(reward):
            raise StepResultError(f"step()['reward'] must be finite, got {reward}")
    done = raw.get("done", False)
    if not isinstance(done, bool):
        raise StepResultError(f"step()['done'] must be true or false, got {type(done).__name__}")
    if not done and not messages:
        raise StepResultError("step() returned no messages and done false: the episode could not go on")
    return messages, reward, done


def check_tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS or not all(isinstance(t, dict) for t in raw):
        raise StepResultError(f"tools must be a list of at most {MAX_TOOLS} JSON-schema tool definitions (dicts)")
    return raw

