"""Every `pytest.mark.X` a test uses is declared in pyproject.toml (which runs pytest with `--strict-markers`)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "timeout"}  # timeout: plugin


def declared_markers() -> set[str]:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in options["addopts"].split()
    return {line.split(":")[0].strip() for line in options["markers"]}


def used_markers() -> dict[str, list[str]]:
    """marker -> places (`path:line`) spelling `pytest.mark.<marker>` in tests/ and bench/."""
    used: dict[str, list[str]] = {}
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"):
                used.setdefault(node.attr, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return used


def test_every_marker_used_is_declared() -> None:
    declared = declared_markers()
    assert {"slow", "e2e", "integration", "gpu", "vllm"} <= declared
    undeclared = {name: places for name, places in used_markers().items() if name not in declared | BUILTIN}
    assert not undeclared, f"declare these markers in pyproject.toml: {undeclared}"
    assert {"integration", "e2e", "slow"} <= set(used_markers())  # the scan really sees the suite's markers
