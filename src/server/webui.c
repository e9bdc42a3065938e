/* webui.c — the web chat page served at / : src/server/webui/index.html pulled into the
 * binary with the assembler's .incbin (the Makefile makes this object depend on the page, so
 * editing the page rebuilds the server), and its Content-Security-Policy, which names each
 * inline <script> and <style> element of the page by its SHA-256, computed here from the
 * embedded bytes so the header cannot drift from the page. Not here: routing, the API key
 * and the other headers (http.c); what the page does (index.html). Design: docs/server.md. */
#include "server/webui.h"

#include "server/openai.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Read-only data, one NUL after the page so it is also a C string. The path is relative to
 * the directory make runs in (the repository root). */
__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".globl kipp_webui_html\n"
        ".hidden kipp_webui_html\n"
        "kipp_webui_html:\n"
        ".incbin \"src/server/webui/index.html\"\n"
        ".globl kipp_webui_html_end\n"
        ".hidden kipp_webui_html_end\n"
        "kipp_webui_html_end:\n"
        ".byte 0\n"
        ".popsection\n");
extern const char kipp_webui_html[], kipp_webui_html_end[];

const char *kipp_webui_page(size_t *n_bytes) {
    *n_bytes = (size_t)(kipp_webui_html_end - kipp_webui_html);
    return kipp_webui_html;
}

/* ---- SHA-256 (FIPS 180-4) and base64: the CSP's 'sha256-…' sources ------------------------ */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        const uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256(const void *data, size_t n, unsigned char out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *p = data;
    size_t left = n;
    for (; left >= 64; p += 64, left -= 64) sha256_block(h, p);
    unsigned char tail[128] = {0}; /* the rest, 0x80, zeros, the bit length: one or two blocks */
    memcpy(tail, p, left);
    tail[left] = 0x80;
    const size_t n_tail = left < 56 ? 64 : 128;
    const uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[n_tail - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t off = 0; off < n_tail; off += 64) sha256_block(h, tail + off);
    for (int i = 0; i < 32; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

/* 32 bytes as 44 base64 characters and a NUL. */
static void base64_32(const unsigned char in[32], char out[45]) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = out;
    for (int i = 0; i < 32; i += 3) {
        const uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < 32 ? (uint32_t)in[i + 1] << 8 : 0) |
                           (i + 2 < 32 ? in[i + 2] : 0);
        *o++ = al[v >> 18 & 63];
        *o++ = al[v >> 12 & 63];
        *o++ = i + 1 < 32 ? al[v >> 6 & 63] : '=';
        *o++ = i + 2 < 32 ? al[v & 63] : '=';
    }
    *o = 0;
}

/* ---- the policy ------------------------------------------------------------------------- */

/* Appends " 'sha256-…'" to scripts or styles for every inline <script> and <style> element
 * of the page, in page order: one pass that skips comments, so a tag's name inside a comment
 * or the other kind's text is not taken for an element. The page is ours and is written with lowercase tags, no src=
 * scripts and no "</script>" or "</style>" inside an element; a browser hashes exactly the
 * bytes between the tags. */
static int add_hashes(kipp_buf *scripts, kipp_buf *styles, const char *page) {
    for (const char *p = page; (p = strchr(p, '<'));) {
        if (!strncmp(p, "<!--", 4)) { /* a comment may name the tags */
            const char *e = strstr(p + 4, "-->");
            if (!e) break;
            p = e + 3;
            continue;
        }
        const int is_script = !strncmp(p, "<script", 7), is_style = !strncmp(p, "<style", 6);
        const char *after = p + (is_script ? 7 : 6);
        if ((!is_script && !is_style) || (*after != '>' && *after != ' ')) { p++; continue; }
        const char *body = strchr(after, '>');
        const char *end = body ? strstr(body + 1, is_script ? "</script>" : "</style>") : NULL;
        if (!end) break;
        body++;
        unsigned char d[32];
        char b64[45];
        sha256(body, (size_t)(end - body), d);
        base64_32(d, b64);
        kipp_buf *b = is_script ? scripts : styles;
        if (kipp_buf_put(b, " 'sha256-", 9) || kipp_buf_put(b, b64, 44) || kipp_buf_put(b, "'", 1))
            return -1;
        p = end;
    }
    return 0;
}

char *kipp_webui_csp(void) {
    size_t n;
    const char *page = kipp_webui_page(&n);
    const char *fixed = "default-src 'none'; base-uri 'none'; form-action 'none'; "
                        "frame-ancestors 'none'; img-src data:; connect-src 'self'; script-src";
    kipp_buf b = {0}, styles = {0};
    int bad = kipp_buf_put(&b, fixed, strlen(fixed)) || kipp_buf_put(&styles, "; style-src", 11) ||
              add_hashes(&b, &styles, page) || kipp_buf_put(&b, styles.data, styles.len);
    kipp_buf_free(&styles);
    if (bad) {
        kipp_buf_free(&b);
        return NULL;
    }
    return b.data; /* malloc'd and NUL-terminated by kipp_buf_put */
}
