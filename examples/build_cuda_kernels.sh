#!/usr/bin/env bash
# Build the CUDA kernels longctx_nb uses when they are installed -- mamba-ssm's selective scan (the
# extension module `selective_scan_cuda`) and causal-conv1d (`causal_conv1d_cuda`) -- from their PyPI
# source distributions, for the GPU architecture of the machine it runs on.
#
#   bash examples/build_cuda_kernels.sh                 # build both, pip install them into $PYTHON
#   bash examples/build_cuda_kernels.sh --wheels DIR    # only build wheels into DIR (to carry to an offline GPU machine)
#   bash examples/build_cuda_kernels.sh --install DIR   # offline: pip install --no-deps the wheels in DIR, then check
#   bash examples/build_cuda_kernels.sh --patch SRC     # only narrow the architecture list in SRC/setup.py (see below)
#
# Environment (all optional):
#   PYTHON=python                 the interpreter (and CUDA build of torch) to build against
#   ARCH="90"                     compute capabilities, no dot, space-separated ("80 90"); default: detected with
#                                 torch on GPU 0 (set it on a build machine that has nvcc but no GPU)
#   MAX_JOBS=16                   parallel compile jobs (default: CPU count); each nvcc job needs a few GB of RAM
#   ONLY="mamba causal-conv1d"    which packages to build
#   MAMBA_VERSION=2.3.2.post1     CAUSAL_CONV1D_VERSION=1.7.0
#   MAMBA_SDIST=path.tar.gz       CAUSAL_CONV1D_SDIST=path.tar.gz    use these source archives instead of downloading
#
# Needs: a CUDA toolkit (nvcc, found through CUDA_HOME or PATH) with the same major version as torch.version.cuda,
# a CUDA build of torch, and the build tools setup.py imports without build isolation: `pip install wheel packaging ninja`.
# Time with one architecture and 16 jobs: about 4 minutes for mamba-ssm, 9 for causal-conv1d.
#
# Why each setting:
# * Both setup.py files hard-code nine `-gencode arch=compute_XX,code=sm_XX` targets (sm_75 .. sm_121 with CUDA 13):
#   hours of compilation. Neither reads an environment variable to narrow the list, and TORCH_CUDA_ARCH_LIST is
#   ignored: torch.utils.cpp_extension adds no architecture flags of its own when the extension's nvcc flags already
#   contain one (`_get_cuda_arch_flags`). So the script patches setup.py: just before the line
#   "# HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI ..." (present in mamba-ssm 2.3.x and causal-conv1d 1.5-1.7,
#   right after the list is built) it inserts
#       cc_flag = [f for f in cc_flag if f.startswith("-D")] + os.environ["LONGCTX_GENCODE"].split()
#   and exports LONGCTX_GENCODE="-gencode arch=compute_90,code=sm_90" (one pair per ARCH entry).
# * MAMBA_FORCE_BUILD / CAUSAL_CONV1D_FORCE_BUILD=TRUE: otherwise setup.py's bdist_wheel first downloads a prebuilt
#   wheel from GitHub releases, and crashes (URLError) on a machine without a network.
# * MAMBA_KEEP_CUDA_BUILD=TRUE: some mamba-ssm 2.3 builds compile the Mamba-1 scan only with it (the 2.3.0 to
#   2.3.2.post1 sdists do not read it; it is harmless there).
# * --no-build-isolation: the build must see the installed CUDA torch (an isolated build would install a CPU one).
#   --no-deps: mamba-ssm's runtime dependencies (triton, transformers, tilelang ...) are not needed for the two
#   compiled modules longctx_nb imports.
# * MAMBA_LOCAL_VERSION / CAUSAL_CONV1D_LOCAL_VERSION tag the wheels with CUDA, torch and architecture
#   (e.g. mamba_ssm-2.3.2.post1+cu130.torch2.11.sm90-cp312-cp312-linux_x86_64.whl): a wheel only works with the
#   Python, torch and CUDA it was built against.
set -euo pipefail

PYTHON=${PYTHON:-python}
MAMBA_VERSION=${MAMBA_VERSION:-2.3.2.post1}
CAUSAL_CONV1D_VERSION=${CAUSAL_CONV1D_VERSION:-1.7.0}
ONLY=${ONLY:-"mamba causal-conv1d"}
MODE=install
DIR=""

