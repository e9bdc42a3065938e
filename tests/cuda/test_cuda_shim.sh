#!/usr/bin/env bash
# test_cuda_shim.sh — the cuda backend's host side on a machine without a GPU:
# build/kipp_test_cuda_shim is kipp_test with cuda.c and forward.c linked against a
# host-memory stand-in for the CUDA runtime and the kernels (tests/cuda/shim/host_shim.c).
# The model gates with --backend cuda then check what the host side decides: weight upload,
# batching and chunking, the staging copy, block tables (paged, pooled), the private store
# of recomputation (phase-2), KV types, the scheduler, and CUDA graphs (captured and
# replayed; the same gates pass with graphs off). The real kernels are checked on a GPU only
# (make test-cuda). Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test_cuda_shim
. tests/lib.sh
. tests/model/gate.sh
M=models/tiny-tied/kipp-tiny-tied-bf16.gguf
V=tests/test-vectors/tiny-tied

gate "golden cuda-shim bf16" --model "$M" "$V" --backend cuda
gate "golden cuda-shim kv bf16" --model "$M" "$V" --backend cuda --kv-type bf16
gate "phase-2 cuda-shim bf16" --phase2-model "$M" "$V" --backend cuda
gate "phase-2 cuda-shim kv f32" --phase2-model "$M" "$V" --backend cuda --kv-type f32
gate "multi-logit cuda-shim bf16" --multilogit "$M" "$V" --backend cuda
gate "paged KV cuda-shim bf16" --paged-cpu "$M" "$V" --backend cuda
gate "pooled KV cuda-shim bf16" --pooled-cpu "$M" "$V" --backend cuda
gate "cuda-shim vs cpu-ref random-tiny q4_k_m" --cpu-vs-ref-shape models/random/qwen3-tiny-q4_k_m.gguf \
    --backend cuda
# the scheduler's many small steps go through captured graphs: some must have replayed
out=$(SHIM_REPORT=1 "$K" --sched "$M" --backend cuda 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 2 | sed 's/^/   /'
replays=$(printf '%s\n' "$out" | sed -n 's/^shim: [0-9]* graph captures, \([0-9]*\) replays$/\1/p')
if [ "$rc" -eq 0 ] && [ "${replays:-0}" -gt 0 ]; then
    passed=$((passed + 1)); echo "ok: scheduler gate on cuda-shim passes with ${replays} graph replays"
else
    failed=$((failed + 1)); echo "FAIL: scheduler gate on cuda-shim: exit $rc, ${replays:-no} graph replays"
fi
# graphs off (KIPP_CUDA_GRAPHS=0, direct launches) passes the same gates
export KIPP_CUDA_GRAPHS=0
gate "phase-2 cuda-shim bf16, graphs off" --phase2-model "$M" "$V" --backend cuda
gate "pooled KV cuda-shim bf16, graphs off" --pooled-cpu "$M" "$V" --backend cuda
unset KIPP_CUDA_GRAPHS
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
