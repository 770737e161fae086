#!/usr/bin/env bash
# Prove the GPU path of longctx_nb on a machine with a CUDA GPU, in steps of at most about ten minutes each:
#
#   bash examples/gpu_check.sh                 # every step, in order
#   bash examples/gpu_check.sh kernels         # 1. install mamba-ssm and causal-conv1d: wheels from $WHEELS, else build them
#   bash examples/gpu_check.sh cells           # 2. run every notebook cell marked `#| cuda` (nbdev_test --flags cuda)
#   bash examples/gpu_check.sh compare         # 3. CUDA scan, conv and FlexAttention against the references (values, gradients)
#   bash examples/gpu_check.sh blocks          # 4. tokens/s, MFU and peak memory of each block at 2K, 8K and 32K in bf16
#   bash examples/gpu_check.sh fits            # 5. the longest sequence that fits, per block
#
# Steps 3-5 add their rows to $OUT and rewrite $OUT/gpu_table.md from every step found there (longctx_bench gpu).
# Environment (all optional):
#   PYTHON=python         the interpreter with longctx_nb and a CUDA build of torch
#   WHEELS=wheels         folder of prebuilt wheels (mamba_ssm-*.whl, causal_conv1d-*.whl) carried to an offline machine;
#                         make them on a machine with the same Python, torch and CUDA:
#                         bash examples/build_cuda_kernels.sh --wheels wheels/
#   OUT=gpu_check         where the rows, the logs and gpu_table.md go
#   ONLY="mamba causal-conv1d"  without wheels, build only these (one per step keeps each under ten minutes:
#                         ONLY=mamba ... kernels (about 4 min), then ONLY=causal-conv1d ... kernels (about 9 min))
#   NBDEV_TEST=nbdev_test  the nbdev_test command of step 2
#   BENCH_FLAGS="--size small"  more flags for longctx_bench gpu (see: longctx_bench gpu --help)
# Exit codes: 0 all steps passed, 1 a step failed (its log is in $OUT), 2 no CUDA GPU or a bad argument.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
WHEELS=${WHEELS:-wheels}
OUT=${OUT:-gpu_check}
BENCH_FLAGS=${BENCH_FLAGS:-}
NBDEV_TEST=${NBDEV_TEST:-nbdev_test}
STEPS=(kernels cells compare blocks fits)

for s in "$@"; do
  case " ${STEPS[*]} " in *" $s "*) ;; *)
    echo "gpu_check.sh: error: unknown step '$s'; valid choices: ${STEPS[*]} (none: all of them, in order)." >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] && STEPS=("$@")

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check.sh: error: this check needs a CUDA GPU, and $("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "$PYTHON's torch") sees none. Run it on a machine with an NVIDIA GPU, its driver and a CUDA build of torch (and longctx_nb installed); mamba-ssm and causal-conv1d are installed from wheels in \$WHEELS (default wheels/, made with examples/build_cuda_kernels.sh --wheels) or built there with the CUDA toolkit. On a CPU, longctx_bench scan, attention and blocks measure the CPU paths." >&2
  exit 2
fi
mkdir -p "$OUT"

kernels() {
  if "$PYTHON" -c "import selective_scan_cuda, causal_conv1d_cuda" 2>/dev/null; then
    echo "kernels: selective_scan_cuda and causal_conv1d_cuda already import"; return
  fi
  if compgen -G "$WHEELS/*.whl" > /dev/null; then
    echo "kernels: installing the wheels in $WHEELS"
    PYTHON=$PYTHON bash examples/build_cuda_kernels.sh --install "$WHEELS"
  else
    echo "kernels: no wheels in $WHEELS; building ${ONLY:-mamba causal-conv1d} for this GPU (needs nvcc and the sdists or a network)"
    PYTHON=$PYTHON bash examples/build_cuda_kernels.sh
  fi
}

cells() {
  local failed=0 nb log
  command -v "$NBDEV_TEST" > /dev/null || { echo "cells: $NBDEV_TEST not found: pip install nbdev==2.4.14 (see settings.ini's dev_requirements)"; return 1; }
  for nb in $(grep -l '#| cuda' nbs/*.ipynb nbs/tutorials/*.ipynb); do
    log="$OUT/cells_$(basename "$nb" .ipynb).log"
    echo "cells: $NBDEV_TEST --flags cuda --path $nb"
    if ! "$NBDEV_TEST" --flags cuda --path "$nb" > "$log" 2>&1; then echo "cells: FAILED $nb (log: $log)"; failed=1; fi
  done
  return $failed
}

bench() { "$PYTHON" -c "from longctx_nb.bench import bench_main; bench_main()" gpu --parts "$1" --out "$OUT" $BENCH_FLAGS; }

status=0
for s in "${STEPS[@]}"; do
  echo "== $s"
  case $s in
    kernels) kernels || status=1 ;;
    cells) cells || status=1 ;;
    compare) bench compare | tee "$OUT/compare.log" || status=1
             if grep -q 'FAILED' "$OUT/gpu_table.md"; then echo "compare: a path failed its check (see $OUT/gpu_table.md)"; status=1; fi ;;
    blocks|fits) bench "$s" | tee "$OUT/$s.log" || status=1 ;;
  esac
done
[ -f "$OUT/gpu_table.md" ] && echo "table: $OUT/gpu_table.md"
exit $status
