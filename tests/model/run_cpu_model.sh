#!/usr/bin/env bash
# run_cpu_model.sh NAME — the model gates for one checkpoint on both host backends
# (`make test-cpu-model`, and `make test` for kipp-tiny, tiny-tied, tiny-untied and random-tiny).
#   kipp-tiny (trained, shipped in weights/): as tiny-*, on the bf16 file and its q8_0, q6_k,
#     q4_k_m and q4_0 quantizations (tools/quantize.py); no f32/f16 file (no checkpoint).
#   tiny-* and downloaded checkpoints (golden vectors in tests/test-vectors/NAME): on the
#     bf16 and f32 GGUFs (sha256 checked against the manifest) the golden and phase-2 gates
#     on cpu-ref and cpu; on bf16 the multi-logit, paged, pooled and long-context gates on
#     both; cpu with f32 and bf16 KV besides its default (golden, phase-2, paged); q8_0,
#     q4_0 and q8_0/q4_0 KV on both (golden vs cpu-ref with the same KV, phase-2, paged,
#     multi-logit; tiny-tied's cheapest in the test tier, all in full); the
#     scheduler; then every other weight type the cpu backend runs (f16, q8_0, q4_0 for the
#     tiny checkpoints): cpu vs cpu-ref on the same file (every ISA level, 1 and 2 threads)
#     and the same-backend gates on cpu; tiny-tied's q4_1, q5_0, q5_1 and iq4_nl files:
#     cpu vs cpu-ref on the shape gate's tokens and phase-2 on cpu; the tokenizer golden sets.
#   random-<shape>: random-weight GGUFs of a real Qwen3 shape (random-tiny-moe: the qwen3moe test
#     shape, in every type whose experts cpu packs or runs), made by the Makefile rules
#     when missing. No golden vectors: cpu vs cpu-ref (--cpu-vs-ref-shape) in each type,
#     the scheduler on q8_0; random-tiny also runs the same-backend gates on every type on
#     cpu and on bf16 on cpu-ref, with tiny-tied's prompts (same vocabulary), and cpu vs
#     cpu-ref alone on the q2_k and iq4_xs mixes (Q2_K, Q3_K, IQ4_XS; the q5_k_m mix, Q5_K
#     packed at load, runs every gate).
# Tiny checkpoints are made locally; real ones must have been downloaded and converted.
# TIER (tests/stages.txt; unset means full) trims the repetitions, never a gate kind: in the
# test tier cpu-vs-ref runs every ISA level on bf16 and the best level on the other types,
# and the multi-logit/paged/pooled/long-context repetitions per weight type run on the
# K-quant files only (full_gate in tests/model/gate.sh names each one left out).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
name=${1:?usage: run_cpu_model.sh CHECKPOINT}
dir=models/$name
vec=tests/test-vectors/$name
K=$BUILD/kipp_test
. tests/lib.sh

