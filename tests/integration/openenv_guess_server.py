"""An OpenEnv environment server (openenv-core 0.3, run by `.venv-openenv/bin/python`): "guess the number", written
independently of the platform's built-in `guess_number` (contract/environments.py) to the same rules, with its
`guess` tool served MCP style (`list_tools` / `call_tool` actions) and text replies as `message` actions.

    .venv-openenv/bin/python tests/integration/openenv_guess_server.py --port 8123 [--high 16] [--die-after-steps N]

`--die-after-steps N`: the process exits (os._exit, sessions open) at its N-th step: a server dying mid-run.
Standard library + openenv-core only: it imports nothing of the platform.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import threading
import zlib
from typing import Any, Literal

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app

LOW, HIGH = 1, 16  # guess_number's default range (--high sets the top, like its `high` param)
TOOL = {"name": "guess", "description": "Guess the secret number.",
        "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}
STEPS = {"count": 0, "die_after": 0}
RANGE = {"high": HIGH}
LOCK = threading.Lock()


class GuessAction(Action):
    type: Literal["message", "list_tools", "call_tool"] = "message"
    message: str = ""
    tool_name: str = ""
    arguments: dict[str, Any] = {}


class GuessObservation(Observation):
    message: str = ""
    tools: list[dict[str, Any]] = []
    tool_name: str = ""
    result: str | None = None


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.secret, self.guesses = LOW, 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, row: dict[str, Any] | None = None,
              **_: Any) -> GuessObservation:
        row = row or {}
        if isinstance(row.get("secret"), int) and not isinstance(row.get("secret"), bool):
            self.secret = int(row["secret"])
        else:
            key = str(row.get("prompt_id", "")) + "\x00" + str(row.get("prompt", ""))
            self.secret = random.Random(zlib.crc32(f"guess_number:{key}".encode())).randint(LOW, RANGE["high"])
        self.guesses = 0
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(message=f"I picked a number from {LOW} to {RANGE['high']}. Guess it: reply with a "
                                        "number and I say higher or lower.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **_: Any) -> GuessObservation:  # type: ignore[override]
        with LOCK:
            STEPS["count"] += 1
            if STEPS["die_after"] and STEPS["count"] >= STEPS["die_after"]:
                os._exit(17)  # a server dying mid-run: its open sessions are dropped
        self._state.step_count += 1
        if action.type == "list_tools":
            return GuessObservation(tools=[TOOL])
        self.guesses += 1
        raw = str(action.arguments.get("number", "")) if action.type == "call_tool" else action.message
        found = re.findall(r"-?\d+", raw)
        if not found:
            reply, reward, done = "Reply with a number.", None, False
        elif int(found[0]) == self.secret:
            reply, reward, done = "", max(0.1, 1.0 - 0.1 * (self.guesses - 1)), True
        else:
            hint = "higher" if self.secret > int(found[0]) else "lower"
            reply, reward, done = f"{int(found[0])} is wrong: the number is {hint}.", None, False
        if action.type == "call_tool":
            return GuessObservation(tool_name=action.tool_name, result=reply, reward=reward, done=done)
        return GuessObservation(message=reply, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--high", type=int, default=HIGH)
    parser.add_argument("--die-after-steps", type=int, default=0)
    args = parser.parse_args()
    RANGE["high"] = args.high
    STEPS["die_after"] = args.die_after_steps
    app = create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=256)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", ws_ping_interval=None)


if __name__ == "__main__":
    main()
