# expect.sh — sourced by the tests/cli drivers: pass/fail counters and expect_fail, with
# $tmp set to a scratch folder (made here, removed on exit).
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# expect_fail NAME PATTERN CMD... : exit 1 or 2 (not a signal), stderr matches PATTERN
expect_fail() {
    local name=$1 pat=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; local rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then bad "$name: exit $rc"; cat "$tmp/err"; return; fi
    if grep -qE -- "$pat" "$tmp/err"; then ok; else bad "$name: stderr lacks /$pat/:"; cat "$tmp/err"; fi
}
