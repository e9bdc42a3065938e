#!/usr/bin/env bash
# peer_cuda.sh — the GPU peer for cuda records: llama.cpp's CUDA build, from the sources of the
# llama-cpp-python version pinned in tools/requirements-bench.txt (the CPU peer's pin, so CPU
# and GPU comparisons name one llama.cpp commit). On the GPU host, for measurement only:
#   1. the Python binding: a separate venv (build/peer-cuda-venv, never the project's .venv,
#      whose CPU build the CPU records use) with the sdist built by pip under
#      CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native" (this GPU only: the
#      default architecture list would compile every kernel many times over);
#   2. llama-bench, llama-completion and llama-speculative-simple from the same sdist's
#      vendor/llama.cpp, configured with the same flags, into build/peer-cuda/bin.
# Then it prints where they are. bench/peer_bench.py --backend cuda uses the venv's python by
# default and refuses a peer that did not offload every layer; bench/spec_bench.py --backend
# cuda --llama-dir build/peer-cuda/bin runs the two examples with every layer on the GPU.
#
# The GPU host may have no network: --sdist FILE takes the sdist from a file, --wheelhouse DIR
# installs Python dependencies from wheels there (pip --no-index). `--download DIR`, run where
# the network is, fetches both (the sdist is ~77 MB; --trim keeps a ~13 MB copy instead,
# without its git pack, llama.cpp's test vocabularies, docs and CI files, enough to build).
# Wheels are for the Python that runs --download, or PEER_PY_VERSION (the GPU host's).
#
#   bench/peer_cuda.sh [--sdist FILE] [--wheelhouse DIR] [--jobs N] [--no-python] [--no-tools]
#   bench/peer_cuda.sh --download DIR [--trim]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VERSION=$(sed -n 's/^llama-cpp-python==\([0-9.]*\).*/\1/p' tools/requirements-bench.txt)
[ -n "$VERSION" ] || { echo "peer_cuda.sh: no llama-cpp-python pin in tools/requirements-bench.txt" >&2; exit 1; }
SDIST="${PEER_SDIST:-}"
WHEELHOUSE=""
VENV=build/peer-cuda-venv
TOOLS=build/peer-cuda
SRC=build/peer-cuda-src
JOBS=$(nproc 2>/dev/null || echo 4)
DO_PY=1 DO_TOOLS=1 DOWNLOAD="" TRIM=0
PY=${PYTHON:-python3}
# the Python packages llama_cpp imports (and numpy, for bench/peer_bench.py's worker)
RUNTIME_DEPS=(numpy typing-extensions diskcache jinja2)
BUILD_DEPS=(scikit-build-core pathspec packaging)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
while (($#)); do
    case "$1" in
        --sdist) SDIST=$2; shift 2 ;;
        --wheelhouse) WHEELHOUSE=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --no-python) DO_PY=0; shift ;;
        --no-tools) DO_TOOLS=0; shift ;;
        --download) DOWNLOAD=$2; shift 2 ;;
        --trim) TRIM=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "peer_cuda.sh: unknown option '$1'" >&2; usage ;;
    esac
done

if [ -n "$DOWNLOAD" ]; then
    mkdir -p "$DOWNLOAD"
    "$PY" -m pip download --no-deps --no-binary :all: -d "$DOWNLOAD" "llama-cpp-python==$VERSION"
    # PEER_PY_VERSION (e.g. 3.12): wheels for the GPU host's Python, not this one's
    WHEEL_FOR=()
    [ -n "${PEER_PY_VERSION:-}" ] && WHEEL_FOR=(--python-version "$PEER_PY_VERSION")
    "$PY" -m pip download -d "$DOWNLOAD" --only-binary :all: "${WHEEL_FOR[@]}" \
        "${RUNTIME_DEPS[@]}" "${BUILD_DEPS[@]}"
    if ((TRIM)); then
        t=$(mktemp -d)
        tar -xzf "$DOWNLOAD/llama_cpp_python-$VERSION.tar.gz" -C "$t"
        v="${t:?}/llama_cpp_python-$VERSION/vendor/llama.cpp"
        # test vocabularies, docs, CI, media and the web UI's assets: not part of the build
        rm -rf "${v:?}"/models/ggml-vocab-* "${v:?}"/docs "${v:?}"/.github "${v:?}"/media \
               "${v:?}"/tools/server/public* \
               "$v"/tools/server/webui "$t/llama_cpp_python-$VERSION"/docs \
               "$t/llama_cpp_python-$VERSION"/.git   # the sdist ships a 39 MB git pack
        tar -czf "$DOWNLOAD/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$t" "llama_cpp_python-$VERSION"
        # only the trimmed copy stays, so the folder fits a small transfer to the GPU host
        rm -rf "$t" "$DOWNLOAD/llama_cpp_python-$VERSION.tar.gz"
    fi
    echo "peer_cuda.sh: downloaded into $DOWNLOAD:"
    ls -l "$DOWNLOAD"
    exit 0
