"""The import rule of docs/architecture.md#packages-and-the-import-rule, enforced on the source.

`contract` imports none of the other three packages; `backend` and `workers` import only `contract`; `streamrl`
(entry points) may import everything. `contract` and `backend` never import torch (or what pulls it in). Every
import statement counts, including those inside functions and under `if TYPE_CHECKING:`.

No first-party module imports itself through others (no cycles), counting the same imports: a cycle hidden in a
function-level import still means neither module can be read, tested or moved without the other.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "backend", "workers", "streamrl")
ALLOWED: dict[str, set[str]] = {  # package -> the other first-party packages it may import
    "contract": set(),
    "backend": {"contract"},
    "workers": {"contract"},
    "streamrl": {"contract", "backend", "workers"},
}
HEAVY = ("torch", "vllm", "transformers")  # the data plane's stack: importing any of them pulls torch
TORCH_FREE = ("contract", "backend")


@dataclass(frozen=True)
class Edge:
    path: str  # relative to the repository root
    line: int
    module: str  # the imported module, absolute

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, path: Path, root: Path) -> list[str]:
    """Absolute module(s) of a `from` import; relative ones resolved against the importing module's package.

    `from .. import x` names modules, so each alias is one; otherwise the `from` module is the edge."""
    if node.level == 0:
        return [node.module or ""]
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    if node.module:
        return [".".join([*base, node.module])]
    return [".".join([*base, alias.name]) for alias in node.names]


def imports_of(path: Path, root: Path = ROOT) -> list[Edge]:
    """Every module imported anywhere in the file (module level, functions, classes, conditional blocks)."""
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges.extend(Edge(rel, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            edges.extend(Edge(rel, node.lineno, module) for module in _resolve(node, path, root))
    return edges


def violations(package: str, root: Path = ROOT) -> list[str]:
    """Offending edges (and unparsable files, which cannot be checked) of one first-party package."""
    found: list[str] = []
    for path in sorted((root / package).rglob("*.py")):
        try:
            edges = imports_of(path, root)
        except SyntaxError as exc:
            found.append(f"{path.relative_to(root).as_posix()}:{exc.lineno} cannot be parsed: {exc.msg}")
            continue
        for edge in edges:
            top = edge.module.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                found.append(f"{edge}  ({package} may import only {sorted(ALLOWED[package]) or 'itself'})")
            if package in TORCH_FREE and top in HEAVY:
                found.append(f"{edge}  ({package} must stay torch-free)")
    return found


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports anywhere. `from a.b import c` is an edge to the
    module `a.b.c` when that is a module, else to `a.b` (a package's `__init__`)."""
    files = {_module_name(path, root): path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))}

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                for base in _resolve(node, path, root):
                    targets.update(owner(f"{base}.{a.name}") if f"{base}.{a.name}" in files else owner(base)
                                   for a in node.names)
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    found = cycles(module_graph())
    print(f"{len(found)} import cycle(s) among first-party modules:", *found, sep="\n  ")
    assert not found, f"{len(found)} import cycle(s): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_function_level_imports(tmp_path: Path) -> None:
    """A planted pair whose second edge is inside a function is one cycle; removing that edge leaves none."""
    (tmp_path / "workers" / "runtime").mkdir(parents=True)
    for package in ("workers", "workers/runtime"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "workers" / "runtime" / "driver.py").write_text("from workers.runtime import mode\n")
    (tmp_path / "workers" / "runtime" / "mode.py").write_text("def f():\n    from . import driver\n")
    assert cycles(module_graph(tmp_path)) == [["workers.runtime.driver", "workers.runtime.mode"]]
    (tmp_path / "workers" / "runtime" / "mode.py").write_text("def f():\n    return 1\n")
    assert cycles(module_graph(tmp_path)) == []


def test_rule_covers_every_first_party_package() -> None:
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert on_disk == set(PACKAGES), "a new top-level package needs a line in ALLOWED"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_rule(package: str) -> None:
    found = violations(package)
    print(f"{len(found)} offending import edge(s) in {package}:", *found, sep="\n  ")
    assert not found, f"{len(found)} import(s) break the rule of docs/architecture.md:\n  " + "\n  ".join(found)


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A planted `backend` module with each way of spelling an import is caught on each offending line."""
    (tmp_path / "backend" / "planner").mkdir(parents=True)
    (tmp_path / "backend" / "__init__.py").write_text("")
    (tmp_path / "backend" / "probe.py").write_text(
        "import workers.sample\n"
        "from streamrl import worker\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from workers.core import rollout\n"
        "def f():\n"
        "    import torch\n"
        "    from .. import workers\n"
        "from .planner import schemas\n"
        "import contract.spec\n",
        encoding="utf-8",
    )
    (tmp_path / "backend" / "broken.py").write_text("def f(:\n", encoding="utf-8")
    found = violations("backend", tmp_path)
    probe_lines = sorted(int(v.split(":")[1].split()[0]) for v in found if v.startswith("backend/probe.py"))
    assert probe_lines == [1, 2, 5, 7, 8], found  # `.planner` is backend.planner and contract is allowed
    assert any(v.startswith("backend/broken.py:1 cannot be parsed") for v in found), found


def test_contract_and_planner_import_without_torch() -> None:
    """Importing every module of `contract` and `backend.planner` (and the API app) loads no torch and no runtime."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import contract, backend.planner\n"
        "for pkg in (contract, backend.planner):\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import backend.main\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "contract" in loaded and "backend" in loaded
    assert loaded.isdisjoint({*HEAVY, "workers", "streamrl"}), sorted(loaded & {*HEAVY, "workers", "streamrl"})


def test_tests_never_import_the_tests_package() -> None:
    """The README test command runs the `pytest` console script, which does not put the checkout on sys.path:
    `from tests... import` only works under `python -m pytest`. Shared helpers are fixtures (conftest.py) or sibling
    modules on the rootdir-relative path (`from runtime_platform import ...`)."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "tests"]
    assert not offenders, offenders
