"""`environment.type: verifiers`'s own checks (contract/spec_environment.py EnvironmentSpec calls `verifiers_error`):
a verifiers (0.4, `verifiers.v1`) environment whose episodes verifiers' own loop runs in the agent jail, calling the
policy through the episode's rollout gateway (workers/environments/verifiers_gateway.py).

Or the environment is served by the user's own verifiers env server (`url`, `tcp://host:port`: verifiers.v1.serve
`EnvServer`, ZMQ): the generation worker is its EnvClient and sends each episode (the dataset row as the task's data)
with the episode's gateway base URL, its token in the path (`.../rollouts/{episode}/key/{token}/v1`: a served env's
model client sends its own process's key as the bearer, so the token cannot travel there)
(workers/environments/verifiers_served.py).

The environment is the user's module in `code` (a verifiers plugin: `__all__` exports its `Taskset` subclass and
optionally an `Env` subclass) or an installed taskset named by `params.taskset` (from `requirements`), optionally
paired with an installed env `params.env`. What is refused here is what the spec alone shows cannot run in the jail;
the rest (a role pinned to a program harness, toolsets or judges of an installed taskset, untrainable roles) fails
the episodes at run time, naming why (workers/environments/verifiers_driver.py)."""

from __future__ import annotations

import ast
import re
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from contract.egress import EgressRefused, parse_tcp
from contract.openenv import code_error

VERIFIERS_REQUIREMENT = "verifiers==0.4.0"  # the verifiers.v1 API the driver is written for
VERIFIERS_PARAMS = {"taskset": str, "env": str, "config": dict, "concurrency": int}
DEFAULT_CONCURRENCY = 4  # jailed episodes one generation instance runs at once
MAX_CONCURRENCY = 64
# verifiers' bundled envs (verifiers.v1.envs) that cannot train through the gateway, and why
REFUSED_ENVS = {
    "user-sim": "its simulated user is an untrainable agent whose calls would reach the policy and be trained",
    "best-of-n": "it plays several trainable runs per episode; the gateway trains one conversation per episode",
    "agentic-judge": "its judge is an agent with a program harness in a sandbox",
    "shared-agentic-judge": "its judge is an agent with a program harness in a sandbox",
    "isolated-verifier": "it verifies in a container runtime",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@-]{0,199}$")


def _requirement_name(requirement: str) -> str | None:
    """The requirement's canonical project name (PEP 503), None when it is not a requirement (the requirements'
    own check refuses it, naming it)."""
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None


def verifiers_requirements(requirements: list[str]) -> list[str]:
    """The packages the jail gets: the user's, with verifiers pinned first unless they name it themselves."""
    if any(_requirement_name(r) == "verifiers" for r in requirements):
        return list(requirements)
    return [VERIFIERS_REQUIREMENT, *requirements]


def _toolsets_in(code: str) -> bool:
    """Whether the module declares verifiers tools (a `toolsets` method, or a Toolset subclass)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "toolsets":
            return True
        if isinstance(node, ast.ClassDef) and any(
                (isinstance(base, ast.Name) and base.id.endswith("Toolset"))
                or (isinstance(base, ast.Attribute) and base.attr.endswith("Toolset")) for base in node.bases):
            return True
    return False


def _exports(code: str) -> bool:
    return any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
               for node in ast.parse(code).body)


def verifiers_error(url: str | None, code: str | None, params: dict[str, Any]) -> str | None:
    """Why a verifiers environment cannot run (None: it can, as far as the spec shows)."""
    if url is not None:  # a served env (verifiers.v1.serve.EnvServer): the worker is its EnvClient
        try:
            parse_tcp(url)
        except EgressRefused as exc:
            return f"`url` {exc}"
        if code is not None or set(params) - {"concurrency"}:
            return ("`url`: a served verifiers env takes no `code` and no params but concurrency (the server holds "
                    "its env and config; the dataset's rows are its tasks' data)")
    for name, value in params.items():
        if name not in VERIFIERS_PARAMS:
            return f"params: type 'verifiers' has no param {name!r} (it takes {', '.join(VERIFIERS_PARAMS)})"
        if not isinstance(value, VERIFIERS_PARAMS[name]) or isinstance(value, bool):
            return f"params.{name} must be a {VERIFIERS_PARAMS[name].__name__}"
    for name in ("taskset", "env"):
        if name in params and not _NAME.match(params[name]):
            return f"params.{name} {params[name]!r} is not a verifiers plugin id"
    concurrency = params.get("concurrency", DEFAULT_CONCURRENCY)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        return f"params.concurrency must be 1..{MAX_CONCURRENCY} (got {concurrency})"
    if url is not None:
        return None
    env = str(params.get("env", "")).rsplit("/", 1)[-1].split("@", 1)[0].replace("_", "-").lower()
    if env in REFUSED_ENVS:
        return f"params.env {params['env']!r} cannot train through the gateway: {REFUSED_ENVS[env]}"
    if (code is None) == ("taskset" not in params):
        return ("type 'verifiers' needs `code` (a module exporting its Taskset via `__all__`) or params.taskset (an "
                "installed taskset's id, from `requirements`), one of them")
    if code is not None:
        why = code_error(code, "environment")
        if why is not None:
            return why
        if not _exports(code):
            return "code must export its verifiers Taskset (and any Env) via `__all__`, as a verifiers plugin does"
        if _toolsets_in(code):
            return ("code: its tools are MCP Toolset servers that verifiers launches as processes, which the jail "
                    "does not allow (no processes); tool-less tasksets and envs run")
    return None
