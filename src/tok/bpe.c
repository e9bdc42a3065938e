/* bpe.c — encoding text with a kipp_vocab: added-token split, the Qwen2 pre-tokenizer
 * (reference §6.3, a hand-written matcher equivalent to the regex, after llama.cpp's
 * unicode_regex_split_custom_qwen2), the GPT-2 byte map and BPE by lowest merge rank.
 * Deliberately not here (yet):
 *  - Unicode categories. The split is exact for ASCII. Above U+007F only the whitespace
 *    set of §6.3 is recognized; every other code point counts as a letter (so CJK, digits
 *    like U+0663 and punctuation like U+3002 are misclassified). A later issue replaces
 *    char_class() with full \p{L}/\p{N} tables.
 *  - NFC. HF normalizes to NFC first; llama.cpp does not; we do not either (§6.6).
 * Invalid UTF-8 never fails: each bad byte is one "letter" whose byte goes through the
 * byte map like any other. */
#include "tok/vocab.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 and character classes ------------------------------------------------------- */

uint32_t kipp_tok_utf8_next(const uint8_t *s, size_t len, size_t i, size_t *n_bytes) {
    *n_bytes = 1;
    uint8_t b = s[i];
    if (b < 0x80)
        return b;
    size_t need;
    uint32_t cp, min;
    if (b >= 0xC2 && b <= 0xDF)
        need = 1, cp = b & 0x1F, min = 0x80;
    else if (b >= 0xE0 && b <= 0xEF)
        need = 2, cp = b & 0x0F, min = 0x800;
    else if (b >= 0xF0 && b <= 0xF4)
        need = 3, cp = b & 0x07, min = 0x10000;
    else
        return KIPP_TOK_BAD_CP;
    if (len - i <= need)
        return KIPP_TOK_BAD_CP;
    for (size_t k = 1; k <= need; k++) {
        if ((s[i + k] & 0xC0) != 0x80)
            return KIPP_TOK_BAD_CP;
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return KIPP_TOK_BAD_CP;
    *n_bytes = need + 1;
    return cp;
}

enum { C_END, C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static int char_class(uint32_t cp) {
    if (cp < 0x80) {
        uint32_t lower = cp | 0x20;
        if (lower >= 'a' && lower <= 'z')
            return C_LETTER;
        if (cp >= '0' && cp <= '9')
            return C_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
            return C_SPACE;
        return C_OTHER;
    }
    /* llama.cpp's whitespace set above ASCII (§6.3) */
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
        cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return C_SPACE;
    return C_LETTER; /* placeholder for \p{L}: see the file header */
}

typedef struct {
    const uint8_t *s;
    size_t len;
} cursor;

/* Class of the code point at byte i (C_END past the end), its size in *n. */
static int class_at(const cursor *c, size_t i, size_t *n) {
    if (i >= c->len) {
        *n = 0;
        return C_END;
    }
    return char_class(kipp_tok_utf8_next(c->s, c->len, i, n));
}

static int is_crlf(const cursor *c, size_t i) {
    return i < c->len && (c->s[i] == '\r' || c->s[i] == '\n');
}

static uint8_t ascii_lower_at(const cursor *c, size_t i) {
    if (i >= c->len)
        return 0;
    uint8_t b = c->s[i];
    return b >= 'A' && b <= 'Z' ? (uint8_t)(b | 0x20) : b;
}

size_t kipp_tok_word_end(const char *text, size_t len, size_t pos) {
    const cursor c = {(const uint8_t *)text, len};
    if (pos >= len)
        return len;
    size_t n0, n;
    int k0 = class_at(&c, pos, &n0);
    size_t p1 = pos + n0;

    /* 1. (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c.s[pos] == '\'') {
        uint8_t a = ascii_lower_at(&c, p1), b = ascii_lower_at(&c, p1 + 1);
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return p1 + 1;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return p1 + 2;
    }
    /* 2. [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!is_crlf(&c, pos) && k0 != C_NUMBER &&
        (k0 == C_LETTER || class_at(&c, p1, &n) == C_LETTER)) {
        size_t p = p1;
        while (class_at(&c, p, &n) == C_LETTER)
            p += n;
        return p;
    }
    /* 3. \p{N}: one digit per word (not Llama-3's groups of three) */
    if (k0 == C_NUMBER)
        return p1;
    /* 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    size_t p = c.s[pos] == ' ' ? p1 : pos;
    if (class_at(&c, p, &n) == C_OTHER) {
        while (class_at(&c, p, &n) == C_OTHER)
            p += n;
        while (is_crlf(&c, p))
            p++;
        return p;
    }
    /* 5.-7. whitespace runs */
    if (k0 == C_SPACE) {
        size_t last_nl_end = 0, last_start = pos, count = 0;
        p = pos;
        while (class_at(&c, p, &n) == C_SPACE) {
            last_start = p;
            p += n;
            count++;
            if (c.s[p - 1] == '\r' || c.s[p - 1] == '\n')
                last_nl_end = p;
        }
        if (last_nl_end)             /* \s*[\r\n]+ : up to the last newline */
            return last_nl_end;
        if (count > 1 && p < len)    /* \s+(?!\S) : leave the last one to the next word */
            return last_start;
        return p;                    /* \s+ */
    }
    return p1; /* unreachable for the classes above; one code point keeps us moving */
}

/* ---- BPE within one word --------------------------------------------------------------- */

typedef struct {
    int32_t id;         /* token id; -1 when the vocab lacks this byte (dropped at the end) */
    int32_t prev, next; /* neighbours among live symbols, -1 at the ends */
    int32_t live;
} sym;

typedef struct {
    uint32_t rank;
    int32_t left, right;       /* symbol indices */
    int32_t left_id, right_id; /* ids when pushed: a stale entry no longer matches */
} cand_pair;

typedef struct {
    sym *syms;
    cand_pair *heap;
    size_t sym_cap, heap_cap, heap_len;
    int32_t *ids;
    size_t n_ids, ids_cap;
} scratch;

/* Heap order: lowest rank first, then leftmost, which is what HF and llama.cpp do. */
static int pair_before(const cand_pair *a, const cand_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(scratch *w, cand_pair e) {
    size_t i = w->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&e, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = e;
}

static cand_pair heap_pop(scratch *w) {
    cand_pair top = w->heap[0], last = w->heap[--w->heap_len];
    size_t i = 0, n = w->heap_len;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && pair_before(&w->heap[child + 1], &w->heap[child]))
            child++;
        if (!pair_before(&w->heap[child], &last))
            break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static void try_pair(scratch *w, const kipp_vocab *v, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return;
    uint32_t rank;
    int32_t result;
    if (kipp_vocab_merge(v, w->syms[left].id, w->syms[right].id, &rank, &result))
        heap_push(w, (cand_pair){rank, left, right, w->syms[left].id, w->syms[right].id});
}

static int push_id(scratch *w, int32_t id) {
    if (w->n_ids == w->ids_cap) {
        size_t cap = w->ids_cap ? w->ids_cap * 2 : 64;
        int32_t *p = realloc(w->ids, cap * sizeof *p);
        if (!p)
            return 0;
        w->ids = p;
        w->ids_cap = cap;
    }
    w->ids[w->n_ids++] = id;
    return 1;
}

/* Symbols start as one byte token each; the merge heap holds every adjacent pair with a
 * rank and is lazily invalidated, so a word of n bytes costs O(n log n) (no quadratic
 * rescans, even for a hostile 100 MB word). */
static int bpe_word(scratch *w, const kipp_vocab *v, const uint8_t *s, size_t n) {
    if (n == 1) {
        int32_t id = kipp_vocab_byte_token(v, s[0]);
        return id < 0 || push_id(w, id);
    }
    if (n > w->sym_cap) {
        free(w->syms);
        w->syms = malloc(n * sizeof *w->syms);
        w->sym_cap = w->syms ? n : 0;
        if (!w->syms)
            return 0;
    }
    if (3 * n > w->heap_cap) { /* n - 1 initial pairs + at most 2 per merge */
        free(w->heap);
        w->heap = malloc(3 * n * sizeof *w->heap);
        w->heap_cap = w->heap ? 3 * n : 0;
        if (!w->heap)
            return 0;
    }
    for (size_t i = 0; i < n; i++)
        w->syms[i] = (sym){kipp_vocab_byte_token(v, s[i]), (int32_t)i - 1,
                           i + 1 < n ? (int32_t)i + 1 : -1, 1};
    w->heap_len = 0;
    for (size_t i = 0; i + 1 < n; i++)
        try_pair(w, v, (int32_t)i, (int32_t)i + 1);
    while (w->heap_len > 0) {
        cand_pair e = heap_pop(w);
        sym *l = &w->syms[e.left], *r = &w->syms[e.right];
        if (!l->live || l->next != e.right || l->id != e.left_id || r->id != e.right_id)
            continue; /* stale: one side has merged since this pair was queued */
        uint32_t rank;
        int32_t result;
        kipp_vocab_merge(v, l->id, r->id, &rank, &result);
        l->id = result;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = e.left;
        r->live = 0;
        try_pair(w, v, l->prev, e.left);
        try_pair(w, v, e.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) /* symbol 0 is never merged away */
        if (w->syms[i].id >= 0 && !push_id(w, w->syms[i].id))
            return 0;
    return 1;
}

/* ---- added-token split ----------------------------------------------------------------- */

typedef struct {
    size_t off, len;
    int32_t id; /* -1: raw text still to pre-tokenize */
} fragment;

typedef struct {
    fragment *f;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, size_t off, size_t len, int32_t id) {
    if (len == 0)
        return 1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        fragment *p = realloc(l->f, cap * sizeof *p);
        if (!p)
            return 0;
        l->f = p;
        l->cap = cap;
    }
    l->f[l->n++] = (fragment){off, len, id};
    return 1;
}

/* Cuts every raw fragment of *cur at each occurrence of special token id (left to right,
 * non-overlapping) into *next; swaps the lists if anything matched. Candidates are tried
 * longest first (llama.cpp's order; for Qwen's added tokens this agrees with HF's
 * leftmost-longest matching because no added token contains another). */
static int split_on(frag_list *cur, frag_list *next, const char *text, const char *tok,
                    size_t tok_len, int32_t id) {
    next->n = 0;
    int matched = 0;
    for (size_t i = 0; i < cur->n; i++) {
        fragment f = cur->f[i];
        if (f.id >= 0 || f.len < tok_len) {
            if (!frag_push(next, f.off, f.len, f.id))
                return 0;
            continue;
        }
        size_t start = f.off, p = f.off, end = f.off + f.len;
        while (end - p >= tok_len) {
            const char *q = memchr(text + p, tok[0], end - p - tok_len + 1);
            if (!q)
                break;
            size_t at = (size_t)(q - text);
            if (memcmp(q, tok, tok_len) != 0) {
                p = at + 1;
                continue;
            }
            if (!frag_push(next, start, at - start, -1) || !frag_push(next, at, tok_len, id))
                return 0;
            matched = 1;
            start = p = at + tok_len;
        }
        if (!frag_push(next, start, end - start, -1))
            return 0;
    }
    if (matched) {
        frag_list t = *cur;
        *cur = *next;
        *next = t;
    }
    return 1;
}

/* ---- encode ---------------------------------------------------------------------------- */

kipp_status kipp_vocab_encode(const kipp_vocab *v, const char *text, size_t len,
                              int parse_special, int32_t **ids_out, size_t *n_out, char *err,
                              size_t err_len) {
    if (!ids_out || !n_out)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "encode: ids_out/n_out is NULL");
    *ids_out = NULL;
    *n_out = 0;
    if (!v || (!text && len))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "encode: vocab or text is NULL");
    /* int32 symbol links and a 3n heap bound the length of one word. */
    if (len > (size_t)INT32_MAX / 4)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "encode: text of %zu bytes is longer than the %d-byte limit", len,
                         INT32_MAX / 4);
    scratch w = {0};
    frag_list cur = {0}, next = {0};
    kipp_status st = KIPP_OK;
    if (!frag_push(&cur, 0, len, -1) || !push_id(&w, 0))
        goto nomem;
    w.n_ids = 0; /* ids is allocated from here on, so the result is never NULL */

    for (uint32_t i = 0; i < kipp_vocab_n_specials(v); i++) {
        int32_t id = kipp_vocab_special_at(v, i);
        int t = kipp_vocab_token_type(v, id);
        if (!parse_special && (t == KIPP_TOKEN_CONTROL || t == KIPP_TOKEN_UNKNOWN))
            continue;
        size_t tok_len;
        const char *tok = kipp_vocab_token_text(v, id, &tok_len);
        if (!split_on(&cur, &next, text, tok, tok_len, id))
            goto nomem;
    }
    for (size_t i = 0; i < cur.n; i++) {
        const fragment *f = &cur.f[i];
        if (f->id >= 0) {
            if (!push_id(&w, f->id))
                goto nomem;
            continue;
        }
        const char *s = text + f->off;
        for (size_t p = 0; p < f->len;) {
            size_t e = kipp_tok_word_end(s, f->len, p);
            if (!bpe_word(&w, v, (const uint8_t *)s + p, e - p))
                goto nomem;
            p = e;
        }
    }
    *ids_out = w.ids;
    *n_out = w.n_ids;
    w.ids = NULL;
    goto done;
nomem:
    st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "encode: out of memory (text of %zu bytes)",
                   len);
done:
    free(w.ids);
    free(w.syms);
    free(w.heap);
    free(cur.f);
    free(next.f);
    return st;
}
