#!/usr/bin/env bash
# Downloads a Qwen3 checkpoint from the Hugging Face hub into models/NAME/.
#
# What it does: lists the repository with the hub API
# ($HF_ENDPOINT/api/models/REPO/tree/REV), downloads the files a conversion
# needs (config.json, generation_config.json, tokenizer.json,
# tokenizer_config.json, *.safetensors, model.safetensors.index.json, and
# LICENSE / chat_template.jinja when present) from
# $HF_ENDPOINT/REPO/resolve/REV/FILE with curl, resuming partial transfers
# (curl -C -, retried up to $KIPP_DOWNLOAD_RETRIES times), verifies each file's
# size and hash (sha256 = lfs.oid for LFS files, the git blob sha1 for small
# files), deletes a file that fails verification and stops with an error,
# skips files that are already complete and verified, and writes
# models/NAME/manifest.json (repo, revision, files with size and sha256,
# downloaded_at).
#
# What it does not do: convert (see tools/convert_to_gguf.py), download
# anything but the five known Qwen3 checkpoints, follow paginated tree listings
# (Qwen3 repositories have a dozen files), or use the huggingface_hub cache.
#
# Usage: tools/download_model.sh NAME [--revision REV]
#   NAME: qwen3-0.6b qwen3-1.7b qwen3-4b-base qwen3-4b qwen3-8b
# Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (optional,
#   sent as a bearer token), KIPP_MODELS_DIR (default <repo>/models),
#   KIPP_DOWNLOAD_RETRIES (default 5).
# Needs: bash, curl, python3 (standard library only).

set -euo pipefail

PROG=download_model.sh
VALID_NAMES="qwen3-0.6b qwen3-1.7b qwen3-4b-base qwen3-4b qwen3-8b"

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() {
    echo "usage: $PROG NAME [--revision REV]" >&2
    echo "  NAME is one of: $VALID_NAMES" >&2
    exit 2
}

repo_for() {
    case "$1" in
        qwen3-0.6b) echo "Qwen/Qwen3-0.6B" ;;
        qwen3-1.7b) echo "Qwen/Qwen3-1.7B" ;;
        qwen3-4b-base) echo "Qwen/Qwen3-4B-Base" ;;
        qwen3-4b) echo "Qwen/Qwen3-4B" ;;
        qwen3-8b) echo "Qwen/Qwen3-8B" ;;
        *) return 1 ;;
    esac
}

# ---- arguments -------------------------------------------------------------
NAME=""
REVISION="main"
while [ $# -gt 0 ]; do
    case "$1" in
        --revision) [ $# -ge 2 ] || usage; REVISION="$2"; shift 2 ;;
        --revision=*) REVISION="${1#--revision=}"; shift ;;
        -h|--help) usage ;;
        -*) echo "$PROG: error: unknown option $1" >&2; usage ;;
        *) [ -z "$NAME" ] || usage; NAME="$1"; shift ;;
    esac
done
[ -n "$NAME" ] || usage
REPO=$(repo_for "$NAME") || die "unknown model name '$NAME' (valid names: $VALID_NAMES)"
[ -n "$REVISION" ] || die "empty --revision"

command -v curl >/dev/null || die "curl is not installed"
command -v python3 >/dev/null || die "python3 is not installed"

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENDPOINT="${HF_ENDPOINT:-https://huggingface.co}"
ENDPOINT="${ENDPOINT%/}"
MODELS_DIR="${KIPP_MODELS_DIR:-$SCRIPT_DIR/../models}"
DEST="$MODELS_DIR/$NAME"
RETRIES="${KIPP_DOWNLOAD_RETRIES:-5}"
case "$RETRIES" in ''|*[!0-9]*) die "KIPP_DOWNLOAD_RETRIES must be a number, got '$RETRIES'" ;; esac

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The token goes into a private curl config file, never onto the command line.
CURL_AUTH=()
if [ -n "${HF_TOKEN:-}" ]; then
    (umask 077; printf 'header = "Authorization: Bearer %s"\n' "$HF_TOKEN" > "$TMP/auth.conf")
    CURL_AUTH=(--config "$TMP/auth.conf")
