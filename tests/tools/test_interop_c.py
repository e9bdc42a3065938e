"""Interop: the Kipp C CLI must load GGUF files written by our converter and by gguf-py.

Needs the C build: set KIPP_BIN to the kipp CLI (e.g. KIPP_BIN=build/kipp). This
test fails, rather than skips, when KIPP_BIN is unset, so a missing binary is
never mistaken for a pass. It only checks that `kipp --model FILE --info` exits
with status 0; numerical agreement is the job of the C model tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools import convert_to_gguf as conv
from conftest import run_tool

HERE = Path(__file__).resolve().parent


def kipp_bin() -> Path:
    value = os.environ.get("KIPP_BIN")
    if not value:
        pytest.fail("KIPP_BIN is not set: set it to the kipp CLI (e.g. KIPP_BIN=build/kipp) to run the C interop "
                    "test, or deselect tests/tools/test_interop_c.py", pytrace=False)
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"KIPP_BIN={value} is not an executable file", pytrace=False)
    return path


@pytest.fixture(scope="module")
def gguf_files(tiny_tied, tmp_path_factory):
    kipp_bin()  # fail fast, before converting anything
    out = tmp_path_factory.mktemp("interop")
    ours = conv.convert(tiny_tied, "f32", out / "kipp-converter.gguf", progress=False)
    theirs = out / "gguf-py.gguf"
    res = run_tool(HERE / "make_gguf_with_gguf_py.py", theirs, "--checkpoint", tiny_tied, "--outtype", "f32")
    assert res.returncode == 0, res.stderr
    return {"ours": ours, "gguf-py": theirs}


@pytest.mark.parametrize("which", ["ours", "gguf-py"])
def test_kipp_info_loads(gguf_files, which):
    binary = kipp_bin()
    res = run_tool(binary, "--model", gguf_files[which], "--info", timeout=120)
    assert res.returncode == 0, f"kipp --info failed on the {which} file (exit {res.returncode}):\n" \
                                f"{res.stdout}\n{res.stderr}"
