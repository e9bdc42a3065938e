#!/usr/bin/env bash
# run_cpu_model.sh NAME — the model gates for one checkpoint on both host backends
# (`make test-cpu-model`, and `make test` for tiny-tied, tiny-untied and random-tiny).
#   tiny-* and downloaded checkpoints (golden vectors in tests/test-vectors/NAME): on the
#     bf16 and f32 GGUFs (sha256 checked against the manifest) the golden and phase-2 gates
#     on cpu-ref and cpu; on bf16 the multi-logit, paged, pooled and long-context gates on
#     both; cpu with f32 and bf16 KV besides its default (golden, phase-2, paged); the
#     scheduler; then every other weight type the cpu backend runs (f16, q8_0, q4_0 for the
#     tiny checkpoints): cpu vs cpu-ref on the same file (every ISA level, 1 and 2 threads)
#     and the same-backend gates on cpu; the tokenizer golden sets.
#   random-<shape>: random-weight GGUFs of a real Qwen3 shape, made by the Makefile rules
#     when missing. No golden vectors: cpu vs cpu-ref (--cpu-vs-ref-shape) in each type,
#     the scheduler on q8_0; random-tiny also runs the same-backend gates on every type on
#     cpu and on bf16 on cpu-ref, with tiny-tied's prompts (same vocabulary).
# Tiny checkpoints are made locally; real ones must have been downloaded and converted.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
name=${1:?usage: run_cpu_model.sh CHECKPOINT}
dir=models/$name
vec=tests/test-vectors/$name
K=$BUILD/kipp_test
. tests/lib.sh

