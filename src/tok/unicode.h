/* unicode.h — the Unicode the tokenizer needs, made to agree with HF `tokenizers`: lossy
 * UTF-8 decoding with Python's replacement policy, the character classes of the Qwen2 split
 * regex as HF's Oniguruma sees them (\p{L}, \p{N}, \s), and NFC as HF's normalizer computes
 * it. Data comes from utf8proc plus small generated patch tables (unicode.c). Not here:
 * other normal forms, case folding (the regex only folds ASCII and U+017F, done in bpe.c),
 * grapheme or word segmentation. */
#ifndef KIPP_TOK_UNICODE_H
#define KIPP_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define KIPP_TOK_REPLACEMENT 0xFFFDu

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* The code point at byte i < len and its length in *n_bytes (>= 1). An ill-formed sequence
 * gives U+FFFD and the length of its maximal subpart (the longest prefix of a well-formed
 * sequence, at least one byte): the policy of Python's bytes.decode('utf-8', 'replace') and
 * of Rust's String::from_utf8_lossy. Never reads s[len] or beyond. */
uint32_t kipp_tok_utf8_next(const uint8_t *s, size_t len, size_t i, size_t *n_bytes);

/* Length of the longest prefix of s[0..len) that is well-formed UTF-8. */
size_t kipp_tok_utf8_valid_prefix(const uint8_t *s, size_t len);

/* Writes s[0..len) with each maximal ill-formed subpart replaced by U+FFFD (EF BF BD) to out,
 * which must hold 3 * len bytes; returns the bytes written. */
size_t kipp_tok_utf8_repair(const uint8_t *s, size_t len, uint8_t *out);

/* UTF-8 of a scalar value (< 0x110000, not a surrogate) into out[0..4); returns 1..4. */
size_t kipp_tok_utf8_put(uint32_t cp, uint8_t *out);

/* ---- regex character classes -------------------------------------------------------------- */

enum {
    KIPP_CC_OTHER = 0,  /* none of the below: punctuation, symbols, marks, Cn, Co, ... */
    KIPP_CC_LETTER = 1, /* \p{L} */
    KIPP_CC_NUMBER = 2, /* \p{N} */
    KIPP_CC_SPACE = 3,  /* \s: Unicode White_Space (CR and LF included) */
};

/* Class of code point cp, as Oniguruma (Unicode 16.0, inside HF tokenizers) sees it. */
int kipp_tok_cp_class(uint32_t cp);

/* Unicode version of the utf8proc in use, and the one the patch tables were generated
 * against (tests/tok/make_unicode_tables.py); the unit tests insist they are equal. */
const char *kipp_tok_utf8proc_version(void);
const char *kipp_tok_tables_version(void);

/* ---- NFC ---------------------------------------------------------------------------------- */

/* Scratch buffers for NFC, reused across calls; zero-initialize, release with _free. */
typedef struct {
    uint8_t *out;       /* normalized text */
    size_t out_cap;
    int32_t *cps;       /* decomposed code points of one segment */
    size_t cps_cap;
    int32_t *tmp;       /* stable-sort scratch for long runs of combining marks */
    size_t tmp_cap;
} kipp_tok_nfc_buf;

/* NFC of well-formed UTF-8 s[0..len) exactly as HF's NFC normalizer (Unicode 9.0 data)
 * produces it. Text already in NFC is not copied: *out = s. Otherwise *out points into b
 * and stays valid until the next call with b. Returns 0 when out of memory. Cost is linear,
 * including long runs of combining marks. */
int kipp_tok_nfc(const uint8_t *s, size_t len, kipp_tok_nfc_buf *b, const uint8_t **out,
                 size_t *out_len);
void kipp_tok_nfc_buf_free(kipp_tok_nfc_buf *b);

/* 1 when cp is a boundary NFC never changes: combining class 0, NFC_QC=Yes and not the
 * second half of any composition. Exposed for the unit tests. */
int kipp_tok_nfc_stable(uint32_t cp);

#endif
