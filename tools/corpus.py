#!/usr/bin/env python3
"""The training corpus of the kipp-tiny models, built from installed Debian packages.

What it does: reads openly licensed text that Debian's archive ships (see SOURCES and
PROVENANCE.md), cleans it lightly, and splits it by file into a training part and a held-out
part that training never sees. A file goes to the held-out part when the first byte of the
sha256 of its path (relative to the package root) is below HELDOUT_BYTE, so the split depends
only on the file names, never on the order or the machine. It also makes chat examples
(question, answer) from the Python glossary and the docstrings of the standard library, held
out the same way by the hash of the question.

Sources, each a list of documents (one document = one file, or one chat example):
  docs   the Python 3.11 documentation sources (python3.11-doc, PSF-2.0): English prose
  dref   the Debian Reference in English (debian-reference-en, GPL-2+): English prose
  code   the Python 3.11 standard library (libpython3.11-stdlib, PSF-2.0): source code
  intl   the Debian Reference in German, French, Spanish and Chinese (GPL-2+): a little
         multilingual text
  chat   glossary and docstring questions, rendered later with the Qwen3 chat template

What it does not do: download anything. A missing package is an error that names the package
and the apt-get command that installs it.

Usage (a listing of the files and their split, as PROVENANCE.md's manifest):
    python -m tools.corpus --list weights/corpus-files.tsv
    python -m tools.corpus --heldout-text bench/data/kipp-tiny-heldout.txt --max-bytes 120000
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/corpus.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import ast
import gzip
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HELDOUT_BYTE = 13  # ~5 % of the files (first sha256 byte < 13 of 256)

PY_DOC = Path("/usr/share/doc/python3.11/html/_sources")
PY_LIB = Path("/usr/lib/python3.11")
DREF = Path("/usr/share/debian-reference")

# source -> (Debian packages, license)
PACKAGES = {
    "docs": (["python3.11-doc"], "PSF-2.0"),
    "dref": (["debian-reference-en"], "GPL-2+"),
    "code": (["libpython3.11-stdlib"], "PSF-2.0"),
    "intl": (["debian-reference-de", "debian-reference-fr", "debian-reference-es",
              "debian-reference-zh-cn"], "GPL-2+"),
    "chat": (["python3.11-doc", "libpython3.11-stdlib"], "PSF-2.0"),
}

# standard-library packages whose modules feed the code source and the docstring questions
# (the big test suites and the vendored third-party code are left out)
CODE_SKIP = ("test/", "idlelib/", "lib2to3/", "tkinter/", "turtledemo/", "ensurepip/",
             "site-packages/", "dist-packages/", "config-3", "distutils/tests", "unittest/test",
             "ctypes/test", "sqlite3/test", "lib-dynload", "__pycache__")


@dataclass
class Doc:
    source: str
    name: str        # path relative to the package root, or the chat question's id
    text: str        # for chat: the question
    answer: str = ""  # chat only
    heldout: bool = field(default=False)


def is_heldout(name: str) -> bool:
    return hashlib.sha256(name.encode()).digest()[0] < HELDOUT_BYTE


_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_DIRECTIVE = re.compile(r"^\.\. (?:index|highlight|testsetup|testcleanup|sectionauthor|"
                        r"moduleauthor|versionadded|versionchanged|deprecated|_[^:]*|"
                        r"toctree|include|only|module|currentmodule|seealso|audit-event)::?.*$")


def clean_rst(text: str) -> str:
    """Light clean-up of reStructuredText: roles become plain ``literals``, bookkeeping
    directives (index, versionadded, labels, ...) and their indented options are dropped,
    and runs of blank lines collapse."""
    out, skipping = [], False
    for line in text.splitlines():
        if _DIRECTIVE.match(line):
            skipping = True
            continue
        if skipping:
            if line.startswith("   ") or not line.strip():
                if not line.strip():
                    skipping = False
                continue
            skipping = False
        out.append(_ROLE.sub(lambda m: "``" + m.group(1).strip() + "``", line).rstrip())
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _need(path: Path, source: str) -> None:
    if not path.exists():
        pk = " ".join(PACKAGES[source][0])
        sys.exit(f"corpus: {path} is missing; install it with: apt-get install {pk}")


def docs_source() -> list[Doc]:
    _need(PY_DOC, "docs")
    docs = []
    for p in sorted(PY_DOC.rglob("*.rst.txt")):
        rel = str(p.relative_to(PY_DOC))
        if rel.startswith(("whatsnew/changelog", "license", "copyright", "c-api/")):
            continue
        docs.append(Doc("docs", "python3.11-doc/" + rel, clean_rst(p.read_text("utf-8"))))
    return docs


def _dref_chapters(lang: str, source: str) -> list[Doc]:
    p = DREF / f"debian-reference.{lang}.txt.gz"
    _need(p, source)
    text = gzip.decompress(p.read_bytes()).decode("utf-8", "replace")
    # one document per chapter, so the held-out split works per chapter
    parts = re.split(r"\n(?=(?:Chapter|Kapitel|Chapitre|Capítulo)[ \xa0]\d+\.|第[ \xa0]?\d+[ \xa0]?章)", text)
    out = []
    for i, part in enumerate(parts):
        part = re.sub(r"[ \t]+\n", "\n", part)
        part = re.sub(r"\n{3,}", "\n\n", part).strip()
        if len(part) > 200:
            out.append(Doc(source, f"debian-reference-{lang}/debian-reference.{lang}.txt#{i}",
                           part + "\n"))
    return out


def dref_source() -> list[Doc]:
    return _dref_chapters("en", "dref")


def intl_source() -> list[Doc]:
    docs = []
    for lang in ("de", "fr", "es", "zh-cn"):
        docs += _dref_chapters(lang, "intl")
    return docs


def _code_files() -> list[Path]:
    _need(PY_LIB, "code")
    files = []
    for p in sorted(PY_LIB.rglob("*.py")):
        rel = str(p.relative_to(PY_LIB))
        if any(s in rel for s in CODE_SKIP) or p.stat().st_size > 200_000:
            continue
        files.append(p)
    return files


def code_source() -> list[Doc]:
    return [Doc("code", "libpython3.11-stdlib/" + str(p.relative_to(PY_LIB)),
                p.read_text("utf-8", "replace")) for p in _code_files()]


_QUESTIONS = ("What does {} do?", "Explain {}.", "What is {} for?", "Tell me about {}.")


def _first_paragraph(doc: str) -> str:
    para = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines()).strip()


def chat_source() -> list[Doc]:
    docs = []
    gl = PY_DOC / "glossary.rst.txt"
    _need(gl, "chat")
    # glossary: "term\n   definition paragraphs" inside the glossary directive
    text = clean_rst(gl.read_text("utf-8"))
    for m in re.finditer(r"^   (\S[^\n]*)\n((?:      [^\n]*\n|\n)+)", text, re.M):
        term = m.group(1).strip()
        body = "\n".join(line[6:] for line in m.group(2).splitlines()).strip()
        answer = _first_paragraph(body)
        if term and len(answer) > 40:
            q = f"What is {term.strip('`')} in Python?" if not term.startswith(">>>") else \
                f"What does {term} mean in Python?"
            docs.append(Doc("chat", "glossary:" + term, q, answer))
    for p in _code_files():
        mod = str(p.relative_to(PY_LIB))[:-3].replace("/", ".").removesuffix(".__init__")
        if any(part.startswith("_") for part in mod.split(".")):
            continue
        try:
            tree = ast.parse(p.read_text("utf-8", "replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                if not doc:
                    continue
                answer = _first_paragraph(doc)
                if len(answer) < 30 or len(answer) > 700:
                    continue
                name = f"{mod}.{node.name}"
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                q = _QUESTIONS[hashlib.sha256(name.encode()).digest()[1] % len(_QUESTIONS)]
                q = q.format(f"the {kind} `{name}`")
                docs.append(Doc("chat", "docstring:" + name, q,
                                f"`{name}` is a {kind} of the `{mod}` module. {answer}"))
    return docs


SOURCES = {"docs": docs_source, "dref": dref_source, "code": code_source,
           "intl": intl_source, "chat": chat_source}


def load(sources=tuple(SOURCES)) -> list[Doc]:
    docs = []
    for s in sources:
        for d in SOURCES[s]():
            d.heldout = is_heldout(d.name)
            docs.append(d)
    return docs


def package_versions() -> dict[str, str]:
    """Debian package -> installed version (dpkg-query)."""
    import subprocess
    pkgs = sorted({p for v in PACKAGES.values() for p in v[0]})
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n", *pkgs],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("\t") for line in out.splitlines() if "\t" in line)


def heldout_text(docs: list[Doc], max_bytes: int) -> str:
    """The held-out prose (docs and dref) in file order, cut at a document boundary."""
    parts, n = [], 0
    for d in docs:
        if d.heldout and d.source in ("docs", "dref"):
            b = len(d.text.encode())
            if n + b > max_bytes and parts:
                continue
            parts.append(d.text)
            n += b
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", help="write the file list (source, split, bytes, sha256, name)")
    ap.add_argument("--heldout-text", help="write held-out prose for perplexity runs")
    ap.add_argument("--max-bytes", type=int, default=120_000)
    args = ap.parse_args(argv)
    docs = load()
    for s in SOURCES:
        tr = [d for d in docs if d.source == s and not d.heldout]
        ho = [d for d in docs if d.source == s and d.heldout]
        print(f"{s}: {len(tr)} train / {len(ho)} held-out documents, "
              f"{sum(len(d.text) + len(d.answer) for d in tr) / 1e6:.2f} MB train text")
    if args.list:
        with open(args.list, "w", encoding="utf-8") as f:
            f.write("# source\tsplit\tbytes\tsha256\tname\n")
            for d in docs:
                body = (d.text + d.answer).encode()
                f.write(f"{d.source}\t{'heldout' if d.heldout else 'train'}\t{len(body)}\t"
                        f"{hashlib.sha256(body).hexdigest()}\t{d.name}\n")
    if args.heldout_text:
        Path(args.heldout_text).write_text(heldout_text(docs, args.max_bytes), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
