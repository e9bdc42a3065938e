#!/usr/bin/env bash
# test_cli.sh — build/kipp end to end on the tiny checkpoint: generation, determinism,
# stdin prompts, --info/--tokenize, the default backend (cpu) and cpu-ref by name, the
# start-up line, --isa/KIPP_CPU_ISA and --kv-type/--cache-type-k/-v, and every bad input the
# issue names (missing model, wrong architecture, truncated file, NaN weights, empty prompt,
# prompt longer than the context, unknown/unavailable backend, bad flags): each must exit
# non-zero with a message naming the problem, never crash (exit codes >= 128 are signals
# and fail the test).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
. tests/cli/expect.sh

[ -f "$M" ] || make -s "$M" >/dev/null
.venv/bin/python tests/cli/make_bad_models.py "$M" "$tmp" || bad "make_bad_models.py"

# --- good paths ---
out1=$("$K" -m "$M" -p "The capital of France is" -n 16 --temp 0 --no-stats --backend cpu-ref 2>/dev/null) && ok || bad "greedy run"
[ -n "$out1" ] && ok || bad "greedy run printed nothing"
out2=$("$K" -m "$M" -p "The capital of France is" -n 16 --temp 0 --no-stats --backend cpu-ref 2>/dev/null)
[ "$out1" = "$out2" ] && ok || bad "greedy not deterministic"
out3=$("$K" -m "$M" -p "The capital of France is" -n 16 --temp 0 --no-stats --backend cpu -t 2 2>/dev/null)
[ "$out1" = "$out3" ] && ok || bad "--backend cpu greedy text differs from cpu-ref"
s1=$("$K" -m "$M" -p "Once upon a time" -n 16 --temp 1.0 --seed 7 --no-stats 2>/dev/null)
s2=$("$K" -m "$M" -p "Once upon a time" -n 16 --temp 1.0 --seed 7 --no-stats 2>/dev/null)
s3=$("$K" -m "$M" -p "Once upon a time" -n 16 --temp 1.0 --seed 8 --no-stats 2>/dev/null)
[ "$s1" = "$s2" ] && ok || bad "same seed gave different text"
[ "$s1" != "$s3" ] && ok || bad "different seeds gave identical text"
o3=$(echo -n "The capital of France is" | "$K" -m "$M" -n 16 --temp 0 --no-stats 2>/dev/null)
[ "$o3" = "$out1" ] && ok || bad "stdin prompt differs from --prompt"
"$K" -m "$M" -p "Hi" -n 4 --temp 0 2>"$tmp/err" >/dev/null
grep -qE "prefill .* tok/s.*decode steps .* tok/s" "$tmp/err" && ok || bad "no speed line on stderr"
grep -qE "KV cache [0-9.]+ of [0-9.]+ MiB used \(1 of [0-9]+ blocks of 16 tokens, 768 bytes/token\)" "$tmp/err" && ok || bad "no KV accounting line on stderr (f16 KV: 768 bytes/token)"
"$K" -m "$M" --info | grep -q "\"head_dim\": 32, \"n_ff\": 256" && ok || bad "--info"
ids=$("$K" -m "$M" -p "Hello world" --tokenize)
[ "$ids" = "9707 1879" ] && ok || bad "--tokenize gave '$ids'"
"$K" --help | grep -q -- "--backend" && ok || bad "--help"
# non-ASCII, non-NFC input and an added token: ids as HF tokenizers gives them
ids=$("$K" -m "$M" -p "$(printf 'Cafe\xcc\x81 \xf0\x9f\x98\x80 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e <think>x</think>')" --tokenize)
[ "$ids" = "34 2577 963 90316 75402 21894 102819 220 151667 87 151668" ] && ok || bad "unicode --tokenize gave '$ids'"
txt=$("$K" -m "$M" --detokenize "34 2577 963 90316 75402 21894 102819 220 151667 87 151668")
[ "$txt" = "$(printf 'Caf\xc3\xa9 \xf0\x9f\x98\x80 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e <think>x</think>')" ] && ok || bad "--detokenize gave '$txt'"

