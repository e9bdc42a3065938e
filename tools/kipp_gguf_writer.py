"""Minimal GGUF v3 writer used by Kipp's Python tools (our own code, not gguf-py).

What it does: encodes metadata KV records (all scalar types, strings, and flat
arrays), tensor-info records, and a tensor-data section laid out the way
llama.cpp requires: the data section starts at the first multiple of the
alignment (32 unless changed) after the last tensor-info record, and tensor i
sits at the sum of the alignment-padded sizes of tensors 0..i-1, with zero
padding in between. Tensor data is streamed: the caller registers every
tensor's name/shape/type up front, then supplies each tensor's bytes in order,
so a multi-gigabyte model never has to be held in memory at once.

What it does not do: quantize or convert data (the caller passes final bytes),
write big-endian files, write nested arrays (llama.cpp rejects them), or split
a model into several GGUF shards. (Encoders for the block types live in
kipp_quants.py.)

Layout reference: the project's qwen3-gguf-reference.md, §1 and §5.1.
"""

from __future__ import annotations

import collections
import enum
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Sequence

from tools.atomic_file import replace_on_success

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32
MAX_TENSOR_NAME_BYTES = 63  # llama.cpp requires len(name) < 64 (GGML_MAX_NAME)
MAX_DIMS = 4


class ValueType(enum.IntEnum):
    """GGUF metadata value type ids (int32 on disk)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format for each fixed-size scalar type (little-endian)
_SCALAR_FMT = {
    ValueType.UINT8: "<B",
    ValueType.INT8: "<b",
    ValueType.UINT16: "<H",
    ValueType.INT16: "<h",
    ValueType.UINT32: "<I",
    ValueType.INT32: "<i",
    ValueType.FLOAT32: "<f",
    ValueType.BOOL: "<?",
    ValueType.UINT64: "<Q",
    ValueType.INT64: "<q",
    ValueType.FLOAT64: "<d",
}


class GGMLType(enum.IntEnum):
    """The ggml tensor types this writer knows the block geometry of."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    IQ4_NL = 20
    IQ4_XS = 23
    BF16 = 30


# (elements per block, bytes per block)
GGML_BLOCK = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 18),
    GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22),
    GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34),
    GGMLType.Q2_K: (256, 84),
    GGMLType.Q3_K: (256, 110),
    GGMLType.Q4_K: (256, 144),
    GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210),
    GGMLType.IQ4_NL: (32, 18),
    GGMLType.IQ4_XS: (256, 136),
    GGMLType.BF16: (1, 2),
}


class GGUFWriteError(ValueError):
    """Raised for anything that would produce a file llama.cpp refuses."""


def tensor_nbytes(ne: Sequence[int], ggml_type: GGMLType) -> int:
    """Byte size of a tensor with ggml dims `ne` (ne[0] contiguous)."""
    block_elems, block_bytes = GGML_BLOCK[GGMLType(ggml_type)]
    if ne[0] % block_elems != 0:
        raise GGUFWriteError(
            f"ne[0]={ne[0]} is not a multiple of the {GGMLType(ggml_type).name} block size {block_elems}")
    n = 1
    for d in ne:
        n *= int(d)
    return n // block_elems * block_bytes


def _pad_len(offset: int, alignment: int) -> int:
    return (alignment - offset % alignment) % alignment


def _encode_string(s: str | bytes) -> bytes:
    raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(raw)) + raw


def _encode_scalar(vtype: ValueType, value) -> bytes:
    if vtype == ValueType.STRING:
        return _encode_string(value)
    if vtype == ValueType.BOOL:
        return struct.pack("<?", bool(value))
    try:
        return struct.pack(_SCALAR_FMT[vtype], value)
    except struct.error as exc:
        raise GGUFWriteError(f"value {value!r} does not fit GGUF type {vtype.name}: {exc}") from None


def _encode_array(elem_type: ValueType, values: Sequence) -> bytes:
    if elem_type == ValueType.ARRAY:
        raise GGUFWriteError("nested arrays are not supported (llama.cpp rejects them)")
    head = struct.pack("<iQ", int(elem_type), len(values))
    if elem_type == ValueType.STRING:
        parts = [head]
        for v in values:
            parts.append(_encode_string(v))
        return b"".join(parts)
    if elem_type == ValueType.BOOL:
        return head + bytes(1 if v else 0 for v in values)
    fmt = _SCALAR_FMT[elem_type]
    try:
        return head + struct.pack("<%d%s" % (len(values), fmt[1]), *values)
    except struct.error as exc:
        raise GGUFWriteError(f"array element does not fit GGUF type {elem_type.name}: {exc}") from None


