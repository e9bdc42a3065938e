"""Tests for tools/convert_to_gguf.py, read back with the PyPI gguf package (gguf-py).

Source tensors are read with make_gguf_with_gguf_py.read_safetensors (an
implementation independent of the converter's own safetensors parser).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from tools import convert_to_gguf as conv
from conftest import llama_cpp_convert, TOOLS, gguf_reader, run_module, run_tool
from make_gguf_with_gguf_py import read_safetensors

Q = gguf.GGMLQuantizationType

EXPECTED_KEYS = [
    "general.architecture", "general.type", "general.name",
    "qwen3.block_count", "qwen3.context_length", "qwen3.embedding_length", "qwen3.feed_forward_length",
    "qwen3.attention.head_count", "qwen3.attention.head_count_kv", "qwen3.rope.freq_base",
    "qwen3.attention.layer_norm_rms_epsilon", "qwen3.attention.key_length", "qwen3.attention.value_length",
    "general.file_type", "general.quantization_version",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template",
]
WEIGHT_TYPE = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}
LAYER_MAP = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    _, i, kind, _ = gguf_name.split(".")
    return f"model.layers.{i}.{LAYER_MAP[kind]}.weight"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def sources(tiny_tied, tiny_untied):
    return {"tiny-tied": read_safetensors(tiny_tied / "model.safetensors"),
            "tiny-untied": read_safetensors(tiny_untied / "model.safetensors")}


_readers: dict = {}


def read(path: Path) -> gguf.GGUFReader:
    """GGUFReader takes seconds on a file with the full Qwen3 vocab, so each file is read once."""
    key = str(path)
    if key not in _readers:
        _readers[key] = gguf_reader(path)
    return _readers[key]


# All four outtypes on the untied model, the two extremes on the tied one. Untied f32 (a
# conversion and a full-vocab read of its own, ~6 CPU s) runs in make test-full only: the
# CI tier (-m "not full") still checks f32 on tied f32 (also byte-compared with gguf-py's
# writer in test_matches_gguf_py_writer[f32]) and the untied layout on bf16, f16 and q8_0.
COMBOS = [pytest.param("tiny-untied", "f32", marks=pytest.mark.full)] + \
    [("tiny-untied", t) for t in ("bf16", "f16", "q8_0")] + [("tiny-tied", "f32"), ("tiny-tied", "q8_0")]


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def raw_tensor(path: Path, t) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8, count=int(t.n_bytes), offset=int(t.data_offset))


def decode(path: Path, t) -> np.ndarray:
    """Tensor values as float32 in PyTorch shape."""
    raw = raw_tensor(path, t)
    if t.tensor_type == Q.F32:
        v = raw.view("<f4")
    elif t.tensor_type == Q.F16:
        v = raw.view("<f2").astype(np.float32)
    elif t.tensor_type == Q.BF16:
        v = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        v = gguf.quants.dequantize(raw, t.tensor_type).reshape(-1)
    return v.reshape(list(reversed([int(d) for d in t.shape])))


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("which,outtype", COMBOS)
def test_metadata(converted, which, outtype):
    path = converted(which, outtype)
    r = read(path)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert keys == EXPECTED_KEYS
    cfg = {"tiny-tied": (2, 64, 192, 4, 2, 32, 1e6), "tiny-untied": (3, 96, 256, 6, 2, 32, 1e4)}[which]
    n_layer, n_embd, n_ff, n_head, n_kv, hd, theta = cfg
    assert field(r, "general.architecture") == "qwen3"
    assert field(r, "general.type") == "model"
    assert field(r, "general.name") == which
    assert field(r, "general.file_type") == FILE_TYPE[outtype]
    assert field(r, "general.quantization_version") == 2
    assert field(r, "qwen3.block_count") == n_layer
    assert field(r, "qwen3.context_length") == 512
    assert field(r, "qwen3.embedding_length") == n_embd
    assert field(r, "qwen3.feed_forward_length") == n_ff
    assert field(r, "qwen3.attention.head_count") == n_head
    assert field(r, "qwen3.attention.head_count_kv") == n_kv
    assert field(r, "qwen3.attention.key_length") == hd
    assert field(r, "qwen3.attention.value_length") == hd
    assert field(r, "qwen3.rope.freq_base") == theta
    assert field(r, "qwen3.attention.layer_norm_rms_epsilon") == np.float32(1e-6)
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "qwen2"
    assert field(r, "tokenizer.ggml.bos_token_id") == 151643
    assert field(r, "tokenizer.ggml.eos_token_id") == 151645
    assert field(r, "tokenizer.ggml.padding_token_id") == 151643
    assert field(r, "tokenizer.ggml.add_bos_token") is False
    tok_cfg = json.loads((TOOLS / "data/qwen3-tokenizer/tokenizer_config.json").read_text())
    assert field(r, "tokenizer.chat_template") == tok_cfg["chat_template"]
    # value types, as llama.cpp expects them
    VT = gguf.GGUFValueType
    assert r.fields["qwen3.block_count"].types == [VT.UINT32]
    assert r.fields["qwen3.rope.freq_base"].types == [VT.FLOAT32]
    assert r.fields["general.file_type"].types == [VT.UINT32]
    assert r.fields["tokenizer.ggml.token_type"].types == [VT.ARRAY, VT.INT32]
    assert r.fields["tokenizer.ggml.add_bos_token"].types == [VT.BOOL]


def test_vocab(converted):
    r = read(converted("tiny-tied", "f32"))
    tokens_f, types_f = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    assert len(tokens_f.data) == 151936 and len(types_f.data) == 151936
    types = np.array(types_f.contents())
    tokenizer = json.loads((TOOLS / "data/qwen3-tokenizer/tokenizer.json").read_text())
    for text, tid in list(tokenizer["model"]["vocab"].items())[:2000:97]:
        assert tokens_f.contents(tid) == text
    assert tokens_f.contents(220) == "\u0120"  # byte-level " "
    assert (types[:151643] == 1).all()
    assert tokens_f.contents(151643) == "<|endoftext|>" and types[151643] == 3
    assert tokens_f.contents(151667) == "<think>" and types[151667] == 4
    assert tokens_f.contents(151669) == "[PAD151669]" and types[151669] == 5
    assert tokens_f.contents(151935) == "[PAD151935]"
    # reference §6.1: 20 CONTROL (fim/repo/file_sep included), 6 USER_DEFINED, 267 UNUSED
    assert (types == 3).sum() == 20 and (types == 4).sum() == 6 and (types == 5).sum() == 267
    for tid in (151659, 151662, 151663, 151664):
        assert types[tid] == 3
    merges = r.fields["tokenizer.ggml.merges"]
    assert len(merges.data) == 151387
    assert merges.contents(0) == "\u0120 \u0120"
    assert all(m.count(" ") == 1 for m in merges.contents()[:5000])


@pytest.mark.parametrize("which,outtype", COMBOS)
def test_tensors(converted, sources, which, outtype):
    path = converted(which, outtype)
    r = read(path)
    src = sources[which]
    names = [t.name for t in r.tensors]
    n_layer = 2 if which == "tiny-tied" else 3
    per_layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output",
                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    expected = ["token_embd.weight"] + [f"blk.{i}.{k}.weight" for i in range(n_layer) for k in per_layer] + \
        ["output_norm.weight"] + ([] if which == "tiny-tied" else ["output.weight"])
    assert names == expected
    for t in r.tensors:
        x = src[hf_name(t.name)]
        assert [int(d) for d in t.shape] == list(reversed(x.shape)), t.name
        is_f32 = x.ndim == 1 or t.name.endswith("_norm.weight")
        assert t.tensor_type == (Q.F32 if is_f32 else WEIGHT_TYPE[outtype]), t.name
        got = decode(path, t)
        if is_f32 or outtype in ("f32", "bf16"):
            # bf16 sources are exact in f32 and in bf16
            assert np.array_equal(got, x), t.name
            if not is_f32 and outtype == "bf16":
                raw = raw_tensor(path, t).view("<u2")
                assert np.array_equal(raw, (x.view(np.uint32) >> 16).astype(np.uint16).reshape(-1))
        elif outtype == "f16":
            assert np.array_equal(raw_tensor(path, t).view("<f2"), x.astype(np.float16).reshape(-1)), t.name
        else:  # q8_0: |error| <= d/2 from rounding plus the f16 rounding of d
            blocks = x.reshape(-1, 32)
            amax = np.abs(blocks).max(axis=1, keepdims=True)
            err = np.abs(got.reshape(-1, 32) - blocks)
            assert (err <= amax * (0.5 / 127 + 2.0**-11) + 1e-12).all(), t.name


def test_layout_alignment(converted):
    for which, outtype in (("tiny-untied", "q8_0"), ("tiny-tied", "f32")):
        path = converted(which, outtype)
        r = read(path)
        data_start = int(r.tensors[0].data_offset)
        assert data_start % 32 == 0
        expect = 0
        for t in r.tensors:
            assert int(t.data_offset) - data_start == expect, t.name  # llama.cpp's contiguity rule
            expect += (int(t.n_bytes) + 31) // 32 * 32
        assert path.stat().st_size == data_start + expect


def test_q8_0_matches_gguf_py_and_reference_dequant(converted, sources):
    path = converted("tiny-untied", "q8_0")
    r = read(path)
    src = sources["tiny-untied"]
    n_checked = 0
    for t in r.tensors:
        if t.tensor_type != Q.Q8_0:
            continue
        raw = raw_tensor(path, t)
        x = src[hf_name(t.name)]
        ref = gguf.quants.quantize(x, Q.Q8_0)  # bit-exact port of ggml's quantize_row_q8_0_ref
        assert np.array_equal(raw, ref.reshape(-1)), t.name
        ours = conv.dequantize_q8_0(raw)
        theirs = gguf.quants.dequantize(raw, Q.Q8_0).reshape(-1)
        assert np.array_equal(ours, theirs), t.name
        n_checked += 1
    assert n_checked == 1 + 3 * 7 + 1


def test_q8_0_rounding_edge_cases():
    # ties round away from zero; all-zero blocks give d = 0; values just below .5 round down
    x = np.zeros((4, 32), dtype=np.float32)
    x[0, :] = np.linspace(-1, 1, 32)
    x[1, 0], x[1, 1], x[1, 2] = 127.0, 0.5, -0.5        # d = 1: 0.5 -> 1, -0.5 -> -1
    x[2, 0], x[2, 1] = 127.0, np.float32(0.49999997)    # must round to 0, not 1
    ours = conv.quantize_q8_0(x)
    ref = gguf.quants.quantize(x, Q.Q8_0)
    assert np.array_equal(ours, ref.reshape(ours.shape))
    q = ours[:, 2:].view(np.int8)
    assert q[1, 1] == 1 and q[1, 2] == -1 and q[2, 1] == 0 and (q[3] == 0).all()
    assert ours[3, :2].view(np.float16)[0] == 0


def test_f16_bf16_rounding():
    x = np.array([1.0 + 2**-11, 1.0 + 3 * 2**-11, 65520.0, 1e-8, -0.0, np.nan], dtype=np.float32)
    h = conv.f32_to_f16(x)
    assert h[0] == 1.0 and h[1] == np.float16(1.0 + 2**-9) and np.isinf(h[2])
    assert np.array_equal(conv.f32_to_bf16(x), gguf.quants.quantize(x, Q.BF16).view(np.uint16))
    b = conv.f32_to_bf16(np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8], dtype=np.float32))
    assert b.tolist() == [0x3F80, 0x3F82]  # ties to even


def test_sharded_gives_same_bytes(tiny_tied, tiny_tied_sharded, tmp_path):
    a = conv.convert(tiny_tied, "q8_0", tmp_path / "a.gguf", progress=False)
    b = conv.convert(tiny_tied_sharded, "q8_0", tmp_path / "b.gguf", progress=False)
    assert sha256(a) == sha256(b)


def test_deterministic(tiny_untied, tmp_path):
    a = conv.convert(tiny_untied, "bf16", tmp_path / "a.gguf", progress=False)
    b = conv.convert(tiny_untied, "bf16", tmp_path / "b.gguf", progress=False)
    assert sha256(a) == sha256(b)


def test_cli_default_outfile_and_progress(tiny_tied, tmp_path):
    ckpt = tmp_path / "tiny-tied"
    shutil.copytree(tiny_tied, ckpt)
    res = run_module("tools.convert_to_gguf", ckpt, "--outtype", "f16")
    assert res.returncode == 0, res.stderr
    out = ckpt / "kipp-tiny-tied-f16.gguf"
    assert out.is_file() and str(out) in res.stdout
    assert "tensor" in res.stderr  # tqdm progress bar goes to stderr
    assert not list(ckpt.glob("*.tmp"))


def test_chat_template_2507_copied_verbatim(tiny_tied, tmp_path):
    """A 2507 checkpoint's template reaches tokenizer.chat_template byte for byte, from
    tokenizer_config.json or from chat_template.jinja (Kipp recognises the text exactly)."""
    templates = Path(__file__).resolve().parents[1] / "tok" / "templates"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_tied, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    cfg_path = ckpt / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    thinking = (templates / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8")
    tok_cfg["chat_template"] = thinking
    cfg_path.write_text(json.dumps(tok_cfg))
    assert conv.read_vocab(ckpt, config, config["vocab_size"]).chat_template == thinking
    instruct = (templates / "qwen3-instruct-2507.jinja").read_text(encoding="utf-8") + "\n"
    del tok_cfg["chat_template"]
    cfg_path.write_text(json.dumps(tok_cfg))
    (ckpt / "chat_template.jinja").write_text(instruct, encoding="utf-8")
    assert conv.read_vocab(ckpt, config, config["vocab_size"]).chat_template == instruct


def test_merges_as_strings_give_same_metadata(tiny_tied, tmp_path):
    ckpt = tmp_path / "tiny-tied"
    shutil.copytree(tiny_tied, ckpt)
    tok = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    assert isinstance(tok["model"]["merges"][0], list)
    tok["model"]["merges"] = [" ".join(pair) for pair in tok["model"]["merges"]]
    (ckpt / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    a = conv.convert(tiny_tied, "q8_0", tmp_path / "a.gguf", progress=False)
    b = conv.convert(ckpt, "q8_0", tmp_path / "b.gguf", progress=False)
    assert sha256(a) == sha256(b)


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_matches_gguf_py_writer(converted, gguf_py_written, outtype):
    """gguf-py's GGUFWriter, fed independently, produces the same metadata and tensors."""
    other = gguf_py_written(outtype)
    ours_path = converted("tiny-tied", outtype)
    ours, theirs = read(ours_path), gguf_reader(other)
    keys = [k for k in ours.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in theirs.fields if not k.startswith("GGUF.")]
    for k in keys:
        a, b = ours.fields[k], theirs.fields[k]
        assert a.types == b.types, k
        assert b"".join(bytes(p) for p in a.parts) == b"".join(bytes(p) for p in b.parts), k
    ta = {t.name: t for t in ours.tensors}
    tb = {t.name: t for t in theirs.tensors}
    assert set(ta) == set(tb)
    for name in ta:
        assert ta[name].tensor_type == tb[name].tensor_type, name
        assert list(ta[name].shape) == list(tb[name].shape), name
        assert np.array_equal(raw_tensor(ours_path, ta[name]), raw_tensor(other, tb[name])), name