# --- benchmark flags: --prompt-tokens, --ignore-eos, --stats-json ---
for f in --prompt-tokens --ignore-eos --stats-json; do
    "$K" --help | grep -q -- "$f" && ok || bad "--help lacks $f"
done
"$K" --version | grep -q "^compiler: " && ok || bad "--version lacks the compiler"
ids=$("$K" -m "$M" --prompt-tokens 8 --tokenize)
[ "$ids" = "1000 8919 16838 24757 32676 40595 48514 56433" ] && ok || bad "--prompt-tokens ids '$ids'"
"$K" -m "$M" --prompt-tokens 20 -n 10 --ignore-eos --temp 0 --backend cpu -t 2 \
    --stats-json "$tmp/stats.json" >/dev/null 2>&1 && ok || bad "--stats-json run"
.venv/bin/python - "$tmp/stats.json" <<'PY' && ok || bad "--stats-json content"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["backend"] == "cpu" and s["threads"] == 2 and s["prompt_source"] == "synthetic", s
assert s["prefill"]["tokens"] == 20 and s["prefill"]["ms"] > 0 and s["prefill"]["tok_s"] > 0, s
assert s["decode"]["generated"] == 10 and s["decode"]["tokens"] == 9 and s["stop"] == "n_predict", s
assert s["decode"]["ms"] > 0 and s["decode"]["tok_s"] > 0 and s["ignore_eos"] is True, s
assert s["kv"]["bytes_per_token"] == 768 and s["kv"]["n_tokens"] == 29, s
assert s["kv_type"] == "f16" and s["isa"] in ("scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon"), s
PY
"$K" -m "$M" -p hi -n 2 --backend cpu-ref --kv-type bf16 -t 2 --stats-json "$tmp/stats2.json" >/dev/null 2>&1 && ok || bad "--stats-json run (cpu-ref, bf16)"
.venv/bin/python - "$tmp/stats2.json" <<'PY' && ok || bad "--stats-json: isa and kv_type of a cpu-ref bf16 run"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["backend"] == "cpu-ref" and s["isa"] == "scalar" and s["kv_type"] == "bf16", s
assert s["threads"] == 1, s  # the threads in use (cpu-ref has one), not the -t asked for
assert s["kv"]["bytes_per_token"] == 768, s
PY
# a run that ends before generating (--tokenize) leaves no stats file
"$K" -m "$M" -p hi -n 2 --tokenize --stats-json "$tmp/none.json" >/dev/null 2>&1
[ ! -e "$tmp/none.json" ] && ok || bad "--stats-json left a file behind a --tokenize run"

# --- backend, ISA level, KV type: the default backend is cpu, cpu-ref is asked for by name;
# the start-up line (stderr) and --info say what the context runs on ---
"$K" -m "$M" -p hi -n 2 -t 2 >/dev/null 2>"$tmp/err"
grep -qE "^kipp: backend cpu, ISA [a-z0-9]+, 2 threads, KV f16, KV pool 32 blocks of 16 tokens \(512 tokens, 393216 bytes = 0.38 MiB, 768 bytes/token\)(, weights repacked [0-9.]+ MiB)?; loaded in [0-9.]+ ms$" "$tmp/err" &&
    ok || bad "start-up line of the default backend: $(cat "$tmp/err")"
"$K" -m "$M" -p hi -n 2 --backend cpu-ref -c 64 >/dev/null 2>"$tmp/err" && ok || bad "--backend cpu-ref: $(cat "$tmp/err")"
grep -qE "^kipp: backend cpu-ref, ISA scalar, 1 thread, KV f32, KV pool 4 blocks of 16 tokens \(64 tokens, 98304 bytes = 0.09 MiB, 1536 bytes/token\); loaded in [0-9.]+ ms$" "$tmp/err" &&
    ok || bad "start-up line of cpu-ref: $(cat "$tmp/err")"
