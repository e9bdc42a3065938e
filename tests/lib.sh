# lib.sh — shared by the shell test drivers: run a command, echo its tail, and add up the
# "N passed, N failed" (or pytest's "N passed"/"N failed") it prints. A command that exits
# non-zero without reporting a failure counts as one failure.
passed=${passed:-0}
failed=${failed:-0}
run_counted() { # name, command...
    local name=$1; shift
    local out rc p f t0=$SECONDS
    echo "== $name: $*"
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out" | tail -n 25 | sed 's/^/   /'
    p=$(printf '%s\n' "$out" | grep -oE '[0-9]+ passed' | tail -n 1 | grep -oE '[0-9]+' || true)
    f=$(printf '%s\n' "$out" | grep -oE '[0-9]+ failed' | tail -n 1 | grep -oE '[0-9]+' || true)
    p=${p:-0}; f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then p=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    echo "   -> $name: $p passed, $f failed ($((SECONDS - t0)) s)"
}
