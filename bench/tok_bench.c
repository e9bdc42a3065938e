/* tok_bench.c — build/kipp-tokbench: encode throughput of Kipp's tokenizer for
 * bench/tok_bench.py. Reads a corpus of length-prefixed chunks (u32 LE length + bytes),
 * encodes every chunk (special-token parsing on, as HF's encode does) once per run on one
 * thread, and prints one JSON line: per-run seconds, bytes, tokens and an FNV-1a hash of
 * all ids so the harness can check the ids equal HF's. Not a test: it never fails on speed. */
#include "kipp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kipp-tokbench MODEL.gguf CORPUS.bin RUNS\n");
        return 2;
    }
    int runs = atoi(argv[3]);
    if (runs < 1 || runs > 1000) { fprintf(stderr, "kipp-tokbench: RUNS must be 1..1000\n"); return 2; }
    char err[KIPP_ERR_LEN];
    kipp_model *m = NULL;
    if (kipp_model_load(argv[1], &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-tokbench: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) { fprintf(stderr, "kipp-tokbench: cannot open %s\n", argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "kipp-tokbench: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    size_t cap = 1 << 20;
    int32_t *ids = malloc(cap * sizeof *ids);
    double *secs = malloc((size_t)runs * sizeof *secs);
    unsigned long long n_bytes = 0, n_tokens = 0, hash = 1469598103934665603ull;
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        for (size_t off = 0; off + 4 <= (size_t)size;) {
            uint32_t len = (uint32_t)buf[off] | (uint32_t)buf[off + 1] << 8 |
                           (uint32_t)buf[off + 2] << 16 | (uint32_t)buf[off + 3] << 24;
            off += 4;
            if (len > (size_t)size - off) { fprintf(stderr, "kipp-tokbench: corrupt corpus\n"); return 1; }
            size_t n = 0;
            kipp_status st = kipp_tokenize(m, (const char *)buf + off, len, 1, ids, cap, &n, err, sizeof err);
            if (st != KIPP_OK && n > cap) {
                while (cap < n) cap *= 2;
                ids = realloc(ids, cap * sizeof *ids);
                st = kipp_tokenize(m, (const char *)buf + off, len, 1, ids, cap, &n, err, sizeof err);
            }
            if (st != KIPP_OK) { fprintf(stderr, "kipp-tokbench: %s\n", err); return 1; }
            if (r == 0) {
                n_bytes += len;
                n_tokens += n;
                for (size_t i = 0; i < n; i++) {
                    hash ^= (uint32_t)ids[i];
                    hash *= 1099511628211ull;
                }
            }
            off += len;
        }
        secs[r] = now_s() - t0;
    }
    printf("{\"bytes\": %llu, \"tokens\": %llu, \"ids_fnv1a\": \"%016llx\", \"run_seconds\": [", n_bytes,
           n_tokens, hash);
    for (int r = 0; r < runs; r++) printf(r ? ", %.6f" : "%.6f", secs[r]);
    printf("]}\n");
    free(secs);
    free(ids);
    free(buf);
    kipp_model_free(m);
    return 0;
}