"$K" -m "$M" -p hi -n 2 --no-stats 2>"$tmp/err" >/dev/null
[ ! -s "$tmp/err" ] && ok || bad "--no-stats printed on stderr: $(cat "$tmp/err")"
# info_is NAME PYEXPR ARGS... : kipp --info ARGS prints one JSON object i for which PYEXPR holds
info_is() {
    local name=$1 expr=$2; shift 2
    if ! "$K" -m "$M" --info "$@" >"$tmp/info.json" 2>"$tmp/err"; then bad "$name: --info $*: $(cat "$tmp/err")"; return; fi
    .venv/bin/python - "$tmp/info.json" "$expr" <<'PY' && ok || bad "$name: --info $* gave $(cat "$tmp/info.json")"
import json, sys
text = open(sys.argv[1]).read()
i = json.loads(text)
assert text.count("\n") == 1 and eval("(" + sys.argv[2] + ")")
PY
}
LEVELS='("scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon")'
info_is "--info (default backend)" 'list(i)[:14] == ["architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train", "rope_theta", "rms_eps", "tied_embeddings", "bos_id", "eos_id"]
    and list(i)[14:] == ["rope_scaling", "rope_factor", "rope_orig_ctx", "n_ctx_file", "backend", "isa", "threads", "kv_type", "kv_type_v", "n_ctx", "kv_pool", "weights_repacked_bytes", "kernels", "load_ms"]
    and list(i["kernels"]) == ["BF16"] and ((P := i["kernels"]["BF16"]["packed"]) or True)
    and (not P or i["isa"] in ("amx", "avx512bf16")) and (i["isa"] != "amx" or P)
    and i["kernels"]["BF16"]["from"]["1"].split(":")[0] in '"$LEVELS"'
    and all(v.split(":")[1] in (("packed",) if P else ("gemm", "many")) for v in i["kernels"]["BF16"]["from"].values())
    and i["kernels"]["BF16"]["why"] not in ("", "forced by --isa")
    and i["backend"] == "cpu" and i["isa"] in '"$LEVELS"' and i["threads"] >= 1 and i["kv_type"] == "f16"
    and i["n_ctx"] == 512 and i["load_ms"] > 0 and (i["weights_repacked_bytes"] > 0) == P
    and i["kv_pool"] == {"blocks": 32, "block_size": 16, "tokens": 512, "bytes": 393216, "bytes_per_token": 768}'
# Q8_0 weights are repacked at load where the kernels say so (the auto table on x86-64:
# avx2's packed panels; a forced level: avx2, avx512vnni, avx512bf16 and amx), 18 bytes per 16 weights of every matrix
# and the (tied) head, and --info names the kernels of each type the model holds
Q8=models/tiny-tied/kipp-tiny-tied-q8_0.gguf
PACKED_BYTES='18 * (i["n_layer"] * (
        i["n_head"] * i["head_dim"] * i["n_embd"] + 2 * i["n_head_kv"] * i["head_dim"] * i["n_embd"]
        + i["n_embd"] * i["n_head"] * i["head_dim"] + 3 * i["n_ff"] * i["n_embd"]) + i["n_vocab"] * i["n_embd"]) // 16'
M=$Q8 info_is "--info repacked bytes (auto: as its kernels say)" 'list(i["kernels"]) == ["Q8_0"]
    and (i["weights_repacked_bytes"] > 0) == i["kernels"]["Q8_0"]["packed"]
    and (not i["kernels"]["Q8_0"]["packed"] or i["weights_repacked_bytes"] == '"$PACKED_BYTES"')'
