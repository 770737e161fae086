#!/usr/bin/env bash
# Prove the GPU path of longctx_nb on a machine with a CUDA GPU, in one command of about eight minutes on one H100.
#
# Where a network exists (once; wheels for CPython 3.12 on Linux x86_64, about 10 MB):
#   make gpu-wheels                # nbdev, fastcore, execnb and what they need -> .whl/ (for the `cells` step)
# On the GPU machine, from a copy of the repository with .whl/ (no install, no network needed):
#   bash examples/gpu_check.sh          # = quick: every step below, in this order
# The wheels in .whl/ are unpacked into $SITE and put on PYTHONPATH by the script itself (no pip needed).
#
# Steps (name some to run only those). The whole run keeps within $TOTAL_S seconds: each step has its own time limit,
# within what is left, and writes what it found before it stops; the table's steps come first, the notebooks last.
#   kernels   mamba-ssm and causal-conv1d: used if they import; else installed from their wheels in $WHEELS
#             (mamba_ssm-*.whl, causal_conv1d-*.whl, made with examples/build_cuda_kernels.sh --wheels .whl on a
#             machine with the same Python, torch and CUDA); else absent, and the rest runs on the PyTorch paths
#             (Mamba's chunked scan, the reference convolution), which the table says. BUILD=1 builds them here
#             instead (about 13 minutes on 16 cores: not in the same ten-minute command as the rest).
#   compare   CUDA scan and convolution (where installed), the PyTorch scan and FlexAttention on the GPU against
#             the references: values and gradients (longctx_bench gpu --parts compare)
#   blocks    tokens/s, MFU and peak memory of each block's training step at 2K, 8K and 32K tokens in bf16
#   fits      the longest sequence whose training step fits, per block, within $FIT_SECONDS in all, or less where
#             the run's time is short ('≥ L (time limit)' where a block's search was cut short; one stopped by an
#             error fails the step, as a path off its reference or a step that raised does in the steps before)
#   context   with two or more GPUs visible: one training step of each block that splits a sequence, split over all of
#             them (longctx_bench context --device cuda, NCCL, one rank per GPU), into context_table.md. It should
#             show vanilla sending 1.5x ring attention's K/V bytes (its forward all-gathers k and v, its backward
#             all-reduces their gradients: 6 (N-1) l K a bytes against the ring's 4 (N-1) l K a), longformer a
#             small fraction of it (its window's halo), and each rank's saved bytes within 1% of the estimate for
#             both; mamba's estimate is low (its state exchange's saved tensors are not counted). With one GPU: the
#             line 'context: skipped: ...', and the step passes
#   cells     every notebook with a cell marked `#| cuda` run whole, in parallel (examples/cuda_cells.py; needs nbdev)
#
# Output, in $OUT: gpu_table.md (the tables), gpu_rows.json (their rows), gpu_check.log (everything printed), and
# with several GPUs context_table.md and context_rows.csv.
# Environment (all optional):
#   PYTHON=python3        the interpreter with a CUDA build of torch; longctx_nb comes from this repository
#   OUT=gpu_check         where the three files go
#   WHEELS=.whl           the wheels carried along (test tools, kernels); SITE=/tmp/longctx_site is where they are unpacked
#   TOTAL_S=480           the whole run's time limit in seconds (a lent machine's command may run ten minutes)
#   FIT_SECONDS=100       time for the whole fit search (all blocks together), at most what is left of TOTAL_S
#   COMPARE_S=90 BLOCKS_S=210 CONTEXT_S=90 CELLS_S=150   those steps' time limits in seconds (within what is left of TOTAL_S)
#   BENCH_FLAGS="--size small"  more flags for longctx_bench gpu (see: longctx_bench gpu --help)
# Exit codes: 0 all steps passed, 1 a step failed or ran out of time (see gpu_check.log), 2 no CUDA GPU or a bad argument.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-$(command -v python3 || command -v python || echo python3)}
OUT=${OUT:-gpu_check}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-${TMPDIR:-/tmp}/longctx_site}
BENCH_FLAGS=${BENCH_FLAGS:-}
TOTAL_S=${TOTAL_S:-480}
FIT_SECONDS=${FIT_SECONDS:-100}
COMPARE_S=${COMPARE_S:-90}
BLOCKS_S=${BLOCKS_S:-210}
CONTEXT_S=${CONTEXT_S:-90}
CELLS_S=${CELLS_S:-150}
VALID=(quick kernels compare blocks fits context cells)
QUICK=(kernels compare blocks fits context cells)

for s in "$@"; do
  case " ${VALID[*]} " in *" $s "*) ;; *)
    echo "gpu_check.sh: error: unknown step '$s'; valid choices: ${VALID[*]} (none: quick, which is ${QUICK[*]} in this order)." >&2; exit 2 ;;
  esac
done
STEPS=()
for s in "${@:-quick}"; do if [ "$s" = quick ]; then STEPS+=("${QUICK[@]}"); else STEPS+=("$s"); fi; done

