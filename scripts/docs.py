#!/usr/bin/env python3
"""docs.py build|check — renders the Markdown pages (README.md, docs/*.md, BENCHMARKS.md and the
few other pages in PAGES) to docs/html/*.html: cmark-gfm does the Markdown (GFM tables,
strikethrough, autolinks), this script adds what a browser needs and cmark-gfm does not give.

- Every page gets one stylesheet (docs/html/style.css) and a sidebar listing all pages in
  PAGES order (README is the index page, "Overview"; getting started next; docs/*.md pages
  not named in PAGES follow the named ones in file-name order).
- Headings get ids the way GitHub makes them (lower case, punctuation dropped, spaces to
  hyphens, -1/-2 for repeats), so `page.md#some-heading` links work on GitHub and here.
- Code blocks with a language are highlighted at build time with Pygments (no script, no CDN).
- Links: a link to a rendered page (`docs/x.md`, `x.md#anchor`, `../BENCHMARKS.md`) becomes
  its .html page; a link to any other repository file (`bench/results/x.json`,
  `bench/plots/x.svg`) becomes the relative path from docs/html to that file in the checkout
  (`../../bench/results/x.json`), so the pages work when opened from a clone.

`check` renders into a temporary folder beside docs/html and fails when docs/html differs
(stale HTML), when a Markdown page links to a repository path that does not exist, and when
any href/src of the rendered pages points at a missing file or a missing #anchor (so a
Markdown link to a missing heading fails too); each problem names the page and the link.
It does not check http(s) links.
"""
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HTML_DIR = "docs/html"

# (source, output, sidebar label); docs/*.md pages missing here are added after "tools.md".
PAGES = [
    ("README.md", "index.html", "Overview"),
    ("docs/getting-started.md", "getting-started.html", "Getting started"),
    ("docs/troubleshooting.md", "troubleshooting.html", "Troubleshooting"),
    ("docs/chat.md", "chat.html", "kipp-chat"),
    ("docs/server.md", "server.html", "kipp-server"),
    ("docs/deploy.md", "deploy.html", "Deployment"),
    ("docs/structured-output.md", "structured-output.html", "Structured output"),
    ("docs/grammar.md", "grammar.html", "Grammars"),
    ("docs/speculative.md", "speculative.html", "Speculative decoding"),
    ("docs/tools.md", "tools.html", "Python tools"),
    ("docs/chat-template.md", "chat-template.html", "Chat template"),
    ("docs/tokenizer.md", "tokenizer.html", "Tokenizer"),
    ("docs/architecture.md", "architecture.html", "Architecture"),
    ("docs/backends.md", "backends.html", "Backends"),
    ("docs/kv-cache.md", "kv-cache.html", "KV cache"),
    ("docs/testing.md", "testing.html", "Testing"),
    ("BENCHMARKS.md", "benchmarks.html", "Benchmarks"),
    ("bench/README.md", "bench-protocol.html", "Benchmark protocol"),
    ("docs/qwen3-gguf-reference.md", "qwen3-gguf-reference.html", "Qwen3 GGUF reference"),
    ("weights/PROVENANCE.md", "provenance.html", "Model provenance"),
]
EXTRA_AFTER = "docs/tools.md"

CMARK = ["cmark-gfm", "--unsafe", "-e", "table", "-e", "strikethrough", "-e", "autolink"]

STYLE = """\
/* docs/html/style.css — written by scripts/docs.py; edit it there. */
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif;
       color: #1f2328; background: #fff; }
nav.sidebar { position: fixed; top: 0; left: 0; bottom: 0; width: 15rem; overflow-y: auto;
              padding: 1.2rem 1rem; background: #f6f8fa; border-right: 1px solid #d0d7de; }
nav.sidebar .brand { display: block; font-size: 1.3rem; font-weight: bold; margin-bottom: .8rem;
                     color: #1f2328; text-decoration: none; }
nav.sidebar ul { list-style: none; margin: 0; padding: 0; }
nav.sidebar li a { display: block; padding: .2rem .5rem; border-radius: 4px; color: #0550ae;
                   text-decoration: none; font-size: .95rem; }
nav.sidebar li a:hover { background: #e7ecf0; }
nav.sidebar li a.current { background: #0550ae; color: #fff; }
main { margin-left: 15rem; padding: 1.5rem 2.5rem 4rem; max-width: 62rem; }
@media (max-width: 50rem) {
  nav.sidebar { position: static; width: auto; border-right: none;
                border-bottom: 1px solid #d0d7de; }
  main { margin-left: 0; padding: 1rem; }
}
h1, h2, h3, h4 { line-height: 1.25; margin-top: 1.6em; }
h1 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; margin-top: .5em; }
h2 { border-bottom: 1px solid #eaeef2; padding-bottom: .2em; }
a { color: #0550ae; }
code { font: .88em/1.45 "DejaVu Sans Mono", Menlo, Consolas, monospace;
       background: #eff1f3; padding: .1em .3em; border-radius: 4px; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: .8rem 1rem;
      overflow-x: auto; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; margin: 1em 0; display: block; overflow-x: auto; }
th, td { border: 1px solid #d0d7de; padding: .3rem .6rem; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fafbfc; }
img { max-width: 100%; }
blockquote { margin: 1em 0; padding: 0 1em; color: #57606a; border-left: .25em solid #d0d7de; }
"""


