"""Write the control plane's OpenAPI schema to frontend/openapi.json (input of `npm run gen:api`).

Usage: .venv/bin/python scripts/export_openapi.py [--out PATH] [--check]
`--check` exits 1 when the file on disk differs from the app's schema (CI guard against a stale typed client).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "frontend" / "openapi.json"


APP_FACTORIES = ("backend.main", "backend.api.app")  # modules that may define `create_app()`


def load_app_factory() -> Any:
    """The control plane's `create_app` (its module moved once; accept either home)."""
    for module_name in APP_FACTORIES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # this home does not exist; a missing dependency inside it propagates
            raise
        return module.create_app
    raise SystemExit(f"no create_app() in any of {', '.join(APP_FACTORIES)}")


def render_schema() -> str:
    """The app's OpenAPI document as stable, pretty JSON (sorted keys, trailing newline)."""
    sys.path.insert(0, str(REPO))
    schema = load_app_factory()().openapi()
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date instead of writing it")
    args = parser.parse_args()
    text = render_schema()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run scripts/export_openapi.py && (cd frontend && npm run gen:api)")
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text)} bytes, {len(json.loads(text).get('paths', {}))} paths)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
