"""make_bad_models.py SRC.gguf OUTDIR — derives broken model files from a good tiny GGUF for
the CLI bad-input tests: wrong architecture, truncated file, NaN in a norm vector, NaN in a
large weight matrix, 22,000-byte tokens. Byte patches located with the PyPI gguf reader; writes nothing else."""
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

    # a vocabulary with 22,000-byte tokens (<|fim_prefix|> and <|fim_middle|> made long and
    # non-special) that greedy decoding emits first: for the CLI tests' prompt in kipp
    # (whose pick is 111848) and in kipp-chat with --no-think (64014), by swapping their
    # output rows. The header grows by a multiple of the alignment, so the tensor data
    # after it stays aligned and valid.
    base = r.data.__array_interface__["data"][0]
    addr = lambda a: int(a.__array_interface__["data"][0] - base)
    tokens, types = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    out_w = next(t for t in r.tensors if t.name == "output.weight")
    row = int(out_w.n_bytes) // int(out_w.shape[1])
    patched = bytearray(data)
    cuts = []
    for long_id, picked in ((151659, 111848), (151660, 64014)):
        a, b = int(out_w.data_offset) + picked * row, int(out_w.data_offset) + long_id * row
        patched[a:a + row], patched[b:b + row] = data[b:b + row], data[a:a + row]
        t_off = addr(types.parts[types.data[long_id]])
        patched[t_off:t_off + 4] = np.int32(4).tobytes()  # USER_DEFINED: not special
        idx = tokens.data[long_id]
        old_tok = bytes(tokens.parts[idx])
        cuts.append((addr(tokens.parts[idx - 1]), addr(tokens.parts[idx]) + len(old_tok),
                     old_tok + b"x" * (32 * 688)))  # + 22,016 bytes
    # and <|fim_suffix|> (151661, typed CONTROL but not special for HF: kept in text) as
    # the first token for the prompt "Once upon a time" (whose pick is 104278)
    a, b = int(out_w.data_offset) + 104278 * row, int(out_w.data_offset) + 151661 * row
    patched[a:a + row], patched[b:b + row] = data[b:b + row], data[a:a + row]
    big, pos = bytearray(), 0
    for len_off, end, tok in sorted(cuts):
        big += patched[pos:len_off] + np.uint64(len(tok)).tobytes() + tok
        pos = end
    big += patched[pos:]
    open(f"{out}/long-token.gguf", "wb").write(big)

    poison("output_norm.weight", "nan-norm.gguf")
    poison("blk.0.attn_q.weight", "nan-matrix.gguf")


if __name__ == "__main__":
    main()
