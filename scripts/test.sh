#!/usr/bin/env bash
# The test command (README): lint, type-check, unit + integration + browser tests. Needs Postgres and Redis on
# 127.0.0.1 (STREAMRL_TEST_DATABASE_URL / STREAMRL_TEST_REDIS_URL override); .ci/run starts them.
#
#   bash scripts/test.sh                  # the whole suite, in two parts (below)
#   bash scripts/test.sh --split PATHS    # the same two parts over PATHS only
#   bash scripts/test.sh PYTEST_ARGS      # one plain pytest run (e.g. tests/planner -x)
#
# The three parts: tests marked neither integration, e2e, slow nor serial run with pytest-xdist on every core (each
# worker process gets its own Postgres database and Redis db, tests/conftest.py); the integration, browser and slow
# tests then run on STREAMRL_TEST_HEAVY_WORKERS (default 2) xdist workers, a test file per worker (they start Celery
# workers, servers and browsers of their own, on free ports and private databases); the `serial` tests (schemathesis:
# its lazily generated tests are not run by xdist workers) last, one at a time. The command fails when any part
# fails; each prints pytest's own summary.
#
# A part whose tests failed reruns just those once, one at a time (pytest --lf, no xdist). Tests that pass on the
# rerun are printed as FLAKY lines (and the part passes): a failure that repeats fails the command. Timing on a
# loaded 2-core machine, not logic, was every CI failure of the last rounds; each FLAKY line is a bug to fix, named
# in the log.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# The suite starts hundreds of Python processes (xdist workers, API servers, Celery workers, task processes, jails):
# let the first compile the project's modules and pytest's rewritten tests into __pycache__ for the rest, whatever
# the machine's default (PYTHONDONTWRITEBYTECODE is set on CI's machines; it costs each process ~1 s of CPU).
unset PYTHONDONTWRITEBYTECODE
ruff check backend workers contract streamrl tests bench scripts docs
mypy & mypy_pid=$!  # one core for ~2 min on a fresh clone: the other runs the checks below meanwhile
python scripts/export_openapi.py --check   # the dashboard's typed client matches the API
if [ -f frontend/package.json ] && [ -d frontend/node_modules ]; then
  (cd frontend && npm run --silent typecheck && npm run --silent test)
fi
wait "$mypy_pid"

if [ $# -gt 0 ] && [ "$1" != "--split" ]; then
  exec pytest "$@"
fi
[ "${1:-}" = "--split" ] && shift
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests)
workers="${STREAMRL_TEST_WORKERS:-$(nproc)}"
heavy_workers="${STREAMRL_TEST_HEAVY_WORKERS:-2}"
heavy="integration or e2e or slow"

# run_part NAME MARK_EXPR PYTEST_ARGS...: the part's tests (-m MARK_EXPR), then, when some failed (exit 1), those
# alone once more, one at a time. Exit status 5 (no test collected: a subset without heavy tests, say) is a pass.
LASTFAILED=.pytest_cache/v/cache/lastfailed
run_part() {
  local name=$1 expr=$2 status=0
  shift 2
  rm -f "$LASTFAILED"  # from here on it names this part's failures only
  pytest -m "$expr" "$@" "${paths[@]}" || status=$?
  [ "$status" -eq 5 ] && return 0
  [ "$status" -ne 1 ] && return "$status"
  if [ ! -f "$LASTFAILED" ]; then  # pytest kept no record of which failed (seen with schemathesis' lazy tests)
    echo "scripts/test.sh: $name part: no record of its failed tests; rerunning the part once"
    pytest -m "$expr" "${paths[@]}" || return $?
    echo "FLAKY ($name part: failed, then passed when the part was rerun)"
    return 0
  fi
  local failed
  failed=$(python -c 'import json,sys; print("\n".join(sorted(json.load(open(sys.argv[1])))))' "$LASTFAILED")
  echo "scripts/test.sh: $name part: rerunning its failed tests once:"
  echo "$failed"
  pytest --lf --last-failed-no-failures none -m "$expr" "${paths[@]}" || return $?
  # (a loop, not sed: part names hold slashes, as in integration/e2e/slow)
  while IFS= read -r test_id; do echo "FLAKY ($name part: failed, then passed when rerun): $test_id"; done <<<"$failed"
}

# The fast part's workers write the files that hold its deselected (heavy and serial) tests (tests/conftest.py): the
# later parts collect just those (~110 of ~250 files; the serial part the 1 of serial tests), not every module once
# per process (measured: all ~27 s of CPU, the heavy files ~14 s).
deselected=.pytest_cache/deselected-files
mkdir -p .pytest_cache && rm -f "$deselected" "$deselected.serial"
started=$SECONDS
status_fast=0
run_part fast "not ($heavy or serial)" -n "$workers" --dist loadfile --durations=15 --deselected-files "$deselected" \
  || status_fast=$?
fast_s=$((SECONDS - started))
# (as given when the fast part's collection never finished, or when they name tests: the lists name whole files)
narrow=false
[ -f "$deselected" ] && [[ "${paths[*]}" != *::* ]] && narrow=true
if $narrow; then
  mapfile -t paths <"$deselected"
fi
status_heavy=0
status_serial=0
if [ ${#paths[@]} -gt 0 ]; then  # none: the paths hold no heavy or serial test
  run_part integration/e2e/slow "($heavy) and not serial" -n "$heavy_workers" --dist loadfile --durations=40 \
    || status_heavy=$?
fi
heavy_s=$((SECONDS - started - fast_s))
if $narrow; then
  mapfile -t paths <"$deselected.serial"
fi
if [ ${#paths[@]} -gt 0 ]; then
  run_part serial "serial" --durations=5 || status_serial=$?
fi
serial_s=$((SECONDS - started - fast_s - heavy_s))
echo "scripts/test.sh: fast part (-n $workers) exit $status_fast in ${fast_s}s; integration/e2e/slow part" \
     "(-n $heavy_workers) exit $status_heavy in ${heavy_s}s; serial part exit $status_serial in ${serial_s}s"
[ "$status_fast" -eq 0 ] && [ "$status_heavy" -eq 0 ] && [ "$status_serial" -eq 0 ]
