/* grammar_bench.c — build/kipp-grammarbench: the cost of a grammar token mask over a real
 * vocabulary, for bench/grammar_bench.py. For every schema of the corpus (tests/unit/data/
 * schema_corpus) and every document it accepts, the document is tokenized with the model's
 * tokenizer and replayed token by token through a fresh matcher: mask, check that the
 * document's own token is allowed (else the run fails: the mask would have forbidden a valid
 * document), accept it; at the end the end-of-generation token must be allowed. Each mask is
 * timed. Short documents make the cache's job hard (a fresh matcher per document, few
 * repeated states), so this is a pessimistic figure for long generations. Prints one JSON
 * object. Not a test: it never fails on speed. */
#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "kipp.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: kipp-grammarbench MODEL.gguf SCHEMA_CORPUS_DIR\n");
        return 2;
    }
    char err[KIPP_ERR_LEN];
    kipp_model *m;
    if (kipp_model_load(argv[1], &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-grammarbench: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    kipp_token_trie *t;
    if (kipp_token_trie_build(m, &t, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-grammarbench: %s\n", err);
        return 1;
    }
    const double trie_s = now_s() - t0;
    DIR *d = opendir(argv[2]);
    if (!d) {
        fprintf(stderr, "kipp-grammarbench: cannot open %s\n", argv[2]);
        return 1;
    }
    char *names[512];
    int n_names = 0;
    for (struct dirent *e; (e = readdir(d)) && n_names < 512;)
        if (strstr(e->d_name, ".json")) names[n_names++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n_names, sizeof *names, cmp_str);
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    uint32_t *bits = malloc((info.n_vocab + 31) / 32 * sizeof *bits);
    size_t cap = 1 << 16, n = 0;
    double *times = malloc(cap * sizeof *times), compile_s = 0;
    uint64_t masks = 0, hits = 0, partial = 0;
    int docs = 0, schemas = 0, bad = 0;
    for (int i = 0; i < n_names; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[2], names[i]);
        json_error_t je;
        json_t *c = json_load_file(path, 0, &je);
        if (!c) {
            fprintf(stderr, "kipp-grammarbench: %s: %s\n", path, je.text);
            return 1;
        }
        json_t *schema = json_object_get(c, "schema");
        char *src;
        size_t len;
        if (kipp_json_schema_grammar(json_is_null(schema) ? NULL : schema, &src, &len, err, sizeof err)) {
            fprintf(stderr, "kipp-grammarbench: %s: %s\n", names[i], err);
            return 1;
        }
        kipp_grammar *g;
        t0 = now_s();
        if (kipp_grammar_compile(src, len, &g, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, "kipp-grammarbench: %s: %s\n", names[i], err);
            return 1;
        }
        compile_s += now_s() - t0;
        free(src);
        schemas++;
        size_t k;
        json_t *doc;
        json_array_foreach(json_object_get(c, "accept"), k, doc) {
            const char *text = json_string_value(doc);
            int32_t *ids;
            size_t nid;
            if (!text || kipp_tokenize_alloc(m, text, strlen(text), 0, &ids, &nid, err, sizeof err) != KIPP_OK)
                continue;
            kipp_matcher *mt;
            if (kipp_matcher_new(g, t, &mt, err, sizeof err) != KIPP_OK) return 1;
            if (getenv("KIPP_GB_BUDGET")) /* probing how much work the corpus's walks take */
                kipp_matcher_set_work_budget(mt, strtoull(getenv("KIPP_GB_BUDGET"), NULL, 10));
            for (size_t j = 0; j <= nid; j++) {
                t0 = now_s();
                kipp_matcher_mask(mt, bits);
                const double dt = now_s() - t0;
                if (n == cap) times = realloc(times, (cap *= 2) * sizeof *times);
                times[n++] = dt;
                if (getenv("KIPP_GB_VERBOSE") && dt > 0.05)
                    fprintf(stderr, "slow mask %.1f ms: %s token %zu of %s\n", dt * 1e3, names[i], j, text);
                if (j == nid) { /* the end: some end-of-generation token must be allowed */
                    int eog = 0;
                    for (uint32_t id = 0; id < info.n_vocab && !eog; id++)
                        eog = kipp_token_is_eog(m, (int32_t)id) && ((bits[id >> 5] >> (id & 31)) & 1);
                    if (!eog) {
                        fprintf(stderr, "kipp-grammarbench: %s: the end is not allowed after %s\n", names[i], text);
                        bad++;
                    }
                    break;
                }
                const int32_t id = ids[j];
                if (!((bits[id >> 5] >> (id & 31)) & 1) || !kipp_matcher_accept_token(mt, id)) {
                    fprintf(stderr, "kipp-grammarbench: %s: token %zu (%d) of %s is masked\n", names[i], j, id, text);
                    bad++;
                    break;
                }
            }
            kipp_matcher_stats st;
            kipp_matcher_get_stats(mt, &st);
            masks += st.masks;
            hits += st.cache_hits;
            partial += st.partial;
            kipp_matcher_free(mt);
            free(ids);
            docs++;
        }
        kipp_grammar_free(g);
        json_decref(c);
        free(names[i]);
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += times[i];
    qsort(times, n, sizeof *times, cmp_d);
#define PCT(q) (n ? times[(size_t)((double)(n - 1) * (q))] * 1e3 : 0.0)
    printf("{\"schemas\": %d, \"documents\": %d, \"masks\": %zu, \"cache_hits\": %llu, "
           "\"mask_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f}, "
           "\"trie_build_ms\": %.1f, \"compile_ms_total\": %.2f, \"vocab\": %u, \"invalid\": %d, "
           "\"partial\": %llu}\n",
           schemas, docs, n, (unsigned long long)hits, n ? sum / (double)n * 1e3 : 0.0, PCT(0.5), PCT(0.9),
           PCT(0.99), PCT(1.0), trie_s * 1e3, compile_s * 1e3, info.n_vocab, bad,
           (unsigned long long)partial);
    (void)masks;
    free(times);
    free(bits);
    kipp_token_trie_free(t);
    kipp_model_free(m);
    return bad ? 1 : 0;
}
