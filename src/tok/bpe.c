/* bpe.c — encoding text with a kipp_vocab the way HF tokenizers encodes with Qwen's
 * tokenizer.json: invalid UTF-8 repaired as Python's decode('utf-8', 'replace') does,
 * added tokens cut out of the raw text (vocab.c's matcher), NFC (unicode.c), the Qwen2
 * split regex (a hand-written matcher with Oniguruma's semantics, reference §6.3), the
 * GPT-2 byte map and BPE by lowest merge rank.
 * Deliberately not here: other pre-tokenizers (the GGUF loader refuses them), BPE dropout,
 * a word cache (merges run on ids through the hash tables; the heap keeps hostile long
 * words O(n log n)). */
#include "tok/vocab.h"

#include "core/buf.h"
#include "core/error.h"
#include "tok/unicode.h"

#include <stdlib.h>
#include <string.h>

/* ---- the split regex ------------------------------------------------------------------
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+
 * Oniguruma tries the alternatives in order at each position and takes the first that
 * matches (not the longest); every character matches some alternative, so the words tile
 * the text. Classes: unicode.h. */

enum { O = KIPP_CC_OTHER, L = KIPP_CC_LETTER, N = KIPP_CC_NUMBER, S = KIPP_CC_SPACE };

static const uint8_t ascii_class[128] = {
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, /* 0x00: TAB..CR are \s */
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x10 */
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x20: space, punctuation */
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O, /* 0x30: digits */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x40 */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x50 */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x60 */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x70 */
};

/* Class of the code point at byte i < len, its length in *n. */
static inline int class_at(const uint8_t *s, size_t len, size_t i, size_t *n) {
    if (s[i] < 0x80) {
        *n = 1;
        return ascii_class[s[i]];
    }
    return kipp_tok_cp_class(kipp_tok_utf8_next(s, len, i, n));
}

static inline uint8_t ascii_lower(uint8_t b) { return b >= 'A' && b <= 'Z' ? b | 0x20 : b; }
static inline int is_crlf(uint8_t b) { return b == '\r' || b == '\n'; }

/* End of the run of class k starting at p. */
static inline size_t run_end(const uint8_t *s, size_t len, size_t p, int k) {
    size_t n;
    while (p < len && class_at(s, len, p, &n) == k)
        p += n;
    return p;
}

