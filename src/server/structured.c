/* structured.c — the server's side of constrained decoding: the grammar a request asks for
 * (response_format, a raw grammar, or tool_choice "required"/named as a tool-call grammar)
 * compiled into a matcher over the model's token trie, which is built once, at start-up (so
 * its ~9 MB for Qwen3's vocabulary are part of the idle footprint, not a jump at the first
 * constrained request, and that request does not wait for it).
 * The grammar engine is src/engine/grammar.c; the grammar text comes from openai_req.c
 * (JSON Schema lowering: src/engine/json_schema.c; tool calls: tool_grammar.c). */
#include "server/structured.h"

#include "core/error.h"
#include "model/model.h"
#include "tok/vocab.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/resource.h>
#endif

struct oai_structured {
    const kipp_model *m;
    pthread_mutex_t mu; /* guards trie's construction */
    kipp_token_trie *trie;
};

oai_structured *oai_structured_new(const kipp_model *m) {
    oai_structured *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    pthread_mutex_init(&s->mu, NULL);
    char err[KIPP_ERR_LEN];
    if (kipp_token_trie_build(m, &s->trie, err, sizeof err) != KIPP_OK)
        s->trie = NULL; /* out of memory now: oai_structured_matcher tries again, and says so */
    return s;
}

void oai_structured_free(oai_structured *s) {
    if (!s) return;
    kipp_token_trie_free(s->trie);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

kipp_status oai_structured_matcher(oai_structured *s, const char *grammar, size_t len,
                                   kipp_matcher **out, char *err, size_t err_len) {
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    kipp_status st = s->trie ? KIPP_OK : kipp_token_trie_build(s->m, &s->trie, err, err_len);
    pthread_mutex_unlock(&s->mu);
    if (st != KIPP_OK) return st;
    kipp_grammar *g;
    if ((st = kipp_grammar_compile(grammar, len, &g, err, err_len)) != KIPP_OK) return st;
    if ((st = kipp_matcher_new(g, s->trie, out, err, err_len)) != KIPP_OK) {
        kipp_grammar_free(g);
        return st;
    }
    kipp_matcher_own_grammar(*out);
    return KIPP_OK;
}

typedef struct {
    oai_structured *s;
    const char *grammar;
    size_t len;
    uint32_t n;
    kipp_matcher **out;
    char *err;
    size_t err_len;
    kipp_status st;
} matchers_job;

static void compile_all(matchers_job *j) {
    j->st = KIPP_OK;
    for (uint32_t i = 0; i < j->n; i++) j->out[i] = NULL;
    for (uint32_t i = 0; i < j->n && j->st == KIPP_OK; i++)
        j->st = oai_structured_matcher(j->s, j->grammar, j->len, &j->out[i], j->err, j->err_len);
    if (j->st == KIPP_OK) return;
    for (uint32_t i = 0; i < j->n; i++) { /* all or none */
        kipp_matcher_free(j->out[i]);
        j->out[i] = NULL;
    }
}

static void *compile_main(void *arg) {
#ifdef __linux__
    (void)prctl(PR_SET_NAME, "kipp-grammar", 0, 0, 0); /* this thread's name (ps, /proc) */
    errno = 0;
    const int cur = getpriority(PRIO_PROCESS, 0); /* Linux: 0 is this thread */
    if (errno == 0 && cur < OAI_GRAMMAR_NICE) (void)setpriority(PRIO_PROCESS, 0, OAI_GRAMMAR_NICE);
#endif
    compile_all(arg);
    return NULL;
}

kipp_status oai_structured_matchers(oai_structured *s, const char *grammar, size_t len, uint32_t n,
                                    kipp_matcher **out, char *err, size_t err_len) {
    matchers_job j = {s, grammar, len, n, out, err, err_len, KIPP_OK};
    pthread_t t;
    if (pthread_create(&t, NULL, compile_main, &j) == 0) pthread_join(t, NULL);
    else compile_all(&j);
    return j.st;
}