for lv in scalar avx2 avx512 avx512vnni avx512bf16 amx neon; do
    "$K" -m "$Q8" --info --isa "$lv" >/dev/null 2>&1 || continue # a level this CPU lacks
    M=$Q8 info_is "--info --isa $lv: packed only on avx2, avx512vnni, avx512bf16 and amx" '((P := i["isa"] in ("avx2", "avx512vnni", "avx512bf16", "amx")) or True)
        and (i["weights_repacked_bytes"] > 0) == P
        and i["kernels"]["Q8_0"]["packed"] == P and i["kernels"]["Q8_0"]["why"] == "forced by --isa"
        and {v.split(":")[0] for v in i["kernels"]["Q8_0"]["from"].values()} == {"'$lv'"}
        and (not P or i["weights_repacked_bytes"] == '"$PACKED_BYTES"')' --isa $lv
done
info_is "--info --backend cpu-ref" 'i["backend"] == "cpu-ref" and i["isa"] == "scalar" and i["threads"] == 1 and i["kernels"] is None
    and i["kv_type"] == "f32" and i["n_ctx"] == 64 and i["kv_pool"]["tokens"] == 64 and i["kv_pool"]["bytes"] == 98304' \
    --backend cpu-ref -c 64
info_is "--info -t 2 --isa scalar --kv-type bf16" 'i["backend"] == "cpu" and i["threads"] == 2 and i["isa"] == "scalar"
    and i["kv_type"] == "bf16" and i["kv_pool"]["bytes_per_token"] == 768' -t 2 --isa scalar --kv-type bf16
info_is "--kv-type f32" 'i["kv_type"] == "f32" and i["kv_pool"]["bytes_per_token"] == 1536' --kv-type f32
info_is "--kv-type default" 'i["kv_type"] == "f16"' --kv-type default
info_is "--cache-type-k/-v f32 (both equal)" 'i["kv_type"] == "f32" and i["kv_pool"]["bytes"] == 786432' \
    --cache-type-k f32 --cache-type-v f32
info_is "--kv-type and equal --cache-type-k/-v" 'i["kv_type"] == "bf16"' --kv-type bf16 --cache-type-k bf16 --cache-type-v bf16
# q8_0 / q4_0: 3 layers x 64 values = 6 blocks of 34 (K) and of 18 (V) bytes per token
info_is "--kv-type q8_0" 'i["kv_type"] == "q8_0" and i["kv_type_v"] == "q8_0" and i["kv_pool"]["bytes_per_token"] == 408' --kv-type q8_0
info_is "--cache-type-k q8_0 --cache-type-v q4_0" 'i["kv_type"] == "q8_0" and i["kv_type_v"] == "q4_0"
    and i["kv_pool"]["bytes_per_token"] == 312' --cache-type-k q8_0 --cache-type-v q4_0
KIPP_CPU_ISA=scalar info_is "KIPP_CPU_ISA is --isa's default" 'i["isa"] == "scalar"'
KIPP_CPU_ISA=avx9 info_is "--isa overrides KIPP_CPU_ISA" 'i["isa"] == "scalar"' --isa scalar
# every KV type end to end: generation runs and the start-up line names the type
for t in f32 f16 bf16 q8_0 q4_0; do
    for b in cpu cpu-ref; do
        out=$("$K" -m "$M" -p "The capital of France is" -n 8 --temp 0 --backend $b -t 2 --kv-type $t 2>"$tmp/err")
        [ -n "$out" ] && grep -qE "^kipp: backend $b, .* KV $t, KV pool" "$tmp/err" && ok || bad "--backend $b --kv-type $t: $(cat "$tmp/err")"
    done
done
"$K" --help >"$tmp/help"
grep -q "backend: cpu (default)" "$tmp/help" && ok || bad "--help does not name cpu as the default backend"
for f in --isa --kv-type --cache-type-k --cache-type-v KIPP_CPU_ISA; do
    grep -q -- "$f" "$tmp/help" && ok || bad "--help lacks $f"
done