fi

REV_ENC=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$REVISION")

# ---- list the repository ---------------------------------------------------
TREE_URL="$ENDPOINT/api/models/$REPO/tree/$REV_ENC"
echo "$PROG: listing $REPO@$REVISION from $ENDPOINT"
http_code=$(curl -sS -L ${CURL_AUTH[@]+"${CURL_AUTH[@]}"} --connect-timeout 30 -o "$TMP/tree.json" -w '%{http_code}' "$TREE_URL") \
    || die "cannot reach $TREE_URL (curl exit $?)"
[ "$http_code" = "200" ] || die "listing $REPO at revision '$REVISION' failed: HTTP $http_code from $TREE_URL"

# One line per wanted file: path <TAB> size <TAB> sha256-or-"-" <TAB> git-oid-or-"-"
python3 - "$TMP/tree.json" > "$TMP/files.tsv" <<'PY' || die "unusable file listing from $TREE_URL"
import json, re, sys
try:
    tree = json.load(open(sys.argv[1], encoding="utf-8"))
except ValueError as exc:
    sys.exit(f"download_model.sh: error: file listing is not JSON: {exc}")
if not isinstance(tree, list):
    sys.exit("download_model.sh: error: file listing is not a JSON list")
wanted_exact = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "model.safetensors.index.json", "LICENSE", "chat_template.jinja"}
rows = {}
for e in tree:
    if not isinstance(e, dict) or e.get("type") != "file":
        continue
    path = e.get("path")
    if not isinstance(path, str) or "/" in path or not (path in wanted_exact or path.endswith(".safetensors")):
        continue
    if not re.fullmatch(r"[A-Za-z0-9._-]+", path):
        sys.exit(f"download_model.sh: error: refusing odd file name {path!r}")
    size = e.get("size")
    lfs = e.get("lfs") or {}
    sha256 = lfs.get("oid") if isinstance(lfs, dict) else None
    if sha256 is not None:
        size = lfs.get("size", size)
        if not re.fullmatch(r"[0-9a-f]{64}", str(sha256)):
            sys.exit(f"download_model.sh: error: bad lfs.oid for {path}: {sha256!r}")
    if not isinstance(size, int) or size < 0:
        sys.exit(f"download_model.sh: error: bad size for {path}: {size!r}")
    oid = e.get("oid") if sha256 is None else None
    if oid is not None and not re.fullmatch(r"[0-9a-f]{40}", str(oid)):
        oid = None
    rows[path] = (size, sha256 or "-", oid or "-")
missing = [f for f in ("config.json", "tokenizer.json", "tokenizer_config.json") if f not in rows]
if not any(p.endswith(".safetensors") for p in rows):
    missing.append("*.safetensors")
if missing:
    sys.exit("download_model.sh: error: the repository lacks " + ", ".join(missing))
for path in sorted(rows):
    size, sha, oid = rows[path]
    print(f"{path}\t{size}\t{sha}\t{oid}")
PY

# Prints "<sha256> <git-blob-sha1>" of a file.
hash_file() {
    python3 - "$1" <<'PY'
import hashlib, os, sys
path = sys.argv[1]
s256, s1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
with open(path, "rb") as f:
    while chunk := f.read(1 << 22):
        s256.update(chunk)
        s1.update(chunk)
print(s256.hexdigest(), s1.hexdigest())
PY
}

file_size() { stat -c %s "$1" 2>/dev/null || stat -f %z "$1"; }

