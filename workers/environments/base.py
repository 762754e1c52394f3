"""`Environment`: what the episode loop calls (workers/core/episode.py), and `build_environment(spec)`.

`reset(row)` and `step(messages, row)` return checked results (contract/environments.py `check_reset` /
`check_step`) or raise `EnvironmentFailure` with the reason, which fails that episode only (a per-episode error on
its sample, a `reward_error` event), never the instance or the job. `EnvironmentLost` (a remote server that went
away) is the exception: the episode loop starts that episode over (workers/core/episode.py).

Stateless environments (built-ins, python code, verifiers) ignore `episode`; a stateful one (OpenEnv: a server
session per episode) keys its sessions by it, and `finish(episode)` (called once the episode ended, however) lets it
close that session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from contract.environments import (
    PYTHON,
    BuiltinEnvironment,
    Message,
    StepResultError,
    check_reset,
    check_step,
    check_tools,
)
from workers.rewards.sandbox import SandboxCallFailed, SandboxWorker

MAX_ERROR_CHARS = 500
MAX_STEP_OUTPUT = 64 << 10  # bytes user code may print during one reset/step call


class EnvironmentFailure(Exception):
    """The environment failed this episode (time limit, crash, malformed result, ...): the message says why."""


class EnvironmentLost(EnvironmentFailure):
    """The environment's server went away with the episode's state (connection refused or dropped): the episode is
    retried from its reset, not failed (until its retries are spent)."""


class Environment(ABC):
    """One job's environment in one process, serving any number of interleaved episodes (it keeps no state)."""

    name = "environment"
    sandbox_mode: str | None = None
    protections: list[str] = []

    @property
    def tools(self) -> list[dict[str, Any]]:
        return []

    @abstractmethod
    def reset(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        """The episode's opening conversation for a dataset row."""

    @abstractmethod
    def step(self, messages: list[Message], row: Mapping[str, Any],
             episode: str = "") -> tuple[list[Message], float | None, bool]:
        """The environment's reply to the conversation so far: (new messages, reward or None, done)."""

    def finish(self, episode: str) -> None:  # noqa: B027 - optional hook
        """Episode `episode` ended (done, failed, cut or retried): release what it holds."""

    def take_notes(self) -> list[str]:
        """What the job's events should say since the last call (e.g. a server lost and episodes retried)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop the jailed process, if any. Idempotent."""


class InProcessEnvironment(Environment):
    """A built-in (trusted code of this repository): its exceptions and malformed answers fail the episode too."""

    def __init__(self, name: str, env: BuiltinEnvironment):
        self.name, self.env = name, env

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.env.tools)

    def reset(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        try:
            return check_reset(self.env.reset(row))
        except (StepResultError, ValueError, KeyError, TypeError) as exc:
            raise EnvironmentFailure(f"environment {self.name!r} reset: {exc}"[:MAX_ERROR_CHARS]) from None

    def step(self, messages: list[Message], row: Mapping[str, Any],
             episode: str = "") -> tuple[list[Message], float | None, bool]:
        try:
            return check_step(self.env.step(messages, row))
        except (StepResultError, ValueError, KeyError, TypeError) as exc:
            raise EnvironmentFailure(f"environment {self.name!r} step: {exc}"[:MAX_ERROR_CHARS]) from None


class SandboxedEnvironment(Environment):
    """`type: python`: the user's reset/step in one jailed process (workers/rewards/sandbox.py, kind environment),
    started on first use and restarted after a time limit, a crash or a flood of output."""

    name = PYTHON

    def __init__(self, code: str, *, timeout_s: float, memory_mb: int, mode: str | None = None):
        self.worker = SandboxWorker(code, timeout_s=timeout_s, memory_mb=memory_mb, mode=mode, kind="environment",
                                    max_output_per_call=MAX_STEP_OUTPUT)
        self._tools: list[dict[str, Any]] | None = None

    @property
    def sandbox_mode(self) -> str | None:  # type: ignore[override]
        return self.worker.mode

    @property
    def protections(self) -> list[str]:  # type: ignore[override]
        return list(self.worker.protections)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The code's `TOOLS` (asked once; code that fails to load has none, and its episodes fail at reset)."""
        if self._tools is None:
            try:
                self._tools = check_tools(self._call({"op": "tools"}))
            except (EnvironmentFailure, StepResultError):
                self._tools = []
        return self._tools

    def _call(self, payload: dict[str, Any]) -> Any:
        try:
            return self.worker.request(payload).get("result")
        except SandboxCallFailed as exc:
            raise EnvironmentFailure(str(exc)[:MAX_ERROR_CHARS]) from None

    def reset(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        raw = self._call({"op": "reset", "row": dict(row)})
        try:
            return check_reset(raw)
        except StepResultError as exc:
            raise EnvironmentFailure(str(exc)[:MAX_ERROR_CHARS]) from None

    def step(self, messages: list[Message], row: Mapping[str, Any],
             episode: str = "") -> tuple[list[Message], float | None, bool]:
        raw = self._call({"op": "step", "messages": messages, "row": dict(row)})
        try:
            return check_step(raw)
        except StepResultError as exc:
            raise EnvironmentFailure(str(exc)[:MAX_ERROR_CHARS]) from None

    def close(self) -> None:
        self.worker.close()
