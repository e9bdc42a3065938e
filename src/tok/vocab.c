/* vocab.c — the tables of a byte-level BPE vocabulary: token strings and their decoded
 * bytes, an open-addressing hash from string to id, an open-addressing hash of merge pairs
 * (left id, right id) -> (rank, result id), the added-token matcher (HF's leftmost-longest
 * rule, indexed by first byte), HF's "special" flags and the EOG set; plus building all that
 * from arrays or from a GGUF. Encoding lives in bpe.c, streaming decoding in detok.c.
 * Deliberately not here: SentencePiece/WordPiece vocabularies, lstrip/rstrip/single_word
 * added tokens (GGUF does not carry those flags; Qwen's are all false). */
#include "tok/vocab.h"

#include "core/buf.h"
#include "core/error.h"
#include "tok/unicode.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key; /* (left << 32) | right; EMPTY_KEY when the slot is free */
    uint32_t rank;
    int32_t result;
} merge_slot;

#define EMPTY_KEY UINT64_MAX /* ids are < 2^31, so no real key has all bits set */

enum { FLAG_ADDED = 1, FLAG_SPECIAL = 2 };

/* Qwen added tokens that HF marks special=false although the GGUF converter types every
 * <|...|> token CONTROL: HF matches them even with split_special_tokens and decode keeps
 * them with skip_special_tokens. */
static const char *const qwen_nonspecial_control[] = {
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>",
};

struct kipp_vocab {
    uint32_t n_tokens;
    char *text;          /* all token strings, each NUL-terminated */
    size_t *text_off;    /* [n_tokens + 1]; length of i = off[i+1] - off[i] - 1 */
    char *bytes;         /* decoded bytes of every token, NUL-terminated */
    size_t *bytes_off;   /* [n_tokens + 1] */
    uint8_t *type;       /* [n_tokens] KIPP_TOKEN_* */

    int32_t *tok_slots;  /* string hash: id or -1; capacity tok_mask + 1 (power of two) */
    size_t tok_mask;
    merge_slot *merge_slots;
    size_t merge_mask;

    int32_t byte_token[256];
    uint8_t *flags;      /* [n_tokens] FLAG_* */
    /* Added tokens ordered by (first byte, length descending, id): those starting with
     * byte b are added_order[added_first[b] .. added_first[b + 1]). */
    int32_t *added_order;
    uint32_t n_added;
    uint32_t added_first[257];
    int single_first;    /* the one first byte all added tokens share, or -1 */
    char *added_piece;   /* decode text of added tokens, NUL-separated, by added_order */
    size_t *added_piece_off; /* [n_added + 1], parallel to added_order */
    int32_t eog[6];
    uint32_t n_eog;
    uint32_t eos, bos;
};

/* ---- GPT-2 byte map (reference §6.4) --------------------------------------------------- */

static int byte_is_identity(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* Code point that byte b is written as in vocab strings. */
static uint32_t byte_to_cp(unsigned b) {
    if (byte_is_identity(b))
        return b;
    uint32_t k = 0; /* rank of b among the 68 non-identity bytes */
    for (unsigned x = 0; x < b; x++)
        k += !byte_is_identity(x);
    return 0x100 + k;
}

#define BYTE_MAP_CPS (0x100 + 68) /* the alphabet lies below U+0144 */

/* Inverse map as a table (inv[cp] = byte, -1 outside the alphabet), built per vocab init
 * rather than kept as mutable global state. */
static void byte_map_inverse(int16_t inv[BYTE_MAP_CPS]) {
    for (unsigned cp = 0; cp < BYTE_MAP_CPS; cp++)
        inv[cp] = -1;
    for (unsigned b = 0; b < 256; b++)
        inv[byte_to_cp(b)] = (int16_t)b;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6)); /* the byte map only reaches U+0143 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ---- hashing --------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a: tokens are short */
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29); /* the low bits index the table: fold the high bits in */
}

