#!/usr/bin/env bash
# test_quantize.sh — build/kipp-quantize against tools/quantize.py, its reference: the same
# bytes (whole files: header, metadata, tensor data, padding) for q8_0, q4_0, q4_k_m and q6_k
# on kipp-tiny (the Makefile makes its quantized files with the Python tool) and on a small
# GGUF built to hit every branch of the type plan and the block encoders
# (make_quant_cases.py, quantized by the Python tool here); 1 thread == 3 threads; bad input
# (missing file, not a GGUF, truncated, unknown type, quantized input, OUT == IN, bad flags)
# is a clear error; OUT is untouched and no temporary file is left when a run fails (bad
# input, a write error from a file-size limit, SIGINT); progress lines without a terminal,
# the bar on one; --help. About 20 s on 2 cores.
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
C=$tmp/cases.gguf
$PY tests/cli/make_quant_cases.py "$C" && ok || bad "make_quant_cases.py"
for t in $types; do
    $PY -m tools.quantize "$C" "$tmp/py-$t.gguf" --type "$t" --no-progress >/dev/null && ok || bad "tools/quantize.py $t"
    "$Q" --no-progress -t 2 "$C" "$tmp/c-$t.gguf" "$t" >/dev/null && ok || bad "cases $t: exit $?"
    cmp "$tmp/c-$t.gguf" "$tmp/py-$t.gguf" && ok || bad "cases $t: kipp-quantize and tools/quantize.py differ"
done
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
grep -qE '^\[ 1/29\] token_embd\.weight +BF16 +-> Q8_0 +\[256 x 48\]' "$tmp/err" && [ "$(grep -c '^\[' "$tmp/err")" = 29 ] \
    && ok || { bad "progress lines"; cat "$tmp/err"; }
if command -v script >/dev/null; then
    script -qec "$Q $C $tmp/p.gguf q8_0" /dev/null >"$tmp/tty" 2>&1
    grep -q 'p.gguf: 100%|██████████|' "$tmp/tty" && ok || { bad "progress bar on a terminal"; cat -v "$tmp/tty"; }
fi
"$Q" --help | grep -q "^usage: kipp-quantize \[options\] IN.gguf OUT.gguf TYPE" && ok || bad "--help"

# bad input: a clear error, and OUT (a sentinel file) untouched, no temporary left behind
O=$tmp/out.gguf
printf 'sentinel' >"$O"
untouched() { [ "$(cat "$O")" = sentinel ] && [ -z "$(ls "$tmp" | grep '\.tmp\.')" ] && ok || bad "$1: OUT changed or a temporary file was left"; }
expect_fail "missing input" "cannot open input $tmp/none.gguf: No such file" "$Q" "$tmp/none.gguf" "$O" q8_0; untouched "missing input"
printf 'hello world, not a gguf' >"$tmp/text.gguf"
expect_fail "not a GGUF" "text.gguf: .*magic" "$Q" "$tmp/text.gguf" "$O" q8_0; untouched "not a GGUF"
head -c 100000 "$C" >"$tmp/trunc.gguf"
expect_fail "truncated" "trunc.gguf: .*(end of|past|truncat|bounds)" "$Q" "$tmp/trunc.gguf" "$O" q8_0; untouched "truncated"
expect_fail "unknown type" "unknown type 'q5_k' \(valid types: q8_0 q4_0 q4_k_m q6_k\)" "$Q" "$C" "$O" q5_k; untouched "unknown type"
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
# interrupted: SIGINT removes the temporary file
"$Q" --no-progress -t 1 "$M" "$O" q6_k >/dev/null 2>&1 &
qpid=$!
sleep 1
kill -INT "$qpid" 2>/dev/null
wait "$qpid"; rc=$?
[ "$rc" -ne 0 ] && ok || bad "SIGINT: exit $rc"
untouched "SIGINT"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
