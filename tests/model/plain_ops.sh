#!/usr/bin/env bash
# plain_ops.sh — the plain operation path (src/backend/ops.h) on the cpu backend: with
# KIPP_PLAIN_OPS=1 the layer program's driver never takes a backend's fused path, so every
# op runs as the plain operations a new backend would implement. One checkpoint per
# architecture (qwen3: tiny-untied, q/k head norms; qwen2: tiny-qwen2, q/k/v biases;
# qwen3moe: tiny-moe-k4, the expert operations): golden and phase-2 on bf16, and cpu against
# cpu-ref on q8_0 at every ISA level. The other stages run the fused path.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test
. tests/lib.sh
. tests/model/gate.sh
export KIPP_PLAIN_OPS=1
for t in tiny-untied tiny-qwen2 tiny-moe-k4; do
    d=models/$t v=tests/test-vectors/$t
    gate "golden cpu bf16 $t (plain ops)" --model "$d/kipp-$t-bf16.gguf" "$v" --backend cpu
    gate "phase-2 cpu bf16 $t (plain ops)" --phase2-model "$d/kipp-$t-bf16.gguf" "$v" --backend cpu
    gate "cpu vs cpu-ref q8_0 $t (plain ops)" --cpu-vs-ref "$d/kipp-$t-q8_0.gguf" "$v"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
