#!/usr/bin/env python3
"""make_gguf_corpus.py - writes the committed seed corpus tests/fuzz/corpus/gguf/ for the
GGUF reader fuzzer (tests/fuzz/fuzz_gguf.c).

  valid_*.gguf   small files Kipp must open: written by gguf-py's GGUFWriter (every
                 supported tensor type: valid_writer_small the first seven,
                 valid_writer_new_types the eight added for Hub files; a vocab-only file, a
                 custom alignment) and by hand
                 (header only).
  bad_*.gguf     one file per failure class the reader must reject with an error (never a
                 crash): magic, versions, big-endian, counts, string lengths, value types,
                 nested arrays, duplicates, alignment, names, n_dims, dims, types, offsets,
                 overlap, truncation.

The output is deterministic. Build and run the fuzzer (from the repo root):
  clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \\
      tests/fuzz/fuzz_gguf.c src/gguf/gguf.c src/core/types.c src/core/error.c -o build/fuzz_gguf
  .venv/bin/python tests/fuzz/make_gguf_corpus.py          # (re)writes the corpus
  build/fuzz_gguf -runs=0 tests/fuzz/corpus/gguf/          # every seed passes
  mkdir -p build/fuzz-work && build/fuzz_gguf -max_total_time=180 build/fuzz-work tests/fuzz/corpus/gguf/
Crashing inputs the fuzzer finds are kept in the corpus as crash_*.gguf (not rewritten here).
"""
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "fuzz", "corpus", "gguf")

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


# ---- a hand writer, for what GGUFWriter refuses to produce --------------------------------

def u32(v): return struct.pack("<I", v & 0xFFFFFFFF)
def u64(v): return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)
def gstr(s): return u64(len(s)) + (s if isinstance(s, bytes) else s.encode())
def header(n_tensors, n_kv, version=3, magic=b"GGUF"): return magic + u32(version) + u64(n_tensors) + u64(n_kv)
def kv(key, vtype, payload): return gstr(key) + u32(vtype) + payload
def tinfo(name, ne, ttype, off): return gstr(name) + u32(len(ne)) + b"".join(u64(d) for d in ne) + u32(ttype) + u64(off)
def pad(b, a=32): return b + b"\0" * (-len(b) % a)


def one_tensor(name="t", ne=(16,), ttype=0, off=0, data=64, kvs=b"", n_kv=0):
    return pad(header(1, n_kv) + kvs + tinfo(name, ne, ttype, off)) + b"\0" * data


def two_tensors(n0, o0, n1, o1):
    return pad(header(2, 0) + tinfo(n0, (16,), 0, o0) + tinfo(n1, (16,), 0, o1)) + b"\0" * 128


