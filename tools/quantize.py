#!/usr/bin/env python3
"""Quantizes an f32/f16/bf16 GGUF to one of llama.cpp's file types (a small llama-quantize).

What it does: copies every metadata record verbatim (except general.file_type, which is
set to llama.cpp's LLAMA_FTYPE_MOSTLY_* number of the output: see FTYPES) and converts
the tensors one at a time, in chunks of rows, on all cores, streaming them to disk; the
input is memory-mapped, so memory stays at a few hundred MB whatever the model size.
--type takes q8_0, q6_k, q5_k_m, q5_k_s, q5_1, q5_0, q4_k_m, q4_k_s, q4_1, q4_0, iq4_nl,
iq4_xs, q3_k_l, q3_k_m, q3_k_s or q2_k. Tensor types follow llama.cpp's
llama_tensor_get_type for these ftypes on a dense or qwen3moe model without an importance
matrix (reference §3.3):
  * 1-D tensors (norms) are copied unchanged (the converter stores them F32);
  * every 2-D (and 3-D expert) weight gets the base type (the ftype's name without _s/_m/_l),
    except
  * output.weight, or token_embd.weight when there is no output.weight (tied), which
    gets Q6_K (Q8_0 stays Q8_0);
  * per layer i of L (blk.i.*), "more bits" meaning i < L/8, i >= 7L/8, or
    (i - L/8) % 3 == 2 (integer division), and gqa = head_count / head_count_kv:
      attn_v:      q2_k Q3_K (Q4_K if gqa >= 4); q3_k_m Q5_K for i < 2, else Q4_K;
                   q3_k_l Q5_K; iq4_nl/iq4_xs Q5_K if gqa >= 4; q4_k_m/q5_k_m Q6_K in
                   the more-bits layers; q4_k_s Q5_K for i < 4;
      ffn_down:    q2_k Q3_K; q3_k_m Q5_K for i < L/16, else Q4_K; q3_k_l Q5_K;
                   q4_k_m/q5_k_m Q6_K in the more-bits layers; iq4_nl/iq4_xs/q4_k_s Q5_K
                   for i < L/8;
      attn_output: q2_k Q3_K; q3_k_m Q4_K; q3_k_l Q5_K;
    q3_k_s, q5_k_s and the 32-element types (q4_0, q4_1, q5_0, q5_1, q8_0) have no
    per-layer rule;
  * a mixture-of-experts file (qwen3moe: {arch}.expert_count = E > 1) follows the same
    rules with llama.cpp's MoE additions: the router (ffn_gate_inp) is never quantized (it
    stays F32), the 3-D expert tensors are quantized row by row (rows of ne[0], every expert
    alike), ffn_down_exps takes ffn_down's rules (its layer read from the name), while
    ffn_gate_exps and ffn_up_exps take the base type; and for E == 8 exactly (Mixtral's
    rule, which llama.cpp applies to any 8-expert model): attn_v and attn_k are Q8_0 in every
    type, and attn_output is Q5_K in q2_k, q3_k_s, q3_k_m, q4_k_s, q4_k_m, iq4_nl and iq4_xs
    (base type otherwise: the dense attn_output rules above do not apply);
  * a row length that is not a multiple of the chosen type's block (256 for K-quants and
    IQ4_XS, 32 for the rest) falls back as llama.cpp does (Q2_K/Q3_K/IQ4_XS -> IQ4_NL,
    Q5_K -> Q5_1, Q6_K -> Q8_0), except Q4_K -> Q8_0 (llama.cpp: Q5_0), and any other
    type -> Q8_0; if that does not fit either, the tensor keeps the input type.
Block encoders: tools/kipp_quants.py (Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 bit-exact with ggml's
reference quantizers; the K-quants and IQ4 types with ggml's layouts and search, within
1 % of its error).

What it does not do: importance matrices (so no IQ1/IQ2/IQ3 types), MXFP4_MOE,
requantizing an already quantized file, or --pure / per-tensor overrides.

Usage: python -m tools.quantize INPUT.gguf OUTPUT.gguf --type TYPE [--threads N] [--no-progress]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/quantize.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import concurrent.futures as cf
import functools
import mmap
import os
import re
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools import kipp_quants as kq
from tools.kipp_gguf_writer import (_SCALAR_FMT, DEFAULT_ALIGNMENT, GGML_BLOCK, GGMLType,
                              GGUFWriter, GGUFWriteError, TensorInfo, ValueType, ordered_results,
                              write_atomic)

# --type -> (base ggml type, llama ftype for general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_*)
FTYPES = {
    "q8_0": (GGMLType.Q8_0, 7),
    "q6_k": (GGMLType.Q6_K, 18),
    "q5_k_m": (GGMLType.Q5_K, 17),
    "q5_k_s": (GGMLType.Q5_K, 16),
    "q5_1": (GGMLType.Q5_1, 9),
    "q5_0": (GGMLType.Q5_0, 8),
    "q4_k_m": (GGMLType.Q4_K, 15),
    "q4_k_s": (GGMLType.Q4_K, 14),
    "q4_1": (GGMLType.Q4_1, 3),
    "q4_0": (GGMLType.Q4_0, 2),
    "iq4_nl": (GGMLType.IQ4_NL, 25),
    "iq4_xs": (GGMLType.IQ4_XS, 30),
    "q3_k_l": (GGMLType.Q3_K, 13),
    "q3_k_m": (GGMLType.Q3_K, 12),
    "q3_k_s": (GGMLType.Q3_K, 11),
    "q2_k": (GGMLType.Q2_K, 10),
}
# a type whose block does not divide a tensor's rows -> the one used instead (llama.cpp's
# table, except Q4_K -> Q8_0 where llama.cpp uses Q5_0); one that still does not fit keeps
# the input type
FALLBACK = {
    GGMLType.Q2_K: GGMLType.IQ4_NL, GGMLType.Q3_K: GGMLType.IQ4_NL, GGMLType.IQ4_XS: GGMLType.IQ4_NL,
    GGMLType.Q4_K: GGMLType.Q8_0, GGMLType.Q5_K: GGMLType.Q5_1, GGMLType.Q6_K: GGMLType.Q8_0,
}
INPUT_TYPES = {GGMLType.F32: np.dtype("<f4"), GGMLType.F16: np.dtype("<f2"), GGMLType.BF16: np.dtype("<u2")}
CHUNK_VALUES = 1 << 22  # values per work item (rounded to whole rows)

_SCALAR_SIZE = {ValueType.UINT8: 1, ValueType.INT8: 1, ValueType.UINT16: 2, ValueType.INT16: 2,
                ValueType.UINT32: 4, ValueType.INT32: 4, ValueType.FLOAT32: 4, ValueType.BOOL: 1,
                ValueType.UINT64: 8, ValueType.INT64: 8, ValueType.FLOAT64: 8}


class QuantizeError(Exception):
    """A user-facing, one-line error."""


# ---------------------------------------------------------------------------
# Input: a minimal GGUF v2/v3 layout reader (records are kept as raw bytes)


@dataclass
class SrcTensor:
    name: str
    ne: tuple[int, ...]   # ggml order
    type_id: int
    offset: int           # absolute byte offset in the file
    nbytes: int

    @property
    def torch_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ne))


@dataclass
class SrcModel:
    path: Path
    kv: list[tuple[str, ValueType, bytes]]   # key, type, raw payload after the type id
    tensors: list[SrcTensor]
    alignment: int

    def value(self, key: str):
        """Decoded scalar value of `key` (None if absent or not a scalar/string)."""
        for k, vtype, payload in self.kv:
            if k == key:
                if vtype == ValueType.STRING:
                    return payload[8:].decode("utf-8", "replace")
                if vtype in _SCALAR_FMT:
                    return struct.unpack_from(_SCALAR_FMT[vtype], payload)[0]
                return None
        return None


def read_model(path: Path) -> SrcModel:
    path = Path(path)
    if not path.exists():
        raise QuantizeError(f"missing input file: {path}")
    if not path.is_file():
        raise QuantizeError(f"input is not a regular file: {path}")
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise QuantizeError(f"not a GGUF file (bad magic): {path}")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(mm, path, size)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise QuantizeError(f"malformed GGUF header in {path}: {exc}") from None
    finally:
        mm.close()


def _parse(mm, path: Path, size: int) -> SrcModel:
    pos = 4

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, mm, pos)
        pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def skip_string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", mm, pos)
        if pos + 8 + n > size:
            raise ValueError("string runs past the end of the file")
        pos += 8 + n

    def read_string() -> str:
        start = pos
        skip_string()
        return bytes(mm[start + 8:pos]).decode("utf-8")

    version = take("<I")
    if version not in (2, 3):
        raise QuantizeError(f"unsupported GGUF version {version} in {path} (2 or 3 expected)")
    n_tensors, n_kv = take("<QQ")
    if n_tensors > size or n_kv > size:
        raise ValueError("tensor/KV counts exceed the file size")
    kv = []
    for _ in range(n_kv):
        key = read_string()
        vtype = ValueType(take("<i"))
        start = pos
        if vtype == ValueType.STRING:
            skip_string()
        elif vtype == ValueType.ARRAY:
            etype = ValueType(take("<i"))
            count = take("<Q")
            if etype == ValueType.STRING:
                for _ in range(count):
                    skip_string()
            elif etype in _SCALAR_SIZE:
                pos += count * _SCALAR_SIZE[etype]
            else:
                raise ValueError(f"array of {etype.name} in key {key!r}")
        else:
            pos += _SCALAR_SIZE[vtype]
        if pos > size:
            raise ValueError(f"key {key!r} runs past the end of the file")
        kv.append((key, vtype, bytes(mm[start:pos])))
    infos = []
    for _ in range(n_tensors):
        name = read_string()
        n_dims = take("<I")
        if not 1 <= n_dims <= 4:
            raise ValueError(f"tensor {name!r} has {n_dims} dims")
        ne = tuple(struct.unpack_from(f"<{n_dims}Q", mm, pos))
        pos += 8 * n_dims
        type_id, offset = take("<iQ")
        infos.append((name, ne, type_id, offset))
    model = SrcModel(path, kv, [], DEFAULT_ALIGNMENT)
    align = model.value("general.alignment")
    if align is not None:
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise ValueError(f"general.alignment {align!r} is not a power of two")
        model.alignment = align
    data_start = pos + (-pos % model.alignment)
    for name, ne, type_id, offset in infos:
        try:
            gtype = GGMLType(type_id)
            n_el, n_b = GGML_BLOCK[gtype]
        except (ValueError, KeyError):
            raise QuantizeError(f"tensor {name!r} in {path} has a ggml type ({type_id}) this tool does not "
                                "know") from None
        count = 1
        for d in ne:
            count *= d
        if ne[0] % n_el:
            raise ValueError(f"tensor {name!r}: ne[0]={ne[0]} is not a multiple of its block size")
        nbytes = count // n_el * n_b
        if data_start + offset + nbytes > size:
            raise ValueError(f"tensor {name!r} runs past the end of the file (truncated?)")
        model.tensors.append(SrcTensor(name, ne, type_id, data_start + offset, nbytes))
    return model


# ---------------------------------------------------------------------------
# The type mix


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's rule for the Q4_K_M / Q5_K_M 'more bits' layers."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


_LAYER_RE = re.compile(r"^blk\.(\d+)\.(attn_v|attn_k|attn_output|ffn_down|ffn_down_exps)\.weight$")
Q3_K, Q4_K, Q5_K, Q6_K = GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K
# ftypes whose attn_output llama.cpp raises to Q5_K in an 8-expert model
_ATTN_OUTPUT_8_EXPERTS = {"q2_k", "q3_k_s", "q3_k_m", "q4_k_s", "q4_k_m", "iq4_nl", "iq4_xs"}


def _layer_type(qtype: str, kind: str, i: int, n_layers: int, n_gqa: int, n_expert: int = 0) -> GGMLType | None:
    """llama_tensor_get_type's per-layer rules for these ftypes (Qwen3 dense or MoE, no
    imatrix); None: the base type."""
    more = use_more_bits(i, n_layers)
    if n_expert == 8 and kind in ("attn_v", "attn_k"):  # "bumping this to Q8_0 trades just ~128MB"
        return GGMLType.Q8_0
    if kind == "attn_k":
        return None
    if kind == "attn_v":
        return {"q2_k": Q4_K if n_gqa >= 4 else Q3_K,
                "q3_k_m": Q5_K if i < 2 else Q4_K,
                "q3_k_l": Q5_K,
                "iq4_nl": Q5_K if n_gqa >= 4 else None,
                "iq4_xs": Q5_K if n_gqa >= 4 else None,
                "q4_k_m": Q6_K if more else None,
                "q5_k_m": Q6_K if more else None,
                "q4_k_s": Q5_K if i < 4 else None}.get(qtype)
    if kind in ("ffn_down", "ffn_down_exps"):
        return {"q2_k": Q3_K,
                "q3_k_m": Q5_K if i < n_layers // 16 else Q4_K,
                "q3_k_l": Q5_K,
                "q4_k_m": Q6_K if more else None,
                "iq4_nl": Q5_K if i < n_layers // 8 else None,
                "iq4_xs": Q5_K if i < n_layers // 8 else None,
                "q5_k_m": Q6_K if more else None,
                "q4_k_s": Q5_K if i < n_layers // 8 else None}.get(qtype)
    if n_expert == 8:  # attn_output
        return Q5_K if qtype in _ATTN_OUTPUT_8_EXPERTS else None
    return {"q2_k": Q3_K, "q3_k_m": Q4_K, "q3_k_l": Q5_K}.get(qtype)  # attn_output


def target_type(name: str, torch_shape: tuple[int, ...], in_type: GGMLType, qtype: str, n_layers: int,
                has_output: bool, n_gqa: int = 1, n_expert: int = 0) -> GGMLType:
    """The type llama-quantize would give this tensor (see the module docstring). n_expert:
    the file's expert_count (0 for a dense model)."""
    base, _ = FTYPES[qtype]
    if len(torch_shape) < 2 or not name.endswith(".weight") or name.endswith("_norm.weight") \
            or name.endswith("ffn_gate_inp.weight"):  # llama.cpp never quantizes a router
        return in_type
    row = torch_shape[-1]
    new = base
    if name == "output.weight" or (name == "token_embd.weight" and not has_output):
        if row % GGML_BLOCK[base][0]:
            new = GGMLType.Q8_0
        elif base != GGMLType.Q8_0:
            new = GGMLType.Q6_K
    elif m := _LAYER_RE.match(name):
        new = _layer_type(qtype, m.group(2), int(m.group(1)), n_layers, n_gqa, n_expert) or base
    if row % GGML_BLOCK[new][0]:
        new = FALLBACK.get(new, GGMLType.Q8_0)
        if row % GGML_BLOCK[new][0]:
            new = in_type
    return new


