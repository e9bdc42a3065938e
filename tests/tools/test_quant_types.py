"""Tests for the encoders of tools/kipp_quants.py beyond Q8_0/Q4_0/Q4_K/Q6_K (Q2_K, Q3_K,
Q4_1, Q5_0, Q5_1, Q5_K, IQ4_NL, IQ4_XS) and for tools/quantize.py's mixes that use them.

Every block is decoded with gguf-py (`gguf.quants.dequantize`), the independent reference.
Kipp's own dequantizer (src/core/types.c through ctypes) must agree with it bit for bit.
The error of each type is bounded against llama.cpp's own quantizer: EXPECTED holds
the relative RMS error ggml's reference quantizers (llama-cpp-python 0.3.36's libggml,
ggml_quantize_chunk without an importance matrix) reach on the data of
test_error_matches_ggml; when that library is installed (tools/requirements-bench.txt)
test_against_libggml also compares with it directly.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import gguf
import numpy as np
import pytest

from tools import kipp_quants as kq
from tools import quantize as qz
from conftest import gguf_reader, run_module
from tools.kipp_gguf_writer import GGML_BLOCK, GGMLType, GGUFWriter
from random_model_helpers import dequant_gguf_py, kipp_dequant, raw_bytes, tensors  # noqa: F401

Q = gguf.GGMLQuantizationType
NEW = ["Q2_K", "Q3_K", "Q4_1", "Q5_0", "Q5_1", "Q5_K", "IQ4_NL", "IQ4_XS"]
ALL = NEW + ["Q4_0", "Q4_K", "Q6_K", "Q8_0"]

# relative RMS error of ggml's reference quantizers on test_error_matches_ggml's data
EXPECTED = {"Q2_K": 0.29540, "Q3_K": 0.15008, "Q4_0": 0.08564, "Q4_1": 0.07790, "IQ4_NL": 0.07582,
            "IQ4_XS": 0.07641, "Q4_K": 0.07091, "Q5_0": 0.04255, "Q5_1": 0.03772, "Q5_K": 0.03599,
            "Q6_K": 0.01769, "Q8_0": 0.00533}
# ours may be this much worse than ggml's (measured: Q2_K +0.6 %, Q4_K +0.5 %, Q5_K +0.4 %, the
# others equal: Q3_K, Q4_1, Q5_0, Q5_1 are bit-exact, IQ4_NL/IQ4_XS differ in a few blocks)
SLACK = 1.01
# (worse, better): each type against the next-smaller one of its family
ORDER = [("Q2_K", "Q3_K"), ("Q3_K", "IQ4_XS"), ("Q3_K", "Q4_K"), ("Q4_0", "Q4_1"), ("Q4_0", "IQ4_NL"),
         ("IQ4_XS", "IQ4_NL"), ("Q4_1", "Q5_0"), ("Q4_K", "Q5_K"), ("Q5_0", "Q5_1"), ("Q5_1", "Q5_K"),
         ("Q5_K", "Q6_K")]
BIT_EXACT = ["Q4_1", "Q5_0", "Q5_1"]  # ggml's quantize_row_*_ref, which gguf-py reimplements


def encode(x: np.ndarray, t: str) -> np.ndarray:
    return kq.encode(x, GGMLType[t]).reshape(-1)


def decode(raw: np.ndarray, t: str, shape) -> np.ndarray:
    return gguf.quants.dequantize(raw.reshape(shape[0], -1), Q[t]).reshape(shape)


def rel_rmse(y, x) -> float:
    return float(np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)))


def gauss() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((64, 2048)).astype(np.float32)


_ERRORS: dict = {}


def error_of(t: str) -> float:
    if t not in _ERRORS:
        x = gauss()
        _ERRORS[t] = rel_rmse(decode(encode(x, t), t, x.shape), x)
    return _ERRORS[t]


# ---- error against ggml's -------------------------------------------------------------

@pytest.mark.parametrize("t", ALL)
def test_error_matches_ggml(t):
    x = gauss()
    raw = encode(x, t)
    n_el, n_b = GGML_BLOCK[GGMLType[t]]
    assert raw.nbytes == x.size // n_el * n_b
    e = error_of(t)
    assert e <= EXPECTED[t] * SLACK, f"{t}: relative RMS error {e:.5f} > {SLACK} x ggml's {EXPECTED[t]}"
    assert e >= EXPECTED[t] * 0.97, f"{t}: {e:.5f} is far below ggml's {EXPECTED[t]}: EXPECTED is stale"


@pytest.mark.parametrize("worse, better", ORDER)
def test_error_order(worse, better):
    assert error_of(better) < error_of(worse), (worse, error_of(worse), better, error_of(better))


@pytest.mark.parametrize("t", BIT_EXACT)
def test_legacy_types_are_ggml_exact(t):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 512)) * rng.uniform(0.001, 3, (64, 1))).astype(np.float32)
    x[0, :32] = 0            # all-zero block
    x[1, 32:64] = 0.5        # constant block
    x[2, 64:96] = -np.abs(x[2, 64:96]) - 1
    assert np.array_equal(encode(x, t), gguf.quants.quantize(x, Q[t]).reshape(-1))


def _libggml():
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = Path(d) / "lib" / "libggml-base.so"
        if p.exists():
            lib = ctypes.CDLL(str(p))
            f = lib.ggml_quantize_chunk
            f.restype = ctypes.c_size_t
            f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_int64, ctypes.c_void_p]
            return f
    return None


@pytest.mark.skipif(_libggml() is None, reason="llama_cpp (libggml-base) not installed")
@pytest.mark.parametrize("dist", ["gauss", "laplace", "t3 rows scaled"])
def test_against_libggml(dist):
    qchunk = _libggml()
    rng = np.random.default_rng(7)
    x = {"gauss": lambda: rng.standard_normal((32, 2048)),
         "laplace": lambda: rng.laplace(size=(32, 2048)),
         "t3 rows scaled": lambda: rng.standard_t(3, (32, 2048)) * rng.uniform(0.01, 1, (32, 1))}[dist]()
    x = np.ascontiguousarray(x, dtype=np.float32)
    for t in NEW:
        n_el, n_b = GGML_BLOCK[GGMLType[t]]
        ref = np.zeros(x.size // n_el * n_b, dtype=np.uint8)
        qchunk(int(Q[t]), x.ctypes.data, ref.ctypes.data, 0, x.shape[0], x.shape[1], None)
        ours = encode(x, t)
        if t in BIT_EXACT or t == "Q3_K":
            assert np.array_equal(ours, ref), t
        e_ours, e_ref = rel_rmse(decode(ours, t, x.shape), x), rel_rmse(decode(ref, t, x.shape), x)
        assert e_ours <= e_ref * SLACK, (t, dist, e_ours, e_ref)


# ---- edge cases and block well-formedness ------------------------------------------------

EDGE_CASES = {
    "gaussian": lambda r: r.standard_normal((8, 1024)),
    "zeros": lambda r: np.zeros((2, 512)),
    "constant": lambda r: np.full((2, 512), 0.75),
    "negative constant": lambda r: np.full((2, 512), -0.75),
    "negative": lambda r: -np.abs(r.standard_normal((4, 512))) - 1,
    "positive offset": lambda r: np.abs(r.standard_normal((4, 512))) + 5,
    "one spike": lambda r: np.where(np.arange(512) == 77, 100.0, r.standard_normal((4, 512)) * 0.01),
    "mixed ranges": lambda r: r.standard_normal((4, 512)) * np.repeat(10.0 ** r.uniform(-4, 2, (4, 16)), 32, 1),
    "small values": lambda r: r.standard_normal((2, 512)) * 1e-3,
    "tiny values": lambda r: r.standard_normal((2, 512)) * 1e-30,
}
# the largest |error| of a block as a fraction of the block's largest |x| (K-quants and
# IQ4_XS: of the super-block, since their sub-block scales are quantized against it)
SPAN_BOUND = {"Q2_K": 0.55, "Q3_K": 0.30, "Q4_1": 0.07, "Q5_0": 0.07, "Q5_1": 0.035, "Q5_K": 0.07,
              "IQ4_NL": 0.15, "IQ4_XS": 0.17}
# relative RMS bounds for the non-degenerate cases (EXPECTED x 1.25: the offset and
# negative cases are easier or harder than a Gaussian depending on the type)
CASE_REL = {t: EXPECTED[t] * 1.25 for t in NEW}


def header_scales(raw: np.ndarray, t: str) -> np.ndarray:
    """The f16 super-block/block scales of every block, as float32."""
    n_b = GGML_BLOCK[GGMLType[t]][1]
    b = raw.reshape(-1, n_b)
    at = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q5_K": [0, 2],
          "IQ4_NL": [0], "IQ4_XS": [0]}[t]
    return np.concatenate([b[:, o:o + 2].copy().view(np.float16).astype(np.float32) for o in at], axis=1)


@pytest.mark.parametrize("case", list(EDGE_CASES))
@pytest.mark.parametrize("t", NEW)
def test_encoders_round_trip(kipp_dequant, case, t):  # noqa: F811
    x = EDGE_CASES[case](np.random.default_rng(11)).astype(np.float32)
    raw = encode(x, t)
    n_el, n_b = GGML_BLOCK[GGMLType[t]]
    assert raw.nbytes == x.size // n_el * n_b
    assert np.isfinite(header_scales(raw, t)).all()
    y = decode(raw, t, x.shape)
    assert np.isfinite(y).all()
    # Kipp's C dequantizer (src/core/types.c) agrees bit for bit
    np.testing.assert_array_equal(kipp_dequant(raw, int(Q[t]), x.size), y.reshape(-1))
    if case == "zeros":
        assert not y.any()
    if case in ("gaussian", "negative", "positive offset"):
        assert rel_rmse(y, x) < CASE_REL[t], rel_rmse(y, x)
    block = 256 if t.endswith("_K") or t == "IQ4_XS" else 32
    xb, yb = x.reshape(-1, block), y.reshape(-1, block)
    span = np.abs(xb).max(axis=1)
    assert np.all(np.abs(yb - xb).max(axis=1) <= SPAN_BOUND[t] * span + 1e-7), case


@pytest.mark.parametrize("t", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"])
def test_zero_blocks_are_zero_bytes(t):
    """An all-zero block is all-zero bytes, as ggml writes it (no -0.0 f16 scale, no stray
    high bits): build/kipp-quantize repeats these bytes."""
    x = np.zeros((2, 512), dtype=np.float32)
    x[1, 256:] = np.random.default_rng(1).standard_normal(256)  # a zero block beside a live one
    raw = encode(x, t).reshape(4 if t != "IQ4_NL" else 32, -1)
    n_zero = 3 if t != "IQ4_NL" else 24
    assert not raw[:n_zero].any(), raw[:n_zero]


def test_iq4_xs_scales_use_their_range():
    """Each sub-block scale is ls - 32 with ls in 0..63; the one of largest magnitude is -32
    (d = -max/32), and decoding the packed bits gives back what the encoder meant."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((16, 1024)) * np.repeat(10.0 ** rng.uniform(-3, 1, (16, 32)), 32, 1)).astype(np.float32)
    b = encode(x, "IQ4_XS").reshape(-1, 136)
    sh = b[:, 2:4].copy().view("<u2")[:, 0]
    sl = b[:, 4:8]
    ls = np.array([[((sl[i, j // 2] >> (4 * (j % 2))) & 15) | (((sh[i] >> (2 * j)) & 3) << 4)
                    for j in range(8)] for i in range(len(b))], dtype=np.int32)
    assert ls.min() >= 0 and ls.max() <= 63
    d = b[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float32)
    assert np.isfinite(d).all() and (d != 0).all()
    scales = d[:, None] * (ls - 32)
    assert np.all(ls[np.arange(len(b)), np.abs(scales).argmax(axis=1)] == 0)
    # the decoded sub-block scales follow the data's: a sub-block 10x larger decodes larger
    y = decode(b.reshape(-1), "IQ4_XS", x.shape)
    assert rel_rmse(y, x) < 0.12


def test_k_scales_use_their_range():
    """Q2_K's 4-bit and Q3_K's 6-bit sub-block scales reach the top of their range in every
    super-block (the largest sub-block scale maps to 15, resp. to -32 + 32 = 0)."""
    x = np.random.default_rng(4).standard_normal((8, 1024)).astype(np.float32)
    q2 = encode(x, "Q2_K").reshape(-1, 84)
    assert np.all((q2[:, :16] & 15).max(axis=1) == 15) and np.all((q2[:, :16] >> 4).max(axis=1) == 15)
    q3 = encode(x, "Q3_K").reshape(-1, 110)
    sc = q3[:, 96:108]
    ls = np.array([[((sc[i, j % 8] >> (4 * (j // 8))) & 15) | (((sc[i, 8 + j % 4] >> (2 * (j // 4))) & 3) << 4)
                    for j in range(16)] for i in range(len(q3))], dtype=np.int32)
    assert np.all(ls.min(axis=1) == 0) and ls.max() <= 63
    q5 = encode(x, "Q5_K").reshape(-1, 176)
    assert np.all((q5[:, 4:8] & 63).max(axis=1) <= 63)


# ---- the mixes ----------------------------------------------------------------------------

FILE_TYPE = {"q5_k_m": 17, "q5_k_s": 16, "q3_k_m": 12, "q3_k_s": 11, "q3_k_l": 13, "q4_k_s": 14, "q2_k": 10,
             "q5_0": 8, "q5_1": 9, "q4_1": 3, "iq4_nl": 25, "iq4_xs": 30}


def test_file_types_are_llama_cpp_numbers():
    for name, (_, ftype) in qz.FTYPES.items():
        assert gguf.LlamaFileType[f"MOSTLY_{name.upper()}"] == ftype, name


# A small Qwen3-named GGUF for the mixes (the random "tiny" shape's 151,936 x 256 embedding
# makes a run per ftype slow): 8 layers (more-bits layers 0, 3, 6, 7; L/8 = 1, L/16 = 0),
# 4 heads over 2 KV heads (gqa 2), every row 256 long, tied (token_embd is the output:
# Q6_K). Per ftype: the base type and the per-layer exceptions, written out by hand from
# llama_tensor_get_type.
LAYER_TENSORS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
MB = {0, 3, 6, 7}
MIX8 = {
    "q5_k_m": ("Q5_K", {"attn_v": {i: "Q6_K" for i in MB}, "ffn_down": {i: "Q6_K" for i in MB}}),
    "q5_k_s": ("Q5_K", {}),
    "q3_k_m": ("Q3_K", {"attn_v": {0: "Q5_K", 1: "Q5_K", **{i: "Q4_K" for i in range(2, 8)}},
                        "ffn_down": {i: "Q4_K" for i in range(8)}, "attn_output": {i: "Q4_K" for i in range(8)}}),
    "q3_k_s": ("Q3_K", {}),
    "q3_k_l": ("Q3_K", {k: {i: "Q5_K" for i in range(8)} for k in ("attn_v", "ffn_down", "attn_output")}),
    "q4_k_s": ("Q4_K", {"attn_v": {i: "Q5_K" for i in range(4)}, "ffn_down": {0: "Q5_K"}}),
    "q2_k": ("Q2_K", {k: {i: "Q3_K" for i in range(8)} for k in ("attn_v", "ffn_down", "attn_output")}),
    "q5_0": ("Q5_0", {}),
    "q5_1": ("Q5_1", {}),
    "q4_1": ("Q4_1", {}),
    "iq4_nl": ("IQ4_NL", {"ffn_down": {0: "Q5_K"}}),
    "iq4_xs": ("IQ4_XS", {"ffn_down": {0: "Q5_K"}}),
}


def write_small_model(path: Path, width: int, n_layers: int, n_kv: int, tied: bool, ffn: int = 256) -> Path:
    """A Qwen3-named bf16 GGUF with 4 heads, rows of `width` (ffn_down: of `ffn`), 32 rows a
    tensor, a 64-token embedding; output.weight only when not tied."""
    rng = np.random.default_rng(9)
    w = GGUFWriter()
    w.add_string("general.architecture", "qwen3")
    w.add_uint32("qwen3.block_count", n_layers)
    w.add_uint32("qwen3.attention.head_count", 4)
    w.add_uint32("qwen3.attention.head_count_kv", n_kv)
    w.add_uint32("general.file_type", 32)
    data = {}

    def add(name, shape):
        w.add_tensor_info(name, shape, GGMLType.BF16 if len(shape) > 1 else GGMLType.F32)
        x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        data[name] = kq.f32_to_bf16(x) if len(shape) > 1 else x

    add("token_embd.weight", (64, width))
    for i in range(n_layers):
        add(f"blk.{i}.attn_norm.weight", (width,))
        for k in LAYER_TENSORS:
            add(f"blk.{i}.{k}.weight", (32, ffn if k == "ffn_down" else width))
    add("output_norm.weight", (width,))
    if not tied:
        add("output.weight", (64, width))
    w.write(path, lambda info: data[info.name])
    return path


@pytest.fixture(scope="module")
def mix_model(tmp_path_factory) -> Path:
    return write_small_model(tmp_path_factory.mktemp("mix") / "mix8-bf16.gguf", 256, 8, 2, tied=True)


_MIXED: dict = {}


def mixed(src: Path, qtype: str) -> Path:
    if qtype not in _MIXED:
        _MIXED[qtype] = qz.quantize_file(src, src.with_name(f"mix8-{qtype}.gguf"), qtype, progress=False)
    return _MIXED[qtype]


def mix8_expected(qtype: str, out: dict) -> dict:
    base, rules = MIX8[qtype]
    want = {}
    for name, t in out.items():
        if len(t.ne) == 1:
            want[name] = "F32"
        elif name == "token_embd.weight":
            want[name] = "Q6_K"
        else:
            _, i, kind, _ = name.split(".")
            want[name] = rules.get(kind, {}).get(int(i), base)
    return want


def test_mix_rules_by_hand():
    """Rules the 8-layer model does not reach: gqa >= 4, L/16 > 0, the fallbacks."""
    def tt(name, qtype, n_gqa=2, row=1024, n_layers=36, has_output=True):
        return qz.target_type(name, (64, row), GGMLType.BF16, qtype, n_layers, has_output, n_gqa).name
    assert tt("blk.5.attn_v.weight", "q2_k", n_gqa=4) == "Q4_K"
    assert tt("blk.5.attn_v.weight", "q2_k", n_gqa=2) == "Q3_K"
    assert tt("blk.5.attn_v.weight", "iq4_xs", n_gqa=4) == "Q5_K"
    assert tt("blk.5.attn_v.weight", "iq4_nl", n_gqa=8) == "Q5_K"
    assert tt("blk.5.attn_v.weight", "iq4_nl", n_gqa=2) == "IQ4_NL"
    # L = 36: L/16 = 2, L/8 = 4
    assert [tt(f"blk.{i}.ffn_down.weight", "q3_k_m") for i in (0, 1, 2)] == ["Q5_K", "Q5_K", "Q4_K"]
    assert [tt(f"blk.{i}.ffn_down.weight", "iq4_xs") for i in (3, 4)] == ["Q5_K", "IQ4_XS"]
    assert tt("blk.9.ffn_down.weight", "q5_k_m") == "Q6_K" and tt("blk.10.ffn_down.weight", "q5_k_m") == "Q5_K"
    assert tt("blk.0.attn_q.weight", "q2_k") == "Q2_K" and tt("blk.0.ffn_up.weight", "q3_k_m") == "Q3_K"
    assert tt("output.weight", "q2_k") == "Q6_K" and tt("token_embd.weight", "q2_k") == "Q2_K"
    assert tt("token_embd.weight", "iq4_nl", has_output=False) == "Q6_K"
    # rows not a multiple of 256: llama.cpp's fallbacks
    assert tt("blk.0.attn_q.weight", "q2_k", row=96) == "IQ4_NL"
    assert tt("blk.0.attn_q.weight", "iq4_xs", row=96) == "IQ4_NL"
    assert tt("blk.0.attn_q.weight", "q5_k_s", row=96) == "Q5_1"
    assert tt("blk.0.attn_q.weight", "q4_k_m", row=96) == "Q8_0"
    assert tt("output.weight", "iq4_nl", row=96) == "Q8_0"   # Q6_K does not fit
    assert tt("blk.0.attn_q.weight", "iq4_nl", row=48) == "BF16"
    assert tt("blk.0.attn_q.weight", "q5_0", row=96) == "Q5_0"


@pytest.mark.parametrize("qtype", list(MIX8))
def test_quantize_writes_the_mix(mix_model, qtype):
    """The tensor types of the mix, general.file_type, every tensor decoded by gguf-py
    within its type's error bound, norms copied."""
    path = mixed(mix_model, qtype)
    src, out = tensors(mix_model), tensors(path)
    assert list(out) == list(src)
    got = {n: GGMLType(t.type_id).name for n, t in out.items()}
    assert got == mix8_expected(qtype, out)
    assert qz.read_model(path).value("general.file_type") == FILE_TYPE[qtype]
    for name, t in out.items():
        if t.type_id == src[name].type_id:
            assert np.array_equal(raw_bytes(path, t), raw_bytes(mix_model, src[name])), name
            continue
        ours, ref = dequant_gguf_py(path, t), dequant_gguf_py(mix_model, src[name])
        name_t = Q(t.type_id).name
        assert rel_rmse(ours, ref) < EXPECTED[name_t] * 1.25, (name, name_t, rel_rmse(ours, ref))


def test_untied_fallbacks(tmp_path):
    """Rows of 96 (ffn_down: 256), 3 layers, gqa 2, untied, in q2_k and q5_k_m: llama.cpp's
    fallbacks where a row is not a multiple of 256."""
    src = write_small_model(tmp_path / "untied-bf16.gguf", 96, 3, 2, tied=False)
    got = {n: GGMLType(t.type_id).name
           for n, t in tensors(qz.quantize_file(src, tmp_path / "q2_k.gguf", "q2_k", progress=False)).items()}
    assert got["output.weight"] == "Q8_0" and got["token_embd.weight"] == "IQ4_NL"
    assert got["blk.0.attn_q.weight"] == "IQ4_NL" and got["blk.1.attn_v.weight"] == "IQ4_NL"
    assert got["blk.2.ffn_down.weight"] == "Q3_K" and got["blk.0.attn_output.weight"] == "IQ4_NL"
    got = {n: GGMLType(t.type_id).name
           for n, t in tensors(qz.quantize_file(src, tmp_path / "q5_k_m.gguf", "q5_k_m", progress=False)).items()}
    assert got["blk.0.attn_q.weight"] == "Q5_1" and got["blk.2.attn_v.weight"] == "Q8_0"
    assert got["blk.2.ffn_down.weight"] == "Q6_K" and got["blk.1.ffn_down.weight"] == "Q5_K"
    assert got["output.weight"] == "Q8_0" and got["token_embd.weight"] == "Q5_1"


def test_gguf_py_reads_the_cli_output(mix_model, tmp_path):
    """The CLI (as a user runs it) writes a file gguf-py's own GGUFReader opens, with the
    mix's tensor types and file type."""
    dst = tmp_path / "mix8-iq4_xs.gguf"
    res = run_module("tools.quantize", mix_model, dst, "--type", "iq4_xs", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "iq4_xs" in res.stdout
    r = gguf_reader(dst)
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert types == mix8_expected("iq4_xs", tensors(mix_model))
    ft = r.fields["general.file_type"]
    assert int(ft.parts[ft.data[0]][0]) == 30
    t = next(t for t in r.tensors if t.name == "blk.1.attn_q.weight")
    ours = gguf.quants.dequantize(t.data, t.tensor_type)
    ref = dequant_gguf_py(mix_model, tensors(mix_model)["blk.1.attn_q.weight"])
    assert rel_rmse(ours.reshape(ref.shape), ref) < EXPECTED["IQ4_XS"] * 1.25