# --- chat template ---
want=$(printf '<|im_start|>system\nYou are Kipp.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n')
got=$("$K" -m "$M" --system "You are Kipp." -p "Hi" --print-prompt)
[ "$got" = "$want" ] && ok || bad "--chat rendering: '$got'"
got=$("$K" -m "$M" --chat --no-think -p "Hi" --print-prompt; echo x)
want=$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nx')
[ "$got" = "$want" ] && ok || bad "--no-think rendering: '$got'"
printf '{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\\nsum\\n</think>\\n\\n4"}, {"role": "user", "content": "and 3+3?"}], "add_generation_prompt": false}' >"$tmp/req.json"
got=$("$K" -m "$M" --messages "$tmp/req.json" --print-prompt)
want=$(printf '<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>')
[ "$got" = "$want" ] && ok || bad "--messages rendering (past reasoning dropped): '$got'"
"$K" -m "$M" --chat -p "Hi" -n 4 --temp 0 --no-stats >/dev/null 2>&1 && ok || bad "--chat generation"
ids=$("$K" -m "$M" --chat -p "Hi" --tokenize)
case "$ids" in "151644 872 198 13048 151645 198 151644 77091 198") ok ;; *) bad "chat prompt ids '$ids'" ;; esac

# --- bad input ---
expect_fail "missing model" "No such file|cannot open" "$K" -m "$tmp/nope.gguf" -p hi
expect_fail "no --model" "--model FILE is required" "$K" -p hi
expect_fail "wrong architecture" "architecture is 'llama'; Kipp supports 'qwen3'" "$K" -m "$tmp/wrong-arch.gguf" -p hi
expect_fail "truncated file" "gguf: .*(past end|truncated|beyond)" "$K" -m "$tmp/truncated.gguf" -p hi
expect_fail "NaN in norm" "output_norm.weight.* NaN" "$K" -m "$tmp/nan-norm.gguf" -p hi
expect_fail "NaN in matrix (runtime)" "NaN" "$K" -m "$tmp/nan-matrix.gguf" -p hi -n 2 --backend cpu-ref
# the optimized backend at every level this CPU runs: a NaN weight must reach the logits check
# (AVX-512's max/min used to turn a NaN into a clamp bound in exp)
for isa in scalar avx2 avx512 avx512vnni; do
    if "$K" -m "$tmp/nan-matrix.gguf" --info --backend cpu --isa "$isa" >/dev/null 2>&1; then
        expect_fail "NaN in matrix (runtime, cpu $isa)" "NaN" "$K" -m "$tmp/nan-matrix.gguf" -p hi -n 2 \
            --backend cpu --isa "$isa"
    fi
done
expect_fail "NaN in matrix (--check-weights)" "blk.0.attn_q.weight' row 0 element 0 is NaN" \
    "$K" -m "$tmp/nan-matrix.gguf" -p hi --check-weights
expect_fail "empty prompt" "empty prompt" "$K" -m "$M" -p ""
expect_fail "empty stdin" "empty prompt" "$K" -m "$M"
expect_fail "prompt longer than context" "prompt has [0-9]+ tokens but the context holds 4" \
    "$K" -m "$M" -c 4 -p "one two three four five six seven"
expect_fail "context beyond training" "exceeds the model's trained context" "$K" -m "$M" -c 100000 -p hi
expect_fail "unknown backend" "unknown backend 'warp'" "$K" -m "$M" -p hi --backend warp
expect_fail "cuda not built" "backend 'cuda' is not available.*does not fall back" "$K" -m "$M" -p hi --backend cuda
KIPP_CPU_ISA=avx9 expect_fail "cpu: unknown KIPP_CPU_ISA" "ISA level 'avx9' comes from the environment variable KIPP_CPU_ISA" "$K" -m "$M" -p hi
expect_fail "unknown --isa" "unknown ISA level 'avx9'" "$K" -m "$M" -p hi --isa avx9
expect_fail "unknown --isa (--info)" "unknown ISA level 'avx9'" "$K" -m "$M" --info --isa avx9
expect_fail "empty --isa" "--isa expects a name, got ''" "$K" -m "$M" -p hi --isa ""
expect_fail "bad --kv-type" "--kv-type: unknown KV type 'q5_0' \(choose f32, f16, bf16, q8_0, q4_0" "$K" -m "$M" -p hi --kv-type q5_0
expect_fail "--kv-type without value" "--kv-type needs a value" "$K" -m "$M" -p hi --kv-type
expect_fail "--cache-type-k alone" "--cache-type-k f16 is given without --cache-type-v: give both \(K and V may differ\)" \
    "$K" -m "$M" -p hi --cache-type-k f16
