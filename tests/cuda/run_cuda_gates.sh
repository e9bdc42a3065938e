#!/usr/bin/env bash
# run_cuda_gates.sh [CHECKPOINT...] — `make test-cuda`: the cuda backend's gates, on a machine
# with an NVIDIA GPU. build/kipp_test_cuda is kipp_test with the cuda backend linked in, so
# these are the same gates the host backends pass (docs/testing.md), run with --backend cuda:
#   the operators: every kernel vs the CPU reference over many shapes (--cuda-operators);
#   per checkpoint (default: tiny-tied tiny-untied kipp-tiny tiny-qwen2, whose golden vectors
#   are committed, and tiny-moe (qwen3moe) where its GGUF and vectors are there): golden
#   vectors on bf16 and f32 (oracle argmax + NMSE <= 1e-4 vs cpu-ref),
#   cached vs recomputed (phase-2), multi-logit, paged (adversarial block tables), pooled,
#   long context, the KV types f16 (default), bf16 and f32, the scheduler, and cuda vs
#   cpu-ref (--cpu-vs-ref) on every other weight type of the checkpoint;
#   random-tiny: cuda vs cpu-ref on every type and mix (Q4_K, Q6_K, Q5_K, Q2_K, Q3_K, IQ4_XS);
#   the KV fault matrix's cuda column (a -DKIPP_FAULT_INJECT kipp_test_cuda);
#   the CLI: greedy text from build/kipp-cuda-generic equals build/kipp's on kipp-tiny.
# RANDOM_SHAPES="0.6b 4b" adds cuda vs cpu-ref on random-weight GGUFs of real shapes (made
# by the Makefile when missing). tools/ops/device_gate.sh runs its own shape gates as steps.
# KIPP_GATE_MOE="FILE..." adds cuda vs cpu-ref on other qwen3moe GGUFs (e.g. llama.cpp's
# converter's and llama-quantize's files, carried to the GPU host).
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test_cuda
. tests/lib.sh
. tests/model/gate.sh
# the architectures of src/model/arch.c: qwen3 (tiny-tied, tiny-untied, kipp-tiny), qwen2
# (tiny-qwen2), qwen3moe (tiny-moe, once its checkpoint is built: named when it is not)
default="tiny-tied tiny-untied kipp-tiny tiny-qwen2"
if [ -f models/tiny-moe/kipp-tiny-moe-bf16.gguf ] && [ -f tests/test-vectors/tiny-moe/manifest.json ]; then
    default="$default tiny-moe"
elif [ $# -eq 0 ]; then
    echo "** qwen3moe: no models/tiny-moe/kipp-tiny-moe-bf16.gguf with vectors: its gates do not run"
    echo "** (KIPP_GATE_MOE=FILE runs cuda vs cpu-ref on any qwen3moe GGUF)"
fi
ckpts=${*:-$default}

run_counted "cuda operators" "$K" --cuda-operators

gguf() { case "$1" in kipp-*) echo "models/$1/$1-$2.gguf" ;; *) echo "models/$1/kipp-$1-$2.gguf" ;; esac; }
for name in $ckpts; do
    vec=tests/test-vectors/$name
    case "$name" in
    kipp-*) types="bf16 q8_0 q6_k q4_k_m q4_0"; full="bf16" ;;
    *) types="bf16 f32 f16 q8_0 q4_0"; full="bf16 f32" ;;
    esac
    [ "$name" = tiny-tied ] && types="$types q4_1 q5_0 q5_1 iq4_nl"
    for q in $types; do
        m=$(gguf "$name" "$q")
        case " $full " in
        *" $q "*)
            gate "golden cuda $name $q" --model "$m" "$vec" --backend cuda
            gate "phase-2 cuda $name $q" --phase2-model "$m" "$vec" --backend cuda
            ;;
        *)  gate "cuda vs cpu-ref $name $q" --cpu-vs-ref "$m" "$vec" --backend cuda
            gate "phase-2 cuda $name $q" --phase2-model "$m" "$vec" --backend cuda
            ;;
        esac
    done
    m=$(gguf "$name" bf16)
    gate "multi-logit cuda $name bf16" --multilogit "$m" "$vec" --backend cuda
    gate "paged KV cuda $name bf16" --paged-cpu "$m" "$vec" --backend cuda
    gate "pooled KV cuda $name bf16" --pooled-cpu "$m" "$vec" --backend cuda
    gate "longctx cuda $name bf16" --longctx "$m" "$vec" --backend cuda
    for kv in f32 bf16; do
        gate "golden cuda kv $kv $name bf16" --model "$m" "$vec" --backend cuda --kv-type "$kv"
        gate "paged KV cuda kv $kv $name bf16" --paged-cpu "$m" "$vec" --backend cuda --kv-type "$kv"
    done
    gate "scheduler cuda $name bf16" --sched "$m" --backend cuda
done

for q in bf16 f16 f32 q8_0 q4_0 q4_k_m q6_k q5_k_m q2_k iq4_xs; do
    gate "cuda vs cpu-ref random-tiny $q" --cpu-vs-ref-shape "models/random/qwen3-tiny-$q.gguf" --backend cuda
done
for f in ${KIPP_GATE_MOE:-}; do
    gate "cuda vs cpu-ref qwen3moe $(basename "$f")" --cpu-vs-ref-shape "$f" --backend cuda
done
for shape in ${RANDOM_SHAPES:-}; do
    for q in bf16 q8_0 q4_k_m; do
        f=models/random/qwen3-$shape-$q.gguf
        make -s "$f" >/dev/null || { echo "could not make $f"; failed=$((failed + 1)); continue; }
        gate "cuda vs cpu-ref random-$shape $q" --cpu-vs-ref-shape "$f" --backend cuda
    done
done

run_counted "KV fault matrix (cuda column)" env FAULT_BACKENDS=cuda tests/model/fault_matrix.sh

# the CLI on the GPU: the same greedy text as the cpu backend's
m=models/kipp-tiny/kipp-tiny-bf16.gguf
want=$("$BUILD/kipp" --model "$m" --backend cpu --greedy -n 48 --prompt "def fibonacci(n):" 2>/dev/null)
got=$("$BUILD/kipp-cuda-generic" --model "$m" --backend cuda --greedy -n 48 --prompt "def fibonacci(n):" 2>/dev/null)
if [ -n "$want" ] && [ "$want" = "$got" ]; then
    passed=$((passed + 1)); echo "ok: kipp-cuda-generic greedy text == kipp --backend cpu"
else
    failed=$((failed + 1)); echo "FAIL: kipp-cuda-generic greedy text differs from kipp --backend cpu"
    printf 'cpu:  %s\ncuda: %s\n' "$want" "$got" | head -c 2000
fi

[ "$pending" -gt 0 ] && echo "($pending pending gates not counted)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