# verify FILE SIZE SHA256 OID -> status 0 if good; prints "ok <sha256>" or
# "bad <reason>".
verify() {
    local f="$1" size="$2" sha="$3" oid="$4" have got256 got1
    have=$(file_size "$f")
    if [ "$have" != "$size" ]; then
        echo "bad size is $have bytes, expected $size" ; return 1
    fi
    read -r got256 got1 < <(hash_file "$f")
    if [ "$sha" != "-" ] && [ "$got256" != "$sha" ]; then
        echo "bad sha256 is $got256, expected $sha" ; return 1
    fi
    if [ "$oid" != "-" ] && [ "$got1" != "$oid" ]; then
        echo "bad git blob sha1 is $got1, expected $oid" ; return 1
    fi
    echo "ok $got256"
}

mkdir -p "$DEST"
: > "$TMP/manifest.tsv"
n_files=$(wc -l < "$TMP/files.tsv")
i=0
while IFS=$'\t' read -r path size sha oid; do
    i=$((i + 1))
    final="$DEST/$path"
    part="$final.part"

    if [ -f "$final" ]; then
        if result=$(verify "$final" "$size" "$sha" "$oid"); then
            echo "[$i/$n_files] $path: already complete and verified, skipping"
            echo -e "$path\t$size\t${result#ok }" >> "$TMP/manifest.tsv"
            continue
        fi
        echo "[$i/$n_files] $path: existing file is not the expected one (${result#bad }), downloading again"
        rm -f "$final"
    fi

    url="$ENDPOINT/$REPO/resolve/$REV_ENC/$path"
    echo "[$i/$n_files] $path ($size bytes)"
    attempt=0
    while :; do
        have=0
        [ -f "$part" ] && have=$(file_size "$part")
        if [ "$have" -gt "$size" ]; then
            rm -f "$part"; have=0
        fi
        [ "$have" -eq "$size" ] && [ -f "$part" ] && break
        if [ "$size" -eq 0 ]; then : > "$part"; break; fi
        attempt=$((attempt + 1))
        [ "$have" -gt 0 ] && echo "  resuming at byte $have"
        rc=0
        http_code=$(curl -L --fail --progress-bar ${CURL_AUTH[@]+"${CURL_AUTH[@]}"} --connect-timeout 30 \
            --speed-limit 1024 --speed-time 60 -C - -o "$part" -w '%{http_code}' "$url") || rc=$?
        case "$rc:$http_code" in
            22:4*) die "downloading $path failed: HTTP $http_code from $url" ;;
        esac
        if [ "$rc" -eq 0 ] && [ "$(file_size "$part")" -eq "$size" ]; then
            break
        fi
        if [ "$rc" -eq 33 ]; then  # the server refused the byte range: start over
            echo "  server does not support resuming; restarting $path from byte 0" >&2
            rm -f "$part"
        fi
        if [ "$attempt" -gt "$RETRIES" ]; then
            die "downloading $path from $url failed after $attempt attempts (last curl exit code $rc); rerun to resume"
        fi
        echo "  transfer interrupted (curl exit $rc), retrying ($attempt/$RETRIES)" >&2
        sleep 1
    done

    if ! result=$(verify "$part" "$size" "$sha" "$oid"); then
        rm -f "$part"
        die "verification failed for $path: ${result#bad } (deleted the bad file; rerun to download it again)"
    fi
    mv -f "$part" "$final"
    echo -e "$path\t$size\t${result#ok }" >> "$TMP/manifest.tsv"
done < "$TMP/files.tsv"

python3 - "$TMP/manifest.tsv" "$DEST/manifest.json" "$REPO" "$REVISION" "$ENDPOINT" <<'PY'
import datetime, json, sys
tsv, out, repo, revision, endpoint = sys.argv[1:6]
files = {}
for line in open(tsv, encoding="utf-8"):
    path, size, sha = line.rstrip("\n").split("\t")
    files[path] = {"size": int(size), "sha256": sha}
manifest = {
    "repo": repo,
    "revision": revision,
    "endpoint": endpoint,
    "files": dict(sorted(files.items())),
    "downloaded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
}
with open(out + ".tmp", "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
import os
os.replace(out + ".tmp", out)
PY
echo "$PROG: $REPO@$REVISION is complete in $DEST ($n_files files, manifest.json written)"
