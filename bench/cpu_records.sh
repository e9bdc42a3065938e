#!/usr/bin/env bash
# cpu_records.sh — reproduces the committed CPU speed records (BENCHMARKS.md): Kipp's cpu
# backend against llama.cpp (bench/peer_bench.py) on random-weight Qwen3 GGUFs, 2 threads,
# a 512-token prompt then 128 decode steps (4B: 64), in one invocation per file. Run it on an
# idle machine from a clean checkout with a current build (bench/README.md); the models are
# made with `make random-model` when missing. Usage: bench/cpu_records.sh [OUTDIR]
# Environment: RECORD_TAG=T names the files cpu-T-<shape>-<type>.json (a second machine
# kind, e.g. avx2 for a CPU without AVX-512); SHAPES="0.6b" limits the shapes (default
# "0.6b 4b"); ALLOW_NOISY=1 writes records above the dispersion limit, marked noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
# records are written outside the work tree and moved into $out at the end: writing a
# tracked bench/results file mid-way would make the later records "dirty"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
make -s cpu build/kipp-membw
run() { # shape type decode runs
    local shape=$1 type=$2 decode=$3 runs=$4
    # made only when missing (make would remake them whenever the tools are newer)
    [ -f "models/random/qwen3-$shape-$type.gguf" ] || make -s random-model SHAPE="$shape" TYPE="$type"
    .venv/bin/python -m bench.peer_bench --model "models/random/qwen3-$shape-$type.gguf" \
        --prompt-tokens 512 --decode "$decode" --threads 2 --warmup 1 --runs "$runs" \
        --output "$tmp/cpu-${RECORD_TAG:+$RECORD_TAG-}$shape-$type.json" ${ALLOW_NOISY:+--allow-noisy}
}
for shape in ${SHAPES:-0.6b 4b}; do
    case $shape in
    0.6b) run 0.6b bf16 128 3; run 0.6b q8_0 128 3; run 0.6b q4_k_m 128 3 ;;
    4b) run 4b q4_k_m 64 3; run 4b q8_0 64 3; run 4b bf16 64 3 ;;
    *) echo "cpu_records.sh: unknown shape $shape (0.6b, 4b)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out" && mv "$tmp"/cpu-*.json "$out"/
