#!/usr/bin/env python3
"""make_quant_fixture.py - writes the dequantization fixtures tests/unit/data/quant_<type>.bin
that the types unit suite (tests/unit/test_types.c) compares kipp_dequantize_row against,
bit for bit. The expected values come from gguf-py's reference numpy dequantizers
(gguf.quants.dequantize), which follow ggml's dequantize_row_* evaluation order.

Blocks are random bytes, except that each block's f16 scale fields (d, dmin) are set to
sane finite values (random sign, magnitude 2^-14..2^1, plus a few blocks with d = 0 or a
subnormal d) so the expected output is finite and exercises real rounding. F16 fixtures
hold random finite halves (subnormals, zeros and infinities included, no NaN: numpy may
quiet NaN payloads); BF16 fixtures hold random 16-bit patterns including NaN.

File format (all little-endian):
    offset 0   4 bytes  magic b"KQFX"
    offset 4   uint32   format version = 1
    offset 8   uint32   ggml type id (0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 12 Q4_K, 14 Q6_K, 30 BF16)
    offset 12  uint32   n_blocks
    offset 16  uint32   block_bytes  (bytes per block)
    offset 20  uint32   block_elems  (elements per block)
    offset 24  n_blocks * block_bytes bytes of packed blocks
    then       n_blocks * block_elems float32 expected values

Usage: .venv/bin/python tests/fuzz/make_quant_fixture.py [out_dir]   (default tests/unit/data)
The output is deterministic (fixed seed), so re-running it must not change committed files.
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
]


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
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "unit", "data")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, qtype, n_blocks, block_bytes, block_elems, scale_offsets in SPECS:
        blocks = make_blocks(rng, name, n_blocks, block_bytes, scale_offsets)
        expected = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32, copy=False)
        expected = np.ascontiguousarray(expected.reshape(-1), dtype="<f4")
        assert expected.size == n_blocks * block_elems, (name, expected.size)
        if name != "bf16":  # bf16 carries NaN patterns on purpose
            assert np.all(~np.isnan(expected)), name
        path = os.path.join(out_dir, "quant_%s.bin" % name)
        with open(path, "wb") as f:
            f.write(b"KQFX")
            f.write(struct.pack("<5I", 1, int(qtype), n_blocks, block_bytes, block_elems))
            f.write(blocks.tobytes())
            f.write(expected.tobytes())
        print("wrote %s (%d blocks, %d values)" % (path, n_blocks, expected.size))


if __name__ == "__main__":
    main()
