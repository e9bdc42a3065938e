#!/usr/bin/env bash
# docs.sh build|check — renders README.md, docs/*.md, BENCHMARKS.md and a few other pages to
# docs/html/ (index.html, a sidebar on every page, style.css, Pygments-highlighted code, .md
# links rewritten to .html, other repository files linked as ../../path). `check` fails on
# stale HTML and on any broken local link or #anchor, naming the page and the link.
# The work is done by scripts/docs.py (cmark-gfm renders the Markdown).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" scripts/docs.py "${1:-check}"
