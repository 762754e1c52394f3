#!/usr/bin/env bash
# One-time setup: the host packages the platform needs (bubblewrap, scripts/host_packages.sh), and .venv/ at the repo
# root with everything else (Python packages, node via nodeenv linked to the system node, the built dashboard).
# Idempotent: rerunning only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then PY=$cand; break; fi
  done
fi
[ -n "$PY" ] || { echo "setup: need Python >= 3.11" >&2; exit 1; }

scripts/host_packages.sh  # bubblewrap (the reward jail): installed as root with apt, else the command is printed

# Three independent installs run side by side (setup's wall time is mostly waiting on pip and npm): the dashboard
# (npm with the system node), the OpenEnv servers' venv, and .venv itself (then the optional vLLM into it).
[ -f frontend/package.json ] && ! command -v node >/dev/null &&
  { echo "setup: the dashboard needs node >= 20 on PATH (apt-get install nodejs npm)" >&2; exit 1; }
build_dashboard() {
  cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build
}
# The OpenEnv environment servers the tests start (tests/integration/openenv_guess_server.py) run in a venv of their
# own, as an OpenEnv server runs in its own container: openenv-core 0.3 needs mcp >= 2.3 through fastmcp, and
# verifiers 0.4 (in .[dev]) pins mcp 2.0.0. The platform itself speaks the protocol and needs neither.
openenv_venv() {
  { [ -x .venv-openenv/bin/python ] || "$PY" -m venv .venv-openenv; } &&
    .venv-openenv/bin/python -m pip install -q 'openenv-core>=0.3,<0.4' uvicorn
}
pids=()
if [ -f frontend/package.json ]; then build_dashboard & pids+=($!); fi
openenv_venv & pids+=($!)

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# Optional vLLM (CPU build) engine: scripts/install_vllm.sh, when present and STREAMRL_VLLM=1.
if [ "${STREAMRL_VLLM:-0}" = "1" ] && [ -x scripts/install_vllm.sh ]; then scripts/install_vllm.sh; fi
# node linked from the system into the venv (nodeenv cannot download node here), for `npm run ...` with the venv's PATH.
if [ -f frontend/package.json ] && [ ! -x .venv/bin/node ]; then .venv/bin/nodeenv -p --node=system >/dev/null; fi

for pid in "${pids[@]}"; do wait "$pid" || { echo "setup: a background install failed (above)" >&2; exit 1; }; done
echo "setup: done (.venv ready)"