# ---- pages ------------------------------------------------------------------------------


def pages(root=ROOT):
    """The (source, output, label) list in sidebar order, for sources that exist."""
    named = {src for src, _, _ in PAGES}
    extra = []
    for name in sorted(os.listdir(os.path.join(root, "docs"))):
        src = "docs/" + name
        if name.endswith(".md") and src not in named:
            extra.append((src, name[:-3] + ".html", first_heading(os.path.join(root, src))))
    out = []
    for entry in PAGES:
        if os.path.isfile(os.path.join(root, entry[0])):
            out.append(entry)
        if entry[0] == EXTRA_AFTER:
            out.extend(extra)
    return out


def first_heading(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# "):
                return line[2:].strip()
    return os.path.basename(path)[:-3]


# ---- headings ---------------------------------------------------------------------------


def slug(text):
    """GitHub's heading anchor: lower case, keep letters, digits, '_', '-' and spaces (as '-')."""
    out = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in " -":
            out.append("-")
        elif ch == "_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
    return "".join(out)


def add_heading_ids(body):
    seen = {}

    def repl(m):
        text = html.unescape(re.sub(r"<[^>]+>", "", m.group(2)))
        base = slug(text)
        n = seen.get(base, 0)
        seen[base] = n + 1
        hid = base if n == 0 else "%s-%d" % (base, n)
        return '<h%s id="%s">%s</h%s>' % (m.group(1), html.escape(hid), m.group(2), m.group(1))

    return re.sub(r"<h([1-6])>(.*?)</h\1>", repl, body, flags=re.S)


# ---- code highlighting ------------------------------------------------------------------

LEXER_ALIASES = {"sh": "bash", "shell": "bash", "console": "console", "gbnf": "text"}


def highlight_code(body):
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    fmt = HtmlFormatter(nowrap=True)

    def repl(m):
        lang = html.unescape(m.group(1))
        try:
            lexer = get_lexer_by_name(LEXER_ALIASES.get(lang, lang), stripnl=False)
        except ClassNotFound:
            return m.group(0)
        code = html.unescape(m.group(2))
        return '<pre class="highlight"><code class="language-%s">%s</code></pre>' % (
            m.group(1), highlight(code, lexer, fmt))

    return re.sub(r'<pre><code class="language-([^"]+)">(.*?)</code></pre>', repl, body, flags=re.S)


def style_css():
    from pygments.formatters import HtmlFormatter
    return STYLE + "\n/* code highlighting: Pygments' default style */\n" + \
        HtmlFormatter(style="default").get_style_defs(".highlight") + "\n"


# ---- links ------------------------------------------------------------------------------

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
ATTR = re.compile(r'\b(href|src)="([^"]*)"')


def rewrite_links(body, src, page_of, problems, root=ROOT):
    """Rewrites href/src of a page rendered from src (a repository path); records problems
    with the Markdown's own links (missing file) as (src, link, why)."""
    src_dir = os.path.dirname(src)

    def repl(m):
        attr, raw = m.group(1), html.unescape(m.group(2))
        if not raw or SCHEME.match(raw) or raw.startswith("#") or raw.startswith("//"):
            return m.group(0)
        path, _, frag = raw.partition("#")
        target = os.path.normpath(os.path.join(src_dir, unquote(path)))
        if target.startswith(".."):
            problems.append((src, raw, "points outside the repository"))
            return m.group(0)
        if target in page_of:
            new = page_of[target] + ("#" + frag if frag else "")
        else:
            if not os.path.exists(os.path.join(root, target)):
                problems.append((src, raw, "no such file " + target))
            new = os.path.relpath(target, HTML_DIR) + ("#" + frag if frag else "")
            if path.endswith("/") and not new.endswith("/"):
                new += "/"
        return '%s="%s"' % (attr, html.escape(new, quote=True))

    return ATTR.sub(repl, body)



def check_links(html_dir):
    """Every href/src in html_dir's .html files that is not an absolute URL must name an
    existing file (relative to the page) and, with #anchor into an .html page, an existing
    id. Returns a list of 'page: link: why' strings."""
    ids = {}
    html_files = sorted(n for n in os.listdir(html_dir) if n.endswith(".html"))
    texts = {}
    for name in html_files:
        with open(os.path.join(html_dir, name), encoding="utf-8") as f:
            texts[name] = f.read()
        ids[name] = set(html.unescape(i) for i in re.findall(r'\bid="([^"]*)"', texts[name]))
    problems = []
    for name in html_files:
        for _, raw in ATTR.findall(texts[name]):
            raw = html.unescape(raw)
            if not raw or SCHEME.match(raw) or raw.startswith("//"):
                continue
            path, _, frag = raw.partition("#")
            if path:
                target = os.path.normpath(os.path.join(html_dir, unquote(path)))
                if not os.path.exists(target):
                    problems.append("%s: link '%s': no such file" % (name, raw))
                    continue
            else:
                target = os.path.join(html_dir, name)
            if frag:
                tname = os.path.relpath(target, html_dir)
                if tname in ids and unquote(frag) not in ids[tname]:
                    problems.append("%s: link '%s': no anchor '#%s' in %s" % (name, raw, frag, tname))
    return problems


# ---- rendering --------------------------------------------------------------------------


def nav_html(page_list, current):
    items = []
    for _, out, label in page_list:
        cls = ' class="current"' if out == current else ""
        items.append('<li><a href="%s"%s>%s</a></li>' % (out, cls, html.escape(label)))
    return ('<nav class="sidebar"><a class="brand" href="index.html">Kipp</a><ul>\n' +
            "\n".join(items) + "\n</ul></nav>\n")


def render(out_dir, root=ROOT):
    """Renders every page into out_dir; returns the Markdown sources' link problems."""
    page_list = pages(root)
    page_of = {src: out for src, out, _ in page_list}
    os.makedirs(out_dir, exist_ok=True)
    problems = []
    for src, out, label in page_list:
        body = subprocess.run(CMARK + [os.path.join(root, src)], check=True, capture_output=True,
                              text=True, encoding="utf-8").stdout
        body = add_heading_ids(body)
        body = highlight_code(body)
        body = rewrite_links(body, src, page_of, problems, root)
        title = first_heading(os.path.join(root, src))
        page = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
                '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                '<title>%s — Kipp</title>\n<link rel="stylesheet" href="style.css">\n</head><body>\n'
                % html.escape(title) + nav_html(page_list, out) + "<main>\n" + body +
                "</main>\n</body></html>\n")
        with open(os.path.join(out_dir, out), "w", encoding="utf-8") as f:
            f.write(page)
    with open(os.path.join(out_dir, "style.css"), "w", encoding="utf-8") as f:
        f.write(style_css())
    return problems


