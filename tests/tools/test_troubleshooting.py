"""docs/troubleshooting.md quotes error messages exactly as Kipp prints them, in ```text
blocks. Each quoted line must still be produced by the sources: the string literals of src/
(C, adjacent literals joined) and tools/*.py (f-strings, adjacent literals joined) become
patterns, their conversions (%s, %u, %.2f, {expr}) wildcards. One literal with >= 20 fixed
characters must match inside the line, and the fixed text of every matching literal (>= 5
characters) counts as covered there. Every plain word of the
line must be covered, unless it is a value: inside quotes, or part of a token with a digit,
'/', '_', '-' or an inner '.' (paths, numbers, names), or a word of the C library's or
Python's error texts (strerror). A reworded message in the code fails here, naming the line
of the page that went stale."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "troubleshooting.md"
MIN_FIXED = 20  # a line needs one matching literal this long (its message)
MIN_COVER = 5   # shorter literals ("gguf: ", "type ") only help to cover words

C_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
C_RUN = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:\s*(?:PROG|PRIu64|PRId64|PRIu32)?\s*"(?:[^"\\\n]|\\.)*")*')
C_CONV = re.compile(r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcsp]")
PY_RUN = re.compile(r'(?:\b[fF]?"(?:[^"\\\n]|\\.)*"\s*)+')
PY_FIELD = re.compile(r"\{[^{}]*\}")
C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "0": ""}


def c_unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: C_ESCAPES.get(m.group(1), m.group(1)), s)


def c_formats(text: str):
    """The C string literals of a source file, adjacent ones joined (a PROG or PRIu64 macro
    between them counts as a wildcard)."""
    for run in C_RUN.finditer(text):
        parts = re.split(r'"\s*(PROG|PRIu64|PRId64|PRIu32)?\s*"', run.group(0)[1:-1])
        fmt = ""
        for i, part in enumerate(parts):
            if part is None:
                continue
            fmt += "%s" if i % 2 else c_unescape(part)
        yield fmt, C_CONV


def py_formats(text: str):
    for run in PY_RUN.finditer(text):
        pieces = re.findall(r'[fF]?"((?:[^"\\\n]|\\.)*)"', run.group(0))
        yield "".join(c_unescape(p) for p in pieces), PY_FIELD


def to_regex(fmt: str, conv: re.Pattern):
    """(regex with each fixed piece as a group, number of fixed characters, longest fixed
    piece) for a format. Wildcards separated by nothing or by blanks are merged into one
    (the same strings match; "%s %s %s" would otherwise backtrack without end)."""
    pieces, pos = [], 0  # fixed strings, a None between two of them for each wildcard
    for m in conv.finditer(fmt):
        pieces.append(fmt[pos:m.start()] + ("%" if m.group(0) == "%%" else ""))
        if m.group(0) != "%%":
            pieces.append(None)
        pos = m.end()
    pieces.append(fmt[pos:].rstrip("\n"))
    merged = []
    for p in pieces:
        if p is not None and merged and merged[-1] is None and not p.strip() and len(merged) > 1:
            continue  # a blank between wildcards: the next wildcard joins the previous one
        if p is None and merged and merged[-1] is None:
            continue
        if p is not None and merged and merged[-1] is not None:
            merged[-1] += p
            continue
        merged.append(p)
    out = ["(%s)" % re.escape(p) if p is not None else ".*?" for p in merged]
    fixed = [p for p in merged if p is not None]
    return "".join(out), sum(len(p) for p in fixed), max(fixed, key=len)


@functools.lru_cache(maxsize=None)
def source_patterns(root: Path):
    pats = []
    files = sorted([*(root / "src").rglob("*.[ch]"), *(root / "src").rglob("*.def")])
    for f in files:
        for fmt, conv in c_formats(f.read_text(encoding="utf-8", errors="replace")):
            pats.append(to_regex(fmt, conv))
    for f in sorted((root / "tools").glob("*.py")):
        for fmt, conv in py_formats(f.read_text(encoding="utf-8", errors="replace")):
            pats.append(to_regex(fmt, conv))
    # compiled lazily: most never get past the substring test in uncovered_words
    return tuple((rx, fixed, longest) for rx, fixed, longest in pats if fixed >= MIN_COVER and longest.strip())


def quoted_messages(page: Path):
    """(line number, text) of every line inside the page's ```text blocks."""
    out, inside = [], False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = (not inside) and line.strip() == "```text"
            continue
        if inside and line.strip():
            out.append((n, line))
    return out