static uint64_t hash_u64(uint64_t x) { /* splitmix64 finalizer */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Power-of-two capacity at least 2n (load factor <= 1/2 keeps probes short). */
static size_t table_cap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

static const char *tok_text(const kipp_vocab *v, uint32_t id, size_t *len) {
    *len = v->text_off[id + 1] - v->text_off[id] - 1;
    return v->text + v->text_off[id];
}

int32_t kipp_vocab_find(const kipp_vocab *v, const char *text, size_t len) {
    if (!v || (!text && len))
        return -1;
    for (size_t i = hash_bytes(text, len) & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        int32_t id = v->tok_slots[i];
        if (id < 0)
            return -1;
        size_t n;
        const char *s = tok_text(v, (uint32_t)id, &n);
        if (n == len && (len == 0 || memcmp(s, text, len) == 0))
            return id;
    }
}

int kipp_vocab_merge(const kipp_vocab *v, int32_t left, int32_t right, uint32_t *rank,
                     int32_t *result) {
    if (left < 0 || right < 0)
        return 0;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = hash_u64(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const merge_slot *s = &v->merge_slots[i];
        if (s->key == EMPTY_KEY)
            return 0;
        if (s->key == key) {
            *rank = s->rank;
            *result = s->result;
            return 1;
        }
    }
}

/* ---- building -------------------------------------------------------------------------- */

/* Text through the inverse byte map into out (never longer than the text): every
 * character must be in the byte alphabet, otherwise the text is kept as it is. That is
 * HF's ByteLevel decoder, which decides token by token. Returns the length. */
static size_t byte_unmap(const char *s, size_t n, const int16_t *inv, char *out) {
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = kipp_tok_utf8_next((const uint8_t *)s, n, i, &k);
        int b = cp < BYTE_MAP_CPS ? inv[cp] : -1;
        if (b < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[m++] = (char)b;
        i += k;
    }
    return m;
}

/* Decoded bytes of one token (kipp_vocab_token_bytes) into out; returns the length. */
static size_t decode_token(const char *s, size_t n, int type, const int16_t *inv, char *out) {
    if (type == KIPP_TOKEN_USER_DEFINED) {
        memcpy(out, s, n);
        return n;
    }
    if (type != KIPP_TOKEN_NORMAL && type != KIPP_TOKEN_BYTE)
        return 0;
    return byte_unmap(s, n, inv, out);
}

typedef struct {
    uint8_t first;
    size_t len;
    int32_t id;
} added_key;

static int added_cmp(const void *pa, const void *pb) {
    const added_key *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int is_added_type(int t) {
    return t == KIPP_TOKEN_CONTROL || t == KIPP_TOKEN_USER_DEFINED || t == KIPP_TOKEN_UNKNOWN;
}

/* Flags, the first-byte index of added tokens and their decode pieces. */
static kipp_status build_added(kipp_vocab *v, const int16_t *inv, char *err, size_t err_len) {
    uint32_t n = v->n_tokens, k = 0;
    size_t piece_bytes = 0;
    v->flags = calloc(n, 1);
    if (!v->flags)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for token flags");
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *t = tok_text(v, i, &len);
        if (!len || !is_added_type(v->type[i]))
            continue;
        v->flags[i] = FLAG_ADDED;
        if (v->type[i] != KIPP_TOKEN_USER_DEFINED) {
            v->flags[i] |= FLAG_SPECIAL;
            for (size_t q = 0; q < sizeof qwen_nonspecial_control / sizeof(char *); q++)
                if (strlen(qwen_nonspecial_control[q]) == len &&
                    memcmp(qwen_nonspecial_control[q], t, len) == 0)
                    v->flags[i] &= (uint8_t)~FLAG_SPECIAL;
        }
        k++;
        piece_bytes += len + 1;
    }
    added_key *keys = malloc(((size_t)k + 1) * sizeof *keys);
    v->added_order = malloc(((size_t)k + 1) * sizeof *v->added_order);
    v->added_piece = malloc(piece_bytes + 1);
    v->added_piece_off = malloc(((size_t)k + 1) * sizeof *v->added_piece_off);
    if (!keys || !v->added_order || !v->added_piece || !v->added_piece_off) {
        free(keys);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for added tokens");
    }
    k = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *t = tok_text(v, i, &len);
        if (v->flags[i] & FLAG_ADDED)
            keys[k++] = (added_key){(uint8_t)t[0], len, (int32_t)i};
    }
    qsort(keys, k, sizeof *keys, added_cmp);
    memset(v->added_first, 0, sizeof v->added_first);
    size_t off = 0;
    for (uint32_t i = 0; i < k; i++) {
        size_t len;
        const char *t = tok_text(v, (uint32_t)keys[i].id, &len);
        v->added_order[i] = keys[i].id;
        v->added_first[keys[i].first + 1]++;
        v->added_piece_off[i] = off;
        off += byte_unmap(t, len, inv, v->added_piece + off);
        v->added_piece[off++] = 0;
    }
    v->added_piece_off[k] = off;
    for (int b = 0; b < 256; b++)
        v->added_first[b + 1] += v->added_first[b];
    v->n_added = k;
    v->single_first = k ? keys[0].first : -1;
    for (uint32_t i = 1; i < k; i++)
        if (keys[i].first != keys[0].first)
            v->single_first = -1;
    free(keys);
    return KIPP_OK;
}

