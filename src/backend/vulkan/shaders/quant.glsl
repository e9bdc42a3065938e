// quant.glsl — GGUF block dequantization for the vulkan backend's weight kernels (matvec.comp,
// matmul.comp, dequant.comp): a port of src/backend/cuda/quant_math.h's "groups of 8"
// decoders, bit-exact with kipp_dequantize_row() (src/core/types.c). Compiled once per weight
// type: WTYPE (the GGUF type id, -DWTYPE=... from backend.mk) picks the one decoder a module
// carries, so each pipeline holds only its own type's code.
//
// The including shader declares the weights as `uint wq[]` (a storage buffer of 32-bit words,
// no 8/16-bit storage types) before including this file. Blocks have no alignment guarantee
// (a Q8_0 row is 34 * n_in / 32 bytes; an expert's matrix starts e * n_out * row_bytes into its
// stack): byte b of the view is (wq[b >> 2] >> 8 (b & 3)) & 0xff, and qu16 / qu32 assemble
// little-endian fields from the one or two words that hold them, never touching a word that
// holds none of the field's bytes (the last block may end the buffer mid-word).
//
// Numerics (types.c's): f16 scales are decoded by integer code (exact for every half:
// subnormals become normal f32, inf and NaN keep sign and payload), the sub-scales and quants
// are small integers, so every product (d * scale, dmin * min, (d * scale) * q) is exact in f32
// and the only rounding is the final addition of a min (Q4_1, Q5_1) or its subtraction (Q2_K,
// Q4_K, Q5_K). The results are `precise` anyway, so no compiler fuses or reorders them.
//
// Interface: WBE / WBB (elements and bytes of a block; the float types are "blocks" of 8),
// WGPB (groups of 8 per block), and deq8(b, g, o): o[0..7] = elements 8g .. 8g+7 of the block
// that starts at byte b of the view.

#ifndef WTYPE
#error "quant.glsl: WTYPE (the GGUF weight type id) must be defined"
#endif

#if WTYPE == 0
#define WBE 8u
#define WBB 32u
#elif WTYPE == 1 || WTYPE == 30
#define WBE 8u
#define WBB 16u
#elif WTYPE == 2 || WTYPE == 20
#define WBE 32u
#define WBB 18u
#elif WTYPE == 3
#define WBE 32u
#define WBB 20u
#elif WTYPE == 6
#define WBE 32u
#define WBB 22u
#elif WTYPE == 7
#define WBE 32u
#define WBB 24u
#elif WTYPE == 8
#define WBE 32u
#define WBB 34u
#elif WTYPE == 10
#define WBE 256u
#define WBB 84u
#elif WTYPE == 11
#define WBE 256u
#define WBB 110u
#elif WTYPE == 12
#define WBE 256u
#define WBB 144u
#elif WTYPE == 13
#define WBE 256u
#define WBB 176u
#elif WTYPE == 14
#define WBE 256u
#define WBB 210u
#elif WTYPE == 23
#define WBE 256u
#define WBB 136u
#else
#error "quant.glsl: unsupported WTYPE"
#endif
#define WGPB (WBE / 8u)

// ---- bytes and fields ----------------------------------------------------------------------

uint qb(uint b) { return (wq[b >> 2] >> ((b & 3u) << 3)) & 0xffu; }

uint qu16(uint b) {
    const uint s = (b & 3u) << 3;
    uint v = wq[b >> 2] >> s;
    if (s == 24u) v |= wq[(b >> 2) + 1u] << 8;
    return v & 0xffffu;
}

uint qu32(uint b) {
    const uint s = (b & 3u) << 3;
    const uint lo = wq[b >> 2];
    if (s == 0u) return lo;
    return (lo >> s) | (wq[(b >> 2) + 1u] << (32u - s));
}

// f16 bits -> f32, exact (types.c's kipp_f16_to_f32): no dependence on the device's half
// conversion (denormal flushing, NaN canonicalization).
float qf16(uint h) {
    const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint bits;
    if (e == 0x1fu) {
        bits = s | 0x7f800000u | (m << 13);
    } else if (e != 0u) {
        bits = s | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0u) {
        bits = s;
    } else { // subnormal m * 2^-24: leading one at bit p becomes the implicit bit
        const int p = findMSB(m);
        bits = s | (uint(p + 103) << 23) | ((m << uint(23 - p)) & 0x7fffffu);
    }
    return uintBitsToFloat(bits);
}

