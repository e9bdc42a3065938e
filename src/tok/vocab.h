/* vocab.h — internal tokenizer API: a byte-level BPE vocabulary (GPT-2 byte map, Qwen2
 * pre-tokenizer) built from token/merge arrays or from a GGUF's tokenizer.ggml.* keys.
 * vocab.c owns the tables (token and merge hash tables, decoded bytes, added tokens);
 * bpe.c owns encoding (added-token split, NFC, pre-tokenizer, BPE); detok.h decodes.
 * The encoder reproduces HF tokenizers' ids for any input (reference §6, with NFC as HF
 * does it). Design: reference §6; Unicode details: unicode.h. */
#ifndef KIPP_TOK_VOCAB_H
#define KIPP_TOK_VOCAB_H

#include "gguf/gguf.h"
#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* tokenizer.ggml.token_type values */
enum {
    KIPP_TOKEN_NORMAL = 1,
    KIPP_TOKEN_UNKNOWN = 2,
    KIPP_TOKEN_CONTROL = 3,
    KIPP_TOKEN_USER_DEFINED = 4,
    KIPP_TOKEN_UNUSED = 5,
    KIPP_TOKEN_BYTE = 6,
};

#define KIPP_VOCAB_NONE UINT32_MAX /* eos/bos id when the vocab has none */

typedef struct kipp_vocab kipp_vocab;

/* Builds a vocab from arrays; everything needed is copied, so the arrays may be freed
 * afterwards. token_types may be NULL (all NORMAL). Merge i has rank i and the form
 * "left right" (split at the first space); both parts and their concatenation must be
 * tokens, otherwise the error names the merge index. eos defaults to <|im_end|>, else
 * <|endoftext|>; bos to <|endoftext|>; KIPP_VOCAB_NONE when absent. */
kipp_status kipp_vocab_init(const char *const *tokens, const size_t *token_lens,
                            const int32_t *token_types, uint32_t n_tokens,
                            const char *const *merges, const size_t *merge_lens,
                            uint32_t n_merges, kipp_vocab **out, char *err, size_t err_len);

/* Reads tokenizer.ggml.{model (must be "gpt2"), pre (if present must be "qwen2"), tokens,
 * token_type (optional), merges, eos_token_id, bos_token_id (optional)}. The vocab copies
 * what it needs: the GGUF may be closed afterwards. */
kipp_status kipp_vocab_load_gguf(const kipp_gguf *g, kipp_vocab **out, char *err,
                                 size_t err_len);

void kipp_vocab_free(kipp_vocab *v); /* NULL is a no-op */

uint32_t kipp_vocab_n_tokens(const kipp_vocab *v);
uint32_t kipp_vocab_eos_id(const kipp_vocab *v);
uint32_t kipp_vocab_bos_id(const kipp_vocab *v);

/* Encodes text exactly as HF tokenizers' Qwen tokenizer does:
 *  1. bytes that are not valid UTF-8 are first replaced as Python's
 *     bytes.decode('utf-8', 'replace') does (one U+FFFD per maximal ill-formed subpart);
 *  2. added tokens are cut out of the raw text, leftmost-longest (HF's matcher);
 *     parse_special = 1 matches all of them (HF encode(text, add_special_tokens=False));
 *     parse_special = 0 skips matches of *special* added tokens, which stay text, while
 *     non-special ones (<think>, <tool_call>, <|fim_prefix|> ...) are still split out
 *     (HF with split_special_tokens=True); see kipp_vocab_is_special;
 *  3. every other fragment is NFC-normalized, pre-tokenized (§6.3) and BPE-encoded.
 * On success *ids_out is a malloc'd array (never NULL, even when *n_out is 0) that the
 * caller frees. No BOS/EOS is added. */
kipp_status kipp_vocab_encode(const kipp_vocab *v, const char *text, size_t len,
                              int parse_special, int32_t **ids_out, size_t *n_out, char *err,
                              size_t err_len);
/* The same with special tokens parsed except where they begin inside one of n_plain
 * ranges plain[2i] .. plain[2i+1] (split_special_tokens there); see kipp_tokenize_spans. */