def bad_files():
    kv_u32 = lambda k, v: kv(k, U32, u32(v))
    f = {}
    f["bad_magic"] = b"GGUX" + header(0, 0)[4:]
    f["bad_too_short"] = b"GGU"
    f["bad_empty"] = b""
    f["bad_version0"] = header(0, 0, version=0)
    f["bad_version1"] = header(0, 0, version=1)
    f["bad_version2"] = header(0, 0, version=2)
    f["bad_version4"] = header(0, 0, version=4)
    f["bad_big_endian_hand"] = b"GGUF" + struct.pack(">I", 3) + struct.pack(">Q", 0) * 2
    f["bad_huge_tensor_count"] = header(2**64 - 1, 0)
    f["bad_huge_kv_count"] = header(0, 2**62)
    f["bad_kv_count_beyond_file"] = header(0, 3) + kv_u32("a", 1)
    f["bad_key_len_huge"] = header(0, 1) + u64(2**64 - 1) + b"abcdefgh"
    f["bad_key_len_over_cap"] = header(0, 1) + u64(2**30 + 1) + b"abcdefgh"
    f["bad_key_past_end"] = header(0, 1) + u64(100) + b"abcdefgh"
    f["bad_empty_key"] = header(0, 1) + kv("", U8, b"\1")
    f["bad_string_value_huge"] = header(0, 1) + kv("k", STR, u64(2**64 - 1) + u64(0))
    f["bad_value_type_13"] = header(0, 1) + kv("k", 13, u64(0))
    f["bad_value_type_neg"] = header(0, 1) + kv("k", 0xFFFFFFFF, u64(0))
    f["bad_nested_array"] = header(0, 1) + kv("k", ARR, u32(ARR) + u64(1) + u32(U8) + u64(1) + b"\0")
    f["bad_array_elem_type_99"] = header(0, 1) + kv("k", ARR, u32(99) + u64(0))
    f["bad_array_count_over_cap"] = header(0, 1) + kv("k", ARR, u32(U8) + u64(2**30 + 1))
    f["bad_string_array_beyond_file"] = header(0, 1) + kv("k", ARR, u32(STR) + u64(1000) + gstr("x"))
    f["bad_u64_array_truncated"] = header(0, 1) + kv("k", ARR, u32(U64) + u64(2**20) + u64(0))
    f["bad_string_element_huge"] = header(0, 1) + kv("k", ARR, u32(STR) + u64(2) + gstr("x") + u64(2**40))
    f["bad_duplicate_key"] = header(0, 2) + kv_u32("dup", 1) + kv_u32("dup", 2)
    f["bad_alignment_zero"] = header(0, 1) + kv_u32("general.alignment", 0)
    f["bad_alignment_48"] = header(0, 1) + kv_u32("general.alignment", 48)
    f["bad_alignment_uint64"] = header(0, 1) + kv("general.alignment", U64, u64(32))
    f["bad_tensor_name_empty"] = one_tensor(name="")
    f["bad_tensor_name_64"] = one_tensor(name="n" * 64)
    f["bad_tensor_name_nul"] = one_tensor(name=b"a\0b")
    f["bad_duplicate_tensor"] = two_tensors("a", 0, "a", 64)
    f["bad_n_dims_0"] = one_tensor(ne=())
    f["bad_n_dims_5"] = one_tensor(ne=(16, 1, 1, 1, 1))
    f["bad_dim_zero"] = one_tensor(ne=(16, 0))
    f["bad_dim_negative"] = one_tensor(ne=(16, -1))
    f["bad_dim_2pow62"] = one_tensor(ne=(16, 2**62))
    f["bad_dims_product_overflow"] = one_tensor(ne=(2**31,) * 4)
    f["bad_bytes_overflow"] = one_tensor(ne=(2**60, 7))
    f["bad_unsupported_iq2_xxs"] = one_tensor(name="blk.0.ffn_up.weight", ne=(256,), ttype=int(Q.IQ2_XXS), data=66)
    # the issue-17 types: one byte short of their data, and a row of half a block
    f["bad_q5_k_one_byte_short"] = one_tensor(ne=(256, 2), ttype=int(Q.Q5_K), data=2 * 176 - 1)
    f["bad_iq4_xs_half_block"] = one_tensor(ne=(128,), ttype=int(Q.IQ4_XS), data=136)
    f["bad_unknown_type_99"] = one_tensor(ne=(256,), ttype=99, data=256)
    f["bad_ne0_not_block_multiple"] = one_tensor(ne=(33,), ttype=int(Q.Q8_0))
    f["bad_misaligned_offset"] = one_tensor(off=4, data=128)
    f["bad_data_past_end"] = one_tensor(off=64, data=64)
    f["bad_data_one_byte_short"] = one_tensor(data=63)
    f["bad_offset_overflow"] = one_tensor(off=2**64 - 32)
    f["bad_overlap"] = two_tensors("a", 0, "b", 32)
    f["bad_same_offset"] = two_tensors("a", 0, "b", 0)
    f["bad_data_section_past_end"] = (header(1, 1) + kv_u32("general.alignment", 2**20)
                                      + tinfo("t", (16,), 0, 0) + b"\0" * 64)
    return f


# ---- valid files from gguf-py ----------------------------------------------------------

