/* grammar_vocab.c — the token trie of a loaded model (kept apart from matcher.c so that the
 * grammar engine builds and fuzzes without the tokenizer). */
#include "engine/grammar.h"

#include "core/error.h"
#include "model/model.h"
#include "tok/vocab.h"

#include <stdlib.h>

kipp_status kipp_token_trie_build(const kipp_model *m, kipp_token_trie **out, char *err,
                                  size_t err_len) {
    const kipp_vocab *v = m->vocab;
    const uint32_t n = kipp_vocab_n_tokens(v);
    const char **toks = malloc((size_t)(n ? n : 1) * sizeof *toks);
    size_t *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
    uint8_t *eog = malloc(n ? n : 1);
    if (!toks || !lens || !eog) {
        free(toks), free(lens), free(eog);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory building the token trie");
    }
    for (uint32_t i = 0; i < n; i++) {
        /* the text a token adds to the output, special tokens skipped: what the client sees */
        toks[i] = kipp_vocab_token_piece(v, (int32_t)i, 1, &lens[i]);
        if (!toks[i]) lens[i] = 0;
        eog[i] = (uint8_t)kipp_vocab_is_eog(v, (int32_t)i);
    }
    kipp_status st = kipp_token_trie_build_list(toks, lens, eog, n, out, err, err_len);
    free(toks), free(lens), free(eog);
    return st;
}

