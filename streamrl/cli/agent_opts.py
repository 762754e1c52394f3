"""`streamrl jobs submit --agent-url / --agent-code / --agent-requirement`: the job's agent (JobSpec.agent,
docs/user-guide.md "Train an agent you already have") from the command line, over what the spec file says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def with_agent(spec: dict[str, Any], url: str | None, code: Path | None,
               requirements: list[str] | None) -> dict[str, Any]:
    """`spec` with its `agent` set from the options (an agent makes the job a gateway job when it has no
    environment); unchanged when none is given. The API checks the result (422 naming agent.url, agent.code, ...)."""
    if url is None and code is None and not requirements:
        return spec
    if url is not None and code is not None:
        raise typer.BadParameter("give --agent-url or --agent-code, not both", param_hint="--agent-url")
    agent = dict(spec.get("agent") or {})
    if url is not None:
        agent.pop("code", None)
        agent["url"] = url
    if code is not None:
        try:
            agent["code"] = code.read_text()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {code}: {exc.strerror}", param_hint="--agent-code") from None
        agent.pop("url", None)
    if requirements:
        agent["requirements"] = list(requirements)
    environment = spec.get("environment") or {"type": "gateway"}
    return {**spec, "agent": agent, "environment": environment}