def write_with_writer(path, fill, **kw):
    w = gguf.GGUFWriter(path, "qwen3", **kw)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fill_small(w):
    rng = np.random.default_rng(7)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(256)
    w.add_float32("qwen3.rope.freq_base", 1e6)
    w.add_float64("t.f64", 0.25)
    w.add_bool("t.bool", True)
    w.add_int8("t.i8", -5)
    w.add_uint64("t.u64", 77)
    w.add_string("general.name", "kipp-fuzz-seed")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "<|im_start|>", ""])

    def raw(n_rows, n_cols, qtype):
        n_blocks, rem = divmod(n_cols, gguf.GGML_QUANT_SIZES[qtype][0])
        assert rem == 0
        b = rng.integers(0, 256, size=(n_rows, n_blocks * gguf.GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
        return b
    w.add_tensor("token_embd.weight", rng.standard_normal((2, 8)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
    w.add_tensor("blk.0.attn_q.weight", raw(2, 64, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.attn_k.weight", raw(1, 64, Q.Q4_0), raw_dtype=Q.Q4_0)
    w.add_tensor("blk.0.ffn_down.weight", raw(1, 256, Q.Q4_K), raw_dtype=Q.Q4_K)
    w.add_tensor("blk.0.ffn_up.weight", raw(1, 256, Q.Q6_K), raw_dtype=Q.Q6_K)
    w.add_tensor("blk.0.attn_norm.weight", rng.integers(0, 2**16, size=16, dtype=np.uint16).view(np.uint8),
                 raw_dtype=Q.BF16)


def fill_new_types(w):
    """One tensor of each type added for ready-made Hub files (issue 17), random bytes."""
    rng = np.random.default_rng(17)
    for i, (qtype, n_cols) in enumerate([(Q.Q4_1, 64), (Q.Q5_0, 32), (Q.Q5_1, 96), (Q.Q2_K, 256),
                                          (Q.Q3_K, 512), (Q.Q5_K, 256), (Q.IQ4_NL, 64),
                                          (Q.IQ4_XS, 256)]):
        be, bb = gguf.GGML_QUANT_SIZES[qtype]
        b = rng.integers(0, 256, size=(2, n_cols // be * bb), dtype=np.uint8)
        w.add_tensor("blk.%d.ffn_up.weight" % i, b, raw_dtype=qtype)


def fill_vocab(w):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(["!", "\"", "#", "Ġthe", "<|endoftext|>"])
    w.add_token_types([1, 1, 1, 1, 3])
    w.add_token_merges(["Ġ t", "Ġt he"])
    w.add_eos_token_id(4)


def fill_align64(w):
    w.add_custom_alignment(64)
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32))
    w.add_tensor("b.weight", np.arange(24, dtype=np.float32).reshape(3, 8))


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):  # keep crash_* reproducers found by the fuzzer
        if name.startswith(("valid_", "bad_")):
            os.remove(os.path.join(OUT, name))

    tmp = tempfile.mkdtemp()
    try:
        valid = {}
        for name, fill, kw in [("valid_writer_small", fill_small, {}),
                               ("valid_writer_vocab", fill_vocab, {}),
                               ("valid_writer_new_types", fill_new_types, {}),
                               ("valid_writer_align64", fill_align64, {})]:
            p = os.path.join(tmp, name)
            write_with_writer(p, fill, **kw)
            valid[name] = open(p, "rb").read()
        p = os.path.join(tmp, "be")
        write_with_writer(p, fill_vocab, endianess=gguf.GGUFEndian.BIG)
        be = open(p, "rb").read()
    finally:
        shutil.rmtree(tmp)
    valid["valid_hand_header_only"] = header(0, 0)

    files = dict(valid)
    files.update(bad_files())
    files["bad_big_endian_writer"] = be
    small = valid["valid_writer_small"]
    # truncations of a real file: inside the kvs, inside the tensor infos, inside the data
    files["bad_truncated_in_kv"] = small[:300]
    ti = small.find(b"token_embd.weight") - 8
    files["bad_truncated_in_tensor_info"] = small[:ti + 20]
    files["bad_truncated_in_data"] = small[:len(small) - 40]
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name + ".gguf"), "wb") as f:
            f.write(data)
    n_bad = sum(1 for n in files if n.startswith("bad_"))
    print("wrote %d files (%d valid, %d malformed) to %s" % (len(files), len(files) - n_bad, n_bad, OUT))


if __name__ == "__main__":
    main()
