#!/usr/bin/env bash
# The prepared GPU check (issue 37): from a plain copy of the checkout, with the machine's own
# Python and packages (no install step, no network), within ~8 minutes, everything written to
# one folder:
#   summary.txt      device, versions and every part's table (read this first)
#   suite_cpu.log    the full test suite on the CPU backend (JAX_PLATFORMS=cpu, -n 8): the
#                    check that this JAX release runs flowlite correctly
#   suite_gpu.log    the test files that touch devices, dtypes and the executor, on the GPU
#   parts.log        the GPU parts' own output (bench/gpu_check.py: train.py on every model,
#                    bench rows against JAX, GPT-2-small MFU, generation, fused CartPole)
#   gpu_check.json   every number
# Without a GPU the GPU parts print "no GPU" and are skipped; the exit status is 0 either way
# (the findings are in the files).
#
#   bash bench/gpu_check.sh [OUTDIR] [--no-suite] [--parts "train bench gpt2 cartpole"]
set -u
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-gpu_check_out}
SUITE=1
PARTS=${PARTS:-"train gpt2 bench cartpole profile"}
SMOKE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-suite) SUITE=0 ;;
    --parts) PARTS="$2"; shift ;;
    --smoke) SMOKE="--smoke" ;;      # the GPU parts at toy sizes on the CPU (checks the script)
    *) OUT_DIR="$1" ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
TMP_DIR=$(mktemp -d /tmp/gpu_check.XXXXXX)
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# several processes share the GPU (tests, train.py runs, PyTorch): no process takes 75% of it
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export FLOWLITE_CACHE_DIR="$TMP_DIR/cache"
START=$(date +%s)
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

say "flowlite GPU check — $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+changes')"
say "host: $(nproc) cpus, $(uname -m), python $($PY -c 'import sys; print(sys.version.split()[0])')"
if command -v nvidia-smi >/dev/null 2>&1; then
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
else
  say "gpu: no nvidia-smi"
fi
$PY - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib.metadata as md
v = []
for d in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "optax", "numpy", "torch",
          "pytest", "pytest-xdist", "hypothesis", "safetensors"):
    try:
        v.append(f"{d} {md.version(d)}")
    except md.PackageNotFoundError:
        v.append(f"{d} -")
print("versions: " + ", ".join(v))
import jax
try:
    gpus = jax.devices("gpu")
except RuntimeError:
    gpus = []
print("jax devices:", jax.devices(), "| GPU:", gpus[0].device_kind if gpus else
      "no GPU (JAX sees none): the GPU parts will be skipped")
import flowlite
from flowlite.engine import xla_flags
print("flowlite XLA:CPU tuning:", xla_flags.chosen)
EOF
YNN=--xla_cpu_experimental_ynn_fusion_type=-individual_convolution
say "XLA:CPU flag $YNN: $(JAX_PLATFORMS=cpu XLA_FLAGS=$YNN FLOWLITE_XLA_TUNING=0 timeout 60 $PY -c \
    'import jax.numpy as j; print(float(j.ones(3).sum()))' >/dev/null 2>&1 && echo accepted \
    || echo REJECTED) by this jaxlib"
HAS_GPU=$($PY -c 'import jax
try:
    print(int(bool(jax.devices("gpu"))))
except RuntimeError:
    print(0)' 2>/dev/null || echo 0)

XDIST=""
if $PY -c 'import xdist' 2>/dev/null; then
  N=$(nproc); [ "$N" -gt ${SUITE_WORKERS:-8} ] && N=${SUITE_WORKERS:-8}
  XDIST="-n $N"
fi

# 1. the suite on the CPU backend, in the background (the GPU parts need few host cores)
SUITE_PID=""
if [ "$SUITE" = 1 ]; then
  (JAX_PLATFORMS=cpu timeout ${SUITE_TIMEOUT:-240} $PY -m pytest $XDIST -p no:cacheprovider \
      -o addopts="" -q -rf --tb=short > "$OUT_DIR/suite_cpu.log" 2>&1
   echo "exit $?" >> "$OUT_DIR/suite_cpu.log") &
  SUITE_PID=$!
fi

part() {
  timeout "$2" $PY bench/gpu_check.py --part "$1" --out "$OUT_DIR" --tmp "$TMP_DIR" $SMOKE \
      --budget $(( $2 - 15 )) >> "$OUT_DIR/parts.log" 2>&1
  [ $? = 124 ] && echo "$1: timed out after $2 s" >> "$OUT_DIR/parts.log"
  say "part $1 done at $(( $(date +%s) - START )) s"
}
: > "$OUT_DIR/parts.log"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# 2. GPT-2-small first: the device does its work, so the suite beside it costs it little
has gpt2 && part gpt2 ${GPT2_TIMEOUT:-150}

# 3. device-facing test files on the GPU
if [ "$HAS_GPU" = 1 ]; then
  GPU_XDIST=""; [ -n "$XDIST" ] && GPU_XDIST="-n 4"
  timeout ${GPU_TESTS_TIMEOUT:-90} $PY -m pytest -q $GPU_XDIST -rf --tb=short -p no:cacheprovider -o addopts="" \
      tests/test_dtypes.py tests/test_executor.py tests/test_matmul_precision.py \
      tests/test_amp_compile_dist.py tests/test_compile.py tests/test_checks.py \
      tests/test_creation_random.py > "$OUT_DIR/suite_gpu.log" 2>&1
  rc=$?
  say "GPU test files: $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/suite_gpu.log" | tail -1) (exit $rc)"
  grep -E '^FAILED' "$OUT_DIR/suite_gpu.log" | head -20 | tee -a "$SUMMARY"
else
  say "GPU test files: no GPU — skipped"
fi

# 4. train.py on every model (correctness and compile counts; steps/s beside the suite)
has train && part train ${TRAIN_TIMEOUT:-150}

# 5. the host-sensitive timings once the suite is done
if [ -n "$SUITE_PID" ]; then
  wait "$SUITE_PID"
  say "CPU suite ($XDIST): $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/suite_cpu.log" | tail -1) ($(tail -1 "$OUT_DIR/suite_cpu.log"))"
  grep -E '^FAILED' "$OUT_DIR/suite_cpu.log" | head -20 | tee -a "$SUMMARY"
fi
has profile && part profile ${PROFILE_TIMEOUT:-60}
has bench && part bench ${BENCH_TIMEOUT:-120}
has cartpole && part cartpole ${CARTPOLE_TIMEOUT:-60}
$PY bench/gpu_check.py --summary --out "$OUT_DIR" --tmp "$TMP_DIR" $SMOKE >/dev/null 2>&1 \
  || say "summary failed"
say "total $(( $(date +%s) - START )) s"
exit 0
