#!/usr/bin/env bash
# device_gate.sh — the one prepared script run on an NVIDIA host (from the repository root) to
# build Kipp's CUDA backend for the local GPU, run its gates, then the CUDA benches, writing one
# self-contained log (every bench's JSON record is embedded) that tools/ops/collect_cuda_gates.py
# turns into a JSON result. It does not provision machines (tools/ops/verda_cuda_gate.sh does)
# and does not judge speed: a bench that runs is recorded, whatever its figures.
# The architectures: test-cuda's model gates (tests/cuda/run_cuda_gates.sh) run qwen3
# (tiny-tied, tiny-untied, kipp-tiny), qwen2 (tiny-qwen2) and qwen3moe (tiny-moe, when its
# GGUF and vectors are there; KIPP_GATE_MOE="FILE..." adds cuda vs cpu-ref on other qwen3moe
# files); the shape gates and benches below are qwen3's random real shapes.
# The vulkan backend (docs/vulkan.md), which every build carries: where the NVIDIA driver has
# a Vulkan manifest (nvidia_icd.json), step test-vulkan runs its gates on the GPU
# (tests/vulkan/run_vulkan_gates.sh, test tier, the loader pointed at that manifest only) and
# the benches add bench-vulkan-SHAPE-TYPE beside cuda's; where it has none, the header's INFO
# vulkan says so (the finding to record: this driver exposes no Vulkan) and neither is planned.
#
# Log format (v1), one marker per line, everything else is the steps' own output:
#   ### kipp-gate LOG v1 started=<ISO-8601 UTC> host=<hostname>
#   ### kipp-gate PLAN <step> <step> ...          the steps this run means to take, in order
#   ### kipp-gate INFO <key>=<value>              header facts (commit, gpu, driver, nvcc, cpu...)
#   ### kipp-gate BEGIN <step> kind=<k>           k: build, gate, prep (models), bench
#   ### kipp-gate END <step> rc=<n> seconds=<s>
#   ### kipp-gate SKIP <step> kind=<k> reason=<text>
#   ### kipp-gate JSON BEGIN <step> file=<path>   a bench record, verbatim, then
#   ### kipp-gate JSON END <step>
#   ### kipp-gate DONE rc=<n> seconds=<s> failed=<step,...|-> skipped=<step,...|->
# Exit status: 0 every build/prep/gate step ran and passed; 1 one failed (benches never fail
# the run; their rc is in the log); 2 bad usage; 3 none failed but a planned one was skipped
# (the time budget ran out). --skip-bench and --skip-4b leave steps out of the PLAN instead.
#
# Offline (a GPU host that reaches no package registry): with --offline, KIPP_GATE_OFFLINE=1,
# or a bundle at build/offline/ (tools/ops/prepare_offline.sh makes it where there is
# network; carry that one folder), the `deps` step is tools/ops/offline_deps.sh instead of
# `make deps`: no apt-get, pip only with --no-index, the bundle's libraries and wheels for
# what the host lacks; every later make runs with `-o deps`, and PEER_DL defaults to the
# bundle's wheels/ when the peer's sources are in it. --online (KIPP_GATE_OFFLINE=0) forces `make deps`.
set -u

usage() {
    cat <<'EOF'
usage: tools/ops/device_gate.sh [--log FILE] [--skip-bench] [--skip-4b] [--budget SECONDS]
                                [--jobs N] [--root DIR] [--offline|--online]
  --log FILE        the log (default build/device_gate.log); also echoed to stdout
  --skip-bench      gates only: no model benches, server bench, bandwidth probe, peer build
  --skip-4b         no 4B models: its shape gate and the benches use 0.6B instead
  --budget SECONDS  wall-clock budget after `make deps` (default 480): a step that would
                    start past it is skipped with a marker, a running one is stopped at it
  --jobs N          make -j (default: nproc)
  --root DIR        repository root (default: two levels above this script)
  --offline         no network: the deps step is tools/ops/offline_deps.sh (the bundle
                    build/offline/ from tools/ops/prepare_offline.sh), never `make deps`;
                    the default when build/offline/MANIFEST.txt exists
  --online          `make deps` even when a bundle is there
Environment: KIPP_GATE_PYTHON (default .venv/bin/python), CUDA_GENCODE (default -arch=native),
KIPP_GATE_MOE (qwen3moe GGUFs for test-cuda's cuda vs cpu-ref gates),
KIPP_GATE_OFFLINE (1 as --offline, 0 as --online), KIPP_OFFLINE_BUNDLE (default build/offline),
PEER_DL (the peer's sources and wheels; offline, default the bundle's wheels/).
EOF
}

OPS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$OPS/../.." && pwd)"
LOG=""
SKIP_BENCH=0
SKIP_4B=0
BUDGET=480
JOBS="$(nproc 2>/dev/null || echo 4)"
OFFLINE="${KIPP_GATE_OFFLINE:-auto}"
while (($#)); do
    case "$1" in
        --log) LOG="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --skip-bench) SKIP_BENCH=1; shift ;;
        --skip-4b) SKIP_4B=1; shift ;;
        --budget) BUDGET="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --jobs) JOBS="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --root) ROOT="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --offline) OFFLINE=1; shift ;;
        --online) OFFLINE=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "device_gate.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
