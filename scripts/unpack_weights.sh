#!/usr/bin/env bash
# unpack_weights.sh NAME — unpacks Kipp's shipped model weights/NAME-bf16.gguf.xz to
# models/NAME/NAME-bf16.gguf and checks its sha256 against weights/MANIFEST.json. The file
# appears only when complete and verified (written beside it, then renamed); a mismatch or
# a broken archive is an error that names both hashes, and nothing is left behind (an
# existing models/NAME/NAME-bf16.gguf is left as it was). WEIGHTS_DIR and MODELS_DIR
# (default weights and models) are for the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/unpack_weights.sh NAME (e.g. kipp-tiny)}
W=${WEIGHTS_DIR:-weights}
MD=${MODELS_DIR:-models}
src=$W/$name-bf16.gguf.xz
dst=$MD/$name/$name-bf16.gguf
[ -f "$src" ] || { echo "unpack_weights: $src is missing" >&2; exit 1; }
command -v xz >/dev/null || { echo "unpack_weights: xz is not installed (apt-get install xz-utils)" >&2; exit 1; }
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["models"][sys.argv[2]]["gguf_sha256"])' "$W/MANIFEST.json" "$name" 2>/dev/null) || {
    echo "unpack_weights: $W/MANIFEST.json is missing or has no entry for $name" >&2
    exit 1
}
mkdir -p "$MD/$name"
tmp=$(mktemp "$MD/$name/.$name-bf16.gguf.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if ! xz -dc "$src" >"$tmp"; then
    echo "unpack_weights: $src is not a valid xz archive" >&2
    exit 1
fi
got=$(sha256sum "$tmp" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "unpack_weights: $src unpacks to sha256 $got, but $W/MANIFEST.json says $want" >&2
    exit 1
fi
chmod 644 "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
echo "unpacked $dst (sha256 verified)"