// signed byte i (0..3) of word w
int qs8(uint w, uint i) { return bitfieldExtract(int(w), int(i << 3), 8); }

// IQ4_NL's 16 levels (-127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113) packed as
// signed bytes in four words: a lookup in registers, no table in memory.
int qiq4nl(uint i) {
    const uint w = (i & 8u) != 0u ? ((i & 4u) != 0u ? 0x71594535u : 0x26190D01u)
                                  : ((i & 4u) != 0u ? 0xF6EADDCFu : 0xBFAD9881u);
    return qs8(w, i & 3u);
}

// The nibbles of group g (< 4) of a 32-element block whose qs[16] start at byte q: elements
// 8g .. 8g+7 are the low (g < 2) or high nibbles of qs[8 (g & 1) ..]; n0, n1 get them as the
// low nibble of each byte (element i in byte i & 3 of n0 (i < 4) or n1).
void qnib32(uint q, uint g, out uint n0, out uint n1) {
    const uint a = q + 8u * (g & 1u), sh = 4u * (g >> 1);
    n0 = (qu32(a) >> sh) & 0x0f0f0f0fu;
    n1 = (qu32(a + 4u) >> sh) & 0x0f0f0f0fu;
}

uint qbyte_of(uint w0, uint w1, uint i) { return ((i < 4u ? w0 : w1) >> ((i & 3u) << 3)) & 0xffu; }

#if WTYPE == 12 || WTYPE == 13
// Q4_K / Q5_K: 6-bit scale and min of sub-block s from scales[12] at byte sc (types.c's
// k4_scale_min), times d and dmin.
void qk4_scale_min(uint b, uint s, out float d1, out float m1) {
    const uint sc = b + 4u;
    uint scale, mn;
    if (s < 4u) {
        scale = qb(sc + s) & 63u;
        mn = qb(sc + s + 4u) & 63u;
    } else {
        const uint c = qb(sc + s + 4u);
        scale = (c & 0x0fu) | ((qb(sc + s - 4u) >> 6) << 4);
        mn = (c >> 4) | ((qb(sc + s) >> 6) << 4);
    }
    const uint dd = qu32(b);
    precise float a = qf16(dd & 0xffffu) * float(scale);
    precise float c2 = qf16(dd >> 16) * float(mn);
    d1 = a;
    m1 = c2;
}
#endif

// ---- groups of 8 ---------------------------------------------------------------------------