# Gates that fail today for a reason reported to the lead and not papered over by a looser
# tolerance. They run and their output shows, but they are not counted; one that passes is
# a failure until its entry here is removed (so an entry cannot outlive its reason).
pending_reason() { # gate label -> reason, or nothing
    case "$1" in
    "phase-2 cpu "* | "multi-logit cpu "* | "paged KV cpu "* | "longctx cpu "*)
        echo "cpu: several tokens of one sequence in a batch (prefill attention) are not the" \
             "single-step logits within 1e-6" ;;
    "pooled KV cpu "*q8_0 | "pooled KV cpu "*q4_0 | "pooled KV cpu "*q4_k_m | "pooled KV cpu "*q6_k)
        echo "cpu: with integer-kernel weights a batch of several sequences is not the" \
             "single-step logits within 1e-6" ;;
    esac
}
# Runs one gate of build/kipp_test; a hang (a scheduling bug can loop) is a failure after
# GATE_TIMEOUT seconds, not a stuck CI job.
gate() { # label, kipp_test arguments...
    local label=$1 why t0=$SECONDS
    shift
    why=$(pending_reason "$label")
    if [ -z "$why" ]; then
        run_counted "$label" timeout "${GATE_TIMEOUT:-900}" "$K" "$@"
        echo "   ($((SECONDS - t0)) s)"
        return
    fi
    echo "== $label (pending: not counted): $K $*"
    local out rc
    out=$(timeout "${GATE_TIMEOUT:-900}" "$K" "$@" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^FAIL' | tail -n 3 | sed 's/^/   /'
    printf '%s\n' "$out" | grep '^FAIL' | head -n 2 | sed 's/^/   /'
    if [ "$rc" -eq 0 ]; then
        echo "   -> $label: now passes; remove it from pending_reason in $0"
        failed=$((failed + 1))
    else
        echo "   -> $label: pending ($why)"
        pending=$((pending + 1))
    fi
    echo "   ($((SECONDS - t0)) s)"
}
pending=0
finish() {
    local note=""
    [ "$pending" -gt 0 ] && note=" ($pending pending gates not counted)"
    echo "$passed passed, $failed failed$note"
    [ "$failed" -eq 0 ]
    exit
}
make_models() { # model files... (through the Makefile rules; a failure is one failure)
    if ! make -s "$@" >/dev/null; then
        echo "could not make $*"
        echo "0 passed, 1 failed"
        exit 1
    fi
}

# The same-backend gates (1e-6 between layouts, batchings and recomputation) on file $1
# with prompts from $2, on backend $3 (label suffix $4).
same_backend_gates() {
    local m=$1 v=$2 b=$3 what=$4
    gate "phase-2 $b $what" --phase2-model "$m" "$v" --backend "$b"
    gate "multi-logit $b $what" --multilogit "$m" "$v" --backend "$b"
    gate "paged KV $b $what" --paged-cpu "$m" "$v" --backend "$b"
    gate "pooled KV $b $what" --pooled-cpu "$m" "$v" --backend "$b"
}

case "$name" in
random-*)
    shape=${name#random-}
    types="bf16 q8_0 q4_k_m"
    [ "$shape" = tiny ] && types="bf16 f16 f32 q8_0 q4_0 q4_k_m q6_k" # every type cpu runs
    files=()
    for q in $types; do files+=("models/random/qwen3-$shape-$q.gguf"); done
    make_models "${files[@]}"
    for q in $types; do
        gate "cpu vs cpu-ref $shape $q" --cpu-vs-ref-shape "models/random/qwen3-$shape-$q.gguf"
    done
    if [ "$shape" = tiny ]; then
        # model-level gates on the 256-multiple shape (Q4_K and Q6_K), tiny-tied's prompts
        pv=tests/test-vectors/tiny-tied
        same_backend_gates "models/random/qwen3-tiny-bf16.gguf" "$pv" cpu-ref bf16
        for q in $types; do same_backend_gates "models/random/qwen3-tiny-$q.gguf" "$pv" cpu "$q"; done
    fi
    # the scheduler on the integer kernels: solo == batch == prefix cache == preemption
    gate "scheduler cpu $shape q8_0" --sched "models/random/qwen3-$shape-q8_0.gguf" --backend cpu
    finish
    ;;
esac

types="bf16 f32"
case "$name" in
tiny-*)
    types="bf16 f32 f16 q8_0 q4_0"
    files=()
    for q in $types; do files+=("$dir/kipp-$name-$q.gguf"); done
    make_models "${files[@]}"
    ;;
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
for q in $types; do
    m=$dir/kipp-$name-$q.gguf
    [ -f "$m" ] || continue
    case "$q" in
    bf16 | f32)
        # the files the vectors were made for: golden and phase-2 on both backends
        want=$(.venv/bin/python -c "import json,sys; print(json.load(open('$vec/manifest.json'))['gguf_sha256'].get('$q',''))")
        got=$(sha256sum "$m" | cut -d' ' -f1)
        if [ -n "$want" ] && [ "$want" != "$got" ]; then
            echo "== $m: sha256 $got differs from the one the vectors were made for ($want);" \
                 "rerun the converter or make vectors CHECKPOINT=$name"
            failed=$((failed + 1))
        else
            passed=$((passed + 1))
        fi
        for b in cpu-ref cpu; do
            gate "golden $b $q" --model "$m" "$vec" --backend "$b"
            gate "phase-2 $b $q" --phase2-model "$m" "$vec" --backend "$b"
        done
        ;;
    esac
    if [ "$q" = bf16 ]; then
        for b in cpu-ref cpu; do
            gate "multi-logit $b $q" --multilogit "$m" "$vec" --backend "$b"
            gate "paged KV $b $q" --paged-cpu "$m" "$vec" --backend "$b"
            gate "pooled KV $b $q" --pooled-cpu "$m" "$vec" --backend "$b"
            gate "longctx $b $q" --longctx "$m" "$vec" --backend "$b"
        done
        # the cpu backend's other KV types (its default is its own; see kipp --info)
        for kv in f32 bf16; do
            gate "golden cpu kv $kv $q" --model "$m" "$vec" --backend cpu --kv-type "$kv"
            gate "phase-2 cpu kv $kv $q" --phase2-model "$m" "$vec" --backend cpu --kv-type "$kv"
            gate "paged KV cpu kv $kv $q" --paged-cpu "$m" "$vec" --backend cpu --kv-type "$kv"
        done
    fi
    # the optimized backend against the oracle on this file: every ISA level, 1 and 2 threads
    gate "cpu vs cpu-ref $q" --cpu-vs-ref "$m" "$vec"
    case "$q" in
    bf16 | f32) ;;
    *) # no vectors for this file: cpu-vs-ref above is its golden gate; the rest on cpu
        same_backend_gates "$m" "$vec" cpu "$q"
        gate "longctx cpu $q" --longctx "$m" "$vec" --backend cpu
        ;;
    esac
done
# the scheduler (continuous batching, prefix cache, preemption, cancellation) on both
# backends; cpu-ref only on the smallest checkpoint: it is the slowest gate there is.
gate "scheduler cpu bf16" --sched "$dir/kipp-$name-bf16.gguf" --backend cpu
[ "$name" = tiny-tied ] && gate "scheduler cpu-ref bf16" --sched "$dir/kipp-$name-bf16.gguf" --backend cpu-ref
for j in tests/tok/golden.jsonl tests/tok/ascii_golden.jsonl; do
    run_counted "tokenizer golden $(basename "$j")" "$K" --tok-golden "$dir/kipp-$name-bf16.gguf" "$j"
done
finish
