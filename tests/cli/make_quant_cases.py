"""make_quant_cases.py OUT.gguf [variant] — a small GGUF that walks every branch of the
quantizers' type plan and block encoders, for tests/cli/test_quantize.sh (kipp-quantize against
tools/quantize.py, byte for byte): bf16, f16 and f32 inputs; a tied token_embd (Q6_K); the
Q4_K_M "more bits" attn_v/ffn_down layers and ordinary ones (block_count 8); rows of 96
(the 256-value types fall back: Q8_0, Q5_1 or IQ4_NL) and 40 (every type falls back to the input type); 1-D norms, a
2-D non-weight tensor; alignment 64 (not the default); no general.file_type; and blocks that
are all zero, constant, one-signed, tiny (f16-subnormal scales), huge, with tied maxima or
with a lone outlier or one negative value. The default file has 8 layers and gqa 4 (head_count
8, head_count_kv 2); `variant` has block_count 16 (layer 0 is below L/16), no head counts
(gqa 1) and an untied output.weight with rows of 96 (Q8_0 before any rule). Seeded: the
same file every run."""
import sys

import numpy as np

sys.path.insert(0, ".")
from tools.kipp_gguf_writer import GGMLType, GGUFWriter  # noqa: E402
from tools.kipp_quants import f32_to_bf16  # noqa: E402


def special_rows(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0] = 0                                   # all-zero blocks
    x[1] = 0.25                                # constant blocks
    x[2] = np.abs(x[2])                        # one-signed
    x[3] = -np.abs(x[3])
    x[4] *= np.float32(1e-6)                   # scales below f16's normal range
    x[5] *= np.float32(3e3)                    # large values (f16 scales near the top)
    x[6, ::2], x[6, 1::2] = 1.5, -1.5          # tied largest magnitudes
    x[7, 5] = 40.0                             # a lone outlier per row
    x[8, :16] = 0                              # half-zero sub-blocks
    x[9] = np.round(x[9] * 4) / 4              # values on a coarse grid (rounding ties)
    x[10, :64] = -0.75                         # sub-blocks of one negative value
    for r in range(11, rows):
        x[r] *= np.float32(np.exp(rng.uniform(-6, 2)))
    return x


def main():
    variant = len(sys.argv) > 2 and sys.argv[2] == "variant"
    rng = np.random.default_rng(17)
    w = GGUFWriter(alignment=64)
    w.add_string("general.architecture", "qwen3")
    w.add_string("general.name", "quant-cases")
    w.add_uint32("qwen3.block_count", 16 if variant else 8)
    if not variant:
        w.add_uint32("qwen3.attention.head_count", 8)
        w.add_uint32("qwen3.attention.head_count_kv", 2)
    w.add_array("tokenizer.ggml.tokens", 8, ["a", "b", ""])
    w.add_array("qwen3.some_floats", 6, [0.5, -1.0])
    w.add_array("qwen3.no_strings", 8, [])
    data = {}

    def add(name, shape, gtype, x):
        w.add_tensor_info(name, shape, gtype)
        if gtype == GGMLType.BF16:
            data[name] = f32_to_bf16(x)
        elif gtype == GGMLType.F16:
            data[name] = x.astype(np.float16)
        else:
            data[name] = x.astype(np.float32)

    add("token_embd.weight", (48, 256), GGMLType.BF16, special_rows(rng, 48, 256))
    for i in range(8):
        add(f"blk.{i}.attn_norm.weight", (256,), GGMLType.F32, rng.standard_normal(256))
        add(f"blk.{i}.attn_v.weight", (16, 256), GGMLType.BF16, special_rows(rng, 16, 256))
        add(f"blk.{i}.ffn_down.weight", (12, 512), GGMLType.F16, special_rows(rng, 12, 512))
    add("blk.0.ffn_up.weight", (24, 96), GGMLType.BF16, special_rows(rng, 24, 96))
    add("blk.0.ffn_gate.weight", (8, 40), GGMLType.F32, rng.standard_normal((8, 40)))
    add("blk.0.attn_q.weight", (64, 256), GGMLType.F32, special_rows(rng, 64, 256))
    add("rope_table", (4, 64), GGMLType.F32, rng.standard_normal((4, 64)))
    add("blk.0.attn_output.weight", (8, 256), GGMLType.BF16, special_rows(rng, 16, 256)[:8])
    if variant:
        add("output.weight", (24, 96), GGMLType.BF16, special_rows(rng, 24, 96))
    w.write(sys.argv[1], lambda info: data[info.name])


if __name__ == "__main__":
    main()
