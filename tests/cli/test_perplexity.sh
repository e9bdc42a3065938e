#!/usr/bin/env bash
# test_perplexity.sh — build/kipp-perplexity on the trained kipp-tiny: its perplexity over
# the held-out text is far below the unigram baseline's (a trained model, a working tool),
# cpu and cpu-ref agree, a file against itself has KL-divergence 0 and full top-1 agreement,
# a quantized file has a KL-divergence above 0 and below a bound, q4_0 loses more than q8_0,
# and bad input (missing file, short text, bad --ctx, bad flag) is a clear error.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
P=$BUILD/kipp-perplexity
M=models/kipp-tiny/kipp-tiny-bf16.gguf
Q8=models/kipp-tiny/kipp-tiny-q8_0.gguf
Q4=models/kipp-tiny/kipp-tiny-q4_0.gguf
T=bench/data/kipp-tiny-heldout.txt
. tests/cli/expect.sh
for f in "$M" "$Q8" "$Q4"; do [ -f "$f" ] || make -s "$f" >/dev/null || bad "make $f"; done
field() { .venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
cmp_le() { .venv/bin/python -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2"; }

A=(--file "$T" --ctx 128 --chunks 4 --json --quiet)
"$P" -m "$M" "${A[@]}" --backend cpu >"$tmp/cpu.json" && ok || bad "cpu run"
"$P" -m "$M" "${A[@]}" --backend cpu-ref >"$tmp/ref.json" && ok || bad "cpu-ref run"
ppl=$(field "$tmp/cpu.json" ppl); ref=$(field "$tmp/ref.json" ppl)
n=$(field "$tmp/cpu.json" scored_tokens)
[ "$n" = $((4 * 63)) ] && ok || bad "scored tokens $n, want 4 chunks x 63"
# the unigram baseline of the held-out prose is ~900 (weights/MANIFEST.json); trained: far below
cmp_le "$ppl" 100 && ok || bad "kipp-tiny perplexity $ppl is not below 100: untrained weights or a broken tool"
cmp_le 1.5 "$ppl" && ok || bad "perplexity $ppl is implausibly low"
.venv/bin/python -c "import sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if abs(a/b-1) < 1e-3 else 1)" "$ppl" "$ref" \
    && ok || bad "cpu perplexity $ppl differs from cpu-ref's $ref by more than 0.1 %"

"$P" -m "$M" "${A[@]}" --kl-base "$M" >"$tmp/self.json" && ok || bad "self KL run"
[ "$(field "$tmp/self.json" kld_max)" = 0.0 ] && ok || bad "KL of a file against itself: $(field "$tmp/self.json" kld_max), want 0"
[ "$(field "$tmp/self.json" same_top1)" = 1.0 ] && ok || bad "top-1 agreement with itself is not 1"
"$P" -m "$Q8" "${A[@]}" --kl-base "$M" >"$tmp/q8.json" && ok || bad "q8_0 KL run"
"$P" -m "$Q4" "${A[@]}" --kl-base "$M" >"$tmp/q4.json" && ok || bad "q4_0 KL run"
k8=$(field "$tmp/q8.json" kld_mean); k4=$(field "$tmp/q4.json" kld_mean)
cmp_le 1e-9 "$k8" && cmp_le "$k8" 0.01 && ok || bad "q8_0 KLD $k8 not in (0, 0.01]"
cmp_le "$k8" "$k4" && ok || bad "q4_0 KLD $k4 is below q8_0's $k8"
[ "$(field "$tmp/q8.json" ppl_base)" = "$ppl" ] && ok || bad "ppl_base of the KL run differs from the base's own ppl"
# a KV type's cost: the same file as model and base, the base with f16 KV (2 chunks: ~4 s)
B=(--file "$T" --ctx 128 --chunks 2 --json --quiet --kl-base "$M" --kl-base-kv-type f16)
"$P" -m "$M" "${B[@]}" --kv-type q8_0 >"$tmp/kv8.json" && ok || bad "q8_0 KV KL run"
"$P" -m "$M" "${B[@]}" --cache-type-k q8_0 --cache-type-v q4_0 >"$tmp/kv84.json" && ok || bad "q8_0/q4_0 KV KL run"
[ "$(field "$tmp/kv84.json" kv_type)/$(field "$tmp/kv84.json" kv_type_v)/$(field "$tmp/kv84.json" kl_base_kv_type)" = q8_0/q4_0/f16 ] \
    && ok || bad "KV types of the KL run: $(cat "$tmp/kv84.json")"
k8=$(field "$tmp/kv8.json" kld_mean); k84=$(field "$tmp/kv84.json" kld_mean)
cmp_le 1e-9 "$k8" && cmp_le "$k8" 0.001 && ok || bad "q8_0 KV KLD $k8 not in (0, 0.001]"
cmp_le "$k8" "$k84" && ok || bad "q8_0/q4_0 KV KLD $k84 is below q8_0's $k8"
"$P" -m "$M" --file "$T" --ctx 128 --chunks 1 --quiet | grep -qE '^PPL = [0-9.]+ \+/- [0-9.]+ over 63 tokens' \
    && ok || bad "text output"

# bad input
expect_fail "missing model" "cannot open|No such file" "$P" -m "$tmp/none.gguf" --file "$T"
expect_fail "missing text" "cannot open $tmp/none.txt" "$P" -m "$M" --file "$tmp/none.txt"
printf 'short text' >"$tmp/short.txt"
expect_fail "short text" "fewer than one chunk" "$P" -m "$M" --file "$tmp/short.txt"
expect_fail "ctx too small" "--ctx expects" "$P" -m "$M" --file "$T" --ctx 8
expect_fail "ctx beyond training" "exceeds the model.s trained context length 1024" "$P" -m "$M" --file "$T" --ctx 1000000
expect_fail "no --file" "--model and --file are required" "$P" -m "$M"
expect_fail "unknown flag" "unknown option '--bogus'" "$P" -m "$M" --file "$T" --bogus
expect_fail "--per-token without --json" "--per-token needs --json" "$P" -m "$M" --file "$T" --per-token
# --per-token: one [position, token id, log-probability] per scored token, their mean -log the mean NLL
"$P" -m "$M" "${A[@]}" --per-token >"$tmp/per.json" && ok || bad "--per-token run"
.venv/bin/python -c "
import json, sys; d = json.load(open(sys.argv[1])); pt = d['per_token']
assert len(pt) == d['scored_tokens'] and all(lp <= 0 for _, _, lp in pt), 'per_token entries'
assert abs(-sum(lp for _, _, lp in pt) / len(pt) - d['mean_nll']) < 1e-6, 'per_token mean'
assert [p for p, _, _ in pt[:3]] == [65, 66, 67], [p for p, _, _ in pt[:3]]" "$tmp/per.json" && ok || bad "--per-token values"
expect_fail "bad --kl-base-kv-type" "--kl-base-kv-type: unknown KV type 'q5_0'" "$P" -m "$M" --file "$T" --kl-base "$M" --kl-base-kv-type q5_0
expect_fail "missing KL base" "none-base" "$P" -m "$M" --file "$T" --kl-base "$tmp/none-base.gguf"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
