#!/usr/bin/env bash
# yarn_gates.sh — YaRN rope scaling (issue 36): tiny-yarn (tiny-tied's weights, rope_theta
# 10000, rope_scaling yarn factor 4 over an original context of 16 tokens; the four golden
# prompts run 16 to 33 tokens, so positions on both sides of the original context) against
# HF transformers' logits (tests/test-vectors/tiny-yarn): cpu-ref within the vectors' bound
# and argmax, cpu NMSE <= 1e-4 against cpu-ref and argmax; cached == recomputed (phase-2) and
# the long-context gate to the scaled context (64) on both. Then the flags that set rope
# scaling (--rope-scaling, --rope-scale, --yarn-orig-ctx, ...), what --info and the
# context-size check make of them, and the refusals by name. About 10 s on 2 cores.
# (cuda: tests/cuda/test_cuda_shim.sh; vulkan: tests/vulkan/run_vulkan_gates.sh, full tier.)
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test
. tests/lib.sh
. tests/model/gate.sh
M=${YARN_MODEL:-models/tiny-yarn/kipp-tiny-yarn-bf16.gguf}
T=${TIED_MODEL:-models/tiny-tied/kipp-tiny-tied-bf16.gguf}
V=tests/test-vectors/tiny-yarn
passed=${passed:-0}; failed=${failed:-0}

gate "golden cpu-ref yarn bf16" --model "$M" "$V" --backend cpu-ref
gate "golden cpu yarn bf16" --model "$M" "$V" --backend cpu
gate "phase-2 cpu yarn bf16" --phase2-model "$M" "$V" --backend cpu
gate "longctx cpu-ref yarn bf16" --longctx "$M" "$V" --backend cpu-ref
gate "longctx cpu yarn bf16" --longctx "$M" "$V" --backend cpu

# expect LABEL WANT_RC WANT_TEXT kipp ARGS...: exit status and a fixed string in the output
expect() {
    local label=$1 want_rc=$2 want=$3 out rc
    shift 3
    out=$("$BUILD/kipp" "$@" 2>&1); rc=$?
    if [ "$rc" -eq "$want_rc" ] && printf '%s\n' "$out" | grep -qF -- "$want"; then
        passed=$((passed + 1)); echo "ok: $label"
    else
        failed=$((failed + 1)); echo "FAIL: $label: kipp $*: exit $rc (wanted $want_rc), no '$want' in:"
        printf '%s\n' "$out" | tail -n 3 | sed 's/^/   /'
    fi
}
echo "== rope scaling flags"
expect "info: the file's yarn" 0 '"rope_scaling": "yarn", "rope_factor": 4, "rope_orig_ctx": 16' --model "$M" --info
expect "info: the attention factor" 0 'attention factor 1.1386' --model "$M" --info
expect "start-up line" 0 'rope yarn x4 (original context 16, context 64' --model "$M" --prompt hi -n 1 --greedy
expect "ctx-size to the scaled context" 0 '"n_ctx": 64' --model "$M" --info -c 64
expect "ctx-size beyond it" 1 'context size 65 exceeds the model' --model "$M" --info -c 65
expect "--rope-scaling none" 0 '"rope_scaling": "none"' --model "$M" --info --rope-scaling none
expect "yarn by flags" 0 '"n_ctx_train": 4096, "rope_theta": 1e+06, "rms_eps": 1e-06, "tied_embeddings": true, "bos_id": 151643, "eos_id": 151645, "rope_scaling": "yarn", "rope_factor": 8, "rope_orig_ctx": 512' \
    --model "$T" --info --rope-scaling yarn --rope-scale 8 --yarn-orig-ctx 512
expect "ctx-size by flags" 0 '"n_ctx": 2048' --model "$T" --info -c 2048 --rope-scaling yarn --rope-scale 4
expect "--rope-freq-scale" 0 '"rope_scaling": "linear", "rope_factor": 2' --model "$T" --info --rope-scaling linear --rope-freq-scale 0.5
expect "--yarn-attn-factor" 0 '"yarn_attn_factor": 0.5' --model "$M" --info --yarn-attn-factor 0.5
expect "--yarn-beta-fast" 0 '"yarn_beta_fast": 16, "yarn_beta_slow": 2' --model "$M" --info --yarn-beta-fast 16 --yarn-beta-slow 2
expect "refused: dynamic" 2 "--rope-scaling 'dynamic' is not supported; Kipp runs none, linear and yarn" --model "$M" --info --rope-scaling dynamic
expect "refused: scale without a type" 1 'rope scale 4 given, but the rope scaling is none' --model "$T" --info --rope-scale 4
expect "refused: scale 0.5" 2 '--rope-scale expects a number in [1, 1024]' --model "$M" --info --rope-scale 0.5
expect "refused: no value" 2 '--yarn-orig-ctx needs a value' --model "$M" --info --yarn-orig-ctx
# a file whose rope.scaling.type Kipp does not run is refused at load, by name
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
.venv/bin/python - "$M" "$tmp/long.gguf" <<'PY'
import sys
d = open(sys.argv[1], "rb").read()
k = b"qwen3.rope.scaling.type" + (8).to_bytes(4, "little") + (4).to_bytes(8, "little") + b"yarn"
assert d.count(k) == 1
open(sys.argv[2], "wb").write(d.replace(k, k[:-4] + b"long"))
PY
expect "refused: a file's 'long'" 1 "model: qwen3.rope.scaling.type 'long' is not supported; Kipp runs none, linear and yarn" \
    --model "$tmp/long.gguf" --info

# the flags reach the forward pass: kipp-perplexity's mean NLL over 2 chunks of 64 tokens
nll() { "$BUILD/kipp-perplexity" -m "$M" -f tests/tok/multibyte_corpus.txt -c 64 --chunks 2 --json -q "$@" |
        sed -n 's/.*"mean_nll": \([^,]*\),.*/\1/p'; }
n0=$(nll); n1=$(nll --yarn-attn-factor 1); n2=$(nll --rope-scaling none); n3=$(nll --yarn-attn-factor 0.9)
if [ -n "$n0" ] && [ "$n0" = "$n1" ] && [ -n "$n2" ] && [ "$n2" != "$n0" ] && [ -n "$n3" ] && [ "$n3" != "$n0" ]; then
    passed=$((passed + 1)); echo "ok: perplexity: file's yarn $n0 = --yarn-attn-factor 1 $n1; --rope-scaling none $n2, --yarn-attn-factor 0.9 $n3"
else
    failed=$((failed + 1)); echo "FAIL: perplexity: mean NLL file's yarn '$n0', --yarn-attn-factor 1 '$n1', none '$n2', attn 0.9 '$n3'"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