static kipp_status build_tokens(kipp_vocab *v, const char *const *tokens,
                                const size_t *token_lens, const int32_t *token_types,
                                char *err, size_t err_len) {
    uint32_t n = v->n_tokens;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!tokens[i] && token_lens[i])
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "token %u is NULL", i);
        if (!kipp_add_ok(total, token_lens[i], &total) || !kipp_add_ok(total, 1, &total) ||
            total > SIZE_MAX / 2)
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                             "token strings overflow the address space at token %u", i);
        int t = token_types ? token_types[i] : KIPP_TOKEN_NORMAL;
        if (t < KIPP_TOKEN_NORMAL || t > KIPP_TOKEN_BYTE)
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                             "token %u has token type %d (expected 1..6)", i, (int)t);
    }
    v->text = malloc(total);
    v->bytes = malloc(total);
    v->text_off = malloc(((size_t)n + 1) * sizeof *v->text_off);
    v->bytes_off = malloc(((size_t)n + 1) * sizeof *v->bytes_off);
    v->type = malloc(n);
    v->tok_mask = table_cap(n) - 1;
    v->tok_slots = malloc((v->tok_mask + 1) * sizeof *v->tok_slots);
    if (!v->text || !v->bytes || !v->text_off || !v->bytes_off || !v->type || !v->tok_slots)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for %u tokens", n);
    memset(v->tok_slots, 0xFF, (v->tok_mask + 1) * sizeof *v->tok_slots); /* all -1 */

    int16_t inv[BYTE_MAP_CPS];
    byte_map_inverse(inv);
    size_t off = 0, boff = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = token_lens[i];
        int t = token_types ? token_types[i] : KIPP_TOKEN_NORMAL;
        v->type[i] = (uint8_t)t;
        v->text_off[i] = off;
        if (len)
            memcpy(v->text + off, tokens[i], len);
        v->text[off + len] = 0;
        v->bytes_off[i] = boff;
        boff += decode_token(v->text + off, len, t, inv, v->bytes + boff);
        v->bytes[boff++] = 0;
        off += len + 1;
        /* Duplicate strings: the lowest id wins (later ones are never produced). */
        for (size_t s = hash_bytes(v->text + v->text_off[i], len) & v->tok_mask;;
             s = (s + 1) & v->tok_mask) {
            int32_t id = v->tok_slots[s];
            if (id < 0) {
                v->tok_slots[s] = (int32_t)i;
                break;
            }
            size_t n2;
            const char *s2 = tok_text(v, (uint32_t)id, &n2);
            if (n2 == len && (len == 0 || memcmp(s2, v->text + v->text_off[i], len) == 0))
                break;
        }
    }
    v->text_off[n] = off;
    v->bytes_off[n] = boff;
    kipp_status st = build_added(v, inv, err, err_len);
    if (st != KIPP_OK)
        return st;

    for (unsigned b = 0; b < 256; b++) {
        char buf[2];
        size_t m = utf8_put(byte_to_cp(b), buf);
        v->byte_token[b] = kipp_vocab_find(v, buf, m);
    }
    return KIPP_OK;
}

