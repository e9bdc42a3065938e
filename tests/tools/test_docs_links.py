"""scripts/docs.py's link handling and checker: .md links become .html pages (with their
#anchor), other repository files become ../../path from docs/html; headings get GitHub's ids;
the checker reports a missing file and a missing #anchor (naming page and link) and passes a
good tree; a Markdown page's link to a missing repository file is reported at render time.
(`docs.sh check` on the committed tree is the "docs drift" stage of make test.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kipp_docs", REPO_ROOT / "scripts" / "docs.py")
docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def good_tree(tmp_path: Path) -> Path:
    """repo/docs/html with two pages linking each other, an anchor and a repository file."""
    repo = tmp_path / "repo"
    write(repo / "bench" / "results" / "r.json", "{}")
    html_dir = repo / "docs" / "html"
    write(html_dir / "style.css", "")
    write(html_dir / "index.html",
          '<link rel="stylesheet" href="style.css"><a href="b.html#the-part">b</a>'
          '<a href="#top">top</a><h1 id="top">t</h1><a href="../../bench/results/r.json">r</a>'
          '<a href="https://example.org/x.md">web</a>')
    write(html_dir / "b.html", '<h2 id="the-part">The part</h2><a href="index.html">back</a>')
    return html_dir


def test_good_tree_passes(tmp_path):
    assert docs.check_links(str(good_tree(tmp_path))) == []


def test_broken_link_is_named(tmp_path):
    html_dir = good_tree(tmp_path)
    (html_dir / "b.html").write_text('<h2 id="the-part">x</h2><a href="missing.html">m</a>')
    problems = docs.check_links(str(html_dir))
    assert problems == ["b.html: link 'missing.html': no such file"]


def test_missing_repo_file_is_named(tmp_path):
    html_dir = good_tree(tmp_path)
    (tmp_path / "repo" / "bench" / "results" / "r.json").unlink()
    assert docs.check_links(str(html_dir)) == ["index.html: link '../../bench/results/r.json': no such file"]


def test_missing_anchor_is_named(tmp_path):
    html_dir = good_tree(tmp_path)
    (html_dir / "b.html").write_text('<h2 id="another-part">x</h2>')
    problems = docs.check_links(str(html_dir))
    assert problems == ["index.html: link 'b.html#the-part': no anchor '#the-part' in b.html"]


def test_missing_anchor_in_same_page(tmp_path):
    html_dir = good_tree(tmp_path)
    (html_dir / "b.html").write_text('<h2 id="the-part">x</h2><a href="#nowhere">n</a>')
    assert docs.check_links(str(html_dir)) == ["b.html: link '#nowhere': no anchor '#nowhere' in b.html"]


def test_slugs_match_github():
    assert docs.slug("KV cache types: decode speed and server memory") == \
        "kv-cache-types-decode-speed-and-server-memory"
    assert docs.slug("The `kipp` CLI") == "the-kipp-cli"
    assert docs.slug("Perplexity: `kipp-perplexity`") == "perplexity-kipp-perplexity"
    body = docs.add_heading_ids("<h2>Notes</h2><h2>Notes</h2><h3>A <code>b_c</code></h3>")
    assert body == '<h2 id="notes">Notes</h2><h2 id="notes-1">Notes</h2><h3 id="a-b_c">A <code>b_c</code></h3>'


def test_render_rewrites_links_and_reports_broken_markdown_links(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "README.md", "# R\n\n[gs](docs/getting-started.md#first-run) [c](docs/chat.md) "
          "[rec](bench/results/r.json) [gone](docs/gone.md) [web](https://x.org/a.md)\n\n"
          "```sh\nmake demo\n```\n")
    write(repo / "docs" / "getting-started.md", "# Getting started\n\n## First run\n\n[back](../README.md)\n")
    write(repo / "docs" / "chat.md", "# Chat\n\n[gs](getting-started.md#no-such-heading)\n")
    write(repo / "docs" / "zeta-extra.md", "# Zeta page\n")
    write(repo / "bench" / "results" / "r.json", "{}")
    out = repo / "docs" / "html"
    problems = docs.render(str(out), root=str(repo))
    assert problems == [("README.md", "docs/gone.md", "no such file docs/gone.md")]
    index = (out / "index.html").read_text()
    assert 'href="getting-started.html#first-run"' in index
    assert 'href="chat.html"' in index
    assert 'href="../../bench/results/r.json"' in index
    assert 'href="https://x.org/a.md"' in index
    assert '<link rel="stylesheet" href="style.css">' in index
    assert '<pre class="highlight">' in index
    # the sidebar: Overview first, getting started next, a page not named in PAGES listed too
    nav = index[index.index('<nav'):index.index('</nav>')]
    assert nav.index("Overview") < nav.index("Getting started") < nav.index("kipp-chat") < nav.index("Zeta page")
    assert 'href="index.html"' in (out / "getting-started.html").read_text()
    assert (out / "style.css").is_file()
    problems = docs.check_links(str(out))
    assert "chat.html: link 'getting-started.html#no-such-heading': no anchor '#no-such-heading' " \
        "in getting-started.html" in problems
    assert "index.html: link '../gone.md': no such file" in problems
    assert len(problems) == 2

