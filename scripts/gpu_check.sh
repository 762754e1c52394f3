#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, build a ~100M-parameter Llama locally (no model hub), run an async
# job with the vLLM engine and p2p weight sync end to end on CUDA through the whole platform (`streamrl up`: API,
# controller, one generation and one training worker pinned to GPU 0), and print tokens/s, weight-sync seconds and
# the per-iteration breakdown. Without a GPU (or with --cpu) it runs the same path on CPU: 1M model, hf engine.
#
#   scripts/gpu_check.sh [--cpu] [--iterations N] [--benches | --no-benches]
#
# The job's line is `RESULT mode=... tokens_per_s=...`. Then (by default on a GPU machine, with --benches anywhere)
# the three comparisons of issue #26, each printing its own RESULT lines: bench/multitenant.py (4 LoRA jobs on one
# shared engine vs one engine each; then bench/multi_lora_forward.py, the shared engine's two multi-LoRA forwards;
# bench/train_memory.py, 4 LoRA trainers in 4 processes vs one shared training process, GPU memory included),
# bench/modes.py --partial-rollouts (async with in-flight weight updates vs draining), bench/speculative.py (grouped
# speculative decoding vs none on the hf engine: tail tokens/s, sync and async samples/s) and bench/peer_trl.py (the
# platform's defaults vs TRL's GRPOTrainer). On a GPU all but peer_trl run with --device cuda (every engine and
# trainer on GPU 0); peer_trl pins CPU core sets. Record what they print.
#
# PYTHON: the interpreter with the project installed (default .venv/bin/python; scripts/setup.sh makes it, and
# STREAMRL_VLLM=1 scripts/setup.sh adds vLLM). Everything it writes lives in a temporary directory, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gpu iterations="" benches=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --iterations) iterations="$2"; shift ;;
    --benches) benches=1 ;;
    --no-benches) benches=0 ;;
    *) echo "usage: scripts/gpu_check.sh [--cpu] [--iterations N] [--benches | --no-benches]" >&2; exit 2 ;;
  esac
  shift
done
PYTHON="${PYTHON:-.venv/bin/python}"
if ! "$PYTHON" -c "import streamrl, torch" 2>/dev/null; then
  echo "gpu_check: $PYTHON cannot import the project and torch: run scripts/setup.sh (or set PYTHON)" >&2
  exit 2
fi
if [ "$mode" = gpu ] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA device visible to torch: running the CPU path"
  mode=cpu
fi
if [ "$mode" = gpu ]; then
  preset=tiny-100m devices=0 iterations="${iterations:-20}"
  if "$PYTHON" -c "import vllm" 2>/dev/null; then
    engine=vllm vllm_settings='"vllm": {"dtype": "bfloat16", "gpu_memory_utilization": 0.3},'
  else
    echo "gpu_check: vLLM is not installed (STREAMRL_VLLM=1 scripts/setup.sh): the job and benches use the hf engine"
    engine=hf vllm_settings=""
  fi
else
  preset=tiny-1m engine=hf devices="" iterations="${iterations:-6}" vllm_settings=""
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/streamrl-gpu-check.XXXXXX")"
export HOME="$work/home" STREAMRL_DATA_DIR="$work/data" STREAMRL_DEVICE="$([ "$mode" = gpu ] && echo cuda || echo cpu)"
unset STREAMRL_DATABASE_URL STREAMRL_REDIS_URL STREAMRL_URL
mkdir -p "$HOME" "$STREAMRL_DATA_DIR"
port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cli() { "$PYTHON" -m streamrl.cli.main "$@"; }
up_pid=""
cleanup() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "gpu_check: mode=$mode preset=$preset engine=$engine iterations=$iterations (work dir $work)"
cli make-model --preset "$preset" --out "$STREAMRL_DATA_DIR/artifacts/models/gpu-check" >/dev/null
up_args=(up --port "$port" --api-workers 1)
[ -n "$devices" ] && up_args+=(--generation-devices "$devices" --training-devices "$devices")
"$PYTHON" -m streamrl.cli.main "${up_args[@]}" >"$work/up.log" 2>&1 &  # not through `cli`: $! must be up's pid
up_pid=$!
for _ in $(seq 180); do
  grep -q "logged in\|admin" "$work/up.log" 2>/dev/null && cli whoami >/dev/null 2>&1 && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$work/up.log"; echo "gpu_check: streamrl up exited" >&2; exit 1; }
  sleep 1