/* Short, printable excerpt of untrusted text for error messages. */
static int excerpt_len(size_t n) { return n > 40 ? 40 : (int)n; }

static kipp_status build_merges(kipp_vocab *v, const char *const *merges,
                                const size_t *merge_lens, uint32_t n_merges, char *err,
                                size_t err_len) {
    v->merge_mask = table_cap(n_merges) - 1;
    v->merge_slots = malloc((v->merge_mask + 1) * sizeof *v->merge_slots);
    size_t cap = 64;
    char *joined = malloc(cap);
    if (!v->merge_slots || !joined) {
        free(joined);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for %u merges",
                         n_merges);
    }
    for (size_t i = 0; i <= v->merge_mask; i++)
        v->merge_slots[i].key = EMPTY_KEY;

    kipp_status st = KIPP_OK;
    for (uint32_t r = 0; r < n_merges && st == KIPP_OK; r++) {
        const char *m = merges[r];
        size_t n = merge_lens[r];
        const char *sp = m ? memchr(m, ' ', n) : NULL;
        if (!sp) {
            st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                           "merge %u ('%.*s') has no space between its two parts", r,
                           excerpt_len(n), m ? m : "");
            break;
        }
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t left = kipp_vocab_find(v, m, nl), right = kipp_vocab_find(v, sp + 1, nr);
        if (left < 0 || right < 0) {
            st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                           "merge %u ('%.*s'): its %s part is not a token", r,
                           excerpt_len(n), m, left < 0 ? "left" : "right");
            break;
        }
        if (kipp_grow((void **)&joined, &cap, n, 1) != KIPP_OK) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory at merge %u", r);
            break;
        }
        memcpy(joined, m, nl);
        memcpy(joined + nl, sp + 1, nr);
        /* HF refuses merges whose result is not in the vocab; so do we, which lets BPE run
         * on ids alone. */
        int32_t result = kipp_vocab_find(v, joined, nl + nr);
        if (result < 0) {
            st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                           "merge %u ('%.*s'): the merged string is not a token", r,
                           excerpt_len(n), m);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
        for (size_t s = hash_u64(key) & v->merge_mask;; s = (s + 1) & v->merge_mask) {
            merge_slot *slot = &v->merge_slots[s];
            if (slot->key == key)
                break; /* duplicate pair: the lower rank (first seen) stays */
            if (slot->key == EMPTY_KEY) {
                *slot = (merge_slot){key, r, result};
                break;
            }
        }
    }
    free(joined);
    return st;
}

static void build_eog(kipp_vocab *v) {
    static const char *const names[5] = {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>",
                                         "<|repo_name|>", "<|file_sep|>"};
    v->n_eog = 0;
    if (v->eos != KIPP_VOCAB_NONE)
        v->eog[v->n_eog++] = (int32_t)v->eos;
    for (int i = 0; i < 5; i++) {
        int32_t id = kipp_vocab_find(v, names[i], strlen(names[i]));
        if (id >= 0 && (uint32_t)id != v->eos)
            v->eog[v->n_eog++] = id;
    }
}