def plan(model: SrcModel, qtype: str) -> list[tuple[SrcTensor, GGMLType]]:
    if qtype not in FTYPES:
        raise QuantizeError(f"unsupported --type {qtype!r} (choose from {', '.join(FTYPES)})")
    arch = model.value("general.architecture")
    n_layers = model.value(f"{arch}.block_count") if isinstance(arch, str) else None
    if not isinstance(n_layers, int):  # fall back to counting blocks
        ids = [int(m.group(1)) for t in model.tensors if (m := re.match(r"^blk\.(\d+)\.", t.name))]
        n_layers = max(ids) + 1 if ids else 0
    names = {t.name for t in model.tensors}
    heads = model.value(f"{arch}.attention.head_count") if isinstance(arch, str) else None
    kv_heads = model.value(f"{arch}.attention.head_count_kv") if isinstance(arch, str) else None
    n_gqa = heads // kv_heads if isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads > 0 else 1
    n_expert = model.value(f"{arch}.expert_count") if isinstance(arch, str) else None
    n_expert = n_expert if isinstance(n_expert, int) else 0
    out = []
    for t in model.tensors:
        in_type = GGMLType(t.type_id)
        if in_type not in INPUT_TYPES and len(t.ne) >= 2:
            raise QuantizeError(f"input must be an f32/f16/bf16 GGUF, but tensor {t.name!r} is "
                                f"{in_type.name}")
        out.append((t, target_type(t.name, t.torch_shape, in_type, qtype, n_layers, "output.weight" in names,
                                   n_gqa, n_expert)))
    return out


