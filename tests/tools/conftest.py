"""Shared fixtures for the Python tooling tests (tests/tools).

Tiny checkpoints are generated once per test session into a temporary
directory (never into models/), so the tests do not depend on local state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import make_tiny_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_tied(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-tied", ckpt_root / "single" / "tiny-tied")


@pytest.fixture(scope="session")
def tiny_untied(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-untied", ckpt_root / "single" / "tiny-untied")


@pytest.fixture(scope="session")
def tiny_tied_sharded(ckpt_root) -> Path:
    # same directory name as the unsharded one, so general.name (the directory name) matches
    return make_tiny_checkpoint.write_checkpoint("tiny-tied", ckpt_root / "sharded" / "tiny-tied", n_shards=3)


@pytest.fixture(scope="session")
def tiny_embed(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-embed", ckpt_root / "single" / "tiny-embed")


@pytest.fixture(scope="session")
def tiny_qwen2(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-qwen2", ckpt_root / "single" / "tiny-qwen2")


def _moe_fixture(name: str):
    @pytest.fixture(scope="session")
    def fixture(ckpt_root) -> Path:
        return make_tiny_checkpoint.write_checkpoint(name, ckpt_root / "single" / name)
    return fixture


# the Qwen3-MoE checkpoints (tools/make_tiny_checkpoint.py), one session fixture each
MOE_NAMES = ("tiny-moe", "tiny-moe-k1", "tiny-moe-64", "tiny-moe-k4", "tiny-moe-tie")
tiny_moe, tiny_moe_k1, tiny_moe_64, tiny_moe_k4, tiny_moe_tie = (_moe_fixture(n) for n in MOE_NAMES)


@pytest.fixture(scope="session")
def converted(request, tmp_path_factory):
    """converted(which, outtype): tools/convert_to_gguf.py's output for a tiny checkpoint,
    converted once per session (test_convert.py, test_interop_c.py); read, never modified."""
    from tools import convert_to_gguf as conv
    out, cache = tmp_path_factory.mktemp("gguf"), {}

    def get(which: str, outtype: str) -> Path:  # which: tiny-tied, tiny-untied, tiny-embed, tiny-qwen2, tiny-moe*
        if (which, outtype) not in cache:
            src = request.getfixturevalue(which.replace("-", "_"))
            cache[which, outtype] = conv.convert(src, outtype, out / f"{which}-{outtype}.gguf", progress=False)
        return cache[which, outtype]
    return get


@pytest.fixture(scope="session")
def gguf_py_written(tiny_tied, tmp_path_factory):
    """gguf_py_written(outtype): tiny-tied written by gguf-py's GGUFWriter
    (make_gguf_with_gguf_py.py, run as a program), once per session; read, never modified."""
    out, cache = tmp_path_factory.mktemp("gguf-py"), {}

    def get(outtype: str) -> Path:
        if outtype not in cache:
            path = out / f"gguf-py-{outtype}.gguf"
            res = run_tool(Path(__file__).resolve().parent / "make_gguf_with_gguf_py.py", path,
                           "--checkpoint", tiny_tied, "--outtype", outtype)
            assert res.returncode == 0, res.stderr
            cache[outtype] = path
        return cache[outtype]
    return get


def gguf_reader(path):
    """gguf-py's GGUFReader, parsing over a plain ndarray view of its memmap.

    The parse is gguf-py's own, byte for byte; only the buffer type differs: GGUFReader slices
    its np.memmap once per value, and memmap's subclass hooks on ~750,000 slices (the full
    Qwen3 vocab and merges) are two thirds of its time (~20 s -> ~7 s a file on a loaded
    2-core machine). Tensor .data comes back as plain ndarrays over the same mapping."""
    import gguf
    import numpy as np

    class _Reader(gguf.GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            if type(self.data) is not np.ndarray:
                self.data = self.data.view(np.ndarray)  # keeps the mapping alive via .base
            return super()._get(offset, dtype, count, override_order)

    return _Reader(path)


def run_tool(*args, env=None, check=False, timeout=600, cwd=None) -> subprocess.CompletedProcess:
    """Runs a command (a Python file is run with this interpreter)."""
    cmd = [str(a) for a in args]
    if cmd[0].endswith(".py"):
        cmd = [sys.executable] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=check, timeout=timeout, cwd=cwd)


def run_module(module, *args, **kw) -> subprocess.CompletedProcess:
    """Runs `python -m MODULE ARGS` (e.g. tools.quantize) from the repository root, as the
    Makefile and the docs do."""
    return run_tool(sys.executable, "-m", module, *args, cwd=REPO_ROOT, **kw)


# ---- llama.cpp's own tools ------------------------------------------------------------------
# convert_hf_to_gguf.py from the llama.cpp tree of the pinned llama-cpp-python sdist
# (bench/README.md unpacks it to /tmp/lsrv; LLAMA_CPP_SRC overrides), run with its own gguf-py,
# and llama-quantize built in that tree (LLAMA_QUANTIZE overrides). Tests that need them skip
# where they are absent (CI has neither).

LLAMA_CPP_SRC = Path(os.environ.get("LLAMA_CPP_SRC", "/tmp/lsrv/llama_cpp_python-0.3.36/vendor/llama.cpp"))


def llama_cpp_convert(ckpt: Path, outtype: str, out: Path) -> Path:
    script = LLAMA_CPP_SRC / "convert_hf_to_gguf.py"
    if not script.is_file():
        pytest.skip(f"llama.cpp's converter is not at {script} (set LLAMA_CPP_SRC)")
    pytest.importorskip("torch", reason="llama.cpp's converter needs torch")
    env = dict(os.environ, PYTHONPATH=str(LLAMA_CPP_SRC / "gguf-py"))
    res = run_tool(script, ckpt, "--outtype", outtype, "--outfile", out, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def llama_quantize(src: Path, ftype: str, out: Path) -> Path:
    """llama.cpp's llama-quantize SRC OUT FTYPE (Q8_0, Q4_K_M, ...)."""
    binary = Path(os.environ.get("LLAMA_QUANTIZE", LLAMA_CPP_SRC / "build" / "bin" / "llama-quantize"))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip(f"llama-quantize is not at {binary} (set LLAMA_QUANTIZE)")
    res = run_tool(binary, src, out, ftype)
    assert res.returncode == 0, res.stderr[-2000:]
    return out
