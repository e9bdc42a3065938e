#!/usr/bin/env bash
# mutation.sh — proves the model gates can fail: each case copies the source tree, plants
# one deliberate bug in the cpu-ref forward pass or its KV addressing, rebuilds kipp_test
# in the copy, and requires the named gate to FAIL on the tiny checkpoint. A mutation the
# gates do not catch is a test failure. Production sources are never modified.
set -u
cd "$(dirname "$0")/../.."
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
V=tests/test-vectors/tiny-untied
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
F=src/backend/cpu_ref/cpu_ref.c

# name | gate flag | sed expression (with '#' delimiters) applied to cpu_ref.c
cases=(
  "rope sign|--model|s#h\[i\] = a \* s->rope_cos\[i\] - b#h[i] = a * s->rope_cos[i] + b#"
  "attention scale 1/D|--model|s#1.0f / sqrtf((float)D)#1.0f / (float)D#"
  "GQA head mapping|--model|s#(size_t)(h / group) \* D#(size_t)(h % hp->n_head_kv) * D#"
  "k-norm skipped|--model|s#rmsnorm(kh, kh, kn, D, hp->rms_eps);#(void)kn;#"
  "KV slot off by one|--phase2-model|s#((size_t)layer \* s->n_ctx + pos)#((size_t)layer * s->n_ctx + (pos ? pos - 1 : 0))#"
  "KV layer aliasing|--phase2-model|s#((size_t)layer \* s->n_ctx + pos)#((size_t)0 * layer * s->n_ctx + pos)#"
)
for c in "${cases[@]}"; do
    IFS='|' read -r name gate expr <<<"$c"
    d=$tmp/$(echo "$name" | tr ' /' '__')
    mkdir -p "$d"
    cp -r Makefile include src tests "$d/"
    sed -i "$expr" "$d/$F"
    if cmp -s "$F" "$d/$F"; then fail=$((fail + 1)); echo "FAIL: mutation '$name' did not apply"; continue; fi
    if ! make -s -C "$d" BUILD=build build/kipp_test >"$d/build.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL: mutation '$name' does not build"; tail -5 "$d/build.log"; continue
    fi
    if "$d/build/kipp_test" "$gate" "$M" "$V" >"$d/gate.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL: gate $gate did not catch '$name'"
    else
        pass=$((pass + 1)); echo "caught: '$name' by $gate ($(grep -c '^FAIL' "$d/gate.log") failed checks)"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
