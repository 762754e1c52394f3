"""The docs stay true: the JobSpec reference matches spec.py, links resolve, quoted `streamrl` commands parse, and the
files code docstrings and comments cite exist."""

from __future__ import annotations

import ast
import io
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from deploy_support import REPO
from test_manifests import check_streamrl_invocation

DOCS = REPO / "docs"
OWN_PAGES = ["README.md", "user-guide.md", "operator.md", "architecture.md", "jobspec.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)  # every fenced block, so a python block's end never opens one
SHELL = ("", "bash", "sh", "console")
INLINE = re.compile(r"(?<!`)`(streamrl [^`]+)`(?!`)")


def test_jobspec_reference_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(DOCS / "gen_jobspec_reference.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("page", OWN_PAGES)
def test_relative_links_resolve(page: str) -> None:
    path = DOCS / page
    for target, _ in LINK.findall(path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{page}: broken link {target}"


def quoted_streamrl_commands(text: str) -> list[list[str]]:
    """`streamrl ...` in shell blocks and inline code, cut at pipes/&&/comments (placeholder values are fine)."""
    found = []
    blocks = [block for language, block in FENCE.findall(text) if language in SHELL]
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    for line in lines + INLINE.findall(text.replace("\n", " ")):
        for part in re.split(r"\s(?:&&|\|\||\||;|&)\s?", line.split(" #", 1)[0]):
            words = shlex.split(part.strip().rstrip("&")) if part.strip() else []
            starts = [i for i, word in enumerate(words) if Path(word).name == "streamrl" and i + 1 < len(words)]
            starts = [i for i in starts if i == 0 or not words[i - 1].startswith("-")]  # not `kubectl -n streamrl`
            if starts:
                found.append(words[starts[0] + 1 :])
    return found


@pytest.mark.parametrize("page", ["user-guide.md", "operator.md"])
def test_quoted_commands_are_real(page: str) -> None:
    commands = quoted_streamrl_commands((DOCS / page).read_text())
    assert commands, f"{page}: expected some streamrl commands"
    for args in commands:
        check_streamrl_invocation(args)


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = [line.lstrip("#").strip() for line in markdown.splitlines() if re.match(r"#{1,6} ", line)]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


CITATION = re.compile(r"docs/architecture\.md#([\w-]+)")
CITING_TREES = ("contract", "backend", "workers", "streamrl", "bench", "tests", "scripts", "docs")


def citations() -> list[tuple[str, str]]:
    """(path:line, anchor) of every citation of a docs/architecture.md section in the code and docs."""
    found = []
    for tree in CITING_TREES:
        for path in sorted((REPO / tree).rglob("*")):
            if path.suffix not in (".py", ".md") or not path.is_file():
                continue
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                found += [(f"{path.relative_to(REPO)}:{lineno}", anchor) for anchor in CITATION.findall(line)]
    return found


def test_architecture_citations_name_real_sections() -> None:
    anchors = heading_anchors((DOCS / "architecture.md").read_text())
    assert {"processes-and-queues", "data-flow-of-one-job", "packages-and-the-import-rule", "the-reporter-seam",
            "the-papers-algorithms"} <= anchors
    cited = citations()
    assert any(place.startswith("backend/") for place, _ in cited)  # the scan sees the code's citations
    broken = [f"{place} -> #{anchor}" for place, anchor in cited if anchor not in anchors]
    assert not broken, "citations of missing docs/architecture.md sections:\n  " + "\n  ".join(broken)
    in_page = re.findall(r"\]\(#([\w-]+)\)", (DOCS / "architecture.md").read_text())
    assert set(in_page) <= anchors, set(in_page) - anchors


def test_nothing_cites_the_design_notes() -> None:
    """The design notes are not in the repository: code and docs cite docs/architecture.md instead."""
    offenders = []
    for tree in CITING_TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if re.search(r"DESIGN\s*§", line) and path != Path(__file__):
                    offenders.append(f"{path.relative_to(REPO)}:{lineno}")
    assert not offenders, "cite docs/architecture.md#<section>, not the design notes:\n  " + "\n  ".join(offenders)


CITED_PATH = re.compile(
    r"(?<![\w./~-])((?:contract|backend|workers|streamrl|tests|bench|scripts|docs|frontend|deploy|migrations)"
    r"/[\w./-]*\w\.(?:py|md|ts|tsx|mjs|sh|json|ya?ml|toml))\b"
)


def prose_of(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a Python file's docstrings and comments: where code cites other files."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                found.append((node.body[0].lineno, doc))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def test_files_cited_in_docstrings_and_comments_exist() -> None:
    """A docstring or comment naming a repository file (`workers/core/learn.py`, `tests/...`) names one that exists."""
    missing, cited = [], 0
    for tree in CITING_TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            for lineno, text in prose_of(path):
                for target in CITED_PATH.findall(text):
                    cited += 1
                    if not (REPO / target).exists():
                        missing.append(f"{path.relative_to(REPO)}:{lineno} cites {target}")
    assert cited > 50, cited  # the scan sees the code's citations
    assert not missing, "docstrings/comments cite files that do not exist:\n  " + "\n  ".join(missing)
