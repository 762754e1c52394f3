"""docs/api.md's route table lists exactly the routes the app serves (method + path, parameter names aside)."""

from __future__ import annotations

import re
from pathlib import Path

from deploy_support import REPO

from backend.main import API_PREFIX, create_app
from contract.settings import Settings

ROW = re.compile(r"^\| ((?:GET|POST|PUT|PATCH|DELETE) [^|]+?) \|", re.M)


def normalise(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path.rstrip("/"))


def documented_routes() -> set[tuple[str, str]]:
    """Rows like `POST /jobs/{id}/cancel, /pause, /resume` expand to three routes; `(root, ...)` notes are dropped."""
    routes = set()
    for cell in ROW.findall((REPO / "docs" / "api.md").read_text()):
        method, rest = cell.split(" ", 1)
        rest = re.sub(r"\(.*?\)", "", rest).strip()
        first, *siblings = [part.strip() for part in rest.split(",")]
        routes.add((method, normalise(first)))
        parent = first.rsplit("/", 1)[0]
        routes |= {(method, normalise(parent + sibling)) for sibling in siblings}
    return routes


def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(Settings(_env_file=None, data_dir=tmp_path, secret_key="k" * 32))
    routes = {
        (method.upper(), normalise(path.removeprefix(API_PREFIX)))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    return routes | {("GET", "/metrics")}  # Prometheus, at the root and outside the OpenAPI schema


def test_api_doc_matches_the_app(tmp_path: Path) -> None:
    documented, served = documented_routes(), served_routes(tmp_path)
    assert not served - documented, f"routes missing from docs/api.md: {sorted(served - documented)}"
    assert not documented - served, f"docs/api.md lists routes the app does not serve: {sorted(documented - served)}"