case "$BUDGET" in
    ''|*[!0-9]*) echo "device_gate.sh: --budget needs whole seconds" >&2; exit 2 ;;
esac
case "$JOBS" in ''|*[!0-9]*) echo "device_gate.sh: --jobs needs a number" >&2; exit 2 ;; esac
cd "$ROOT" || { echo "device_gate.sh: cannot enter $ROOT" >&2; exit 2; }
LOG="${LOG:-build/device_gate.log}"
mkdir -p "$(dirname "$LOG")" build/device ||
    { echo "device_gate.sh: cannot create $LOG" >&2; exit 2; }
: >"$LOG" || { echo "device_gate.sh: cannot write $LOG" >&2; exit 2; }
PY="${KIPP_GATE_PYTHON:-.venv/bin/python}"
BUNDLE="${KIPP_OFFLINE_BUNDLE:-build/offline}"
case "$OFFLINE" in
    1|0) ;;
    auto|'') OFFLINE=0; [ -f "$BUNDLE/MANIFEST.txt" ] && OFFLINE=1 ;;
    *) echo "device_gate.sh: KIPP_GATE_OFFLINE must be 0 or 1" >&2; exit 2 ;;
esac
# offline, no make may run the `deps` target (scripts/setup.sh: apt-get, pip); -o is not
# passed to sub-makes, but those the gates start build files only
MAKE_DEPS=()
((OFFLINE)) && MAKE_DEPS=(-o deps)
GENCODE="${CUDA_GENCODE:--arch=native}"

# Everything from here on goes to the log and to stdout (one stream: stderr interleaves in
# order). The tee is waited for at exit so the DONE marker is never lost.
exec 3>&1
exec > >(tee -a "$LOG" >&3) 2>&1
TEE_PID=$!

T_START=$SECONDS
T0=$SECONDS
FAILED=()
SKIPPED=()

# ---- markers (collect_cuda_gates.py parses exactly these) -------------------------------
mark() { printf '### kipp-gate %s\n' "$*"; }
mark_info() { mark "INFO $1=$2"; }
mark_begin() { mark "BEGIN $1 kind=$2"; }
mark_end() { mark "END $1 rc=$2 seconds=$3"; }
mark_skip() { mark "SKIP $1 kind=$2 reason=$3"; SKIPPED+=("$1"); }
mark_json() {  # step file: the file verbatim between markers (it must exist)
    mark "JSON BEGIN $1 file=$2"
    cat "$2"
    [ -n "$(tail -c1 "$2")" ] && echo
    mark "JSON END $1"
}

elapsed() { echo $((SECONDS - T0)); }

# run_step NAME KIND CMD...: BEGIN, the command (stopped at the budget), END; a failing
# build/prep/gate step is remembered for the exit status. Returns the command's rc.
run_step() {
    local name="$1" kind="$2" left rc t
    shift 2
    left=$((BUDGET - $(elapsed)))
    if ((left <= 0)); then
        mark_skip "$name" "$kind" "budget (${BUDGET}s) spent"
        return 125
    fi
    mark_begin "$name" "$kind"
    echo "\$ $*"
    t=$SECONDS
    timeout --kill-after=10 "$left" "$@"
    rc=$?
    ((rc == 124)) && echo "device_gate.sh: $name stopped at the time budget (${BUDGET}s)"
    mark_end "$name" "$rc" "$((SECONDS - t))"
    if ((rc != 0)) && [ "$kind" != bench ]; then FAILED+=("$name"); fi
    return "$rc"
}

# ---- the plan ---------------------------------------------------------------------------
SHAPES=("0.6b:q4_k_m" "0.6b:bf16")
BENCH_SHAPE=4b
if ((SKIP_4B)); then BENCH_SHAPE=0.6b; else SHAPES+=("4b:q4_k_m"); fi
BENCH_TYPES=(bf16 q4_k_m)
# the NVIDIA driver's Vulkan manifest, where it installed one
VK_ICD=""
for f in /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json; do
    [ -f "$f" ] && { VK_ICD=$f; break; }