kipp_status kipp_vocab_init(const char *const *tokens, const size_t *token_lens,
                            const int32_t *token_types, uint32_t n_tokens,
                            const char *const *merges, const size_t *merge_lens,
                            uint32_t n_merges, kipp_vocab **out, char *err, size_t err_len) {
    if (!out)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "vocab: out is NULL");
    *out = NULL;
    if (n_tokens == 0 || n_tokens > (uint32_t)INT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "vocab: token count %u is not in 1..%d", n_tokens, INT32_MAX);
    if (n_merges > (uint32_t)INT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "vocab: merge count %u is too large",
                         n_merges);
    if (!tokens || !token_lens || (n_merges && (!merges || !merge_lens)))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "vocab: tokens, token_lens, merges or merge_lens is NULL");
    kipp_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vocab: out of memory");
    v->n_tokens = n_tokens;
    kipp_status st = build_tokens(v, tokens, token_lens, token_types, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    st = build_merges(v, merges, merge_lens, n_merges, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    int32_t im_end = kipp_vocab_find(v, "<|im_end|>", 10);
    int32_t eot = kipp_vocab_find(v, "<|endoftext|>", 13);
    v->eos = im_end >= 0 ? (uint32_t)im_end : eot >= 0 ? (uint32_t)eot : KIPP_VOCAB_NONE;
    v->bos = eot >= 0 ? (uint32_t)eot : KIPP_VOCAB_NONE;
    build_eog(v);
    *out = v;
    return KIPP_OK;
fail:
    kipp_vocab_free(v);
    return st;
}

void kipp_vocab_free(kipp_vocab *v) {
    if (!v)
        return;
    free(v->text);
    free(v->text_off);
    free(v->bytes);
    free(v->bytes_off);
    free(v->type);
    free(v->tok_slots);
    free(v->merge_slots);
    free(v->flags);
    free(v->added_order);
    free(v->added_piece);
    free(v->added_piece_off);
    free(v);
}

/* ---- GGUF ------------------------------------------------------------------------------ */

/* Reads a string array key into pointer/length arrays that borrow the GGUF's memory. */
static kipp_status gguf_str_array(const kipp_gguf *g, const char *key, const char ***ptrs,
                                  size_t **lens, uint32_t *n_out, char *err, size_t err_len) {
    *ptrs = NULL;
    *lens = NULL;
    if (kipp_gguf_find_key(g, key) < 0)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "GGUF has no %s key", key);
    kipp_gguf_vtype et;
    uint64_t n;
    const void *data;
    kipp_status st = kipp_gguf_get_arr(g, key, &et, &n, &data, err, err_len);
    if (st != KIPP_OK)
        return st;
    if (et != KIPP_GGUF_STRING)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "%s is an array of type %d, expected strings", key, (int)et);
    if (n > (uint64_t)INT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s has %llu entries, too many", key,
                         (unsigned long long)n);
    *ptrs = malloc(((size_t)n + 1) * sizeof **ptrs);
    *lens = malloc(((size_t)n + 1) * sizeof **lens);
    if (!*ptrs || !*lens)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory reading %s", key);
    for (uint64_t i = 0; i < n; i++) {
        kipp_gguf_str s = kipp_gguf_arr_str(g, key, i);
        if (!s.ptr && s.len)
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s[%llu] is unreadable", key,
                             (unsigned long long)i);
        if (s.len > SIZE_MAX / 4)
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s[%llu] is too long", key,
                             (unsigned long long)i);
        (*ptrs)[i] = s.ptr ? s.ptr : "";
        (*lens)[i] = (size_t)s.len;
    }
    *n_out = (uint32_t)n;
    return KIPP_OK;
}

/* Optional token-id key: absent leaves *id alone; present must be a valid id. */
static kipp_status gguf_token_id(const kipp_gguf *g, const char *key, uint32_t n_tokens,
                                 uint32_t *id, char *err, size_t err_len) {
    if (kipp_gguf_find_key(g, key) < 0)
        return KIPP_OK;
    uint32_t x;
    kipp_status st = kipp_gguf_get_u32(g, key, &x, err, err_len);
    if (st != KIPP_OK)
        return st;
    if (x >= n_tokens)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s = %u is not a token id (< %u)",
                         key, x, n_tokens);
    *id = x;
    return KIPP_OK;
}

