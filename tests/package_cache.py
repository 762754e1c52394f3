"""The tests' cache of requirement venvs (workers/agents/packages.py trees): one directory per host, kept across runs
like pip's own cache (a tree per requirements hash, read-only once complete), so each requirements set is installed
once per session at most and once per host in practice. Tests hand it to the workers as
STREAMRL_AGENT_PACKAGES_DIR; `built` is memoised per process, so a session builds each set once."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from workers.agents.packages import ensure_packages

CACHE = Path(tempfile.gettempdir()) / "streamrl-test-agent-packages"


@functools.cache
def built(*requirements: str) -> Path:
    """The read-only packages dir of `requirements` (installed from the package index the first time)."""
    path = ensure_packages(list(requirements), CACHE)
    assert path is not None
    return Path(path)
