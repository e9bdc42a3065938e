"""numpy encoders for the ggml tensor types Kipp's tools write (our own code, not gguf-py).

What it does: turns float32 values into the exact on-disk bytes of ggml's F16, BF16,
Q8_0, Q4_0, Q4_K and Q6_K blocks (layouts: the project's qwen3-gguf-reference.md §5),
vectorized over whole chunks of blocks. Q8_0 and Q4_0 follow ggml's
quantize_row_*_ref bit for bit (Q8_0 is the converter's own encoder). Q4_K and Q6_K
follow the structure of ggml's reference quantizers (Q4_K: per 32-element sub-block
a weighted least-squares scale/min search over a few candidate step sizes, then 6-bit
sub-scales/mins against an f16 super-block scale and min; Q6_K: per 16-element
sub-block a weighted least-squares scale search, then int8 sub-scales against an f16
super-block scale), over the same candidates as ggml (make_qkx2_quants' 21 step sizes,
make_qx_quants' 19), in float32 numpy with closed-form errors, so the bytes are not always
identical to llama-quantize's (on the random-tiny shape Q6_K's weight MSE equals
llama-quantize's and Q4_K's is within 1 %); the layouts are, and the tests check them
against gguf-py's dequantizers and Kipp's own.

What it does not do: importance matrices, the other ggml types, or decoding (the tests
use gguf-py's `gguf.quants.dequantize` for that).
"""

from __future__ import annotations

import numpy as np

from tools.kipp_gguf_writer import GGML_BLOCK, GGMLType

QK_K = 256
GROUP_MAX_EPS = 1e-15  # ggml: a (sub-)block whose largest |x| is below this is all zeros

# Candidate step sizes searched per sub-block, as offsets "is" in ggml's formulas:
# Q4_K: iscale = (nmax - 1 + 0.1*is) / (max - min), is in 0..20 in ggml (10 = plain max-min).
# Q6_K: iscale = -(nmax + 0.1*is) / max, is in -9..9 in ggml (the is = 0 start is always tried).
Q4_K_STEPS = tuple(range(21))
Q6_K_STEPS = tuple(i for i in range(-9, 10) if i)


def _f16_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).view(np.uint8)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """IEEE binary16, round to nearest even."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """bfloat16 bits, round to nearest even, for finite input (NaN/Inf are not special-cased;
    convert_to_gguf.f32_to_bf16 handles them, at a third of the speed)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    t = u >> np.uint32(16)
    t &= np.uint32(1)
    t += np.uint32(0x7FFF)
    t += u
    t >>= np.uint32(16)
    return t.astype(np.uint16)


def bf16_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_0_ref (shared with the converter, bit-exact)."""
    from tools.convert_to_gguf import quantize_q8_0 as q8
    return q8(x)


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q4_0_ref, bit for bit: per 32 values, m = the value of largest
    magnitude (with its sign), d = m / -8, q = min(15, trunc(x/d + 8.5)); element j in
    the low nibble of qs[j], element j+16 in the high nibble."""
    b = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    imax = np.abs(b).argmax(axis=1)[:, None]
    m = np.take_along_axis(b, imax, axis=1)
    d = m / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.trunc(b * inv + np.float32(8.5)).astype(np.uint8)
    np.minimum(q, 15, out=q)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, :2] = _f16_bits(d)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return out


def _rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b, optimize=False)


def _rowsum(a: np.ndarray) -> np.ndarray:
    return np.einsum("ij->i", a, optimize=False)


def _rowreduce(op, a: np.ndarray) -> np.ndarray:
    """op-reduction of each row (width a power of two) by halving: numpy's own reduce over
    a short last axis is several times slower."""
    while a.shape[1] > 1:
        h = a.shape[1] // 2
        a = op(a[:, :h], a[:, h:])
    return a[:, 0]