static int gguf_str_is(kipp_gguf_str s, const char *want) {
    return s.len == strlen(want) && s.ptr && memcmp(s.ptr, want, s.len) == 0;
}

kipp_status kipp_vocab_load_gguf(const kipp_gguf *g, kipp_vocab **out, char *err,
                                 size_t err_len) {
    if (!out)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "vocab: out is NULL");
    *out = NULL;
    if (!g)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "vocab: GGUF handle is NULL");
    const char **tok = NULL, **mer = NULL;
    size_t *tok_len = NULL, *mer_len = NULL;
    int32_t *types = NULL;
    uint32_t n_tok = 0, n_mer = 0;
    kipp_vocab *v = NULL;
    kipp_gguf_str s;
    kipp_status st;

    if (kipp_gguf_find_key(g, "tokenizer.ggml.model") < 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_FORMAT, "GGUF has no tokenizer.ggml.model key");
        goto fail;
    }
    if ((st = kipp_gguf_get_str(g, "tokenizer.ggml.model", &s, err, err_len)) != KIPP_OK)
        goto fail;
    if (!gguf_str_is(s, "gpt2")) {
        st = kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                       "tokenizer.ggml.model is '%.*s'; only 'gpt2' (byte-level BPE) is "
                       "supported", excerpt_len(s.len), s.ptr ? s.ptr : "");
        goto fail;
    }
    /* Only the qwen2 pre-tokenizer is implemented: another one would split text silently
     * differently, so refuse it rather than produce wrong tokens. */
    if (kipp_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        if ((st = kipp_gguf_get_str(g, "tokenizer.ggml.pre", &s, err, err_len)) != KIPP_OK)
            goto fail;
        if (!gguf_str_is(s, "qwen2")) {
            st = kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                           "tokenizer.ggml.pre is '%.*s'; only 'qwen2' is supported",
                           excerpt_len(s.len), s.ptr ? s.ptr : "");
            goto fail;
        }
    }
    st = gguf_str_array(g, "tokenizer.ggml.tokens", &tok, &tok_len, &n_tok, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    st = gguf_str_array(g, "tokenizer.ggml.merges", &mer, &mer_len, &n_mer, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    if (kipp_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        kipp_gguf_vtype et;
        uint64_t n;
        const void *data;
        st = kipp_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, err, err_len);
        if (st != KIPP_OK)
            goto fail;
        if (et != KIPP_GGUF_INT32 || n != n_tok) {
            st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                           "tokenizer.ggml.token_type must be %u int32 values (got %llu of "
                           "type %d)", n_tok, (unsigned long long)n, (int)et);
            goto fail;
        }
        types = malloc((size_t)n_tok * sizeof *types);
        if (!types) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for token types");
            goto fail;
        }
        const uint8_t *b = data; /* little-endian and possibly unaligned */
        for (uint32_t i = 0; i < n_tok; i++, b += 4)
            types[i] = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                 (uint32_t)b[3] << 24);
    }
    st = kipp_vocab_init(tok, tok_len, types, n_tok, mer, mer_len, n_mer, &v, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    st = gguf_token_id(g, "tokenizer.ggml.eos_token_id", n_tok, &v->eos, err, err_len);
    if (st == KIPP_OK)
        st = gguf_token_id(g, "tokenizer.ggml.bos_token_id", n_tok, &v->bos, err, err_len);
    if (st != KIPP_OK)
        goto fail;
    build_eog(v);
    free(tok);
    free(tok_len);
    free(mer);
    free(mer_len);
    free(types);
    *out = v;
    return KIPP_OK;
fail:
    kipp_vocab_free(v);
    free(tok);
    free(tok_len);
    free(mer);
    free(mer_len);
    free(types);
    return st;
}

/* ---- accessors ------------------------------------------------------------------------- */

