// kv.glsl — the KV cache's element conversions for ops.c's shaders (kv_store.comp,
// attention.comp): f32 -> f16 / bf16 rounding in integer arithmetic on the f32's bits, bit for
// bit src/core/types.c's kipp_f32_to_f16 / kipp_f32_to_bf16 (round to nearest even; NaN keeps
// its sign and top payload with the quiet bit set; f16 overflow to inf from 65520 up;
// subnormals rounded exactly), and the reads back to f32 (exact). The device's conversion
// instructions are not used for stores: they may flush subnormals or canonicalize NaNs.

const uint KV_F32 = 1u;  // include/kipp.h's kipp_kv_type values
const uint KV_F16 = 2u;
const uint KV_BF16 = 3u;

// The f16 bits (low 16) of the f32 whose bits are x.
uint kv_f32_to_f16(uint x) {
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | ((ax >> 13) & 0x3ffu); // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00u; // >= 65520 (ties to even upwards): inf
    if (ax >= 0x38800000u) { // f16 normal: add just under half an ulp, +1 if the kept lsb is odd
        const uint r = ax + 0xfffu + ((ax >> 13) & 1u);
        return sign | ((r - 0x38000000u) >> 13);
    }
    const uint e = ax >> 23;
    if (e < 102u) return sign; // below 2^-25 (2^-25 itself ties to even zero)
    // f16 subnormal in units of 2^-24: the full mantissa shifted right by 14..24 bits
    const uint man = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;
    uint q = man >> shift;
    const uint rem = man & ((1u << shift) - 1u);
    const uint hv = 1u << (shift - 1u);
    if (rem > hv || (rem == hv && (q & 1u) != 0u)) q++; // may carry into the smallest normal
    return sign | q;
}

// The bf16 bits (low 16) of the f32 whose bits are x (a carry into the exponent is right,
// up to inf).
uint kv_f32_to_bf16(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x0040u) & 0xffffu;
    return ((x + 0x7fffu + ((x >> 16) & 1u)) >> 16) & 0xffffu;
}

// A 16-bit element h (low 16 bits) of type t (KV_F16 or KV_BF16) as f32.
float kv_16_to_f32(uint t, uint h) {
    return t == KV_F16 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}