void deq8(uint b, uint g, out float o[8]) {
#if WTYPE == 0 // F32
    for (uint i = 0u; i < 8u; i++) o[i] = uintBitsToFloat(qu32(b + 4u * i));
#elif WTYPE == 1 || WTYPE == 30 // F16, BF16
    for (uint j = 0u; j < 4u; j++) {
        const uint w = qu32(b + 4u * j);
#if WTYPE == 1
        o[2u * j] = qf16(w & 0xffffu);
        o[2u * j + 1u] = qf16(w >> 16);
#else
        o[2u * j] = uintBitsToFloat(w << 16);
        o[2u * j + 1u] = uintBitsToFloat(w & 0xffff0000u);
#endif
    }
#elif WTYPE == 8 // Q8_0 (34 B): d f16, int8 q[32]; element = q * d
    const float d = qf16(qu16(b));
    const uint q0 = qu32(b + 2u + 8u * g), q1 = qu32(b + 6u + 8u * g);
    for (uint i = 0u; i < 8u; i++) {
        precise float v = float(qs8(i < 4u ? q0 : q1, i & 3u)) * d;
        o[i] = v;
    }
#elif WTYPE == 2 // Q4_0 (18 B): d f16, qs[16]; element = (nibble - 8) * d
    const float d = qf16(qu16(b));
    uint n0, n1;
    qnib32(b + 2u, g, n0, n1);
    for (uint i = 0u; i < 8u; i++) {
        precise float v = float(int(qbyte_of(n0, n1, i)) - 8) * d;
        o[i] = v;
    }
#elif WTYPE == 3 // Q4_1 (20 B): d f16, m f16, qs[16]; element = nibble * d + m
    const uint dm = qu32(b);
    const float d = qf16(dm & 0xffffu), m = qf16(dm >> 16);
    uint n0, n1;
    qnib32(b + 4u, g, n0, n1);
    for (uint i = 0u; i < 8u; i++) {
        precise float v = float(qbyte_of(n0, n1, i)) * d + m;
        o[i] = v;
    }
#elif WTYPE == 20 // IQ4_NL (18 B): d f16, qs[16]; element = d * level[nibble]
    const float d = qf16(qu16(b));
    uint n0, n1;
    qnib32(b + 2u, g, n0, n1);
    for (uint i = 0u; i < 8u; i++) {
        precise float v = d * float(qiq4nl(qbyte_of(n0, n1, i)));
        o[i] = v;
    }
#elif WTYPE == 6 || WTYPE == 7
    // Q5_0 (22 B): d f16, qh u32, qs[16]; element = (value - 16) * d
    // Q5_1 (24 B): d f16, m f16, qh u32, qs[16]; element = value * d + m
    // value: the nibble as Q4_0, bit j of qh as bit 4 (element j = 8g + i)
#if WTYPE == 6
    const float d = qf16(qu16(b));
    const uint qh = qu32(b + 2u) >> (8u * g);
    uint n0, n1;
    qnib32(b + 6u, g, n0, n1);
#else
    const uint dm = qu32(b);
    const float d = qf16(dm & 0xffffu), m = qf16(dm >> 16);
    const uint qh = qu32(b + 4u) >> (8u * g);
    uint n0, n1;
    qnib32(b + 8u, g, n0, n1);
#endif
    for (uint i = 0u; i < 8u; i++) {
        const uint q = qbyte_of(n0, n1, i) | ((qh >> i) & 1u) << 4;
#if WTYPE == 6
        precise float v = float(int(q) - 16) * d;
#else
        precise float v = float(q) * d + m;
#endif
        o[i] = v;
    }
#elif WTYPE == 12 || WTYPE == 13
    // Q4_K (144 B): d @0, dmin @2, scales[12] @4, qs[128] @16. Q5_K (176 B): the same, qh[32]
    // @16, qs[128] @48. Sub-block s = g / 4 is the low (s even) or high nibble of
    // qs[32 (s / 2) + l] (Q5_K: bit s of qh[l] as bit 4); element (d * scale) * q - dmin * min.
    const uint s = g >> 2, sh = 4u * (s & 1u), l0 = 8u * (g & 3u);
    float d1, m1;
    qk4_scale_min(b, s, d1, m1);
#if WTYPE == 12
    const uint qa = b + 16u + 32u * (g >> 3) + l0;
#else
    const uint qa = b + 48u + 32u * (g >> 3) + l0;
    const uint h0 = qu32(b + 16u + l0) >> s, h1 = qu32(b + 20u + l0) >> s;
#endif
    const uint q0 = (qu32(qa) >> sh) & 0x0f0f0f0fu, q1 = (qu32(qa + 4u) >> sh) & 0x0f0f0f0fu;
    for (uint i = 0u; i < 8u; i++) {
        uint q = qbyte_of(q0, q1, i);
#if WTYPE == 13
        q |= (qbyte_of(h0, h1, i) & 1u) << 4;
#endif
        precise float v = d1 * float(q) - m1;
        o[i] = v;
    }
#elif WTYPE == 14
    // Q6_K (210 B): ql[128] @0, qh[64] @128, int8 scales[16] @192, d f16 @208. Element
    // 128h + 32k + l takes the low (k < 2) or high nibble of ql[64h + 32 (k & 1) + l], bits
    // 2k, 2k+1 of qh[32h + l] as bits 4, 5, minus 32; scale scales[8h + l / 16 + 2k];
    // value (d * scale) * q.
    const uint h = g >> 4, k = (g >> 2) & 3u, l0 = 8u * (g & 3u);
    const int sc = qs8(qb(b + 192u + 8u * h + (l0 >> 4) + 2u * k), 0u);
    precise float ds = qf16(qu16(b + 208u)) * float(sc);
    const uint la = b + 64u * h + 32u * (k & 1u) + l0, ha = b + 128u + 32u * h + l0;
    const uint shl = 4u * (k >> 1), shh = 2u * k;
    const uint ql0 = (qu32(la) >> shl) & 0x0f0f0f0fu, ql1 = (qu32(la + 4u) >> shl) & 0x0f0f0f0fu;
    const uint qh0 = (qu32(ha) >> shh) & 0x03030303u, qh1 = (qu32(ha + 4u) >> shh) & 0x03030303u;
    for (uint i = 0u; i < 8u; i++) {
        const int q = int(qbyte_of(ql0, ql1, i) | qbyte_of(qh0, qh1, i) << 4) - 32;
        precise float v = ds * float(q);
        o[i] = v;
    }
#elif WTYPE == 10
    // Q2_K (84 B): scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d @80,
    // dmin @82. Element 128h + 32j + l: 2 bits of qs[32h + l] at 2j; scale byte g / 2;
    // value (d * scale) * q - dmin * min.
    const uint h = g >> 4, j = (g >> 2) & 3u, l0 = 8u * (g & 3u);
    const uint sc = qb(b + (g >> 1)), dd = qu32(b + 80u);
    precise float dl = qf16(dd & 0xffffu) * float(sc & 0x0fu);
    precise float ml = qf16(dd >> 16) * float(sc >> 4);
    const uint qa = b + 16u + 32u * h + l0;
    const uint q0 = (qu32(qa) >> (2u * j)) & 0x03030303u;
    const uint q1 = (qu32(qa + 4u) >> (2u * j)) & 0x03030303u;
    for (uint i = 0u; i < 8u; i++) {
        precise float v = dl * float(qbyte_of(q0, q1, i)) - ml;
        o[i] = v;
    }
#elif WTYPE == 11
    // Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Element 128h + 32j + l:
    // 2 bits of qs[32h + l] at 2j, minus 4 unless bit 4h + j of hmask[l] is set; 6-bit scale
    // s = g / 2 (low 4 bits from scales[s] or scales[s - 8] >> 4, high 2 bits from
    // scales[8 + s % 4] at 2 (s / 4)); value (d * (scale - 32)) * q.
    const uint h = g >> 4, j = (g >> 2) & 3u, l0 = 8u * (g & 3u), s = g >> 1;
    const uint lo = s < 8u ? qb(b + 96u + s) & 0x0fu : qb(b + 88u + s) >> 4;
    const uint hi = (qb(b + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
    precise float dl = qf16(qu16(b + 108u)) * float(int(lo | hi << 4) - 32);
    const uint qa = b + 32u + 32u * h + l0, ma = b + l0, mb = 4u * h + j;
    const uint q0 = (qu32(qa) >> (2u * j)) & 0x03030303u;
    const uint q1 = (qu32(qa + 4u) >> (2u * j)) & 0x03030303u;
    const uint m0 = (qu32(ma) >> mb) & 0x01010101u, m1 = (qu32(ma + 4u) >> mb) & 0x01010101u;
    for (uint i = 0u; i < 8u; i++) {
        const int q = int(qbyte_of(q0, q1, i)) - (qbyte_of(m0, m1, i) != 0u ? 0 : 4);
        precise float v = dl * float(q);
        o[i] = v;
    }
#elif WTYPE == 23
    // IQ4_XS (136 B): d @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block s = g / 4:
    // 6-bit scale (nibble s % 2 of scales_l[s / 2]) | (bits 2s of scales_h) << 4, minus 32,
    // IQ4_NL-coded over qs[16s ..]; value (d * scale) * level.
    const uint s = g >> 2, hd = qu32(b);
    const int ls = int(((qb(b + 4u + (s >> 1)) >> (4u * (s & 1u))) & 0x0fu) |
                       ((hd >> (16u + 2u * s)) & 3u) << 4) - 32;
    precise float dl = qf16(hd & 0xffffu) * float(ls);
    uint n0, n1;
    qnib32(b + 8u + 16u * s, g & 3u, n0, n1);
    for (uint i = 0u; i < 8u; i++) {
        precise float v = dl * float(qiq4nl(qbyte_of(n0, n1, i)));
        o[i] = v;
    }
#endif
}
