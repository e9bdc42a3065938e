/* think.c — the optional reasoning prefix of a constrained reply (think.h): a four-state gate
 * in front of the matcher. The token-level decision is what makes a reply that does not open
 * with <think> constrained from its first token, instead of waiting for a </think> that never
 * comes. */
#include "engine/think.h"

#include "model/model.h"
#include "tok/vocab.h"

#include <math.h>
#include <string.h>

void kipp_think_init_vocab(kipp_think *t, const kipp_think_params *p, const kipp_think_vocab *v) {
    memset(t, 0, sizeof *t);
    t->open = t->close = t->gap[0] = t->gap[1] = -1;
    t->state = KIPP_THINK_GRAMMAR;
    if (!p || !p->on || !v) return;
    t->open = v->open;
    t->close = v->close;
    t->gap[0] = v->gap[0];
    t->gap[1] = v->gap[1];
    t->n_eog = v->n_eog < sizeof t->eog / sizeof t->eog[0] ? v->n_eog : sizeof t->eog / sizeof t->eog[0];
    if (t->n_eog) memcpy(t->eog, v->eog, t->n_eog * sizeof *t->eog);
    t->max_reasoning = p->max_reasoning_tokens;
    if (t->close < 0) return; /* no way to end a reasoning: nothing may open one */
    if (p->in_prompt) t->state = KIPP_THINK_REASONING;
    else if (t->open >= 0) t->state = KIPP_THINK_START;
}

void kipp_think_init(kipp_think *t, const kipp_think_params *p, const kipp_model *m) {
    if (!p || !p->on || !m) {
        kipp_think_init_vocab(t, NULL, NULL);
        return;
    }
    const kipp_vocab *voc = m->vocab;
    kipp_think_vocab v = {
        .open = kipp_vocab_find(voc, "<think>", 7),
        .close = kipp_vocab_find(voc, "</think>", 8),
        /* byte-level BPE spells '\n' as U+010A ("\xc4\x8a") */
        .gap = {kipp_vocab_find(voc, "\xc4\x8a", 2), kipp_vocab_find(voc, "\xc4\x8a\xc4\x8a", 4)},
    };
    v.n_eog = kipp_vocab_eog_ids(voc, &v.eog);
    kipp_think_init_vocab(t, p, &v);
}

static int valid(int32_t id, uint32_t n) { return id >= 0 && (uint32_t)id < n; }

void kipp_think_apply(kipp_think *t, kipp_matcher *mt, float *logits, uint32_t n) {
    switch (t->state) {
    case KIPP_THINK_START: { /* the grammar's first tokens, and <think> while reasoning may happen */
        const float keep = valid(t->open, n) ? logits[t->open] : 0;
        if (mt) kipp_matcher_apply(mt, logits, n);
        if (mt && kipp_matcher_yielded(mt)) break; /* logits untouched: computed again */
        if (valid(t->open, n)) logits[t->open] = t->max_reasoning > 0 ? keep : -INFINITY;
        break;
    }
    case KIPP_THINK_REASONING:
        if (t->n_reasoning >= t->max_reasoning) { /* the bound: only </think> */
            const float keep = valid(t->close, n) ? logits[t->close] : 0;
            for (uint32_t i = 0; i < n; i++) logits[i] = -INFINITY;
            if (valid(t->close, n)) logits[t->close] = keep;
        } else if (mt) {
            for (uint32_t i = 0; i < t->n_eog; i++)
                if (valid(t->eog[i], n)) logits[t->eog[i]] = -INFINITY;
        }
        break;
    case KIPP_THINK_GAP: {
        if (!mt) break;
        float keep[2];
        for (int i = 0; i < 2; i++) keep[i] = valid(t->gap[i], n) ? logits[t->gap[i]] : 0;
        kipp_matcher_apply(mt, logits, n);
        if (kipp_matcher_yielded(mt)) break;
        if (t->n_gap < 2)
            for (int i = 0; i < 2; i++)
                if (valid(t->gap[i], n)) logits[t->gap[i]] = keep[i];
        break;
    }
    case KIPP_THINK_GRAMMAR:
        if (mt) kipp_matcher_apply(mt, logits, n);
        break;
    }
}

static int is_eog(const kipp_think *t, int32_t tok) {
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == tok) return 1;
    return 0;
}

int kipp_think_accept(kipp_think *t, kipp_matcher *mt, int32_t tok) {
    switch (t->state) {
    case KIPP_THINK_START:
        if (tok == t->open && t->max_reasoning > 0) {
            t->state = KIPP_THINK_REASONING;
            return 1;
        }
        if (mt && !kipp_matcher_accept_token(mt, tok)) return 0;
        t->state = KIPP_THINK_GRAMMAR;
        return 1;
    case KIPP_THINK_REASONING:
        if (tok == t->close) {
            t->state = KIPP_THINK_GAP;
            return 1;
        }
        if (t->n_reasoning >= t->max_reasoning || (mt && is_eog(t, tok))) return 0;
        t->n_reasoning++;
        return 1;
    case KIPP_THINK_GAP:
        if (!mt || kipp_matcher_accept_token(mt, tok)) {
            t->state = KIPP_THINK_GRAMMAR;
            return 1;
        }
        if (kipp_matcher_yielded(mt)) return 0; /* undecided: asked again */
        if (t->n_gap < 2 && tok >= 0 && (tok == t->gap[0] || tok == t->gap[1])) {
            t->n_gap++;
            return 1;
        }
        return 0;
    case KIPP_THINK_GRAMMAR:
        return !mt || kipp_matcher_accept_token(mt, tok);
    }
    return 0;
}

int kipp_think_in_reasoning(const kipp_think *t, uint32_t *n_tokens) {
    if (n_tokens) *n_tokens = t->n_reasoning;
    return t->state == KIPP_THINK_REASONING;
}

int kipp_think_masks(const kipp_think *t) { return t->state != KIPP_THINK_GRAMMAR; }
