"""`JobSpec.agent`: the agent that drives a gateway job's episodes (docs/user-guide.md#train-an-agent-you-already-have).

Exactly one of:
- `code`: the user's Python defining `run(task, base_url, api_key) -> reward | None` (sync or `async def`). The
  platform runs it per episode in the bubblewrap jail (workers/agents/), its only network the episode's gateway at
  `base_url` (http://127.0.0.1:PORT/v1 inside the jail); its packages come from `requirements`, installed into a venv
  built once per requirements hash outside the jail and bound into it read-only.
- `url`: a remote agent service; the platform POSTs `{task, base_url, api_key, episode}` to `{url}/rollout`.

Per episode: `timeout_s` of wall clock (past it the episode fails with that reason, the job goes on); per instance:
`concurrency` episodes at once. The token limit per episode is `environment.max_episode_tokens`. `code` only:
`episodes_per_jail` consecutive episodes share a jail (one process: the code loaded once), as long as each ends
cleanly (workers/agents/jailed.py).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from contract.spec_base import StrictModel

MAX_REQUIREMENTS = 64
MAX_EPISODES_PER_JAIL = 1000
# a PEP 508 requirement without URLs or local paths: a name, extras, version specifiers, a marker
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]+\])?\s*"
                          r"((===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|!=|~=|<=|>=|<|>)\s*"
                          r"[A-Za-z0-9.*+!_-]+\s*)*)?(;[^@]*)?$")


def requirement_error(requirement: str) -> str | None:
    """Why `requirement` is not a requirement the platform installs (None: it is one)."""
    text = requirement.strip()
    if not text:
        return "is empty"
    if text.startswith("-") or "@" in text or "://" in text or "/" in text.split(";")[0]:
        return "must be a package name with optional extras and versions (no options, URLs or paths)"
    if not _REQUIREMENT.match(text):
        return "is not a valid requirement (e.g. 'openai-agents==0.24.0')"
    return None


def checked_requirements(requirements: list[str]) -> list[str]:
    """`requirements` stripped; ValueError naming the first one that is not a requirement the platform installs."""
    for index, requirement in enumerate(requirements):
        why = requirement_error(requirement)
        if why is not None:
            raise ValueError(f"requirements[{index}] {requirement[:80]!r} {why}")
    return [requirement.strip() for requirement in requirements]


class AgentSpec(StrictModel):
    """Where the agent of an `environment.type: gateway` job runs: `code` in the jail or a service at `url`."""

    code: str | None = Field(None, max_length=100_000, description="Python defining run(task, base_url, api_key) -> "
                             "reward or None (sync or async); runs in the jail, its only network the episode's "
                             "gateway")
    requirements: list[str] = Field(default_factory=list, max_length=MAX_REQUIREMENTS, description="packages for "
                                    "`code` (e.g. 'openai-agents==0.24.0'), installed from the platform's package "
                                    "index into a cached venv bound read-only into the jail")
    url: str | None = Field(None, max_length=2000, description="a remote agent service: the platform POSTs "
                            "{task, base_url, api_key, episode} to {url}/rollout")
    concurrency: int = Field(4, ge=1, le=256, description="episodes one generation instance runs at once")
    timeout_s: float = Field(300.0, gt=0, le=86_400, description="wall-clock limit of one episode's agent (one "
                             "POST to url); past it the episode fails with that reason, not the job")
    memory_mb: int = Field(2048, ge=256, le=16_384, description="code: address-space limit of the jailed agent")
    episodes_per_jail: int = Field(32, ge=1, le=MAX_EPISODES_PER_JAIL, description="code: consecutive episodes one "
                                   "jail runs, loading the code (its imports) once: the process and its module "
                                   "globals carry over between them (the scratch is wiped; each episode's token "
                                   "works only during it; a failed episode ends its jail). 1: a fresh jail per "
                                   "episode, nothing carried over, each paying the imports' CPU")
    retries: int = Field(2, ge=0, le=10, description="url: retries of a POST that failed to connect")

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, requirements: list[str]) -> list[str]:
        return checked_requirements(requirements)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"url must be an http(s) URL (got {url[:80]!r})")
        return url.rstrip("/")

    @model_validator(mode="after")
    def _one_place(self) -> AgentSpec:
        if (self.code is None) == (self.url is None):
            raise ValueError("give exactly one of `code` (run in the jail) or `url` (a remote agent service)")
        if self.url is not None and self.requirements:
            raise ValueError("`requirements` are installed for `code`; a remote agent at `url` brings its own")
        if self.code is not None:
            try:
                compile(self.code, "<agent>", "exec")
            except (SyntaxError, ValueError) as exc:
                raise ValueError(f"code does not compile: {exc}") from None
            except (RecursionError, MemoryError):
                raise ValueError("code does not compile: it is nested too deeply") from None
            if not re.search(r"^(async\s+)?def\s+run\s*\(", self.code, re.MULTILINE):
                raise ValueError("code must define run(task, base_url, api_key)")
        return self


def requirements_key(requirements: list[str], python: str) -> str:
    """The cache key of an agent's packages: the requirements (order kept: pip resolves them together) and the
    interpreter they are built for."""
    import hashlib

    return hashlib.sha256(json.dumps([python, *requirements]).encode()).hexdigest()[:24]


def pip_install_argv(python: str, requirements: list[str], *, target: str | None) -> list[str]:
    """pip with the host's own configuration (index, extra indexes, certificates): into `target`, or resolve only
    (`target` None: `--dry-run`, nothing installed)."""
    argv = [python, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
            "--no-warn-script-location", "--ignore-installed"]
    argv += ["--target", target] if target is not None else ["--dry-run"]
    return [*argv, "--", *requirements]


_PIP_UNRESOLVED = re.compile(r"(?:No matching distribution found for|Could not find a version that satisfies the "
                             r"requirement)\s+(\S+)")


def pip_failure(output: str, requirements: list[str], field: str = "agent.requirements") -> str:
    """What pip's output says went wrong, naming the requirement (`agent.requirements[i]`, or `field`'s) where it
    can."""
    lines = [line for line in output.splitlines() if line.strip() and "Location 'file:" not in line]
    found = _PIP_UNRESOLVED.search(output)
    if found:
        name = found.group(1)
        for index, requirement in enumerate(requirements):
            if requirement.replace(" ", "").startswith(name.split("[")[0].split("=")[0].split("<")[0].split(">")[0]):
                return (f"{field}[{index}] {requirement!r}: no matching distribution on the package "
                        f"index ({name})")
        return f"{field}: {name}: no matching distribution on the package index"
    if "ResolutionImpossible" in output or "conflict" in output.lower():
        tail = " ".join(line.strip() for line in lines if "conflict" in line.lower() or "requested" in line)[:400]
        return f"{field}: the requirements conflict: {tail or 'pip found no consistent set'}"
    errors = [line.strip() for line in lines if line.lstrip().startswith("ERROR")]
    return f"{field}: pip failed: {' '.join(errors or lines[-3:])[:400]}"