expect_fail "--cache-type-v alone" "--cache-type-v f32 is given without --cache-type-k" "$K" -m "$M" -p hi --cache-type-v f32
expect_fail "bad --cache-type-v" "--cache-type-v: unknown KV type 'q5_1'" "$K" -m "$M" -p hi --cache-type-k f16 --cache-type-v q5_1
expect_fail "--kv-type vs --cache-type-k/-v" "--kv-type f32 and --cache-type-k f16 / --cache-type-v f16 disagree" \
    "$K" -m "$M" -p hi --kv-type f32 --cache-type-k f16 --cache-type-v f16
expect_fail "bad top-p" "--top-p expects a number" "$K" -m "$M" -p hi --top-p 2
expect_fail "bad -n" "-n expects an integer" "$K" -m "$M" -p hi -n abc
expect_fail "bad --prompt-tokens" "--prompt-tokens expects an integer" "$K" -m "$M" --prompt-tokens 0
expect_fail "bad --prompt-tokens (text)" "--prompt-tokens expects an integer" "$K" -m "$M" --prompt-tokens ten
expect_fail "--prompt-tokens with --prompt" "--prompt-tokens N replaces the prompt" "$K" -m "$M" --prompt-tokens 4 -p hi
expect_fail "--prompt-tokens longer than context" "prompt has 9 tokens but the context holds 8" \
    "$K" -m "$M" -c 8 --prompt-tokens 9
expect_fail "--stats-json unwritable" "--stats-json $tmp/no/such/dir/s.json: cannot write" \
    "$K" -m "$M" -p hi --stats-json "$tmp/no/such/dir/s.json"
expect_fail "--stats-json without value" "--stats-json needs a value" "$K" -m "$M" -p hi --stats-json
expect_fail "unknown flag" "unknown option '--bogus'" "$K" -m "$M" -p hi --bogus
expect_fail "missing value" "--seed needs a value" "$K" -m "$M" -p hi --seed
expect_fail "test-cpu-model without weights" "model not found — run tools/download_model.sh qwen3-4b-base" \
    tests/model/run_cpu_model.sh qwen3-4b-base
printf '{"messages": [' >"$tmp/bad.json"
expect_fail "malformed --messages" "--messages .*bad.json: .*line 1" "$K" -m "$M" --messages "$tmp/bad.json" --print-prompt
printf '{"messages": [{"role": "wizard", "content": "x"}]}' >"$tmp/role.json"
expect_fail "unknown role" "messages\[0\]" "$K" -m "$M" --messages "$tmp/role.json" --print-prompt
expect_fail "--no-think without chat" "need --chat" "$K" -m "$M" -p hi --no-think
expect_fail "bad --detokenize" "is not a token id" "$K" -m "$M" --detokenize "12 abc"
expect_fail "not a gguf" "gguf: .*magic" "$K" -m README.md -p hi

