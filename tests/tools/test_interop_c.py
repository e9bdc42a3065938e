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

from conftest import run_tool


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
def gguf_files(converted, gguf_py_written):
    kipp_bin()  # fail fast, before converting anything
    return {"ours": converted("tiny-tied", "f32"), "gguf-py": gguf_py_written("f32")}


@pytest.mark.parametrize("which", ["ours", "gguf-py"])
def test_kipp_info_loads(gguf_files, which):
    binary = kipp_bin()
    res = run_tool(binary, "--model", gguf_files[which], "--info", timeout=120)
    assert res.returncode == 0, f"kipp --info failed on the {which} file (exit {res.returncode}):\n" \
                                f"{res.stdout}\n{res.stderr}"


# ---- embedding models (qwen3.pooling_type) ----------------------------------------------

@pytest.fixture(scope="module")
def embed_gguf(converted):
    kipp_bin()
    return converted("tiny-embed", "bf16")


def with_pooling(src: Path, dst: Path, value: int) -> Path:
    """A copy of src whose qwen3.pooling_type (a uint32 KV) is set to value."""
    raw = bytearray(src.read_bytes())
    key = b"qwen3.pooling_type"
    at = raw.index(key) + len(key) + 4  # the value follows the key and its 4-byte type
    raw[at:at + 4] = value.to_bytes(4, "little")
    dst.write_bytes(bytes(raw))
    return dst


def test_generation_on_embedding_model_is_refused(embed_gguf):
    res = run_tool(kipp_bin(), "--model", embed_gguf, "--info", timeout=120)
    assert res.returncode != 0
    assert "embedding model (pooling 'last') without an lm_head" in res.stderr, res.stderr


@pytest.mark.parametrize("value, name", [(1, "mean"), (2, "cls"), (4, "rank"), (7, "?")])
def test_other_pooling_types_are_refused_by_name(embed_gguf, tmp_path, value, name):
    res = run_tool(kipp_bin(), "--model", with_pooling(embed_gguf, tmp_path / "p.gguf", value),
                   "--info", timeout=120)
    assert res.returncode != 0
    assert f"qwen3.pooling_type = {value} ({name}) is not supported" in res.stderr, res.stderr


# ---- qwen2: head_dim from hidden / heads when the file has no key_length ----------------

def patch_kv(raw: bytearray, key: bytes, new_key: bytes | None = None, u32: int | None = None) -> None:
    """Renames GGUF key `key` (same length) or sets its uint32 value, in place."""
    rec = len(key).to_bytes(8, "little") + key
    at = raw.index(rec) + 8
    if new_key is not None:
        assert len(new_key) == len(key)
        raw[at:at + len(key)] = new_key
    if u32 is not None:
        assert raw[at + len(key):at + len(key) + 4] == (4).to_bytes(4, "little")  # GGUF uint32
        raw[at + len(key) + 4:at + len(key) + 8] = u32.to_bytes(4, "little")


def test_qwen2_without_key_length_takes_hidden_over_heads(converted, tmp_path):
    """llama.cpp's converter writes no attention.key_length for qwen2: Kipp takes
    embedding_length / head_count (Qwen2Config has no head_dim), and generates the same
    tokens as from the file that states it; when the heads do not divide the width the
    load fails naming the key."""
    binary = kipp_bin()
    src = converted("tiny-qwen2", "bf16")
    raw = bytearray(src.read_bytes())
    for k in (b"qwen2.attention.key_length", b"qwen2.attention.value_length"):
        patch_kv(raw, k, new_key=k[:-1] + b"X")  # an unknown key: as if absent
    bare = tmp_path / "no-key-length.gguf"
    bare.write_bytes(bytes(raw))
    info = run_tool(binary, "--model", bare, "--info", timeout=120)
    assert info.returncode == 0, info.stderr
    assert '"architecture": "qwen2"' in info.stdout and '"head_dim": 16,' in info.stdout, info.stdout
    gen = [run_tool(binary, "--model", f, "-p", "Hello", "-n", "6", "--temp", "0", "--no-stats", timeout=120)
           for f in (src, bare)]
    assert gen[0].returncode == 0 and gen[0].stdout == gen[1].stdout, (gen[0].stdout, gen[1].stdout)
    patch_kv(raw, b"qwen2.attention.head_count", u32=7)
    odd = tmp_path / "odd-heads.gguf"
    odd.write_bytes(bytes(raw))
    res = run_tool(binary, "--model", odd, "--info", timeout=120)
    assert res.returncode != 0
    assert "qwen2.attention.key_length is missing and 96 does not divide into 7 parts" in res.stderr, res.stderr


