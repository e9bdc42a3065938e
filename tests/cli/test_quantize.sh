#!/usr/bin/env bash
# test_quantize.sh — build/kipp-quantize against tools/quantize.py, its reference: the same
# bytes (whole files: header, metadata, tensor data, padding) for q8_0, q4_0, q4_k_m and q6_k
# on kipp-tiny (the Makefile makes its quantized files with the Python tool), and for all 16
# types on two small GGUFs built to hit every branch of the type plans and the block
# encoders (make_quant_cases.py and its variant, quantized by the Python tool here; the
# variant for the types whose plan depends on gqa, layer count or an untied output); each
# mix's rules read back from its plan; 1 thread == 3 threads; bad input
# (missing file, not a GGUF, truncated, unknown type, quantized input, OUT == IN, bad flags)
# is a clear error; OUT is untouched and no temporary file is left when a run fails (bad
# input, a write error from a file-size limit, SIGINT); progress lines without a terminal,
# the bar on one; --help. About 30 s on 2 cores.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
Q=$BUILD/kipp-quantize
PY=.venv/bin/python
M=models/kipp-tiny/kipp-tiny-bf16.gguf
. tests/cli/expect.sh
[ -x "$Q" ] || make -s BUILD="$BUILD" "$Q" >/dev/null || bad "make $Q"
types="q8_0 q4_0 q4_k_m q6_k"
for t in $types; do [ -f models/kipp-tiny/kipp-tiny-$t.gguf ] || make -s models/kipp-tiny/kipp-tiny-$t.gguf >/dev/null || bad "make kipp-tiny $t"; done

# kipp-tiny: the C tool's file == the Python tool's file
for t in $types; do
    "$Q" --no-progress "$M" "$tmp/kt-$t.gguf" "$t" >"$tmp/out" 2>"$tmp/err" && ok || { bad "kipp-tiny $t: exit $?"; cat "$tmp/err"; }
    cmp -s "$tmp/kt-$t.gguf" "models/kipp-tiny/kipp-tiny-$t.gguf" && ok || bad "kipp-tiny $t: differs from tools/quantize.py's file"
    rm -f "$tmp/kt-$t.gguf"
done
grep -qE "^wrote $tmp/kt-q6_k.gguf \([0-9]+ bytes, q6_k, [0-9.]+ s\)$" "$tmp/out" && ok || bad "summary line: $(cat "$tmp/out")"

