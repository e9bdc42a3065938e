#!/usr/bin/env bash
# run_vulkan_gates.sh [CHECKPOINT...] — the vulkan backend's gates (stage vulkan of make test;
# `make test-vulkan`), on the first Vulkan device (KIPP_VK_DEVICE=N picks another; in make test
# it is Mesa's lavapipe, software Vulkan on the CPU, which make deps installs). The vulkan
# backend is in the ordinary binaries, so these are the same gates the host backends pass
# (docs/testing.md), run with --backend vulkan:
#   the fatal start-up errors: no loader, no driver, a device index out of range — each names
#     what is missing, exits non-zero, never falls back;
#   the operators: the runtime and every kernel vs the CPU reference over many shapes, each
#     weight type's dequantization bit-exact (--vulkan-operators);
#   every gate kind on tiny-tied (qwen3): golden vectors (oracle argmax + NMSE <= 1e-4 vs
#     cpu-ref), cached vs recomputed (phase-2), multi-logit, paged (adversarial block tables),
#     pooled, long context, the scheduler (its backend part: the same tokens solo and in a
#     batch of 8, the scheduler's thread driving the device); golden on kipp-tiny (qwen3,
#     trained: peaked logits; its lm_head is split in two views on lavapipe) and tiny-qwen2
#     (qwen2); golden and paged on tiny-moe (qwen3moe); the KV types bf16 and f32 at
#     model level in the full tier (every KV type's stores and attention at kernel level in
#     both);
#   weight types, vulkan vs cpu-ref (--cpu-vs-ref): Q4_K+Q6_K (random-tiny) besides bf16;
#     the full tier every type the cpu backend runs: F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
#     IQ4_NL on tiny-tied, Q5_K, Q2_K+Q3_K and IQ4_XS on random-tiny,
#     the K-quants on kipp-tiny and the MoE's experts in Q4_K/Q8_0 (every type is checked at
#     kernel level by the operators in both tiers);
#   matrices split into parts below the device's storage-view bound: kipp-tiny's lm_head
#     exceeds lavapipe's 128 MiB on its own, and KIPP_VK_MAX_VIEW=65536 splits every matrix
#     (golden on tiny-tied and on tiny-moe, whose expert stacks then span parts);
#   the CLI's greedy text on vulkan == on cpu (kipp-tiny), and kipp-server --backend vulkan
#     (tests/server/smoke.sh).
# The KV fault matrix's vulkan column runs in stage fault-matrix. TIER=full (make test-full,
# make test-vulkan) runs every gate kind on every checkpoint (the whole scheduler gate, the MoE
# shapes k1, k4, 64 and tie, tiny-untied) and the remaining weight files; the test tier keeps
# each gate kind and each architecture and weight type once (about 4 minutes of lavapipe,
# much of it the cpu-ref references the gates compute). Ends with "N passed, N failed"; exits
# non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test
. tests/lib.sh
. tests/model/gate.sh
TIER=${TIER:-full}
# lavapipe runs one thread per core by default; the stage counts as one core (tests/stages.txt),
# so one thread: two would take the CPU of the stage beside it (LP_NUM_THREADS=N overrides)
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}
t_start=$SECONDS

# the binaries say whether they carry the backend (make leaves it out, loudly, where glslc or
# the Vulkan headers are missing; CI sets KIPP_REQUIRE_VULKAN=1, so there it must be in)
if ! "$BUILD/kipp" --help 2>&1 | grep -q 'this binary has .*vulkan'; then
    if [ "${KIPP_REQUIRE_VULKAN:-}" != 1 ]; then
        echo "vulkan: NOT TESTED: $BUILD/kipp was built without the vulkan backend (make deps, rebuild)"
        echo "0 passed, 0 failed"; exit 0
    fi
    echo "FAIL: $BUILD/kipp was built without the vulkan backend and KIPP_REQUIRE_VULKAN=1"
    echo "0 passed, 1 failed"; exit 1
fi

# ---- fatal start-up errors ---------------------------------------------------------------------
M=models/tiny-tied/kipp-tiny-tied-bf16.gguf
expect_fatal() { # label, text on stderr, command...
    local label=$1 want=$2 out rc err
    shift 2
    err=$(mktemp)
    out=$(timeout 120 "$@" 2>"$err" </dev/null); rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -qF -- "$want" "$err" && [ -z "$out" ]; then
        passed=$((passed + 1)); echo "ok: $label: exit $rc, '$(grep -F -- "$want" "$err" | head -n 1 | cut -c1-170)'"
    else
        failed=$((failed + 1)); echo "FAIL: $label: exit $rc, stdout '${out:0:100}', stderr:"; head -3 "$err"
    fi
    rm -f "$err"
}
expect_fatal "no loader" "cannot open the Vulkan loader" \
    env KIPP_VULKAN_LOADER=/nonexistent/libvulkan.so.1 "$BUILD/kipp" -m "$M" --backend vulkan -p hi -n 1