@dataclass
class TensorInfo:
    name: str
    ne: tuple[int, ...]      # ggml order: ne[0] is the contiguous dimension
    ggml_type: GGMLType
    nbytes: int
    offset: int               # relative to the data section start


class GGUFWriter:
    """Collects KV records and tensor infos, then writes the whole file.

    Usage:
        w = GGUFWriter()
        w.add_string("general.architecture", "qwen3")
        w.add_uint32("qwen3.block_count", 2)
        w.add_array("tokenizer.ggml.tokens", ValueType.STRING, tokens)
        w.add_tensor_info("token_embd.weight", (V, H), GGMLType.F32)   # PyTorch shape
        w.write(path, lambda info: bytes_for(info.name))
    """

    def __init__(self, alignment: int = DEFAULT_ALIGNMENT):
        if alignment <= 0 or alignment & (alignment - 1):
            raise GGUFWriteError(f"alignment {alignment} is not a power of two")
        self.alignment = alignment
        self._kv: list[tuple[str, bytes]] = []
        self._keys: set[str] = set()
        self.tensors: list[TensorInfo] = []
        self._data_size = 0  # running, alignment-padded size of the data section
        if alignment != DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    # ---- metadata -------------------------------------------------------

    def _add_raw(self, key: str, vtype: ValueType, payload: bytes) -> None:
        if not key:
            raise GGUFWriteError("empty metadata key")
        if key in self._keys:
            raise GGUFWriteError(f"duplicate metadata key {key!r}")
        self._keys.add(key)
        self._kv.append((key, _encode_string(key) + struct.pack("<i", int(vtype)) + payload))

    def add_value(self, key: str, vtype: ValueType, value) -> None:
        """Adds a scalar or string value of an explicit GGUF type."""
        vtype = ValueType(vtype)
        if vtype == ValueType.ARRAY:
            raise GGUFWriteError("use add_array for arrays")
        self._add_raw(key, vtype, _encode_scalar(vtype, value))

    def add_array(self, key: str, elem_type: ValueType, values: Sequence) -> None:
        """Adds a flat array whose elements all have type `elem_type`."""
        self._add_raw(key, ValueType.ARRAY, _encode_array(ValueType(elem_type), values))

    def add_raw_value(self, key: str, vtype: ValueType, payload: bytes) -> None:
        """Adds a value whose encoding is already known: `payload` is the bytes that
        follow the type id in a GGUF KV record (for arrays: element type, count and
        elements). Used to copy records verbatim from another GGUF file."""
        vtype = ValueType(vtype)
        if vtype == ValueType.ARRAY and len(payload) >= 4 and \
                struct.unpack_from("<i", payload)[0] == ValueType.ARRAY:
            raise GGUFWriteError("nested arrays are not supported (llama.cpp rejects them)")
        self._add_raw(key, vtype, bytes(payload))

    def add_string(self, key: str, value: str) -> None:
        self.add_value(key, ValueType.STRING, value)

    def add_uint32(self, key: str, value: int) -> None:
        self.add_value(key, ValueType.UINT32, value)

    def add_int32(self, key: str, value: int) -> None:
        self.add_value(key, ValueType.INT32, value)

    def add_uint64(self, key: str, value: int) -> None:
        self.add_value(key, ValueType.UINT64, value)

    def add_float32(self, key: str, value: float) -> None:
        self.add_value(key, ValueType.FLOAT32, value)

    def add_float64(self, key: str, value: float) -> None:
        self.add_value(key, ValueType.FLOAT64, value)

    def add_bool(self, key: str, value: bool) -> None:
        self.add_value(key, ValueType.BOOL, value)

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self._kv]

    # ---- tensors --------------------------------------------------------

    def add_tensor_info(self, name: str, torch_shape: Sequence[int], ggml_type: GGMLType) -> TensorInfo:
        """Registers a tensor. `torch_shape` is the PyTorch (row-major) shape;
        the GGUF dims are its reverse. Returns the record with its offset."""
        raw_name = name.encode("utf-8")
        if not raw_name or len(raw_name) > MAX_TENSOR_NAME_BYTES:
            raise GGUFWriteError(f"tensor name {name!r} must be 1..{MAX_TENSOR_NAME_BYTES} bytes")
        if any(t.name == name for t in self.tensors):
            raise GGUFWriteError(f"duplicate tensor name {name!r}")
        if not 1 <= len(torch_shape) <= MAX_DIMS:
            raise GGUFWriteError(f"tensor {name!r} has {len(torch_shape)} dims (1..{MAX_DIMS} allowed)")
        if any(int(d) <= 0 for d in torch_shape):
            raise GGUFWriteError(f"tensor {name!r} has a non-positive dimension: {tuple(torch_shape)}")
        ne = tuple(int(d) for d in reversed(torch_shape))
        ggml_type = GGMLType(ggml_type)
        try:
            nbytes = tensor_nbytes(ne, ggml_type)
        except GGUFWriteError as exc:
            raise GGUFWriteError(f"tensor {name!r}: {exc}") from None
        info = TensorInfo(name, ne, ggml_type, nbytes, self._data_size)
        self.tensors.append(info)
        self._data_size += nbytes + _pad_len(nbytes, self.alignment)
        return info

    # ---- output ---------------------------------------------------------

    def header_bytes(self) -> bytes:
        """Header + KV records + tensor infos + padding up to the data section."""
        parts = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self._kv))]
        parts.extend(rec for _, rec in self._kv)
        for t in self.tensors:
            parts.append(_encode_string(t.name))
            parts.append(struct.pack("<I", len(t.ne)))
            parts.append(struct.pack("<%dq" % len(t.ne), *t.ne))
            parts.append(struct.pack("<iQ", int(t.ggml_type), t.offset))
        head = b"".join(parts)
        if self.tensors:
            head += b"\0" * _pad_len(len(head), self.alignment)
        return head

    def write(self, path_or_file, tensor_data: Callable[[TensorInfo], bytes | memoryview]
              | None = None, progress: Callable[[Iterable[TensorInfo]], Iterable[TensorInfo]] | None = None) -> None:
        """Writes the file. `tensor_data(info)` returns each tensor's final bytes
        (anything supporting the buffer protocol, e.g. a numpy array), or an
        iterable of such buffers whose concatenation is the tensor (so a large
        tensor can be produced and written in pieces); it is called once per
        tensor, in registration order. `progress` optionally wraps the tensor
        iteration (e.g. tqdm)."""
        if self.tensors and tensor_data is None:
            raise GGUFWriteError("tensors were registered but no tensor_data callback was given")
        if hasattr(path_or_file, "write"):
            self._write_to(path_or_file, tensor_data, progress)
        else:
            with open(path_or_file, "wb") as f:
                self._write_to(f, tensor_data, progress)

    def _write_to(self, f: BinaryIO, tensor_data, progress) -> None:
        f.write(self.header_bytes())
        items: Iterable[TensorInfo] = self.tensors
        if progress is not None:
            items = progress(items)
        written = 0
        for t in items:
            if written != t.offset:  # cannot happen unless tensors were mutated
                raise GGUFWriteError(f"internal layout error at tensor {t.name!r}")
            data = tensor_data(t)
            try:
                parts: Iterable = (memoryview(data),)
            except TypeError:  # not a buffer: an iterable of buffers, the tensor in pieces
                parts = data
            got = 0
            for part in parts:
                part = memoryview(part).cast("B")
                got += part.nbytes
                if got > t.nbytes:
                    break
                f.write(part)
            if got != t.nbytes:
                raise GGUFWriteError(
                    f"tensor {t.name!r}: got {'more than ' if got > t.nbytes else ''}{got} bytes, "
                    f"expected {t.nbytes} ({t.ggml_type.name}, ne={list(t.ne)})")
            pad = _pad_len(t.nbytes, self.alignment)
            f.write(b"\0" * pad)
            written += t.nbytes + pad


# ---- helpers for tools that stream large tensors (make_random_model.py, quantize.py) ----------

def ordered_results(pool, calls: Iterable[Callable[[], object]], limit: int, bar=None):
    """Runs the zero-argument callables on the executor `pool` with at most `limit` pending and
    yields their results (objects with .nbytes) in submission order, advancing the progress
    bar (if any) by each result's nbytes."""
    pending: collections.deque = collections.deque()

    def take():
        out = pending.popleft().result()
        if bar is not None:
            bar.update(out.nbytes)
        return out

    for call in calls:
        pending.append(pool.submit(call))
        if len(pending) >= limit:
            yield take()
    while pending:
        yield take()


def write_atomic(writer: "GGUFWriter", path, tensor_data, progress=None) -> None:
    """writer.write() into a temporary file beside path, renamed over it only when complete
    (tools/atomic_file.py): an interrupted run never leaves a truncated GGUF, and a failed
    one never touches what path held."""
    with replace_on_success(path) as tmp:
        if progress is None:
            writer.write(tmp, tensor_data)
        else:
            writer.write(tmp, tensor_data, progress=progress)
