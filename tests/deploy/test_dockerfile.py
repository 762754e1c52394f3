"""Static checks of deploy/Dockerfile (Docker itself is not available in CI): what it copies exists, pins match."""

from __future__ import annotations

import re
import tomllib

from deploy_support import DEPLOY, REPO

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()


def build_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))


def test_torch_pin_matches_pyproject() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_pin,) = [d for d in deps if d.startswith("torch")]
    assert torch_pin == f"torch=={build_args()['TORCH_VERSION']}"
    assert build_args()["TORCH_VARIANT"] == "cpu", "CPU torch by default"


def test_python_311_base_and_node_stage() -> None:
    assert build_args()["BASE_IMAGE"].startswith("python:3.11")
    assert re.search(r"^FROM \$\{NODE_IMAGE\} AS frontend$", DOCKERFILE, re.M)
    assert "COPY --from=frontend /src/frontend/dist frontend/dist" in DOCKERFILE


def test_copied_paths_exist() -> None:
    for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, re.M):
        *sources, _dest = line.split()
        for source in sources:
            assert (REPO / source).exists(), f"Dockerfile copies {source}, which is not in the repository"


def test_installed_editable_so_migrations_and_dashboard_are_found() -> None:
    """backend/db/migrate.py and backend/api/static.py locate alembic.ini, migrations/ and frontend/dist from the
    source tree, so the package must run from /app, not from site-packages."""
    assert re.search(r"^RUN pip install -e \.$", DOCKERFILE, re.M)
    for needed in ("alembic.ini", "migrations/"):
        assert needed in DOCKERFILE


def test_reward_jail_installed_and_processes_not_root() -> None:
    """Python rewards need bubblewrap (workers/rewards/jail.py); Celery and everything else run as `streamrl`."""
    installs = " ".join(re.findall(r"apt-get install ([^&]+)", DOCKERFILE))
    assert "bubblewrap" in installs.split() and "libseccomp2" in installs.split()
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    assert re.search(r"useradd .*--uid 10001 .*streamrl", DOCKERFILE)
    assert "chown -R streamrl:streamrl /data" in DOCKERFILE