def diff_trees(a, b):
    """Names of files that differ between two flat folders (missing on either side too)."""
    names_a = set(os.listdir(a)) if os.path.isdir(a) else set()
    names_b = set(os.listdir(b)) if os.path.isdir(b) else set()
    out = []
    for n in sorted(names_a | names_b):
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        if n not in names_a or n not in names_b:
            out.append(n + (" (not committed)" if n in names_a else " (no such page any more)"))
            continue
        with open(pa, "rb") as fa, open(pb, "rb") as fb:
            if fa.read() != fb.read():
                out.append(n)
    return out


def main(argv):
    mode = argv[1] if len(argv) > 1 else "check"
    os.chdir(ROOT)
    if mode == "build":
        shutil.rmtree(HTML_DIR, ignore_errors=True)
        problems = render(HTML_DIR)
        for src, link, why in problems:
            print("docs: warning: %s: link '%s': %s" % (src, link, why), file=sys.stderr)
        print("docs: rendered %d pages into %s" % (len(pages()), HTML_DIR))
        return 0
    if mode != "check":
        print("usage: docs.sh build|check", file=sys.stderr)
        return 2
    failed = False
    # the fresh render sits beside docs/html, so its ../../PATH links resolve as the real ones do
    with tempfile.TemporaryDirectory(dir="docs", prefix=".html-check-") as tmp:
        problems = render(tmp)
        stale = diff_trees(tmp, HTML_DIR)
        html_problems = check_links(tmp)
    if stale:
        failed = True
        print("docs-check: docs/html is stale; run 'make docs'. Differs: " + ", ".join(stale),
              file=sys.stderr)
    for src, link, why in sorted(set(problems)):
        failed = True
        print("docs-check: %s: broken link '%s': %s" % (src, link, why), file=sys.stderr)
    for p in sorted(set(html_problems)):
        failed = True
        print("docs-check: docs/html/" + p, file=sys.stderr)
    if failed:
        return 1
    print("docs-check: docs/html matches the Markdown; every local link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
