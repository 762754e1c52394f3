"""Every third-party module the platform imports at module level is a declared dependency in pyproject.toml, so a
fresh `pip install .` runs it (zstandard was imported by the Tinker API while only a dev tool pulled it in)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("backend", "workers", "contract", "streamrl")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _module_level_imports(path: Path) -> set[str]:
    """Top-level names imported by the module's own statements (not inside functions: those are optional extras,
    imported where a job asks for them, such as vllm, wandb or verifiers)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_module_level_import_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_normal(re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    undeclared: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for name in _module_level_imports(path) - set(sys.stdlib_module_names) - set(PACKAGES):
                owners = {_normal(d) for d in distributions.get(name, [name])}
                if not owners & declared:
                    undeclared.setdefault(f"{name} (from {sorted(owners)})", set()).add(str(path.relative_to(REPO)))
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"