kipp_status kipp_vocab_encode_spans(const kipp_vocab *v, const char *text, size_t len,
                                    const size_t *plain, size_t n_plain, int32_t **ids_out,
                                    size_t *n_out, char *err, size_t err_len);

/* Raw bytes the token stands for: NORMAL (and BYTE) through the inverse GPT-2 byte map,
 * USER_DEFINED as its literal text, CONTROL, UNKNOWN and UNUSED as "" (len 0). NULL for
 * ids out of range. The string is NUL-terminated and lives as long as the vocab. */
const char *kipp_vocab_token_bytes(const kipp_vocab *v, int32_t id, size_t *len);
/* The bytes HF's decode(ids, skip_special_tokens) contributes for this id: the token text
 * through the inverse byte map when every character is in it, else the text as it is
 * (HF's ByteLevel decoder, token by token); "" for special tokens when skip_special, and
 * for UNUSED filler tokens (HF has no such ids). NULL (len 0) for ids out of range, which
 * HF also skips. Same lifetime as kipp_vocab_token_bytes. */
const char *kipp_vocab_token_piece(const kipp_vocab *v, int32_t id, int skip_special,
                                   size_t *len);
/* The token's literal vocab string (byte-level form for NORMAL tokens); same lifetime. */
const char *kipp_vocab_token_text(const kipp_vocab *v, int32_t id, size_t *len);
/* Token type (KIPP_TOKEN_*), 0 for ids out of range. */
int kipp_vocab_token_type(const kipp_vocab *v, int32_t id);
/* 1 for added tokens HF marks "special": CONTROL and UNKNOWN tokens, except the ones
 * Qwen's tokenizer.json declares special=false although the GGUF converter types them
 * CONTROL (<|fim_prefix|>, <|fim_middle|>, <|fim_suffix|>, <|fim_pad|>, <|repo_name|>,
 * <|file_sep|>). GGUF does not carry HF's flag, so those names are listed in vocab.c. */
int kipp_vocab_is_special(const kipp_vocab *v, int32_t id);

/* End of generation: the eos id, and <|endoftext|>, <|im_end|>, <|fim_pad|>,
 * <|repo_name|>, <|file_sep|> when present (reference §7.3). */
int kipp_vocab_is_eog(const kipp_vocab *v, int32_t id);
/* The same ids as a list (at most 6; valid as long as v is); returns how many. */
uint32_t kipp_vocab_eog_ids(const kipp_vocab *v, const int32_t **ids);

/* Exact lookup of a vocab string (byte-level form for NORMAL tokens); -1 if absent. */
int32_t kipp_vocab_find(const kipp_vocab *v, const char *text, size_t len);

/* ---- shared between vocab.c and bpe.c (and the unit tests) -------------------------- */

/* Token id of the single-byte symbol for byte b, -1 if the vocab lacks it. */
int32_t kipp_vocab_byte_token(const kipp_vocab *v, uint8_t b);
/* Merge of (left, right): returns 1 and sets *rank and *result if the pair merges. */
int kipp_vocab_merge(const kipp_vocab *v, int32_t left, int32_t right, uint32_t *rank,
                     int32_t *result);
/* Added tokens (CONTROL, USER_DEFINED, UNKNOWN with non-empty text): the first match in
 * s[from..n) by HF's rules (leftmost, then longest; a special token's match is skipped as a
 * whole when !parse_special, and the search goes on after it). Returns its offset and sets
 * *id and *tok_len, or returns n when there is none. */
size_t kipp_vocab_next_added(const kipp_vocab *v, const char *s, size_t n, size_t from,
                             int parse_special, int32_t *id, size_t *tok_len);

/* Pre-tokenizer (reference §6.3): the end (exclusive byte offset) of the word that starts
 * at byte pos < len, by the exact semantics of the Qwen2 split regex under Oniguruma. Meant
 * for NFC text that is valid UTF-8 (what the encoder passes); other bytes are handled
 * safely, an ill-formed subpart counting as one U+FFFD (class "other"). */
size_t kipp_tok_word_end(const char *text, size_t len, size_t pos);

#endif
