/* program.c — the one driver of the layer program (ops.h): each op of an architecture's
 * program (arch.h) as the backend operations it is made of, in order. Every backend runs its
 * layers through here; what an op means is cpu-ref's implementation of these operations. */
#include "backend/ops.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int kipp_program_plain(void) {
    static int plain = -1;
    if (plain < 0) {
        const char *v = getenv("KIPP_PLAIN_OPS");
        plain = v && strcmp(v, "1") == 0;
    }
    return plain;
}

#define RUN(call)                 \
    do {                          \
        const int rc_ = (call);   \
        if (rc_) return rc_;      \
    } while (0)

static int run_op(const kipp_model *m, const kipp_backend_kernels *k, void *st, uint32_t l,
                  kipp_op op) {
    const uint32_t H = m->hp.n_embd, D = m->hp.head_dim;
    switch (op) {
    case KIPP_OP_ATTN_NORM: return k->rmsnorm(st, l, KIPP_W(attn_norm), KIPP_BUF_X, KIPP_BUF_XN, H);
    case KIPP_OP_QKV: {
        static const size_t w[3] = {KIPP_W(wq), KIPP_W(wk), KIPP_W(wv)};
        static const kipp_buf y[3] = {KIPP_BUF_Q, KIPP_BUF_K, KIPP_BUF_V};
        return k->matmul(st, l, 3, w, KIPP_BUF_XN, y);
    }
    case KIPP_OP_QKV_BIAS:
        RUN(k->add_bias(st, l, KIPP_W(bq), KIPP_BUF_Q));
        RUN(k->add_bias(st, l, KIPP_W(bk), KIPP_BUF_K));
        return k->add_bias(st, l, KIPP_W(bv), KIPP_BUF_V);
    case KIPP_OP_QK_NORM:
        RUN(k->rmsnorm(st, l, KIPP_W(q_norm), KIPP_BUF_Q, KIPP_BUF_Q, D));
        return k->rmsnorm(st, l, KIPP_W(k_norm), KIPP_BUF_K, KIPP_BUF_K, D);
    case KIPP_OP_ROPE:
        RUN(k->rope(st, KIPP_BUF_Q));
        return k->rope(st, KIPP_BUF_K);
    case KIPP_OP_KV_STORE: return k->kv_store(st, l);
    case KIPP_OP_ATTENTION: return k->attention(st, l);
    case KIPP_OP_ATTN_OUT: {
        static const size_t w[1] = {KIPP_W(wo)};
        static const kipp_buf y[1] = {KIPP_BUF_PROJ};
        RUN(k->matmul(st, l, 1, w, KIPP_BUF_ATT, y));
        return k->add(st, KIPP_BUF_X, KIPP_BUF_PROJ);
    }
    case KIPP_OP_FFN_NORM: return k->rmsnorm(st, l, KIPP_W(ffn_norm), KIPP_BUF_X, KIPP_BUF_XN, H);
    case KIPP_OP_FFN_SWIGLU: {
        static const size_t gu[2] = {KIPP_W(w_gate), KIPP_W(w_up)}, dn[1] = {KIPP_W(w_down)};
        static const kipp_buf gu_y[2] = {KIPP_BUF_GATE, KIPP_BUF_UP}, dn_y[1] = {KIPP_BUF_PROJ};
        RUN(k->matmul(st, l, 2, gu, KIPP_BUF_XN, gu_y));
        RUN(k->swiglu(st, KIPP_BUF_GATE, KIPP_BUF_UP));
        RUN(k->matmul(st, l, 1, dn, KIPP_BUF_GATE, dn_y));
        return k->add(st, KIPP_BUF_X, KIPP_BUF_PROJ);
    }
    case KIPP_OP_FFN_MOE: {
        static const size_t gu[2] = {KIPP_W(gate_exps), KIPP_W(up_exps)}, dn[1] = {KIPP_W(down_exps)};
        static const kipp_buf gu_y[2] = {KIPP_BUF_EGATE, KIPP_BUF_EUP}, dn_y[1] = {KIPP_BUF_EDOWN};
        RUN(k->moe_route(st, l));
        RUN(k->moe_matmul(st, l, 2, gu, KIPP_BUF_XN, gu_y));
        RUN(k->swiglu(st, KIPP_BUF_EGATE, KIPP_BUF_EUP));
        RUN(k->moe_matmul(st, l, 1, dn, KIPP_BUF_EGATE, dn_y));
        RUN(k->moe_sum(st, KIPP_BUF_EDOWN, KIPP_BUF_PROJ));
        return k->add(st, KIPP_BUF_X, KIPP_BUF_PROJ);
    }
    case KIPP_OP_COUNT: break;
    }
    return 0; /* not an op: kipp_program_missing refuses a program naming one */
}

/* The members of kipp_backend_kernels each program op calls. */
static int has_ops(const kipp_backend_kernels *k, kipp_op op, const char **missing) {
#define NEED(member)                  \
    if (!k->member) {                 \
        *missing = #member;           \
        return 0;                     \
    }
    switch (op) {
    case KIPP_OP_ATTN_NORM:
    case KIPP_OP_FFN_NORM:
    case KIPP_OP_QK_NORM: NEED(rmsnorm); return 1;
    case KIPP_OP_QKV: NEED(matmul); return 1;
    case KIPP_OP_QKV_BIAS: NEED(add_bias); return 1;
    case KIPP_OP_ROPE: NEED(rope); return 1;
    case KIPP_OP_KV_STORE: NEED(kv_store); return 1;
    case KIPP_OP_ATTENTION: NEED(attention); return 1;
    case KIPP_OP_ATTN_OUT: NEED(matmul); NEED(add); return 1;
    case KIPP_OP_FFN_SWIGLU: NEED(matmul); NEED(swiglu); NEED(add); return 1;
    case KIPP_OP_FFN_MOE:
        NEED(moe_route); NEED(moe_matmul); NEED(swiglu); NEED(moe_sum); NEED(add);
        return 1;
    case KIPP_OP_COUNT: break;
    }
    *missing = "(not an op)";
    return 0;
#undef NEED
}

kipp_status kipp_program_check(const kipp_arch *a, const char *backend, const kipp_backend_kernels *k,
                               char *err, size_t err_len) {
    const char *missing = NULL;
    for (size_t i = 0; i < a->n_ops; i++)
        if (!has_ops(k, a->program[i], &missing))
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "backend '%s' cannot run architecture '%s': its program's op '%s' needs "
                             "the operation '%s', which this backend does not implement",
                             backend, a->name, kipp_op_name(a->program[i]), missing);
    return KIPP_OK;
}

int kipp_program_layer(const kipp_model *m, const kipp_backend_kernels *k, void *st, uint32_t l) {
    const kipp_arch *a = m->arch;
    const int fuse = k->fused && !kipp_program_plain();
    for (size_t i = 0; i < a->n_ops;) {
        if (fuse) {
            int rc = 0;
            const size_t used = k->fused(st, l, a->program + i, a->n_ops - i, &rc);
            if (rc) return rc;
            if (used) {
                i += used;
                continue;
            }
        }
        RUN(run_op(m, k, st, l, a->program[i]));
        i++;
    }
    return 0;
}

int kipp_program_run(const kipp_model *m, const kipp_backend_kernels *k, void *st) {
    for (uint32_t l = 0; l < m->hp.n_layer; l++) RUN(kipp_program_layer(m, k, st, l));
    return 0;
}