done
PLAN=(deps build test-cuda)
[ -n "$VK_ICD" ] && PLAN+=(test-vulkan)
for s in "${SHAPES[@]}"; do PLAN+=("model-${s%%:*}-${s#*:}" "shape-${s%%:*}-${s#*:}"); done
if ((!SKIP_BENCH)); then
    for q in "${BENCH_TYPES[@]}"; do PLAN+=("model-$BENCH_SHAPE-$q" "bench-$BENCH_SHAPE-$q"); done
    if [ -n "$VK_ICD" ]; then
        for q in "${BENCH_TYPES[@]}"; do PLAN+=("bench-vulkan-$BENCH_SHAPE-$q"); done
    fi
    PLAN+=("server-bench-$BENCH_SHAPE-q4_k_m" membw peer-cuda)
    for q in "${BENCH_TYPES[@]}"; do PLAN+=("peer-$BENCH_SHAPE-$q"); done
fi
# a model made for a shape gate is not made twice for a bench
declare -A PLANNED=()
UNIQ=()
for p in "${PLAN[@]}"; do [ -n "${PLANNED[$p]:-}" ] || { PLANNED[$p]=1; UNIQ+=("$p"); }; done
PLAN=("${UNIQ[@]}")

mark "LOG v1 started=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname 2>/dev/null || echo unknown)"
mark "PLAN ${PLAN[*]}"

# ---- header -----------------------------------------------------------------------------
if commit="$(git rev-parse HEAD 2>/dev/null)"; then
    mark_info commit "$commit"
    dirty=true
    git diff --quiet HEAD -- 2>/dev/null && dirty=false
    mark_info dirty "$dirty"
else
    mark_info commit unknown
    mark_info dirty unknown
fi
mark_info date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
    smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
    smi_rc=$?
    if ((smi_rc == 0)) && [ -n "$smi" ]; then
        while IFS= read -r line; do mark_info gpu "$line"; done <<<"$smi"
    else
        mark_info gpu_error "nvidia-smi rc=$smi_rc: $(head -n1 <<<"$smi")"
    fi
else
    mark_info gpu_error "nvidia-smi not found"
fi
if command -v nvcc >/dev/null 2>&1; then
    mark_info nvcc "$(nvcc --version 2>&1 | grep -i 'release' | head -n1)"
else
    mark_info nvcc "not found"
fi
if [ -n "$VK_ICD" ]; then
    mark_info vulkan "driver manifest $VK_ICD"
else
    mark_info vulkan "none: no nvidia_icd.json in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d (this driver exposes no Vulkan; the vulkan gates and benches are not planned)"
fi
if command -v vulkaninfo >/dev/null 2>&1; then
    mark_info vulkaninfo "$(vulkaninfo --summary 2>&1 | grep -E 'deviceName|driverInfo|apiVersion' | tr -s ' ' | paste -sd ';' - | cut -c1-400)"
fi
mark_info cpu "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || echo unknown)"
mark_info cores "$(nproc 2>/dev/null || echo unknown)"
mark_info kernel "$(uname -sr)"
mark_info budget_seconds "$BUDGET"
mark_info options "skip_bench=$SKIP_BENCH skip_4b=$SKIP_4B jobs=$JOBS gencode=$GENCODE offline=$OFFLINE"

# ---- build and gates --------------------------------------------------------------------
BUILD_OK=0
# a fresh machine has neither the Debian packages nor .venv: make deps installs what is missing
# (quick when all is there); a failure here shows up again, as the build's
if ((OFFLINE)); then
    OFFLINE_ENV=build/device/offline-env.sh
    run_step deps prep "$OPS/offline_deps.sh" --bundle "$BUNDLE" --env "$OFFLINE_ENV"
    # shellcheck disable=SC1090  # export lines written by offline_deps.sh
    [ -f "$OFFLINE_ENV" ] && . "$OFFLINE_ENV"
    if [ -z "${PEER_DL:-}" ] && ls "$BUNDLE"/wheels/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
        PEER_DL="$BUNDLE/wheels"
    fi
else
    run_step deps prep make deps
