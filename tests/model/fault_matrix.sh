#!/usr/bin/env bash
# fault_matrix.sh — the KV fault-injection matrix: builds build/kipp_test_fault (the same
# sources with -DKIPP_FAULT_INJECT), runs the identity-layout tolerance gate
# (--fault-reference) and the adversarial block-table gate (--paged-cpu) on each backend
# column of the expected table in docs/kv-cache.md under each KIPP_FAULT mode, and compares
# caught/missed with that table. Also checks each column passes on the fault build with no
# fault set, that on each backend each gate catches a class the other misses, and that the
# production binaries carry no fault hook. Does not care where the hook lives; never edits
# sources. FAULT_BACKENDS (default "cpu-ref cpu vulkan") picks the table's columns to run: the cuda
# column (`make test-cuda`, on a GPU) runs build/kipp_test_cuda_fault, the same build of
# kipp_test_cuda.
set -u
cd "$(dirname "$0")/../.."
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
V=tests/test-vectors/tiny-untied
DOC=docs/kv-cache.md
# the vulkan column runs on the first Vulkan device (lavapipe in make test) whenever the
# binaries carry the vulkan backend
default_backends="cpu-ref cpu"
build/kipp --help 2>&1 | grep -q 'this binary has .*vulkan' && default_backends="$default_backends vulkan"
FAULT_BACKENDS=${FAULT_BACKENDS:-$default_backends}
# lavapipe (the vulkan column): one thread, as the stage counts one core
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}
FAULT_BIN=build/kipp_test_fault
fault_targets="build/kipp build/kipp_test build/kipp_test_fault"
case " $FAULT_BACKENDS " in
*" cuda "*) FAULT_BIN=build/kipp_test_cuda_fault; fault_targets="$fault_targets $FAULT_BIN" ;;
esac
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
trim() { local s=$1; s=${s#"${s%%[! ]*}"}; printf '%s' "${s%"${s##*[! ]}"}"; }

# Columns whose gate fails on that backend even with no fault, for a reason reported to
# the lead (tests/model/gate.sh, pending_reason). There a fault counts as caught
# when the gate's number of failed checks differs from the no-fault run (with a passing
# no-fault run that is the same as failing). A listed column that passes with no fault is
# a failure until it is removed from this list.
baseline_pending=() # none today

if ! make -s $fault_targets >/tmp/fault_matrix_build.$$ 2>&1; then
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

# Expected table: the header line starting with the prefix below (its columns after
# "fault" name "GATE BACKEND"), then its rows up to the first non-table line.
prefix='| KIPP_FAULT | fault |'
table=$(awk -v h="$prefix" '
    index($0, h) == 1 { on = 1; print; next }
    on && /^\|[- |]+\|$/ { next }
    on && /^\|/ { print; next }
    on { exit }' "$DOC")
IFS='|' read -r -a hcells <<<"$(printf '%s\n' "$table" | head -n 1)"
cols=() all_cols=() col_idx=()
for ((i = 3; i < ${#hcells[@]}; i++)); do
    c=$(trim "${hcells[i]}")
    [ -n "$c" ] || continue
    all_cols+=("$c")
    case " $FAULT_BACKENDS " in *" ${c##* } "*) cols+=("$c"); col_idx+=($((i - 3))) ;; esac
done
rows=$(printf '%s\n' "$table" | tail -n +2)
backends=""
for c in "${all_cols[@]}"; do
    if ! [[ "$c" =~ ^(--fault-reference|--paged-cpu)\ ([a-z0-9-]+)$ ]]; then
        bad "$DOC: fault table column '$c' is not 'GATE BACKEND'"; continue
    fi
    case " $FAULT_BACKENDS " in *" ${BASH_REMATCH[2]} "*) ;; *) continue ;; esac
    case " $backends " in *" ${BASH_REMATCH[2]} "*) ;; *) backends="$backends ${BASH_REMATCH[2]}" ;; esac
done
for b in $(printf "%s\n" $FAULT_BACKENDS | sort -u); do
    for g in --fault-reference --paged-cpu; do
        case " ${all_cols[*]} " in *" $g $b "*) ;; *) bad "$DOC: fault table has no column '$g $b'" ;; esac
    done
