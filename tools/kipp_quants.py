"""numpy encoders for the ggml tensor types Kipp's tools write (our own code, not gguf-py).

What it does: turns float32 values into the exact on-disk bytes of ggml's F16, BF16,
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS blocks
(layouts: the project's qwen3-gguf-reference.md §5 and gguf-py's quants.py), vectorized
over whole chunks of blocks, following ggml's reference quantizers (the ones
llama-quantize runs without an importance matrix):
  * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: quantize_row_*_ref bit for bit;
  * Q4_K, Q5_K (per 32 values) and Q2_K (per 16): make_qkx2_quants, a weighted
    least-squares scale/min search over ggml's candidate step sizes, then 6-bit (Q2_K:
    4-bit) sub-block scales and mins against f16 super-block maxima;
  * Q6_K: make_qx_quants' weighted search per 16 values, int8 sub-block scales;
  * Q3_K: make_q3_quants (coordinate descent on the weighted scale) per 16 values,
    6-bit signed sub-block scales against the largest;
  * IQ4_NL (per 32) and IQ4_XS (per 32 inside 256): quantize_row_iq4_nl_impl's search
    over 15 candidate scales for the non-uniform levels IQ4_VALUES; IQ4_XS then packs
    6-bit sub-block scales against d = -(signed largest)/32.
The searches run in float32 numpy with closed-form errors, so some bytes differ from
llama-quantize's: against llama-cpp-python 0.3.36's libggml, Q3_K's are identical too,
IQ4_NL/IQ4_XS differ in a few blocks, and the relative RMS error of Q2_K, Q4_K and Q5_K
is within 1 % of ggml's (tests/tools/test_quant_types.py). The tests check the layouts
against gguf-py's dequantizers and Kipp's own.

What it does not do: importance matrices, the IQ1/IQ2/IQ3 types, or decoding (the tests
use gguf-py's `gguf.quants.dequantize` for that).
"""

from __future__ import annotations

import numpy as np

from tools.kipp_gguf_writer import GGML_BLOCK, GGMLType

QK_K = 256
GROUP_MAX_EPS = 1e-15  # ggml: a (sub-)block whose largest |x| is below this is all zeros

# Q6_K's candidate step sizes per sub-block, as offsets "is" in ggml's formula
# iscale = -(nmax + 0.1*is) / max, is in -9..9 (the is = 0 start is always tried)
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


