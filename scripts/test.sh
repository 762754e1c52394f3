#!/usr/bin/env bash
# The test command (README): lint, type-check, unit + integration + browser tests. Needs Postgres and Redis on
# 127.0.0.1 (STREAMRL_TEST_DATABASE_URL / STREAMRL_TEST_REDIS_URL override); .ci/run starts them.
#
#   bash scripts/test.sh                  # the whole suite, in two parts (below)
#   bash scripts/test.sh --split PATHS    # the same two parts over PATHS only
#   bash scripts/test.sh PYTEST_ARGS      # one plain pytest run (e.g. tests/planner -x)
#
# The two parts: tests marked neither integration, e2e nor slow run with pytest-xdist on every core (each worker
# process gets its own Postgres database and Redis db, tests/conftest.py); the integration, browser and slow tests
# then run one at a time (they start Celery workers, servers and browsers that want the cores to themselves). The
# command fails when either part fails; each prints pytest's own summary.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check backend workers contract streamrl tests bench scripts docs
mypy
python scripts/export_openapi.py --check   # the dashboard's typed client matches the API
if [ -f frontend/package.json ] && [ -d frontend/node_modules ]; then
  (cd frontend && npm run --silent typecheck && npm run --silent test)
fi

if [ $# -gt 0 ] && [ "$1" != "--split" ]; then
  exec pytest "$@"
fi
[ "${1:-}" = "--split" ] && shift
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests)
workers="${STREAMRL_TEST_WORKERS:-$(nproc)}"
heavy="integration or e2e or slow"

started=$SECONDS
status_fast=0
pytest -n "$workers" --dist loadfile --durations=15 -m "not ($heavy)" "${paths[@]}" || status_fast=$?
fast_s=$((SECONDS - started))
status_heavy=0
pytest --durations=40 -m "$heavy" "${paths[@]}" || status_heavy=$?
heavy_s=$((SECONDS - started - fast_s))
# exit status 5: the part collected no test (a subset without heavy tests, say): not a failure
[ "$status_fast" -eq 5 ] && status_fast=0
[ "$status_heavy" -eq 5 ] && status_heavy=0
echo "scripts/test.sh: fast part (-n $workers) exit $status_fast in ${fast_s}s; integration/e2e/slow part exit" \
     "$status_heavy in ${heavy_s}s"
[ "$status_fast" -eq 0 ] && [ "$status_heavy" -eq 0 ]