expect_fatal "no driver" "no Vulkan driver" \
    env VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json "$BUILD/kipp" -m "$M" --backend vulkan -p hi -n 1
expect_fatal "device out of range" "--device 7 is out of range" "$BUILD/kipp" -m "$M" --backend vulkan --device 7 -p hi -n 1

# ---- the operators ---------------------------------------------------------------------------
t0=$SECONDS
run_counted "vulkan operators" "$K" --vulkan-operators
echo "   ($((SECONDS - t0)) s)"
# with push descriptors (VK_KHR_push_descriptor, opt-in: KIPP_VK_PUSH_DESCRIPTOR=1) in place
# of descriptor sets from a pool (full tier)
if [ "$TIER" = full ]; then
    t0=$SECONDS
    KIPP_VK_PUSH_DESCRIPTOR=1 run_counted "vulkan operators, push descriptors" "$K" --vulkan-operators
    echo "   ($((SECONDS - t0)) s)"
fi

# ---- the model gates ---------------------------------------------------------------------------
gguf() { case "$1" in kipp-*) echo "models/$1/$1-$2.gguf" ;; *) echo "models/$1/kipp-$1-$2.gguf" ;; esac; }
model_gates() { # checkpoint [kinds]: the gate kinds (default: all) on its bf16 file
    local name=$1 kinds=${2:-all} m vec=tests/test-vectors/$1
    m=$(gguf "$name" bf16)
    has() { [ "$kinds" = all ] || case " $kinds " in *" $1 "*) true ;; *) false ;; esac; }
    has golden && gate "golden vulkan $name bf16" --model "$m" "$vec" --backend vulkan
    has phase2 && gate "phase-2 vulkan $name bf16" --phase2-model "$m" "$vec" --backend vulkan
    has multilogit && gate "multi-logit vulkan $name bf16" --multilogit "$m" "$vec" --backend vulkan
    has paged && gate "paged KV vulkan $name bf16" --paged-cpu "$m" "$vec" --backend vulkan
    has pooled && gate "pooled KV vulkan $name bf16" --pooled-cpu "$m" "$vec" --backend vulkan
    has longctx && gate "longctx vulkan $name bf16" --longctx "$m" "$vec" --backend vulkan
    if has kv && { [ "$kinds" != all ] || [ "$TIER" = full ]; }; then
        for kv in f32 bf16; do
            gate "golden vulkan kv $kv $name bf16" --model "$m" "$vec" --backend vulkan --kv-type "$kv"
        done
    fi
    if [ "$kinds" = all ] && [ "$TIER" = full ]; then
        gate "scheduler vulkan $name bf16" --sched "$m" --backend vulkan
    elif [ "$kinds" = all ]; then
        KT_SCHED_BACKEND=1 gate "scheduler (backend parts) vulkan $name bf16" --sched "$m" --backend vulkan
    fi
    return 0
}
if [ $# -gt 0 ]; then
    for name in "$@"; do model_gates "$name"; done
elif [ "$TIER" = full ]; then
    for name in tiny-tied kipp-tiny tiny-qwen2 tiny-moe tiny-untied tiny-moe-k1 tiny-moe-k4 tiny-moe-64 tiny-moe-tie; do
        model_gates "$name"
    done
else
    model_gates tiny-tied
    model_gates kipp-tiny "golden"
    model_gates tiny-qwen2 "golden"
    model_gates tiny-moe "golden paged"
fi

# YaRN rope scaling (tiny-yarn: positions on both sides of the original context): golden in
# the full tier (the host builds the scaled cos/sin tables; tests/model/yarn_gates.sh gates
# cpu-ref and cpu in every tier)
[ $# -eq 0 ] && full_gate "golden vulkan tiny-yarn bf16" --model models/tiny-yarn/kipp-tiny-yarn-bf16.gguf \
    tests/test-vectors/tiny-yarn --backend vulkan

# weight types, vulkan vs cpu-ref: in the test tier a 32-element block type (Q8_0) and the
# K-quants with their super-blocks (Q4_K + Q6_K) at model level, every type at kernel level
# (the operators above: each type's dequantization bit-exact, its products within bound);
# the full tier every type at model level
V=tests/test-vectors/tiny-tied
gate "vulkan vs cpu-ref random-tiny q4_k_m" --cpu-vs-ref-shape models/random/qwen3-tiny-q4_k_m.gguf --backend vulkan
if [ "$TIER" = full ]; then
    gate "vulkan vs cpu-ref tiny-tied q8_0" --cpu-vs-ref "$(gguf tiny-tied q8_0)" "$V" --backend vulkan
    gate "golden vulkan tiny-tied f32" --model "$(gguf tiny-tied f32)" "$V" --backend vulkan
    for q in f16 q4_0 q4_1 q5_0 q5_1 iq4_nl; do
        gate "vulkan vs cpu-ref tiny-tied $q" --cpu-vs-ref "$(gguf tiny-tied "$q")" "$V" --backend vulkan
    done
    for q in q5_k_m q2_k iq4_xs; do
        gate "vulkan vs cpu-ref random-tiny $q" --cpu-vs-ref-shape "models/random/qwen3-tiny-$q.gguf" --backend vulkan
    done
    gate "vulkan vs cpu-ref random-tiny-moe q4_k_m" --cpu-vs-ref-shape models/random/qwen3-tiny-moe-q4_k_m.gguf --backend vulkan
    gate "vulkan vs cpu-ref tiny-moe q8_0" --cpu-vs-ref "$(gguf tiny-moe q8_0)" tests/test-vectors/tiny-moe --backend vulkan
    for q in bf16 f16 f32 q8_0 q4_0 q6_k; do
        gate "vulkan vs cpu-ref random-tiny $q" --cpu-vs-ref-shape "models/random/qwen3-tiny-$q.gguf" --backend vulkan
    done
    for q in q8_0 q4_k_m q6_k q4_0; do
        gate "vulkan vs cpu-ref kipp-tiny $q" --cpu-vs-ref "$(gguf kipp-tiny "$q")" tests/test-vectors/kipp-tiny --backend vulkan
    done
fi

# an embeddings context (no lm_head: the final-norm hidden state read back) against HF's
gate "embed golden vulkan tiny-embed bf16" --embed-golden models/tiny-embed/kipp-tiny-embed-bf16.gguf \
    tests/test-vectors/tiny-embed --backend vulkan

# every matrix split into 64 KiB parts (one dispatch per part, each writing its rows' columns)
# (tiny-tied in the full tier: tiny-moe splits the same matrices and its expert stacks besides)
KIPP_VK_MAX_VIEW=65536 full_gate "golden vulkan split views tiny-tied bf16" --model "$M" "$V" --backend vulkan
KIPP_VK_MAX_VIEW=65536 gate "golden vulkan split views tiny-moe bf16" --model "$(gguf tiny-moe bf16)" \
    tests/test-vectors/tiny-moe --backend vulkan

# ---- the CLI and the server ------------------------------------------------------------------
m=models/kipp-tiny/kipp-tiny-bf16.gguf
want=$("$BUILD/kipp" --model "$m" --backend cpu --greedy -n 32 --prompt "def fibonacci(n):" 2>/dev/null)
got=$("$BUILD/kipp" --model "$m" --backend vulkan --greedy -n 32 --prompt "def fibonacci(n):" 2>/dev/null)
if [ -n "$want" ] && [ "$want" = "$got" ]; then
    passed=$((passed + 1)); echo "ok: kipp --backend vulkan greedy text == --backend cpu (kipp-tiny, 32 tokens)"
else
    failed=$((failed + 1)); echo "FAIL: kipp --backend vulkan greedy text differs from --backend cpu"
    printf 'cpu:    %s\nvulkan: %s\n' "$want" "$got" | head -c 2000
fi
info=$("$BUILD/kipp" --model "$M" --backend vulkan --info 2>/dev/null)
if printf '%s' "$info" | grep -q '"backend": "vulkan"' && printf '%s' "$info" | grep -q '"driver": ' &&
   printf '%s' "$info" | grep -q '"api_version": "1\.'; then
    passed=$((passed + 1)); echo "ok: kipp --info names the vulkan device, driver and API version"
else
    failed=$((failed + 1)); echo "FAIL: kipp --info on vulkan: $info"
fi
run_counted "server smoke on vulkan" env SMOKE_BACKEND=vulkan tests/server/smoke.sh

[ "$pending" -gt 0 ] && echo "($pending pending gates not counted)"
echo "vulkan gates: $((SECONDS - t_start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