fi
# the budget is for the build, gates and benches: a fresh machine's one-time set-up (apt, pip)
# is not counted against it
T0=$SECONDS
TARGETS=(cuda-generic server-cuda test-cuda-build)
# the ordinary binaries carry the vulkan backend: its gates run build/kipp, kipp_test, kipp-server
[ -n "$VK_ICD" ] && TARGETS+=(cpu server)
# the GPU copy-bandwidth probe, where its source is in the tree (tools.bench reads it too)
[ -f bench/cuda_membw.cu ] && TARGETS+=(build/kipp-cuda-membw)
run_step build build make "${MAKE_DEPS[@]+"${MAKE_DEPS[@]}"}" -j"$JOBS" CUDA_GENCODE="$GENCODE" "${TARGETS[@]}" && BUILD_OK=1

# model_ok SHAPE TYPE: makes models/random/qwen3-SHAPE-TYPE.gguf once (step model-SHAPE-TYPE)
declare -A MODEL_RC=()
model_ok() {
    local step="model-$1-$2"
    if [ -z "${MODEL_RC[$step]:-}" ]; then
        run_step "$step" prep make "${MAKE_DEPS[@]+"${MAKE_DEPS[@]}"}" random-model SHAPE="$1" TYPE="$2"
        MODEL_RC[$step]=$?
    fi
    return "${MODEL_RC[$step]}"
}

if ((BUILD_OK)); then
    run_step test-cuda gate make "${MAKE_DEPS[@]+"${MAKE_DEPS[@]}"}" -j"$JOBS" CUDA_GENCODE="$GENCODE" test-cuda
    # the vulkan gates on the GPU: the loader reads the NVIDIA manifest only (no software
    # device in the way); a build without the backend (no glslc there) fails the step
    if [ -n "$VK_ICD" ]; then
        run_step test-vulkan gate env VK_ICD_FILENAMES="$VK_ICD" VK_DRIVER_FILES="$VK_ICD" \
            KIPP_REQUIRE_VULKAN=1 TIER=test tests/vulkan/run_vulkan_gates.sh
    fi
    for s in "${SHAPES[@]}"; do
        shape="${s%%:*}" type="${s#*:}"
        if model_ok "$shape" "$type"; then
            run_step "shape-$shape-$type" gate build/kipp_test_cuda --cpu-vs-ref-shape \
                "models/random/qwen3-$shape-$type.gguf" --backend cuda
        else
            mark_skip "shape-$shape-$type" gate "model-$shape-$type did not finish"
        fi
    done
else
    for p in "${PLAN[@]}"; do
        case "$p" in deps|build) ;; model-*) mark_skip "$p" prep "build failed" ;;
            bench-*|server-bench-*|membw|peer-*) ;;
            *) mark_skip "$p" gate "build failed" ;; esac
    done
fi

# ---- benches ----------------------------------------------------------------------------
# bench_json STEP FILE: embeds a record the bench wrote (none: a note, the step's rc says why)
bench_json() {
    if [ -s "$2" ]; then mark_json "$1" "$2"; else echo "device_gate.sh: $1 wrote no $2"; fi
}
if ((SKIP_BENCH)); then
    echo "device_gate.sh: --skip-bench: no benches"
elif ((!BUILD_OK)); then
    for p in "${PLAN[@]}"; do
        case "$p" in
            bench-*|server-bench-*|membw|peer-*) mark_skip "$p" bench "build failed" ;;
        esac
    done