# gate LABEL ARGS...: one gate, counted unless pending (tests/model/gate.sh)
. tests/model/gate.sh
finish() {
    local note=""
    [ "$pending" -gt 0 ] && note=" ($pending pending gates not counted)"
    [ "$deferred" -gt 0 ] && echo "($deferred gates of the full tier left out: TIER=${TIER:-})"
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
# with prompts from $2, on backend $3 (label suffix $4); g1 (phase-2) and g2 (the others)
# name the runner, gate or full_gate, default gate.
same_backend_gates() {
    local m=$1 v=$2 b=$3 what=$4
    ${g1:-gate} "phase-2 $b $what" --phase2-model "$m" "$v" --backend "$b"
    ${g2:-gate} "multi-logit $b $what" --multilogit "$m" "$v" --backend "$b"
    ${g2:-gate} "paged KV $b $what" --paged-cpu "$m" "$v" --backend "$b"
    ${g2:-gate} "pooled KV $b $what" --pooled-cpu "$m" "$v" --backend "$b"
}

case "$name" in
random-*)
    shape=${name#random-}
    types="bf16 q8_0 q4_k_m"
    mixes=""
    if [ "$shape" = tiny ]; then
        types="bf16 f16 f32 q8_0 q4_0 q4_k_m q6_k q5_k_m" # every type cpu runs (q5_k_m: Q5_K packed)
        mixes="q2_k iq4_xs"                               # Q2_K + Q3_K, IQ4_XS: cpu vs cpu-ref only
    fi
    # the MoE test shape (rows of 256, 16 experts, top-4): the packed and K-quant expert kernels
    [ "$shape" = tiny-moe ] && types="bf16 f16 q8_0 q4_0 q4_k_m q6_k q5_k_m"
    files=()
    for q in $types $mixes; do files+=("models/random/qwen3-$shape-$q.gguf"); done
    make_models "${files[@]}"
    for q in $types $mixes; do
        KIPP_GATE_ISA=$(type_isa "$q") gate "cpu vs cpu-ref $shape $q" --cpu-vs-ref-shape "models/random/qwen3-$shape-$q.gguf"
    done
    if [ "$shape" = tiny ]; then
        # model-level gates on the 256-multiple shape (Q4_K and Q6_K), tiny-tied's prompts
        pv=tests/test-vectors/tiny-tied
        # (cpu-ref's: its cache machinery, run on the tiny checkpoints in every tier)
        g1=full_gate g2=full_gate same_backend_gates "models/random/qwen3-tiny-bf16.gguf" "$pv" cpu-ref bf16
        # cpu: phase-2 on every type; the other same-backend gates on the K-quant and bf16
        # files in the test tier (the 32-element types run them on the tiny checkpoints)
        for q in $types; do
            g2=gate; case "$q" in bf16 | q4_k_m | q6_k) ;; *) g2=full_gate ;; esac
            g2=$g2 same_backend_gates "models/random/qwen3-tiny-$q.gguf" "$pv" cpu "$q"
        done
    fi
    # the scheduler on the integer kernels: solo == batch == prefix cache == preemption
    gate "scheduler cpu $shape q8_0" --sched "models/random/qwen3-$shape-q8_0.gguf" --backend cpu
    finish
    ;;
esac

# kipp_test's own flags (once, on tiny-tied): a bad one is a clear error, never a run
flag_error() { # expected exit status, expected text, kipp_test arguments...
    local want_rc=$1 want=$2 out rc
    shift 2
    out=$("$K" "$@" 2>&1); rc=$?
    if [ "$rc" -eq "$want_rc" ] && printf '%s\n' "$out" | grep -qF -- "$want"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: kipp_test $*: exit $rc, wanted $want_rc and '$want'"
    fi
}
if [ "$name" = tiny-tied ]; then
    echo "== kipp_test flag errors"; f0=$failed
    m=$dir/kipp-$name-bf16.gguf
    flag_error 2 "--backend needs a value" --model "$m" "$vec" --backend
    flag_error 2 "--kv-type: unknown KV type 'f8'" --model "$m" "$vec" --kv-type f8
    flag_error 2 "unknown argument '--bogus'" --phase2-model "$m" "$vec" --bogus 1
    flag_error 2 "--backend given twice" --paged-cpu "$m" "$vec" --backend cpu --backend cpu
    flag_error 2 "--tok-golden does not take --backend" --tok-golden "$m" x --backend cpu
    flag_error 2 "--model does not take --ctx" --model "$m" "$vec" --ctx 100
    flag_error 2 "--ctx needs a positive number, not '0'" --longctx "$m" --ctx 0
    flag_error 2 "--multilogit needs M V" --multilogit "$m"
    flag_error 2 "--kv-type T      KV cache type" --no-such-mode
    flag_error 1 "nosuch" --sched "$m" --backend nosuch
    echo "   -> kipp_test flag errors: $((failed - f0)) failed of 10"
fi