# ---------------------------------------------------------------------------
# Conversion


def _to_f32(raw: np.ndarray, in_type: GGMLType) -> np.ndarray:
    if in_type == GGMLType.BF16:
        return kq.bf16_to_f32(raw)
    return raw.astype(np.float32)


def quantize_file(src: Path, dst: Path, qtype: str, progress: bool = True, threads: int | None = None) -> Path:
    src, dst = Path(src), Path(dst)
    model = read_model(src)
    tensor_plan = plan(model, qtype)
    if not dst.parent.is_dir():
        raise QuantizeError(f"missing output directory: {dst.parent}")
    if dst.exists() and dst.resolve() == src.resolve():
        raise QuantizeError("output would overwrite the input")
    _, ftype = FTYPES[qtype]
    w = GGUFWriter(alignment=model.alignment)
    have_ftype = False
    for key, vtype, payload in model.kv:
        if key == "general.alignment":
            continue  # the writer adds it for a non-default alignment
        if key == "general.file_type":
            w.add_uint32(key, ftype)
            have_ftype = True
        else:
            w.add_raw_value(key, vtype, payload)
    if not have_ftype:
        w.add_uint32("general.file_type", ftype)
    src_of: dict[str, SrcTensor] = {}
    for t, gtype in tensor_plan:
        w.add_tensor_info(t.name, t.torch_shape, gtype)
        src_of[t.name] = t

    threads = threads or os.cpu_count() or 1
    pool = cf.ThreadPoolExecutor(max_workers=threads)
    total = sum(t.nbytes for t in w.tensors)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dst.name,
                   file=sys.stderr, leave=False)
    f_in = open(src, "rb")
    mm = mmap.mmap(f_in.fileno(), 0, access=mmap.ACCESS_READ)

    def tensor_data(info: TensorInfo):
        t = src_of[info.name]
        in_type = GGMLType(t.type_id)
        raw = np.frombuffer(mm, dtype=np.uint8, count=t.nbytes, offset=t.offset)
        if info.ggml_type == in_type:  # copied unchanged
            if bar is not None:
                bar.update(t.nbytes)
            yield raw
            return
        row = t.ne[0]
        n_rows = t.nbytes // (row * INPUT_TYPES[in_type].itemsize)
        vals = raw.view(INPUT_TYPES[in_type]).reshape(n_rows, row)
        step = max(1, CHUNK_VALUES // row)

        def job(r0):
            return kq.encode(_to_f32(vals[r0:r0 + step], in_type), info.ggml_type)

        yield from ordered_results(pool, (functools.partial(job, r0) for r0 in range(0, n_rows, step)),
                                   2 * threads, bar)

    try:
        write_atomic(w, dst, tensor_data)
    finally:
        pool.shutdown(cancel_futures=True)
        if bar is not None:
            bar.close()
        del tensor_data
        try:
            mm.close()
        except BufferError:  # a numpy view is still alive somewhere; the OS frees it at exit
            pass
        f_in.close()
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", type=Path, help="f32/f16/bf16 GGUF")
    ap.add_argument("output", type=Path, help="output GGUF")
    ap.add_argument("--type", required=True, dest="qtype", help=", ".join(FTYPES))
    ap.add_argument("--threads", type=int, help="worker threads (default: all cores)")
    ap.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        if args.qtype not in FTYPES:
            raise QuantizeError(f"unsupported --type {args.qtype!r} (choose from {', '.join(FTYPES)})")
        out = quantize_file(args.input, args.output, args.qtype, progress=not args.no_progress,
                            threads=args.threads)
    except (QuantizeError, GGUFWriteError) as exc:
        print(f"quantize: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"quantize: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {args.qtype}, {time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