def quantize_q4_k(x: np.ndarray, steps=Q4_K_STEPS) -> np.ndarray:
    """Q4_K super-blocks (144 B): d f16, dmin f16, 12 bytes of packed 6-bit sub-block
    scales/mins, 128 bytes of nibbles. Value = d*sc*q - dmin*m, q in 0..15."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)  # sub-blocks
    nb = xs.shape[0] // 8
    # ggml's weights for Q4_K: av_x + |x|, av_x = rms of the sub-block
    av = np.sqrt(_rowdot(xs, xs) / np.float32(32))
    w = np.abs(xs)
    w += av[:, None]
    mn = np.minimum(_rowreduce(np.minimum, xs), 0)
    mx = _rowreduce(np.maximum, xs)
    rng = mx - mn
    ok = rng > 0
    rng_safe = np.where(ok, rng, np.float32(1))
    sum_w = _rowsum(w)
    wx = w * xs
    sum_x = _rowsum(wx)
    sum_x2 = _rowdot(wx, xs)
    xm = xs - mn[:, None]

    # start: the plain min/max fit (ggml's is = nmax case), scored by weighted error
    scale = rng / np.float32(15)
    the_min = mn.copy()

    def err(s, m, sl, sl2, sxl):
        return s * s * sl2 + 2 * s * m * sl - 2 * s * sxl + m * m * sum_w - 2 * m * sum_x + sum_x2

    L = np.empty_like(xs)
    wl = np.empty_like(xs)

    def fit(iscale):
        np.multiply(xm, iscale[:, None], out=L)
        np.rint(L, out=L)
        np.clip(L, 0, 15, out=L)
        np.multiply(w, L, out=wl)
        return _rowsum(wl), _rowdot(wl, L), _rowdot(wl, xs)

    sl, sl2, sxl = fit(np.float32(15) / rng_safe)
    best = err(scale, the_min, sl, sl2, sxl)
    with np.errstate(divide="ignore", invalid="ignore"):
        for st in steps:
            sl, sl2, sxl = fit(np.float32(14 + 0.1 * st) / rng_safe)
            D = sum_w * sl2 - sl * sl
            s = (sum_w * sxl - sum_x * sl) / D
            m = (sl2 * sum_x - sl * sxl) / D
            pos = m > 0
            if pos.any():
                m = np.where(pos, np.float32(0), m)
                s = np.where(pos, sxl / sl2, s)
            e = err(s, m, sl, sl2, sxl)
            better = (D > 0) & (e < best) & np.isfinite(e)
            scale = np.where(better, s, scale)
            the_min = np.where(better, m, the_min)
            best = np.where(better, e, best)
    scale = np.where(ok, np.maximum(scale, 0), 0).astype(np.float32).reshape(nb, 8)
    mins = np.where(ok, np.maximum(-the_min, 0), 0).astype(np.float32).reshape(nb, 8)

    # 6-bit sub-scales against the super-block maxima (ggml: nearest_int, capped at 63)
    max_scale = _rowreduce(np.maximum, scale)
    max_min = _rowreduce(np.maximum, mins)
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, np.float32(63) / max_scale, 0).astype(np.float32)
        inv_m = np.where(max_min > 0, np.float32(63) / max_min, 0).astype(np.float32)
    ls = np.minimum(np.rint(scale * inv_s[:, None]), 63).astype(np.uint8)
    lm = np.minimum(np.rint(mins * inv_m[:, None]), 63).astype(np.uint8)
    d16 = (max_scale / np.float32(63)).astype(np.float16)
    dmin16 = (max_min / np.float32(63)).astype(np.float16)

    d_eff = d16.astype(np.float32)[:, None] * ls.astype(np.float32)      # (nb, 8)
    m_eff = dmin16.astype(np.float32)[:, None] * lm.astype(np.float32)
    xb = xs.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (xb + m_eff[:, :, None]) / d_eff[:, :, None]
    np.rint(q, out=q)
    np.clip(q, 0, 15, out=q)
    q[~(d_eff > 0)] = 0  # also clears NaNs from 0/0
    q = q.astype(np.uint8)

    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, 0:2] = d16.view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = dmin16.view(np.uint8).reshape(nb, 2)
    sc = out[:, 4:16]
    sc[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    sc[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    sc[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    qg = q.reshape(nb, 4, 2, 32)  # group g: sub-blocks 2g (low nibbles) and 2g+1 (high)
    out[:, 16:] = (qg[:, :, 0, :] | (qg[:, :, 1, :] << np.uint8(4))).reshape(nb, 128)
    return out


def quantize_q6_k(x: np.ndarray, steps=Q6_K_STEPS) -> np.ndarray:
    """Q6_K super-blocks (210 B): ql[128], qh[64], int8 scales[16], d f16 (last).
    Value = d*scale*(q - 32), q in 0..63."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 16)  # sub-blocks
    nb = xs.shape[0] // 16
    hi, lo = _rowreduce(np.maximum, xs), _rowreduce(np.minimum, xs)
    mxv = np.where(-lo > hi, lo, hi)  # signed value of largest magnitude
    ok = np.abs(mxv) >= GROUP_MAX_EPS
    mx_safe = np.where(ok, mxv, np.float32(1))
    w = xs * xs  # ggml's rmse_type 1 weights
    L = np.empty_like(xs)
    wl = np.empty_like(xs)

    def fit(iscale):
        np.multiply(xs, iscale[:, None], out=L)
        np.rint(L, out=L)
        np.clip(L, -32, 31, out=L)
        np.multiply(w, L, out=wl)
        return _rowdot(wl, xs), _rowdot(wl, L)

    with np.errstate(divide="ignore", invalid="ignore"):
        slx, sl2 = fit(np.float32(-32) / mx_safe)
        scale = np.where(sl2 > 0, slx / sl2, 0).astype(np.float32)
        best = scale * slx
        for st in steps:
            slx, sl2 = fit(np.float32(-(32 + 0.1 * st)) / mx_safe)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            s = np.where(better, slx / sl2, scale)
            best = np.where(better, s * slx, best)
            scale = s.astype(np.float32)
    scale = np.where(ok, scale, 0).reshape(nb, 16)

    hi, lo = _rowreduce(np.maximum, scale), _rowreduce(np.minimum, scale)
    max_scale = np.where(-lo > hi, lo, hi)  # the sub-block scale of largest magnitude
    bok = np.abs(max_scale) >= GROUP_MAX_EPS
    with np.errstate(divide="ignore"):
        iscale = np.where(bok, np.float32(-128) / np.where(bok, max_scale, 1), 0).astype(np.float32)
        d16 = np.where(bok, np.float32(1) / np.where(bok, iscale, 1), 0).astype(np.float16)
    sc = np.minimum(np.rint(iscale[:, None] * scale), 127).astype(np.int8)
    d_eff = d16.astype(np.float32)[:, None] * sc.astype(np.float32)  # (nb, 16)
    xb = xs.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = xb / d_eff[:, :, None]
    np.rint(q, out=q)
    np.clip(q, -32, 31, out=q)
    q[~(d_eff != 0)] = 0
    q = (q + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # [half, quarter, l]

    out = np.empty((nb, 210), dtype=np.uint8)
    ql = out[:, 0:128].reshape(nb, 2, 64)
    ql[:, :, 0:32] = (q[:, :, 0, :] & 0x0F) | ((q[:, :, 2, :] & 0x0F) << 4)
    ql[:, :, 32:64] = (q[:, :, 1, :] & 0x0F) | ((q[:, :, 3, :] & 0x0F) << 4)
    qh = out[:, 128:192].reshape(nb, 2, 32)
    qh[:] = (q[:, :, 0, :] >> 4) | ((q[:, :, 1, :] >> 4) << 2) | ((q[:, :, 2, :] >> 4) << 4) \
        | ((q[:, :, 3, :] >> 4) << 6)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d16.view(np.uint8).reshape(nb, 2)
    out[~bok] = 0  # ggml writes an all-zero block
    return out


ENCODERS = {
    GGMLType.F32: lambda x: np.ascontiguousarray(x, dtype="<f4"),
    GGMLType.F16: f32_to_f16,
    GGMLType.BF16: f32_to_bf16,
    GGMLType.Q8_0: quantize_q8_0,
    GGMLType.Q4_0: quantize_q4_0,
    GGMLType.Q4_K: quantize_q4_k,
    GGMLType.Q6_K: quantize_q6_k,
}


def encode(x: np.ndarray, ggml_type: GGMLType) -> np.ndarray:
    """float32 values (any shape; size a multiple of the type's block) -> block bytes."""
    ggml_type = GGMLType(ggml_type)
    if ggml_type not in ENCODERS:
        raise ValueError(f"no encoder for {ggml_type.name}")
    n_el, _ = GGML_BLOCK[ggml_type]
    if np.size(x) % n_el:
        raise ValueError(f"{np.size(x)} values are not a whole number of {ggml_type.name} blocks ({n_el})")
    return ENCODERS[ggml_type](x)
