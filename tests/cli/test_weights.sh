#!/usr/bin/env bash
# test_weights.sh — scripts/unpack_weights.sh, which the build uses to unpack the shipped
# models: the shipped archives unpack to the manifest's sha256; a truncated archive, a
# manifest whose sha256 differs, a missing entry and a missing archive are errors that say
# so, leave no file behind and never touch an existing good file.
set -u
cd "$(dirname "$0")/../.."
U=scripts/unpack_weights.sh
. tests/cli/expect.sh
for n in kipp-tiny kipp-tiny-draft; do
    WEIGHTS_DIR=weights MODELS_DIR="$tmp/m" "$U" "$n" >/dev/null && ok || bad "unpack $n"
    want=$(python3 -c 'import json,sys; print(json.load(open("weights/MANIFEST.json"))["models"][sys.argv[1]]["gguf_sha256"])' "$n")
    [ "$(sha256sum "$tmp/m/$n/$n-bf16.gguf" | cut -d' ' -f1)" = "$want" ] && ok || bad "$n sha256"
done
# a broken copy of the shipped weights
mkdir -p "$tmp/w"
cp weights/MANIFEST.json "$tmp/w/"
head -c 100000 weights/kipp-tiny-draft-bf16.gguf.xz >"$tmp/w/kipp-tiny-draft-bf16.gguf.xz"
cp "$tmp/m/kipp-tiny-draft/kipp-tiny-draft-bf16.gguf" "$tmp/good.gguf"
WD=(env WEIGHTS_DIR="$tmp/w" MODELS_DIR="$tmp/m")
expect_fail "truncated archive" "not a valid xz archive" "${WD[@]}" "$U" kipp-tiny-draft
cmp -s "$tmp/good.gguf" "$tmp/m/kipp-tiny-draft/kipp-tiny-draft-bf16.gguf" && ok || bad "a failed unpack changed the existing file"
[ -z "$(find "$tmp/m" -name '.*')" ] && ok || bad "a failed unpack left a temporary file"
cp weights/kipp-tiny-draft-bf16.gguf.xz "$tmp/w/"
python3 - "$tmp/w/MANIFEST.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["models"]["kipp-tiny-draft"]["gguf_sha256"] = "0" * 64
json.dump(m, open(sys.argv[1], "w"))
PY
expect_fail "sha256 mismatch" "unpacks to sha256 [0-9a-f]{64}, but .* says 0{64}" "${WD[@]}" "$U" kipp-tiny-draft
cmp -s "$tmp/good.gguf" "$tmp/m/kipp-tiny-draft/kipp-tiny-draft-bf16.gguf" && ok || bad "a mismatch changed the existing file"
[ -z "$(find "$tmp/m" -name '.*')" ] && ok || bad "a mismatch left a temporary file"
expect_fail "no manifest entry" "no entry for kipp-nothing|kipp-nothing-bf16.gguf.xz is missing" "${WD[@]}" "$U" kipp-nothing
cp weights/kipp-tiny-draft-bf16.gguf.xz "$tmp/w/kipp-other-bf16.gguf.xz"
expect_fail "entry missing" "has no entry for kipp-other" "${WD[@]}" "$U" kipp-other
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
