#!/usr/bin/env bash
# run_cpu_model.sh NAME — the CPU model suite for one checkpoint (`make test-cpu-model`):
# golden-vector gate and phase-2 (cached vs recomputed) gate on cpu-ref, for the bf16 GGUF
# and the f32 GGUF when present; the paged-KV gates (multi-logit batches, adversarial block
# tables, pooled sequences) on the bf16 GGUF; the cpu backend vs cpu-ref on both; plus the
# tokenizer golden set. Tiny checkpoints are made
# locally; real ones must have been downloaded and converted first.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
name=${1:?usage: run_cpu_model.sh CHECKPOINT}
dir=models/$name
vec=tests/test-vectors/$name
. tests/lib.sh

# random-<shape> (0.6b, 1.7b, 4b, 8b): random-weight GGUFs of a real Qwen3 shape, made by the
# project's tools when missing. No golden vectors exist for them: the cpu backend is gated
# against cpu-ref (every ISA level, 1 and 2 threads) on bf16, q8_0 and q4_k_m.
case "$name" in
random-*)
    shape=${name#random-}
    rdir=models/random
    mkdir -p "$rdir"
    if [ ! -f "$rdir/qwen3-$shape-bf16.gguf" ]; then
        .venv/bin/python -m tools.make_random_model --shape "$shape" --type bf16 \
            --output "$rdir/qwen3-$shape-bf16.gguf" || { echo "0 passed, 1 failed"; exit 1; }
    fi
    for q in q8_0 q4_k_m; do
        if [ ! -f "$rdir/qwen3-$shape-$q.gguf" ]; then
            .venv/bin/python -m tools.quantize "$rdir/qwen3-$shape-bf16.gguf" \
                "$rdir/qwen3-$shape-$q.gguf" --type "$q" || { echo "0 passed, 1 failed"; exit 1; }
        fi
    done
    for q in bf16 q8_0 q4_k_m; do
        run_counted "cpu vs cpu-ref $shape $q" "$BUILD/kipp_test" --cpu-vs-ref-shape "$rdir/qwen3-$shape-$q.gguf"
    done
    # the scheduler on the integer kernels: solo == batch == prefix cache == preemption
    run_counted "scheduler $shape q8_0" timeout 900 "$BUILD/kipp_test" --sched "$rdir/qwen3-$shape-q8_0.gguf"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
    ;;
esac

case "$name" in
tiny-*) make -s "$dir/kipp-$name-bf16.gguf" "$dir/kipp-$name-f32.gguf" "$dir/kipp-$name-q8_0.gguf" >/dev/null || exit 1 ;;
esac
if [ ! -f "$dir/kipp-$name-bf16.gguf" ]; then
    echo "model not found — run tools/download_model.sh $name && .venv/bin/python -m tools.convert_to_gguf $dir --outtype bf16" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -f "$vec/manifest.json" ]; then
    echo "no golden vectors in $vec — run make vectors CHECKPOINT=$name" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
for q in bf16 f32; do
    m=$dir/kipp-$name-$q.gguf
    [ -f "$m" ] || continue
    want=$(.venv/bin/python -c "import json,sys; print(json.load(open('$vec/manifest.json'))['gguf_sha256'].get('$q',''))")
    got=$(sha256sum "$m" | cut -d' ' -f1)
    if [ -n "$want" ] && [ "$want" != "$got" ]; then
        echo "== $m: sha256 $got differs from the one the vectors were made for ($want);" \
             "rerun the converter or make vectors CHECKPOINT=$name"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
    run_counted "golden $q" "$BUILD/kipp_test" --model "$m" "$vec"
    run_counted "phase-2 $q" "$BUILD/kipp_test" --phase2-model "$m" "$vec"
    if [ "$q" = bf16 ]; then
        run_counted "multi-logit $q" "$BUILD/kipp_test" --multilogit "$m" "$vec"
        run_counted "paged KV $q" "$BUILD/kipp_test" --paged-cpu "$m" "$vec"
        run_counted "pooled KV $q" "$BUILD/kipp_test" --pooled-cpu "$m" "$vec"
    fi
    # the optimized backend against the oracle: every ISA level here, 1 and 2 threads
    run_counted "cpu vs cpu-ref $q" "$BUILD/kipp_test" --cpu-vs-ref "$m" "$vec"
done
# the scheduler (continuous batching, prefix cache, preemption, cancellation) on the cpu
# backend; a hang (a scheduling bug can loop) is a failure, not a stuck CI job
run_counted "scheduler bf16" timeout 600 "$BUILD/kipp_test" --sched "$dir/kipp-$name-bf16.gguf"
# the integer (8-bit activation) kernels: the Q8_0 file against cpu-ref on the same file
if [ -f "$dir/kipp-$name-q8_0.gguf" ]; then
    run_counted "cpu vs cpu-ref q8_0" "$BUILD/kipp_test" --cpu-vs-ref "$dir/kipp-$name-q8_0.gguf" "$vec"
fi
for j in tests/tok/golden.jsonl tests/tok/ascii_golden.jsonl; do
    run_counted "tokenizer golden $(basename "$j")" "$BUILD/kipp_test" --tok-golden "$dir/kipp-$name-bf16.gguf" "$j"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
