/* kv_bench.c — the driver of bench/kv_bench.py: runs a seeded mixed serving workload on a
 * KV block pool alone (no model: block tables, forks, copies on write, truncations and frees
 * are what is measured) and prints one JSON object with the pool's accounting sampled every
 * few steps. Not a test; it never fails on the figures.
 *
 *   kipp-kvbench BLOCK_SIZE [SEED] [STEPS]
 *
 * Workload (identical for every block size: the pool has room for all of it, so no decision
 * depends on the block size): four shared system prompts of 37, 150, 411 and 1000 tokens;
 * each step a request may arrive (60 % fork a system prompt and append a user turn of
 * 5-300 tokens, 40 % start fresh with 10-800 tokens), every live request decodes one token,
 * 10 % of them instead verify 4 draft tokens and roll back 0-4 of them; 15 % of arrivals
 * fork a second branch right after the prompt (parallel sampling); a request is freed when
 * it reaches its output length (10-400 tokens). */
#include "backend/host_kv.h"
#include "kv/kv.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define N_LAYER 3  /* tiny-untied geometry: bytes per token = 2 * 3 * 64 * 4 = 1536 */
#define KV_DIM 64
#define CAPACITY_TOKENS 131072u
#define MAX_LIVE 512
#define SAMPLE_EVERY 10

static uint64_t rng_state;
static uint32_t rnd(uint32_t lo, uint32_t hi) { /* uniform in [lo, hi] */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (uint32_t)((rng_state >> 33) % (hi - lo + 1));
}

typedef struct {
    uint32_t id, left; /* sequence, output tokens still to decode */
} request;

