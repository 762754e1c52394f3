"""Submit-time check of `agent.requirements` (contract/agent.py) and of an OpenEnv server's
`environment.requirements`: pip resolves them against the host's configured package index without installing
anything (`pip install --dry-run`). Unresolvable requirements are a 422 at the field naming the requirement; a
resolution that takes longer than CHECK_TIMEOUT_S is let through (the generation worker that installs them says any
failure as the episodes' error in the job's events). A set that resolved is remembered for this process.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from backend.services.errors import InvalidInput
from contract.agent import pip_failure, pip_install_argv, requirements_key
from contract.spec import JobSpec

CHECK_TIMEOUT_S = 30.0
_resolved: set[str] = set()
_lock = threading.Lock()


def check_agent_requirements(spec: JobSpec) -> None:
    """422 at `agent.requirements` (or `environment.requirements`, an OpenEnv server's) when pip cannot resolve
    them."""
    if spec.agent is not None and spec.agent.requirements:
        _check(spec.agent.requirements, "agent")
    if spec.environment is not None and spec.environment.requirements:
        _check(spec.environment.requirements, "environment")


def _check(requirements: list[str], section: str) -> None:
    key = requirements_key(requirements, sys.version)
    with _lock:
        if key in _resolved:
            return
    try:
        done = subprocess.run(pip_install_argv(sys.executable, requirements, target=None), capture_output=True,
                              text=True, timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return  # slow index: the worker's install reports a failure
    if done.returncode != 0:
        raise InvalidInput(pip_failure(done.stderr + done.stdout, requirements, f"{section}.requirements"),
                           loc=("body", section, "requirements"))
    with _lock:
        _resolved.add(key)