# values printed through a wildcard that look like words: the memory kind of a backend
# (kipp_backend_memory.kind) and download_model.py's "PROG: error: " prefix (too short a literal)
VALUE_WORDS = {"host", "error"}
STRERROR_WORDS = {"No", "such", "file", "or", "directory", "Connection", "refused", "Errno",
                  "Permission", "denied", "Cannot", "allocate", "memory", "Name", "Temporary",
                  "failure", "in", "name", "resolution", "timed", "out", "Network", "is",
                  "unreachable"}


def uncovered_words(line: str, pats) -> list[str]:
    covered = [False] * len(line)
    has_message = False
    for rx, fixed, longest in pats:
        if longest not in line:
            continue
        for m in re.finditer(rx, line, re.S):  # every occurrence: "x.gguf: gguf: " has two
            has_message = has_message or fixed >= MIN_FIXED
            for g in range(1, (m.lastindex or 0) + 1):
                for i in range(*m.span(g)):
                    covered[i] = True
    quoted = [False] * len(line)
    for q in re.finditer(r"'[^'\s]*'|\"[^\"]*\"", line):
        for i in range(*q.span()):
            quoted[i] = True
    bad = []
    for tok in re.finditer(r"\S+", line):
        core = tok.group(0).rstrip(".,;:)?!").lstrip("(")
        value = re.search(r"[0-9/_-]", core) or "." in core or (tok.start() == 0 and tok.group(0).endswith(":"))
        for w in re.finditer(r"[A-Za-z]+", tok.group(0)):
            a, b = tok.start() + w.start(), tok.start() + w.end()
            if all(covered[a:b]) or value or any(quoted[a:b]) or w.group(0) in STRERROR_WORDS \
                    or w.group(0) in VALUE_WORDS:
                continue
            bad.append(w.group(0))
    return bad if has_message else bad + ["(no source literal of %d+ characters matches)" % MIN_FIXED]


def unmatched(page: Path, root: Path):
    pats = source_patterns(root)
    out = []
    for n, line in quoted_messages(page):
        bad = uncovered_words(line, pats)
        if bad:
            out.append("docs/troubleshooting.md:%d: %s (words in no source message: %s)"
                       % (n, line, ", ".join(bad)))
    return out


def test_page_quotes_many_messages():
    assert len(quoted_messages(PAGE)) >= 20


def test_every_quoted_message_is_in_the_sources():
    missing = unmatched(PAGE, REPO_ROOT)
    assert not missing, "messages no longer in the sources (reworded?):\n" + "\n".join(missing)


def test_a_reworded_message_is_caught(tmp_path):
    text = PAGE.read_text(encoding="utf-8")
    assert "is not supported by Kipp" in text
    stale = tmp_path / "troubleshooting.md"
    stale.write_text(text.replace("is not supported by Kipp", "is not handled by Kipp", 1), encoding="utf-8")
    missing = unmatched(stale, REPO_ROOT)
    assert len(missing) == 1 and "is not handled by Kipp" in missing[0]


def test_format_conversion():
    rx, fixed, longest = to_regex("gguf: cannot open '%s': %s\n", C_CONV)
    assert rx == r"(gguf:\ cannot\ open\ ')" + ".*?" + r"(':\ )" + ".*?"
    assert re.fullmatch(rx, "gguf: cannot open 'x.gguf': No such file or directory") and fixed == 22
    assert longest == "gguf: cannot open '"
    rx, fixed, _ = to_regex("kipp-server: %s %s %s%s ms", C_CONV)
    assert rx == r"(kipp\-server:\ )" + ".*?" + r"(\ ms)" and fixed == 16
    rx, _, _ = to_regex("a KV pool of %u blocks (%.2f GiB) is 100%%", C_CONV)
    assert re.fullmatch(rx, "a KV pool of 7 blocks (1.50 GiB) is 100%")
    fmts = list(c_formats('x = "abc %d " PRIu64 " def"; y = "one" "two";'))
    assert [f for f, _ in fmts] == ["abc %d %s def", "onetwo"]
    fmts = list(py_formats('raise E(f"cannot reach {self.endpoint} ({r}) "\n    f"while {x}")'))
    assert fmts[0][0] == "cannot reach {self.endpoint} ({r}) while {x}"