done
if [ "$(printf '%s\n' "$rows" | grep -cE '^\| *[1-4] *\|')" -ne 4 ] || [ "$fail" -gt 0 ]; then
    bad "$DOC has no fault table with modes 1-4 and a column per gate and backend under '$prefix'"
    echo "$pass passed, $fail failed"; exit 1
fi

# run GATE BACKEND MODE -> sets rc and nf (the gate's failed checks)
run() {
    local out
    out=$(KIPP_FAULT=$3 "$FAULT_BIN" "$1" "$M" "$V" --backend "$2" 2>&1); rc=$?
    nf=$(printf '%s\n' "$out" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' | tail -n 1)
    nf=${nf:-unknown}
}
declare -A base_rc base_nf got
for c in "${cols[@]}"; do
    read -r g b <<<"$c"
    run "$g" "$b" 0
    base_rc[$c]=$rc; base_nf[$c]=$nf
    listed=0
    for p in "${baseline_pending[@]}"; do [ "$p" = "$c" ] && listed=1; done
    if [ "$rc" -eq 0 ] && [ "$listed" -eq 0 ]; then ok "no fault: $c passes on the fault build"
    elif [ "$rc" -eq 0 ]; then bad "no fault: $c now passes; remove it from baseline_pending in $0"
    elif [ "$listed" -eq 1 ]; then echo "pending: no fault: $c fails ($nf failed checks, reported); a fault is caught when that count changes"
    else bad "no fault: $c fails on the fault build (every 'caught' below would mean nothing)"; fi
done

while IFS='|' read -r _ mode name rest; do
    mode=$(trim "$mode"); name=$(trim "$name")
    IFS='|' read -r -a want <<<"$rest"
    for i in "${!cols[@]}"; do
        c=${cols[i]}
        w=$(trim "${want[${col_idx[i]}]:-}")
        read -r g b <<<"$c"
        run "$g" "$b" "$mode"
        if [ "$rc" -ne 0 ] && { [ "${base_rc[$c]}" -eq 0 ] || [ "$nf" != "${base_nf[$c]}" ]; }; then r=caught; else r=missed; fi
        got[$mode,$c]=$r
        if [ "$w" = "$r" ]; then ok "KIPP_FAULT=$mode ($name): $c $r"
        else bad "KIPP_FAULT=$mode ($name): $c $r, $DOC expects '$w'"; fi
    done
done <<<"$rows"

# On each backend: each gate catches a class the other misses, every class caught once.
modes=$(printf '%s\n' "$rows" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }')
for b in $backends; do
    ref_only=0; paged_only=0; neither=0
    for m in $modes; do
        r=${got[$m,--fault-reference $b]:-} p=${got[$m,--paged-cpu $b]:-}
        [ "$r" = caught ] && [ "$p" = missed ] && ref_only=$((ref_only + 1))
        [ "$r" = missed ] && [ "$p" = caught ] && paged_only=$((paged_only + 1))
        [ "$r" = missed ] && [ "$p" = missed ] && neither=$((neither + 1))
    done
    if [ "$ref_only" -gt 0 ]; then ok "$b: --fault-reference catches $ref_only class(es) --paged-cpu misses"
    else bad "$b: --fault-reference catches nothing that --paged-cpu misses"; fi
    if [ "$paged_only" -gt 0 ]; then ok "$b: --paged-cpu catches $paged_only class(es) --fault-reference misses"
    else bad "$b: --paged-cpu catches nothing that --fault-reference misses"; fi
    if [ "$neither" -eq 0 ]; then ok "$b: every fault class is caught by at least one gate"
    else bad "$b: $neither fault class(es) caught by neither gate"; fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
