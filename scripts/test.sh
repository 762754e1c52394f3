#!/usr/bin/env bash
# The test command (README): lint, type-check, unit + integration + browser tests. Needs Postgres and Redis on
# 127.0.0.1 (STREAMRL_TEST_DATABASE_URL / STREAMRL_TEST_REDIS_URL override); .ci/run starts them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check backend workers contract streamrl tests bench scripts docs
mypy
python scripts/export_openapi.py --check   # the dashboard's typed client matches the API
if [ -f frontend/package.json ] && [ -d frontend/node_modules ]; then
  (cd frontend && npm run --silent typecheck && npm run --silent test)
fi
pytest "$@"