# the GGUF of type $1: models/NAME/kipp-NAME-TYPE.gguf; Kipp's own trained models (kipp-*)
# keep their name: models/kipp-tiny/kipp-tiny-bf16.gguf
gguf() { case "$name" in kipp-*) echo "$dir/$name-$1.gguf" ;; *) echo "$dir/kipp-$name-$1.gguf" ;; esac; }
types="bf16 f32"
case "$name" in
tiny-* | kipp-*)
    types="bf16 f32 f16 q8_0 q4_0"
    # trained: shipped bf16 (the vectors' file) and what tools/quantize.py makes of it
    case "$name" in kipp-*) types="bf16 q8_0 q6_k q4_k_m q4_0" ;; esac
    # tiny-tied also carries the other 32-element types (the Makefile's TINY_TIED_TYPES)
    [ "$name" = tiny-tied ] && extra="q4_1 q5_0 q5_1 iq4_nl"
    files=()
    for q in $types ${extra:-}; do files+=("$(gguf "$q")"); done
    for f in "$vec"/*.f32.xz; do [ -f "$f" ] && files+=("${f%.xz}"); done # committed compressed
    make_models "${files[@]}"
    ;;
esac
if [ ! -f "$(gguf bf16)" ]; then
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
    m=$(gguf "$q")
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
        # cpu-ref's same-backend gates test its cache machinery, which no checkpoint
        # changes: on kipp-tiny (hidden 512, the slowest for the scalar oracle) they run in
        # the full tier, on the tiny checkpoints in every tier
        gref=gate; case "$name" in kipp-*) gref=full_gate ;; esac
        gate "golden cpu-ref $q" --model "$m" "$vec" --backend cpu-ref
        $gref "phase-2 cpu-ref $q" --phase2-model "$m" "$vec" --backend cpu-ref
        gate "golden cpu $q" --model "$m" "$vec" --backend cpu
        gate "phase-2 cpu $q" --phase2-model "$m" "$vec" --backend cpu
        ;;
    esac
    if [ "$q" = bf16 ]; then
        for b in cpu-ref cpu; do
            g=gate; [ "$b" = cpu-ref ] && g=$gref
            $g "multi-logit $b $q" --multilogit "$m" "$vec" --backend "$b"
            $g "paged KV $b $q" --paged-cpu "$m" "$vec" --backend "$b"
            $g "pooled KV $b $q" --pooled-cpu "$m" "$vec" --backend "$b"
            # kipp-tiny's 1,024 positions in full; 512 in the test tier (the tiny
            # checkpoints' whole 512-position context runs in every tier)
            lc=()
            case "$name:${TIER:-full}" in kipp-*:full) ;; kipp-*:*) lc=(--ctx 512) ;; esac
            $g "longctx $b $q" --longctx "$m" "$vec" --backend "$b" "${lc[@]}"
        done
        # the cpu backend's other KV types (its default is its own; see kipp --info)
        for kv in f32 bf16; do
            gate "golden cpu kv $kv $q" --model "$m" "$vec" --backend cpu --kv-type "$kv"
            gate "phase-2 cpu kv $kv $q" --phase2-model "$m" "$vec" --backend cpu --kv-type "$kv"
            full_gate "paged KV cpu kv $kv $q" --paged-cpu "$m" "$vec" --backend cpu --kv-type "$kv"
        done
        # quantized KV (q8_0, q4_0, and K q8_0 with V q4_0) on both host backends: golden (on
        # a quantized type: exact argmax and NMSE <= 1e-4 against cpu-ref storing the same
        # types), phase-2 (the recomputation rounds K/V through the same types), paged. The
        # test tier runs tiny-tied's cheap ones (about 16 s); TIER=full every checkpoint's all.
        # A head dim that is no multiple of 32 (tiny-qwen2's and the MoE shapes' 16) is
        # refused by name instead, on both backends (every tier: a second each).
        hd=$("$BUILD/kipp" -m "$m" --info 2>/dev/null | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["head_dim"])')
        kvq="q8_0 q4_0 q8_0/q4_0"
        if [ $((${hd:-1} % 32)) -ne 0 ]; then
            for b in cpu cpu-ref; do
                flag_error 1 "KV type q8_0 needs a head dim that is a multiple of 32; this model's head dim is $hd" \
                    --phase2-model "$m" "$vec" --backend "$b" --kv-type q8_0
            done
            kvq=""
        fi
        for kv in $kvq; do
            gq=full_gate; gr=full_gate; gg=full_gate
            if [ "$name" = tiny-tied ]; then
                gq=gate                               # phase-2 cpu, every pair
                [ "$kv" = q8_0/q4_0 ] && gr=gate      # phase-2 cpu-ref, the mixed pair
                [ "$kv" = q4_0 ] && gg=gate           # golden cpu vs cpu-ref, q4_0
            fi
            $gq "phase-2 cpu kv $kv $q" --phase2-model "$m" "$vec" --backend cpu --kv-type "$kv"
            $gr "phase-2 cpu-ref kv $kv $q" --phase2-model "$m" "$vec" --backend cpu-ref --kv-type "$kv"
            $gg "golden cpu kv $kv $q" --model "$m" "$vec" --backend cpu --kv-type "$kv"
            full_gate "golden cpu-ref kv $kv $q" --model "$m" "$vec" --backend cpu-ref --kv-type "$kv"
            $gr "paged KV cpu kv $kv $q" --paged-cpu "$m" "$vec" --backend cpu --kv-type "$kv"
            full_gate "paged KV cpu-ref kv $kv $q" --paged-cpu "$m" "$vec" --backend cpu-ref --kv-type "$kv"
            full_gate "multi-logit cpu kv $kv $q" --multilogit "$m" "$vec" --backend cpu --kv-type "$kv"
        done
    fi
    # the optimized backend against the oracle on this file: every ISA level, 1 and 2 threads
    # (every ISA level on bf16; on the other types the best level in the test tier).
    # kipp-tiny's q6_k and q4_0 (each needs its own cpu-ref pass over kipp-tiny, the
    # oracle's slowest model) in the full tier: the test tier gates both types against the
    # oracle on random-tiny and the tiny checkpoints
    gv=gate; case "$name:$q" in kipp-*:q6_k | kipp-*:q4_0) gv=full_gate ;; esac
    KIPP_GATE_ISA=$(type_isa "$q") $gv "cpu vs cpu-ref $q" --cpu-vs-ref "$m" "$vec"
    case "$q" in
    bf16 | f32) ;;
    *) # no vectors for this file: cpu-vs-ref above is its golden gate; the rest on cpu
        # (phase-2 in every tier; the other same-backend gates on kipp-tiny's q4_k_m in
        # the test tier, on every type in full)
        g2=full_gate
        case "$name:$q" in kipp-*:q4_k_m) g2=gate ;; esac
        g2=$g2 same_backend_gates "$m" "$vec" cpu "$q"
        # kipp-tiny: 512 of its 1,024 positions (the cpu-ref recomputations at the far
        # positions dominate make test's time); bf16 above goes all the way
        lc=()
        case "$name" in kipp-*) lc=(--ctx 512) ;; esac
        # longctx per quantized type in the full tier (bf16's above runs in every tier)
        full_gate "longctx cpu $q" --longctx "$m" "$vec" --backend cpu "${lc[@]}"
        ;;
    esac
done
# the other 32-element types, at less cost: cpu vs cpu-ref on the shape gate's tokens (every
# ISA level, 1 and 2 threads, batched and interleaved) and cached == recomputed on cpu
for q in ${extra:-}; do
    KIPP_GATE_ISA=$(type_isa "$q") gate "cpu vs cpu-ref $name $q" --cpu-vs-ref-shape "$(gguf "$q")"
    gate "phase-2 cpu $q" --phase2-model "$(gguf "$q")" "$vec" --backend cpu
done
# the scheduler (continuous batching, prefix cache, preemption, cancellation) on both
# backends; cpu-ref only on the smallest checkpoint: it is the slowest gate there is.
gate "scheduler cpu bf16" --sched "$(gguf bf16)" --backend cpu
[ "$name" = tiny-tied ] && full_gate "scheduler cpu-ref bf16" --sched "$(gguf bf16)" --backend cpu-ref
for j in tests/tok/golden.jsonl tests/tok/ascii_golden.jsonl; do
    run_counted "tokenizer golden $(basename "$j")" "$K" --tok-golden "$(gguf bf16)" "$j"
done
finish