# ---- Qwen3-MoE files written by llama.cpp ------------------------------------------------------

def _dequantized(reader, t):
    import gguf.quants
    import numpy as np
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).ravel()


def test_moe_llama_cpp_files_agree(converted, tiny_moe, tmp_path):
    """tiny-moe written by llama.cpp's convert_hf_to_gguf (bf16) and quantized by its
    llama-quantize (Q8_0, Q4_K_M) loads in Kipp and agrees with Kipp's own conversion and
    quantization: the bf16 file passes the golden gate on cpu-ref and cpu; each quantized file
    has Kipp's tensor names, shapes and types (but where a row fits no 256-block, which Kipp's
    table sends to Q8_0 and llama.cpp's to Q5_0), Q8_0 bytes identical, every K-quant tensor
    dequantizing within 2 % (relative RMS) of Kipp's, and runs cpu against cpu-ref within the
    gate's bounds. Skipped where llama.cpp's tools are absent (LLAMA_CPP_SRC, LLAMA_QUANTIZE)."""
    import numpy as np
    from conftest import REPO_ROOT, gguf_reader, llama_cpp_convert, llama_quantize, run_module
    binary = kipp_bin()
    kipp_test = binary.parent / "kipp_test"
    vec = REPO_ROOT / "tests" / "test-vectors" / "tiny-moe"
    theirs = llama_cpp_convert(tiny_moe, "bf16", tmp_path / "llama-bf16.gguf")
    for backend in ("cpu-ref", "cpu"):
        res = run_tool(kipp_test, "--model", theirs, vec, "--backend", backend, timeout=600)
        assert res.returncode == 0 and " 0 failed" in res.stdout, res.stdout[-3000:]
    ours_bf16 = converted("tiny-moe", "bf16")
    for ftype in ("Q8_0", "Q4_K_M"):
        q_theirs = llama_quantize(theirs, ftype, tmp_path / f"llama-{ftype}.gguf")
        q_ours = tmp_path / f"kipp-{ftype}.gguf"
        res = run_module("tools.quantize", ours_bf16, q_ours, "--type", ftype.lower(), "--no-progress")
        assert res.returncode == 0, res.stderr
        a, b = gguf_reader(q_ours), gguf_reader(q_theirs)
        ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
        assert set(ta) == set(tb)
        for name, x in ta.items():
            y = tb[name]
            assert [int(d) for d in x.shape] == [int(d) for d in y.shape], name
            if x.tensor_type != y.tensor_type:  # the one documented fallback difference
                assert (x.tensor_type.name, y.tensor_type.name) == ("Q8_0", "Q5_0") and int(x.shape[0]) % 256, name
            if ftype == "Q8_0" or x.tensor_type.name in ("F32", "Q8_0"):
                if x.tensor_type == y.tensor_type:
                    assert np.array_equal(np.asarray(x.data), np.asarray(y.data)), name
                continue
            u, v = _dequantized(a, x), _dequantized(b, y)
            rel = np.sqrt(np.mean((u - v) ** 2) / max(np.mean(v ** 2), 1e-30))
            assert rel < 0.02, (name, x.tensor_type.name, y.tensor_type.name, rel)
        res = run_tool(kipp_test, "--cpu-vs-ref", q_theirs, vec, timeout=900)
        assert res.returncode == 0 and " 0 failed" in res.stdout, res.stdout[-3000:]