# longctx_nb from this copy of the repository, the kernel wheels' folder before it
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check.sh: error: this check needs a CUDA GPU, and $("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "$PYTHON's torch") sees none. Run it on a machine with an NVIDIA GPU, its driver and a CUDA build of torch (longctx_nb comes from this repository); mamba-ssm and causal-conv1d are used where installed, installed from wheels in \$WHEELS (default .whl/, made with examples/build_cuda_kernels.sh --wheels .whl), or left out (the PyTorch paths run). On a CPU, longctx_bench scan, attention and blocks measure the CPU paths." >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

# caches where they can be written (a home folder may be read-only on a lent machine)
if ! { [ -n "${HOME:-}" ] && mkdir -p "$HOME/.cache" && [ -w "$HOME/.cache" ]; } 2>/dev/null; then
  C=${TMPDIR:-/tmp}/longctx_cache; mkdir -p "$C"
  export LONGCTX_CACHE=${LONGCTX_CACHE:-$C/longctx_nb} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$C/triton} \
         TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$C/inductor} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$C/torch_extensions} \
         MPLCONFIGDIR=${MPLCONFIGDIR:-$C/matplotlib}
  echo "caches in $C (the home folder cannot be written)"
fi

py() { "$PYTHON" "$@"; }
unpack() {   # unpack wheels into $SITE, as pip would install them for this Python (a wheel is a zip of its files)
  py - "$SITE" "$@" <<'EOF'
import sys, zipfile, pathlib
site = pathlib.Path(sys.argv[1]); site.mkdir(parents=True, exist_ok=True)
for w in sys.argv[2:]:
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            top, _, rest = n.partition('/')
            if top.endswith('.data'):             # NAME.data/purelib|platlib/...: files of site-packages; the rest (scripts) is not needed
                kind, _, rest = rest.partition('/')
                if kind not in ('purelib', 'platlib') or not rest or n.endswith('/'): continue
                (site / rest).parent.mkdir(parents=True, exist_ok=True); (site / rest).write_bytes(z.read(n))
            else: z.extract(n, site)
print(f'unpacked {len(sys.argv) - 2} wheels into {site}')
EOF
}
tools() {    # nbdev, fastcore, execnb from the carried wheels (make gpu-wheels), for the cells step
  py -c "import nbdev.test" 2>/dev/null && return 0
  shopt -s nullglob; local whl=("$WHEELS"/*.whl); shopt -u nullglob
  local tw=(); for w in "${whl[@]}"; do case $(basename "$w") in mamba_ssm-*|causal_conv1d-*) ;; *) tw+=("$w") ;; esac; done
  [ ${#tw[@]} -gt 0 ] && { echo "tools: nbdev is not installed: unpacking the ${#tw[@]} wheels in $WHEELS/"; unpack "${tw[@]}"; }
  return 0
}
kernels_import() { py -c "import torch, selective_scan_cuda, causal_conv1d_cuda" 2>/dev/null; }   # torch first: they link its libraries
say_kernels() {
  py - <<'EOF'
import importlib, torch
for name in ('selective_scan_cuda', 'causal_conv1d_cuda'):
    try: importlib.import_module(name); print(f'kernels: {name} imports')
    except Exception as e: print(f'kernels: {name} does not import ({type(e).__name__}: {" ".join(str(e).split())[:200]})')
from longctx_nb.gpu import kernel_paths
print('kernels: the blocks run', kernel_paths('cuda'))
EOF
}

kernels() {
  if kernels_import; then echo "kernels: selective_scan_cuda and causal_conv1d_cuda already import"; say_kernels; return 0; fi
  shopt -s nullglob; local whl=("$WHEELS"/mamba_ssm-*.whl "$WHEELS"/causal_conv1d-*.whl); shopt -u nullglob
  if [ ${#whl[@]} -gt 0 ]; then
    echo "kernels: installing ${whl[*]} into $SITE"
    unpack "${whl[@]}" || { echo "kernels: FAILED: unpacking the wheels"; return 1; }
    say_kernels
    kernels_import || { echo "kernels: FAILED: the wheels installed but do not import (built for another Python, torch or CUDA?)"; return 1; }
  elif [ "${BUILD:-0}" = 1 ]; then
    echo "kernels: building ${ONLY:-mamba causal-conv1d} for this GPU (needs nvcc and the sdists or a network; about 13 minutes on 16 cores)"
    PYTHON=$PYTHON bash examples/build_cuda_kernels.sh || return 1
  else
    echo "kernels: mamba-ssm and causal-conv1d are not installed and $WHEELS/ holds no wheels of them: they are left out,"
    echo "kernels: and the rest runs on the PyTorch paths (the table's 'kernels' line says which). To include them, build"
    echo "kernels: wheels once (examples/build_cuda_kernels.sh --wheels $WHEELS) and carry them, or rerun with BUILD=1."
    say_kernels
  fi
  return 0
}

# longctx_bench gpu --parts NAME under a time limit; the rows found so far are saved row by row
bench() {
  local part=$1 limit=$2; shift 2
  timeout -k 15 "$limit" "$PYTHON" -c "from longctx_nb.bench import bench_main; bench_main()" gpu --parts "$part" --out "$OUT" "$@" $BENCH_FLAGS
  local rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then echo "$part: time limit ($limit s) reached: gpu_table.md has the rows found before it"; fi
  return $rc
}

left() { echo $((TOTAL_S - SECONDS)); }                          # seconds the run has left
lim() { local l; l=$(left); echo $(( $1 < l ? $1 : (l > 10 ? l : 10) )); }  # a step's limit: its own, or what is left

failed_rows() {   # rows of part $1 that failed: a path off its reference, a step that raised an error, a fit search stopped by one
  "$PYTHON" - "$OUT/gpu_rows.json" "$1" <<'EOF'
import json, sys
try: rows = json.load(open(sys.argv[1])).get(sys.argv[2], [])
except (OSError, ValueError) as e: print(f"{sys.argv[2]}: FAILED: no rows to check ({type(e).__name__}: {e})"); sys.exit(1)
bad = [r for r in rows if r.get('ok') is False or str(r.get('note', '')).startswith('error') or r.get('bound') == 'error']
for r in bad:
    what = ' '.join(str(x) for x in (r.get('kernel') or r.get('block'), r.get('impl') or r.get('L')) if x is not None)
    print(f"{sys.argv[2]}: FAILED {what}: {r.get('note')}")
sys.exit(1 if bad else 0)
EOF
}

context() {   # a sequence split over every GPU visible: bytes sent beside ring attention's, memory per rank
  local n; n=$(py -c "import torch; print(torch.cuda.device_count())")
  if [ "${n:-0}" -lt 2 ]; then
    echo "context: skipped: ${n:-no} GPU visible, and splitting a sequence over GPUs needs two or more"; return 0
  fi
  timeout -k 15 "$(lim "$CONTEXT_S")" "$PYTHON" -c "from longctx_nb.bench import bench_main; bench_main()" context \
    --device cuda --context_parallel "$n" --L $((8192 * n)) --size small --precision bf16 --csv "$OUT/context_rows.csv" \
    | tee "$OUT/context_table.md"
}

cells() {
  local err
  if ! err=$(py -c "import nbdev.test" 2>&1); then
    echo "cells: FAILED: nbdev.test does not import ($(printf '%s\n' "$err" | tail -n 1)). Without its wheels in $WHEELS/: run"
    echo "cells: \`make gpu-wheels\` where a network exists, carry .whl/ along, and run this step again (bash examples/gpu_check.sh cells)."
    return 1
  fi
  local limit; limit=$(lim "$CELLS_S")
  timeout -k 15 "$limit" "$PYTHON" examples/cuda_cells.py --timeout "$((limit > 30 ? limit - 10 : limit))"
  local rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then echo "cells: time limit ($limit s) reached"; fi
  return $rc
}

SECONDS=0
echo "gpu_check.sh: steps ${STEPS[*]}; python $PYTHON ($("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name())')); output in $OUT; at most $TOTAL_S s; $(date -u '+%F %T UTC')"
# the notebooks build the library's CPU kernels (about a minute, once per machine): built here meanwhile, beside the GPU
# steps, so that the cells step finds them ready (a notebook that gets there first waits on the build's lock)
case " ${STEPS[*]} " in *" cells "*)
  py -c "from longctx_nb.kernels.scan import _CPU_SCAN; from longctx_nb.kernels.conv import _CPU_CONV; _CPU_SCAN.load(); _CPU_CONV.load()" \
     > "$OUT/cpu_kernels.log" 2>&1 &
  echo "cpu kernels: building in the background (log: $OUT/cpu_kernels.log)" ;;
esac
status=0; summary=()
for s in "${STEPS[@]}"; do
  echo "== $s"
  t0=$SECONDS; rc=0
  case $s in
    kernels) kernels || rc=1 ;;
    compare) bench compare "$(lim "$COMPARE_S")" || rc=1; failed_rows compare || rc=1 ;;
    blocks)  b=$(lim "$BLOCKS_S"); bench blocks "$b" --blocks_seconds "$((b > 60 ? b - 30 : b / 2))" || rc=1
             failed_rows blocks || rc=1 ;;
    fits)    f=$(( $(left) - 45 )); f=$(( f < ${FIT_SECONDS%.*} ? f : ${FIT_SECONDS%.*} )); f=$(( f > 10 ? f : 10 ))
             bench fits "$((f + 45))" --fit_seconds "$f" || rc=1
             failed_rows fits || rc=1 ;;
    context) context || rc=1 ;;
    cells)   tools; cells || rc=1 ;;
  esac
  [ $rc = 0 ] || status=1
  summary+=("$s $([ $rc = 0 ] && echo ok || echo FAILED) $((SECONDS - t0)) s")
  echo "== $s: $([ $rc = 0 ] && echo ok || echo FAILED) in $((SECONDS - t0)) s"
done
echo "== summary: ${summary[*]/%/;}"
[ -f "$OUT/gpu_table.md" ] && echo "table: $OUT/gpu_table.md   rows: $OUT/gpu_rows.json   log: $OUT/gpu_check.log"
exit $status