uint32_t kipp_vocab_n_tokens(const kipp_vocab *v) { return v ? v->n_tokens : 0; }
uint32_t kipp_vocab_eos_id(const kipp_vocab *v) { return v ? v->eos : KIPP_VOCAB_NONE; }
uint32_t kipp_vocab_bos_id(const kipp_vocab *v) { return v ? v->bos : KIPP_VOCAB_NONE; }

static int valid_id(const kipp_vocab *v, int32_t id) {
    return v && id >= 0 && (uint32_t)id < v->n_tokens;
}

const char *kipp_vocab_token_bytes(const kipp_vocab *v, int32_t id, size_t *len) {
    if (!valid_id(v, id)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = v->bytes_off[id + 1] - v->bytes_off[id] - 1;
    return v->bytes + v->bytes_off[id];
}

const char *kipp_vocab_token_text(const kipp_vocab *v, int32_t id, size_t *len) {
    size_t n = 0;
    const char *s = valid_id(v, id) ? tok_text(v, (uint32_t)id, &n) : NULL;
    if (len)
        *len = n;
    return s;
}

int kipp_vocab_token_type(const kipp_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->type[id] : 0;
}

int kipp_vocab_is_eog(const kipp_vocab *v, int32_t id) {
    if (!valid_id(v, id))
        return 0;
    for (uint32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return 1;
    return 0;
}

uint32_t kipp_vocab_eog_ids(const kipp_vocab *v, const int32_t **ids) {
    *ids = v->eog;
    return v->n_eog;
}

int kipp_vocab_is_special(const kipp_vocab *v, int32_t id) {
    return valid_id(v, id) && (v->flags[id] & FLAG_SPECIAL);
}

const char *kipp_vocab_token_piece(const kipp_vocab *v, int32_t id, int skip_special,
                                   size_t *len) {
    size_t n = 0;
    const char *s = NULL;
    if (valid_id(v, id)) {
        s = "";
        if (v->flags[id] & FLAG_ADDED) {
            if (!(skip_special && (v->flags[id] & FLAG_SPECIAL))) {
                /* few added tokens: find the piece by scanning their first-byte bucket */
                size_t tl;
                const char *t = tok_text(v, (uint32_t)id, &tl);
                uint8_t b = (uint8_t)t[0];
                for (uint32_t k = v->added_first[b]; k < v->added_first[b + 1]; k++)
                    if (v->added_order[k] == id) {
                        s = v->added_piece + v->added_piece_off[k];
                        n = v->added_piece_off[k + 1] - v->added_piece_off[k] - 1;
                    }
            }
        } else if (v->type[id] == KIPP_TOKEN_NORMAL || v->type[id] == KIPP_TOKEN_BYTE) {
            s = kipp_vocab_token_bytes(v, id, &n);
        }
    }
    if (len)
        *len = n;
    return s;
}

size_t kipp_vocab_next_added(const kipp_vocab *v, const char *s, size_t n, size_t from,
                             int parse_special, int32_t *id, size_t *tok_len) {
    if (!v->n_added)
        return n;
    for (size_t p = from; p < n;) {
        if (v->single_first >= 0) {
            const char *q = memchr(s + p, v->single_first, n - p);
            if (!q)
                return n;
            p = (size_t)(q - s);
        }
        uint8_t b = (uint8_t)s[p];
        size_t skip = 1;
        for (uint32_t k = v->added_first[b]; k < v->added_first[b + 1]; k++) {
            int32_t tid = v->added_order[k];
            size_t len;
            const char *t = tok_text(v, (uint32_t)tid, &len);
            if (len > n - p || memcmp(s + p, t, len) != 0)
                continue;
            if (!parse_special && (v->flags[tid] & FLAG_SPECIAL)) {
                skip = len; /* HF: the match is dropped whole, the search goes on after it */
                break;
            }
            *id = tid;
            *tok_len = len;
            return p;
        }
        p += skip;
    }
    return n;
}

int32_t kipp_vocab_byte_token(const kipp_vocab *v, uint8_t b) { return v->byte_token[b]; }
