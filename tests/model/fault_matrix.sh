#!/usr/bin/env bash
# fault_matrix.sh — the KV fault-injection matrix: builds build/kipp_test_fault (the same
# sources with -DKIPP_FAULT_INJECT), runs the identity-layout tolerance gate
# (--fault-reference) and the adversarial block-table gate (--paged-cpu) under each
# KIPP_FAULT mode, and compares caught/missed with the expected table in docs/kv-cache.md.
# Also checks the fault build passes with no fault set, that each gate catches a class the
# other misses, and that the production binaries carry no fault hook. Never edits sources.
set -u
cd "$(dirname "$0")/../.."
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
V=tests/test-vectors/tiny-untied
DOC=docs/kv-cache.md
FAULT_BIN=build/kipp_test_fault
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

if ! make -s build/kipp build/kipp_test build/kipp_test_fault >/tmp/fault_matrix_build.$$ 2>&1; then
    tail -20 /tmp/fault_matrix_build.$$; rm -f /tmp/fault_matrix_build.$$
    echo "0 passed, 1 failed"; exit 1
fi
rm -f /tmp/fault_matrix_build.$$

# The production binaries must not contain the hook (the env variable name is compiled in
# only under KIPP_FAULT_INJECT); the fault binary must, or this check could never fail.
for b in build/kipp build/kipp_test; do
    n=$(strings -a "$b" | grep -c 'KIPP_FAULT' || true)
    if [ "$n" -eq 0 ]; then ok "$b has no fault hook"; else bad "$b contains the KIPP_FAULT hook"; fi
done
n=$(strings -a "$FAULT_BIN" | grep -c 'KIPP_FAULT' || true)
if [ "$n" -gt 0 ]; then ok "$FAULT_BIN has the fault hook"; else bad "$FAULT_BIN lacks the KIPP_FAULT hook"; fi

# Expected table: the rows after the header line below, up to the first non-table line.
header='| KIPP_FAULT | fault | --fault-reference | --paged-cpu |'
expected=$(awk -v h="$header" '
    index($0, h) == 1 { on = 1; next }
    on && /^\|[- |]+\|$/ { next }
    on && /^\|/ { print; next }
    on { exit }' "$DOC" |
    awk -F'|' '{ for (i = 2; i <= 5; i++) { gsub(/^ +| +$/, "", $i) } print $2 "|" $3 "|" $4 "|" $5 }')
if [ "$(printf '%s\n' "$expected" | grep -c '^[1-4]|')" -ne 4 ]; then
    bad "$DOC has no fault table with modes 1-4 under '$header'"
    echo "$pass passed, $fail failed"; exit 1
fi

run_gate() { # mode gate -> "caught" | "missed"
    if KIPP_FAULT=$1 "$FAULT_BIN" "$2" "$M" "$V" >/dev/null 2>&1; then echo missed; else echo caught; fi
}
for g in --fault-reference --paged-cpu; do
    if [ "$(run_gate 0 "$g")" = missed ]; then ok "no fault: $g passes on the fault build"
    else bad "no fault: $g fails on the fault build (every 'caught' below would mean nothing)"; fi
done

ref_only=0; paged_only=0; missed_by_both=0
while IFS='|' read -r mode name want_ref want_paged; do
    got_ref=$(run_gate "$mode" --fault-reference)
    got_paged=$(run_gate "$mode" --paged-cpu)
    for pair in "--fault-reference:$want_ref:$got_ref" "--paged-cpu:$want_paged:$got_paged"; do
        IFS=: read -r g want got <<<"$pair"
        if [ "$want" = "$got" ]; then ok "KIPP_FAULT=$mode ($name): $g $got"
        else bad "KIPP_FAULT=$mode ($name): $g $got, $DOC expects $want"; fi
    done
    [ "$got_ref" = caught ] && [ "$got_paged" = missed ] && ref_only=$((ref_only + 1))
    [ "$got_ref" = missed ] && [ "$got_paged" = caught ] && paged_only=$((paged_only + 1))
    [ "$got_ref" = missed ] && [ "$got_paged" = missed ] && missed_by_both=$((missed_by_both + 1))
done <<<"$expected"
if [ "$ref_only" -gt 0 ]; then ok "--fault-reference catches $ref_only class(es) --paged-cpu misses"
else bad "--fault-reference catches nothing that --paged-cpu misses"; fi
if [ "$paged_only" -gt 0 ]; then ok "--paged-cpu catches $paged_only class(es) --fault-reference misses"
else bad "--paged-cpu catches nothing that --fault-reference misses"; fi
if [ "$missed_by_both" -eq 0 ]; then ok "every fault class is caught by at least one gate"
else bad "$missed_by_both fault class(es) caught by neither gate"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