else
    # tools.bench measures the GPU's bandwidth with build/kipp-cuda-membw when it is there
    MEMBW_ARG=()
    [ -x build/kipp-cuda-membw ] || MEMBW_ARG=(--no-membw)
    for q in "${BENCH_TYPES[@]}"; do
        out="build/device/bench-$BENCH_SHAPE-$q.json"
        rm -f "$out"
        if model_ok "$BENCH_SHAPE" "$q"; then
            run_step "bench-$BENCH_SHAPE-$q" bench "$PY" -m tools.bench --backend cuda \
                --binary build/kipp-cuda-generic \
                --model "models/random/qwen3-$BENCH_SHAPE-$q.gguf" \
                --prompt-tokens 512 --decode 128 --warmup 1 --runs 3 \
                "${MEMBW_ARG[@]+"${MEMBW_ARG[@]}"}" --allow-noisy --output "$out"
            [ $? -eq 125 ] || bench_json "bench-$BENCH_SHAPE-$q" "$out"
        else
            mark_skip "bench-$BENCH_SHAPE-$q" bench "model-$BENCH_SHAPE-$q did not finish"
        fi
    done
    # the vulkan backend on the same files (the bandwidth probe is cuda's: the same GPU)
    if [ -n "$VK_ICD" ]; then
        for q in "${BENCH_TYPES[@]}"; do
            out="build/device/bench-vulkan-$BENCH_SHAPE-$q.json"
            rm -f "$out"
            if model_ok "$BENCH_SHAPE" "$q"; then
                run_step "bench-vulkan-$BENCH_SHAPE-$q" bench env VK_ICD_FILENAMES="$VK_ICD" \
                    VK_DRIVER_FILES="$VK_ICD" "$PY" -m tools.bench --backend vulkan \
                    --binary build/kipp --model "models/random/qwen3-$BENCH_SHAPE-$q.gguf" \
                    --prompt-tokens 512 --decode 128 --warmup 1 --runs 3 --no-membw \
                    --allow-noisy --output "$out"
                [ $? -eq 125 ] || bench_json "bench-vulkan-$BENCH_SHAPE-$q" "$out"
            else
                mark_skip "bench-vulkan-$BENCH_SHAPE-$q" bench "model-$BENCH_SHAPE-$q did not finish"
            fi
        done
    fi
    step="server-bench-$BENCH_SHAPE-q4_k_m"
    out="build/device/$step.json"
    rm -f "$out"
    if model_ok "$BENCH_SHAPE" q4_k_m; then
        run_step "$step" bench "$PY" -m bench.server_bench --backend cuda \
            --binary build/kipp-server-cuda --model "models/random/qwen3-$BENCH_SHAPE-q4_k_m.gguf" \
            --concurrency 1,8,32,64 --parallel 64 --requests-per-client 2 --max-tokens 64 \
            --prompt-tokens 128 --output "$out"
        [ $? -eq 125 ] || bench_json "$step" "$out"
    else
        mark_skip "$step" bench "model-$BENCH_SHAPE-q4_k_m did not finish"
    fi
    # the copy-bandwidth probe and the peer's CUDA build come from another part of the work:
    # absent here is not a failure, and says so
    if [ -x build/kipp-cuda-membw ]; then
        run_step membw bench build/kipp-cuda-membw
    else
        mark_skip membw bench "skipped: not present (build/kipp-cuda-membw)"
    fi
    # the peer: llama.cpp's CUDA build from the pinned sources, then the same files through
    # bench.peer_bench in this run. A GPU host without network gets the sources from PEER_DL,
    # a folder made beforehand by `bench/peer_cuda.sh --download DIR --trim`.
    PEER_ARGS=(--no-tools)
    if [ -n "${PEER_DL:-}" ]; then
        PEER_ARGS+=(--wheelhouse "$PEER_DL")
        for f in "$PEER_DL"/llama_cpp_python-*.tar.gz; do [ -f "$f" ] && PEER_ARGS+=(--sdist "$f"); done
    fi
    if [ -x bench/peer_cuda.sh ]; then
        run_step peer-cuda bench bench/peer_cuda.sh "${PEER_ARGS[@]}"
        peer_rc=$?
    else
        mark_skip peer-cuda bench "skipped: not present (bench/peer_cuda.sh)"
        peer_rc=1
    fi
    for q in "${BENCH_TYPES[@]}"; do
        step="peer-$BENCH_SHAPE-$q"
        out="build/device/$step.json"
        rm -f "$out"
        if ((peer_rc != 0)); then
            mark_skip "$step" bench "the peer's CUDA build did not finish"
        elif model_ok "$BENCH_SHAPE" "$q"; then
            run_step "$step" bench "$PY" -m bench.peer_bench --backend cuda \
                --binary build/kipp-cuda-generic --model "models/random/qwen3-$BENCH_SHAPE-$q.gguf" \
                --prompt-tokens 512 --decode 128 --warmup 1 --runs 3 --allow-noisy --output "$out"
            [ $? -eq 125 ] || bench_json "$step" "$out"
        else
            mark_skip "$step" bench "model-$BENCH_SHAPE-$q did not finish"
        fi
    done
fi

# ---- verdict ----------------------------------------------------------------------------
RC=0
GATE_SKIPPED=0
for p in "${SKIPPED[@]+"${SKIPPED[@]}"}"; do
    case "$p" in bench-*|server-bench-*|membw|peer-*) ;; *) GATE_SKIPPED=1 ;; esac
done
if ((${#FAILED[@]})); then RC=1; elif ((GATE_SKIPPED)); then RC=3; fi
join() { local IFS=,; echo "${*:--}"; }
failed="$(join "${FAILED[@]+"${FAILED[@]}"}")"
skipped="$(join "${SKIPPED[@]+"${SKIPPED[@]}"}")"
mark "DONE rc=$RC seconds=$((SECONDS - T_START)) failed=$failed skipped=$skipped"
exec >&3 2>&1 3>&-
wait "$TEE_PID" 2>/dev/null
exit "$RC"
