"""`agent.requirements` on the worker (workers/agents/packages.py): a requirement the package index cannot satisfy
raises PackagesFailed naming it (and is remembered: no second pip run), leaving no cache entry behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workers.agents.packages import PackagesFailed, ensure_packages


def test_an_unresolvable_requirement_names_itself_and_leaves_nothing(tmp_path: Path) -> None:
    requirements = ["openai-agents==0.0.0.999"]  # a real package, a version that does not exist
    with pytest.raises(PackagesFailed, match=r"agent.requirements\[0\] 'openai-agents==0.0.0.999'"):
        ensure_packages(requirements, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    start = time.monotonic()
    with pytest.raises(PackagesFailed, match="no matching distribution"):
        ensure_packages(requirements, tmp_path)
    assert time.monotonic() - start < 1.0  # remembered, not installed again
    assert ensure_packages([], tmp_path) is None