# --- --stats-json never destroys what the user named (regression: it was truncated at
# start and unlinked on failure, through symlinks) ---
printf 'precious\n' >"$tmp/keep.json"
"$K" -m "$tmp/nope.gguf" -p hi --stats-json "$tmp/keep.json" >/dev/null 2>&1
[ "$(cat "$tmp/keep.json")" = precious ] && ok || bad "--stats-json: a failed run (missing model) changed the file"
"$K" -m "$M" -p "" --stats-json "$tmp/keep.json" >/dev/null 2>&1
[ "$(cat "$tmp/keep.json")" = precious ] && ok || bad "--stats-json: a failed run (empty prompt) changed the file"
ln -s keep.json "$tmp/link.json"
"$K" -m "$tmp/nope.gguf" -p hi --stats-json "$tmp/link.json" >/dev/null 2>&1
[ -L "$tmp/link.json" ] && [ "$(cat "$tmp/keep.json")" = precious ] && ok || bad "--stats-json: a failed run broke the symlink or its target"
"$K" -m "$M" -p hi -n 2 --stats-json "$tmp/link.json" >/dev/null 2>&1 && ok || bad "--stats-json through a symlink"
[ -L "$tmp/link.json" ] && grep -q '"decode"' "$tmp/keep.json" && ok || bad "--stats-json: the symlink was replaced or its target not written"
ls "$tmp" | grep -q '\.tmp\.' && bad "--stats-json left a temporary file: $(ls "$tmp")" || ok
"$K" -m "$M" -p hi -n 2 --stats-json /dev/null >/dev/null 2>&1 && [ -c /dev/null ] && ok || bad "--stats-json /dev/null"

# --- text: a 22,000-byte token is printed whole (regression: dropped, exit 0) ---
out=$("$K" -m "$tmp/long-token.gguf" -p "The capital of France is" -n 2 --temp 0 --no-stats 2>"$tmp/err")
[ "${#out}" -ge 22016 ] && [[ "$out" == "<|fim_prefix|>xxxx"* ]] && ok || bad "22,000-byte token: got ${#out} bytes: $(head -c 200 "$tmp/err")"
# --detokenize streams through the same detokenizer: 4-byte characters split into byte tokens
out=$("$K" -m "$M" --detokenize "$("$K" -m "$M" --tokenize -p '𝔘 𠀀 😀 <|fim_prefix|>x' 2>/dev/null)" 2>/dev/null)
[ "$out" = '𝔘 𠀀 😀 <|fim_prefix|>x' ] && ok || bad "--detokenize round trip: '$out'"

# --- prompts that grow under NFC (U+FB2C: 10 characters -> 50 tokens; regression: "do
# not fit the buffer") and the other expanding code points ---
for cp in '\ufb2c' '\u0958' '\U0001d15e' '\u0344'; do
    p=$(printf "$cp%.0s" 1 2 3 4 5 6 7 8 9 10)
    n=$("$K" -m "$M" --tokenize -p "$p" 2>"$tmp/err" | wc -w)
    [ "$n" -ge 10 ] && ok || bad "NFC-growing prompt $cp: --tokenize gave $n ids: $(cat "$tmp/err")"
    "$K" -m "$M" -p "$p" -n 2 --no-stats >/dev/null 2>"$tmp/err" && ok || bad "NFC-growing prompt $cp: $(cat "$tmp/err")"
done

# --- a tiny temperature is greedy (regression: rejected by the CLI as outside [0, 100],
# and the sampler took the lowest id with a positive logit) ---
g0=$("$K" -m "$M" -p "The capital of France is" -n 8 --temp 0 --no-stats 2>/dev/null)
g1=$("$K" -m "$M" -p "The capital of France is" -n 8 --temp 1e-38 --no-stats 2>"$tmp/err")
[ -n "$g0" ] && [ "$g0" = "$g1" ] && ok || bad "--temp 1e-38 is not greedy: '$g1' vs '$g0' $(cat "$tmp/err")"

# --- output errors: a full disk, a closed stdout, a closed pipe: non-zero with a message ---
"$K" -m "$M" -p hi -n 4 --no-stats >/dev/full 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot write to stdout: No space left" "$tmp/err" && ok || bad "kipp >/dev/full: exit $rc: $(cat "$tmp/err")"
"$K" -m "$M" -p hi -n 4 --no-stats >&- 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "stdout is closed" "$tmp/err" && ok || bad "kipp >&-: exit $rc: $(cat "$tmp/err")"
"$K" -m "$M" -p hi -n 400 --ignore-eos --no-stats 2>"$tmp/err" | head -c 1 >/dev/null; rc=${PIPESTATUS[0]}
[ $rc -eq 1 ] && grep -q "Broken pipe" "$tmp/err" && ok || bad "kipp | head -c 1: exit $rc: $(cat "$tmp/err")"