# ---------------------------------------------------------------------------
# Errors: exit code 1 and one clear line on stderr.


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple, bytes]]) -> None:
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_tensors(ckpt: Path) -> dict[str, tuple[str, tuple, bytes]]:
    return {n: ("BF16", a.shape, (a.view(np.uint32) >> 16).astype("<u2").tobytes())
            for n, a in read_safetensors(ckpt / "model.safetensors").items()}


def _missing_config(d):
    (d / "config.json").unlink()


def _missing_tokenizer(d):
    (d / "tokenizer.json").unlink()


def _missing_weights(d):
    (d / "model.safetensors").unlink()


def _wrong_arch(d):
    c = json.loads((d / "config.json").read_text())
    c["architectures"] = ["LlamaForCausalLM"]
    (d / "config.json").write_text(json.dumps(c))


def _bad_dtype(d):
    t = bf16_tensors(d)
    t["model.norm.weight"] = ("F64", (64,), np.ones(64, dtype="<f8").tobytes())
    write_safetensors(d / "model.safetensors", t)


def _missing_tensor(d):
    t = bf16_tensors(d)
    del t["model.layers.1.mlp.up_proj.weight"]
    write_safetensors(d / "model.safetensors", t)


def _wrong_shape(d):
    t = bf16_tensors(d)
    t["model.norm.weight"] = ("BF16", (32,), b"\0" * 64)
    write_safetensors(d / "model.safetensors", t)


