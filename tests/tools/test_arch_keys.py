"""Architectures are data (issue 32): outside src/model/arch.c no C source names an
architecture's GGUF metadata keys ("qwen3.block_count", ...). A key written anywhere else
would be a second place to change when an architecture is added."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a C string literal starting with "<arch>." (an architecture name from the table, or any
# lowercase name followed by a known key of the tables)
KEY = re.compile(r'"(qwen[0-9a-z]*)\.(?:[a-z_]+\.)*[a-z_]+"')
ALLOWED = {"src/model/arch.c"}


def offenders(root: Path) -> list[str]:
    out = []
    for p in sorted(list(root.glob("src/**/*.[ch]")) + list(root.glob("include/**/*.h"))):
        rel = p.relative_to(root).as_posix()
        if rel in ALLOWED:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if KEY.search(line):
                out.append(f"{rel}:{n}: {line.strip()}")
    return out


def test_no_architecture_keys_outside_the_table():
    bad = offenders(ROOT)
    assert not bad, "architecture keys outside src/model/arch.c:\n" + "\n".join(bad)


def test_the_check_can_fail(tmp_path):
    (tmp_path / "src/model").mkdir(parents=True)
    (tmp_path / "src/model/model.c").write_text('get_u32(g, "qwen3.block_count", &n);\n')
    (tmp_path / "src/model/arch.c").write_text('HP("block_count", ...); /* "qwen3.block_count" */\n')
    assert offenders(tmp_path) == ['src/model/model.c:1: get_u32(g, "qwen3.block_count", &n);']