# the branch cases, against a live run of the Python tool
C=$tmp/cases.gguf V=$tmp/variant.gguf
$PY tests/cli/make_quant_cases.py "$C" && $PY tests/cli/make_quant_cases.py "$V" variant && ok || bad "make_quant_cases.py"
same() { # same FILE TYPE: the C tool's file == the Python tool's
    local b; b=$(basename "$1" .gguf)
    $PY -m tools.quantize "$1" "$tmp/py-$b-$2.gguf" --type "$2" --no-progress >/dev/null && ok || bad "tools/quantize.py $b $2"
    "$Q" --no-progress -t 2 "$1" "$tmp/c-$b-$2.gguf" "$2" >/dev/null && ok || bad "$b $2: exit $?"
    cmp "$tmp/c-$b-$2.gguf" "$tmp/py-$b-$2.gguf" && ok || bad "$b $2: kipp-quantize and tools/quantize.py differ"
}
all="q8_0 q6_k q5_k_m q5_k_s q5_1 q5_0 q4_k_m q4_k_s q4_1 q4_0 iq4_nl iq4_xs q3_k_l q3_k_m q3_k_s q2_k"
for t in $all; do same "$C" "$t"; done
for t in q2_k q3_k_m iq4_nl iq4_xs q5_k_m; do same "$V" "$t"; done
cp "$tmp/c-cases-q4_k_m.gguf" "$tmp/c-q4_k_m.gguf"
# each mix's per-layer rules, fallbacks and ftype, read back with the PyPI gguf reader
$PY - "$tmp" <<'EOF' && ok || bad "mix type plans"
import sys
from gguf import GGUFReader
want = {  # (file, type): {tensor: ggml type}
    ("cases", "q2_k"): {"blk.0.attn_v.weight": "Q4_K", "blk.3.ffn_down.weight": "Q3_K",
                        "blk.0.attn_output.weight": "Q3_K", "blk.0.ffn_up.weight": "IQ4_NL",
                        "blk.0.attn_q.weight": "Q2_K", "token_embd.weight": "Q6_K"},
    ("variant", "q2_k"): {"blk.0.attn_v.weight": "Q3_K", "output.weight": "Q8_0", "token_embd.weight": "Q2_K"},
    ("cases", "q3_k_m"): {"blk.1.attn_v.weight": "Q5_K", "blk.2.attn_v.weight": "Q4_K",
                          "blk.0.ffn_down.weight": "Q4_K", "blk.0.attn_output.weight": "Q4_K"},
    ("variant", "q3_k_m"): {"blk.0.ffn_down.weight": "Q5_K", "blk.1.ffn_down.weight": "Q4_K"},
    ("cases", "q3_k_l"): {"blk.5.attn_v.weight": "Q5_K", "blk.5.ffn_down.weight": "Q5_K",
                          "blk.0.attn_output.weight": "Q5_K", "blk.0.attn_q.weight": "Q3_K"},
    ("cases", "q3_k_s"): {"blk.0.attn_v.weight": "Q3_K", "blk.0.attn_output.weight": "Q3_K"},
    ("cases", "iq4_xs"): {"blk.5.attn_v.weight": "Q5_K", "blk.0.ffn_down.weight": "Q5_K",
                          "blk.1.ffn_down.weight": "IQ4_XS", "blk.0.ffn_up.weight": "IQ4_NL"},
    ("variant", "iq4_xs"): {"blk.5.attn_v.weight": "IQ4_XS", "blk.1.ffn_down.weight": "Q5_K",
                            "blk.2.ffn_down.weight": "IQ4_XS"},
    ("cases", "iq4_nl"): {"blk.5.attn_v.weight": "Q5_K", "blk.1.ffn_down.weight": "IQ4_NL"},
    ("variant", "iq4_nl"): {"blk.5.attn_v.weight": "IQ4_NL"},
    ("cases", "q4_k_s"): {"blk.3.attn_v.weight": "Q5_K", "blk.4.attn_v.weight": "Q4_K",
                          "blk.0.ffn_down.weight": "Q5_K", "blk.1.ffn_down.weight": "Q4_K"},
    ("cases", "q5_k_m"): {"blk.0.attn_v.weight": "Q6_K", "blk.1.attn_v.weight": "Q5_K",
                          "blk.3.ffn_down.weight": "Q6_K", "blk.0.ffn_up.weight": "Q5_1"},
    ("cases", "q5_k_s"): {"blk.0.attn_v.weight": "Q5_K", "blk.0.ffn_up.weight": "Q5_1"},
    ("cases", "q5_1"): {"blk.0.attn_v.weight": "Q5_1", "token_embd.weight": "Q6_K",
                        "blk.0.ffn_up.weight": "Q5_1", "blk.0.ffn_gate.weight": "F32"},
    ("cases", "q5_0"): {"blk.0.ffn_up.weight": "Q5_0"},
    ("cases", "q4_1"): {"blk.0.ffn_up.weight": "Q4_1"},
}
ftype = {"q2_k": 10, "q3_k_m": 12, "q3_k_l": 13, "q3_k_s": 11, "iq4_xs": 30, "iq4_nl": 25,
         "q4_k_s": 14, "q5_k_m": 17, "q5_k_s": 16, "q5_1": 9, "q5_0": 8, "q4_1": 3}
bad = []
for (f, t), types in want.items():
    r = GGUFReader(f"{sys.argv[1]}/c-{f}-{t}.gguf")
    ty = {x.name: x.tensor_type.name for x in r.tensors}
    bad += [(f, t, k, ty[k], v) for k, v in types.items() if ty[k] != v]
    if int(r.fields["general.file_type"].parts[-1][0]) != ftype[t]:
        bad.append((f, t, "general.file_type"))
assert not bad, bad
EOF
# the plan really took every branch (read back with the PyPI gguf reader)
$PY - "$tmp/c-q4_k_m.gguf" <<'EOF' && ok || bad "q4_k_m type plan"
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
ty = {t.name: t.tensor_type.name for t in r.tensors}
want = {"token_embd.weight": "Q6_K", "blk.0.attn_v.weight": "Q6_K", "blk.1.attn_v.weight": "Q4_K",
        "blk.3.ffn_down.weight": "Q6_K", "blk.4.ffn_down.weight": "Q4_K", "blk.7.attn_v.weight": "Q6_K",
        "blk.0.ffn_up.weight": "Q8_0", "blk.0.ffn_gate.weight": "F32", "blk.0.attn_norm.weight": "F32",
        "blk.0.attn_q.weight": "Q4_K", "rope_table": "F32"}
bad = {k: (ty[k], v) for k, v in want.items() if ty[k] != v}
ft = int(r.fields["general.file_type"].parts[-1][0])
al = int(r.fields["general.alignment"].parts[-1][0])
assert not bad and ft == 15 and al == 64, (bad, ft, al)
assert all(t.data_offset % 64 == 0 for t in r.tensors)
EOF

# threads do not change the bytes
"$Q" --no-progress -t 1 "$C" "$tmp/t1.gguf" q4_k_m >/dev/null && "$Q" --no-progress -t 3 "$C" "$tmp/t3.gguf" q4_k_m >/dev/null \
    && cmp -s "$tmp/t1.gguf" "$tmp/t3.gguf" && ok || bad "1 thread and 3 threads differ"