def _pack_nibbles32(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: element j low nibble, j+16 high nibble."""
    return q[:, :16] | (q[:, 16:] << np.uint8(4))


def _qh32(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..31 -> (n, 4) bytes: the little-endian uint32 of their fifth bits."""
    bits = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    return np.bitwise_or.reduce(bits, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)


def _minmax_blocks(x: np.ndarray, nmax: int):
    """Q4_1/Q5_1 (ggml's quantize_row_q4_1_ref/q5_1_ref, bit for bit): d = (max-min)/nmax,
    q = min(nmax, trunc((x - min)/d + 0.5))."""
    b = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    mn = _rowreduce(np.minimum, b)
    mx = _rowreduce(np.maximum, b)
    d = (mx - mn) / np.float32(nmax)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.trunc((b - mn[:, None]) * inv[:, None] + np.float32(0.5)).astype(np.uint8)
    np.minimum(q, nmax, out=q)
    return _f16_bits(d).reshape(-1, 2), _f16_bits(mn).reshape(-1, 2), q


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    """Q4_1 blocks (20 B): d f16, m f16, 16 bytes of nibbles. Value = d*q + m."""
    d, m, q = _minmax_blocks(x, 15)
    return np.concatenate([d, m, _pack_nibbles32(q)], axis=1)


def quantize_q5_1(x: np.ndarray) -> np.ndarray:
    """Q5_1 blocks (24 B): d f16, m f16, qh u32 (fifth bits), 16 bytes of low nibbles.
    Value = d*q + m."""
    d, m, q = _minmax_blocks(x, 31)
    return np.concatenate([d, m, _qh32(q), _pack_nibbles32(q & 0x0F)], axis=1)


def quantize_q5_0(x: np.ndarray) -> np.ndarray:
    """Q5_0 blocks (22 B): d f16, qh u32, 16 bytes of low nibbles. Value = d*(q - 16);
    ggml's quantize_row_q5_0_ref bit for bit: d = (signed largest value) / -16,
    q = min(31, trunc(x/d + 16.5))."""
    b = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    imax = np.abs(b).argmax(axis=1)[:, None]
    d = np.take_along_axis(b, imax, axis=1) / np.float32(-16)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.trunc(b * inv + np.float32(16.5)).astype(np.uint8)
    np.minimum(q, 31, out=q)
    return np.concatenate([_f16_bits(d).reshape(-1, 2), _qh32(q), _pack_nibbles32(q & 0x0F)], axis=1)


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


def _qkx2(xs: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
          use_mad: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """ggml's make_qkx2_quants on every row of xs (one sub-block a row) with weights w:
    the (scale, min) of value = scale*q + min, q in 0..nmax, min <= 0, that minimizes the
    weighted squared (use_mad: absolute) error over the plain min/max fit and nstep+1
    candidate step sizes iscale = (nmax + rmin + rdelta*is) / (max - min), each refit by
    weighted least squares. A row with max == min gets scale 0 and min = its value."""
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
    L = np.empty_like(xs)
    wl = np.empty_like(xs)

    def fit(iscale):
        np.multiply(xm, iscale[:, None], out=L)
        np.rint(L, out=L)
        np.clip(L, 0, nmax, out=L)
        np.multiply(w, L, out=wl)
        return _rowsum(wl), _rowdot(wl, L), _rowdot(wl, xs)

    def err(s, m, sl, sl2, sxl):
        if use_mad:
            d = s[:, None] * L + m[:, None] - xs
            np.abs(d, out=d)
            return _rowdot(w, d)
        return s * s * sl2 + 2 * s * m * sl - 2 * s * sxl + m * m * sum_w - 2 * m * sum_x + sum_x2

    scale = rng / np.float32(nmax)
    the_min = mn.copy()
    sl, sl2, sxl = fit(np.float32(nmax) / rng_safe)
    best = err(scale, the_min, sl, sl2, sxl)
    with np.errstate(divide="ignore", invalid="ignore"):
        for st in range(nstep + 1):
            sl, sl2, sxl = fit(np.float32(nmax + rmin + rdelta * st) / rng_safe)
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
    scale = np.where(ok, np.maximum(scale, 0), 0).astype(np.float32)
    the_min = np.where(ok, np.minimum(the_min, 0), mn).astype(np.float32)
    return scale, the_min


def _mins(the_min: np.ndarray) -> np.ndarray:
    """-min as a non-negative sub-block min (+0, not -0, for a min of 0: the f16 bytes of
    dmin stay those of ggml's and of build/kipp-quantize)."""
    return np.maximum(-the_min, np.float32(0))


def _k_weights(xs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's weights: |x| + the rms of the sub-block."""
    av = np.sqrt(_rowdot(xs, xs) / np.float32(xs.shape[1]))
    w = np.abs(xs)
    w += av[:, None]
    return w


def _k_scales_6bit(scale: np.ndarray, mins: np.ndarray):
    """Q4_K/Q5_K: 6-bit sub-block scales and mins (nb, 8) against f16 super-block maxima
    (ggml: nearest_int, capped at 63); returns the 12 packed bytes, d, dmin and the
    effective per-sub-block scale and min."""
    nb = scale.shape[0]
    max_scale = _rowreduce(np.maximum, scale)
    max_min = _rowreduce(np.maximum, mins)
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, np.float32(63) / max_scale, 0).astype(np.float32)
        inv_m = np.where(max_min > 0, np.float32(63) / max_min, 0).astype(np.float32)
    ls = np.minimum(np.rint(scale * inv_s[:, None]), 63).astype(np.uint8)
    lm = np.minimum(np.rint(mins * inv_m[:, None]), 63).astype(np.uint8)
    d16 = (max_scale / np.float32(63)).astype(np.float16)
    dmin16 = (max_min / np.float32(63)).astype(np.float16)
    sc = np.empty((nb, 12), dtype=np.uint8)
    sc[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    sc[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    sc[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    d_eff = d16.astype(np.float32)[:, None] * ls.astype(np.float32)      # (nb, 8)
    m_eff = dmin16.astype(np.float32)[:, None] * lm.astype(np.float32)
    return sc, d16, dmin16, d_eff, m_eff


def _asym_q(xb: np.ndarray, d_eff: np.ndarray, m_eff: np.ndarray, nmax: int) -> np.ndarray:
    """q = nearest((x + m) / d) in 0..nmax per sub-block (xb: (nb, nsub, n)); 0 where d == 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (xb + m_eff[:, :, None]) / d_eff[:, :, None]
    np.rint(q, out=q)
    np.clip(q, 0, nmax, out=q)
    q[~(d_eff > 0)] = 0  # also clears NaNs from 0/0
    return q.astype(np.uint8)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K super-blocks (144 B): d f16, dmin f16, 12 bytes of packed 6-bit sub-block
    scales/mins, 128 bytes of nibbles. Value = d*sc*q - dmin*m, q in 0..15 (ggml's
    quantize_row_q4_K_ref: make_qkx2_quants(32, 15, rmin -1, rdelta 0.1, 20 steps))."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)  # sub-blocks
    nb = xs.shape[0] // 8
    scale, the_min = _qkx2(xs, _k_weights(xs), 15, -1.0, 0.1, 20)
    sc, d16, dmin16, d_eff, m_eff = _k_scales_6bit(scale.reshape(nb, 8), _mins(the_min).reshape(nb, 8))
    q = _asym_q(xs.reshape(nb, 8, 32), d_eff, m_eff, 15)
    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, 0:2] = d16.view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = dmin16.view(np.uint8).reshape(nb, 2)
    out[:, 4:16] = sc
    qg = q.reshape(nb, 4, 2, 32)  # group g: sub-blocks 2g (low nibbles) and 2g+1 (high)
    out[:, 16:] = (qg[:, :, 0, :] | (qg[:, :, 1, :] << np.uint8(4))).reshape(nb, 128)
    return out


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """Q5_K super-blocks (176 B): d f16, dmin f16, 12 bytes of scales/mins packed as Q4_K's,
    qh[32] (bit s of qh[j]: the fifth bit of element j of sub-block s), qs[128] (the low
    nibbles, laid out as Q4_K's). Value = d*sc*q - dmin*m, q in 0..31 (ggml's
    quantize_row_q5_K_ref: make_qkx2_quants(32, 31, rmin -0.5, rdelta 0.1, 15 steps))."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    nb = xs.shape[0] // 8
    scale, the_min = _qkx2(xs, _k_weights(xs), 31, -0.5, 0.1, 15)
    sc, d16, dmin16, d_eff, m_eff = _k_scales_6bit(scale.reshape(nb, 8), _mins(the_min).reshape(nb, 8))
    q = _asym_q(xs.reshape(nb, 8, 32), d_eff, m_eff, 31)   # (nb, 8, 32)
    out = np.empty((nb, 176), dtype=np.uint8)
    out[:, 0:2] = d16.view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = dmin16.view(np.uint8).reshape(nb, 2)
    out[:, 4:16] = sc
    bits = (q >> 4) << np.arange(8, dtype=np.uint8)[None, :, None]
    out[:, 16:48] = _rowreduce_axis1(bits)
    qg = (q & 0x0F).reshape(nb, 4, 2, 32)
    out[:, 48:] = (qg[:, :, 0, :] | (qg[:, :, 1, :] << np.uint8(4))).reshape(nb, 128)
    return out


def _rowreduce_axis1(bits: np.ndarray) -> np.ndarray:
    """OR over axis 1 of (n, k, m) uint8 bit planes (k a power of two)."""
    while bits.shape[1] > 1:
        h = bits.shape[1] // 2
        bits = bits[:, :h] | bits[:, h:]
    return bits[:, 0]


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """Q2_K super-blocks (84 B): scales[16] (low nibble: the sub-block scale, high: its
    min), qs[64] (2-bit values, four 32-element planes per 128), d f16, dmin f16.
    Value = d*sc*q - dmin*m, q in 0..3 (ggml's quantize_row_q2_K_ref: per 16 values
    make_qkx2_quants(16, 3, weights |x|, rmin -0.5, rdelta 0.1, 15 steps, absolute error),
    4-bit scales and mins against the super-block maxima)."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 16)
    nb = xs.shape[0] // 16
    scale, the_min = _qkx2(xs, np.abs(xs), 3, -0.5, 0.1, 15, use_mad=True)
    scale, mins = scale.reshape(nb, 16), _mins(the_min).reshape(nb, 16)
    max_scale = _rowreduce(np.maximum, scale)
    max_min = _rowreduce(np.maximum, mins)
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, np.float32(15) / max_scale, 0).astype(np.float32)
        inv_m = np.where(max_min > 0, np.float32(15) / max_min, 0).astype(np.float32)
    ls = np.minimum(np.rint(scale * inv_s[:, None]), 15).astype(np.uint8)
    lm = np.minimum(np.rint(mins * inv_m[:, None]), 15).astype(np.uint8)
    d16 = (max_scale / np.float32(15)).astype(np.float16)
    dmin16 = (max_min / np.float32(15)).astype(np.float16)
    d_eff = d16.astype(np.float32)[:, None] * ls.astype(np.float32)
    m_eff = dmin16.astype(np.float32)[:, None] * lm.astype(np.float32)
    q = _asym_q(xs.reshape(nb, 16, 16), d_eff, m_eff, 3).reshape(nb, 2, 4, 32)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = ls | (lm << 4)
    out[:, 16:80] = (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(nb, 64)
    out[:, 80:82] = d16.view(np.uint8).reshape(nb, 2)
    out[:, 82:84] = dmin16.view(np.uint8).reshape(nb, 2)
    return out


def _signed_max(xs: np.ndarray) -> np.ndarray:
    """Per row, the value of largest magnitude with its sign (ties: the positive one)."""
    hi, lo = _rowreduce(np.maximum, xs), _rowreduce(np.minimum, xs)
    return np.where(-lo > hi, lo, hi)


def _make_q3(xs: np.ndarray, nmax: int) -> np.ndarray:
    """ggml's make_q3_quants(n, nmax, do_rmse=true) on every row: q = nearest(-nmax*x/max)
    in -nmax..nmax-1, then up to 5 rounds of coordinate descent on the weighted (x^2)
    least-squares scale, one element at a time in order; returns the scale (0 for a row
    below GROUP_MAX_EPS)."""
    mx = _signed_max(xs)
    ok = np.abs(mx) >= GROUP_MAX_EPS
    iscale = np.where(ok, np.float32(-nmax) / np.where(ok, mx, 1), 0).astype(np.float32)
    L = np.clip(np.rint(xs * iscale[:, None]), -nmax, nmax - 1)
    w = xs * xs
    wx = w * xs
    sumlx = _rowdot(wx, L)
    suml2 = _rowdot(w * L, L)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(5):
            changed = False
            for i in range(xs.shape[1]):
                li, wi, xi, wxi = L[:, i], w[:, i], xs[:, i], wx[:, i]
                slx = sumlx - wxi * li
                sl2 = suml2 - wi * li * li
                new = np.clip(np.rint(xi * sl2 / slx), -nmax, nmax - 1)
                slx2 = slx + wxi * new
                sl22 = sl2 + wi * new * new
                take = (slx > 0) & (new != li) & (sl22 > 0) & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22)
                if take.any():
                    changed = True
                    L[:, i] = np.where(take, new, li)
                    sumlx = np.where(take, slx2, sumlx)
                    suml2 = np.where(take, sl22, suml2)
            if not changed:
                break
        return np.where(ok & (suml2 > 0), sumlx / suml2, 0).astype(np.float32)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """Q3_K super-blocks (110 B): hmask[32] (bit b of hmask[m]: the high bit of element
    32b+m), qs[64] (low 2 bits, laid out as Q2_K's), 12 bytes of 6-bit signed sub-block
    scales (+32), d f16. Value = d*(sc-32)*q, q in -4..3 (ggml's quantize_row_q3_K_ref:
    per 16 values make_q3_quants(16, 4, rmse), scales against the signed largest one)."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 16)
    nb = xs.shape[0] // 16
    scale = _make_q3(xs, 4).reshape(nb, 16)
    max_scale = _signed_max(scale)
    bok = max_scale != 0
    iscale = np.where(bok, np.float32(-32) / np.where(bok, max_scale, 1), 0).astype(np.float32)
    ls = (np.clip(np.rint(iscale[:, None] * scale), -32, 31) + 32).astype(np.uint8)
    ls[~bok] = 0  # ggml: all-zero scale bytes and d = 0
    with np.errstate(divide="ignore"):
        d16 = np.where(bok, np.float32(1) / np.where(bok, iscale, 1), 0).astype(np.float16)
    d_eff = d16.astype(np.float32)[:, None] * (ls.astype(np.float32) - 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = xs.reshape(nb, 16, 16) / d_eff[:, :, None]
    np.rint(q, out=q)
    np.clip(q, -4, 3, out=q)
    q[~(d_eff != 0)] = -4  # stored 0, as ggml's all-zero sub-blocks
    q = (q + 4).astype(np.uint8).reshape(nb, 256)
    out = np.empty((nb, 110), dtype=np.uint8)
    hb = ((q >> 2) & 1).reshape(nb, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None]
    out[:, 0:32] = _rowreduce_axis1(hb)
    q2 = (q & 3).reshape(nb, 2, 4, 32)
    out[:, 32:96] = (q2[:, :, 0] | (q2[:, :, 1] << 2) | (q2[:, :, 2] << 4) | (q2[:, :, 3] << 6)).reshape(nb, 64)
    sc = out[:, 96:108]
    sc[:, 0:8] = (ls[:, 0:8] & 0x0F) | ((ls[:, 8:16] & 0x0F) << 4)
    h = (ls >> 4).reshape(nb, 4, 4)  # [j // 4, j % 4]
    sc[:, 8:12] = h[:, 0] | (h[:, 1] << 2) | (h[:, 2] << 4) | (h[:, 3] << 6)
    out[:, 108:110] = d16.view(np.uint8).reshape(nb, 2)
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


# IQ4_NL / IQ4_XS: 16 non-uniform levels (ggml's kvalues_iq4nl)
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      dtype=np.float32)
IQ4_NTRY = 7
# nearest level by lookup: the midpoints between levels are multiples of 0.5, so the level
# nearest to v is constant over [k/2, (k+1)/2); ties go to the upper level (ggml's
# best_index_int8)
_IQ4_LO = -256
_IQ4_LUT = np.searchsorted((IQ4_VALUES[:-1] + IQ4_VALUES[1:]) / 2,
                           np.arange(_IQ4_LO, 258) / 2, side="right").astype(np.uint8)


def _iq4_index(v: np.ndarray) -> np.ndarray:
    """Index of the IQ4 level nearest to each v (v in units of the scale)."""
    k = np.floor(v * np.float32(2))
    np.clip(k, _IQ4_LO, 257, out=k)
    k -= _IQ4_LO
    return _IQ4_LUT[k.astype(np.intp)]


def _iq4_scales(xs: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_iq4_nl_impl scale search per row (32 values, weights x^2, no
    importance matrix): d = max/127 refit by weighted least squares, then the 2*ntry+1
    candidates 1/d = (itry - 127)/max, keeping the best weighted fit; 0 for a row below
    GROUP_MAX_EPS."""
    mx = _signed_max(xs)
    ok = np.abs(mx) >= GROUP_MAX_EPS
    mx_safe = np.where(ok, mx, np.float32(1))
    w = xs * xs
    wx = w * xs

    def fit(inv_d):
        q = IQ4_VALUES[_iq4_index(xs * inv_d[:, None])]
        return _rowdot(wx, q), _rowdot(w * q, q)

    with np.errstate(divide="ignore", invalid="ignore"):
        sqx, sq2 = fit(np.float32(-IQ4_VALUES[0]) / mx_safe)
        d = np.where(sq2 > 0, sqx / sq2, 0).astype(np.float32)
        best = d * sqx
        for itry in range(-IQ4_NTRY, IQ4_NTRY + 1):
            sqx, sq2 = fit(np.float32(itry + IQ4_VALUES[0]) / mx_safe)
            better = (sq2 > 0) & (sqx * sqx > best * sq2)
            d = np.where(better, sqx / sq2, d).astype(np.float32)
            best = np.where(better, d * sqx, best)
    return np.where(ok, d, 0).astype(np.float32)


def _iq4_pack(xs: np.ndarray, dl: np.ndarray) -> np.ndarray:
    """(n, 32) values and their scale (n,) -> (n, 16) bytes of level indices (element j
    low nibble, j+16 high nibble); 0 levels of a zero scale index 0 as ggml's memset."""
    with np.errstate(divide="ignore"):
        inv = np.where(dl != 0, np.float32(1) / np.where(dl != 0, dl, 1), 0).astype(np.float32)
    idx = _iq4_index(xs * inv[:, None])
    idx[dl == 0] = 0
    return _pack_nibbles32(idx)


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks (18 B): d f16, 16 bytes of 4-bit indices into IQ4_VALUES.
    Value = d*IQ4_VALUES[q]."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    d = _iq4_scales(xs)
    return np.concatenate([_f16_bits(d).reshape(-1, 2), _iq4_pack(xs, d)], axis=1)


def quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    """IQ4_XS super-blocks (136 B): d f16, scales_h u16 (2 high bits per sub-block),
    scales_l[4] (4 low bits per sub-block), qs[128] (IQ4_NL's nibbles per 32 values).
    Value = d*(ls - 32)*IQ4_VALUES[q], ls in 0..63: the sub-block scales of the IQ4_NL
    search quantized against d = -(signed largest)/32."""
    xs = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    nb = xs.shape[0] // 8
    scales = _iq4_scales(xs).reshape(nb, 8)
    d = -_signed_max(scales) / np.float32(32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    ls = np.clip(np.rint(inv[:, None] * scales), -32, 31)
    dl = (d[:, None] * ls).astype(np.float32).reshape(-1)
    ls = (ls + 32).astype(np.uint8)
    out = np.empty((nb, 136), dtype=np.uint8)
    out[:, 0:2] = _f16_bits(d).reshape(nb, 2)
    sh = (ls >> 4).astype(np.uint16) << (2 * np.arange(8, dtype=np.uint16))
    out[:, 2:4] = np.bitwise_or.reduce(sh, axis=1).astype("<u2").view(np.uint8).reshape(nb, 2)
    out[:, 4:8] = (ls[:, 0::2] & 0x0F) | ((ls[:, 1::2] & 0x0F) << 4)
    out[:, 8:] = _iq4_pack(xs, dl).reshape(nb, 128)
    return out


ENCODERS = {
    GGMLType.F32: lambda x: np.ascontiguousarray(x, dtype="<f4"),
    GGMLType.F16: f32_to_f16,
    GGMLType.BF16: f32_to_bf16,
    GGMLType.Q8_0: quantize_q8_0,
    GGMLType.Q4_0: quantize_q4_0,
    GGMLType.Q4_1: quantize_q4_1,
    GGMLType.Q5_0: quantize_q5_0,
    GGMLType.Q5_1: quantize_q5_1,
    GGMLType.Q2_K: quantize_q2_k,
    GGMLType.Q3_K: quantize_q3_k,
    GGMLType.Q4_K: quantize_q4_k,
    GGMLType.Q5_K: quantize_q5_k,
    GGMLType.Q6_K: quantize_q6_k,
    GGMLType.IQ4_NL: quantize_iq4_nl,
    GGMLType.IQ4_XS: quantize_iq4_xs,
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
