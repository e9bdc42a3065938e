"""Tests for tools/kipp_gguf_writer.py, read back with gguf-py's GGUFReader."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from tools.kipp_gguf_writer import GGMLType, GGUFWriteError, GGUFWriter, ValueType, tensor_nbytes

VT = gguf.GGUFValueType


def test_every_value_type_round_trips(tmp_path):
    w = GGUFWriter()
    w.add_value("t.u8", ValueType.UINT8, 250)
    w.add_value("t.i8", ValueType.INT8, -5)
    w.add_value("t.u16", ValueType.UINT16, 65000)
    w.add_value("t.i16", ValueType.INT16, -32000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo <|im_end|>")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_value("t.i64", ValueType.INT64, -(2**62))
    w.add_float64("t.f64", 0.1)
    w.add_array("t.arr_i32", ValueType.INT32, [1, -2, 3])
    w.add_array("t.arr_str", ValueType.STRING, ["a", "", "Ġthe"])
    w.add_array("t.arr_f32", ValueType.FLOAT32, [1.5, -2.25])
    w.add_array("t.arr_bool", ValueType.BOOL, [True, False])
    w.add_array("t.empty", ValueType.UINT32, [])
    path = tmp_path / "kv.gguf"
    w.write(path)
    r = gguf.GGUFReader(path)
    f = r.fields
    assert f["GGUF.version"].contents() == 3 and f["GGUF.tensor_count"].contents() == 0
    assert f["GGUF.kv_count"].contents() == 17
    expect = {
        "t.u8": (250, [VT.UINT8]), "t.i8": (-5, [VT.INT8]), "t.u16": (65000, [VT.UINT16]),
        "t.i16": (-32000, [VT.INT16]), "t.u32": (4_000_000_000, [VT.UINT32]),
        "t.i32": (-2_000_000_000, [VT.INT32]), "t.f32": (np.float32(0.1), [VT.FLOAT32]),
        "t.bool": (True, [VT.BOOL]), "t.str": ("héllo <|im_end|>", [VT.STRING]),
        "t.u64": (2**63 + 5, [VT.UINT64]), "t.i64": (-(2**62), [VT.INT64]), "t.f64": (0.1, [VT.FLOAT64]),
        "t.arr_i32": ([1, -2, 3], [VT.ARRAY, VT.INT32]), "t.arr_str": (["a", "", "Ġthe"], [VT.ARRAY, VT.STRING]),
        "t.arr_f32": ([1.5, -2.25], [VT.ARRAY, VT.FLOAT32]), "t.arr_bool": ([True, False], [VT.ARRAY, VT.BOOL]),
    }
    for key, (value, types) in expect.items():
        assert f[key].types == types, key
        assert f[key].contents() == value, key
    # gguf-py does not report the element type of an empty array; read it from the raw parts
    empty = f["t.empty"]
    assert empty.types[0] == VT.ARRAY and empty.contents() == []
    assert int(empty.parts[3][0]) == VT.UINT32 and int(empty.parts[4][0]) == 0
    # no tensors: the file ends right after the last KV record (no padding)
    assert path.stat().st_size == len(w.header_bytes())


def test_tensor_layout_and_data(tmp_path):
    w = GGUFWriter()
    w.add_string("general.architecture", "test")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)      # 60 bytes -> padded to 64
    b = rng.standard_normal((7,)).astype(np.float16)         # 14 bytes -> 32
    c = rng.integers(0, 255, size=(2, 34), dtype=np.uint8)  # Q8_0: 2 rows of 32 -> 68 bytes
    infos = [w.add_tensor_info("a", a.shape, GGMLType.F32), w.add_tensor_info("b", b.shape, GGMLType.F16),
             w.add_tensor_info("c", (2, 32), GGMLType.Q8_0)]
    assert [i.offset for i in infos] == [0, 64, 96]
    data = {"a": a, "b": b, "c": c}
    path = tmp_path / "t.gguf"
    w.write(path, lambda info: data[info.name])
    r = gguf.GGUFReader(path)
    raw = path.read_bytes()
    start = len(w.header_bytes())
    assert start % 32 == 0
    ts = {t.name: t for t in r.tensors}
    assert list(ts["a"].shape) == [5, 3] and ts["a"].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(ts["a"].data), a)
    assert np.array_equal(np.asarray(ts["b"].data), b)
    assert list(ts["c"].shape) == [32, 2] and ts["c"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert bytes(np.asarray(ts["c"].data).reshape(-1)) == c.tobytes()
    assert [int(t.data_offset) - start for t in r.tensors] == [0, 64, 96]
    assert len(raw) == start + 96 + 96  # 68 bytes padded to 96
    assert raw[start + 60:start + 64] == b"\0" * 4


def test_header_encoding_by_hand():
    w = GGUFWriter()
    w.add_uint32("k", 7)
    w.add_tensor_info("x", (2,), GGMLType.F32)
    h = w.header_bytes()
    expect = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    expect += struct.pack("<Q", 1) + b"k" + struct.pack("<iI", 4, 7)
    expect += struct.pack("<Q", 1) + b"x" + struct.pack("<I", 1) + struct.pack("<q", 2) + struct.pack("<iQ", 0, 0)
    assert h[:len(expect)] == expect
    assert len(h) % 32 == 0 and h[len(expect):] == b"\0" * (len(h) - len(expect))


def test_nbytes():
    assert tensor_nbytes((4096, 151936), GGMLType.Q8_0) == 4096 // 32 * 34 * 151936
    assert tensor_nbytes((256, 2), GGMLType.Q6_K) == 2 * 210
    with pytest.raises(GGUFWriteError):
        tensor_nbytes((48,), GGMLType.Q8_0)


@pytest.mark.parametrize("action,msg", [
    (lambda w: (w.add_uint32("a", 1), w.add_uint32("a", 2)), "duplicate metadata key 'a'"),
    (lambda w: w.add_uint32("", 1), "empty metadata key"),
    (lambda w: w.add_uint32("a", -1), "does not fit GGUF type UINT32"),
    (lambda w: w.add_array("a", ValueType.ARRAY, []), "nested arrays"),
    (lambda w: w.add_tensor_info("x" * 64, (32,), GGMLType.F32), "must be 1..63 bytes"),
    (lambda w: (w.add_tensor_info("x", (32,), GGMLType.F32), w.add_tensor_info("x", (32,), GGMLType.F32)),
     "duplicate tensor name 'x'"),
    (lambda w: w.add_tensor_info("x", (1, 1, 1, 1, 1), GGMLType.F32), "has 5 dims"),
    (lambda w: w.add_tensor_info("x", (4, 48), GGMLType.Q8_0), "not a multiple of the Q8_0 block size 32"),
])
def test_rejects_what_llama_cpp_rejects(action, msg):
    with pytest.raises(GGUFWriteError, match=msg.replace("(", r"\(").replace(".", r"\.")):
        action(GGUFWriter())


def test_wrong_tensor_size_is_an_error(tmp_path):
    w = GGUFWriter()
    w.add_tensor_info("x", (4,), GGMLType.F32)
    with pytest.raises(GGUFWriteError, match="got 12 bytes, expected 16"):
        w.write(tmp_path / "x.gguf", lambda info: np.zeros(3, dtype=np.float32))


def test_custom_alignment_is_recorded(tmp_path):
    w = GGUFWriter(alignment=64)
    w.add_tensor_info("x", (3,), GGMLType.F32)
    w.add_tensor_info("y", (3,), GGMLType.F32)
    assert [t.offset for t in w.tensors] == [0, 64]
    w.write(tmp_path / "a.gguf", lambda info: np.ones(3, dtype=np.float32))
    r = gguf.GGUFReader(tmp_path / "a.gguf")
    assert r.fields["general.alignment"].contents() == 64
    assert r.alignment == 64
    with pytest.raises(GGUFWriteError):
        GGUFWriter(alignment=48)