# progress: one line per tensor without a terminal, tqdm's bar on one
"$Q" "$C" "$tmp/p.gguf" q8_0 >/dev/null 2>"$tmp/err"
grep -qE '^\[ 1/30\] token_embd\.weight +BF16 +-> Q8_0 +\[256 x 48\]' "$tmp/err" && [ "$(grep -c '^\[' "$tmp/err")" = 30 ] \
    && ok || { bad "progress lines"; cat "$tmp/err"; }
if command -v script >/dev/null; then
    script -qec "$Q $C $tmp/p.gguf q8_0" /dev/null >"$tmp/tty" 2>&1
    grep -q 'p.gguf: 100%|██████████|' "$tmp/tty" && ok || { bad "progress bar on a terminal"; cat -v "$tmp/tty"; }
fi
"$Q" --help | grep -q "^usage: kipp-quantize \[options\] IN.gguf OUT.gguf TYPE" && ok || bad "--help"
# --help names exactly the 16 types (the ones the loop above compares)
[ "$("$Q" --help | tr -s ' \n,;' '\n' | grep -xE '(q|iq)[0-9]_[0-9a-z_]+' | sort | tr '\n' ' ')" = "$(printf '%s\n' $all | sort | tr '\n' ' ')" ] \
    && ok || bad "--help types: $("$Q" --help | tr -s ' \n,;' '\n' | grep -xE '(q|iq)[0-9]_[0-9a-z_]+' | tr '\n' ' ')"

# bad input: a clear error, and OUT (a sentinel file) untouched, no temporary left behind
O=$tmp/out.gguf
printf 'sentinel' >"$O"
untouched() { [ "$(cat "$O")" = sentinel ] && [ -z "$(ls "$tmp" | grep '\.tmp\.')" ] && ok || bad "$1: OUT changed or a temporary file was left"; }
expect_fail "missing input" "cannot open input $tmp/none.gguf: No such file" "$Q" "$tmp/none.gguf" "$O" q8_0; untouched "missing input"
printf 'hello world, not a gguf' >"$tmp/text.gguf"
expect_fail "not a GGUF" "text.gguf: .*magic" "$Q" "$tmp/text.gguf" "$O" q8_0; untouched "not a GGUF"
head -c 100000 "$C" >"$tmp/trunc.gguf"
expect_fail "truncated" "trunc.gguf: .*(end of|past|truncat|bounds)" "$Q" "$tmp/trunc.gguf" "$O" q8_0; untouched "truncated"
expect_fail "unknown type" "unknown type 'q5_k' \(valid types: $all\)" "$Q" "$C" "$O" q5_k; untouched "unknown type"
expect_fail "quantized input" "tensor 'token_embd.weight' is already Q6_K; the input must be an f32/f16/bf16 GGUF" \
    "$Q" "$tmp/c-q4_k_m.gguf" "$O" q8_0; untouched "quantized input"
cp "$C" "$tmp/in.gguf"
expect_fail "OUT == IN" "is the input file" "$Q" "$tmp/in.gguf" "$tmp/in.gguf" q8_0
ln -s in.gguf "$tmp/link.gguf"
expect_fail "OUT a link to IN" "is the input file" "$Q" "$tmp/in.gguf" "$tmp/link.gguf" q8_0
cmp -s "$C" "$tmp/in.gguf" && ok || bad "IN changed"
expect_fail "no directory" "cannot create a temporary file beside $tmp/nodir/x.gguf" "$Q" "$C" "$tmp/nodir/x.gguf" q8_0
expect_fail "bad -t" "-t: 'zero' is not a thread count" "$Q" -t zero "$C" "$O" q8_0
expect_fail "unknown flag" "unknown option '--bogus'" "$Q" --bogus "$C" "$O" q8_0
expect_fail "missing TYPE" "expected IN.gguf OUT.gguf TYPE" "$Q" "$C" "$O"
# a write error half-way (a 64 KiB file-size limit stands in for a full disk)
expect_fail "write error" "writing $O failed: File too large" bash -c "ulimit -f 64; exec \"\$@\"" _ "$Q" --no-progress "$C" "$O" q8_0
untouched "write error"
# interrupted: SIGINT removes the temporary file. The signal goes once the temporary file
# exists (the run is writing), not after a fixed sleep (a quiet 4-level EPYC finished the
# whole run inside the old 1 s); a run that still wins the race is retried, OUT reset
for try in 1 2 3 4 5; do
    printf 'sentinel' >"$O"
    "$Q" --no-progress -t 1 "$M" "$O" q6_k >/dev/null 2>&1 &
    qpid=$!
    while kill -0 "$qpid" 2>/dev/null && ! ls "$tmp" | grep -q '\.tmp\.'; do sleep 0.005; done
    kill -INT "$qpid" 2>/dev/null
    wait "$qpid"; rc=$?
    [ "$rc" -ne 0 ] && break
done
[ "$rc" -ne 0 ] && ok || bad "SIGINT: exit $rc (the run finished before the signal, $try tries)"
untouched "SIGINT"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
