"""make_bad_models.py SRC.gguf OUTDIR — derives broken model files from a good tiny GGUF for
the CLI bad-input tests: wrong architecture, truncated file, NaN in a norm vector, NaN in a
large weight matrix. Byte patches located with the PyPI gguf reader; writes nothing else."""
import sys
import numpy as np
from gguf import GGUFReader


def main():
    src, out = sys.argv[1], sys.argv[2]
    data = bytearray(open(src, "rb").read())
    r = GGUFReader(src)

    arch = r.fields["general.architecture"]
    off = int(arch.parts[-1].__array_interface__["data"][0] - r.data.__array_interface__["data"][0])
    wrong = bytearray(data)
    assert bytes(wrong[off:off + 5]) == b"qwen3"
    wrong[off:off + 5] = b"llama"
    open(f"{out}/wrong-arch.gguf", "wb").write(wrong)

    open(f"{out}/truncated.gguf", "wb").write(data[: len(data) // 2])

    def poison(name, fname):
        t = next(t for t in r.tensors if t.name == name)
        bad = bytearray(data)
        start = int(t.data_offset)
        if t.tensor_type.name == "F32":
            bad[start:start + 4] = np.float32(np.nan).tobytes()
        else:  # BF16/F16: 0x7FC0 is NaN in bf16, 0x7E00 in f16
            bad[start:start + 2] = (b"\xc0\x7f" if t.tensor_type.name == "BF16" else b"\x00\x7e")
        open(f"{out}/{fname}", "wb").write(bad)

    poison("output_norm.weight", "nan-norm.gguf")
    poison("blk.0.attn_q.weight", "nan-matrix.gguf")


if __name__ == "__main__":
    main()
