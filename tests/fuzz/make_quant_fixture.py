#!/usr/bin/env python3
"""make_quant_fixture.py - writes the dequantization fixtures tests/unit/data/quant_<type>.bin
that the types unit suite (tests/unit/test_types.c) compares kipp_dequantize_row against,
bit for bit. The expected values come from gguf-py's reference numpy dequantizers
(gguf.quants.dequantize), which follow ggml's dequantize_row_* evaluation order.

Blocks are random bytes, except that each block's f16 scale fields (d, dmin) are set to
sane finite values (random sign, magnitude 2^-14..2^1, plus a few blocks with d = 0 or a
subnormal d) so the expected output is finite and exercises real rounding. The types added
later (Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q5_K IQ4_NL IQ4_XS) have more blocks and, for each scale
field, also the extremes: +-65504 (largest finite half), +-2^-14 (smallest normal),
+-2^-24 (smallest subnormal) and -0. For the types gguf-py can quantize (Q4_1, Q5_0, Q5_1)
a second fixture, quant_<type>_enc.bin, holds gguf.quants.quantize's blocks of random
normal data at several magnitudes (the kind of blocks real files carry). F16 fixtures
hold random finite halves (subnormals, zeros and infinities included, no NaN: numpy may
quiet NaN payloads); BF16 fixtures hold random 16-bit patterns including NaN.

File format (all little-endian):
    offset 0   4 bytes  magic b"KQFX"
    offset 4   uint32   format version = 1
    offset 8   uint32   ggml type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0,
                        10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K, 20 IQ4_NL, 23 IQ4_XS,
                        30 BF16)
    offset 12  uint32   n_blocks
    offset 16  uint32   block_bytes  (bytes per block)
    offset 20  uint32   block_elems  (elements per block)
    offset 24  n_blocks * block_bytes bytes of packed blocks
    then       n_blocks * block_elems float32 expected values

Usage: .venv/bin/python tests/fuzz/make_quant_fixture.py [out_dir]   (default tests/unit/data)
The output is deterministic (fixed seed), so re-running it must not change committed files;
new specs go at the end of SPECS so the earlier files keep their random draws.
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEED = 20240611

# name, type, n_blocks, block_bytes, block_elems, byte offsets of f16 scale fields
SPECS = [
    ("f16", T.F16, 512, 2, 1, []),
    ("bf16", T.BF16, 512, 2, 1, []),
    ("q4_0", T.Q4_0, 64, 18, 32, [0]),
    ("q8_0", T.Q8_0, 64, 34, 32, [0]),
    ("q4_k", T.Q4_K, 16, 144, 256, [0, 2]),
    ("q6_k", T.Q6_K, 16, 210, 256, [208]),
    # issue 17: the types of ready-made Hub GGUFs (extreme scales too, see make_blocks)
    ("q4_1", T.Q4_1, 256, 20, 32, [0, 2]),
    ("q5_0", T.Q5_0, 256, 22, 32, [0]),
    ("q5_1", T.Q5_1, 256, 24, 32, [0, 2]),
    ("q2_k", T.Q2_K, 64, 84, 256, [80, 82]),
    ("q3_k", T.Q3_K, 64, 110, 256, [108]),
    ("q5_k", T.Q5_K, 64, 176, 256, [0, 2]),
    ("iq4_nl", T.IQ4_NL, 256, 18, 32, [0]),
    ("iq4_xs", T.IQ4_XS, 64, 136, 256, [0]),
]

# the types whose specs also set extreme scales, and those gguf-py can quantize
EXTREME = {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs"}
EXTREME_F16 = [0x7BFF, 0xFBFF, 0x0400, 0x8400, 0x0001, 0x8001, 0x8000]
ENCODED = [("q4_1", T.Q4_1, 20, 32), ("q5_0", T.Q5_0, 22, 32), ("q5_1", T.Q5_1, 24, 32)]


def sane_f16(rng, n):
    """n finite halves: random sign, magnitude 2^-14 .. 2^1 (normal f16 range)."""
    mag = np.exp2(rng.uniform(-14.0, 1.0, size=n))
    sign = rng.choice([-1.0, 1.0], size=n)
    return (mag * sign).astype(np.float16)


def make_blocks(rng, name, n_blocks, block_bytes, scale_offsets):
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if name == "f16":
        h = blocks.view(np.uint16).reshape(-1)
        nan = (h & 0x7C00) == 0x7C00
        nan &= (h & 0x03FF) != 0
        h[nan] &= 0xFC00  # NaN -> infinity of the same sign
        return blocks
    for off in scale_offsets:
        d = sane_f16(rng, n_blocks)
        if n_blocks >= 4:
            d[1] = np.float16(0.0)                       # d = 0
            d[2] = np.uint16(0x0003).view(np.float16)    # subnormal d
            d[3] = np.uint16(0x83FF).view(np.float16)    # largest negative subnormal
        if name in EXTREME:
            ext = np.array(EXTREME_F16, dtype=np.uint16).view(np.float16)
            where = rng.choice(np.arange(4, n_blocks), size=len(ext), replace=False)
            d[where] = ext
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def write_fixture(path, qtype, blocks, block_bytes, block_elems):
    n_blocks = blocks.shape[0]
    expected = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32, copy=False)
    expected = np.ascontiguousarray(expected.reshape(-1), dtype="<f4")
    assert expected.size == n_blocks * block_elems, (path, expected.size)
    with open(path, "wb") as f:
        f.write(b"KQFX")
        f.write(struct.pack("<5I", 1, int(qtype), n_blocks, block_bytes, block_elems))
        f.write(blocks.tobytes())
        f.write(expected.tobytes())
    print("wrote %s (%d blocks, %d values)" % (path, n_blocks, expected.size))
    return expected


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "unit", "data")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, qtype, n_blocks, block_bytes, block_elems, scale_offsets in SPECS:
        blocks = make_blocks(rng, name, n_blocks, block_bytes, scale_offsets)
        path = os.path.join(out_dir, "quant_%s.bin" % name)
        expected = write_fixture(path, qtype, blocks, block_bytes, block_elems)
        if name != "bf16":  # bf16 carries NaN patterns on purpose
            assert np.all(~np.isnan(expected)), name
    # gguf-py's own encoder output: rows of 32 blocks at magnitudes 1e-3 .. 1e3, one block
    # all zero and one constant
    for name, qtype, block_bytes, block_elems in ENCODED:
        x = rng.standard_normal((8, 32 * block_elems)).astype(np.float32)
        x *= np.float32(10.0) ** np.arange(-3, 5, dtype=np.float32).reshape(8, 1)
        x[0, :block_elems] = 0.0
        x[1, :block_elems] = 0.75
        blocks = quants.quantize(x, qtype).reshape(-1, block_bytes)
        path = os.path.join(out_dir, "quant_%s_enc.bin" % name)
        expected = write_fixture(path, qtype, blocks, block_bytes, block_elems)
        assert np.all(np.isfinite(expected)), name


if __name__ == "__main__":
    main()