fi

NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
    echo "peer_cuda.sh: nvcc not found (set CUDA_HOME or NVCC): the peer's CUDA build needs it" >&2
    exit 1
fi
NVCC_DIR=$(dirname "$NVCC")
export CUDACXX=$NVCC PATH="$NVCC_DIR:$PATH"
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "peer_cuda.sh: no GPU (nvidia-smi -L failed): build the peer on the GPU host" >&2
    exit 1
fi
# this GPU's architecture only; CMake >= 3.24 resolves "native"
CUDA_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native -DGGML_NATIVE=ON"

mkdir -p "$SRC"
if [ -z "$SDIST" ]; then
    for f in "$SRC/llama_cpp_python-$VERSION.tar.gz" "$SRC/llama_cpp_python-$VERSION-trimmed.tar.gz"; do
        [ -f "$f" ] && SDIST=$f && break
    done
fi
if [ -z "$SDIST" ]; then
    echo "peer_cuda.sh: downloading the llama-cpp-python $VERSION sdist"
    "$PY" -m pip download --no-deps --no-binary :all: -d "$SRC" "llama-cpp-python==$VERSION" || {
        echo "peer_cuda.sh: cannot download it (no network?): run  bench/peer_cuda.sh --download" \
             "DIR --trim  where there is one and pass --sdist DIR/llama_cpp_python-$VERSION-" \
             "trimmed.tar.gz --wheelhouse DIR here" >&2
        exit 1; }
    SDIST="$SRC/llama_cpp_python-$VERSION.tar.gz"
fi
[ -f "$SDIST" ] || { echo "peer_cuda.sh: --sdist $SDIST: no such file" >&2; exit 1; }
PIP_SRC=()
[ -n "$WHEELHOUSE" ] && PIP_SRC=(--no-index --find-links "$WHEELHOUSE")

if ((DO_PY)); then
    echo "peer_cuda.sh: building llama-cpp-python $VERSION with GGML_CUDA into $VENV"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q "${PIP_SRC[@]}" "${RUNTIME_DEPS[@]}" "${BUILD_DEPS[@]}"
    # no build isolation: the build dependencies are already in the venv (offline hosts)
    CMAKE_ARGS="$CUDA_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$VENV/bin/pip" install \
        --no-build-isolation --no-deps --no-cache-dir "${PIP_SRC[@]}" "$SDIST"
    "$VENV/bin/python" - <<'EOF'
import llama_cpp as L
info = L.llama_print_system_info().decode()
if not L.llama_supports_gpu_offload() or "CUDA" not in info:
    raise SystemExit("peer_cuda.sh: the built llama_cpp cannot offload to the GPU: " + info)
print("peer_cuda.sh: llama_cpp", L.__version__, "|", info)
EOF
fi

if ((DO_TOOLS)); then
    echo "peer_cuda.sh: building llama-bench, llama-completion, llama-speculative-simple into $TOOLS"
    rm -rf "$SRC/tree" && mkdir -p "$SRC/tree"
    tar -xzf "$SDIST" -C "$SRC/tree" --strip-components=1
    # shellcheck disable=SC2086  # CUDA_ARGS is a list of -D flags
    cmake -S "$SRC/tree/vendor/llama.cpp" -B "$TOOLS" -DCMAKE_BUILD_TYPE=Release $CUDA_ARGS \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
    cmake --build "$TOOLS" -j "$JOBS" --target llama-bench llama-completion llama-speculative-simple
fi

echo "peer_cuda.sh: done (llama-cpp-python $VERSION, GGML_CUDA=on, $($NVCC --version | tail -1))"
((DO_PY)) && echo "  python with llama_cpp: $ROOT/$VENV/bin/python  (bench/peer_bench.py --backend cuda uses it)"
((DO_TOOLS)) && echo "  llama.cpp tools:       $ROOT/$TOOLS/bin  (llama-bench -ngl 999; spec_bench --llama-dir)"
exit 0