# --- constrained output (docs/grammar.md): every output follows the grammar/schema ---
printf 'root ::= ("yes" | "no") "," [ ]? [0-9]{2} "."\n' > "$tmp/yn.gbnf"
for seed in 1 2 3 4; do
    g=$("$K" -m "$M" -p "Answer:" -n 20 --temp 1 --seed $seed --no-stats --grammar-file "$tmp/yn.gbnf" 2>/dev/null)
    [[ "$g" =~ ^(yes|no),\ ?[0-9]{2}\.$ ]] && ok || bad "--grammar-file seed $seed gave '$g'"
done
# --chat with thinking on (the default): a reply that does not open with <think> is under the
# grammar from its first token (it used to wait for a </think> that never came: free text)
for seed in 1 2; do
    g=$("$K" -m "$M" --chat -p "Answer:" -n 20 --temp 1 --seed $seed --no-stats --grammar-file "$tmp/yn.gbnf" 2>/dev/null)
    [[ "$g" =~ ^(yes|no),\ ?[0-9]{2}\.$ ]] && ok || bad "--chat --grammar-file seed $seed gave '$g'"
done
cat > "$tmp/schema.json" <<'JSON'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
 "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
 "age": {"type": "integer", "minimum": 0, "maximum": 120}},
 "required": ["name", "tags", "age"], "additionalProperties": false}
JSON
for seed in 1 2 3; do
    "$K" -m "$M" -p "JSON:" -n 120 --temp 1 --seed $seed --no-stats --json-schema "$tmp/schema.json" \
        --backend cpu-ref >"$tmp/js.out" 2>/dev/null
    .venv/bin/python -c "
import json, sys, jsonschema
jsonschema.validate(json.loads(open(sys.argv[1]).read()), json.load(open(sys.argv[2])))" \
        "$tmp/js.out" "$tmp/schema.json" 2>/dev/null && ok || bad "--json-schema seed $seed: $(cat "$tmp/js.out")"
done
# (the trained checkpoint: the random one writes a string that never ends)
j=$("$K" -m models/kipp-tiny/kipp-tiny-bf16.gguf -p "{" -n 200 --temp 0 --no-stats --json 2>/dev/null)
.venv/bin/python -c "import json, sys; assert isinstance(json.loads(sys.argv[1]), dict)" "$j" 2>/dev/null \
    && ok || bad "--json gave '$j'"
expect_fail "grammar file missing" "cannot open $tmp/none.gbnf" "$K" -m "$M" -p hi --grammar-file "$tmp/none.gbnf"
printf 'root ::= undefined-rule\n' > "$tmp/bad.gbnf"
expect_fail "grammar error" "bad.gbnf: grammar line 1: rule 'undefined-rule' is used but not defined" \
    "$K" -m "$M" -p hi --grammar-file "$tmp/bad.gbnf"
echo '{"type": "number", "multipleOf": 3}' > "$tmp/bad-schema.json"
expect_fail "schema keyword refused" "multipleOf" "$K" -m "$M" -p hi --json-schema "$tmp/bad-schema.json"
echo '{"type": ' > "$tmp/not-json.json"
expect_fail "schema not JSON" "not-json.json: not JSON" "$K" -m "$M" -p hi --json-schema "$tmp/not-json.json"
expect_fail "two constraints" "--json and --grammar-file both constrain" "$K" -m "$M" -p hi --json --grammar-file x
expect_fail "constraint with speculation" "cannot be combined with speculative decoding" \
    "$K" -m "$M" -p hi --json --spec-ngram 2

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
