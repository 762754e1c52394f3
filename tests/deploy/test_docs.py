"""The docs stay true: the JobSpec reference matches spec.py, links resolve, and quoted `streamrl` commands parse."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_support import REPO
from test_manifests import check_streamrl_invocation

DOCS = REPO / "docs"
OWN_PAGES = ["README.md", "user-guide.md", "operator.md", "architecture.md", "jobspec.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
FENCE = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", re.S)
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
    lines = [line for block in FENCE.findall(text) for line in block.replace("\\\n", " ").splitlines()]
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