die() { echo "build_cuda_kernels.sh: $*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0"; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) MODE=wheels; DIR=${2:?--wheels needs a directory}; shift 2 ;;
    --install) MODE=install-wheels; DIR=${2:?--install needs a directory}; shift 2 ;;
    --patch) MODE=patch; DIR=${2:?--patch needs a source directory}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done

check_imports() {  # torch first: the extensions link against its libraries (libc10.so)
  PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'EOF'
import importlib, torch
ok = True
for name in ('selective_scan_cuda', 'causal_conv1d_cuda'):
    try:
        importlib.import_module(name); print(f'{name}: imports')
    except Exception as e:
        ok = False; print(f'{name}: does not import ({type(e).__name__}: {" ".join(str(e).split())[:300]})')
try:
    from longctx_nb.kernels.scan import scan_impls
    from longctx_nb.kernels.conv import conv_impls
except Exception as e:
    print(f'longctx_nb does not import ({type(e).__name__}: {e}): cannot say which paths it runs')
else:
    dev = 'cuda' if torch.cuda.is_available() else 'cpu'
    print(f'longctx_nb on {dev}: selective_scan runs {scan_impls.available(dev)} (auto: {scan_impls.auto(dev)}), '
          f'causal_conv1d runs {conv_impls.available(dev)} (auto: {conv_impls.auto(dev)})')
raise SystemExit(0 if ok else 1)
EOF
}

detect_arch() {
  if [ -z "${ARCH:-}" ]; then
    ARCH=$("$PYTHON" -c 'import torch; print(*torch.cuda.get_device_capability(), sep="")' 2>/dev/null) \
      || die "cannot detect the GPU's compute capability with torch (no GPU visible?); set ARCH, e.g. ARCH=90 for H100/H200, 80 for A100."
  fi
  LONGCTX_GENCODE=""
  for a in $ARCH; do
    [[ "$a" =~ ^[0-9]+[a-z]?$ ]] || die "ARCH entry '$a' is not a compute capability like 90, 80 or 90a"
    LONGCTX_GENCODE+="-gencode arch=compute_${a},code=sm_${a} "
  done
  export LONGCTX_GENCODE
}

patch_setup() {  # $1: source directory containing setup.py
  "$PYTHON" - "$1/setup.py" <<'EOF'
import pathlib, sys
p = pathlib.Path(sys.argv[1])
src = p.read_text()
mark = '# patched by build_cuda_kernels.sh'
if mark in src:
    print(f'{p}: already patched'); sys.exit(0)
anchor = '# HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI'
lines = src.split('\n')
hits = [i for i, l in enumerate(lines) if anchor in l]
if len(hits) != 1:
    sys.exit(f'{p}: found {len(hits)} lines containing "{anchor}" (expected 1): this setup.py differs from the versions '
             'the script knows; edit its cc_flag list by hand to keep only your architecture.')
i = hits[0]
indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
lines.insert(i, indent + 'cc_flag = [f for f in cc_flag if f.startswith("-D")] + os.environ["LONGCTX_GENCODE"].split()  ' + mark)
p.write_text('\n'.join(lines))
print(f'{p}: architecture list replaced by $LONGCTX_GENCODE')
EOF
}