static int grow(kipp_kv_pool *pool, uint32_t id, uint32_t n, uint64_t *full) {
    char err[KIPP_ERR_LEN];
    kipp_status st = kipp_kv_grow(pool, &id, &n, 1, err, sizeof err);
    if (st == KIPP_ERR_KV_FULL) (*full)++;
    else if (st != KIPP_OK) { fprintf(stderr, "kv_bench: %s\n", err); exit(1); }
    return st == KIPP_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: kipp-kvbench BLOCK_SIZE [SEED] [STEPS]\n");
        return 2;
    }
    const uint32_t bs = (uint32_t)strtoul(argv[1], NULL, 10);
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    const uint32_t steps = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 3000;
    char err[KIPP_ERR_LEN];
    /* f32 host storage, as cpu-ref keeps it; the pool's bookkeeping is what is measured */
    const kipp_kv_layout lay = {.n_layer = N_LAYER, .kv_dim = KV_DIM, .block_size = bs,
                                .type = KIPP_KV_TYPE_F32};
    const kipp_kv_params p = {.block_size = bs, .n_blocks = bs ? CAPACITY_TOKENS / bs : 0,
                              .bytes_per_token = 2ull * N_LAYER * KV_DIM * sizeof(float)};
    void *store = NULL;
    kipp_kv_pool *pool;
    if (kipp_host_kv_alloc(NULL, &lay, p.n_blocks, &store, err, sizeof err) != KIPP_OK ||
        kipp_kv_pool_init(&p, &(kipp_kv_storage){.store = store,
                                                 .copy_block = kipp_host_kv_copy_block},
                          &pool, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kv_bench: %s\n", err);
        return 1;
    }
    uint32_t roots[4];
    const uint32_t root_len[4] = {37, 150, 411, 1000};
    uint64_t full = 0, forks = 0, truncations = 0, frees = 0, arrivals = 0, cow_blocks = 0;
    for (int r = 0; r < 4; r++) {
        kipp_kv_seq_new(pool, &roots[r], err, sizeof err);
        grow(pool, roots[r], root_len[r], &full);
    }
    request live[MAX_LIVE];
    uint32_t n_live = 0;
    printf("{\"block_size\": %u, \"n_layer\": %u, \"kv_dim\": %u, \"n_blocks\": %u, \"steps\": %u, "
           "\"samples\": [",
           bs, N_LAYER, KV_DIM, p.n_blocks, steps);
    for (uint32_t step = 0; step < steps; step++) {
        if (n_live < MAX_LIVE && rnd(0, 99) < 35) { /* an arrival */
            request *q = &live[n_live];
            if (rnd(0, 99) < 60) {
                kipp_kv_seq_fork(pool, roots[rnd(0, 3)], &q->id, err, sizeof err);
                forks++;
                if (!grow(pool, q->id, rnd(5, 300), &full)) { kipp_kv_seq_free(pool, q->id, err, sizeof err); continue; }
            } else {
                kipp_kv_seq_new(pool, &q->id, err, sizeof err);
                if (!grow(pool, q->id, rnd(10, 800), &full)) { kipp_kv_seq_free(pool, q->id, err, sizeof err); continue; }
            }
            q->left = rnd(10, 400);
            n_live++;
            arrivals++;
            if (n_live < MAX_LIVE && rnd(0, 99) < 15) { /* parallel sampling: a second branch */
                request *b = &live[n_live++];
                kipp_kv_seq_fork(pool, q->id, &b->id, err, sizeof err);
                b->left = rnd(10, 400);
                forks++;
            }
        }
        for (uint32_t i = 0; i < n_live; i++) {
            request *q = &live[i];
            const uint32_t used0 = pool->n_blocks - pool->n_free;
            const uint32_t n0 = kipp_kv_seq_get(pool, q->id)->n_tokens;
            if (rnd(0, 99) < 10) { /* speculative verify: 4 drafts + the token, keep some */
                if (grow(pool, q->id, 5, &full)) {
                    kipp_kv_seq_truncate(pool, q->id, n0 + 1 + rnd(0, 4), err, sizeof err);
                    truncations++;
                }
            } else {
                grow(pool, q->id, 1, &full);
            }
            /* a copy on write shows as one block more than the new positions need */
            const uint32_t n1 = kipp_kv_seq_get(pool, q->id)->n_tokens;
            const uint32_t need = kipp_kv_blocks_for(pool, n1) - kipp_kv_blocks_for(pool, n0);
            if (pool->n_blocks - pool->n_free > used0 + need) cow_blocks++;
            if (q->left) q->left--;
        }
        for (uint32_t i = 0; i < n_live;) { /* finished requests leave */
            if (live[i].left == 0) {
                kipp_kv_seq_free(pool, live[i].id, err, sizeof err);
                frees++;
                live[i] = live[--n_live];
            } else {
                i++;
            }
        }
        if (step % SAMPLE_EVERY == SAMPLE_EVERY - 1) {
            kipp_kv_stats s;
            kipp_kv_pool_stats(pool, &s);
            printf("%s{\"step\": %u, \"n_seqs\": %u, \"n_tokens\": %" PRIu64
                   ", \"n_slots_filled\": %" PRIu64 ", \"n_blocks_used\": %u, \"n_blocks_shared\": %u, "
                   "\"n_bytes_used\": %" PRIu64 "}",
                   step == SAMPLE_EVERY - 1 ? "" : ", ", step + 1, s.n_seqs, s.n_tokens,
                   s.n_slots_filled, s.n_blocks_used, s.n_blocks_shared, s.n_bytes_used);
        }
    }
    kipp_kv_stats s;
    kipp_kv_pool_stats(pool, &s);
    printf("], \"n_bytes_per_token\": %" PRIu64 ", \"n_bytes_per_block\": %" PRIu64
           ", \"n_bytes_total\": %" PRIu64 ", \"events\": {\"arrivals\": %" PRIu64 ", \"forks\": %" PRIu64
           ", \"copy_on_write_blocks\": %" PRIu64 ", \"truncations\": %" PRIu64 ", \"frees\": %" PRIu64
           ", \"kv_full\": %" PRIu64 "}}\n",
           s.n_bytes_per_token, s.n_bytes_per_block, s.n_bytes_total, arrivals, forks, cow_blocks,
           truncations, frees, full);
    kipp_kv_pool_free(pool);
    kipp_host_kv_free(NULL, store);
    return 0;
}