def _truncated(d):
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])


def _malformed_index(d):
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["not", "a", "map"]}))


def _index_missing_shard(d):
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    names = list(read_safetensors(d / "model-00001-of-00002.safetensors"))
    wm = {n: "model-00001-of-00002.safetensors" for n in names}
    wm["model.norm.weight"] = "model-00002-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))


ERROR_CASES = {
    "missing-config": (_missing_config, "missing model config"),
    "missing-tokenizer": (_missing_tokenizer, "missing tokenizer file"),
    "missing-weights": (_missing_weights, "missing weights"),
    "wrong-architecture": (_wrong_arch, "unsupported architecture ['LlamaForCausalLM']"),
    "bad-dtype": (_bad_dtype, "unsupported dtype F64 for tensor 'model.norm.weight'"),
    "missing-tensor": (_missing_tensor, "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
    "wrong-shape": (_wrong_shape, "tensor 'model.norm.weight' has shape [32], expected [64]"),
    "truncated": (_truncated, "malformed safetensors header"),
    "malformed-index": (_malformed_index, "malformed safetensors index"),
    "index-missing-shard": (_index_missing_shard, "missing safetensors file"),
}


def assert_one_line_error(res, needle):
    assert res.returncode == 1, (res.returncode, res.stderr)
    err = res.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("convert_to_gguf: error: ")
    assert needle in err, err


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors(case, tiny_tied, tmp_path):
    ckpt = tmp_path / "tiny-tied"
    shutil.copytree(tiny_tied, ckpt)
    setup, needle = ERROR_CASES[case]
    setup(ckpt)
    res = run_module("tools.convert_to_gguf", ckpt, "--outtype", "f32", "--no-progress")
    assert_one_line_error(res, needle)
    assert not list(ckpt.glob("*.gguf*"))


def test_error_missing_directory(tmp_path):
    res = run_module("tools.convert_to_gguf", tmp_path / "nope", "--outtype", "f32")
    assert_one_line_error(res, f"missing checkpoint directory: {tmp_path / 'nope'}")


def test_error_unsupported_outtype(tiny_tied, tmp_path):
    res = run_module("tools.convert_to_gguf", tiny_tied, "--outtype", "q4_0", "--outfile", tmp_path / "x.gguf")
    assert_one_line_error(res, "unsupported outtype 'q4_0'")


# ---- embedding checkpoints (Qwen3Model, last-token pooling) ----------------------------

def test_embedding_checkpoint_gets_pooling_last_and_no_output(converted):
    r = gguf_reader(converted("tiny-embed", "bf16"))
    f = r.fields["qwen3.pooling_type"]
    assert int(f.parts[f.data[0]][0]) == conv.POOLING_LAST
    names = {t.name for t in r.tensors}
    assert "output.weight" not in names and "token_embd.weight" in names
    assert "blk.1.ffn_down.weight" in names and "output_norm.weight" in names
    # the tokenizer's TemplateProcessing appends <|endoftext|>: it is the EOS, and added
    f = r.fields["tokenizer.ggml.eos_token_id"]
    assert int(f.parts[f.data[0]][0]) == 151643
    f = r.fields["tokenizer.ggml.add_eos_token"]
    assert bool(f.parts[f.data[0]][0]) is True


def test_unsupported_post_processor_template_is_refused(tiny_embed, tmp_path):
    ckpt = tmp_path / "bos-template"
    shutil.copytree(tiny_embed, ckpt)
    tok = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    single = tok["post_processor"]["processors"][1]["single"]
    single.insert(0, {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}})
    (ckpt / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    with pytest.raises(conv.ConvertError, match="TemplateProcessing post-processor .* is not supported"):
        conv.convert(ckpt, "bf16", tmp_path / "e.gguf", progress=False)


def test_embedding_pooling_mode_other_than_last_is_refused(tiny_embed, tmp_path):
    ckpt = tmp_path / "mean-pooled"
    shutil.copytree(tiny_embed, ckpt)
    cfg_path = ckpt / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["pooling_mode_lasttoken"], cfg["pooling_mode_mean_tokens"] = False, True
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(conv.ConvertError, match="pooling mode 'mean_tokens' is not supported"):
        conv.convert(ckpt, "bf16", tmp_path / "e.gguf", progress=False)


def test_qwen2_checkpoint_written_as_llama_cpp_writes_qwen2(converted, tiny_qwen2):
    """Qwen2ForCausalLM (Qwen2.5): general.architecture qwen2, its keys under qwen2., the q/k/v
    biases as attn_{q,k,v}.bias in F32 whatever the outtype, no q/k norms, head_dim written as
    hidden / heads; every tensor equal to its source."""
    path = converted("tiny-qwen2", "q8_0")
    r = read(path)
    assert field(r, "general.architecture") == "qwen2"
    assert not [k for k in r.fields if k.startswith("qwen3.")]
    cfg = json.loads((tiny_qwen2 / "config.json").read_text())
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert field(r, "qwen2.attention.key_length") == field(r, "qwen2.attention.value_length") == hd
    assert field(r, "qwen2.block_count") == cfg["num_hidden_layers"]
    names = [t.name for t in r.tensors]
    assert not [n for n in names if "q_norm" in n or "k_norm" in n]
    src = read_safetensors(tiny_qwen2 / "model.safetensors")
    for i in range(cfg["num_hidden_layers"]):
        # llama.cpp's order: the three weights, then their biases, then the output projection
        blk = [n for n in names if n.startswith(f"blk.{i}.")]
        assert blk[1:8] == [f"blk.{i}.attn_{x}" for x in ("q.weight", "k.weight", "v.weight", "q.bias", "k.bias",
                                                          "v.bias", "output.weight")], blk
        for x in "qkv":
            t = next(t for t in r.tensors if t.name == f"blk.{i}.attn_{x}.bias")
            assert t.tensor_type == Q.F32
            np.testing.assert_array_equal(decode(path, t), src[f"model.layers.{i}.self_attn.{x}_proj.bias"])


def test_qwen2_sliding_window_refused(tiny_qwen2, tmp_path):
    ckpt = tmp_path / "tiny-qwen2"
    shutil.copytree(tiny_qwen2, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["use_sliding_window"] = True
    (ckpt / "config.json").write_text(json.dumps(cfg))
    res = run_module("tools.convert_to_gguf", ckpt, "--outtype", "f32", "--no-progress")
    assert_one_line_error(res, "use_sliding_window=true is not supported")


# ---- Qwen3-MoE (Qwen3MoeForCausalLM -> qwen3moe) ------------------------------------------

# qwen3's keys plus the four expert keys, where llama.cpp's converter writes them
# (expert_feed_forward_length after general.file_type; expert_weights_norm is Kipp's)
EXPECTED_KEYS_MOE = [k.replace("qwen3.", "qwen3moe.") for k in EXPECTED_KEYS]
EXPECTED_KEYS_MOE.insert(EXPECTED_KEYS_MOE.index("qwen3moe.attention.key_length"), "qwen3moe.expert_count")
EXPECTED_KEYS_MOE.insert(EXPECTED_KEYS_MOE.index("qwen3moe.attention.key_length"), "qwen3moe.expert_used_count")
EXPECTED_KEYS_MOE.insert(EXPECTED_KEYS_MOE.index("general.quantization_version"), "qwen3moe.expert_feed_forward_length")
EXPECTED_KEYS_MOE.insert(EXPECTED_KEYS_MOE.index("general.quantization_version"), "qwen3moe.expert_weights_norm")
MOE_PER_LAYER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output", "ffn_norm",
                 "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
MOE_COMBOS = [("tiny-moe", "bf16"), ("tiny-moe", "q8_0"), ("tiny-moe-k1", "q8_0"), ("tiny-moe-k4", "f16"),
              pytest.param("tiny-moe-64", "f32", marks=pytest.mark.full)]


def moe_sources(ckpt: Path) -> dict[str, np.ndarray]:
    return read_safetensors(ckpt / "model.safetensors")


def moe_expected(src: dict, cfg: dict, gname: str) -> np.ndarray:
    """The value a qwen3moe tensor must hold, from the per-expert source tensors."""
    if not gname.startswith("blk."):
        return src[hf_name(gname)]
    _, i, kind, _ = gname.split(".")
    p = f"model.layers.{i}.mlp."
    if kind == "ffn_gate_inp":
        return src[p + "gate.weight"]
    if kind.endswith("_exps"):
        proj = kind[len("ffn_"):-len("_exps")]
        return np.stack([src[p + f"experts.{j}.{proj}_proj.weight"] for j in range(cfg["num_experts"])])
    return src[hf_name(gname)]


@pytest.mark.parametrize("which,outtype", MOE_COMBOS)
def test_moe_metadata_and_tensors(converted, request, which, outtype):
    """Keys and their order, the expert keys from config.json, tensor names/order/shapes
    (ggml ne: gate/up exps [H, Fe, E], down exps [Fe, H, E], router [H, E]), the router F32 in
    every outtype, every tensor equal to its source (the experts stacked in expert order)."""
    ckpt = request.getfixturevalue(which.replace("-", "_"))
    cfg = json.loads((ckpt / "config.json").read_text())
    path = converted(which, outtype)
    r = read(path)
    assert [k for k in r.fields if not k.startswith("GGUF.")] == EXPECTED_KEYS_MOE
    assert field(r, "general.architecture") == "qwen3moe"
    H, E, Fe, L = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"], cfg["num_hidden_layers"]
    assert field(r, "qwen3moe.expert_count") == E
    assert field(r, "qwen3moe.expert_used_count") == cfg["num_experts_per_tok"]
    assert field(r, "qwen3moe.expert_feed_forward_length") == Fe
    assert field(r, "qwen3moe.expert_weights_norm") is cfg["norm_topk_prob"]
    assert field(r, "qwen3moe.feed_forward_length") == cfg["intermediate_size"]
    assert field(r, "qwen3moe.block_count") == L
    assert field(r, "qwen3moe.attention.key_length") == cfg["head_dim"]
    assert r.fields["qwen3moe.expert_count"].types == [gguf.GGUFValueType.UINT32]
    assert r.fields["qwen3moe.expert_weights_norm"].types == [gguf.GGUFValueType.BOOL]
    tied = cfg["tie_word_embeddings"]
    assert [t.name for t in r.tensors] == ["token_embd.weight"] + \
        [f"blk.{i}.{k}.weight" for i in range(L) for k in MOE_PER_LAYER] + ["output_norm.weight"] + \
        ([] if tied else ["output.weight"])
    src = moe_sources(ckpt)
    for t in r.tensors:
        x = moe_expected(src, cfg, t.name)
        ne = [int(d) for d in t.shape]
        assert ne == list(reversed(x.shape)), t.name
        if t.name.endswith("ffn_gate_inp.weight"):
            assert ne == [H, E]
        elif t.name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            assert ne == [H, Fe, E]
        elif t.name.endswith("ffn_down_exps.weight"):
            assert ne == [Fe, H, E]
        f32 = x.ndim == 1 or t.name.endswith(("_norm.weight", "ffn_gate_inp.weight"))
        want_type = Q.F32 if f32 else WEIGHT_TYPE[outtype]
        if want_type == Q.Q8_0 and x.shape[-1] % 32:
            want_type = Q.F16  # llama.cpp's fallback: expert ffn 48 (tiny-moe-k1), 16 (tiny-moe-k4)
        assert t.tensor_type == want_type, t.name
        raw = raw_tensor(path, t)
        if want_type == Q.Q8_0:  # bit-exact with gguf-py's port of ggml's quantizer, row by row
            assert np.array_equal(raw, gguf.quants.quantize(x, Q.Q8_0).reshape(-1)), t.name
        elif want_type == Q.F16:
            assert np.array_equal(raw.view("<f2"), x.astype(np.float16).reshape(-1)), t.name
        else:
            assert np.array_equal(decode(path, t), x), t.name


def test_moe_expert_order(converted, tiny_moe):
    """Expert j of ffn_{gate,up,down}_exps is the checkpoint's mlp.experts.j (ne[2] = j):
    spot-checked by decoding single slices of the bf16 file."""
    path = converted("tiny-moe", "bf16")
    r = read(path)
    src = moe_sources(tiny_moe)
    for proj in ("gate", "up", "down"):
        t = next(t for t in r.tensors if t.name == f"blk.1.ffn_{proj}_exps.weight")
        got = decode(path, t)
        for j in (0, 3, 7):
            assert np.array_equal(got[j], src[f"model.layers.1.mlp.experts.{j}.{proj}_proj.weight"]), (proj, j)
        assert not np.array_equal(got[0], got[1])


def _fuse_experts(ckpt: Path, num_local: bool = True) -> None:
    """Rewrites a per-expert checkpoint in the layout transformers 5 writes with
    save_pretrained(save_original_format=False): mlp.experts.gate_up_proj [E, 2*Fe, H] (each
    expert's gate rows, then its up rows) and mlp.experts.down_proj [E, H, Fe], no ".weight";
    config.json's num_experts as num_local_experts."""
    cfg = json.loads((ckpt / "config.json").read_text())
    E = cfg["num_experts"]
    src = read_safetensors(ckpt / "model.safetensors")
    out = {}
    for name, a in src.items():
        if ".mlp.experts." not in name:
            out[name] = a
            continue
        pre, rest = name.split(".mlp.experts.")
        if not rest.startswith("0."):
            continue
        ex = [[src[f"{pre}.mlp.experts.{j}.{p}_proj.weight"] for j in range(E)] for p in ("gate", "up", "down")]
        out[f"{pre}.mlp.experts.gate_up_proj"] = np.concatenate([np.stack(ex[0]), np.stack(ex[1])], axis=1)
        out[f"{pre}.mlp.experts.down_proj"] = np.stack(ex[2])
    write_safetensors(ckpt / "model.safetensors",
                      {n: ("BF16", a.shape, (np.ascontiguousarray(a).view(np.uint32) >> 16).astype("<u2").tobytes())
                       for n, a in out.items()})
    if num_local:
        cfg["num_local_experts"] = cfg.pop("num_experts")
    (ckpt / "config.json").write_text(json.dumps(cfg))


def test_moe_fused_layout_gives_same_file(converted, tiny_moe, tmp_path):
    ckpt = tmp_path / "tiny-moe"  # same directory name: same general.name
    shutil.copytree(tiny_moe, ckpt)
    _fuse_experts(ckpt)
    assert "model.layers.0.mlp.experts.gate_up_proj" in read_safetensors(ckpt / "model.safetensors")
    out = conv.convert(ckpt, "q8_0", tmp_path / "fused.gguf", progress=False)
    assert sha256(out) == sha256(converted("tiny-moe", "q8_0"))


@pytest.mark.full  # make test-full only: the test tier's time budget (docs/testing.md)
def test_moe_transformers_fused_save_gives_same_file(converted, tiny_moe_k1, tmp_path):
    """What transformers 5.x itself writes with save_original_format=False (and what its
    default save_pretrained writes: the per-expert layout) converts to the same tensors."""
    torch = pytest.importorskip("torch", reason="torch is only in tools/requirements-vectors.txt")
    transformers = pytest.importorskip("transformers")
    from tools import quantize as qz  # its GGUF reader skips the vocabulary: fast

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_moe_k1, dtype=torch.bfloat16)
    ref_path = converted("tiny-moe-k1", "q8_0")
    ref = qz.read_model(ref_path)
    for fmt in (False, True):
        ckpt = tmp_path / f"fmt{fmt}" / "tiny-moe-k1"
        model.save_pretrained(ckpt, save_original_format=fmt)
        names = read_safetensors(ckpt / "model.safetensors")
        assert ("model.layers.0.mlp.experts.gate_up_proj" in names) is (not fmt)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(tiny_moe_k1 / f, ckpt / f)
        path = conv.convert(ckpt, "q8_0", tmp_path / f"k1-{fmt}.gguf", progress=False)
        got = qz.read_model(path)
        assert [(t.name, t.ne, t.type_id) for t in got.tensors] == [(t.name, t.ne, t.type_id) for t in ref.tensors]
        for a, b in zip(got.tensors, ref.tensors):
            assert np.array_equal(np.fromfile(path, np.uint8, a.nbytes, offset=a.offset),
                                  np.fromfile(ref_path, np.uint8, b.nbytes, offset=b.offset)), a.name
        assert got.value("qwen3moe.expert_count") == 16 and got.value("qwen3moe.expert_weights_norm") is False


def _moe_cfg(**changes):
    def setup(d):
        c = json.loads((d / "config.json").read_text())
        c.update(changes)
        (d / "config.json").write_text(json.dumps(c))
    return setup


def _moe_drop_expert(d):
    t = bf16_tensors(d)
    del t["model.layers.1.mlp.experts.5.up_proj.weight"]
    write_safetensors(d / "model.safetensors", t)


def _moe_expert_shape(d):
    t = bf16_tensors(d)
    t["model.layers.0.mlp.experts.2.down_proj.weight"] = ("BF16", (32, 64), b"\0" * 4096)
    write_safetensors(d / "model.safetensors", t)


def _moe_shared_expert_tensor(d):
    t = bf16_tensors(d)
    t["model.layers.0.mlp.shared_expert.gate_proj.weight"] = ("BF16", (32, 64), b"\0" * 4096)
    write_safetensors(d / "model.safetensors", t)


MOE_ERRORS = {
    "mlp-only-layers": (_moe_cfg(mlp_only_layers=[1]), "mlp_only_layers=[1] is not supported"),
    "sparse-step": (_moe_cfg(decoder_sparse_step=2), "decoder_sparse_step=2 is not supported"),
    "shared-experts": (_moe_cfg(shared_expert_intermediate_size=64),
                       "shared experts (shared_expert_intermediate_size=64)"),
    "shared-expert-tensor": (_moe_shared_expert_tensor,
                             "unexpected tensor 'model.layers.0.mlp.shared_expert.gate_proj"),
    "attention-bias": (_moe_cfg(attention_bias=True), "attention_bias=true is not supported for qwen3moe"),
    "sliding-window": (_moe_cfg(use_sliding_window=True), "use_sliding_window=true is not supported"),
    "top-k-too-large": (_moe_cfg(num_experts_per_tok=9), "num_experts_per_tok 9 exceeds num_experts 8"),
    "no-experts": (_moe_cfg(num_experts=0), "'num_experts' must be a positive integer"),
    "norm-not-bool": (_moe_cfg(norm_topk_prob="yes"), "'norm_topk_prob' must be true or false"),
    "missing-expert": (_moe_drop_expert, "missing tensor 'model.layers.1.mlp.experts.5.up_proj.weight' "
                                         "(for blk.1.ffn_up_exps.weight; 1 of its 8 experts missing)"),
    "expert-shape": (_moe_expert_shape, "tensor 'model.layers.0.mlp.experts.2.down_proj.weight' has shape [32, 64], "
                                        "expected [64, 32]"),
}


@pytest.mark.parametrize("case", sorted(MOE_ERRORS))
def test_moe_errors(case, tiny_moe, tmp_path):
    ckpt = tmp_path / "tiny-moe"
    shutil.copytree(tiny_moe, ckpt)
    setup, needle = MOE_ERRORS[case]
    setup(ckpt)
    res = run_module("tools.convert_to_gguf", ckpt, "--outtype", "bf16", "--no-progress")
    assert_one_line_error(res, needle)
    assert not list(ckpt.glob("*.gguf*"))


# ---- against llama.cpp's own converter ----------------------------------------------------
# convert_hf_to_gguf.py from the llama.cpp tree of the pinned llama-cpp-python sdist
# (bench/README.md unpacks it to /tmp/lsrv; LLAMA_CPP_SRC overrides), run with its own
# gguf-py. Skipped where that tree is absent.

# what llama.cpp writes that Kipp does not (general.sampling.* come from generation_config.json;
# general.size_label, general.basename/version and the "Tiny Moe" general.name are guessed
# from the directory name by its model-card logic; add_eos_token = false, which Kipp writes
# only when tokenizer_config.json has the flag), and Kipp's one addition
LLAMA_ONLY_KEYS = {"general.sampling.top_k", "general.sampling.top_p", "general.sampling.temp",
                   "general.size_label", "general.basename", "general.version", "tokenizer.ggml.add_eos_token"}
KIPP_ONLY_KEYS = {"qwen3moe.expert_weights_norm"}


@pytest.mark.parametrize("which,outtype", [("tiny-moe", "bf16"),
                                           pytest.param("tiny-moe", "q8_0", marks=pytest.mark.full),
                                           pytest.param("tiny-moe-k1", "q8_0", marks=pytest.mark.full),
                                           pytest.param("tiny-moe-64", "f32", marks=pytest.mark.full)])
def test_moe_matches_llama_cpp_converter(converted, request, tmp_path, which, outtype):
    """Same tensor names, types, shapes and bytes as llama.cpp's convert_hf_to_gguf.py; the
    same metadata values, in the same order, except the keys listed above and general.name."""
    ckpt = request.getfixturevalue(which.replace("-", "_"))
    theirs_path = llama_cpp_convert(ckpt, outtype, tmp_path / "llama.gguf")
    ours_path = converted(which, outtype)
    ours, theirs = read(ours_path), gguf_reader(theirs_path)
    ka = [k for k in ours.fields if not k.startswith("GGUF.")]
    kb = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert set(ka) - set(kb) == KIPP_ONLY_KEYS and set(kb) - set(ka) <= LLAMA_ONLY_KEYS
    common = [k for k in ka if k in kb]
    assert common == [k for k in kb if k in ka]
    for k in common:
        if k != "general.name":
            assert b"".join(bytes(p) for p in ours.fields[k].parts[1:]) == \
                b"".join(bytes(p) for p in theirs.fields[k].parts[1:]), k
    ta, tb = {t.name: t for t in ours.tensors}, {t.name: t for t in theirs.tensors}
    assert set(ta) == set(tb)
    for name, a in ta.items():
        b = tb[name]
        assert (a.tensor_type, [int(d) for d in a.shape]) == (b.tensor_type, [int(d) for d in b.shape]), name
        assert np.array_equal(raw_tensor(ours_path, a), raw_tensor(theirs_path, b)), name
