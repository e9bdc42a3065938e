/* test_program.c — the layer program's driver (src/backend/program.c) against a recording
 * backend: each architecture's program becomes the operations ops.h defines, in order, with
 * the weights and activations cpu-ref's implementation reads; the fused path is offered each
 * op, honoured for what it consumes and never called under the plain setting; an operation's
 * error stops the pass at once; kipp_program_check refuses a backend lacking an operation an
 * architecture needs, naming both. */
#include "kt.h"

#include "backend/ops.h"
#include "model/arch.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    char log[4096];
    size_t len;
    int fail_at;    /* the call (1-based) that returns an error, 0: none */
    int calls;
    int fuse_store; /* the fused path takes "rope, kv_store" when offered them */
    int offered;
} rec_t;

static const char *bn(kipp_buf a) {
    static const char *n[] = {"X", "XN", "Q", "K", "V", "ATT", "PROJ", "GATE", "UP", "EGATE", "EUP", "EDOWN"};
    return a < KIPP_BUF_COUNT ? n[a] : "?";
}

static const char *wn(size_t w) {
#define W(f) if (w == KIPP_W(f)) return #f
    W(attn_norm); W(wq); W(wk); W(wv); W(bq); W(bk); W(bv); W(q_norm); W(k_norm); W(wo); W(ffn_norm);
    W(w_gate); W(w_up); W(w_down); W(gate_inp); W(gate_exps); W(up_exps); W(down_exps);
#undef W
    return "?";
}