size_t kipp_tok_word_end(const char *text, size_t len, size_t pos) {
    const uint8_t *s = (const uint8_t *)text;
    if (!text || pos >= len)
        return len;
    size_t n0, n1;
    int k0 = class_at(s, len, pos, &n0);
    size_t p1 = pos + n0;

    /* 1. (?i:'s|'t|'re|'ve|'m|'ll|'d): case folding also lets U+017F LONG S match 's'
     * (Kelvin sign and friends are not in the list, and NFC has already mapped them) */
    if (s[pos] == '\'' && p1 < len) {
        uint8_t a = ascii_lower(s[p1]), b = p1 + 1 < len ? ascii_lower(s[p1 + 1]) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return p1 + 1;
        if (s[p1] == 0xC5 && p1 + 1 < len && s[p1 + 1] == 0xBF)
            return p1 + 2;
        if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l'))
            return p1 + 2;
    }
    /* 2. [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k0 == L)
        return run_end(s, len, p1, L);
    if (k0 != N && !is_crlf(s[pos]) && p1 < len && class_at(s, len, p1, &n1) == L)
        return run_end(s, len, p1 + n1, L);
    /* 3. \p{N}: one digit per word (not Llama-3's groups of three) */
    if (k0 == N)
        return p1;
    /* 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    size_t p = s[pos] == ' ' ? p1 : pos, n;
    if (p < len && class_at(s, len, p, &n) == O) {
        p = run_end(s, len, p + n, O);
        while (p < len && is_crlf(s[p]))
            p++;
        return p;
    }
    /* 5.-7. a whitespace run (k0 is S here) */
    size_t last_nl_end = 0, last_start = pos, count = 0;
    for (p = pos; p < len && class_at(s, len, p, &n) == S; p += n, count++) {
        last_start = p;
        if (is_crlf(s[p]))
            last_nl_end = p + 1;
    }
    if (count == 0)
        return p1; /* not reached: every class is handled above */
    if (last_nl_end)          /* \s*[\r\n]+ : up to the last newline of the run */
        return last_nl_end;
    if (count > 1 && p < len) /* \s+(?!\S) : backtracks one, leaving the last to the word */
        return last_start;
    return p;                 /* \s+ */
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
    if (kipp_grow((void **)&w->ids, &w->ids_cap, w->n_ids + 1, sizeof *w->ids) != KIPP_OK)
        return 0;
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

/* ---- encode ---------------------------------------------------------------------------- */

/* NFC, split and BPE of one fragment of text between added tokens. */
static int encode_fragment(scratch *w, kipp_tok_nfc_buf *nb, const kipp_vocab *v,
                           const uint8_t *s, size_t n) {
    const uint8_t *t;
    size_t tn;
    if (!kipp_tok_nfc(s, n, nb, &t, &tn))
        return 0;
    for (size_t p = 0; p < tn;) {
        size_t e = kipp_tok_word_end((const char *)t, tn, p);
        if (!bpe_word(w, v, t + p, e - p))
            return 0;
        p = e;
    }
    return 1;
}

static kipp_status encode(const kipp_vocab *v, const char *text, size_t len, int parse_special,
                          const size_t *plain, size_t n_plain, int32_t **ids_out,
                          size_t *n_out, char *err, size_t err_len);

kipp_status kipp_vocab_encode(const kipp_vocab *v, const char *text, size_t len,
                              int parse_special, int32_t **ids_out, size_t *n_out, char *err,
                              size_t err_len) {
    return encode(v, text, len, parse_special, NULL, 0, ids_out, n_out, err, err_len);
}

kipp_status kipp_vocab_encode_spans(const kipp_vocab *v, const char *text, size_t len,
                                    const size_t *plain, size_t n_plain, int32_t **ids_out,
                                    size_t *n_out, char *err, size_t err_len) {
    return encode(v, text, len, 1, plain, n_plain, ids_out, n_out, err, err_len);
}

/* Whether byte offset p lies in one of the plain ranges (sorted or not: few of them). */
static int in_plain(const size_t *plain, size_t n_plain, size_t p) {
    for (size_t i = 0; i < n_plain; i++)
        if (p >= plain[2 * i] && p < plain[2 * i + 1]) return 1;
    return 0;
}

static kipp_status encode(const kipp_vocab *v, const char *text, size_t len, int parse_special,
                          const size_t *plain, size_t n_plain, int32_t **ids_out,
                          size_t *n_out, char *err, size_t err_len) {
    if (!ids_out || !n_out)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "encode: ids_out/n_out is NULL");
    *ids_out = NULL;
    *n_out = 0;
    if (!v || (!text && len))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "encode: vocab or text is NULL");
    /* Repair and NFC grow text at most 3x; int32 symbol links must still index a word. */
    if (len > (size_t)INT32_MAX / 4)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "encode: text of %zu bytes is longer than the %d-byte limit", len,
                         INT32_MAX / 4);
    scratch w = {0};
    kipp_tok_nfc_buf nb = {0};
    uint8_t *repaired = NULL;
    kipp_status st = KIPP_OK;
    const uint8_t *t = (const uint8_t *)text;
    size_t tn = len;
    if (!push_id(&w, 0))
        goto nomem;
    w.n_ids = 0; /* ids is allocated from here on, so the result is never NULL */

    size_t valid = len ? kipp_tok_utf8_valid_prefix(t, len) : 0;
    if (valid < len) { /* what HF sees is Python's decode('utf-8', 'replace') of the bytes */
        repaired = malloc(3 * len);
        if (!repaired)
            goto nomem;
        memcpy(repaired, t, valid);
        tn = valid + kipp_tok_utf8_repair(t + valid, len - valid, repaired + valid);
        t = repaired;
        if (n_plain) parse_special = 0; /* offsets moved: every special token is text */
        n_plain = 0;
    }
    for (size_t start = 0; start < tn;) {
        int32_t id = -1;
        size_t tok_len = 0;
        size_t at = kipp_vocab_next_added(v, (const char *)t, tn, start, parse_special, &id,
                                          &tok_len);
        /* a special token that begins in a plain range is text: like HF's
         * split_special_tokens, the match is dropped whole and the search goes on after it */
        while (n_plain && at < tn && kipp_vocab_is_special(v, id) && in_plain(plain, n_plain, at))
            at = kipp_vocab_next_added(v, (const char *)t, tn, at + tok_len, parse_special, &id,
                                       &tok_len);
        if (at > start && !encode_fragment(&w, &nb, v, t + start, at - start))
            goto nomem;
        if (at >= tn)
            break;
        if (!push_id(&w, id))
            goto nomem;
        start = at + tok_len;
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
    free(repaired);
    kipp_tok_nfc_buf_free(&nb);
    return st;
}