done
cli models register gpu-check models/gpu-check >/dev/null
cat >"$work/spec.json" <<EOF
{"name": "gpu-check", "model": "gpu-check", "mode": "async", "max_staleness": 1, "seed": 0,
 "dataset": {"builtin": "long_tail", "num_prompts": 256, "eval_prompts": 0},
 "reward": {"type": "length_penalty", "params": {"target": 24}},
 "algorithm": {"name": "grpo", "group_size": 8},
 "generation": {"engine": "$engine", $vllm_settings "instances": 1, "batch_size": 64, "max_tokens": 48},
 "training": {"iterations": $iterations, "prompts_per_iteration": 8, "micro_batch_size": 32, "lr": 1e-4,
              "weight_sync": "p2p", "eval_every": 0}}
EOF
job_id="$(cli --json jobs submit "$work/spec.json" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
echo "gpu_check: job $job_id submitted"
status=""
for _ in $(seq 1800); do
  status="$(cli --json jobs get "$job_id" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["status"])')"
  case "$status" in succeeded|failed|cancelled) break ;; esac
  sleep 1
done
cli jobs iterations "$job_id" \
  --keys tokens_per_s,samples_per_s,iteration_seconds,gen_seconds,train_seconds,trainer_idle_seconds,weight_sync_seconds,weight_sync_fraction
cat >"$work/summary.py" <<'PY'
import json, os, statistics, sys
rows = [r["metrics"] for r in json.load(sys.stdin)["data"]][1:]  # the first iteration includes warm-up
def median(key):
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")
print(f"RESULT mode={os.environ['MODE']} status={os.environ['STATUS']} iterations={len(rows) + 1} "
      f"tokens_per_s={median('tokens_per_s'):.1f} iteration_s={median('iteration_seconds'):.3f} "
      f"weight_sync_s={median('weight_sync_seconds'):.4f} weight_sync_fraction={median('weight_sync_fraction'):.4f}")
PY
cli --json jobs iterations "$job_id" | MODE="$mode" STATUS="$status" "$PYTHON" "$work/summary.py"
[ "$status" = succeeded ] || { tail -50 "$work/up.log"; echo "gpu_check: job $job_id ended $status" >&2; exit 1; }
[ -n "$benches" ] || benches=$([ "$mode" = gpu ] && echo 1 || echo 0)
if [ "$benches" = 1 ]; then
  kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""  # the benches start their own processes
  bench_device=$([ "$mode" = gpu ] && echo cuda || echo cpu)
  echo "gpu_check: bench/multitenant.py --device $bench_device"
  "$PYTHON" bench/multitenant.py --presets tiny-15m,tiny-100m --max-tokens 16 --device "$bench_device"
  echo "gpu_check: bench/multi_lora_forward.py --device $bench_device"
  "$PYTHON" bench/multi_lora_forward.py --device "$bench_device"
  echo "gpu_check: bench/train_memory.py --device $bench_device"
  "$PYTHON" bench/train_memory.py --presets tiny-100m --rounds 1 --device "$bench_device"
  echo "gpu_check: bench/modes.py --partial-rollouts --engine $engine --device $bench_device"
  "$PYTHON" bench/modes.py --partial-rollouts --iterations 10 --max-tokens 512 --max-staleness 2 --repeats 3 \
    --engine "$engine" --device "$bench_device" --preset "$([ "$mode" = gpu ] && echo tiny-15m || echo tiny-1m)"
  echo "gpu_check: bench/speculative.py --e2e --device $bench_device"
  "$PYTHON" bench/speculative.py --e2e --device "$bench_device" --e2e-iterations 10 --e2e-repeats 2 \
    --preset "$([ "$mode" = gpu ] && echo tiny-15m || echo tiny-1m)"
  # TRL runs in its own venv, which the bench installs from PyPI on first use: skipped where PyPI is unreachable
  echo "gpu_check: bench/peer_trl.py"
  "$PYTHON" bench/peer_trl.py || echo "gpu_check: bench/peer_trl.py failed (its TRL venv needs PyPI the first time)"
fi