static int put(rec_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static int put(rec_t *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(r->log + r->len, sizeof r->log - r->len, fmt, ap);
    va_end(ap);
    if (n > 0 && r->len + (size_t)n < sizeof r->log) r->len += (size_t)n;
    r->calls++;
    return r->fail_at && r->calls == r->fail_at ? 7 : 0;
}

static int r_rmsnorm(void *st, uint32_t l, size_t w, kipp_buf s, kipp_buf d, uint32_t width) {
    return put(st, "%u:norm(%s,%s->%s,%u) ", l, wn(w), bn(s), bn(d), width);
}
static int r_matmul(void *st, uint32_t l, uint32_t c, const size_t *w, kipp_buf s, const kipp_buf *d) {
    rec_t *r = st;
    char b[128] = "";
    for (uint32_t i = 0; i < c; i++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%s->%s", i ? "," : "", wn(w[i]), bn(d[i]));
    return put(r, "%u:mm(%s:%s) ", l, bn(s), b);
}
static int r_bias(void *st, uint32_t l, size_t b, kipp_buf d) { return put(st, "%u:bias(%s,%s) ", l, wn(b), bn(d)); }
static int r_rope(void *st, kipp_buf d) { return put(st, "rope(%s) ", bn(d)); }
static int r_store(void *st, uint32_t l) { return put(st, "%u:store ", l); }
static int r_att(void *st, uint32_t l) { return put(st, "%u:att ", l); }
static int r_swiglu(void *st, kipp_buf g, kipp_buf u) { return put(st, "swiglu(%s,%s) ", bn(g), bn(u)); }
static int r_add(void *st, kipp_buf d, kipp_buf s) { return put(st, "add(%s+=%s) ", bn(d), bn(s)); }
static int r_route(void *st, uint32_t l) { return put(st, "%u:route ", l); }
static int r_emm(void *st, uint32_t l, uint32_t c, const size_t *w, kipp_buf s, const kipp_buf *d) {
    rec_t *r = st;
    char b[128] = "";
    for (uint32_t i = 0; i < c; i++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%s->%s", i ? "," : "", wn(w[i]), bn(d[i]));
    return put(r, "%u:emm(%s:%s) ", l, bn(s), b);
}
static int r_sum(void *st, kipp_buf s, kipp_buf d) { return put(st, "sum(%s->%s) ", bn(s), bn(d)); }
static size_t r_fused(void *st, uint32_t l, const kipp_op *ops, size_t n, int *rc) {
    rec_t *r = st;
    *rc = 0;
    r->offered++;
    if (r->fuse_store && n >= 2 && ops[0] == KIPP_OP_ROPE && ops[1] == KIPP_OP_KV_STORE) {
        put(r, "%u:FUSED(rope,store) ", l);
        return 2;
    }
    return 0;
}

static const kipp_backend_kernels rec_kernels = {
    .rmsnorm = r_rmsnorm, .matmul = r_matmul, .add_bias = r_bias, .rope = r_rope, .kv_store = r_store,
    .attention = r_att, .swiglu = r_swiglu, .add = r_add, .moe_route = r_route, .moe_matmul = r_emm,
    .moe_sum = r_sum};

static kipp_model fake(const char *arch) {
    kipp_model m;
    memset(&m, 0, sizeof m);
    m.arch = kipp_arch_find(arch, strlen(arch));
    m.hp.n_layer = 2;
    m.hp.n_embd = 64;
    m.hp.head_dim = 16;
    return m;
}

static void expect_layer(const char *arch, const char *want) {
    kipp_model m = fake(arch);
    rec_t r = {0};
    KT_CHECK(m.arch && kipp_program_layer(&m, &rec_kernels, &r, 1) == 0, "%s: layer 1 ran", arch);
    KT_CHECK(strcmp(r.log, want) == 0, "%s's layer program:\n  got  %s\n  want %s", arch, r.log, want);
}

void kt_suite_program(void) {
    expect_layer("qwen3",
                 "1:norm(attn_norm,X->XN,64) 1:mm(XN:wq->Q,wk->K,wv->V) 1:norm(q_norm,Q->Q,16) "
                 "1:norm(k_norm,K->K,16) rope(Q) rope(K) 1:store 1:att 1:mm(ATT:wo->PROJ) add(X+=PROJ) "
                 "1:norm(ffn_norm,X->XN,64) 1:mm(XN:w_gate->GATE,w_up->UP) swiglu(GATE,UP) "
                 "1:mm(GATE:w_down->PROJ) add(X+=PROJ) ");
    expect_layer("qwen2",
                 "1:norm(attn_norm,X->XN,64) 1:mm(XN:wq->Q,wk->K,wv->V) 1:bias(bq,Q) 1:bias(bk,K) "
                 "1:bias(bv,V) rope(Q) rope(K) 1:store 1:att 1:mm(ATT:wo->PROJ) add(X+=PROJ) "
                 "1:norm(ffn_norm,X->XN,64) 1:mm(XN:w_gate->GATE,w_up->UP) swiglu(GATE,UP) "
                 "1:mm(GATE:w_down->PROJ) add(X+=PROJ) ");
    expect_layer("qwen3moe",
                 "1:norm(attn_norm,X->XN,64) 1:mm(XN:wq->Q,wk->K,wv->V) 1:norm(q_norm,Q->Q,16) "
                 "1:norm(k_norm,K->K,16) rope(Q) rope(K) 1:store 1:att 1:mm(ATT:wo->PROJ) add(X+=PROJ) "
                 "1:norm(ffn_norm,X->XN,64) 1:route 1:emm(XN:gate_exps->EGATE,up_exps->EUP) "
                 "swiglu(EGATE,EUP) 1:emm(EGATE:down_exps->EDOWN) sum(EDOWN->PROJ) add(X+=PROJ) ");

    /* every layer, in order */
    kipp_model m = fake("qwen3");
    rec_t r = {0};
    KT_CHECK(kipp_program_run(&m, &rec_kernels, &r) == 0, "run");
    KT_CHECK(strncmp(r.log, "0:norm(attn_norm", 16) == 0 && strstr(r.log, "1:norm(attn_norm") > strstr(r.log, "0:att"),
             "layers in order: %s", r.log);

    /* the fused path: offered before each op; what it takes is not run again */
    kipp_backend_kernels k = rec_kernels;
    k.fused = r_fused;
    rec_t f = {.fuse_store = 1};
    KT_CHECK(kipp_program_layer(&m, &k, &f, 0) == 0, "fused run");
    KT_CHECK(strstr(f.log, "0:FUSED(rope,store) 0:att") && !strstr(f.log, "rope(Q)") && !strstr(f.log, "0:store"),
             "fused ops consumed: %s", f.log);
    KT_CHECK(f.offered == (int)m.arch->n_ops - 1, "offered %d times for %zu ops (one call takes two)", f.offered,
             m.arch->n_ops);

    /* an operation's error code comes back at once; nothing after it runs */
    rec_t e = {.fail_at = 3};
    KT_CHECK(kipp_program_run(&m, &rec_kernels, &e) == 7 && e.calls == 3, "error stops the pass: rc after %d calls",
             e.calls);

    /* a backend without the expert operations refuses qwen3moe, naming what is missing */
    kipp_backend_kernels dense = rec_kernels;
    dense.moe_route = NULL;
    char err[256] = "";
    kipp_model moe = fake("qwen3moe");
    KT_CHECK(kipp_program_check(moe.arch, "toy", &dense, err, sizeof err) == KIPP_ERR_UNSUPPORTED &&
                 strstr(err, "'toy'") && strstr(err, "'qwen3moe'") && strstr(err, "ffn_moe") && strstr(err, "moe_route"),
             "refusal: %s", err);
    KT_CHECK(kipp_program_check(m.arch, "toy", &dense, err, sizeof err) == KIPP_OK, "qwen3 needs no expert op");
    dense.add_bias = NULL;
    kipp_model q2 = fake("qwen2");
    KT_CHECK(kipp_program_check(q2.arch, "toy", &dense, err, sizeof err) == KIPP_ERR_UNSUPPORTED &&
                 strstr(err, "'qwen2'") && strstr(err, "qkv_bias") && strstr(err, "add_bias"),
             "qwen2 without add_bias: %s", err);
    /* a table with every operation runs every architecture */
    for (size_t i = 0; kipp_arch_at(i); i++)
        KT_CHECK(kipp_program_check(kipp_arch_at(i), "toy", &rec_kernels, err, sizeof err) == KIPP_OK,
                 "%s refused by a full table: %s", kipp_arch_at(i)->name, err);
}
