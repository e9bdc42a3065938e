#!/usr/bin/env bash
# docs.sh build|check — renders the canonical Markdown (README.md, docs/*.md) to
# docs/html/*.html with cmark-gfm (GFM tables, strikethrough, autolinks). `check` renders
# into a temporary folder and fails, naming the files, when the committed HTML differs.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
render() { # $1 = output dir
    mkdir -p "$1"
    for md in README.md docs/*.md; do
        [ -f "$md" ] || continue
        name=$(basename "$md" .md)
        {
            printf '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>%s</title></head><body>\n' "$name"
            cmark-gfm --unsafe -e table -e strikethrough -e autolink "$md"
            printf '</body></html>\n'
        } >"$1/$name.html"
    done
}
case "$mode" in
build) rm -rf docs/html; render docs/html; echo "docs: rendered into docs/html" ;;
check)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    render "$tmp"
    if diff -r -q "$tmp" docs/html >/dev/null 2>&1; then
        echo "docs-check: docs/html matches the Markdown"
    else
        echo "docs-check: docs/html is stale; run 'make docs' (differences below)" >&2
        diff -r -q "$tmp" docs/html >&2 || true
        exit 1
    fi ;;
*) echo "usage: docs.sh build|check" >&2; exit 2 ;;
esac