if [ "$MODE" = install-wheels ]; then
  shopt -s nullglob
  wheels=("$DIR"/*.whl)
  [ ${#wheels[@]} -gt 0 ] || die "no .whl files in $DIR"
  "$PYTHON" -m pip install --no-deps --no-index --force-reinstall "${wheels[@]}"
  check_imports
  exit 0
fi

if [ "$MODE" = patch ]; then
  [ -f "$DIR/setup.py" ] || die "$DIR/setup.py does not exist"
  detect_arch
  patch_setup "$DIR"
  echo "now build with: LONGCTX_GENCODE=\"$LONGCTX_GENCODE\" MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE $PYTHON -m pip wheel --no-build-isolation --no-deps $DIR"
  exit 0
fi

# --- checks -------------------------------------------------------------------------------------------------
"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch; install a CUDA build of PyTorch first."
TORCH_CUDA=$("$PYTHON" -c 'import torch; print(torch.version.cuda or "")')
[ -n "$TORCH_CUDA" ] || die "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') is a CPU build; install a CUDA build."
"$PYTHON" -c 'import wheel, packaging, ninja' 2>/dev/null \
  || die "the build needs wheel, packaging and ninja in this environment: $PYTHON -m pip install wheel packaging ninja"
NVCC=""
if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC="$CUDA_HOME/bin/nvcc"
elif command -v nvcc >/dev/null; then NVCC=$(command -v nvcc)
elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc
fi
[ -n "$NVCC" ] || die "nvcc not found: install the CUDA toolkit $TORCH_CUDA (major version must match torch's) and set CUDA_HOME."
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
NVCC_CUDA=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
[ "${NVCC_CUDA%%.*}" = "${TORCH_CUDA%%.*}" ] \
  || die "nvcc is CUDA $NVCC_CUDA but torch was built with CUDA $TORCH_CUDA: the major versions must match."
detect_arch

export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE MAMBA_KEEP_CUDA_BUILD=TRUE
export MAMBA_SKIP_CUDA_BUILD=FALSE CAUSAL_CONV1D_SKIP_CUDA_BUILD=FALSE
TAG="cu${TORCH_CUDA//./}.torch$("$PYTHON" -c 'import torch; print(".".join(torch.__version__.split("+")[0].split(".")[:2]))').sm${ARCH// /.sm}"
export MAMBA_LOCAL_VERSION=$TAG CAUSAL_CONV1D_LOCAL_VERSION=$TAG
echo "python: $("$PYTHON" -c 'import sys; print(sys.executable)')  torch CUDA $TORCH_CUDA  nvcc $NVCC_CUDA ($NVCC)"
echo "architectures: $ARCH  ->  $LONGCTX_GENCODE  jobs: $MAX_JOBS  wheel tag: +$TAG"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/longctx-kernels.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=${DIR:-$WORK/wheels}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

build() {  # $1: pip name, $2: version, $3: local sdist or empty, $4: the SKIP variable for the metadata step
  local name=$1 version=$2 sdist=$3 skipvar=$4 src
  if [ -z "$sdist" ]; then
    # Only the source archive: metadata is prepared with the CUDA build skipped (no compiler needed for that).
    env "$skipvar=TRUE" "$PYTHON" -m pip download --no-deps --no-binary :all: --no-build-isolation \
      "$name==$version" -d "$WORK/sdist-$name" \
      || die "could not download the $name $version sdist; without a network pass it as MAMBA_SDIST / CAUSAL_CONV1D_SDIST."
    sdist=$(ls "$WORK/sdist-$name"/*.tar.gz | head -1)
  fi
  [ -f "$sdist" ] || die "$sdist does not exist"
  mkdir -p "$WORK/src-$name"
  tar -xzf "$sdist" -C "$WORK/src-$name"
  src=$(dirname "$(ls "$WORK/src-$name"/*/setup.py | head -1)")
  patch_setup "$src"
  echo "=== building $name from $(basename "$sdist") (this takes minutes; nvcc output follows)"
  local t0=$SECONDS
  "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$OUT" "$src"
  echo "=== $name built in $((SECONDS - t0)) s"
}

for pkg in $ONLY; do
  case "$pkg" in
    mamba|mamba-ssm|mamba_ssm) build mamba-ssm "$MAMBA_VERSION" "${MAMBA_SDIST:-}" MAMBA_SKIP_CUDA_BUILD ;;
    causal-conv1d|causal_conv1d|conv) build causal-conv1d "$CAUSAL_CONV1D_VERSION" "${CAUSAL_CONV1D_SDIST:-}" CAUSAL_CONV1D_SKIP_CUDA_BUILD ;;
    *) die "unknown package in ONLY: $pkg (use mamba and/or causal-conv1d)" ;;
  esac
done

if [ "$MODE" = wheels ]; then
  echo "wheels in $OUT:"; ls -l "$OUT"
  echo "on the target machine (same Python, torch and CUDA): bash examples/build_cuda_kernels.sh --install $DIR"
else
  "$PYTHON" -m pip install --no-deps --force-reinstall "$OUT"/*.whl
  check_imports
fi
